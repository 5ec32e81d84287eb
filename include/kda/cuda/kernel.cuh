// kda/cuda/kernel.cuh: device code of the CUDA backend (nvcc only; no host launch code here).
//
// One thread block (4 warps) computes one (chunk, value head) work item at a time, in the phases of
// detail/schedule.hpp, overridden here for the GPU but in the same order and with the seed's names:
//   0. prefetch: beta of the chunk's rows and the diagonal blocks of Akkd into registers (their
//      latency hides behind phase 1; they reach shared memory after it)
//   1. off-diagonal products, K in BK slices (tuning.hpp) copied to shared memory by cp.async,
//      two stages (slice s + 1 lands while slice s computes):
//        b_qg = q_si 2^(g_si - b_gn), b_kg = k_si 2^(g_si - b_gn)   (rows past n -> 0)
//        b_kgt = k_sj 2^(b_gn - g_sj),   b_gn = g[first row of si]
//        b_Aqk[si,sj] += b_qg b_kgt^T,  b_Akk[si,sj] += b_kg b_kgt^T       (si > sj)
//      on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation). The NPAIR pairs are cut into
//      2 NPAIR units of 16 x 8 (pair, half of sj's rows), ordered by si and dealt to the warps in
//      contiguous runs, so a warp builds the gated A operands of an si once per k8 step for all its
//      units of that si. Inside a k8 step the columns are permuted (k-slots tig, tig + 4 take the
//      adjacent columns 2 tig, 2 tig + 1), so each operand pair is one shared-memory load.
//   2. b_Aqk *= scale -> shared; row r of b_Akk *= beta[t_r] -> shared (L_ij)
//   3. diagonal inverses b_Ai[s] = (I + L_ss)^-1: forward substitution of Akkd in fp32, one
//      sub-chunk per warp, one column per lane, in registers (safe gate: Akkd's lower triangle is
//      the inverse)
//   4. block merge by distance d = i - j from the diagonal outwards:
//        Ai_ij = -Ai_ii (sum_{m=j}^{i-1} L_im Ai_mj)     (one 16 x 16 block per warp, tensor cores)
//   5. coalesced stores of the off-diagonal Aqk blocks and the lower block triangle of Akk, rows
//      < n only, Akk columns < n only: a warp per row, two adjacent columns per lane, one 2-element
//      store where the outputs are aligned for it (launch.cuh: pair_out).
//
// Precision (Mode::solve_precision): tf32 rounds every operand to tf32 once (cvt.rna) and
// accumulates in the tensor core, as FLA does. fp32 splits every operand x = hi + lo into two tf32
// numbers and sums all four partial products hi hi + hi lo + lo hi + lo lo of each k8 step into a
// fresh accumulator, then adds it in fp32: a product is then as accurate as the split itself (at
// most 2^-22 relative, and exact for operands of up to 22 significant bits), and the tensor core's
// truncating accumulation (round toward zero) only ever sees 8 products at a time. Measured on the
// conformance grids, this mode is as accurate as the CPU backend's fp32 FMA arithmetic.
//
// Shared memory is one buffer used twice (its lifetimes do not overlap; a barrier separates them):
// the two pipeline stages of staging slices s_q, s_k [BT, BK] (X) and s_g [BT, BK] (fp32) during
// phase 1, then the 16 x 16 fp32 tiles of phases 2-5; beta [BT] (fp32) has a region of its own.
// Row pitches are padded by 16 bytes to spread the fragment loads over the banks (the 4-byte X pair
// loads are conflict-free; the 8-byte g pair loads see about 2-way conflicts, docs/PERFORMANCE.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../params.hpp"
#include "../tile_config.hpp"
#include "../types.hpp"
#include "../varlen.hpp"
#include "tuning.hpp"
#include "varlen_search.hpp"

namespace kda::cuda {

/// What the kernel receives: the shared params plus what the launch learned about the layout.
template <class X>
struct kernel_params {
    inter_solve_params<X> p;
    std::int64_t num_sequences = 0;  // varlen without chunk_indices: N, for the cu_seqlens search
    bool vec_q = false, vec_k = false, vec_g = false;  // 16-byte loads (cp.async) are legal for this tensor
    bool pair_out = false;  // Aqk and Akk take stores of two adjacent elements (2 sizeof(X) aligned)
};

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

/// x rounded to tf32 (10-bit mantissa), round to nearest, ties away: the tensor core ignores the
/// 13 low bits, so truncation would be its default.
__device__ __forceinline__ std::uint32_t to_tf32(float x) {
    std::uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
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
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most N of this thread's most recent groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

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
    __device__ static void mma(float (&acc)[4], const a_frag& a, const b_frag& b) { mma_m16n8k8(acc, a.hi, b.hi); }
};

/// fp32: x = hi + lo (both tf32; |x - hi - lo| <= 2^-22 |x|), all four partial products, summed
/// small to large into a fresh accumulator that is then added in fp32.
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
    __device__ static void mma(float (&acc)[4], const a_frag& a, const b_frag& b) {
        float t[4] = {0.f, 0.f, 0.f, 0.f};
        mma_m16n8k8(t, a.lo, b.lo);
        mma_m16n8k8(t, a.lo, b.hi);
        mma_m16n8k8(t, a.hi, b.lo);
        mma_m16n8k8(t, a.hi, b.hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] += t[e];
    }
};

// ---------------------------------------------------------------------------------------------
// Tiles.

/// Layout tags: a 16 x 16 fp32 tile in shared memory is row-major with a padded pitch; a 16 x 16
/// register tile is held as two m16n8 accumulator fragments (columns 0-7 and 8-15).
struct smem_row_major {};
struct mma_accumulator {};

/// A 16 x 16 register tile: v[half][e] is accumulator element e of the columns half * 8 .. + 7.
struct rt16 {
    static constexpr int rows = 16, cols = 16;
    using layout = mma_accumulator;
    float v[2][4];
};

/// The base-tile concept: 16 x 16, with a layout tag.
template <class T>
concept base_tile16 = T::rows == 16 && T::cols == 16 && requires { typename T::layout; };
static_assert(base_tile16<rt16>, "rt16 must be a 16 x 16 base tile.");

/// Derived constants of one instantiation (see tile_config for BT, BC, BK, NC, NPAIR).
template <class X, class Cfg>
struct kernel_traits {
    using config = Cfg;
    static constexpr int BT = Cfg::BT, BC = Cfg::BC, NC = Cfg::NC, NPAIR = Cfg::NPAIR;
    static constexpr int BK = tuning::kernel_bk(Cfg::BK);  // the kernel's own K slice (tuning.hpp)
    static constexpr int stages = tuning::stages;
    static constexpr int warps = 4;
    static constexpr int threads = 32 * warps;
    static constexpr int units = 2 * NPAIR;  // phase-1 products of 16 x 8: (pair, half of sj)
    static constexpr int units_per_warp = units > 0 ? (units + warps - 1) / warps : 1;
    // staging (phase 1): pitches padded by 16 bytes (bank spread, 16-byte aligned rows)
    static constexpr int x_ld = BK + 16 / static_cast<int>(sizeof(X));  // s_q, s_k [BT, BK] in X
    static constexpr int g_ld = BK + 4;                                  // s_g [BT, BK] in fp32
    static constexpr int x_bytes = BT * x_ld * static_cast<int>(sizeof(X));
    static constexpr int g_bytes = BT * g_ld * 4;
    static constexpr int staging_bytes = 2 * x_bytes + g_bytes;  // one stage
    static constexpr int diag_per_warp = (NC + warps - 1) / warps;  // diagonal blocks per warp (phase 3)
    // tiles (phases 2-5), [BC, BC] fp32 each
    static constexpr int t_ld = BC + 4;
    static constexpr int tile_floats = BC * t_ld;
    static constexpr int off_aqk = 0;                          // NPAIR scaled Aqk blocks
    static constexpr int off_l = off_aqk + NPAIR * tile_floats;    // NPAIR beta-scaled L blocks
    static constexpr int off_ai = off_l + NPAIR * tile_floats;     // NC diagonal inverses
    static constexpr int off_aoff = off_ai + NC * tile_floats;     // NPAIR merged blocks Ai_ij
    static constexpr int off_tmp = off_aoff + NPAIR * tile_floats; // one scratch tile per warp
    static constexpr int tiles_bytes = (off_tmp + warps * tile_floats) * 4;
    static constexpr int union_bytes = stages * staging_bytes > tiles_bytes ? stages * staging_bytes : tiles_bytes;
    static constexpr int off_beta_bytes = union_bytes;               // beta of the chunk's rows [BT] fp32 (own region)
    static constexpr int smem_bytes = union_bytes + BT * 4;

    static_assert(BC == 16, "The CUDA kernel's tiles are 16 x 16: BC must be 16.");
    static_assert(BK % 8 == 0, "BK must be a multiple of the mma's k (8).");
    static_assert((x_ld * sizeof(X)) % 16 == 0 && (g_ld * 4) % 16 == 0, "Staging rows must stay 16-byte aligned for the vector stores.");
    static_assert(x_bytes % 16 == 0, "Each staging slice must start 16-byte aligned.");
    static_assert(units_per_warp <= 4, "Too many phase-1 units per warp for the register budget.");
    static_assert(BT <= threads, "Each chunk row's beta is prefetched by one thread.");
    static_assert(staging_bytes % 16 == 0, "Each pipeline stage must start 16-byte aligned.");
    static_assert(BC % 2 == 0, "Pair stores never straddle a sub-chunk boundary.");
    static_assert((t_ld * 4) % 16 == 0 && (off_ai * 4) % 16 == 0 && (tile_floats * 4) % 16 == 0, "Tile rows must be 16-byte aligned (float4 row loads).");
    static_assert(x_ld % 2 == 0 && g_ld % 2 == 0, "Staged rows must keep operand pairs 2-element aligned.");
};

/// Index of the off-diagonal pair (si, sj), si > sj, as in tile_config::pair.
__device__ __forceinline__ int pair_index(int si, int sj) { return si * (si - 1) / 2 + sj; }

/// Inverse of pair_index.
__device__ __forceinline__ void pair_of(int p, int& si, int& sj) {
    si = 1;
    while (pair_index(si + 1, 0) <= p) ++si;
    sj = p - pair_index(si, 0);
}

// ---------------------------------------------------------------------------------------------
// One work item, as a struct of phases.

template <class X, class Cfg, class Mode>
struct chunk_kernel {
    using traits = kernel_traits<X, Cfg>;
    using mma = mma_policy<Mode::solve_precision>;
    static constexpr int BT = traits::BT, BC = traits::BC, BK = traits::BK, NC = traits::NC;
    static constexpr int warps = traits::warps, threads = traits::threads, UPW = traits::units_per_warp;
    static constexpr int x_ld = traits::x_ld, g_ld = traits::g_ld, t_ld = traits::t_ld, tile_floats = traits::tile_floats;

    const kernel_params<X>& kp;
    const inter_solve_params<X>& P;
    chunk_coords c;       // rows [c.bos + c.t0, + c.n) of batch row c.b
    std::int64_t hv, h;   // value head, q/k head (GVA)
    int NS;               // sub-chunks holding at least one row
    unsigned char* smem;
    int tid, warp, lane, gid, tig;

    __device__ chunk_kernel(const kernel_params<X>& kp_, std::int64_t item, unsigned char* smem_)
        : kp(kp_), P(kp_.p), smem(smem_) {
        const std::int64_t i_t = item / P.HV;
        hv = item % P.HV;
        h = hv / (P.HV / P.H);
        c = locate_chunk(P.chunks, kp.num_sequences, i_t);
        NS = static_cast<int>((c.n + BC - 1) / BC);
        tid = static_cast<int>(threadIdx.x);
        warp = tid / 32;
        lane = tid % 32;
        gid = lane / 4;
        tig = lane % 4;
    }

    // ---- geometry
    [[nodiscard]] __device__ int rows(int s) const {
        const std::int64_t r = c.n - static_cast<std::int64_t>(s) * BC;
        return r <= 0 ? 0 : (r >= BC ? BC : static_cast<int>(r));
    }
    /// Token of row r of the chunk.
    [[nodiscard]] __device__ std::int64_t token(int r) const { return c.bos + c.t0 + r; }

    // ---- shared memory (stage st of the phase-1 pipeline; the tiles reuse the same bytes)
    __device__ X* s_q(int st) const { return reinterpret_cast<X*>(smem + st * traits::staging_bytes); }                          // [BT, BK]
    __device__ X* s_k(int st) const { return reinterpret_cast<X*>(smem + st * traits::staging_bytes + traits::x_bytes); }        // [BT, BK]
    __device__ float* s_g(int st) const { return reinterpret_cast<float*>(smem + st * traits::staging_bytes + 2 * traits::x_bytes); }  // [BT, BK]
    __device__ float* s_beta() const { return reinterpret_cast<float*>(smem + traits::off_beta_bytes); }  // [BT]
    __device__ float* tiles() const { return reinterpret_cast<float*>(smem); }
    __device__ float* s_aqk(int si, int sj) const { return tiles() + traits::off_aqk + pair_index(si, sj) * tile_floats; }  // [BC, BC]
    __device__ float* s_l(int si, int sj) const { return tiles() + traits::off_l + pair_index(si, sj) * tile_floats; }      // [BC, BC]
    /// Ai_ij (i >= j): the diagonal inverses, then the merged blocks.
    __device__ float* s_ai(int i, int j) const {
        return tiles() + (i == j ? traits::off_ai + i * tile_floats : traits::off_aoff + pair_index(i, j) * tile_floats);  // [BC, BC]
    }
    __device__ float* s_tmp() const { return tiles() + traits::off_tmp + warp * tile_floats; }  // [BC, BC]

    __device__ float beta_at(std::int64_t t) const {
        const std::int64_t off = P.beta_s.at(c.b, t, hv);
        return P.beta_is_fp32 ? static_cast<const float*>(P.beta)[off] : to_float(static_cast<const X*>(P.beta)[off]);
    }

    // =============================================================================================
    // Prefetch: beta and the diagonal blocks of Akkd are loaded into registers before phase 1, so
    // their latency hides behind it (they land in shared memory after phase 1, see park/phase 3).

    float pf_beta = 0.f;                                // beta of row tid (tid < n)
    float pf_diag[traits::diag_per_warp][BC * BC / 32];  // this warp's Akkd blocks, element lane + 32 i

    __device__ void prefetch() {
        const int n = static_cast<int>(c.n);
        if (tid < n) pf_beta = beta_at(token(tid));
#pragma unroll
        for (int d = 0; d < traits::diag_per_warp; ++d) {
            const int s = warp + d * warps;
            const int nrow = rows(s < NC ? s : 0);
#pragma unroll
            for (int i = 0; i < BC * BC / 32; ++i) {
                const int e = lane + 32 * i;
                const int r = e / BC, j = e % BC;
                float v = 0.f;
                if (s < NS && r < nrow && (Mode::safe_gate ? j <= r : j < r)) v = P.Akkd[P.Akkd_s.at(c.b, token(s * BC + r), hv) + j];
                pf_diag[d][i] = v;
            }
        }
    }

    // =============================================================================================
    // Phase 1: off-diagonal products.

    /// Stages columns [k0, k0 + BK) of the chunk's BT rows of src into dst (pitch LD); rows past the
    /// chunk's end and columns past K are zero. With `vec` (16-byte alignment, see launch.cuh) as
    /// cp.async copies that complete asynchronously (the caller commits and waits); else element by
    /// element through registers (complete when the caller's barrier passes).
    template <class T, int LD>
    __device__ void stage(T* dst, const T* src, const axis_strides& st, std::int64_t head, int k0, bool vec) const {
        if (vec) {
            constexpr int per = 16 / static_cast<int>(sizeof(T));
            constexpr int per_row = BK / per;
            constexpr int total = BT * per_row;
            constexpr int iters = (total + threads - 1) / threads;
#pragma unroll
            for (int it = 0; it < iters; ++it) {
                const int idx = tid + it * threads;
                if (total % threads != 0 && idx >= total) break;
                const int r = idx / per_row;
                const std::int64_t col = k0 + (idx % per_row) * per;
                const bool ok = r < c.n && col < P.K;
                const T* g = ok ? src + st.at(c.b, token(r), head) + col : src;
                cp_async16(dst + r * LD + (idx % per_row) * per, g, ok);
            }
        } else {
            // fallback for unaligned tensors: batches of 4 loads, then their 4 stores (few registers)
            constexpr int total = BT * BK;
            constexpr int batch = 4;
#pragma unroll 1
            for (int i0 = tid; i0 < total; i0 += batch * threads) {
                T v[batch];
#pragma unroll
                for (int it = 0; it < batch; ++it) {
                    const int idx = i0 + it * threads;
                    const int r = idx / BK;
                    const std::int64_t col = k0 + idx % BK;
                    v[it] = T{};
                    if (idx < total && r < c.n && col < P.K) v[it] = src[st.at(c.b, token(r), head) + col];
                }
#pragma unroll
                for (int it = 0; it < batch; ++it) {
                    const int idx = i0 + it * threads;
                    if (idx < total) dst[(idx / BK) * LD + idx % BK] = v[it];
                }
            }
        }
    }

    __device__ void stage_slice(int st, int k0) const {
        stage<X, x_ld>(s_q(st), P.q, P.q_s, h, k0, kp.vec_q);
        stage<X, x_ld>(s_k(st), P.k, P.k_s, h, k0, kp.vec_k);
        stage<float, g_ld>(s_g(st), P.g, P.g_s, hv, k0, kp.vec_g);
    }

    /// Unit u (16 x 8 product) -> sub-chunk si and the 8-column tile j8 of the block row si
    /// (columns j8 * 8 .. + 7 of sj = j8 / 2). Units run by si, then j8: u = si (si - 1) + j8, so
    /// the contiguous units of one warp mostly share si and with it the gated A operands.
    __device__ static void unit_of(int u, int& si, int& j8) {
        si = 1;
        while ((si + 1) * si <= u) ++si;
        j8 = u - si * (si - 1);
    }

    /// This warp's units over one staged K slice, k in [0, kmax). The A operands (q_si, k_si gated
    /// down to the first row of si) are built once per k8 step and shared by the warp's units of
    /// that si; the B operand (k_sj gated up to the same reference) per unit.
    __device__ void slice_products(float (&b_Aqk)[UPW][4], float (&b_Akk)[UPW][4], const int (&u_si)[UPW], const int (&u_j8)[UPW], int st,
                                   int kmax) const {
        const X* sq = s_q(st);
        const X* sk = s_k(st);
        const float* sg = s_g(st);
#pragma unroll 1
        for (int kk = 0; kk < BK; kk += 8) {
            if (kk >= kmax) break;
            // The k8 step's columns are permuted (the mma sums over k, so A and B only need the same
            // order): fragment k-slots tig and tig + 4 take the adjacent columns c0 = kk + 2 tig and
            // c0 + 1, so every operand pair is one shared-memory load.
            const int c0 = kk + 2 * tig;
            int cur = -1;
            typename mma::a_frag b_qg, b_kg;
            float2 gn = make_float2(0.f, 0.f);
#pragma unroll
            for (int i = 0; i < UPW; ++i) {
                const int si = u_si[i];
                if (si < 0) break;  // warp-uniform: no more units for this warp
                if (si != cur) {    // warp-uniform
                    cur = si;
                    const int ra = si * BC + gid;  // A rows ra, ra + 8
                    const int nrow = rows(si);
                    const bool va0 = gid < nrow, va1 = gid + 8 < nrow;
                    gn = load_pair(sg + si * BC * g_ld + c0);  // reference gate: first row of si
                    // [16, 8] gate of the A rows, 2^(g - gn) <= 1; rows past the chunk's end are 0 (a
                    // select, not a product: their staged g is 0, and 2^(0 - gn) may be inf)
                    const float2 g0 = load_pair(sg + ra * g_ld + c0), g1 = load_pair(sg + (ra + 8) * g_ld + c0);
                    const float e00 = va0 ? fast_exp2(g0.x - gn.x) : 0.f;
                    const float e10 = va1 ? fast_exp2(g1.x - gn.x) : 0.f;
                    const float e01 = va0 ? fast_exp2(g0.y - gn.y) : 0.f;
                    const float e11 = va1 ? fast_exp2(g1.y - gn.y) : 0.f;
                    const float2 q0 = load_pair(sq + ra * x_ld + c0), q1 = load_pair(sq + (ra + 8) * x_ld + c0);
                    const float2 k0 = load_pair(sk + ra * x_ld + c0), k1 = load_pair(sk + (ra + 8) * x_ld + c0);
                    b_qg = mma::make_a(q0.x * e00, q1.x * e10, q0.y * e01, q1.y * e11);
                    b_kg = mma::make_a(k0.x * e00, k1.x * e10, k0.y * e01, k1.y * e11);
                }
                // [8, 8] of b_kgt: k_sj 2^(gn - g_sj) <= 1 (every row of sj < si is inside the chunk)
                const int rb = u_j8[i] * 8 + gid;  // B row (n index gid): row of sj = j8 / 2
                const float2 kb = load_pair(sk + rb * x_ld + c0), gb = load_pair(sg + rb * g_ld + c0);
                const typename mma::b_frag b_kgt = mma::make_b(kb.x * fast_exp2(gn.x - gb.x), kb.y * fast_exp2(gn.y - gb.y));
                mma::mma(b_Aqk[i], b_qg, b_kgt);
                mma::mma(b_Akk[i], b_kg, b_kgt);
            }
        }
    }

    /// This warp's units: u = warp * UPW + i; u_si = -1 past the last unit or for sub-chunks past
    /// the chunk's end (si ascends with u, so the valid ones come first).
    __device__ void my_units(int (&u_si)[UPW], int (&u_j8)[UPW]) const {
#pragma unroll
        for (int i = 0; i < UPW; ++i) {
            const int u = warp * UPW + i;
            int si = -1, j8 = 0;
            if (u < traits::units) {
                unit_of(u, si, j8);
                if (si >= NS) si = -1;
            }
            u_si[i] = si;
            u_j8[i] = j8;
        }
    }

    /// Phase 1 over all K slices, pipelined: slice s + 1 is copied (cp.async) while slice s computes.
    __device__ void products(float (&b_Aqk)[UPW][4], float (&b_Akk)[UPW][4]) {
#pragma unroll
        for (int i = 0; i < UPW; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) b_Aqk[i][e] = b_Akk[i][e] = 0.f;
        int u_si[UPW], u_j8[UPW];
        my_units(u_si, u_j8);
        const int nslices = static_cast<int>((P.K + BK - 1) / BK);
        stage_slice(0, 0);
        cp_async_commit();
        for (int s = 0; s < nslices; ++s) {
            if (s + 1 < nslices) stage_slice((s + 1) % 2, (s + 1) * BK);  // its buffer was released at the end of s - 1
            cp_async_commit();
            cp_async_wait<1>();  // this thread's copies of slice s have landed
            __syncthreads();     // ... and everyone's
            const std::int64_t left = P.K - static_cast<std::int64_t>(s) * BK;
            const int kmax = left < BK ? static_cast<int>(left) : BK;
            slice_products(b_Aqk, b_Akk, u_si, u_j8, s % 2, kmax);
            __syncthreads();  // slice s is consumed before its buffer is refilled
        }
        cp_async_wait<0>();
        if (tid < BT) s_beta()[tid] = pf_beta;  // 0 past the chunk's end
        __syncthreads();  // the staging buffers become the tile buffer
    }

    // =============================================================================================
    // Phase 2: scale and park the products as tiles.

    __device__ void park_products(const float (&b_Aqk)[UPW][4], const float (&b_Akk)[UPW][4]) const {
        const float* sb = s_beta();
#pragma unroll
        for (int i = 0; i < UPW; ++i) {
            const int u = warp * UPW + i;
            if (u >= traits::units) break;
            int si, j8;
            unit_of(u, si, j8);
            if (si >= NS) break;
            const int sj = j8 / 2;
            const int col = (j8 % 2) * 8 + 2 * tig;
            const int r0 = gid, r1 = gid + 8;
            float* aqk = s_aqk(si, sj);
            aqk[r0 * t_ld + col] = b_Aqk[i][0] * P.scale;
            aqk[r0 * t_ld + col + 1] = b_Aqk[i][1] * P.scale;
            aqk[r1 * t_ld + col] = b_Aqk[i][2] * P.scale;
            aqk[r1 * t_ld + col + 1] = b_Aqk[i][3] * P.scale;
            // rows past the end hold 0 (their A rows were 0); s_beta holds 0 there
            const float b_b0 = sb[si * BC + r0];
            const float b_b1 = sb[si * BC + r1];
            float* l = s_l(si, sj);
            l[r0 * t_ld + col] = b_Akk[i][0] * b_b0;
            l[r0 * t_ld + col + 1] = b_Akk[i][1] * b_b0;
            l[r1 * t_ld + col] = b_Akk[i][2] * b_b1;
            l[r1 * t_ld + col + 1] = b_Akk[i][3] * b_b1;
        }
    }

    // =============================================================================================
    // Phase 3: diagonal inverses.

    __device__ void diagonal_inverses() const {
#pragma unroll
        for (int d = 0; d < traits::diag_per_warp; ++d) {
            const int s = warp + d * warps;
            if (s >= NS) break;
            float* b_Ai = s_ai(s, s);  // [BC, BC]
            // Akkd's block (prefetched): strict lower part (L_ss), or lower part with the diagonal
            // (safe gate: the inverse itself); zeros elsewhere, nothing past the chunk's end
#pragma unroll
            for (int i = 0; i < BC * BC / 32; ++i) {
                const int e = lane + 32 * i;
                b_Ai[(e / BC) * t_ld + e % BC] = pf_diag[d][i];
            }
            if constexpr (!Mode::safe_gate) {
                __syncwarp();
                // Forward substitution, lane j owning column j (lanes 16-31 duplicate 0-15 and store
                // nothing): x[r] = delta_rj - sum_{m<r} L[r, m] x[m], m ascending. Row r of L is read
                // as float4 broadcasts just before its use; the __syncwarp between rows keeps the
                // compiler from hoisting all 120 loads (register pressure). Rows past the end hold
                // L = 0 and come out as identity rows.
                const int jl = lane % BC;
                float x[BC];
#pragma unroll
                for (int r = 0; r < BC; ++r) {
                    float acc = r == jl ? 1.f : 0.f;
#pragma unroll
                    for (int q4 = 0; q4 < (r + 3) / 4; ++q4) {
                        const float4 v = *reinterpret_cast<const float4*>(b_Ai + r * t_ld + 4 * q4);
                        const float l4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            if (4 * q4 + e < r) acc = fmaf(-l4[e], x[4 * q4 + e], acc);
                    }
                    x[r] = acc;
                    __syncwarp();
                }
                if (lane < BC) {
#pragma unroll
                    for (int r = 0; r < BC; ++r) b_Ai[r * t_ld + lane] = x[r];
                }
            }
        }
    }

    // =============================================================================================
    // Phase 4: block merge.

    /// acc += A B for 16 x 16 fp32 tiles in shared memory (row-major, pitch t_ld).
    __device__ void tile_mma(rt16& acc, const float* sA, const float* sB) const {
#pragma unroll
        for (int kk = 0; kk < BC; kk += 8) {
            const typename mma::a_frag a = mma::make_a(sA[gid * t_ld + kk + tig], sA[(gid + 8) * t_ld + kk + tig], sA[gid * t_ld + kk + tig + 4],
                                                       sA[(gid + 8) * t_ld + kk + tig + 4]);
#pragma unroll
            for (int nh = 0; nh < 2; ++nh) {
                const typename mma::b_frag b = mma::make_b(sB[(kk + tig) * t_ld + nh * 8 + gid], sB[(kk + tig + 4) * t_ld + nh * 8 + gid]);
                mma::mma(acc.v[nh], a, b);
            }
        }
    }

    /// dst = sign * acc (row-major, pitch t_ld).
    __device__ void store_tile(float* dst, const rt16& acc, float sign) const {
#pragma unroll
        for (int nh = 0; nh < 2; ++nh) {
            const int col = nh * 8 + 2 * tig;
            dst[gid * t_ld + col] = sign * acc.v[nh][0];
            dst[gid * t_ld + col + 1] = sign * acc.v[nh][1];
            dst[(gid + 8) * t_ld + col] = sign * acc.v[nh][2];
            dst[(gid + 8) * t_ld + col + 1] = sign * acc.v[nh][3];
        }
    }

    __device__ void merge() const {
        for (int d = 1; d < NS; ++d) {
            for (int j = warp; j + d < NS; j += warps) {
                const int i = j + d;
                rt16 sum = {};
                for (int m = j; m < i; ++m) tile_mma(sum, s_l(i, m), s_ai(m, j));  // sum_{m=j}^{i-1} L_im Ai_mj
                float* tmp = s_tmp();
                store_tile(tmp, sum, 1.f);
                __syncwarp();
                rt16 b_Aij = {};
                tile_mma(b_Aij, s_ai(i, i), tmp);
                store_tile(s_ai(i, j), b_Aij, -1.f);
                __syncwarp();  // tmp is rewritten by this warp's next block
            }
            __syncthreads();  // distance d is complete before d + 1 reads it
        }
    }

    // =============================================================================================
    // Phase 5: stores, one row of BT columns per warp at a time, coalesced; each lane writes two
    // adjacent columns, as one 2 sizeof(X) store where the launch found that aligned (pair_out).

    __device__ void store_pair(X* dst, float a, float b, bool vec) const {
        const X xa = from_float<X>(a), xb = from_float<X>(b);
        if (vec) {
            if constexpr (sizeof(X) == 2) {
                std::uint32_t w;
                std::uint16_t lo, hi;
                __builtin_memcpy(&lo, &xa, 2);
                __builtin_memcpy(&hi, &xb, 2);
                w = static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
                *reinterpret_cast<std::uint32_t*>(dst) = w;
            } else {
                *reinterpret_cast<float2*>(dst) = make_float2(to_float(xa), to_float(xb));
            }
        } else {
            dst[0] = xa;
            dst[1] = xb;
        }
    }

    __device__ void store_outputs() const {
        const int n = static_cast<int>(c.n);
        const bool vec = kp.pair_out;
        for (int r = warp; r < n; r += warps) {
            const int si = r / BC, rr = r % BC;
            const std::int64_t t = token(r);
            X* aqk_row = P.Aqk + P.Aqk_s.at(c.b, t, hv);
            X* akk_row = P.Akk + P.Akk_s.at(c.b, t, hv);
#pragma unroll
            for (int col = 2 * lane; col < BT; col += 64) {
                const int sj = col / BC, cc = col % BC;
                if (sj > si) continue;
                if (sj < si) {
                    const float* a = s_aqk(si, sj) + rr * t_ld + cc;
                    store_pair(aqk_row + col, a[0], a[1], vec);
                }
                const float* ai = s_ai(si, sj) + rr * t_ld + cc;
                if (col + 1 < n)
                    store_pair(akk_row + col, ai[0], ai[1], vec);
                else if (col < n)
                    akk_row[col] = from_float<X>(ai[0]);
            }
        }
    }

    __device__ void run() {
        prefetch();
        if (NS > 1) {
            float b_Aqk[UPW][4], b_Akk[UPW][4];
            products(b_Aqk, b_Akk);
            park_products(b_Aqk, b_Akk);
        }
        diagonal_inverses();
        __syncthreads();
        merge();
        store_outputs();
    }
};

/// The kernel: a grid-stride loop over work items (chunk, value head), value heads fastest so the
/// heads of one GVA group read the same q / k rows close together in time.
template <class X, class Cfg, class Mode>
__global__ void __launch_bounds__(kernel_traits<X, Cfg>::threads, tuning::min_blocks(Mode::solve_precision, sizeof(X), Cfg::BT))
    inter_solve_kernel(const __grid_constant__ kernel_params<X> kp) {
    extern __shared__ __align__(16) unsigned char smem[];
    const std::int64_t items = kp.p.num_items();
    for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        chunk_kernel<X, Cfg, Mode> w(kp, item, smem);
        if (w.c.n <= 0) continue;  // an idle varlen slot (block-uniform)
        __syncthreads();           // the previous item is done with shared memory
        w.run();
    }
}

}  // namespace kda::cuda
