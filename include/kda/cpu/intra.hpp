// kda/cpu/intra.hpp: the intra stage (kda/intra.hpp) for kda::cpu_backend.
//
//   chunk_kda_intra_policy<cpu_backend, BT, BC>::launch_diag   the diagonal-block producer
//   chunk_kda_intra_policy<cpu_backend, BT, BC>::launch_intra  the whole stage (cpu::run_intra):
//       per work item, the producer into Akkd (the caller's workspace, or one allocated per call),
//       then the inter-solve step (detail::inter_solve_chunk over cpu::tile_ops, BK =
//       cpu_backend::default_bk(K)) on the same staged rows
//   chunk_local_cumsum_impl<cpu_backend>::run                  the gate cumsum
//
// Work items are (chunk, value head) pairs on cpu::parallel_for, as in cpu/inter_solve.hpp; each
// stages its chunk's q, k and g rows once in the accumulator type (fp32, or fp64 for fp64 data),
// K padded with zeros to whole slices of `slice_k` columns, reads the next item's rows into cache
// (tile_ops::touch_rows) and computes one sub-chunk at a time.
//
// The diagonal blocks, both flavours alike (as the CUDA fused kernel; the flavours' outputs are at
// the top of kda/intra.hpp):
//   factorised     one factorisation per sub-chunk around its midpoint row r = min(BC / 2, n_s - 1):
//                  (x_i 2^(g_i - g_r)) . (k_j 2^(g_r - g_j)), a 16 x 16 product per K slice, while
//                  every |g_i - g_r| <= 64 (960 in fp64: the factors stay in range; FLA's lower-
//                  bounded gate always meets it). 2^(g_r - g_j) is the reciprocal of 2^(g_j - g_r)
//                  (one division instead of a second 2^x: the stage 4-6% faster, errors unchanged
//                  to two digits). Each term carries a few roundings more than one 2^x per term,
//                  and costs BC 2^x and BC divisions per K column instead of BC (BC + 1) / 2 2^x.
//   term by term   past that bound: sum_k x_i[k] k_j[k] 2^(g_i[k] - g_j[k]) with one 2^x per
//                  term (exponents <= 0 for decaying gates, so nothing overflows whatever the
//                  decay, and 2^x is cpu::exp2_accurate: about one ulp, no |x| 2^-24 loss).
// Safe gate: then (I + L_ss)^-1 by forward substitution in the accumulator type.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../detail/blocks.hpp"
#include "../intra.hpp"
#include "../params.hpp"
#include "../tile_config.hpp"
#include "../varlen.hpp"
#include "backend.hpp"
#include "exp2.hpp"
#include "inter_solve.hpp"
#include "tile_ops.hpp"

namespace kda {

namespace cpu {

/// The producer for one compile-time chunk size and flavour; one object per work item.
template <class X, int BT, int BC, bool SafeGate>
class intra_diag_item {
public:
    using acc = acc_t<X>;
    static constexpr int slice_k = 32;  // K columns per gate evaluation (fixed-size Eigen rows)
    using tile = Eigen::Matrix<acc, BC, BC, Eigen::RowMajor>;
    using slice = Eigen::Matrix<acc, BC, slice_k, Eigen::RowMajor>;
    using tslice = Eigen::Matrix<acc, slice_k, BC, Eigen::RowMajor>;
    using row = Eigen::Array<acc, 1, slice_k>;

    /// Row stride of the staging buffers: K rounded up to whole slices (or to whole slices of
    /// `step` columns, a multiple of slice_k).
    static std::int64_t padded_k(std::int64_t K, int step = slice_k) { return (K + step - 1) / step * step; }

    /// Stages the chunk's rows into `buf`, `kp` apart (kp: padded_k(K, a multiple of slice_k)).
    intra_diag_item(const inter_solve_params<X>& P, acc* Akkd, const axis_strides& Akkd_s, const chunk_coords& c, std::int64_t hv,
                    scratch<acc>& buf, std::int64_t kp)
        : P_(P), Akkd_(Akkd), Akkd_s_(Akkd_s), c_(c), hv_(hv), h_(hv / (P.HV / P.H)), kp_(kp), buf_(buf) {
        for (std::int64_t r = 0; r < c_.n; ++r) {
            const std::int64_t t = token(r);
            stage_row(P_.q + P_.q_s.at(c_.b, t, h_), buf_.q.data() + r * kp_);
            stage_row(P_.k + P_.k_s.at(c_.b, t, h_), buf_.k.data() + r * kp_);
            stage_row(P_.g + P_.g_s.at(c_.b, t, hv_), buf_.g.data() + r * kp_);
        }
    }

    /// Every sub-chunk of the chunk: Aqk's diagonal blocks and the Akkd rows.
    void run() const {
        for (std::int64_t s0 = 0; s0 < c_.n; s0 += BC) {
            const int ns = static_cast<int>(std::min<std::int64_t>(BC, c_.n - s0));
            tile S = tile::Zero(), L = tile::Zero();  // S: lower incl. the diagonal, unscaled; L: strictly lower
            if (factorisable(s0, ns))
                factorised(s0, ns, S, L);
            else
                term_by_term(s0, ns, S, L);
            for (int i = 0; i < ns; ++i) L.row(i) *= beta(token(s0 + i));
            if constexpr (SafeGate) invert_unit_lower(L);  // L now holds (I + L_ss)^-1 (rows past ns: identity)
            store(s0, ns, S, L);
        }
    }

private:
    [[nodiscard]] std::int64_t token(std::int64_t r) const { return c_.bos + c_.t0 + r; }
    [[nodiscard]] const acc* staged(const std::vector<acc>& v, std::int64_t r, std::int64_t k0) const { return v.data() + r * kp_ + k0; }
    static Eigen::Map<const row> map_row(const acc* p) { return Eigen::Map<const row>(p); }

    /// S[i, j] = q_i . (k_j 2^(g_i - g_j)) and L[i, j] = k_i . (k_j 2^(g_i - g_j)), one 2^x per term.
    void term_by_term(std::int64_t s0, int ns, tile& S, tile& L) const {
        for (int i = 0; i < ns; ++i)
            for (std::int64_t k0 = 0; k0 < kp_; k0 += slice_k) {
                const row gi = map_row(staged(buf_.g, s0 + i, k0));
                const row qi = map_row(staged(buf_.q, s0 + i, k0));
                const row ki = map_row(staged(buf_.k, s0 + i, k0));
                for (int j = 0; j <= i; ++j) {
                    const row gij = gi - map_row(staged(buf_.g, s0 + j, k0));
                    const row w = map_row(staged(buf_.k, s0 + j, k0)) * exp2_accurate<row>(gij);
                    S(i, j) += (qi * w).sum();
                    if (kda::detail::l_keeps(i, j)) L(i, j) += (ki * w).sum();
                }
            }
    }

    /// The largest |g_i - g_r| (log2) for which the factorised path runs: its factors stay within
    /// 2^+-64 (fp32) or 2^+-960 (fp64). The CUDA producer uses the same bound for fp32.
    static constexpr acc factor_bound = std::is_same_v<acc, double> ? acc(960) : acc(64);

    /// Whether every |g_i - g_r| of the sub-chunk (valid rows, every column) is within
    /// factor_bound; past it the sub-chunk goes term by term (exact for any decay).
    [[nodiscard]] bool factorisable(std::int64_t s0, int ns) const {
        const int r = std::min(BC / 2, ns - 1);
        const acc* gr = staged(buf_.g, s0 + r, 0);
        int outside = 0;  // any |g_i - g_r| past the bound, or NaN; no early exit, so that it vectorises
        for (int i = 0; i < ns; ++i) {
            const acc* gi = staged(buf_.g, s0 + i, 0);
            for (std::int64_t k = 0; k < P_.K; ++k) outside |= static_cast<int>(!(std::abs(gi[k] - gr[k]) <= factor_bound));
        }
        return outside == 0;
    }

    /// The same from one factorisation per K slice around the midpoint row r.
    void factorised(std::int64_t s0, int ns, tile& S, tile& L) const {
        const int r = std::min(BC / 2, ns - 1);
        for (std::int64_t k0 = 0; k0 < kp_; k0 += slice_k) {
            const row gr = map_row(staged(buf_.g, s0 + r, k0));
            slice qf, kf, kd;
            if (ns < BC) {  // rows >= ns are 0
                qf.bottomRows(BC - ns).setZero();
                kf.bottomRows(BC - ns).setZero();
                kd.bottomRows(BC - ns).setZero();
            }
            for (int i = 0; i < ns; ++i) {
                const row gi = map_row(staged(buf_.g, s0 + i, k0));
                const row up = exp2_accurate<row>(gi - gr);    // 2^(g_i - g_r)
                const row down = up.inverse();                 // 2^(g_r - g_i) = 1 / 2^(g_i - g_r)
                const row ki = map_row(staged(buf_.k, s0 + i, k0));
                qf.row(i) = map_row(staged(buf_.q, s0 + i, k0)) * up;
                kf.row(i) = ki * up;
                kd.row(i) = ki * down;
            }
            const tslice kdt = transposed(kd);
            mac(S, qf, kdt);
            mac(L, kf, kdt);
        }
        S = S.template triangularView<Eigen::Lower>();
        L = L.template triangularView<Eigen::StrictlyLower>();
    }

    /// Aqk[t_i, s0 + j] for j < ns (scale S on and below the diagonal, 0 above); Akkd[t_i, 0 .. BC).
    void store(std::int64_t s0, int ns, const tile& S, const tile& D) const {
        for (int i = 0; i < ns; ++i) {
            const std::int64_t t = token(s0 + i);
            X* aqk = P_.Aqk + P_.Aqk_s.at(c_.b, t, hv_) + s0;
            for (int j = 0; j < ns; ++j) aqk[j] = from_acc<X>(kda::detail::aqk_keeps(i, j) ? S(i, j) * P_.scale : acc(0));
            acc* akkd = Akkd_ + Akkd_s_.at(c_.b, t, hv_);
            for (int j = 0; j < BC; ++j) akkd[j] = D(i, j);
        }
    }

    acc beta(std::int64_t t) const {
        const std::int64_t off = P_.beta_s.at(c_.b, t, hv_);
        if (P_.beta_is_fp32) return static_cast<acc>(static_cast<const float*>(P_.beta)[off]);
        return to_acc<acc>(static_cast<const X*>(P_.beta)[off]);
    }

    template <class T>
    void stage_row(const T* src, acc* dst) const {
        convert_row(src, dst, P_.K);
        std::fill(dst + P_.K, dst + kp_, acc(0));
    }

    const inter_solve_params<X>& P_;
    acc* Akkd_;
    axis_strides Akkd_s_;
    chunk_coords c_;
    std::int64_t hv_, h_, kp_;
    scratch<acc>& buf_;
};

/// Runs the producer over every (chunk, value head) item of a validated call.
template <class X, int BT, int BC, bool SafeGate>
void run_intra_diag(const cpu_backend& be, const intra_problem& p, const intra_diag_args& a) {
    using item_t = intra_diag_item<X, BT, BC, SafeGate>;
    using acc = acc_t<X>;
    const inter_solve_args ia = kda::detail::as_inter_solve(a);
    const chunk_grid grid = make_chunk_grid(p, ia);
    const inter_solve_params<X> P = make_params<X>(p, ia, grid);
    acc* akkd = static_cast<acc*>(a.Akkd.data);
    const axis_strides akkd_s = kda::detail::strides3(a.Akkd);
    const int nt = static_cast<int>(std::min<std::int64_t>(be.resolved_threads(), std::max<std::int64_t>(1, P.num_items())));
    std::vector<scratch<acc>> buf(static_cast<std::size_t>(nt));
    const std::int64_t kp = item_t::padded_k(p.K);
    for (auto& s : buf) s.reserve(static_cast<std::size_t>(BT * kp));
    parallel_for(P.num_items(), nt, [&](std::int64_t item, int worker) {
        const chunk_coords c = grid(item / P.HV);
        if (c.n <= 0) return;  // an idle slot of the varlen search
        const item_t it(P, akkd, akkd_s, c, item % P.HV, buf[static_cast<std::size_t>(worker)], kp);
        it.run();
    });
}

/// The WY outputs of one work item (kda/intra.hpp) from its unrounded Akk (`ai`, [BT, BT]
/// row-major, the lower block triangle) and the rows staged for it (q, k, g in `b`, `kp` apart):
/// w = Akk (beta k 2^g), u = Akk (beta v), kg = k 2^(g_last - g), qg = q 2^g, every row < n.
template <class X, int BT>
void write_wy(const inter_solve_params<X>& P, const wy_params<X>& wy, const chunk_coords& c, std::int64_t hv, const acc_t<X>* ai,
              const scratch<acc_t<X>>& b, std::int64_t kp) {
    using acc = acc_t<X>;
    using mat = Eigen::Matrix<acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using arr = Eigen::Array<acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using cmap = Eigen::Map<const mat, Eigen::Unaligned, Eigen::OuterStride<>>;
    const auto n = static_cast<Eigen::Index>(c.n), K = static_cast<Eigen::Index>(P.K);
    const cmap A(ai, n, n, Eigen::OuterStride<>(BT));
    const cmap k(b.k.data(), n, K, Eigen::OuterStride<>(kp)), g(b.g.data(), n, K, Eigen::OuterStride<>(kp)), q(b.q.data(), n, K, Eigen::OuterStride<>(kp));
    auto token = [&](Eigen::Index r) { return c.bos + c.t0 + r; };
    Eigen::Matrix<acc, Eigen::Dynamic, 1> beta(n);
    for (Eigen::Index r = 0; r < n; ++r) {
        const std::int64_t off = P.beta_s.at(c.b, token(r), hv);
        beta(r) = P.beta_is_fp32 ? static_cast<acc>(static_cast<const float*>(P.beta)[off]) : to_acc<acc>(static_cast<const X*>(P.beta)[off]);
    }
    auto store = [&](X* base, const axis_strides& s, const mat& m) {
        for (Eigen::Index r = 0; r < n; ++r) {
            X* dst = base + s.at(c.b, token(r), hv);
            for (Eigen::Index j = 0; j < m.cols(); ++j) dst[j] = from_acc<X>(m(r, j));
        }
    };
    if (wy.w != nullptr || wy.qg != nullptr) {
        const arr eg = exp2_accurate<arr>(g.array());
        if (wy.w != nullptr) {
            const mat kb = (k.array() * eg).matrix();
            store(wy.w, wy.w_s, A.template triangularView<Eigen::Lower>() * (beta.asDiagonal() * kb));
        }
        if (wy.qg != nullptr) store(wy.qg, wy.qg_s, (q.array() * eg).matrix());
    }
    if (wy.kg != nullptr) {
        const arr up = exp2_accurate<arr>(((-g).rowwise() + g.row(n - 1)).array());
        store(wy.kg, wy.kg_s, (k.array() * up).matrix());
    }
    if (wy.u != nullptr) {
        const auto V = static_cast<Eigen::Index>(wy.V);
        mat vb(n, V);
        for (Eigen::Index r = 0; r < n; ++r) {
            const X* src = wy.v + wy.v_s.at(c.b, token(r), hv);
            for (Eigen::Index j = 0; j < V; ++j) vb(r, j) = beta(r) * to_acc<acc>(src[j]);
        }
        store(wy.u, wy.u_s, A.template triangularView<Eigen::Lower>() * vb);
    }
}

/// The whole stage over every (chunk, value head) item, one item at a time: the producer stages
/// the item's rows and writes its Akkd rows and Aqk's diagonal blocks, then the inter-solve step
/// (Cfg, Mode) runs on the same staged rows, with those Akkd rows still in cache. `ia` carries
/// `akkd` as its Akkd.
template <class X, class Cfg, class Mode>
void run_intra(const cpu_backend& be, const intra_problem& p, const inter_solve_args& ia, acc_t<X>* akkd, const axis_strides& akkd_s,
               const wy_params<X>& wy) {
    using item_t = intra_diag_item<X, Cfg::BT, Cfg::BC, Mode::safe_gate>;
    using ops_t = tile_ops<X, Cfg, Mode>;
    using acc = acc_t<X>;
    const chunk_grid grid = make_chunk_grid(p, ia);
    const inter_solve_params<X> P = make_params<X>(p, ia, grid);
    const int nt = static_cast<int>(std::min<std::int64_t>(be.resolved_threads(), std::max<std::int64_t>(1, P.num_items())));
    const std::int64_t kp = item_t::padded_k(p.K, std::max(item_t::slice_k, Cfg::BK));  // whole slices for both
    std::vector<scratch<acc>> buf(static_cast<std::size_t>(nt));
    for (auto& s : buf) s.reserve(static_cast<std::size_t>(Cfg::BT * kp));
    std::vector<std::vector<acc>> ai(wy.any() ? static_cast<std::size_t>(nt) : 0);  // per worker: the item's unrounded Akk
    for (auto& v : ai) v.resize(static_cast<std::size_t>(Cfg::BT * Cfg::BT));
    parallel_for(P.num_items(), nt, [&](std::int64_t item, int worker) {
        scratch<acc>& b = buf[static_cast<std::size_t>(worker)];
        const chunk_coords c = grid(item / P.HV);
        if (c.n <= 0) return;  // an idle slot of the varlen search
        const std::int64_t hv = item % P.HV;
        const item_t producer(P, akkd, akkd_s, c, hv, b, kp);  // stages the item's rows
        if (item + 1 < P.num_items()) ops_t::touch_rows(P, grid((item + 1) / P.HV), (item + 1) % P.HV, b);
        producer.run();
        ops_t ops(P, c, hv, b, typename ops_t::prestaged{kp});
        acc* a = wy.any() ? ai[static_cast<std::size_t>(worker)].data() : nullptr;
        if (a != nullptr) {
            std::fill_n(a, Cfg::BT * Cfg::BT, acc(0));
            ops.keep_akk(a);
        }
        kda::detail::inter_solve_chunk<Cfg, Mode>(ops);
        if (a != nullptr) write_wy<X, Cfg::BT>(P, wy, c, hv, a, b, kp);
    });
}

}  // namespace cpu

template <int BT, int BC>
struct chunk_kda_intra_policy<cpu_backend, BT, BC> {
    /// The diagonal-block producer on validated arguments.
    template <class X, class Mode>
    static void launch_diag(const cpu_backend& be, const intra_problem& p, const intra_diag_args& a) {
        cpu::run_intra_diag<X, BT, BC, Mode::safe_gate>(be, p, a);
    }

    /// The whole stage on validated arguments: per work item, the producer into Akkd (the
    /// caller's, or a per-call buffer in the accumulator type), then the inter-solve step on it.
    template <class X, class Mode>
    static void launch_intra(const cpu_backend& be, const intra_problem& p, const intra_args& a) {
        using acc = acc_t<X>;
        std::vector<acc> workspace;
        mutable_tensor_ref akkd = a.Akkd;
        if (akkd.empty_view()) {
            workspace.resize(static_cast<std::size_t>(p.B * p.T * p.HV * BC));
            akkd = make_mutable_tensor(workspace.data(), {p.B, p.T, p.HV, BC});
        }
        inter_solve_args ia = detail::as_inter_solve(a);
        ia.Akkd = as_const(akkd);
        // the CPU computes every precision alike: one inter-solve instantiation per flavour
        using solve_mode = variant<Mode::safe_gate, cpu_backend::effective_precision(Mode::solve_precision)>;
        detail::dispatch_bk(cpu_backend::k_slices{}, cpu_backend::default_bk(p.K), [&]<int BK>() {
            cpu::run_intra<X, tile_config<BT, BC, BK>, solve_mode>(be, p, ia, static_cast<acc*>(akkd.data), detail::strides3(akkd),
                                                                  make_wy_params<X>(p, a));
        });
    }
};

// ---------------------------------------------------------------------------------------------
// The gate cumsum.

namespace cpu {

/// Chunk-local sums of the activated gates, for g of storage type X. Sums run in acc_t<X> (fp32
/// for bf16 / fp16 / fp32 input, fp64 for fp64) with Neumaier's compensation, so a chunk of BT
/// terms costs about one rounding instead of BT; the activations use Eigen's vectorised exp /
/// log1p over K.
template <class X>
void run_cumsum(const cpu_backend& be, const cumsum_problem& p, const cumsum_args& a) {
    using acc = acc_t<X>;
    using vec = Eigen::Array<acc, Eigen::Dynamic, 1>;
    const chunk_grid grid = make_chunk_grid(a.cu_seqlens, tensor_ref{}, p.B, p.T, p.BT);
    const auto* g = static_cast<const X*>(a.g.data);
    auto* out = static_cast<acc*>(a.g_out.data);
    const axis_strides gs = kda::detail::strides3(a.g), os = kda::detail::strides3(a.g_out);
    const bool act = p.activation != gate_activation::none;
    const auto* A_log = act && !a.A_log.empty_view() ? static_cast<const acc*>(a.A_log.data) : nullptr;
    const auto* dt_bias = act && !a.dt_bias.empty_view() ? static_cast<const acc*>(a.dt_bias.data) : nullptr;
    const std::int64_t K = p.K, HV = p.HV, items = grid.num_chunks() * HV;
    const acc scale = static_cast<acc>(p.scale), lower = static_cast<acc>(p.lower_bound);
    const int nt = static_cast<int>(std::min<std::int64_t>(be.resolved_threads(), std::max<std::int64_t>(1, items)));
    struct work {
        vec x, bias, s, c, d, t;
    };
    std::vector<work> buf(static_cast<std::size_t>(nt));
    for (auto& w : buf)
        for (vec* v : {&w.x, &w.bias, &w.s, &w.c, &w.d, &w.t}) v->resize(K);
    parallel_for(items, nt, [&](std::int64_t item, int worker) {
        const chunk_coords c = grid(item / HV);
        if (c.n <= 0) return;  // an idle slot of the varlen search
        const std::int64_t hv = item % HV;
        work& w = buf[static_cast<std::size_t>(worker)];
        // exp(A_log[hv]) (1 without A_log), and the bias row
        const acc rate = A_log != nullptr ? std::exp(A_log[hv * a.A_log.stride[0]]) : acc(1);
        for (std::int64_t k = 0; k < K; ++k) w.bias[k] = dt_bias != nullptr ? dt_bias[(hv * K + k) * a.dt_bias.stride[0]] : acc(0);
        w.s.setZero();
        w.c.setZero();
        for (std::int64_t r = 0; r < c.n; ++r) {
            const std::int64_t t = c.bos + c.t0 + r;
            const X* src = g + gs.at(c.b, t, hv);
            for (std::int64_t k = 0; k < K; ++k) {
                if constexpr (std::is_same_v<X, acc>)
                    w.x[k] = src[k];
                else
                    w.x[k] = to_acc<acc>(src[k]);
            }
            switch (p.activation) {
                case gate_activation::none: w.d = w.x; break;
                case gate_activation::kda:
                    // -exp(A_log) softplus(x + bias), softplus(x) = x above 20 (as FLA)
                    w.x += w.bias;
                    w.t = w.x.exp().log1p();  // vectorised; Eigen's select is not, so it only picks
                    w.d = -rate * (w.x > acc(20)).select(w.x, w.t);
                    break;
                case gate_activation::kda_lower_bound:
                    // lower_bound sigmoid(z), z = exp(A_log) (x + bias); e^-|z| never overflows, so
                    // sigmoid(z) = e^z / (1 + e^z) keeps its relative accuracy for z << 0
                    w.x = rate * (w.x + w.bias);
                    w.t = (-w.x.abs()).exp();
                    w.d = lower * (w.x >= acc(0)).select(acc(1) / (acc(1) + w.t), w.t / (acc(1) + w.t));
                    break;
            }
            // Neumaier: s + c carries the running sum to about one rounding
            w.t = w.s + w.d;
            w.c += (w.s.abs() >= w.d.abs()).select((w.s - w.t) + w.d, (w.d - w.t) + w.s);
            w.s = w.t;
            acc* dst = out + os.at(c.b, t, hv);
            for (std::int64_t k = 0; k < K; ++k) dst[k] = (w.s[k] + w.c[k]) * scale;
        }
    });
}

}  // namespace cpu

template <>
struct chunk_local_cumsum_impl<cpu_backend> {
    /// Computes on validated arguments (T > 0).
    static void run(const cpu_backend& be, const cumsum_problem& p, const cumsum_args& a) {
        KDA_CHECK(be.threads >= 0, "kda::chunk_local_cumsum: argument 'threads': expected >= 0 (0 = all hardware threads), got " << be.threads);
        switch (a.g.type) {
            case dtype::bf16: cpu::run_cumsum<bf16_t>(be, p, a); return;
            case dtype::fp16: cpu::run_cumsum<fp16_t>(be, p, a); return;
            case dtype::fp32: cpu::run_cumsum<float>(be, p, a); return;
            case dtype::fp64: cpu::run_cumsum<double>(be, p, a); return;
            default: KDA_CHECK(false, "kda::chunk_local_cumsum: argument 'g': dtype " << name(a.g.type) << " is not supported by the cpu backend");
        }
    }
};

}  // namespace kda
