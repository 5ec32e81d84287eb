// kda/cuda/kernel.cuh: device code of the CUDA backend (nvcc only; no host launch code here).
//
// One thread block (4 warps) computes one (chunk, value head) work item at a time, in the phases of
// detail/schedule.hpp, overridden here for the GPU but in the same order and with the seed's names:
//   1. off-diagonal products, K in BK slices staged through shared memory:
//        b_qg = q_si 2^(g_si - b_gn), b_kg = k_si 2^(g_si - b_gn)   (rows past n -> 0)
//        b_kgt = k_sj 2^(b_gn - g_sj),   b_gn = g[first row of si]
//        b_Aqk[si,sj] += b_qg b_kgt^T,  b_Akk[si,sj] += b_kg b_kgt^T       (si > sj)
//      on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation). The NPAIR pairs are cut into
//      2 NPAIR units of 16 x 8 (pair, half of sj's rows) dealt round-robin to the warps.
//   2. b_Aqk *= scale -> shared; row r of b_Akk *= beta[t_r] -> shared (L_ij)
//   3. diagonal inverses b_Ai[s] = (I + L_ss)^-1: forward substitution of Akkd in fp32, one
//      sub-chunk per warp, one column per lane (safe gate: Akkd's lower triangle is the inverse)
//   4. block merge by distance d = i - j from the diagonal outwards:
//        Ai_ij = -Ai_ii (sum_{m=j}^{i-1} L_im Ai_mj)     (one 16 x 16 block per warp, tensor cores)
//   5. coalesced stores of the off-diagonal Aqk blocks and the lower block triangle of Akk, rows
//      < n only, Akk columns < n only.
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
// the staging slices s_q, s_k [BT, BK] (X) and s_g [BT, BK] (fp32) during phase 1, then the 16 x 16
// fp32 tiles of phases 2-5. Row pitches are padded by 16 bytes so the fragment loads of a warp hit
// 32 distinct banks (pitch = 4 words mod 32 between the 8 row groups).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../params.hpp"
#include "../tile_config.hpp"
#include "../types.hpp"
#include "../varlen.hpp"
#include "varlen_search.hpp"

namespace kda::cuda {

/// What the kernel receives: the shared params plus what the launch learned about the layout.
template <class X>
struct kernel_params {
    inter_solve_params<X> p;
    std::int64_t num_sequences = 0;  // varlen without chunk_indices: N, for the cu_seqlens search
    bool vec_q = false, vec_k = false, vec_g = false;  // 16-byte loads are legal for this tensor
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
    static constexpr int BT = Cfg::BT, BC = Cfg::BC, BK = Cfg::BK, NC = Cfg::NC, NPAIR = Cfg::NPAIR;
    static constexpr int warps = 4;
    static constexpr int threads = 32 * warps;
    static constexpr int units = 2 * NPAIR;  // phase-1 products of 16 x 8: (pair, half of sj)
    static constexpr int units_per_warp = units > 0 ? (units + warps - 1) / warps : 1;
    // staging (phase 1): pitches padded by 16 bytes (bank spread, 16-byte aligned rows)
    static constexpr int x_ld = BK + 16 / static_cast<int>(sizeof(X));  // s_q, s_k [BT, BK] in X
    static constexpr int g_ld = BK + 4;                                  // s_g [BT, BK] in fp32
    static constexpr int x_bytes = BT * x_ld * static_cast<int>(sizeof(X));
    static constexpr int g_bytes = BT * g_ld * 4;
    static constexpr int staging_bytes = 2 * x_bytes + g_bytes;
    // tiles (phases 2-5), [BC, BC] fp32 each
    static constexpr int t_ld = BC + 4;
    static constexpr int tile_floats = BC * t_ld;
    static constexpr int off_aqk = 0;                          // NPAIR scaled Aqk blocks
    static constexpr int off_l = off_aqk + NPAIR * tile_floats;    // NPAIR beta-scaled L blocks
    static constexpr int off_ai = off_l + NPAIR * tile_floats;     // NC diagonal inverses
    static constexpr int off_aoff = off_ai + NC * tile_floats;     // NPAIR merged blocks Ai_ij
    static constexpr int off_tmp = off_aoff + NPAIR * tile_floats; // one scratch tile per warp
    static constexpr int tiles_bytes = (off_tmp + warps * tile_floats) * 4;
    static constexpr int smem_bytes = staging_bytes > tiles_bytes ? staging_bytes : tiles_bytes;

    static_assert(BC == 16, "The CUDA kernel's tiles are 16 x 16: BC must be 16.");
    static_assert(BK % 8 == 0, "BK must be a multiple of the mma's k (8).");
    static_assert((x_ld * sizeof(X)) % 16 == 0 && (g_ld * 4) % 16 == 0, "Staging rows must stay 16-byte aligned for the vector stores.");
    static_assert(x_bytes % 16 == 0, "Each staging slice must start 16-byte aligned.");
    static_assert(units_per_warp <= 4, "Too many phase-1 units per warp for the register budget.");
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

    // ---- shared memory
    __device__ X* s_q() const { return reinterpret_cast<X*>(smem); }                                      // [BT, BK]
    __device__ X* s_k() const { return reinterpret_cast<X*>(smem + traits::x_bytes); }                    // [BT, BK]
    __device__ float* s_g() const { return reinterpret_cast<float*>(smem + 2 * traits::x_bytes); }        // [BT, BK]
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
    // Phase 1: off-diagonal products.

    /// Stages columns [k0, k0 + BK) of the chunk's BT rows of src into dst (pitch LD); rows past the
    /// chunk's end and columns past K are zero. 16-byte loads where the launch found them legal
    /// (`vec`), else element by element; either way all of a thread's loads are issued before its
    /// first store.
    template <class T, int LD>
    __device__ void stage(T* dst, const T* src, const axis_strides& st, std::int64_t head, int k0, bool vec) const {
        if (vec) {
            constexpr int per = 16 / static_cast<int>(sizeof(T));
            constexpr int per_row = BK / per;
            constexpr int total = BT * per_row;
            constexpr int iters = (total + threads - 1) / threads;
            uint4 v[iters];
#pragma unroll
            for (int it = 0; it < iters; ++it) {
                const int idx = tid + it * threads;
                const int r = idx / per_row;
                const std::int64_t col = k0 + (idx % per_row) * per;
                v[it] = make_uint4(0u, 0u, 0u, 0u);
                if (idx < total && r < c.n && col < P.K) v[it] = __ldg(reinterpret_cast<const uint4*>(src + st.at(c.b, token(r), head) + col));
            }
#pragma unroll
            for (int it = 0; it < iters; ++it) {
                const int idx = tid + it * threads;
                if (idx < total) *reinterpret_cast<uint4*>(dst + (idx / per_row) * LD + (idx % per_row) * per) = v[it];
            }
        } else {
            constexpr int total = BT * BK;
            constexpr int iters = (total + threads - 1) / threads;
            T v[iters];
#pragma unroll
            for (int it = 0; it < iters; ++it) {
                const int idx = tid + it * threads;
                const int r = idx / BK;
                const std::int64_t col = k0 + idx % BK;
                v[it] = T{};
                if (idx < total && r < c.n && col < P.K) v[it] = src[st.at(c.b, token(r), head) + col];
            }
#pragma unroll
            for (int it = 0; it < iters; ++it) {
                const int idx = tid + it * threads;
                if (idx < total) dst[(idx / BK) * LD + idx % BK] = v[it];
            }
        }
    }

    /// One unit's share of a K slice: rows of si (A) against 8 rows of sj (B), k in [0, kmax).
    __device__ void slice_products(float (&b_aqk)[4], float (&b_akk)[4], int si, int sj, int half, int kmax) const {
        const X* sq = s_q();
        const X* sk = s_k();
        const float* sg = s_g();
        const int ra = si * BC + gid;             // A rows ra, ra + 8
        const int rb = sj * BC + half * 8 + gid;  // B row (n index gid)
        const int nrow = rows(si);
        const bool va0 = gid < nrow, va1 = gid + 8 < nrow;
        const float* b_gn = sg + si * BC * g_ld;  // [BK] reference gate: first row of si
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            if (kk >= kmax) break;
            const int c0 = kk + tig, c1 = c0 + 4;
            const float gn0 = b_gn[c0], gn1 = b_gn[c1];
            // [16, 8] gate of the A rows, 2^(g - gn) <= 1; rows past the chunk's end are 0 (a select,
            // not a product: their staged g is 0, and 2^(0 - gn) may be inf)
            const float e00 = va0 ? exp2f(sg[ra * g_ld + c0] - gn0) : 0.f;
            const float e10 = va1 ? exp2f(sg[(ra + 8) * g_ld + c0] - gn0) : 0.f;
            const float e01 = va0 ? exp2f(sg[ra * g_ld + c1] - gn1) : 0.f;
            const float e11 = va1 ? exp2f(sg[(ra + 8) * g_ld + c1] - gn1) : 0.f;
            const typename mma::a_frag b_qg =
                mma::make_a(to_float(sq[ra * x_ld + c0]) * e00, to_float(sq[(ra + 8) * x_ld + c0]) * e10, to_float(sq[ra * x_ld + c1]) * e01,
                            to_float(sq[(ra + 8) * x_ld + c1]) * e11);
            const typename mma::a_frag b_kg =
                mma::make_a(to_float(sk[ra * x_ld + c0]) * e00, to_float(sk[(ra + 8) * x_ld + c0]) * e10, to_float(sk[ra * x_ld + c1]) * e01,
                            to_float(sk[(ra + 8) * x_ld + c1]) * e11);
            // [8, 8] of b_kgt: k_sj 2^(gn - g_sj) <= 1 (every row of sj < si is inside the chunk)
            const typename mma::b_frag b_kgt = mma::make_b(to_float(sk[rb * x_ld + c0]) * exp2f(gn0 - sg[rb * g_ld + c0]),
                                                           to_float(sk[rb * x_ld + c1]) * exp2f(gn1 - sg[rb * g_ld + c1]));
            mma::mma(b_aqk, b_qg, b_kgt);
            mma::mma(b_akk, b_kg, b_kgt);
        }
    }

    /// Phase 1 over all K slices; b_Aqk[i] / b_Akk[i] belong to unit warp + i * warps.
    __device__ void products(float (&b_Aqk)[UPW][4], float (&b_Akk)[UPW][4]) {
#pragma unroll
        for (int i = 0; i < UPW; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) b_Aqk[i][e] = b_Akk[i][e] = 0.f;
        for (int k0 = 0; k0 < P.K; k0 += BK) {
            __syncthreads();  // the previous slice is consumed
            stage<X, x_ld>(s_q(), P.q, P.q_s, h, k0, kp.vec_q);
            stage<X, x_ld>(s_k(), P.k, P.k_s, h, k0, kp.vec_k);
            stage<float, g_ld>(s_g(), P.g, P.g_s, hv, k0, kp.vec_g);
            __syncthreads();
            const int kmax = P.K - k0 < BK ? static_cast<int>(P.K - k0) : BK;
#pragma unroll
            for (int i = 0; i < UPW; ++i) {
                const int u = warp + i * warps;
                if (u >= traits::units) break;
                int si, sj;
                pair_of(u / 2, si, sj);
                if (si >= NS) continue;  // warp-uniform
                slice_products(b_Aqk[i], b_Akk[i], si, sj, u % 2, kmax);
            }
        }
        __syncthreads();  // the staging buffer becomes the tile buffer
    }

    // =============================================================================================
    // Phase 2: scale and park the products as tiles.

    __device__ void park_products(const float (&b_Aqk)[UPW][4], const float (&b_Akk)[UPW][4]) const {
#pragma unroll
        for (int i = 0; i < UPW; ++i) {
            const int u = warp + i * warps;
            if (u >= traits::units) break;
            int si, sj;
            pair_of(u / 2, si, sj);
            if (si >= NS) continue;
            const int nrow = rows(si);
            const int col = (u % 2) * 8 + 2 * tig;
            const int r0 = gid, r1 = gid + 8;
            float* aqk = s_aqk(si, sj);
            aqk[r0 * t_ld + col] = b_Aqk[i][0] * P.scale;
            aqk[r0 * t_ld + col + 1] = b_Aqk[i][1] * P.scale;
            aqk[r1 * t_ld + col] = b_Aqk[i][2] * P.scale;
            aqk[r1 * t_ld + col + 1] = b_Aqk[i][3] * P.scale;
            // rows past the end hold 0 (their A rows were 0); their beta is not read
            const float b_b0 = r0 < nrow ? beta_at(token(si * BC + r0)) : 0.f;
            const float b_b1 = r1 < nrow ? beta_at(token(si * BC + r1)) : 0.f;
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
        for (int s = warp; s < NS; s += warps) {
            float* b_Ai = s_ai(s, s);  // [BC, BC]
            const int nrow = rows(s);
            // Akkd's block: strict lower part (L_ss), or lower part with the diagonal (safe gate:
            // the inverse itself); zeros elsewhere, nothing past the chunk's end is read
            for (int e = lane; e < BC * BC; e += 32) {
                const int r = e / BC, j = e % BC;
                float v = 0.f;
                if (r < nrow && (Mode::safe_gate ? j <= r : j < r)) v = P.Akkd[P.Akkd_s.at(c.b, token(s * BC + r), hv) + j];
                b_Ai[r * t_ld + j] = v;
            }
            if constexpr (!Mode::safe_gate) {
                __syncwarp();
                // Forward substitution, lane j owning column j: x[r] = delta_rj - sum_{m<r} L[r, m] x[m].
                // Rows past the end hold L = 0 and come out as identity rows.
                float x[BC];
                if (lane < BC) {
#pragma unroll
                    for (int r = 0; r < BC; ++r) {
                        float acc = r == lane ? 1.f : 0.f;
#pragma unroll
                        for (int m = 0; m < r; ++m) acc = fmaf(-b_Ai[r * t_ld + m], x[m], acc);
                        x[r] = acc;
                    }
                }
                __syncwarp();  // every lane has read L before any overwrites it
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
    // Phase 5: stores, one row of BT columns at a time, coalesced.

    __device__ void store_outputs() const {
        const int n = static_cast<int>(c.n);
        for (int e = tid; e < n * BT; e += threads) {
            const int r = e / BT, col = e % BT;
            const int si = r / BC, sj = col / BC;
            if (sj > si) continue;
            const int rr = r % BC, cc = col % BC;
            const std::int64_t t = token(r);
            if (sj < si) P.Aqk[P.Aqk_s.at(c.b, t, hv) + col] = from_float<X>(s_aqk(si, sj)[rr * t_ld + cc]);
            if (col < n) P.Akk[P.Akk_s.at(c.b, t, hv) + col] = from_float<X>(s_ai(si, sj)[rr * t_ld + cc]);
        }
    }

    __device__ void run() {
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
__global__ void __launch_bounds__(kernel_traits<X, Cfg>::threads) inter_solve_kernel(const __grid_constant__ kernel_params<X> kp) {
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
