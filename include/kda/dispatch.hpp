// kda/dispatch.hpp: runtime values -> template arguments, with C++20 templated lambdas.
//
// Axes: element type (from the backend's own list), safe gate, precision (folded by the backend
// where it cannot matter), BT and BK. A value the backend does not support is a kda::error, never a
// compile failure.
#pragma once

#include <type_traits>

#include "config.hpp"
#include "tile_config.hpp"
#include "types.hpp"

namespace kda {

template <class... Ts>
struct type_list {};

/// A list of compile-time values (a backend's K slices).
template <int... V>
struct int_list {};

namespace detail {

template <class... Ts, class F>
void dispatch_type(type_list<Ts...>, dtype t, const char* backend, F&& f) {
    bool hit = false;
    ((t == dtype_of_v<Ts> ? (f.template operator()<Ts>(), hit = true) : false), ...);
    KDA_CHECK(hit, "kda: dtype " << name(t) << " is not supported by the " << backend << " backend");
}

template <class F>
void dispatch_bool(bool v, F&& f) {
    if (v)
        f(std::true_type{});
    else
        f(std::false_type{});
}

template <class F>
void dispatch_precision(precision p, F&& f) {
    if (p == precision::tf32)
        f.template operator()<precision::tf32>();
    else
        f.template operator()<precision::fp32>();
}

template <class F>
void dispatch_bt(int BT, F&& f) {
    switch (BT) {
        case 32: f.template operator()<32>(); return;
        case 64: f.template operator()<64>(); return;
        default: KDA_CHECK(false, "kda::inter_solve: argument 'BT': expected 32 or 64, got " << BT);
    }
}

/// Calls f.template operator()<BK>() for the runtime BK, one of the backend's K slices.
template <int... V, class F>
void dispatch_bk(int_list<V...>, int BK, F&& f) {
    bool hit = false;
    ((BK == V ? (f.template operator()<V>(), hit = true) : false), ...);
    KDA_CHECK(hit, "kda::inter_solve: BK " << BK << " is not one of the backend's K slices");
}

/// Calls Policy::template launch<X, variant<SafeGate, P>>(be, p, a) for the call's runtime modes.
/// Backend::effective_precision folds precisions the backend computes identically.
template <class Policy, class Backend, class Problem, class Args>
void dispatch_modes(const Backend& be, const Problem& p, const Args& a) {
    dispatch_type(typename Backend::element_types{}, a.q.type, Backend::caps().name, [&]<class X>() {
        dispatch_bool(p.safe_gate, [&](auto sg) {
            dispatch_precision(Backend::effective_precision(p.solve_precision), [&]<precision P>() {
                Policy::template launch<X, variant<decltype(sg)::value, P>>(be, p, a);
            });
        });
    });
}

}  // namespace detail
}  // namespace kda
