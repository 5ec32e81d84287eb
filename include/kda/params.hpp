// kda/params.hpp: the trivially copyable parameters a backend's kernel receives.
//
// Built once per call from validated inter_solve_args. Pointers are typed; strides are the
// 64-bit element strides of the batch, token and head axes (the innermost axis is contiguous,
// except for beta, whose head stride is stored too).
#pragma once

#include <cstdint>
#include <type_traits>

#include "args.hpp"
#include "tile_config.hpp"
#include "varlen.hpp"

namespace kda {

struct axis_strides {
    std::int64_t b = 0, t = 0, h = 0;
    KDA_HOST_DEVICE std::int64_t at(std::int64_t ib, std::int64_t it, std::int64_t ih) const { return ib * b + it * t + ih * h; }
};

template <class X>
struct inter_solve_params {
    using acc = acc_t<X>;
    const X* q = nullptr;
    const X* k = nullptr;
    const acc* g = nullptr;
    const void* beta = nullptr;  // X, or fp32 when beta_is_fp32
    bool beta_is_fp32 = false;
    const acc* Akkd = nullptr;
    X* Aqk = nullptr;
    X* Akk = nullptr;
    axis_strides q_s, k_s, g_s, beta_s, Akkd_s, Aqk_s, Akk_s;
    std::int64_t H = 1, HV = 1, K = 0;
    acc scale = 1;
    chunk_map chunks;

    /// Work items: chunks x value heads.
    KDA_HOST_DEVICE std::int64_t num_items() const { return chunks.num_chunks * HV; }
};
static_assert(std::is_trivially_copyable_v<inter_solve_params<float>>, "params must be trivially copyable for kernel launch");

/// The optional WY outputs of the whole intra stage (kda/intra.hpp): w = Akk (beta k 2^g),
/// u = Akk (beta v), kg = k 2^(g_last - g), qg = q 2^g; a null pointer: not requested.
template <class X>
struct wy_params {
    const X* v = nullptr;
    X* w = nullptr;
    X* u = nullptr;
    X* kg = nullptr;
    X* qg = nullptr;
    axis_strides v_s, w_s, u_s, kg_s, qg_s;
    std::int64_t V = 0;
    [[nodiscard]] KDA_HOST_DEVICE bool any() const { return w != nullptr || u != nullptr || kg != nullptr || qg != nullptr; }
};
static_assert(std::is_trivially_copyable_v<wy_params<float>>, "params must be trivially copyable for kernel launch");

namespace detail {
template <class Ptr>
axis_strides strides3(const basic_tensor_ref<Ptr>& t) {
    return {t.stride[0], t.stride[1], t.stride[2]};
}
}  // namespace detail

/// The chunk axis of validated arguments: dense rows of B batch rows, the caller's chunk_indices,
/// or (varlen without them) the slots of the cu_seqlens search (varlen.hpp). Every backend and
/// every stage builds its chunk axis here.
inline chunk_grid make_chunk_grid(const tensor_ref& cu_seqlens, const tensor_ref& chunk_indices, std::int64_t B, std::int64_t T, int BT) {
    chunk_grid r;
    r.map.BT = BT;
    r.map.T = T;
    r.map.chunks_per_row = (T + BT - 1) / BT;
    if (cu_seqlens.data == nullptr) {
        r.map.num_chunks = B * r.map.chunks_per_row;
        return r;
    }
    r.map.cu_seqlens = cu_seqlens.data;
    r.map.cu_is64 = cu_seqlens.type == dtype::i64;
    r.num_sequences = cu_seqlens.shape[0] - 1;
    if (chunk_indices.data != nullptr || chunk_indices.rank == 2) {
        r.map.chunk_indices = chunk_indices.data;
        r.map.ci_is64 = chunk_indices.type == dtype::i64;
        r.map.num_chunks = chunk_indices.shape[0];
    } else {
        r.map.num_chunks = varlen_slots(T, r.num_sequences, BT);
    }
    return r;
}

/// The chunk axis of an inter-solve or intra call.
inline chunk_grid make_chunk_grid(const inter_solve_problem& p, const inter_solve_args& a) {
    return make_chunk_grid(a.cu_seqlens, a.chunk_indices, p.B, p.T, p.BT);
}

/// Lowers validated arguments to params, with the call's chunk axis.
template <class X>
inter_solve_params<X> make_params(const inter_solve_problem& p, const inter_solve_args& a, const chunk_grid& cg) {
    inter_solve_params<X> r;
    using acc = acc_t<X>;
    r.q = static_cast<const X*>(a.q.data);
    r.k = static_cast<const X*>(a.k.data);
    r.g = static_cast<const acc*>(a.g.data);
    r.beta = a.beta.data;
    r.beta_is_fp32 = a.beta.type == dtype::fp32;
    r.Akkd = static_cast<const acc*>(a.Akkd.data);
    r.Aqk = static_cast<X*>(a.Aqk.data);
    r.Akk = static_cast<X*>(a.Akk.data);
    r.q_s = detail::strides3(a.q);
    r.k_s = detail::strides3(a.k);
    r.g_s = detail::strides3(a.g);
    r.beta_s = detail::strides3(a.beta);
    r.Akkd_s = detail::strides3(a.Akkd);
    r.Aqk_s = detail::strides3(a.Aqk);
    r.Akk_s = detail::strides3(a.Akk);
    r.H = p.H;
    r.HV = p.HV;
    r.K = p.K;
    r.scale = static_cast<acc>(p.scale);
    r.chunks = cg.map;
    return r;
}

/// Lowers validated WY tensors (v, w, u, kg, qg: absent ones stay null) to params; an empty
/// output (no elements) counts as absent.
template <class X, class Args>
wy_params<X> make_wy_params(const inter_solve_problem& p, const Args& a) {
    wy_params<X> r;
    auto out = [](const mutable_tensor_ref& t, X*& ptr, axis_strides& s) {
        if (t.empty_view() || t.numel() == 0) return;
        ptr = static_cast<X*>(t.data);
        s = detail::strides3(t);
    };
    out(a.w, r.w, r.w_s);
    out(a.u, r.u, r.u_s);
    out(a.kg, r.kg, r.kg_s);
    out(a.qg, r.qg, r.qg_s);
    if (r.u != nullptr) {
        r.v = static_cast<const X*>(a.v.data);
        r.v_s = detail::strides3(a.v);
        r.V = p.V;
    }
    return r;
}

}  // namespace kda
