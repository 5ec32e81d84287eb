// kda/cuda/mma.cuh: the precision policy of the tensor-core products and the register tile type
// (nvcc only).
//
// Precision (Mode::solve_precision): tf32 rounds every operand to tf32 once (to_tf32) and
// accumulates in the tensor core, as FLA does. fp32 splits every operand x = hi + lo into two tf32
// numbers and sums the partial products hi hi + hi lo + lo hi (+ lo lo in the merge) of each k8
// step into a fresh accumulator, then adds it in fp32: a product is then as accurate as the split
// itself (at most 2^-22 relative, and exact for operands of up to 22 significant bits in the merge,
// of up to 11 in the products over K), and the tensor core's truncating accumulation (round toward
// zero) only ever sees 8 products at a time. Measured on the conformance grids, this mode is as
// accurate as the CPU backend's fp32 FMA arithmetic.
#pragma once

#include <cstdint>

#include "../types.hpp"
#include "ptx.cuh"

namespace kda::cuda {

/// How operands become tf32 fragments and how a k8 step accumulates, per solve precision.
template <precision P>
struct mma_policy;

/// tf32: one rounding per operand, accumulation inside the tensor core (FLA's behaviour).
template <>
struct mma_policy<precision::tf32> {
    struct a_frag {
        std::uint32_t hi[4];
    };
    struct b_frag {
        std::uint32_t hi[2];
    };
    __device__ static a_frag make_a(float a0, float a1, float a2, float a3) { return {{to_tf32(a0), to_tf32(a1), to_tf32(a2), to_tf32(a3)}}; }
    __device__ static b_frag make_b(float b0, float b1) { return {{to_tf32(b0), to_tf32(b1)}}; }
    /// An A operand built once into shared memory is stored already rounded ...
    __device__ static float prepare(float x) { return __uint_as_float(to_tf32(x)); }
    /// ... so its fragment is the stored bits.
    __device__ static a_frag make_a_prepared(float a0, float a1, float a2, float a3) {
        return {{__float_as_uint(a0), __float_as_uint(a1), __float_as_uint(a2), __float_as_uint(a3)}};
    }
    __device__ static b_frag make_b_prepared(float b0, float b1) { return {{__float_as_uint(b0), __float_as_uint(b1)}}; }
    __device__ static void mma(float (&acc)[4], const a_frag& a, const b_frag& b) { mma_m16n8k8(acc, a.hi, b.hi); }
    __device__ static void mma_full(float (&acc)[4], const a_frag& a, const b_frag& b) { mma(acc, a, b); }
};

/// fp32: x = hi + lo (both tf32; |x - hi - lo| <= 2^-22 |x|), partial products summed small to
/// large into a fresh accumulator that is then added in fp32. mma_full takes all four (lo lo, lo
/// hi, hi lo, hi hi: exact for operands of up to 22 significant bits); mma, for the products over
/// K, leaves out lo lo, which is at most 2^-22 |a b| (each |lo| <= 2^-11 |x|) and far smaller in
/// practice (about 2^-26 on average, random in sign), and exactly 0 for operands of up to 11
/// significant bits (16-bit q and k under exact decays). Three products instead of four made the
/// fp32 mode 4-7% faster on an H200 and moved the worst fp32-data errors of the conformance grids
/// and golden cases by a few percent either way (bf16 / fp16 data: unchanged, at the floor).
template <>
struct mma_policy<precision::fp32> {
    struct a_frag {
        std::uint32_t hi[4], lo[4];
    };
    struct b_frag {
        std::uint32_t hi[2], lo[2];
    };
    __device__ static void split(float x, std::uint32_t& hi, std::uint32_t& lo) {
        hi = to_tf32(x);
        lo = to_tf32(x - __uint_as_float(hi));  // exact difference
    }
    __device__ static a_frag make_a(float a0, float a1, float a2, float a3) {
        a_frag f;
        split(a0, f.hi[0], f.lo[0]);
        split(a1, f.hi[1], f.lo[1]);
        split(a2, f.hi[2], f.lo[2]);
        split(a3, f.hi[3], f.lo[3]);
        return f;
    }
    __device__ static b_frag make_b(float b0, float b1) {
        b_frag f;
        split(b0, f.hi[0], f.lo[0]);
        split(b1, f.hi[1], f.lo[1]);
        return f;
    }
    /// Built operands are stored unrounded and split when their fragment is formed.
    __device__ static float prepare(float x) { return x; }
    __device__ static a_frag make_a_prepared(float a0, float a1, float a2, float a3) { return make_a(a0, a1, a2, a3); }
    __device__ static b_frag make_b_prepared(float b0, float b1) { return make_b(b0, b1); }
    template <bool LoLo>
    __device__ static void mma_parts(float (&acc)[4], const a_frag& a, const b_frag& b) {
        float t[4] = {0.f, 0.f, 0.f, 0.f};
        if constexpr (LoLo) mma_m16n8k8(t, a.lo, b.lo);
        mma_m16n8k8(t, a.lo, b.hi);
        mma_m16n8k8(t, a.hi, b.lo);
        mma_m16n8k8(t, a.hi, b.hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] += t[e];
    }
    __device__ static void mma(float (&acc)[4], const a_frag& a, const b_frag& b) { mma_parts<false>(acc, a, b); }
    __device__ static void mma_full(float (&acc)[4], const a_frag& a, const b_frag& b) { mma_parts<true>(acc, a, b); }
};

/// A 16 x 16 fp32 register tile held as two m16n8 accumulator fragments: v[half][e] is element e
/// (mma_m16n8k8's d0 .. d3) of columns half * 8 .. + 7. The shared-memory tiles it is loaded from
/// and stored to are row-major 16 x 16 fp32 with a padded pitch (phases.cuh: t_ld).
struct rt16 {
    float v[2][4];
};

}  // namespace kda::cuda
