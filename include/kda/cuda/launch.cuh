// kda/cuda/launch.cuh: the CUDA backend's launchers (nvcc only): each lowers validated arguments
// to its kernel's params and launches one kernel on the backend's stream (no allocation, no
// synchronisation):
//   launch_chunk_kernel   the chunk kernel (phases.cuh) for one step (traits.cuh)
//   launch_diag           the diagonal-block producer (intra_kernel.cuh)
//   launch_cumsum         the gate cumsum (intra_kernel.cuh)
//
// Tuning choices (pipeline depth, warps, occupancy, ...) live in tuning.hpp.
// Grid: min(items, 2^31 - 1) blocks over the work items (a grid-stride loop covers the rest).
// The chunk axis is make_chunk_grid's (params.hpp): varlen without chunk_indices, the kernel finds
// each work slot's sequence by a binary search over cu_seqlens (varlen.hpp), floor(T / BT) + N
// slots in all.
//
// Staging: on a device of compute capability 9.0 or later (and unless cuda_backend::use_tma is
// false), q, k, g and Akkd go through the tensor copy engine when each of them can be described by
// a tensor map (make_tma_maps: a 16-byte aligned base, 16-byte multiples for the strides of the
// batch, token and head axes, T below 2^31), or, for rows whose length is no multiple of 16 bytes,
// by maps that join each tensor's heads into one row axis (encode_joined, joined_qk_agree:
// 16-byte multiples only for the token and batch strides, e.g. any contiguous layout with a
// multiple of 8 heads; g by per-thread copies beside them where its boxes would start off a 16-byte
// boundary, joined_g_agrees); the maps are encoded on the host for every launch
// (cuTensorMapEncodeTiled, reached through the runtime's driver entry points: no link against
// libcuda) and travel in the kernel's parameters. Otherwise every thread stages its share with
// cp.async copies of 16, 8 or 4 bytes, as the rows' alignment allows (per_thread_copy_bytes), or,
// for 16-bit rows aligned to 2 bytes only, with runs of 8 elements from aligned 4-byte words.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "../args.hpp"
#include "../intra.hpp"
#include "../params.hpp"
#include "../tensor.hpp"
#include "backend.hpp"
#include "intra_kernel.cuh"
#include "phases.cuh"
#include "traits.cuh"

namespace kda::cuda {

/// Whether the rows of `t` may be accessed as `bytes`-wide pieces at element offsets that are
/// multiples of the piece: a base aligned to `bytes` and multiples of `bytes` for the strides of
/// every axis with more than one index.
inline bool rows_aligned(const tensor_ref& t, std::int64_t bytes) {
    const std::int64_t es = size_of(t.type);
    if (reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(bytes) != 0) return false;
    for (int d = 0; d < t.rank - 1; ++d)
        if (t.shape[d] > 1 && (t.stride[d] * es) % bytes != 0) return false;
    return true;
}
inline bool rows_vector_aligned(const tensor_ref& t) { return rows_aligned(t, 16); }

/// Whether the kernel may read rows of `t` as 16-byte vectors: aligned rows, and K a multiple of
/// the vector width (so that no vector straddles the end of a row).
inline bool vector_loads_ok(const tensor_ref& t, std::int64_t K) { return K % (16 / size_of(t.type)) == 0 && rows_vector_aligned(t); }

/// The width in bytes of the per-thread copies that stage `t`'s rows (no tensor copies): 16 where
/// vector_loads_ok, else 8 or 4 where the rows are aligned to it (such a copy reads only the bytes
/// inside K, so K need not be a multiple of it), else 2 for 16-bit rows (runs of 8 elements staged
/// from aligned 4-byte words: phases.cuh, stage_words). bf16 K = 100 (200-byte rows) takes 8,
/// K = 37 (74-byte rows) 2, and its fp32 g (148-byte rows) 4.
inline int per_thread_copy_bytes(const tensor_ref& t, std::int64_t K) {
    if (vector_loads_ok(t, K)) return 16;
    for (int w : {8, 4})
        if (size_of(t.type) <= w && rows_aligned(t, w)) return w;
    return 2;  // 16-bit data: elements are 2-byte aligned (validated); 4-byte data is always 4-byte aligned
}

/// Sets the kernel's staging widths of q, k and g.
template <class KP>
void set_copy_widths(KP& kp, const inter_solve_args& a, std::int64_t K) {
    const auto set = [K](const tensor_ref& t, bool& vec, std::uint8_t& narrow) {
        const int w = per_thread_copy_bytes(t, K);
        vec = w == 16;
        narrow = static_cast<std::uint8_t>(vec ? 0 : w);
    };
    set(a.q, kp.vec_q, kp.narrow_q);
    set(a.k, kp.vec_k, kp.narrow_k);
    set(a.g, kp.vec_g, kp.narrow_g);
}

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

/// The copy engine's element type of a [B, T, heads, D] tensor with D contiguous; false for
/// anything else.
inline bool map_type(const tensor_ref& t, CUtensorMapDataType& type) {
    if (t.data == nullptr || t.rank != 4 || t.stride[3] != 1) return false;
    switch (t.type) {
        case dtype::bf16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; return true;
        case dtype::fp16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; return true;
        case dtype::fp32: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; return true;
        default: return false;
    }
}

/// The byte strides of axes `outer` down to 0 of `t` (written innermost first) for a tensor map
/// whose innermost dimension spans `inner_bytes`: 16-byte multiples below 2^40 (an axis of one
/// index is never stepped along and takes the packed value). False where one is not.
inline bool map_strides(const tensor_ref& t, int outer, std::int64_t inner_bytes, cuuint64_t* out) {
    const std::int64_t es = size_of(t.type);
    std::int64_t packed = inner_bytes;  // what a packed layout would use for an axis of one index
    for (int axis = outer; axis >= 0; --axis) {
        std::int64_t s = t.stride[axis] * es;
        if (t.shape[axis] == 1) s = (packed + 15) / 16 * 16;
        if (s <= 0 || s % 16 != 0 || s >= (std::int64_t{1} << 40)) return false;
        *out++ = static_cast<cuuint64_t>(s);
        packed = s * t.shape[axis];
    }
    return true;
}

/// cuTensorMapEncodeTiled for kda's maps: unit element strides, no interleave or swizzle, zero fill.
inline bool encode_tiled(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap& map, CUtensorMapDataType type, cuuint32_t rank, const void* data,
                         const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box) {
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    return enc(&map, type, rank, const_cast<void*>(data), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/// Encodes a [B, T, heads, D] tensor (D contiguous) as a 4-d tensor map (innermost first: D,
/// heads, T, B) whose boxes are [box_rows tokens, box_d columns] of one head: zero-filled past T
/// and past D. False where the copy engine cannot describe the tensor (then nothing is encoded).
inline bool encode_rows(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap& map, const tensor_ref& t, int box_d, int box_rows) {
    CUtensorMapDataType type;
    if (enc == nullptr || !map_type(t, type)) return false;
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
    for (int d = 0; d < 4; ++d)
        if (t.shape[d] < 1 || t.shape[d] > INT_MAX) return false;  // box coordinates are 32-bit
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.shape[3]), static_cast<cuuint64_t>(t.shape[2]), static_cast<cuuint64_t>(t.shape[1]),
                                static_cast<cuuint64_t>(t.shape[0])};
    cuuint64_t strides[3];  // heads, T, B
    if (!map_strides(t, 2, t.shape[3] * size_of(t.type), strides)) return false;
    const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_d), 1, static_cast<cuuint32_t>(box_rows), 1};
    return encode_tiled(enc, map, type, 4, t.data, dims, strides, box);
}

/// The stride between a tensor's heads as a map that joins them sees it (a single head: its row).
inline std::int64_t head_stride(const tensor_ref& t) { return t.shape[2] > 1 ? t.stride[2] : t.shape[3]; }

/// Encodes a [B, T, heads, D] tensor (D contiguous, heads a fixed stride s >= D apart) as a 3-d
/// tensor map that joins the heads into one row axis (innermost first: (heads - 1) s + D columns,
/// T, B), for rows that no 4-d map describes (D elements, not a multiple of 16 bytes): head h's
/// columns start at column h s. Only the base and the token and batch strides need 16-byte
/// multiples. The copy engine takes only boxes that start on a 16-byte boundary, so the kernel
/// starts head h's boxes `shift` columns early (kernel_params::joined). Boxes are [box_rows
/// tokens, box_d columns], zero-filled past T and past the last head's columns. False where this
/// map cannot describe the tensor either (then nothing is encoded).
inline bool encode_joined(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap& map, const tensor_ref& t, int box_d, int box_rows) {
    CUtensorMapDataType type;
    if (enc == nullptr || !map_type(t, type)) return false;
    const std::int64_t D = t.shape[3], heads = t.shape[2], hs = head_stride(t);
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0 || D < 1 || heads < 1 || hs < D) return false;
    const std::int64_t cols = (heads - 1) * hs + D;
    // box coordinates are 32-bit: the largest column is below cols + box_d
    if (cols > INT_MAX - box_d || t.shape[1] < 1 || t.shape[1] > INT_MAX || t.shape[0] < 1 || t.shape[0] > INT_MAX) return false;
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(t.shape[1]), static_cast<cuuint64_t>(t.shape[0])};
    cuuint64_t strides[2];  // T, B
    if (!map_strides(t, 1, cols * size_of(t.type), strides)) return false;
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_d), static_cast<cuuint32_t>(box_rows), 1};
    return encode_tiled(enc, map, type, 3, t.data, dims, strides, box);
}

/// Whether one shift per q / k head serves the joined maps of q and k: with head stride s (head_stride),
/// shift = (h s_q) mod (16 / sizeof(X)) must also start k's boxes (h s_k) on a 16-byte boundary.
inline bool joined_qk_agree(const inter_solve_args& a) {
    const std::int64_t ex = 16 / size_of(a.q.type);  // columns per 16 bytes of q and k
    const std::int64_t sq = a.q.shape[2] > 1 ? head_stride(a.q) : 0, sk = a.k.shape[2] > 1 ? head_stride(a.k) : 0;
    return (sq - sk) % ex == 0;
}

/// Whether that shift, with q / k's head h = hv / group, also starts g's boxes (hv s_g, fp32:
/// mod 4) on a 16-byte boundary for every value head hv. Holds for the contiguous layouts without
/// GVA, and with GVA where K is a multiple of 4; elsewhere g is staged per thread beside q's and
/// k's joined maps (kernel_params::joined_g_threads).
inline bool joined_g_agrees(const inter_solve_args& a, std::int64_t group) {
    const std::int64_t sq = a.q.shape[2] > 1 ? head_stride(a.q) : 0;
    const std::int64_t sg = a.g.shape[2] > 1 ? head_stride(a.g) : 0;
    // hv s_g = (h group + j) s_g must equal h s_q modulo 4 for every h and j < group
    if (group == 1) return (sg - sq) % 4 == 0;
    return sg % 4 == 0 && sq % 4 == 0;
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

/// Fills kp.tm and sets kp.tma where the copy engine can stage the tensors the kernel reads in
/// slices (q, k, g; Akkd too where the step reads it): maps of q's, k's and g's rows, or else
/// maps that join each one's heads (kp.joined), where one shift per q / k head serves q and k;
/// g through its joined map where the same shift serves it, else, for the inter-solve step, by
/// per-thread copies (kp.joined_g_threads; the fused steps then copy all three per thread).
template <class X, class Traits, class Step>
void make_tma_maps(kernel_params<X>& kp, const cuda_backend& be, const inter_solve_args& a) {
    kp.tma = kp.joined = kp.joined_g_threads = false;
    if (!be.use_tma || !device_supports_tma()) return;
    const auto enc = tensor_map_encoder();
    bool ok = encode_rows(enc, kp.tm.q, a.q, Traits::BK, Traits::BT) && encode_rows(enc, kp.tm.k, a.k, Traits::BK, Traits::BT) &&
              encode_rows(enc, kp.tm.g, a.g, Traits::BK, Traits::BT);
    // g per thread beside joined q / k maps: only the inter-solve step has that kernel
    constexpr bool g_threads_kernel = std::is_same_v<Step, inter_solve_step>;
    const bool g_map = !ok && joined_g_agrees(a, kp.group);
    if (!ok && joined_qk_agree(a) && (g_map || g_threads_kernel)) {
        ok = encode_joined(enc, kp.tm.q, a.q, Traits::BK, Traits::BT) && encode_joined(enc, kp.tm.k, a.k, Traits::BK, Traits::BT) &&
             (!g_map || encode_joined(enc, kp.tm.g, a.g, Traits::BK, Traits::BT));
        kp.joined = ok;
        kp.joined_g_threads = !g_map;
    }
    if (Step::reads_akkd) ok = ok && encode_rows(enc, kp.tm.akkd, a.Akkd, Traits::BC, Traits::BT);
    kp.tma = ok;
    kp.joined = kp.joined && ok;
    kp.joined_g_threads = kp.joined_g_threads && kp.joined;
}

/// Launches the chunk kernel for validated arguments: Step = inter_solve_step (called by
/// chunk_kda_inter_solve<cuda_backend>::launch, and by the two-kernel intra stage) or
/// fused_intra_step (chunk_kda_intra; a.Akkd is not read) or fused_intra_wy_step (the same with
/// its WY outputs, `wy`).
template <class X, class Cfg, class Mode, class Step>
void launch_chunk_kernel(const cuda_backend& be, const inter_solve_problem& p, const inter_solve_args& a, const wy_params<X>& wy = {}) {
    using traits = kernel_traits<X, Cfg, Step, Mode::solve_precision>;
    const chunk_grid grid = make_chunk_grid(p, a);
    kernel_params<X> kp;
    kp.p = make_params<X>(p, a, grid);
    kp.num_sequences = grid.num_sequences;
    kp.group = p.HV / p.H;
    set_copy_widths(kp, a, p.K);
    kp.pair_out = pair_stores_ok(as_const(a.Aqk)) && pair_stores_ok(as_const(a.Akk));
    kp.vec_out = rows_vector_aligned(as_const(a.Aqk)) && rows_vector_aligned(as_const(a.Akk));
    kp.vec_akkd = Step::reads_akkd && rows_vector_aligned(a.Akkd);
    kp.wy = wy;
    const std::int64_t items = kp.p.num_items();
    if (items == 0) return;
    make_tma_maps<X, traits, Step>(kp, be, a);

    auto* kernel = &chunk_kernel<X, Cfg, Mode, Step>;
    if constexpr (std::is_same_v<Step, inter_solve_step>)
        if (kp.joined_g_threads) kernel = &chunk_kernel<X, Cfg, Mode, inter_solve_g_threads_step>;
    constexpr int smem = traits::smem_bytes;
    if constexpr (smem > 48 * 1024) KDA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const auto grid_size = static_cast<unsigned>(items < INT_MAX ? items : INT_MAX);
    kernel<<<grid_size, traits::threads, smem, be.stream>>>(kp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

/// Launches the diagonal-block producer on validated arguments.
template <class X, bool SafeGate>
void launch_diag(const cuda_backend& be, const intra_problem& p, const intra_diag_args& a) {
    const inter_solve_args ia = kda::detail::as_inter_solve(a);
    const chunk_grid grid = make_chunk_grid(p, ia);
    diag_kernel_params<X> dp;
    dp.p = make_params<X>(p, ia, grid);
    dp.Akkd = static_cast<float*>(a.Akkd.data);
    dp.num_sequences = grid.num_sequences;
    dp.NC = p.BT / diag_bc;
    dp.vec_q = vector_loads_ok(a.q, p.K);
    dp.vec_k = vector_loads_ok(a.k, p.K);
    dp.vec_g = vector_loads_ok(a.g, p.K);
    const std::int64_t items = dp.p.chunks.num_chunks * dp.NC * p.HV;
    if (items == 0) return;
    const std::int64_t blocks = (items + diag_warps - 1) / diag_warps;
    const auto grid_size = static_cast<unsigned>(blocks < INT_MAX ? blocks : INT_MAX);
    diag_kernel<X, SafeGate><<<grid_size, 32 * diag_warps, 0, be.stream>>>(dp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

/// Launches the gate cumsum on validated arguments.
template <class X>
void launch_cumsum(const cuda_backend& be, const cumsum_problem& p, const cumsum_args& a) {
    const chunk_grid grid = make_chunk_grid(a.cu_seqlens, tensor_ref{}, p.B, p.T, p.BT);
    cumsum_kernel_params<X> cp;
    cp.g = static_cast<const X*>(a.g.data);
    cp.A_log = static_cast<const float*>(a.A_log.data);
    cp.dt_bias = static_cast<const float*>(a.dt_bias.data);
    cp.out = static_cast<float*>(a.g_out.data);
    cp.g_s = kda::detail::strides3(a.g);
    cp.out_s = kda::detail::strides3(a.g_out);
    cp.HV = p.HV;
    cp.K = p.K;
    cp.scale = static_cast<float>(p.scale);
    cp.lower_bound = static_cast<float>(p.lower_bound);
    cp.activation = p.activation;
    if (p.activation == gate_activation::none) cp.A_log = cp.dt_bias = nullptr;
    cp.chunks = grid.map;
    cp.num_sequences = grid.num_sequences;
    const std::int64_t items = grid.num_chunks() * p.HV;
    if (items == 0) return;
    const auto grid_size = static_cast<unsigned>(items < INT_MAX ? items : INT_MAX);
    cumsum_kernel<X><<<grid_size, 128, 0, be.stream>>>(cp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kda::cuda
