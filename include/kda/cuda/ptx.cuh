// kda/cuda/ptx.cuh: the CUDA backend's hardware primitives (nvcc only): storage conversions,
// 2^x, tf32 rounding, the m16n8k8 tensor-core product, cp.async, mbarriers and the tensor copy
// engine. Inline PTX lives here and nowhere else; everything is sm_80 or later, and the sm_90-only
// instructions compile to nothing for older targets (the kernels reach them only where
// device_has_tma holds).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda.h>  // CUtensorMap (a plain struct: nothing of the driver API is called here)
#include <cuda_runtime.h>

#include <cstdint>

#include "../types.hpp"

namespace kda::cuda {

/// Whether this compilation pass has the tensor copy engine (sm_90 and later). A kernel compiled
/// for an older target (or from its PTX) ignores kernel_params::tma and copies by cp.async.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool device_has_tma = true;
#else
inline constexpr bool device_has_tma = false;
#endif

// ---------------------------------------------------------------------------------------------
// Storage conversions (through cuda_bf16.h / cuda_fp16.h, round to nearest even).

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16_t x) { return __bfloat162float(__ushort_as_bfloat16(x.bits)); }
__device__ __forceinline__ float to_float(fp16_t x) { return __half2float(__ushort_as_half(x.bits)); }

template <class X>
__device__ __forceinline__ X from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float v) { return bf16_t{__bfloat16_as_ushort(__float2bfloat16_rn(v))}; }
template <>
__device__ __forceinline__ fp16_t from_float<fp16_t>(float v) { return fp16_t{__half_as_ushort(__float2half_rn(v))}; }

/// 2^x with one MUFU op (ex2.approx.ftz: a result below 2^-126 is 0, not subnormal; the gates
/// only ever raise 2 to exponents <= 0, so that changes no entry by more than 2^-126 |k|).
__device__ __forceinline__ float fast_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/// Two adjacent elements p[0], p[1] from shared memory as floats, in one load (p 2-element aligned).
__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const bf16_t* p) {
    const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(p);
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 load_pair(const fp16_t* p) {
    return __half22float2(*reinterpret_cast<const __half2*>(p));
}

// ---------------------------------------------------------------------------------------------
// Tensor-core primitives (sm_80 and later; nothing Hopper-only).

/// x rounded to tf32 (10-bit mantissa), round to nearest: the tensor core ignores the 13 low bits,
/// so truncation would be its default. Ties go to even on sm_90 (cvt.rn, a single instruction
/// there) and away from zero on sm_80 (cvt.rna; .rn needs sm_90); they differ only at exact ties.
__device__ __forceinline__ std::uint32_t to_tf32(float x) {
    std::uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));  // one instruction on sm_90 (ties to even)
#else
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));  // sm_80: ties away (emulated either way)
#endif
    return r;
}

/// d += a b for a [16, 8] (row-major fragment), b [8, 8] (column-major fragment), d [16, 8].
/// Fragment ownership (PTX ISA, m16n8k8 .tf32), g = lane / 4, t = lane % 4:
///   a0 (g, t)  a1 (g + 8, t)  a2 (g, t + 4)  a3 (g + 8, t + 4)       [row, k]
///   b0 (t, g)  b1 (t + 4, g)                                          [k, col]
///   d0 (g, 2t) d1 (g, 2t + 1) d2 (g + 8, 2t) d3 (g + 8, 2t + 1)       [row, col]
__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// 16-byte asynchronous copy global -> shared (sm_80+); `valid` false zero-fills the 16 bytes and
/// reads nothing (src must still be a valid address: callers pass the tensor's base).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc, bool valid) {
    const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gsrc), "r"(valid ? 16 : 0) : "memory");
}
/// W-byte asynchronous copy global -> shared (W = 4, 8 or 16; sm_80+) that reads the first
/// src_bytes (0 <= src_bytes <= W) and zero-fills the rest: src_bytes = 0 reads nothing (src must
/// still be a valid address). The source must be aligned to W.
template <int W>
__device__ __forceinline__ void cp_async_bytes(void* smem_dst, const void* gsrc, int src_bytes) {
    static_assert(W == 4 || W == 8 || W == 16, "cp.async copies 4, 8 or 16 bytes");
    const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(gsrc), "n"(W), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most N of this thread's most recent groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- the tensor copy engine and mbarriers (sm_90; only reached when device_has_tma)

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

/// One 16-byte global store (p 16-byte aligned), issued as such: the compiler may otherwise split a
/// vector store whose address it cannot prove aligned into four 4-byte stores.
__device__ __forceinline__ void st_global_16(void* p, uint4 v) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void st_global_16(void* p, float4 v) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
}

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
/// Makes the barriers' initialisation visible to the copy engine (then a block barrier).
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/// One arrival that also expects `bytes` of copies to complete on the barrier's current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#else
    (void)bar;
    (void)bytes;
#endif
}
/// Waits until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned a = smem_addr(bar);
    unsigned done = 0;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(a), "r"(parity)
            : "memory");
    } while (done == 0);
#else
    (void)bar;
    (void)parity;
#endif
}
/// A [rows, cols] box of a 4-d tensor map at coordinates (c0 innermost .. c3) -> shared memory,
/// completing on `bar` (counted in bytes of the whole box, zero-filled parts included).
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3, std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
        : "memory");
#else
    (void)dst;
    (void)map;
    (void)c0;
    (void)c1;
    (void)c2;
    (void)c3;
    (void)bar;
#endif
}
/// The same for a 3-d tensor map (coordinates innermost first).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                     smem_addr(dst)),
                 "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
                 : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)c2, (void)bar;
#endif
}
/// Orders this thread's earlier ordinary shared-memory accesses before later copy-engine writes.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

}  // namespace kda::cuda
