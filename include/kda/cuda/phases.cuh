// kda/cuda/phases.cuh: the chunk kernel of the CUDA backend (nvcc only): one work item as a struct of
// phases (chunk_item), and the kernel's grid loop (chunk_kernel). Its primitives are in ptx.cuh and
// mma.cuh, its constants in traits.cuh, its tuning rows in tuning.hpp, its launch in launch.cuh.
//
// One thread block computes one (chunk, value head) work item at a time, in the phases of
// detail/schedule.hpp, overridden here for the GPU but in the same order and with the seed's names.
// The same kernel runs two steps (traits.cuh): inter_solve_step reads Akkd and writes Aqk's
// off-diagonal blocks and Akk; fused_intra_step (kda::chunk_kda_intra) computes the diagonal blocks
// too, so it reads only q, k, g, beta and writes Aqk's whole causal lower triangle and Akk.
// Phases:
//   0. prefetch: beta of the chunk's rows into a register; inter-solve: the chunk's rows of Akkd
//      into shared memory (one tensor copy, or cp.async), landing behind phase 1
//   1. products, K in BK slices (tuning.hpp) copied to shared memory in a pipeline of `stages`:
//      by the tensor copy engine (cp.async.bulk.tensor, one instruction per tensor and slice from
//      one thread, completing on an mbarrier; issued before the wait for the previous slice, or
//      with tuning.hpp's late_copies inside its build round) where the tensors allow it
//      (launch.cuh: tma; rows of no 16-byte multiple through maps that join the heads, each head's
//      slices starting up to 7 columns early, the columns outside its K zeroed: mask_columns), else
//      by per-thread cp.async copies of 16, 8 or 4 bytes, or 16-bit runs from aligned words (rows
//      aligned to 2 bytes only, through registers). Each slice is first
//      *built* into tensor-core operands, once per element (build_operands), with the first row
//      gn_m and the last row gl_m of each sub-chunk m as gate references:
//        A:  q_si 2^(g_si - gn_si), k_si 2^(g_si - gn_si)   (rows past n -> 0; rounded to tf32)
//        B:  ku_sj = k_sj 2^(gl_sj - g_sj),   f(si, sj) = 2^(gn_si - gl_sj)   (per column)
//      so that the seed's b_kgt = k_sj 2^(gn_si - g_sj) = ku_sj f(si, sj), formed per fragment;
//        b_Aqk[si,sj] += b_qg b_kgt^T,  b_Akk[si,sj] += b_kg b_kgt^T       (si > sj; fused: si >= sj)
//      on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation). Off the diagonal every exponent
//      is <= 0. On the diagonal (fused) f(m, m) = 2^(gn_m - gl_m) >= 1 and the product of the
//      two factors is 2^(g_i - g_j) exactly: fine while every |g - gn_m| and |gl_m - g| inside the
//      sub-chunk stays <= intra_factor_bound (FLA's lower-bounded safe gate always does); a
//      sub-chunk past it is redone term by term (diag_exact: exact for any decay). The units of
//      16 x 8 (pair, half of sj's rows) are ordered by si and dealt to the warps in contiguous
//      runs. The A operands are stored in fragment order (one 16-byte load per fragment); inside a
//      k16 step the columns are permuted alike in A and B.
//   2. b_Aqk *= scale -> shared; row r of b_Akk *= beta[t_r] -> shared (L_ij; fused: the
//      diagonal blocks masked to j <= i (Aqk) and j < i (L))
//   3. diagonal inverses b_Ai[s] = (I + L_ss)^-1: forward substitution in fp32, one sub-chunk per
//      warp, one column per lane, in registers (inter-solve, safe gate: Akkd's lower triangle is
//      the inverse already)
//   4. block merge by distance d = i - j from the diagonal outwards:
//        Ai_ij = -Ai_ii (sum_{m=j}^{i-1} L_im Ai_mj)     (one 16 x 16 block per warp, tensor cores)
//      or, for a whole chunk of four sub-chunks (tuning.hpp: merge4), as a 2 x 2 block inverse of
//      its 32 x 32 halves in three rounds of at most two tile products per warp (merge4 below)
//   5. coalesced stores of the Aqk blocks and the lower block triangle of Akk, rows < n only,
//      columns < n only: 16-byte stores of 8 adjacent columns per lane where the outputs are
//      aligned for them (launch.cuh: vec_out), else a warp per row with two adjacent columns per
//      lane (pair_out) or single elements.
//   6. (fused_intra_wy_step: the call asks for them, kernel_params::wy) the WY outputs from the
//      unrounded Ai tiles, K (then V) in slices of 32 columns through two buffers: each thread
//      loads 8 adjacent columns of a row into registers a slice ahead, then stages beta k 2^g (or
//      beta v) as fp32 (and writes kg = k 2^(g_last - g), qg = q 2^g from the same loads); warp w
//      forms columns 8 w .. + 7 of Ai (beta k 2^g) for the chunk's rows on tensor cores (the
//      lower block triangle, Ai_ij B_j, i >= j) and stores them from its accumulators.
//
// Precision (Mode::solve_precision): mma.cuh's policy. The B operand's factorisation adds one fp32
// rounding (2^-24) and one ex2.approx to each element.
//
// Shared memory is one buffer used twice (its lifetimes do not overlap; a barrier separates them):
// during phase 1 the pipeline stages of raw slices s_q, s_k [BT, BK] (X) and s_g [BT, BK] (fp32)
// plus the built operands of one slice; then the 16 x 16 fp32 tiles of phases 2-5. beta [BT],
// Akkd [BT, BC] (fp32, inter-solve), a flag word and the mbarriers have regions of their own. The
// built operands are laid out for conflict-free 16-byte fragment loads (fragment order for A, a
// row-parity swizzle for ku). Shared memory written by ordinary stores is handed back to the copy
// engine only after a proxy fence and a block barrier (the next work item's first copies).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../detail/blocks.hpp"
#include "../params.hpp"
#include "../tile_config.hpp"
#include "../types.hpp"
#include "../varlen.hpp"
#include "mma.cuh"
#include "ptx.cuh"
#include "traits.cuh"

namespace kda::cuda {

// ---------------------------------------------------------------------------------------------
// One work item, as a struct of phases.

template <class X, class Cfg, class Mode, class Step>
struct chunk_item {
    using traits = kernel_traits<X, Cfg, Step, Mode::solve_precision>;
    using mma = mma_policy<Mode::solve_precision>;
    static constexpr int BT = traits::BT, BC = traits::BC, BK = traits::BK, NC = traits::NC, NPAIR = traits::NPAIR, D = traits::D;
    static constexpr int warps = traits::warps, threads = traits::threads, UPW = traits::units_per_warp, S = traits::stages;
    static constexpr int x_ld = traits::x_ld, g_ld = traits::g_ld, t_ld = traits::t_ld, tile_floats = traits::tile_floats;

    const kernel_params<X>& kp;
    const inter_solve_params<X>& P;
    chunk_coords c;       // rows [c.bos + c.t0, + c.n) of batch row c.b
    std::int64_t hv, h;   // value head, q/k head (GVA)
    int NS;               // sub-chunks holding at least one row
    unsigned char* smem;
    int tid, warp, lane, gid, tig;
    bool tma;             // the copy engine stages q, k, g (and Akkd): block-uniform

    __device__ chunk_item(const kernel_params<X>& kp_, std::int64_t item, unsigned char* smem_)
        : kp(kp_), P(kp_.p), smem(smem_) {
        const std::int64_t i_t = detail::udiv(item, P.HV);
        hv = item - i_t * P.HV;
        h = detail::udiv(hv, kp_.group);
        c = locate_chunk(P.chunks, kp.num_sequences, i_t);
        NS = static_cast<int>((c.n + BC - 1) / BC);
        tid = static_cast<int>(threadIdx.x);
        warp = tid / 32;
        lane = tid % 32;
        gid = lane / 4;
        tig = lane % 4;
        tma = device_has_tma && kp.tma;
    }

    // ---- geometry
    [[nodiscard]] __device__ int rows(int s) const {
        const std::int64_t r = c.n - static_cast<std::int64_t>(s) * BC;
        return r <= 0 ? 0 : (r >= BC ? BC : static_cast<int>(r));
    }
    /// Token of row r of the chunk.
    [[nodiscard]] __device__ std::int64_t token(int r) const { return c.bos + c.t0 + r; }
    /// Last valid row of sub-chunk m (its gate is gl_m).
    [[nodiscard]] __device__ int last_row(int m) const {
        const int r = m * BC + BC - 1, n = static_cast<int>(c.n);
        return r < n ? r : n - 1;
    }

    // ---- shared memory (stage st of the phase-1 pipeline; the tiles reuse the same bytes)
    __device__ X* s_q(int st) const { return reinterpret_cast<X*>(smem + st * traits::staging_bytes); }                          // [BT, BK]
    __device__ X* s_k(int st) const { return reinterpret_cast<X*>(smem + st * traits::staging_bytes + traits::x_bytes); }        // [BT, BK]
    __device__ float* s_g(int st) const { return reinterpret_cast<float*>(smem + st * traits::staging_bytes + 2 * traits::x_bytes); }  // [BT, BK]
    __device__ float* s_beta() const { return reinterpret_cast<float*>(smem + traits::off_beta_bytes); }  // [BT]
    __device__ unsigned* s_flags() const { return reinterpret_cast<unsigned*>(smem + traits::off_flags_bytes); }
    __device__ float* s_akkd() const { return reinterpret_cast<float*>(smem + traits::off_akkd_bytes); }  // [BT, BC]
    __device__ std::uint64_t* s_bar(int i) const { return reinterpret_cast<std::uint64_t*>(smem + traits::off_bars_bytes) + i; }
    __device__ float* tiles() const { return reinterpret_cast<float*>(smem); }
    /// Aqk block (si, sj), si > sj, or the diagonal block (fused) for si == sj.
    __device__ float* s_aqk(int si, int sj) const {
        return tiles() + traits::off_aqk + (si == sj ? NPAIR + si : Cfg::pair(si, sj)) * tile_floats;  // [BC, BC]
    }
    __device__ float* s_l(int si, int sj) const { return tiles() + traits::off_l + Cfg::pair(si, sj) * tile_floats; }      // [BC, BC]
    /// Ai_ij (i >= j): the diagonal inverses, then the merged blocks.
    __device__ float* s_ai(int i, int j) const {
        return tiles() + (i == j ? traits::off_ai + i * tile_floats : traits::off_aoff + Cfg::pair(i, j) * tile_floats);  // [BC, BC]
    }
    __device__ float* s_tmp() const { return tiles() + traits::off_tmp + warp * tile_floats; }  // [BC, BC]

    __device__ float beta_at(std::int64_t t) const {
        const std::int64_t off = P.beta_s.at(c.b, t, hv);
        return P.beta_is_fp32 ? static_cast<const float*>(P.beta)[off] : to_float(static_cast<const X*>(P.beta)[off]);
    }

    /// Waits on mbarrier i for its current phase and flips the parity this block expects next.
    __device__ void wait_bar(pipe_state& ps, int i) const {
        mbar_wait(s_bar(i), (ps.parity >> i) & 1u);
        ps.parity ^= 1u << i;
    }

    // =============================================================================================
    // Prefetch: beta of the chunk's rows into a register (it lands in shared memory after phase 1),
    // and (inter-solve) the chunk's rows of Akkd into their own shared region: one tensor copy on
    // barrier `stages`, or cp.async copies that complete with the first K slice's group (rows past
    // the chunk's end zero-filled there; the tensor copy reads them and the inverse ignores them),
    // so both latencies hide behind phase 1.

    float pf_beta = 0.f;  // beta of row tid (tid < n)

    __device__ void prefetch() {
        const int n = static_cast<int>(c.n);
        if (tid < n) pf_beta = beta_at(token(tid));
        if constexpr (!Step::reads_akkd) {
            if (tid == 0) *s_flags() = 0u;  // read after phase 1's barriers
            return;
        } else {
            if (tma) {
                if (tid == 0) {
                    mbar_arrive_expect_tx(s_bar(S), BT * BC * 4);
                    tma_load_4d(s_akkd(), &kp.tm.akkd, 0, static_cast<int>(hv), static_cast<int>(token(0)), static_cast<int>(c.b), s_bar(S));
                }
                return;
            }
            constexpr int PER_ROW = BC / 4, TOTAL = BT * PER_ROW;
            const float* base = P.Akkd + P.Akkd_s.at(c.b, token(0), hv);
            float* dst = s_akkd();
            for (int idx = tid; idx < TOTAL; idx += threads) {
                const int r = idx / PER_ROW, col = (idx % PER_ROW) * 4;
                const bool ok = r < n;
                if (kp.vec_akkd) {
                    cp_async16(dst + r * BC + col, ok ? base + (r * P.Akkd_s.t + col) : P.Akkd, ok);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) dst[r * BC + col + e] = ok ? base[r * P.Akkd_s.t + col + e] : 0.f;
                }
            }
        }
    }

    // =============================================================================================
    // Phase 1: products.

    /// A thread's share of staging one tensor's K slices by 16-byte cp.async copies: rows
    /// r0 + it RPI of the chunk (it < ITERS) at column col of every slice. The row pointers are
    /// worked out once per item (every row of a chunk lies in one sequence: a base and a stride).
    template <class T>
    struct stage_plan {
        static constexpr int PER = 16 / static_cast<int>(sizeof(T)), PER_ROW = BK / PER, TOTAL = BT * PER_ROW;
        static constexpr int ITERS = (TOTAL + threads - 1) / threads, RPI = threads / PER_ROW;
        static_assert(threads % PER_ROW == 0, "A thread's rows must be a fixed stride apart.");
        const T* p0;        // row r0, column col of slice 0 (dereferenced only where ok)
        std::int64_t step;  // RPI rows
        int r0, col;
        unsigned ok_rows;  // bit it: row r0 + it RPI is inside the chunk (and the copy exists)
    };

    template <class T>
    __device__ stage_plan<T> plan(const T* src, const axis_strides& st, std::int64_t head) const {
        using PL = stage_plan<T>;
        stage_plan<T> r;
        r.r0 = tid / PL::PER_ROW;
        r.col = (tid % PL::PER_ROW) * PL::PER;
        r.step = static_cast<std::int64_t>(PL::RPI) * st.t;
        r.p0 = src + (st.at(c.b, token(0), head) + r.r0 * st.t + r.col);
        r.ok_rows = 0;
#pragma unroll
        for (int it = 0; it < PL::ITERS; ++it)
            if (tid + it * threads < PL::TOTAL && r.r0 + it * PL::RPI < c.n) r.ok_rows |= 1u << it;
        return r;
    }

    /// Stages columns [k0, k0 + BK) of the chunk's BT rows into dst (pitch LD) as cp.async copies
    /// that complete asynchronously (the caller commits and waits); rows past the chunk's end and
    /// columns at or past klim = K - k0 are zero-filled.
    template <class T, int LD>
    __device__ void stage_vec(T* dst, const T* src, const stage_plan<T>& pl, int k0, int klim) const {
        using PL = stage_plan<T>;
#pragma unroll
        for (int it = 0; it < PL::ITERS; ++it) {
            if (PL::TOTAL % threads != 0 && tid + it * threads >= PL::TOTAL) break;
            const bool ok = ((pl.ok_rows >> it) & 1u) != 0 && pl.col < klim;
            cp_async16(dst + (pl.r0 + it * PL::RPI) * LD + pl.col, ok ? pl.p0 + (it * pl.step + k0) : src, ok);
        }
    }

    /// The same element by element through registers (complete when the caller's barrier passes),
    /// batches of 4 loads, then their 4 stores: 4-byte data whose rows are not 4-byte aligned (a
    /// pointer off its element's alignment; never for validated tensors).
    template <class T, int LD>
    __device__ void stage_scalar(T* dst, const T* src, const axis_strides& st, std::int64_t head, int k0) const {
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

    /// The same for 16-bit rows aligned to 2 bytes only (odd K, or a view one element off): each
    /// thread stages a run of 8 elements of one row with one round of loads, the 4-byte words
    /// inside the run where the run starts on a word (four) or one element past one (the first and
    /// last elements by 2-byte loads, the three words between them), shifted into place in
    /// registers, then one 16-byte shared store. No load leaves the run, so none leaves the row.
    /// Runs cut by K take element loads. Complete when the caller's barrier passes.
    template <class T, int LD>
    __device__ void stage_words(T* dst, const T* src, const axis_strides& st, std::int64_t head, int k0) const {
        static_assert(sizeof(T) == 2 && BK % 8 == 0 && (LD * 2) % 16 == 0, "runs of 8 16-bit elements, 16-byte stores");
        constexpr int runs = BK / 8, total = BT * runs;
#pragma unroll 1
        for (int i = tid; i < total; i += threads) {
            const int r = i / runs, col = (i % runs) * 8;
            const std::int64_t left = r < c.n ? P.K - k0 - col : 0;
            const int n = left <= 0 ? 0 : left >= 8 ? 8 : static_cast<int>(left);  // elements of the run inside K
            std::uint32_t w[4] = {0u, 0u, 0u, 0u};
            if (n > 0) {
                const auto* e = reinterpret_cast<const std::uint16_t*>(src + (st.at(c.b, token(r), head) + k0 + col));
                if (n < 8) {
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        if (j < n) w[j / 2] |= static_cast<std::uint32_t>(e[j]) << (16 * (j % 2));
                } else if ((reinterpret_cast<std::uintptr_t>(e) & 3u) == 0) {
                    const auto* u = reinterpret_cast<const std::uint32_t*>(e);
#pragma unroll
                    for (int j = 0; j < 4; ++j) w[j] = u[j];
                } else {
                    const auto* u = reinterpret_cast<const std::uint32_t*>(e + 1);  // elements 1-2, 3-4, 5-6
                    const std::uint32_t first = e[0], a = u[0], b = u[1], cc = u[2], last = e[7];
                    w[0] = first | (a << 16);
                    w[1] = __byte_perm(a, b, 0x5432);
                    w[2] = __byte_perm(b, cc, 0x5432);
                    w[3] = (cc >> 16) | (last << 16);
                }
            }
            *reinterpret_cast<uint4*>(dst + r * LD + col) = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }

    /// The same for rows aligned to W = 8 or 4 bytes but not 16: W-byte cp.async copies at the
    /// element offsets that are multiples of W, asynchronous like stage_vec's. A copy that straddles
    /// K reads only the bytes inside it; rows past the chunk's end read nothing (both zero-filled).
    template <class T, int LD, int W>
    __device__ void stage_narrow(T* dst, const T* src, const axis_strides& st, std::int64_t head, int k0) const {
        constexpr int per = W / static_cast<int>(sizeof(T)), per_row = BK / per, total = BT * per_row;
        static_assert(per >= 1 && BK % per == 0, "A slice's row is whole copies.");
        const std::int64_t left = P.K - k0;
#pragma unroll 1
        for (int i = tid; i < total; i += threads) {
            const int r = i / per_row, col = (i % per_row) * per;
            const std::int64_t inside = r < c.n ? left - col : 0;  // elements of this copy inside K
            const int bytes = inside <= 0 ? 0 : inside >= per ? W : static_cast<int>(inside) * static_cast<int>(sizeof(T));
            const T* p = bytes > 0 ? src + (st.at(c.b, token(r), head) + k0 + col) : src;
            cp_async_bytes<W>(dst + r * LD + col, p, bytes);
        }
    }

    /// One tensor's share of slice k0: 16-byte copies (vec), 8- or 4-byte ones, or (16-bit rows
    /// aligned to 2 bytes only) runs staged from aligned words.
    template <class T, int LD>
    __device__ void stage_tensor(T* dst, const T* src, const stage_plan<T>& pl, const axis_strides& st, std::int64_t head, int k0,
                                 int klim, bool vec, int narrow) const {
        if (vec)
            stage_vec<T, LD>(dst, src, pl, k0, klim);
        else if (narrow == 8)
            stage_narrow<T, LD, 8>(dst, src, st, head, k0);
        else if constexpr (sizeof(T) == 2) {
            if (narrow == 4)
                stage_narrow<T, LD, 4>(dst, src, st, head, k0);
            else
                stage_words<T, LD>(dst, src, st, head, k0);
        } else if (narrow == 4) {
            stage_narrow<T, LD, 4>(dst, src, st, head, k0);
        } else {
            stage_scalar<T, LD>(dst, src, st, head, k0);
        }
    }

    struct stage_plans {
        stage_plan<X> q, k;
        stage_plan<float> g;
    };

    /// Per-thread staging of slice k0 into stage st (cp.async copies; 16-bit runs through registers).
    __device__ void stage_slice(const stage_plans& pl, int st, int k0) const {
        const std::int64_t left = P.K - k0;
        const int klim = left < BK ? static_cast<int>(left) : BK;
        stage_tensor<X, x_ld>(s_q(st), P.q, pl.q, P.q_s, h, k0, klim, kp.vec_q, kp.narrow_q);
        stage_tensor<X, x_ld>(s_k(st), P.k, pl.k, P.k_s, h, k0, klim, kp.vec_k, kp.narrow_k);
        stage_tensor<float, g_ld>(s_g(st), P.g, pl.g, P.g_s, hv, k0, klim, kp.vec_g, kp.narrow_g);
    }

    /// Tensor-copy staging of slice k0 into stage st: three boxes from thread 0, on barrier st.
    /// Rows past T and columns past K arrive as zeros; rows past the chunk's end inside T (varlen:
    /// the next sequence) arrive as data and are masked by the build. Joined maps: the slice's
    /// columns are the head's k0 - shift .. + BK - 1, the box of head h at column h s + k0 - shift
    /// (s: the tensor's head stride), on a 16-byte boundary; mask_columns zeroes what lies outside
    /// the head's K.
    /// GMap = false (Step::g_threads): q and k alone by the copy engine (g: stage_g_threads).
    template <bool Joined, bool GMap>
    __device__ void stage_slice_tma(int st, int k0, int shift) const {
        static_assert(Joined || GMap, "The maps of rows copy g too.");
        if (tid != 0) return;
        const int t = static_cast<int>(token(0)), b = static_cast<int>(c.b);
        mbar_arrive_expect_tx(s_bar(st), GMap ? traits::staging_bytes : 2 * traits::x_bytes);
        if constexpr (Joined) {
            tma_load_3d(s_q(st), &kp.tm.q, static_cast<int>(h * P.q_s.h + k0 - shift), t, b, s_bar(st));
            tma_load_3d(s_k(st), &kp.tm.k, static_cast<int>(h * P.k_s.h + k0 - shift), t, b, s_bar(st));
            if constexpr (GMap) tma_load_3d(s_g(st), &kp.tm.g, static_cast<int>(hv * P.g_s.h + k0 - shift), t, b, s_bar(st));
        } else {
            (void)shift;
            tma_load_4d(s_q(st), &kp.tm.q, k0, static_cast<int>(h), t, b, s_bar(st));
            tma_load_4d(s_k(st), &kp.tm.k, k0, static_cast<int>(h), t, b, s_bar(st));
            tma_load_4d(s_g(st), &kp.tm.g, k0, static_cast<int>(hv), t, b, s_bar(st));
        }
    }

    /// Joined maps with g staged per thread: columns [k0s, k0s + BK) of value head hv's g rows
    /// (k0s = 16 s - shift, the columns of q's and k's boxes) by 4-byte cp.async copies, rows past
    /// the chunk's end and columns outside [0, K) zero-filled (what mask_columns does for g
    /// otherwise). Each thread's copies sit in the same column of every slice; the caller commits.
    __device__ void stage_g_threads(int st, std::int64_t k0s) const {
        static_assert(threads % BK == 0, "A thread's g copies must stay in one column.");
        constexpr int RPI = threads / BK;
        const int r0 = tid / BK, col = tid % BK;
        const std::int64_t kc = k0s + col;
        const bool col_ok = kc >= 0 && kc < P.K;
        const float* p = P.g + (P.g_s.at(c.b, token(r0), hv) + kc);
        const std::int64_t step = RPI * P.g_s.t;
        float* dst = s_g(st) + r0 * g_ld + col;
#pragma unroll
        for (int r = r0; r < BT; r += RPI, p += step, dst += RPI * g_ld) {
            const bool ok = col_ok && r < c.n;
            cp_async_bytes<4>(dst, ok ? p : P.g, ok ? 4 : 0);
        }
    }

    /// Joined maps: zeroes the columns of staged slice st outside [lo, hi) (q, k and, unless it
    /// was staged per thread, g; every row), the neighbouring heads' data in a slice that starts
    /// before the head's first column or reaches past its K. With g = 0 there, every factor the
    /// build forms in those columns is 2^0 and every operand 0. Ordered before the copy engine's
    /// next writes to the stage.
    template <bool MaskG>
    __device__ void mask_columns(int st, int lo, int hi) const {
        X* sq = s_q(st);
        X* sk = s_k(st);
        float* sg = s_g(st);
#pragma unroll 1
        for (int i = tid; i < BT * BK; i += threads) {
            const int r = i / BK, col = i % BK;
            if (col >= lo && col < hi) continue;
            sq[r * x_ld + col] = X{};
            sk[r * x_ld + col] = X{};
            if constexpr (MaskG) sg[r * g_ld + col] = 0.f;
        }
        fence_proxy_async();
    }

    /// Unit u (16 x 8 product) -> sub-chunk si and the 8-column tile j8 of the block row si
    /// (columns j8 * 8 .. + 7 of sj = j8 / 2). Units run by si, then j8: the block row si holds
    /// 2 (si + D) units starting at u = si (si - 1 + 2 D), so the contiguous units of one warp
    /// mostly share si and with it the gated A operands.
    __device__ static void unit_of(int u, int& si, int& j8) {
        si = 1 - D;
        while ((si + 1) * (si + 2 * D) <= u) ++si;
        j8 = u - si * (si - 1 + 2 * D);
    }
    /// Row of the column factors f for block (si, sj): the pair, or NPAIR + si on the diagonal.
    __device__ static int f_row(int si, int sj) { return sj < si ? Cfg::pair(si, sj) : NPAIR + si; }

    // ---- built operands of one slice: fp32 rows of BK, 16-byte chunks swizzled by the row's
    // parity so that the fragment loads (two rows x four chunks per quarter warp) hit 32 banks
    // (BK = 16: rows of 64 bytes, two rows per bank cycle already; no swizzle).
    __device__ static int op_at(int row, int col) {
        if constexpr (BK == 16) return row * BK + col;
        return row * BK + (((col >> 2) ^ ((row & 1) << 2)) << 2) + (col & 3);
    }
    __device__ float* ops() const { return reinterpret_cast<float*>(smem + S * traits::staging_bytes); }

    /// Four adjacent staged elements as floats (p 4-element aligned).
    __device__ static float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
    __device__ static float4 load4(const bf16_t* p) {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                           __uint_as_float(w.y & 0xffff0000u));
    }
    __device__ static float4 load4(const fp16_t* p) {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w.x)), b = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
        return make_float4(a.x, a.y, b.x, b.y);
    }
    /// The gate exponents of detail/blocks.hpp on four adjacent columns.
    __device__ static float4 down4(float4 g, float4 gn) {
        return make_float4(detail::down_exponent(g.x, gn.x), detail::down_exponent(g.y, gn.y), detail::down_exponent(g.z, gn.z),
                           detail::down_exponent(g.w, gn.w));
    }
    __device__ static float4 up4(float4 r, float4 g) {
        return make_float4(detail::up_exponent(r.x, g.x), detail::up_exponent(r.y, g.y), detail::up_exponent(r.z, g.z), detail::up_exponent(r.w, g.w));
    }
    __device__ static float4 pair4(float4 gn, float4 r) {
        return make_float4(detail::pair_exponent(gn.x, r.x), detail::pair_exponent(gn.y, r.y), detail::pair_exponent(gn.z, r.z),
                           detail::pair_exponent(gn.w, r.w));
    }
    __device__ static float4 exp2_4(float4 a) { return make_float4(fast_exp2(a.x), fast_exp2(a.y), fast_exp2(a.z), fast_exp2(a.w)); }
    __device__ static float max_abs4(float w, float4 d) { return fmaxf(fmaxf(fmaxf(w, fabsf(d.x)), fmaxf(fabsf(d.y), fabsf(d.z))), fabsf(d.w)); }

    /// A operands in mma fragment order: the 16-byte slot of lane (g, t) for A sub-chunk a (= si - a_first),
    /// k16 step kq and k8 half h holds {A[g][c], A[g + 8][c], A[g][c + 1], A[g + 8][c + 1]},
    /// c = 16 kq + 4 t + 2 h: one 16-byte load is a whole fragment (k-slots t, t + 4 <- c, c + 1).
    __device__ static int a_slot(int a, int kq, int hf, int lane_) { return (((a * (BK / 16) + kq) * 2 + hf) * 32 + lane_) * 4; }

    /// Builds the operands of staged slice st, once per element (rows of sub-chunk m, reference
    /// rows gn_m = first row of m, gl_m = last valid row of m):
    ///   A: aq = q 2^(g - gn_m), ak = k 2^(g - gn_m)       m = a_first .. NS - 1 (rows past n: 0)
    ///   B: ku = k 2^(gl_m - g)                            m = 0 .. NS - 2 + D (rows past n: 0)
    ///   f(si, sj) = 2^(gn_si - gl_sj)                     si > sj (and si == sj: fused), si < NS
    /// so that k_sj 2^(gn_si - g_sj) = ku_sj f(si, sj) (the seed's b_kgt), formed per fragment.
    /// A operands are stored as the precision's prepared values (tf32: already rounded). A task is
    /// the rows p, p + 8 of sub-chunk m at the four columns 16 kq + 4 t .. + 3, i.e. the lane (p, t)
    /// slots of both k8 halves: consecutive lanes take consecutive t, then p. Fused: worst[it]
    /// collects the largest |g - gn_m| and |gl_m - g| of the thread's task it (valid rows).
    __device__ void build_operands(int st, float (&worst)[traits::build_iters]) const {
        const X* sq = s_q(st);
        const X* sk = s_k(st);
        const float* sg = s_g(st);
        float* op = ops();
        constexpr int KQ = BK / 16;
        const int n = static_cast<int>(c.n);
        const bool partial = n < BT;  // block-uniform: rows past n exist and hold zeros or another sequence's data
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int it = 0; it < traits::build_iters; ++it) {
            const int task = tid + it * threads;
            if (task >= BT * BK / 8) break;
            const int t = task % 4, p = (task / 4) % 8, m = task / (32 * KQ);
            const int kq = (task / 32) % KQ;
            if (m >= NS) break;  // m ascends with task (warp-uniform)
            const int col = 16 * kq + 4 * t;
            const int r0 = m * BC + p, r1 = r0 + 8;
            const bool v0 = r0 < n, v1 = r1 < n;
            // rows past n: q = k = 0 with the gate of the reference row (2^0), not their staged g
            // (2^(g - gn) may be inf there, and 0 inf is NaN)
            const float4 g0 = load4(sg + (v0 ? r0 : m * BC) * g_ld + col), g1 = load4(sg + (v1 ? r1 : m * BC) * g_ld + col);
            float4 k0 = load4(sk + r0 * x_ld + col), k1 = load4(sk + r1 * x_ld + col);
            if (partial) {
                if (!v0) k0 = zero;
                if (!v1) k1 = zero;
            }
            // with flat_build (tuning.hpp) both parts are computed for every m and only their stores
            // depend on m (the operands of a sub-chunk without A or ku rows go nowhere), so that
            // the compiler may interleave the two parts' chains
            constexpr bool flat = traits::tune.flat_build;
            const bool do_a = m >= traits::a_first, do_ku = m + 1 < NS + D;
            if (flat || do_a) {
                const float4 gn = load4(sg + m * BC * g_ld + col);
                const float4 d0 = down4(g0, gn), d1 = down4(g1, gn);
                const float4 e0 = exp2_4(d0), e1 = exp2_4(d1);
                if constexpr (Step::diagonal_blocks) worst[it] = max_abs4(max_abs4(worst[it], d0), d1);
                float4 q0 = load4(sq + r0 * x_ld + col), q1 = load4(sq + r1 * x_ld + col);
                if (partial) {
                    if (!v0) q0 = zero;
                    if (!v1) q1 = zero;
                }
                constexpr int half = 32 * 4;  // floats from the first k8 half's slots to the second's
                auto prep = [](float a, float ea, float b, float eb, float c_, float ec, float d, float ed) {
                    return make_float4(mma::prepare(a * ea), mma::prepare(b * eb), mma::prepare(c_ * ec), mma::prepare(d * ed));
                };
                const float4 aq0 = prep(q0.x, e0.x, q1.x, e1.x, q0.y, e0.y, q1.y, e1.y), aq1 = prep(q0.z, e0.z, q1.z, e1.z, q0.w, e0.w, q1.w, e1.w);
                const float4 ak0 = prep(k0.x, e0.x, k1.x, e1.x, k0.y, e0.y, k1.y, e1.y), ak1 = prep(k0.z, e0.z, k1.z, e1.z, k0.w, e0.w, k1.w, e1.w);
                if (!flat || do_a) {
                    const int slot = a_slot(do_a ? m - traits::a_first : 0, kq, 0, 4 * p + t);
                    float* aq = op + traits::off_op_aq + slot;
                    float* ak = op + traits::off_op_ak + slot;
                    *reinterpret_cast<float4*>(aq) = aq0;
                    *reinterpret_cast<float4*>(aq + half) = aq1;
                    *reinterpret_cast<float4*>(ak) = ak0;
                    *reinterpret_cast<float4*>(ak + half) = ak1;
                }
            }
            if (flat || do_ku) {
                const float4 gl = load4(sg + (Step::diagonal_blocks ? last_row(m) : m * BC + BC - 1) * g_ld + col);
                const float4 d0 = up4(gl, g0), d1 = up4(gl, g1);
                if constexpr (Step::diagonal_blocks) worst[it] = max_abs4(max_abs4(worst[it], d0), d1);
                const float4 u0 = exp2_4(d0), u1 = exp2_4(d1);
                const float4 ku0 = make_float4(k0.x * u0.x, k0.y * u0.y, k0.z * u0.z, k0.w * u0.w);
                const float4 ku1 = make_float4(k1.x * u1.x, k1.y * u1.y, k1.z * u1.z, k1.w * u1.w);
                if (!flat || do_ku) {
                    *reinterpret_cast<float4*>(op + traits::off_op_ku + op_at(r0, col)) = ku0;
                    *reinterpret_cast<float4*>(op + traits::off_op_ku + op_at(r1, col)) = ku1;
                }
            }
        }
        // the column factors; with late copies (tuning.hpp) from the last warp down, as warp 0
        // issues the tensor copies in this round
        constexpr int CPR = BK / 4;  // 4-column groups per row
        constexpr int FTASKS = traits::blocks * CPR;
        const int ftask = (traits::tune.late_copies ? warps - 1 - warp : warp) * 32 + lane;
#pragma unroll
        for (int j = 0; j < (FTASKS + threads - 1) / threads; ++j) {
            const int task = ftask + j * threads;
            if (task >= FTASKS) break;
            const int pr = task / CPR, col = (task % CPR) * 4;
            int si, sj;
            if (pr < NPAIR) {
                Cfg::pair_of(pr, si, sj);
            } else {
                si = sj = pr - NPAIR;  // fused: the diagonal block of sub-chunk si
            }
            if (si >= NS) continue;
            const int gl_row = Step::diagonal_blocks ? last_row(sj) : sj * BC + BC - 1;
            const float4 f = exp2_4(pair4(load4(sg + si * BC * g_ld + col), load4(sg + gl_row * g_ld + col)));
            *reinterpret_cast<float4*>(op + traits::off_op_f + pr * BK + col) = f;
        }
    }

    /// A warp's units, each as one word of three warp-uniform offsets into the built operands of a
    /// slice (the lane's own part is added at use): the A fragment slots of the unit's sub-chunk
    /// (k16 step 0, k8 half 0), its 8 B rows of ku, its block's column-factor row; new_a bit i:
    /// unit i's A fragments differ from unit i - 1's (units run by sub-chunk). The offsets count
    /// floats for 16-column slices (12 + 12 + 8 bits) and 16-byte pieces for wider ones (the
    /// measurement hooks' BK 32 to 128: 11 + 11 + 10 bits).
    struct unit_plan {
        static constexpr int shift = BK == 16 ? 0 : 2;  // log2 of the offsets' unit, in floats
        static constexpr int a_bits = BK == 16 ? 12 : 11, kb_bits = BK == 16 ? 12 : 11;
        unsigned code[UPW];
        unsigned new_a = 0;
        int valid = 0;  // units of this warp inside the chunk (the first `valid`)
        __device__ int a(int i) const { return static_cast<int>(code[i] & ((1u << a_bits) - 1)) << shift; }
        __device__ int kb(int i) const { return static_cast<int>((code[i] >> a_bits) & ((1u << kb_bits) - 1)) << shift; }
        __device__ int f(int i) const { return static_cast<int>(code[i] >> (a_bits + kb_bits)) << shift; }
        static constexpr unsigned encode(int a, int kb, int f) {
            return static_cast<unsigned>(a >> shift) | (static_cast<unsigned>(kb >> shift) << a_bits) |
                   (static_cast<unsigned>(f >> shift) << (a_bits + kb_bits));
        }
    };
    static_assert((traits::op_rows / BC) * (BK / 16) * 2 * 32 * 4 <= (1 << (unit_plan::a_bits + unit_plan::shift)) &&
                      traits::op_rows * BK <= (1 << (unit_plan::kb_bits + unit_plan::shift)) &&
                      traits::blocks * BK <= (1 << (32 - unit_plan::a_bits - unit_plan::kb_bits + unit_plan::shift)),
                  "A unit's operand offsets must fit its code word.");

    /// This warp's units over the built operands of one slice, k in [0, kmax). Inside a k16 step
    /// the columns are permuted (the mma sums over k, so A and B only need the same order): k8
    /// half h gives k-slots tig, tig + 4 the columns 4 tig + 2 h, 4 tig + 2 h + 1. A fragments are
    /// one 16-byte load each (a_slot); the B rows of lane (gid, tig) are one 16-byte chunk of ku,
    /// times the block's column factors, rounded per fragment. With flat_units (tuning.hpp) every unit
    /// slot is computed, valid or not (a slot past the chunk reads operands of another sub-chunk
    /// and park_products drops it), so the units form one branch-free sequence whose shared-memory
    /// loads and tensor-core products the compiler may interleave.
    __device__ void slice_products(float (&b_Aqk)[UPW][4], float (&b_Akk)[UPW][4], const unit_plan& up, int kmax) const {
        const float* op = ops();
        // Every row this lane loads has the parity of gid, so the swizzled chunk of k16 step kq is
        // 4 (kq ^ (gid & 1)) + tig: a lane offset per parity of kq plus 32 per pair of steps.
        const int lo0 = 16 * (gid & 1) + 4 * tig, lo1 = 16 * ((gid & 1) ^ 1) + 4 * tig;
        constexpr int ak_from_aq = traits::off_op_ak - traits::off_op_aq;
        constexpr int half = 32 * 4;  // floats from a k8 half's A slots to the next half's
#pragma unroll
        for (int kq = 0; kq < BK / 16; ++kq) {
            if (16 * kq >= kmax) break;
            const int lo = BK == 16 ? 4 * tig : ((kq & 1) ? lo1 : lo0) + 32 * (kq >> 1);
            typename mma::a_frag qa[2], ka[2];
#pragma unroll
            for (int i = 0; i < UPW; ++i) {
                if (!traits::tune.flat_units && i >= up.valid) break;  // warp-uniform
                if (i == 0 || ((up.new_a >> i) & 1u) != 0u) {       // warp-uniform
                    const float* aq = op + (traits::off_op_aq + 4 * lane) + up.a(i) + kq * 2 * half;
                    const float4 q0 = load4(aq), q1 = load4(aq + half), k0 = load4(aq + ak_from_aq), k1 = load4(aq + ak_from_aq + half);
                    qa[0] = mma::make_a_prepared(q0.x, q0.y, q0.z, q0.w);
                    qa[1] = mma::make_a_prepared(q1.x, q1.y, q1.z, q1.w);
                    ka[0] = mma::make_a_prepared(k0.x, k0.y, k0.z, k0.w);
                    ka[1] = mma::make_a_prepared(k1.x, k1.y, k1.z, k1.w);
                }
                const float4 kb = load4(op + (traits::off_op_ku + gid * BK + lo) + up.kb(i));
                const float4 f = load4(op + (traits::off_op_f + 4 * tig + 16 * kq) + up.f(i));
                const typename mma::b_frag b0 = mma::make_b(kb.x * f.x, kb.y * f.y), b1 = mma::make_b(kb.z * f.z, kb.w * f.w);
                mma::mma(b_Aqk[i], qa[0], b0);
                mma::mma(b_Akk[i], ka[0], b0);
                mma::mma(b_Aqk[i], qa[1], b1);
                mma::mma(b_Akk[i], ka[1], b1);
            }
        }
    }

    /// This warp's units: u = warp * UPW + i, valid while u < units and its sub-chunk holds rows
    /// (si ascends with u, so the valid ones come first). A slot past them takes the offsets of
    /// the last unit of the chunk (in range; its results are dropped).
    __device__ unit_plan my_units() const {
        unit_plan up;
        int prev_si = -1;
#pragma unroll
        for (int i = 0; i < UPW; ++i) {
            const int u = warp * UPW + i;
            int si, j8;
            unit_of(u < traits::units ? u : traits::units - 1, si, j8);
            if (u < traits::units && si < NS) up.valid = i + 1;
            up.code[i] = unit_plan::encode(a_slot(si - traits::a_first, 0, 0, 0), j8 * 8 * BK, f_row(si, j8 / 2) * BK);
            if (si != prev_si) up.new_a |= 1u << i;
            prev_si = si;
        }
        return up;
    }

    /// Phase 1 over all K slices, pipelined over S stages: slices s + 1 .. s + S - 1 are in flight
    /// while slice s is built into operands and multiplied.
    __device__ void products(float (&b_Aqk)[UPW][4], float (&b_Akk)[UPW][4], pipe_state& ps) {
#pragma unroll
        for (int i = 0; i < UPW; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) b_Aqk[i][e] = b_Akk[i][e] = 0.f;
        const unit_plan up = my_units();
        float worst[traits::build_iters];
#pragma unroll
        for (int it = 0; it < traits::build_iters; ++it) worst[it] = 0.f;
        // slice s has landed in stage s % S: build it, then multiply (the first barrier also
        // waits for the products of s - 1 to be done with the operands); the slices hold columns
        // up to kend (K, or K + shift with joined maps)
        auto consume = [&](int s, std::int64_t kend, auto&& issue) {
            __syncthreads();
            issue();
            build_operands(s % S, worst);
            __syncthreads();  // the operands of s are built
            const std::int64_t left = kend - static_cast<std::int64_t>(s) * BK;
            slice_products(b_Aqk, b_Akk, up, left < BK ? static_cast<int>(left) : BK);
        };
        // in both pipelines the stage of slice s + S - 1 held slice s - 1, whose build everyone
        // finished before the middle barrier of s - 1
        if (tma) {
            // slice s + S - 1 goes to the stage that slice s - 1 left (free since the middle barrier
            // of s - 1): before waiting for s, or (late_copies) after the first barrier of s, beside
            // warp 0's share of the build rather than after its products. Joined maps (their own
            // copy of the loop, so that the maps of rows keep their code): the head's columns run
            // from shift to K + shift in the slices, the first and last slices masked. GThreads
            // (the step's own instantiation, Step::g_threads): q and k through joined maps, g's
            // slices from per-thread copies, one cp.async group per slice issued (empty past the
            // last), waited for beside the slice's mbarrier.
            auto pipeline = [&]<bool Joined, bool GThreads>() {
                constexpr bool late = traits::tune.late_copies;
                const int shift = Joined ? static_cast<int>((h * P.q_s.h) & (16 / static_cast<int>(sizeof(X)) - 1)) : 0;
                const std::int64_t kend = P.K + shift;
                const int nslices = static_cast<int>((kend + BK - 1) / BK);
                // g's copies of slice s (GThreads): one group per slice, empty past the last
                auto issue_g = [&](int s) {
                    if (s < nslices) stage_g_threads(s % S, static_cast<std::int64_t>(s) * BK - shift);
                    cp_async_commit();
                };
                for (int s = 0; s < S - 1 && s < nslices; ++s) stage_slice_tma<Joined, !GThreads>(s, s * BK, shift);
                if constexpr (GThreads)
                    for (int s = 0; s < S - 1; ++s) issue_g(s);
                for (int s = 0; s < nslices; ++s) {
                    auto next = [&] {
                        if (s + S - 1 < nslices) stage_slice_tma<Joined, !GThreads>((s + S - 1) % S, (s + S - 1) * BK, shift);
                    };
                    if constexpr (!late) next();
                    if constexpr (GThreads) issue_g(s + S - 1);  // outside consume: the stage is free since the middle barrier of s - 1
                    wait_bar(ps, s % S);  // the copies of slice s have landed
                    if constexpr (Joined) {
                        if constexpr (GThreads) cp_async_wait<S - 1>();  // this thread's g copies of slice s
                        const std::int64_t hi = kend - static_cast<std::int64_t>(s) * BK;
                        const int lo = s == 0 ? shift : 0;
                        if (lo > 0 || hi < BK) mask_columns<!GThreads>(s % S, lo, hi < BK ? static_cast<int>(hi) : BK);  // before consume's first barrier
                    }
                    consume(s, kend, [&] {
                        if constexpr (late) next();
                    });
                }
                if constexpr (GThreads) cp_async_wait<0>();  // the empty groups past the last slice
            };
            if constexpr (Step::g_threads)
                pipeline.template operator()<true, true>();
            else if (kp.joined)
                pipeline.template operator()<true, false>();
            else
                pipeline.template operator()<false, false>();
            // the next item's first copies wait for the kernel loop's fence + barrier
        } else {
            const int nslices = static_cast<int>((P.K + BK - 1) / BK);
            const stage_plans pl{plan(P.q, P.q_s, h), plan(P.k, P.k_s, h), plan(P.g, P.g_s, hv)};
            for (int s = 0; s < S - 1; ++s) {
                if (s < nslices) stage_slice(pl, s, s * BK);
                cp_async_commit();
            }
            for (int s = 0; s < nslices; ++s) {
                if (s + S - 1 < nslices) stage_slice(pl, (s + S - 1) % S, (s + S - 1) * BK);
                cp_async_commit();
                cp_async_wait<S - 1>();  // this thread's copies of slice s have landed (everyone's: the barrier in consume)
                consume(s, P.K, [] {});
            }
            cp_async_wait<0>();
        }
        if constexpr (Step::diagonal_blocks) {
            // sub-chunks whose diagonal blocks left the factorisation's range (the m of task it is
            // warp-uniform: 32 consecutive tasks share it)
            constexpr int KQ = BK / 16;
#pragma unroll
            for (int it = 0; it < traits::build_iters; ++it) {
                const int task = tid + it * threads;
                const int m = task / (32 * KQ);
                const unsigned bad = __ballot_sync(0xffffffffu, !(worst[it] <= intra_factor_bound) && task < BT * BK / 8 && m < NS);
                if (bad != 0u && lane == 0) atomicOr(s_flags(), 1u << m);
            }
        }
        if (tid < BT) s_beta()[tid] = pf_beta;  // 0 past the chunk's end
        __syncthreads();  // the staging buffers become the tile buffer
    }

    // =============================================================================================
    // Phase 2: scale and park the products as tiles (fused: the diagonal blocks masked, L_ss into
    // the diagonal tiles that phase 3 inverts in place).

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
            // rows past the end hold 0 (their A rows were 0); s_beta holds 0 there
            const float b_b0 = sb[si * BC + r0];
            const float b_b1 = sb[si * BC + r1];
            float* aqk = s_aqk(si, sj);
            float* l = sj < si ? s_l(si, sj) : s_ai(si, si);
            const float sc = P.scale;
            // the diagonal blocks (fused) keep their causal parts, Aqk j <= i and L j < i (rows and
            // columns past n: their operands were 0); off the diagonal every entry is kept
            const bool diag = Step::diagonal_blocks && sj == si;
            auto put = [&](int r, int cc, float vq, float vk, float b) {
                aqk[r * t_ld + cc] = !diag || cc <= r ? vq * sc : 0.f;
                l[r * t_ld + cc] = !diag || cc < r ? vk * b : 0.f;
            };
            put(r0, col, b_Aqk[i][0], b_Akk[i][0], b_b0);
            put(r0, col + 1, b_Aqk[i][1], b_Akk[i][1], b_b0);
            put(r1, col, b_Aqk[i][2], b_Akk[i][2], b_b1);
            put(r1, col + 1, b_Aqk[i][3], b_Akk[i][3], b_b1);
        }
    }

    /// Fused, a sub-chunk past the factorisation bound: its diagonal blocks term by term on one
    /// warp, 2^(g_i - g_j) per term (exponent <= 0 for decaying gates: exact for any decay), from
    /// global memory, into the tiles park_products filled: Aqk (j <= i, scaled) and L_ss (j < i,
    /// times beta). Lane: row i = lane % 16, columns j = 2 e + lane / 16.
    __device__ void diag_exact(int m) const {
        const int i = lane % BC, half = lane / BC, nrow = rows(m);
        float aq[BC / 2] = {}, ak[BC / 2] = {};
        if (i < nrow) {
            const std::int64_t ti = token(m * BC + i);
            const X* qi = P.q + P.q_s.at(c.b, ti, h);
            const X* ki = P.k + P.k_s.at(c.b, ti, h);
            const float* gi = P.g + P.g_s.at(c.b, ti, hv);
#pragma unroll 1
            for (std::int64_t kk = 0; kk < P.K; ++kk) {
                const float qv = to_float(qi[kk]), kv = to_float(ki[kk]), gv = gi[kk];
#pragma unroll
                for (int e = 0; e < BC / 2; ++e) {
                    const int j = 2 * e + half;
                    if (j <= i) {
                        const std::int64_t tj = token(m * BC + j);
                        const float kj = to_float(P.k[P.k_s.at(c.b, tj, h) + kk]) * fast_exp2(gv - P.g[P.g_s.at(c.b, tj, hv) + kk]);
                        aq[e] = fmaf(qv, kj, aq[e]);
                        ak[e] = fmaf(kv, kj, ak[e]);
                    }
                }
            }
        }
        const float b_i = s_beta()[m * BC + i];
        float* aqk = s_aqk(m, m);
        float* l = s_ai(m, m);
#pragma unroll
        for (int e = 0; e < BC / 2; ++e) {
            const int j = 2 * e + half;
            aqk[i * t_ld + j] = i < nrow && j <= i ? aq[e] * static_cast<float>(P.scale) : 0.f;
            l[i * t_ld + j] = i < nrow && j < i ? ak[e] * b_i : 0.f;
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
            if constexpr (Step::reads_akkd) {
                // Akkd's block (staged by prefetch): strict lower part (L_ss), or lower part with
                // the diagonal (safe gate: the inverse itself); zeros elsewhere, nothing past the
                // chunk's end. Lane: row lane / 2, columns 8 (lane % 2) .. + 7, as two 16-byte
                // loads and stores; for fp16 data at chunk size 64 element by element (8 elements
                // per lane): there the 16-byte form made ptxas spill 36-52 bytes and the step 2-4%
                // slower (at chunk size 32 it spills less than the element-wise form)
                const int nrow = rows(s);
                if constexpr (!(std::is_same_v<X, fp16_t> && BT == 64)) {
                    static_assert(BC == 16 && (t_ld * 4) % 16 == 0, "A lane copies half a row of Akkd's block.");
                    const int r = lane / 2, j0 = (lane % 2) * 8;
                    const float* src = s_akkd() + (s * BC + r) * BC + j0;
                    auto kept = [&](float4 v, int j) {
                        auto at = [&](float x, int jj) { return r < nrow && detail::akkd_keeps(r, jj, Mode::safe_gate) ? x : 0.f; };
                        return make_float4(at(v.x, j), at(v.y, j + 1), at(v.z, j + 2), at(v.w, j + 3));
                    };
                    *reinterpret_cast<float4*>(b_Ai + r * t_ld + j0) = kept(load4(src), j0);
                    *reinterpret_cast<float4*>(b_Ai + r * t_ld + j0 + 4) = kept(load4(src + 4), j0 + 4);
                } else {
#pragma unroll
                    for (int i = 0; i < BC * BC / 32; ++i) {
                        const int e = lane + 32 * i;
                        const int r = e / BC, j = e % BC;
                        const bool ok = r < nrow && detail::akkd_keeps(r, j, Mode::safe_gate);
                        b_Ai[r * t_ld + j] = ok ? s_akkd()[(s * BC + r) * BC + j] : 0.f;
                    }
                }
            } else {
                // L_ss is in place (park_products / diag_exact: strict lower, 0 elsewhere)
                if ((*s_flags() >> s) & 1u) diag_exact(s);  // warp-uniform
            }
            if constexpr (!Step::reads_akkd || !Mode::safe_gate) {
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
                mma::mma_full(acc.v[nh], a, b);
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

    /// The merge of a whole four-sub-chunk chunk on four warps as a 2 x 2 block inverse, in
    /// three rounds of at most two tile products per warp (the distance order takes 2 + 3 + 4 on
    /// warp 0). With A = [Ai_00 0; Ai_10 Ai_11] and B = [Ai_22 0; Ai_32 Ai_33] the inverses of the
    /// two diagonal 32 x 32 halves and C = [L_20 L_21; L_30 L_31], the lower-left half is
    /// -B (C A): T = C A (T_2j, T_3j), then Ai_2j = -Ai_22 T_2j, Ai_3j = -(Ai_32 T_2j + Ai_33 T_3j).
    /// The T tiles live in the four per-warp scratch tiles (tmp(w)).
    __device__ void merge4() const {
        auto tmp = [&](int w) { return tiles() + traits::off_tmp + w * tile_floats; };
        // one 16 x 16 block: dst = sign (sum of the tile products), written by this warp
        auto block = [&](float* dst, float sign, auto... ab) {
            rt16 acc = {};
            const float* f[] = {ab...};
            for (int e = 0; e + 1 < static_cast<int>(sizeof...(ab)); e += 2) tile_mma(acc, f[e], f[e + 1]);
            store_tile(dst, acc, sign);
            __syncwarp();  // dst is read by this warp's next product
        };
        // round 1: the off-diagonal blocks of A and B, and T_21, T_31 (T_2j, T_3j for j = 1)
        if (warp == 0) {
            block(tmp(0), 1.f, s_l(1, 0), s_ai(0, 0));
            block(s_ai(1, 0), -1.f, s_ai(1, 1), tmp(0));
        } else if (warp == 1) {
            block(tmp(1), 1.f, s_l(3, 2), s_ai(2, 2));
            block(s_ai(3, 2), -1.f, s_ai(3, 3), tmp(1));
        } else if (warp == 2) {
            block(tmp(2), 1.f, s_l(2, 1), s_ai(1, 1));
        } else {
            block(tmp(3), 1.f, s_l(3, 1), s_ai(1, 1));
        }
        __syncthreads();
        // round 2: T_20, T_30 (j = 0), and the lower-left blocks of column 1
        if (warp == 0) {
            block(tmp(0), 1.f, s_l(2, 0), s_ai(0, 0), s_l(2, 1), s_ai(1, 0));
        } else if (warp == 1) {
            block(tmp(1), 1.f, s_l(3, 0), s_ai(0, 0), s_l(3, 1), s_ai(1, 0));
        } else if (warp == 2) {
            block(s_ai(2, 1), -1.f, s_ai(2, 2), tmp(2));
        } else {
            block(s_ai(3, 1), -1.f, s_ai(3, 2), tmp(2), s_ai(3, 3), tmp(3));
        }
        __syncthreads();
        // round 3: the lower-left blocks of column 0
        if (warp == 0) {
            block(s_ai(2, 0), -1.f, s_ai(2, 2), tmp(0));
        } else if (warp == 1) {
            block(s_ai(3, 0), -1.f, s_ai(3, 2), tmp(0), s_ai(3, 3), tmp(1));
        }
        __syncthreads();
    }

    __device__ void merge() const {
        if constexpr (NC == 4 && warps == 4 && traits::tune.merge4)
            if (NS == NC) return merge4();  // block-uniform
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

    /// Eight adjacent fp32 values of a tile row (src 16-byte aligned) -> X, as 16-byte stores
    /// (dst 8-element aligned, and 16-byte aligned: vec_out).
    __device__ static void store8(X* dst, const float* src) {
        const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
        if constexpr (sizeof(X) == 2) {
            const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            std::uint32_t w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const X lo = from_float<X>(v[2 * e]), hi = from_float<X>(v[2 * e + 1]);
                std::uint16_t l, h;
                __builtin_memcpy(&l, &lo, 2);
                __builtin_memcpy(&h, &hi, 2);
                w[e] = static_cast<std::uint32_t>(l) | (static_cast<std::uint32_t>(h) << 16);
            }
            st_global_16(dst, make_uint4(w[0], w[1], w[2], w[3]));
        } else {
            st_global_16(dst, a);
            st_global_16(dst + 4, b);
        }
    }

    /// Eight columns [col, col + 8) of a tile row, stopping at column n - 1 (element stores there).
    __device__ static void store8_upto(X* dst, const float* src, int col, int n) {
        if (col + 8 <= n) {
            store8(dst, src);
        } else {
            for (int e = 0; col + e < n; ++e) dst[e] = from_float<X>(src[e]);
        }
    }

    /// 16-byte stores: a lane writes 8 adjacent columns, BT / 8 lanes a row, 32 / (BT / 8) rows per
    /// warp pass. The last diagonal block of a partial chunk stops at column n - 1 (element stores).
    /// A lane's rows are a fixed stride apart and every row of a chunk lies in one sequence, so its
    /// output offsets are worked out once and stepped (not three 64-bit products per row and tensor).
    __device__ void store_outputs_vec() const {
        constexpr int CPR = BT / 8, RPP = 32 / CPR, STEP = warps * RPP;
        const int n = static_cast<int>(c.n);
        const int col = (lane % CPR) * 8;
        const int sj = col / BC, cc = col % BC;
        const int r0 = warp * RPP + lane / CPR;
        std::int64_t o_aqk = P.Aqk_s.at(c.b, token(r0), hv) + col, o_akk = P.Akk_s.at(c.b, token(r0), hv) + col;
        const std::int64_t d_aqk = STEP * P.Aqk_s.t, d_akk = STEP * P.Akk_s.t;
        for (int r = r0; r < n; r += STEP, o_aqk += d_aqk, o_akk += d_akk) {
            const int si = r / BC, rr = r % BC;
            if (sj > si) continue;
            if (sj < si || Step::diagonal_blocks) store8_upto(P.Aqk + o_aqk, s_aqk(si, sj) + rr * t_ld + cc, col, n);
            store8_upto(P.Akk + o_akk, s_ai(si, sj) + rr * t_ld + cc, col, n);
        }
    }

    __device__ void store_outputs() const {
        if (kp.vec_out) return store_outputs_vec();
        const int n = static_cast<int>(c.n);
        const bool vec = kp.pair_out;
        std::int64_t o_aqk = P.Aqk_s.at(c.b, token(warp), hv), o_akk = P.Akk_s.at(c.b, token(warp), hv);
        const std::int64_t d_aqk = warps * P.Aqk_s.t, d_akk = warps * P.Akk_s.t;
        for (int r = warp; r < n; r += warps, o_aqk += d_aqk, o_akk += d_akk) {
            const int si = r / BC, rr = r % BC;
            X* aqk_row = P.Aqk + o_aqk;
            X* akk_row = P.Akk + o_akk;
#pragma unroll
            for (int col = 2 * lane; col < BT; col += 64) {
                const int sj = col / BC, cc = col % BC;
                if (sj > si) continue;
                auto put = [&](X* row, const float* a) {
                    if (col + 1 < n)
                        store_pair(row + col, a[0], a[1], vec);
                    else if (col < n)
                        row[col] = from_float<X>(a[0]);
                };
                if (sj < si || Step::diagonal_blocks) put(aqk_row, s_aqk(si, sj) + rr * t_ld + cc);
                put(akk_row, s_ai(si, sj) + rr * t_ld + cc);
            }
        }
    }

    // =============================================================================================
    // Phase 6: the WY outputs (kernel_params::wy).

    __device__ float* s_wy() const { return reinterpret_cast<float*>(smem + traits::off_wy_bytes); }  // [BT, wy_ld]

    /// Eight adjacent elements of a row, as stored (zeros from column lim on).
    template <class T>
    struct raw8 {
        T e[8];
    };

    /// Issues the loads of eight adjacent elements of a row from column col (row pointer p =
    /// &row[col]) into r, zeros from column lim on: 16-byte loads where the address and lim allow.
    /// Nothing here uses the data, so the loads stay in flight until r is read.
    template <class T>
    __device__ static void load_raw8(const T* p, std::int64_t col, std::int64_t lim, raw8<T>& r) {
        const std::int64_t avail = lim - col;
        if (avail >= 8 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0) {
            if constexpr (sizeof(T) == 4) {
                reinterpret_cast<float4*>(r.e)[0] = reinterpret_cast<const float4*>(p)[0];
                reinterpret_cast<float4*>(r.e)[1] = reinterpret_cast<const float4*>(p)[1];
            } else {
                *reinterpret_cast<uint4*>(r.e) = *reinterpret_cast<const uint4*>(p);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) r.e[i] = i < avail ? p[i] : T{};
        }
    }

    /// Eight adjacent values into a row of X from column col (dst = &row[col]), stopping at lim:
    /// one 16-byte store (two for fp32) where the address and lim allow.
    __device__ static void store8v(X* dst, const float (&v)[8], std::int64_t col, std::int64_t lim) {
        const std::int64_t avail = lim - col;
        if (avail >= 8 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
            alignas(16) float t[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) t[i] = v[i];
            store8(dst, t);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i)
                if (i < avail) dst[i] = from_float<X>(v[i]);
        }
    }

    /// What one thread loads a slice ahead for one task: 8 columns of one row of x (k or v), and
    /// for the gated pass g there (kg's g of the chunk's last row and qg's q are read when the
    /// slice is staged: more registers held across the products spill).
    template <bool Gated>
    struct wy_task {
        raw8<X> x;
        raw8<float> g;
    };

    static constexpr int wy_tasks = (BT * (traits::wy_cols / 8) + threads - 1) / threads;  // per thread and slice

    /// Issues the loads of this thread's tasks of slice c0 (rows past n or columns past width: 0).
    template <bool Gated>
    __device__ void wy_load(wy_task<Gated> (&tk)[wy_tasks], const X* x, const axis_strides& xs, std::int64_t x_head, std::int64_t width,
                            std::int64_t c0) const {
        constexpr int CPR = traits::wy_cols / 8;
        const int n = static_cast<int>(c.n);
        const X* x0 = x + xs.at(c.b, token(0), x_head);  // row r: x0 + r xs.t (a chunk's rows are consecutive tokens)
        const float* g0 = P.g + P.g_s.at(c.b, token(0), hv);
#pragma unroll
        for (int i = 0; i < wy_tasks; ++i) {
            const int task = tid + i * threads, r = task / CPR;
            const std::int64_t col = c0 + (task % CPR) * 8;
            const bool ok = r < BT && r < n && col < width;
            const std::int64_t rr = ok ? r : 0;
            load_raw8(x0 + rr * xs.t + col, col, ok ? width : col, tk[i].x);
            if constexpr (Gated) load_raw8(g0 + rr * P.g_s.t + col, col, ok ? width : col, tk[i].g);
        }
    }

    /// Turns this thread's loaded tasks of slice c0 into beta x (2^g) rows of buf (fp32, pitch
    /// wy_ld; rows past n are 0), and stores kg / qg of the gated pass.
    template <bool Gated>
    __device__ void wy_stage(const wy_task<Gated> (&tk)[wy_tasks], float* buf, std::int64_t width, std::int64_t c0) const {
        constexpr int CPR = traits::wy_cols / 8, LD = traits::wy_ld;
        const wy_params<X>& wy = kp.wy;
        const int n = static_cast<int>(c.n);
#pragma unroll
        for (int i = 0; i < wy_tasks; ++i) {
            const int task = tid + i * threads, r = task / CPR, cc = (task % CPR) * 8;
            if (r >= BT) break;
            const std::int64_t col = c0 + cc;
            const bool ok = r < n && col < width;
            const float b = s_beta()[r];  // 0 past the chunk's end
            float xb[8];
            if constexpr (Gated) {
                float eg[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    eg[e] = fast_exp2(tk[i].g.e[e]);
                    xb[e] = mma::prepare(to_float(tk[i].x.e[e]) * b * eg[e]);
                }
                if (ok && wy.qg != nullptr) {
                    raw8<X> q;
                    load_raw8(P.q + P.q_s.at(c.b, token(r), h) + col, col, width, q);
                    float v[8];
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[e] = to_float(q.e[e]) * eg[e];
                    store8v(wy.qg + wy.qg_s.at(c.b, token(r), hv) + col, v, col, width);
                }
                if (ok && wy.kg != nullptr) {
                    raw8<float> gn;
                    load_raw8(P.g + P.g_s.at(c.b, token(n - 1), hv) + col, col, width, gn);
                    float v[8];
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[e] = to_float(tk[i].x.e[e]) * fast_exp2(gn.e[e] - tk[i].g.e[e]);
                    store8v(wy.kg + wy.kg_s.at(c.b, token(r), hv) + col, v, col, width);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) xb[e] = mma::prepare(to_float(tk[i].x.e[e]) * b);
            }
            float* d = buf + r * LD + cc;
            *reinterpret_cast<float4*>(d) = make_float4(xb[0], xb[1], xb[2], xb[3]);
            *reinterpret_cast<float4*>(d + 4) = make_float4(xb[4], xb[5], xb[6], xb[7]);
        }
    }

    /// Columns 8 warp .. + 7 of slice c0 of Ai times the staged slice (the lower block triangle,
    /// Ai_ij B_j for i >= j, on tensor cores), stored from the accumulators: rows < n, columns <
    /// width, two adjacent columns per store where aligned.
    __device__ void wy_products(const float* buf, X* out, const axis_strides& os, std::int64_t width, std::int64_t c0) const {
        constexpr int LD = traits::wy_ld;
        const int nt = warp;  // traits: warps * 8 == wy_cols
        float acc[NC][4] = {};
#pragma unroll
        for (int sj = 0; sj < NC; ++sj) {
            if (sj >= NS) break;
#pragma unroll
            for (int kk = 0; kk < BC; kk += 8) {
                const float* bk = buf + (sj * BC + kk + tig) * LD + nt * 8 + gid;
                const typename mma::b_frag b = mma::make_b_prepared(bk[0], bk[4 * LD]);
#pragma unroll
                for (int si = sj; si < NC; ++si) {
                    if (si >= NS) break;
                    const float4 a = ai_frags()[((si * (si + 1) / 2 + sj) * 2 + kk / 8) * 32 + lane];
                    mma::mma(acc[si], mma::make_a_prepared(a.x, a.y, a.z, a.w), b);
                }
            }
        }
        const int n = static_cast<int>(c.n);
        const std::int64_t col = c0 + nt * 8 + 2 * tig;
        if (col >= width) return;
        const bool two = col + 1 < width;
        X* const o0 = out + os.at(c.b, token(0), hv) + col;  // row r: o0 + r os.t
        const bool vec = reinterpret_cast<std::uintptr_t>(o0) % (2 * sizeof(X)) == 0 && os.t % 2 == 0;
#pragma unroll
        for (int si = 0; si < NC; ++si) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int r = si * BC + gid + 8 * hh;
                if (r >= n) continue;
                X* dst = o0 + r * os.t;
                if (two)
                    store_pair(dst, acc[si][2 * hh], acc[si][2 * hh + 1], vec);
                else
                    dst[0] = from_float<X>(acc[si][2 * hh]);
            }
        }
    }

    /// One pass over [0, width) of w (Gated: x = k, also kg and qg) or u (x = v), in slices of
    /// wy_cols columns through two buffers: the loads of slice s + 1 are in flight while slice s
    /// is multiplied and stored; one barrier per slice.
    template <bool Gated>
    __device__ void wy_pass(const X* x, const axis_strides& xs, std::int64_t x_head, std::int64_t width, X* out, const axis_strides& os) const {
        constexpr int C = traits::wy_cols;
        wy_task<Gated> tk[wy_tasks];
        wy_load<Gated>(tk, x, xs, x_head, width, 0);
        __syncthreads();  // the buffers' last readers (phase 5's stores, or the previous pass) are done
        for (std::int64_t c0 = 0, s = 0; c0 < width; c0 += C, ++s) {
            float* buf = s_wy() + (s & 1) * traits::wy_floats;
            wy_stage<Gated>(tk, buf, width, c0);
            __syncthreads();  // buf is staged; the other buffer's readers (slice s - 1) are done
            if (c0 + C < width) wy_load<Gated>(tk, x, xs, x_head, width, c0 + C);
            if (out != nullptr) wy_products(buf, out, os, width, c0);  // block-uniform
        }
    }

    /// Ai's blocks (si >= sj) as prepared A fragments, after prepare_ai_frags: float4 [(pair, k8 half),
    /// lane], pair = si (si + 1) / 2 + sj; one 16-byte load per fragment. They take the bytes of
    /// the Ai tiles (NC (NC + 1) / 2 tiles of 320 floats hold 256 each).
    __device__ const float4* ai_frags() const { return reinterpret_cast<const float4*>(tiles() + traits::off_ai); }

    /// Rewrites the Ai tiles as ai_frags: each warp reads its fragments into registers, a barrier,
    /// then writes them (the slices' barriers order the writes before their readers).
    __device__ void prepare_ai_frags() const {
        constexpr int FR = NC * (NC + 1), PER = (FR + warps - 1) / warps;  // fragments: pairs x two k8 halves
        float4 f[PER];
        __syncthreads();  // phase 5's stores have read the tiles
        static_assert(NC <= 4, "prepare_ai_frags maps pairs to blocks for up to four sub-chunks.");
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int fr = warp + i * warps;
            const int p = fr / 2, kk = (fr % 2) * 8;
            const int si = p >= 6 ? 3 : p >= 3 ? 2 : p >= 1 ? 1 : 0, sj = p - si * (si + 1) / 2;
            const float* a = s_ai(si, sj) + gid * t_ld + kk + tig;
            f[i] = fr < FR ? make_float4(mma::prepare(a[0]), mma::prepare(a[8 * t_ld]), mma::prepare(a[4]), mma::prepare(a[8 * t_ld + 4]))
                           : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        __syncthreads();
        float4* dst = reinterpret_cast<float4*>(tiles() + traits::off_ai);
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int fr = warp + i * warps;
            if (fr < FR) dst[fr * 32 + lane] = f[i];
        }
    }

    __device__ void wy_outputs() const {
        const wy_params<X>& wy = kp.wy;
        prepare_ai_frags();
        if (wy.w != nullptr || wy.kg != nullptr || wy.qg != nullptr) wy_pass<true>(P.k, P.k_s, h, P.K, wy.w, wy.w_s);
        if (wy.u != nullptr) wy_pass<false>(wy.v, wy.v_s, hv, wy.V, wy.u, wy.u_s);
    }

    __device__ void run(pipe_state& ps) {
        prefetch();
        if (Step::diagonal_blocks || NS > 1) {
            float b_Aqk[UPW][4], b_Akk[UPW][4];
            products(b_Aqk, b_Akk, ps);  // ends with every copy landed and a barrier
            park_products(b_Aqk, b_Akk);
            if constexpr (Step::diagonal_blocks) __syncthreads();  // phase 3 reads L_ss from other warps' units
        } else {
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();  // Akkd has landed (cp.async path)
        }
        if constexpr (Step::reads_akkd)
            if (tma) wait_bar(ps, S);  // Akkd's tensor copy
        diagonal_inverses();
        __syncthreads();
        merge();
        store_outputs();
        if constexpr (Step::wy) wy_outputs();
    }
};

/// The kernel: a grid-stride loop over work items (chunk, value head), value heads fastest so the
/// heads of one GVA group read the same q / k rows close together in time.
template <class X, class Cfg, class Mode, class Step>
__global__ void __launch_bounds__(kernel_traits<X, Cfg, Step, Mode::solve_precision>::threads,
                                  kernel_traits<X, Cfg, Step, Mode::solve_precision>::tune.min_blocks)
    chunk_kernel(const __grid_constant__ kernel_params<X> kp) {
    using traits = kernel_traits<X, Cfg, Step, Mode::solve_precision>;
    extern __shared__ __align__(128) unsigned char smem[];
    const bool tma = device_has_tma && kp.tma;
    if (tma && threadIdx.x == 0) {
        auto* bars = reinterpret_cast<std::uint64_t*>(smem + traits::off_bars_bytes);
        for (int i = 0; i <= traits::stages; ++i) mbar_init(bars + i, 1);
        mbar_init_fence();
    }
    pipe_state ps;
    const std::int64_t items = kp.p.num_items();
    for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        chunk_item<X, Cfg, Mode, Step> w(kp, item, smem);
        if (w.c.n <= 0) continue;  // an idle varlen slot (block-uniform)
        if (tma) fence_proxy_async();  // this thread's accesses of the last item before the copy engine's writes
        __syncthreads();           // the previous item is done with shared memory (and the barriers are initialised)
        w.run(ps);
    }
}

}  // namespace kda::cuda