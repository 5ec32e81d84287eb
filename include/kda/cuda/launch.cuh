// kda/cuda/launch.cuh: host side of the CUDA backend: lowers validated arguments to kernel params
// and launches one kernel on the backend's stream (no allocation, no synchronisation).
//
// Tuning choices (K slice, pipeline depth, warps, occupancy) live in tuning.hpp.
// Grid: min(items, 2^31 - 1) blocks over items = chunks x HV (a grid-stride loop covers the rest).
// Varlen without chunk_indices: the kernel finds each work slot's sequence by a binary search over
// cu_seqlens (varlen_search.hpp), floor(T / BT) + N slots in all.
//
// Staging: on a device of compute capability 9.0 or later (and unless cuda_backend::use_tma is
// false), q, k, g and Akkd go through the tensor copy engine when each of them can be described by
// a tensor map (make_tma_maps: a 16-byte aligned base, 16-byte multiples for the strides of the
// batch, token and head axes, T below 2^31); the maps are encoded on the host for every launch
// (cuTensorMapEncodeTiled, reached through the runtime's driver entry points: no link against
// libcuda) and travel in the kernel's parameters. Otherwise every thread stages its share with
// 16-byte cp.async copies (vector_loads_ok) or element copies.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
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

/// The driver's tensor-map encoder, found through the runtime; null where the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

/// Encodes a [B, T, heads, D] tensor (D contiguous) as a 4-d tensor map (innermost first: D,
/// heads, T, B) whose boxes are [box_rows tokens, box_d columns] of one head: zero-filled past T
/// and past D. False where the copy engine cannot describe the tensor (then nothing is encoded).
inline bool encode_rows(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap& map, const tensor_ref& t, int box_d, int box_rows) {
    if (enc == nullptr || t.data == nullptr || t.rank != 4 || t.stride[3] != 1) return false;
    CUtensorMapDataType type;
    switch (t.type) {
        case dtype::bf16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
        case dtype::fp16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
        case dtype::fp32: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
        default: return false;
    }
    const std::int64_t es = size_of(t.type);
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
    for (int d = 0; d < 4; ++d)
        if (t.shape[d] < 1 || t.shape[d] > INT_MAX) return false;  // box coordinates are 32-bit
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.shape[3]), static_cast<cuuint64_t>(t.shape[2]), static_cast<cuuint64_t>(t.shape[1]),
                                static_cast<cuuint64_t>(t.shape[0])};
    cuuint64_t strides[3];
    std::int64_t packed = t.shape[3] * es;  // what a packed layout would use for an axis of one index
    for (int i = 0; i < 3; ++i) {
        const int axis = 2 - i;  // heads, T, B
        std::int64_t s = t.stride[axis] * es;
        if (t.shape[axis] == 1) s = (packed + 15) / 16 * 16;  // never stepped along: any legal value
        if (s <= 0 || s % 16 != 0 || s >= (std::int64_t{1} << 40)) return false;
        strides[i] = static_cast<cuuint64_t>(s);
        packed = s * t.shape[axis];
    }
    const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_d), 1, static_cast<cuuint32_t>(box_rows), 1};
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    return enc(&map, type, 4, const_cast<void*>(t.data), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/// Whether the current device has the tensor copy engine (compute capability 9.0 or later).
inline bool device_supports_tma() {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major >= 9;
}

/// Fills kp.tm and sets kp.tma where the copy engine can stage every tensor the kernel reads in
/// slices (q, k, g; Akkd too unless `intra`).
template <class X, class Traits>
void make_tma_maps(kernel_params<X>& kp, const cuda_backend& be, const inter_solve_args& a, bool intra) {
    kp.tma = false;
    if (!be.use_tma || !device_supports_tma()) return;
    const auto enc = tensor_map_encoder();
    bool ok = encode_rows(enc, kp.tm.q, a.q, Traits::BK, Traits::BT) && encode_rows(enc, kp.tm.k, a.k, Traits::BK, Traits::BT) &&
              encode_rows(enc, kp.tm.g, a.g, Traits::BK, Traits::BT);
    if (!intra) ok = ok && encode_rows(enc, kp.tm.akkd, a.Akkd, Traits::BC, Traits::BT);
    kp.tma = ok;
}

/// Launches the kernel for validated arguments: the inter-solve step (Intra = false; called by
/// chunk_kda_inter_solve<cuda_backend>::launch) or the fused intra stage (Intra = true; a.Akkd is
/// not read).
template <class X, class Cfg, class Mode, bool Intra = false>
void launch_inter_solve(const cuda_backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
    using traits = kernel_traits<X, Cfg, Intra, Mode::solve_precision>;
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
    kp.vec_akkd = !Intra && rows_vector_aligned(a.Akkd);
    const std::int64_t items = kp.p.num_items();
    if (items == 0) return;
    make_tma_maps<X, traits>(kp, be, a, Intra);

    auto* kernel = &inter_solve_kernel<X, Cfg, Mode, Intra>;
    constexpr int smem = traits::smem_bytes;
    if constexpr (smem > 48 * 1024) KDA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const auto grid = static_cast<unsigned>(items < INT_MAX ? items : INT_MAX);
    kernel<<<grid, traits::threads, smem, be.stream>>>(kp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kda::cuda
