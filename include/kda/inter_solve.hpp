// kda/inter_solve.hpp: the policy template and the runtime entry point.
//
//   kda::chunk_kda_inter_solve<Backend, BT, BC, BK>::run(backend, problem, args)
//       one compile-time tiling; writes Aqk's off-diagonal blocks (si > sj) and the lower block
//       triangle (si >= sj, columns inside the chunk) of Akk = (I + L)^-1, and nothing else.
//   kda::inter_solve(backend, problem, args)
//       the same for the runtime BT, with the backend's K slice BK = Backend::default_bk(K).
//
// Both validate every argument first (kda::can_implement + the backend's own checks) and throw
// kda::error naming the argument; nothing is written on failure. T == 0 is a no-op.
#pragma once

#include "args.hpp"
#include "dispatch.hpp"
#include "tile_config.hpp"
#include "validate.hpp"

namespace kda {

namespace detail {
template <class>
inline constexpr bool always_false = false;

template <class Backend>
void validate_or_throw(const Backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
    const status st = can_implement(p, a, Backend::caps());
    if (!st) throw kda::error(st.message);
    be.check(p, a);
}
}  // namespace detail

/// Primary template: only backends specialise it.
template <class Backend, int BT, int BC, int BK>
struct chunk_kda_inter_solve {
    static_assert(detail::always_false<Backend>,
                  "kda::chunk_kda_inter_solve has no implementation for this Backend: include <kda/cpu/inter_solve.hpp> "
                  "for kda::cpu_backend, or <kda/cuda/inter_solve.cuh> (compiled by nvcc) for kda::cuda_backend.");
};

namespace detail {
/// Shared body of every specialisation's run(): check BT/BC, validate, dispatch the modes.
template <class Policy, class Backend, int BT, int BC>
void run_policy(const Backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
    KDA_CHECK(p.BT == BT, "kda::chunk_kda_inter_solve: argument 'BT': this instantiation has BT = " << BT << ", the problem says " << p.BT);
    KDA_CHECK(p.BC == BC, "kda::chunk_kda_inter_solve: argument 'BC': this instantiation has BC = " << BC << ", the problem says " << p.BC);
    validate_or_throw(be, p, a);
    if (p.T == 0) return;
    dispatch_modes<Policy>(be, p, a);
}
}  // namespace detail

/// Runtime entry point: maps BT and K onto an instantiation of chunk_kda_inter_solve.
template <class Backend>
void inter_solve(const Backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
    detail::validate_or_throw(be, p, a);  // before any dispatch, so bad BT/K read as argument errors
    if (p.T == 0) return;
    detail::dispatch_bt(p.BT, [&]<int BT>() {
        detail::dispatch_bk(typename Backend::k_slices{}, Backend::default_bk(p.K), [&]<int BK>() {
            using policy = chunk_kda_inter_solve<Backend, BT, 16, BK>;
            detail::dispatch_modes<policy>(be, p, a);
        });
    });
}

}  // namespace kda
