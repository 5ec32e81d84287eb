// kda/cuda/launch.cuh: host side of the CUDA backend: lowers validated arguments to kernel params
// and launches one kernel on the backend's stream (no allocation, no synchronisation).
//
// Tuning choices (K slice, pipeline depth, occupancy) live in tuning.hpp.
// Grid: min(items, 2^31 - 1) blocks of 128 threads over items = chunks x HV (a grid-stride loop
// covers the rest). Varlen without chunk_indices: the kernel finds each work slot's sequence by a
// binary search over cu_seqlens (varlen_search.hpp), floor(T / BT) + N slots in all.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "../args.hpp"
#include "../params.hpp"
#include "../tensor.hpp"
#include "backend.hpp"
#include "kernel.cuh"
#include "varlen_search.hpp"

namespace kda::cuda {

/// Whether the rows of `t` may be accessed as 16-byte vectors at element offsets that are multiples
/// of the vector width: a 16-byte aligned base and 16-byte multiples for the strides of every axis
/// with more than one index.
inline bool rows_vector_aligned(const tensor_ref& t) {
    const std::int64_t es = size_of(t.type);
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
    for (int d = 0; d < t.rank - 1; ++d)
        if (t.shape[d] > 1 && (t.stride[d] * es) % 16 != 0) return false;
    return true;
}

/// Whether the kernel may read rows of `t` as 16-byte vectors: aligned rows, and K a multiple of
/// the vector width (so that no vector straddles the end of a row).
inline bool vector_loads_ok(const tensor_ref& t, std::int64_t K) { return K % (16 / size_of(t.type)) == 0 && rows_vector_aligned(t); }

/// Whether the rows of output `t` take stores of two adjacent elements at even columns: a base
/// aligned to 2 elements and even strides for every axis with more than one index.
inline bool pair_stores_ok(const tensor_ref& t) {
    const std::int64_t es = size_of(t.type);
    if (reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(2 * es) != 0) return false;
    for (int d = 0; d < t.rank - 1; ++d)
        if (t.shape[d] > 1 && t.stride[d] % 2 != 0) return false;
    return true;
}

/// Launches the kernel for validated arguments (called by chunk_kda_inter_solve<cuda_backend>::launch).
template <class X, class Cfg, class Mode>
void launch_inter_solve(const cuda_backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
    using traits = kernel_traits<X, Cfg>;
    const void* ci = nullptr;
    bool ci64 = true;
    std::int64_t num_chunks = 0;
    std::int64_t num_sequences = 0;
    if (a.cu_seqlens.data != nullptr) {
        num_sequences = a.cu_seqlens.shape[0] - 1;
        if (a.chunk_indices.data != nullptr || a.chunk_indices.rank == 2) {
            ci = a.chunk_indices.data;
            ci64 = a.chunk_indices.type == dtype::i64;
            num_chunks = a.chunk_indices.shape[0];
        } else {
            num_chunks = varlen_slots(p.T, num_sequences, Cfg::BT);
        }
    }
    kernel_params<X> kp;
    kp.p = make_params<X>(p, a, ci, ci64, num_chunks);
    kp.num_sequences = num_sequences;
    kp.group = p.HV / p.H;
    kp.vec_q = vector_loads_ok(a.q, p.K);
    kp.vec_k = vector_loads_ok(a.k, p.K);
    kp.vec_g = vector_loads_ok(a.g, p.K);
    kp.pair_out = pair_stores_ok(as_const(a.Aqk)) && pair_stores_ok(as_const(a.Akk));
    kp.vec_out = rows_vector_aligned(as_const(a.Aqk)) && rows_vector_aligned(as_const(a.Akk));
    kp.vec_akkd = rows_vector_aligned(a.Akkd);
    const std::int64_t items = kp.p.num_items();
    if (items == 0) return;

    auto* kernel = &inter_solve_kernel<X, Cfg, Mode>;
    constexpr int smem = traits::smem_bytes;
    if constexpr (smem > 48 * 1024) KDA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const auto grid = static_cast<unsigned>(items < INT_MAX ? items : INT_MAX);
    kernel<<<grid, traits::threads, smem, be.stream>>>(kp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kda::cuda
