// kda/tensor.hpp: non-owning tensor views.
//
// A view is a pointer, a runtime dtype, and up to four 64-bit extents and strides (strides are
// counted in elements, mdspan style). Any stride is honoured on the token and head axes, so q, k and
// beta may be slices of a fused projection; the innermost axis of q, k, g, Akkd, Aqk and Akk must be
// contiguous (stride 1), which validation checks.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

#include "config.hpp"
#include "types.hpp"

namespace kda {

inline constexpr int max_rank = 4;
using extents_t = std::array<std::int64_t, max_rank>;

/// Type-erased, non-owning view. Ptr is `const void*` (inputs) or `void*` (outputs).
template <class Ptr>
struct basic_tensor_ref {
    Ptr data = nullptr;
    dtype type = dtype::fp32;
    int rank = 0;
    extents_t shape{};   // extents, outermost first
    extents_t stride{};  // in elements

    [[nodiscard]] bool empty_view() const { return rank == 0 && data == nullptr; }
    [[nodiscard]] std::int64_t numel() const {
        std::int64_t n = 1;
        for (int d = 0; d < rank; ++d) n *= shape[d];
        return n;
    }
};

using tensor_ref = basic_tensor_ref<const void*>;
using mutable_tensor_ref = basic_tensor_ref<void*>;

/// Row-major (contiguous) strides for `shape`.
inline extents_t contiguous_strides(const extents_t& shape, int rank) {
    extents_t s{};
    std::int64_t acc = 1;
    for (int d = rank - 1; d >= 0; --d) {
        s[d] = acc;
        acc *= shape[d];
    }
    return s;
}

namespace detail {
template <class Ptr, class T>
basic_tensor_ref<Ptr> make_ref(T* p, dtype t, std::initializer_list<std::int64_t> shape,
                               std::initializer_list<std::int64_t> stride) {
    KDA_CHECK(shape.size() <= static_cast<std::size_t>(max_rank), "tensor rank " << shape.size() << " exceeds " << max_rank);
    KDA_CHECK(stride.size() == 0 || stride.size() == shape.size(),
              "tensor has " << shape.size() << " extents but " << stride.size() << " strides");
    basic_tensor_ref<Ptr> r;
    r.data = p;
    r.type = t;
    r.rank = static_cast<int>(shape.size());
    int d = 0;
    for (auto e : shape) r.shape[d++] = e;
    if (stride.size() == 0) {
        r.stride = contiguous_strides(r.shape, r.rank);
    } else {
        d = 0;
        for (auto s : stride) r.stride[d++] = s;
    }
    return r;
}
}  // namespace detail

/// View of a read-only tensor of storage type T (float, double, kda::bf16_t, ... or any type with a
/// dtype_of specialisation). Strides default to contiguous.
template <class T>
tensor_ref make_tensor(const T* p, std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> stride = {}) {
    return detail::make_ref<const void*>(p, dtype_of_v<T>, shape, stride);
}

/// View of a writable tensor.
template <class T>
mutable_tensor_ref make_mutable_tensor(T* p, std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> stride = {}) {
    return detail::make_ref<void*>(p, dtype_of_v<T>, shape, stride);
}

/// Read-only view of a writable one.
inline tensor_ref as_const(const mutable_tensor_ref& m) {
    tensor_ref r;
    r.data = m.data;
    r.type = m.type;
    r.rank = m.rank;
    r.shape = m.shape;
    r.stride = m.stride;
    return r;
}

namespace detail {
/// "<open>v0, v1, ...<close>" for the first n values.
inline std::string describe_list(const std::int64_t* v, int n, char open, char close) {
    std::ostringstream os;
    os << open;
    for (int d = 0; d < n; ++d) os << (d ? ", " : "") << v[d];
    os << close;
    return os.str();
}
}  // namespace detail

/// "[s0, s1, ...]": the shape of t, for messages.
template <class Ptr>
std::string describe_shape(const basic_tensor_ref<Ptr>& t) {
    return detail::describe_list(t.shape.data(), t.rank, '[', ']');
}

/// "(s0, s1, ...)": the element strides of t, for messages.
template <class Ptr>
std::string describe_strides(const basic_tensor_ref<Ptr>& t) {
    return detail::describe_list(t.stride.data(), t.rank, '(', ')');
}

}  // namespace kda
