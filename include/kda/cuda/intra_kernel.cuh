// kda/cuda/intra_kernel.cuh: device code of the intra stage (kda/intra.hpp) on CUDA (nvcc only).
//
// Two kernels:
//   diag_kernel     the diagonal-block producer. One warp per (sub-chunk, value head) work item,
//                   grid-stride; K is walked in slices of 32 columns staged in the warp's own
//                   shared memory as fp32 ([16, 32] tiles of q, k and g, pitch 40; consecutive lanes
//                   load consecutive 16-byte pieces of a row where aligned). Each slice is then factorised in
//                   place around the sub-chunk's midpoint row r: q_i 2^(g_i - g_r), k_i 2^(g_i - g_r)
//                   and k_j 2^(g_r - g_j), and the two 16 x 16 products run on tensor cores in
//                   3xTF32 (fp32-accurate in both solve precisions: mma_policy<fp32>).
//                   That holds while every |g_i - g_r| <= 64 (factors within 2^+-64), which the
//                   safe gate's bounded decays always meet; past it (either flavour) the warp
//                   redoes the item term by term, one 2^(g_i - g_j) per term (exponent <= 0):
//                   exact for any decay, as FLA's token-parallel producer.
//                   Results go through the warp's tiles to row stores; the safe flavour inverts
//                   I + L_ss by forward substitution (lane j owns column j) first.
//   cumsum_kernel   chunk-local cumulative sums of the activated gate, one block per (chunk,
//                   value head), one thread per column k (K strided), rows in order.

#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../intra.hpp"
#include "../params.hpp"
#include "../varlen.hpp"
#include "mma.cuh"
#include "ptx.cuh"

namespace kda::cuda {

/// What the producer receives.
template <class X>
struct diag_kernel_params {
    inter_solve_params<X> p;     // q, k, g, beta, Aqk (its diagonal blocks are written), strides, chunks
    float* Akkd = nullptr;       // output [B, T, HV, BC] fp32 (strides in p.Akkd_s)
    std::int64_t num_sequences = 0;
    int NC = 4;                  // sub-chunks per chunk (BT / 16)
    bool vec_q = false, vec_k = false, vec_g = false;  // 16-byte loads are legal (launch.cuh: vector_loads_ok)
};

inline constexpr int diag_bc = 16;
inline constexpr int diag_bk = 32;
inline constexpr int diag_pitch = diag_bk + 8;  // 40 floats: rows 16-byte aligned, 8-byte fragment pair loads conflict-free
inline constexpr int diag_warps = 4;
/// The largest |g_i - g_r| (log2) for which the factorised path runs: its factors stay within
/// 2^+-64, far inside fp32 (and tf32) range. Past it, the not-safe flavour redoes the item term by
/// term.
inline constexpr float diag_factor_bound = 64.f;

/// The warp's shared memory: three [16, 40] fp32 tiles (diag_pitch).
struct diag_smem {
    float q[diag_bc * diag_pitch];
    float k[diag_bc * diag_pitch];
    float g[diag_bc * diag_pitch];
};

/// One (sub-chunk, value head) work item of the producer, on one warp.
template <class X, bool SafeGate>
struct diag_item {
    static constexpr int BC = diag_bc, BK = diag_bk, LD = diag_pitch;
    using mma = mma_policy<precision::fp32>;  // 3xTF32: the diagonal blocks at fp32 accuracy in both modes

    const diag_kernel_params<X>& dp;
    const inter_solve_params<X>& P;
    diag_smem& sm;
    chunk_coords c;
    std::int64_t hv, h, t0;
    int s, ns, ref, lane, gid, tig;

    __device__ diag_item(const diag_kernel_params<X>& dp_, diag_smem& sm_, const chunk_coords& c_, int s_, std::int64_t hv_, int lane_)
        : dp(dp_), P(dp_.p), sm(sm_), c(c_), hv(hv_), s(s_), lane(lane_) {
        h = detail::udiv(hv, detail::udiv(P.HV, P.H));
        ns = static_cast<int>(c.n - static_cast<std::int64_t>(s) * BC < BC ? c.n - static_cast<std::int64_t>(s) * BC : BC);
        t0 = c.bos + c.t0 + static_cast<std::int64_t>(s) * BC;
        ref = BC / 2 < ns - 1 ? BC / 2 : ns - 1;  // the midpoint row
        gid = lane / 4;
        tig = lane % 4;
    }

    /// Stages columns [k0, k0 + 32) of one tensor's sub-chunk rows into dst as fp32 (rows >= ns and
    /// columns >= K are 0). Consecutive lanes take consecutive 16-byte pieces of a row, so one
    /// warp-wide load touches as few cache lines as the rows allow.
    template <class T>
    __device__ void stage_one(float* dst, const T* src, const axis_strides& st, std::int64_t head, std::int64_t k0, bool vec) const {
        constexpr int per = 16 / static_cast<int>(sizeof(T));  // elements per piece
        constexpr int pieces = BK / per;                       // pieces per row
#pragma unroll
        for (int idx = lane; idx < BC * pieces; idx += 32) {
            const int row = idx / pieces, pc = idx % pieces;
            const std::int64_t col = k0 + pc * per;
            float v[per];
            if (row < ns && col < P.K) {
                const T* p = src + (st.at(c.b, t0, head) + row * st.t + col);
                if (vec && col + per <= P.K) {
                    const uint4 w = *reinterpret_cast<const uint4*>(p);
                    const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
                    for (int i = 0; i < per; ++i) v[i] = to_float(e[i]);
                } else {
#pragma unroll
                    for (int i = 0; i < per; ++i) v[i] = col + i < P.K ? to_float(p[i]) : 0.f;
                }
            } else {
#pragma unroll
                for (int i = 0; i < per; ++i) v[i] = 0.f;
            }
            float* d = dst + row * LD + pc * per;
#pragma unroll
            for (int i = 0; i < per; i += 4) *reinterpret_cast<float4*>(d + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
        }
    }

    /// Stages columns [k0, k0 + 32) of q, k and g (raw, fp32).
    __device__ void stage(std::int64_t k0) const {
        stage_one(sm.q, P.q, P.q_s, h, k0, dp.vec_q);
        stage_one(sm.k, P.k, P.k_s, h, k0, dp.vec_k);
        stage_one(sm.g, P.g, P.g_s, hv, k0, dp.vec_g);
    }

    /// Rewrites the staged slice around the midpoint row: q <- q 2^(g - g_r), k <- k 2^(g - g_r),
    /// g <- k 2^(g_r - g) (rows >= ns: 0). Lane l owns column l (conflict-free, and no lane reads
    /// what another rewrites). Returns this lane's largest |g - g_r|.
    __device__ float factorise() const {
        const float gr = sm.g[ref * LD + lane];
        float worst = 0.f;
#pragma unroll
        for (int row = 0; row < BC; ++row) {
            const int e = row * LD + lane;
            const bool ok = row < ns;
            const float d = sm.g[e] - gr;
            worst = ok ? fmaxf(worst, fabsf(d)) : worst;
            const float down = ok ? fast_exp2(fminf(d, diag_factor_bound)) : 0.f;
            const float up = ok ? fast_exp2(fminf(-d, diag_factor_bound)) : 0.f;
            const float kv = sm.k[e];
            sm.q[e] *= down;
            sm.k[e] = kv * down;
            sm.g[e] = kv * up;
        }
        return worst;
    }

    /// Tensor-core products of a factorised slice: S += qf ku^T, Lk += kf ku^T ([16, 16] as two
    /// m16n8 halves each).
    __device__ void products(float (&S)[2][4], float (&Lk)[2][4], int kmax) const {
        // k-slots tig and tig + 4 of a k8 step take the adjacent columns c0 = kk + 2 tig and c0 + 1
        // (the sum over k does not mind the order), so every operand pair is one 8-byte load
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            if (kk >= kmax) break;
            const int c0 = kk + 2 * tig;
            const float2 q0 = load_pair(sm.q + gid * LD + c0), q1 = load_pair(sm.q + (gid + 8) * LD + c0);
            const float2 k0 = load_pair(sm.k + gid * LD + c0), k1 = load_pair(sm.k + (gid + 8) * LD + c0);
            const auto aq = mma::make_a(q0.x, q1.x, q0.y, q1.y);
            const auto ak = mma::make_a(k0.x, k1.x, k0.y, k1.y);
#pragma unroll
            for (int nh = 0; nh < 2; ++nh) {
                const float2 u = load_pair(sm.g + (nh * 8 + gid) * LD + c0);  // B's column n = key row j
                const auto b = mma::make_b(u.x, u.y);
                mma::mma_full(S[nh], aq, b);
                mma::mma_full(Lk[nh], ak, b);
            }
        }
    }

    /// Term-by-term products of a raw slice (lane: row i = lane % 16, columns j = 2 m + lane / 16),
    /// 2^(g_i - g_j) per term: exact for any decay.
    __device__ void exact_products(float (&aq)[8], float (&ak)[8], int kmax) const {
        const int i = lane % BC, half = lane / BC;
        if (i >= ns) return;
#pragma unroll 2
        for (int kk = 0; kk < kmax; ++kk) {
            const float qi = sm.q[i * LD + kk], ki = sm.k[i * LD + kk], gi = sm.g[i * LD + kk];
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                const int j = 2 * m + half;
                if (j <= i) {
                    const float kj = sm.k[j * LD + kk] * fast_exp2(gi - sm.g[j * LD + kk]);
                    aq[m] = fmaf(qi, kj, aq[m]);
                    ak[m] = fmaf(ki, kj, ak[m]);
                }
            }
        }
    }

    __device__ float beta_of(int i) const {
        const std::int64_t off = P.beta_s.at(c.b, t0 + i, hv);
        return P.beta_is_fp32 ? static_cast<const float*>(P.beta)[off] : to_float(static_cast<const X*>(P.beta)[off]);
    }

    __device__ void run() {
        float S[2][4] = {}, Lk[2][4] = {};
        bool factorised_ok = true;
        for (std::int64_t k0 = 0; k0 < P.K; k0 += BK) {
            __syncwarp();  // the previous slice is consumed
            stage(k0);
            __syncwarp();
            const float worst = factorise();
            if (__any_sync(0xffffffffu, worst > diag_factor_bound)) {
                factorised_ok = false;  // warp-uniform
                break;
            }
            __syncwarp();
            products(S, Lk, static_cast<int>(P.K - k0 < BK ? P.K - k0 : BK));
        }
        __syncwarp();
        if (factorised_ok) {
            // accumulator fragments -> raw tiles: sm.q <- S, sm.k <- K K^T products
#pragma unroll
            for (int nh = 0; nh < 2; ++nh) {
                const int col = nh * 8 + 2 * tig;
                sm.q[gid * LD + col] = S[nh][0];
                sm.q[gid * LD + col + 1] = S[nh][1];
                sm.q[(gid + 8) * LD + col] = S[nh][2];
                sm.q[(gid + 8) * LD + col + 1] = S[nh][3];
                sm.k[gid * LD + col] = Lk[nh][0];
                sm.k[gid * LD + col + 1] = Lk[nh][1];
                sm.k[(gid + 8) * LD + col] = Lk[nh][2];
                sm.k[(gid + 8) * LD + col + 1] = Lk[nh][3];
            }
        } else {
            // not safe, a decay too strong to factorise: the whole item again, term by term
            float aq[8] = {}, ak[8] = {};
            for (std::int64_t k0 = 0; k0 < P.K; k0 += BK) {
                __syncwarp();
                stage(k0);
                __syncwarp();
                exact_products(aq, ak, static_cast<int>(P.K - k0 < BK ? P.K - k0 : BK));
            }
            __syncwarp();
            const int i = lane % BC, half = lane / BC;
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                sm.q[i * LD + 2 * m + half] = aq[m];
                sm.k[i * LD + 2 * m + half] = ak[m];
            }
        }
        __syncwarp();
        epilogue();
    }

    /// Masks, scales and beta, the safe flavour's inverse, and the coalesced stores.
    __device__ void epilogue() const {
        {
            // lane: row i = lane % 16, columns j = 2 m + lane / 16
            const int i = lane % BC, half = lane / BC;
            const float b_i = i < ns ? beta_of(i) : 0.f;
            float vq[8], vk[8];
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                const int j = 2 * m + half;
                const bool in = i < ns && j < ns;
                vq[m] = in && j <= i ? sm.q[i * LD + j] * static_cast<float>(P.scale) : 0.f;
                vk[m] = in && j < i ? sm.k[i * LD + j] * b_i : 0.f;
            }
            __syncwarp();
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                sm.q[i * LD + 2 * m + half] = vq[m];
                sm.k[i * LD + 2 * m + half] = vk[m];
            }
            __syncwarp();
        }
        if constexpr (SafeGate) {
            // (I + L)^-1 by forward substitution: lane j (< 16) owns column j; rows past ns are
            // identity rows of the padded block and are not stored
            float x[BC];
            const int jl = lane % BC;
#pragma unroll
            for (int rr = 0; rr < BC; ++rr) {
                float acc = rr == jl ? 1.f : 0.f;
#pragma unroll
                for (int m2 = 0; m2 < rr; ++m2) acc = fmaf(-sm.k[rr * LD + m2], x[m2], acc);
                x[rr] = acc;
            }
            __syncwarp();
            if (lane < BC) {
#pragma unroll
                for (int rr = 0; rr < BC; ++rr) sm.k[rr * LD + lane] = x[rr];
            }
            __syncwarp();
        }
        // stores: lane -> row lane / 2, columns (lane % 2) 8 .. + 7
        const int rs = lane / 2, cb = (lane % 2) * 8;
        if (rs < ns) {
            const std::int64_t t = t0 + rs;
            X* aqk = P.Aqk + P.Aqk_s.at(c.b, t, hv) + static_cast<std::int64_t>(s) * BC;
            float* akkd = dp.Akkd + P.Akkd_s.at(c.b, t, hv);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int j = cb + e;
                if (j < ns) aqk[j] = from_float<X>(sm.q[rs * LD + j]);
                akkd[j] = sm.k[rs * LD + j];
            }
        }
    }
};

template <class X, bool SafeGate>
__global__ void __launch_bounds__(32 * diag_warps) diag_kernel(const __grid_constant__ diag_kernel_params<X> dp) {
    __shared__ __align__(16) diag_smem smem_all[diag_warps];
    const inter_solve_params<X>& P = dp.p;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const std::int64_t per_chunk = static_cast<std::int64_t>(dp.NC) * P.HV;
    const std::int64_t items = P.chunks.num_chunks * per_chunk;
    for (std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * diag_warps + warp; item < items;
         item += static_cast<std::int64_t>(gridDim.x) * diag_warps) {
        const std::int64_t i_t = detail::udiv(item, per_chunk);
        const std::int64_t in_chunk = item - i_t * per_chunk;
        const int s = static_cast<int>(detail::udiv(in_chunk, P.HV));
        const std::int64_t hv = in_chunk - s * P.HV;
        const chunk_coords c = locate_chunk(P.chunks, dp.num_sequences, i_t);
        if (c.n - static_cast<std::int64_t>(s) * diag_bc <= 0) continue;  // warp-uniform
        diag_item<X, SafeGate> w(dp, smem_all[warp], c, s, hv, lane);
        w.run();
    }
}

// ---------------------------------------------------------------------------------------------
// The gate cumsum.

template <class X>
struct cumsum_kernel_params {
    const X* g = nullptr;
    const float* A_log = nullptr;    // [HV] or null
    const float* dt_bias = nullptr;  // [HV * K] or null
    float* out = nullptr;
    axis_strides g_s, out_s;
    std::int64_t HV = 1, K = 0;
    float scale = 1.f;
    float lower_bound = -5.f;
    gate_activation activation = gate_activation::none;
    chunk_map chunks;  // chunk_indices always null: varlen chunks come from the cu_seqlens search
    std::int64_t num_sequences = 0;
};

/// The activated per-token log-decay (natural log) of input x for value head hv, column k.
template <class X>
__device__ __forceinline__ float activate(const cumsum_kernel_params<X>& cp, float x, std::int64_t hv, std::int64_t k) {
    if (cp.activation == gate_activation::none) return x;
    if (cp.dt_bias != nullptr) x += cp.dt_bias[hv * cp.K + k];
    const float a = cp.A_log != nullptr ? expf(cp.A_log[hv]) : 1.f;
    if (cp.activation == gate_activation::kda) {
        const float sp = x > 20.f ? x : log1pf(expf(x));
        return -a * sp;
    }
    return cp.lower_bound / (1.f + expf(-a * x));
}

template <class X>
__global__ void __launch_bounds__(128) cumsum_kernel(const __grid_constant__ cumsum_kernel_params<X> cp) {
    const std::int64_t items = cp.chunks.num_chunks * cp.HV;
    for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const std::int64_t i_t = item / cp.HV, hv = item % cp.HV;
        const chunk_coords c = locate_chunk(cp.chunks, cp.num_sequences, i_t);
        for (std::int64_t k = threadIdx.x; k < cp.K; k += blockDim.x) {
            float acc = 0.f;
            for (std::int64_t r = 0; r < c.n; ++r) {
                const std::int64_t t = c.bos + c.t0 + r;
                acc += activate(cp, to_float(cp.g[cp.g_s.at(c.b, t, hv) + k]), hv, k);
                cp.out[cp.out_s.at(c.b, t, hv) + k] = acc * cp.scale;
            }
        }
    }
}

}  // namespace kda::cuda
