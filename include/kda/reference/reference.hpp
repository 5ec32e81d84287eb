// kda/reference/reference.hpp: a float64 evaluation of the inter-solve step, straight from the
// formulas of ALGORITHM.md, plus helpers to build valid inputs. Public, so that other backends can
// be checked with it. Shares no code with the tiled path (no tile_config, no schedule, no chunk_map).
//
// Per chunk of n rows (t_i its i-th token) and value head hv, with G(i, j)[k] = 2^(g_i[k] - g_j[k]):
//   S_qk[i, j] = scale sum_k q_i[k] k_j[k] G(i, j)[k]
//   L[i, j]    = beta_i sum_k k_i[k] k_j[k] G(i, j)[k]      (j < i, other sub-chunk)
//   L_ss       = Akkd's strict lower part (not safe gate), or tril(Akkd)^-1 - I (safe gate)
//   Aqk[t_i, j] = S_qk[i, j] where i / BC > j / BC;  Akk[t_i, j] = (I + L)^-1[i, j] where
//   i / BC >= j / BC and j < n.
// The dense inverse comes from Eigen's triangular solve of (I + L) X = I.
//
// The intra stage (kda/intra.hpp), from the same formulas:
//   intra(p, a)              whole causal Aqk (S_qk for j <= i, 0 above the diagonal inside the
//                            diagonal blocks) and Akk = (I + L)^-1 with every L entry from q, k, g, beta;
//   intra_diag(p, a)         the producer's Aqk diagonal blocks and Akkd rows (both flavours);
//   chunk_local_cumsum(p, a) the gate activations and chunk-local sums;
//   make_gate_inputs(...)    raw gate inputs for chunk_local_cumsum.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "../args.hpp"
#include "../config.hpp"
#include "../cpu/backend.hpp"
#include "../intra.hpp"
#include "../tensor.hpp"
#include "../types.hpp"
#include "../varlen.hpp"
#include "host_tensor.hpp"

namespace kda::reference {

/// Element (i0, i1, i2, i3) of a host tensor view of any floating dtype, as double.
inline double read(const tensor_ref& t, std::int64_t i0, std::int64_t i1 = 0, std::int64_t i2 = 0, std::int64_t i3 = 0) {
    const std::int64_t off = i0 * t.stride[0] + (t.rank > 1 ? i1 * t.stride[1] : 0) + (t.rank > 2 ? i2 * t.stride[2] : 0) +
                             (t.rank > 3 ? i3 * t.stride[3] : 0);
    switch (t.type) {
        case dtype::bf16: return static_cast<double>(cpu::to_acc<float>(static_cast<const bf16_t*>(t.data)[off]));
        case dtype::fp16: return static_cast<double>(cpu::to_acc<float>(static_cast<const fp16_t*>(t.data)[off]));
        case dtype::fp32: return static_cast<const float*>(t.data)[off];
        case dtype::fp64: return static_cast<const double*>(t.data)[off];
        case dtype::i32: return static_cast<const std::int32_t*>(t.data)[off];
        case dtype::i64: return static_cast<double>(static_cast<const std::int64_t*>(t.data)[off]);
    }
    return 0;
}

/// Rounds v to the dtype of a contiguous host tensor and stores it at flat index i.
inline void store(host_tensor& t, std::int64_t i, double v) {
    switch (t.type()) {
        case dtype::bf16: t.data<bf16_t>()[i] = cpu::from_acc<bf16_t>(static_cast<float>(v)); break;
        case dtype::fp16: t.data<fp16_t>()[i] = cpu::from_acc<fp16_t>(static_cast<float>(v)); break;
        case dtype::fp32: t.data<float>()[i] = static_cast<float>(v); break;
        case dtype::fp64: t.data<double>()[i] = v; break;
        case dtype::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
        case dtype::i64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v); break;
    }
}

/// Rounds v once to dtype X and back (the "floor" of an exact answer).
inline double round_to(dtype X, double v) {
    switch (X) {
        case dtype::bf16: return static_cast<float>(Eigen::bfloat16(static_cast<float>(v)));
        case dtype::fp16: return static_cast<float>(Eigen::half(static_cast<float>(v)));
        case dtype::fp32: return static_cast<float>(v);
        default: return v;
    }
}

/// The sequences of a problem as [begin, end) token ranges with their batch row.
struct sequence {
    std::int64_t b, begin, end;
};
inline std::vector<sequence> sequences(const inter_solve_problem& p, const inter_solve_args& a) {
    std::vector<sequence> out;
    if (a.cu_seqlens.data != nullptr) {
        for (std::int64_t n = 0; n + 1 < a.cu_seqlens.shape[0]; ++n)
            out.push_back({0, static_cast<std::int64_t>(read(a.cu_seqlens, n)), static_cast<std::int64_t>(read(a.cu_seqlens, n + 1))});
    } else {
        for (std::int64_t b = 0; b < p.B; ++b) out.push_back({b, 0, p.T});
    }
    return out;
}

/// Float64 outputs and the masks of the entries the step writes, laid out [B, T, HV, BT].
struct result {
    std::int64_t B = 0, T = 0, HV = 0, BT = 0;
    std::vector<double> Aqk, Akk;
    std::vector<double> IL;  // I + L inside each chunk (lower triangle, diagonal blocks from Akkd)
    std::vector<std::int32_t> chunk_pos;  // [B, T]: position of each token inside its chunk
    std::vector<std::uint8_t> aqk_written, akk_written;
    [[nodiscard]] std::int64_t index(std::int64_t b, std::int64_t t, std::int64_t hv, std::int64_t j) const {
        return ((b * T + t) * HV + hv) * BT + j;
    }
};

namespace detail {
using mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;

/// sum_k x_i[k] y_j[k] 2^(g_i[k] - g_j[k]) for all i, j of one chunk, from per-row exponent
/// factors 2^(g_i - c) and 2^(c - g_j) with c the chunk's first row (exact in double while the
/// chunk's gate range stays below 2^900), else term by term.
inline mat gated_products(const mat& x, const mat& y, const mat& g) {
    const Eigen::Index n = x.rows();
    const double range = n > 0 ? (g.rowwise() - g.row(0)).cwiseAbs().maxCoeff() : 0.0;
    mat out(n, n);
    if (range < 900) {
        auto exp2 = [](double v) { return std::exp2(v); };
        const mat gd = (g.rowwise() - g.row(0)).unaryExpr(exp2);
        const mat gu = (-(g.rowwise() - g.row(0))).unaryExpr(exp2);
        out.noalias() = x.cwiseProduct(gd) * y.cwiseProduct(gu).transpose();
    } else {
        for (Eigen::Index i = 0; i < n; ++i)
            for (Eigen::Index j = 0; j < n; ++j) out(i, j) = (x.row(i).array() * y.row(j).array() * (g.row(i) - g.row(j)).unaryExpr([](double v) { return std::exp2(v); }).array()).sum();
    }
    return out;
}
/// A result of p's sizes: every entry 0, nothing written, no row in a chunk yet.
inline result empty_result(const inter_solve_problem& p) {
    result r;
    r.B = p.B;
    r.T = p.T;
    r.HV = p.HV;
    r.BT = p.BT;
    const std::size_t total = static_cast<std::size_t>(p.B * p.T * p.HV * p.BT);
    r.Aqk.assign(total, 0.0);
    r.Akk.assign(total, 0.0);
    r.IL.assign(total, 0.0);
    r.chunk_pos.assign(static_cast<std::size_t>(p.B * p.T), -1);
    r.aqk_written.assign(total, 0);
    r.akk_written.assign(total, 0);
    return r;
}
}  // namespace detail

/// The step, in float64, on host tensors (outputs in `a` are not touched).
inline result inter_solve(const inter_solve_problem& p, const inter_solve_args& a) {
    result r = detail::empty_result(p);
    const std::int64_t G = p.HV / p.H, BC = p.BC, K = p.K;
    for (const auto& sq : sequences(p, a)) {
        for (std::int64_t c0 = sq.begin; c0 < sq.end; c0 += p.BT) {
            const std::int64_t n = std::min<std::int64_t>(p.BT, sq.end - c0);
            for (std::int64_t hv = 0; hv < p.HV; ++hv) {
                const std::int64_t h = hv / G;
                for (std::int64_t i = 0; i < n; ++i) r.chunk_pos[static_cast<std::size_t>(sq.b * p.T + c0 + i)] = static_cast<std::int32_t>(i);
                detail::mat q(n, K), k(n, K), g(n, K);
                for (std::int64_t i = 0; i < n; ++i)
                    for (std::int64_t kk = 0; kk < K; ++kk) {
                        q(i, kk) = read(a.q, sq.b, c0 + i, h, kk);
                        k(i, kk) = read(a.k, sq.b, c0 + i, h, kk);
                        g(i, kk) = read(a.g, sq.b, c0 + i, hv, kk);
                    }
                const detail::mat S = p.scale * detail::gated_products(q, k, g);
                detail::mat L = detail::gated_products(k, k, g);
                for (std::int64_t i = 0; i < n; ++i) L.row(i) *= read(a.beta, sq.b, c0 + i, hv);
                // I + L with the diagonal blocks taken from Akkd
                detail::mat M = detail::mat::Identity(n, n);
                for (std::int64_t i = 0; i < n; ++i)
                    for (std::int64_t j = 0; j < i; ++j)
                        if (i / BC != j / BC) M(i, j) = L(i, j);
                for (std::int64_t s0 = 0; s0 < n; s0 += BC) {
                    const std::int64_t ns = std::min<std::int64_t>(BC, n - s0);
                    detail::mat D = detail::mat::Zero(ns, ns);
                    for (std::int64_t i = 0; i < ns; ++i)
                        for (std::int64_t j = 0; j < (p.safe_gate ? i + 1 : i); ++j) D(i, j) = read(a.Akkd, sq.b, c0 + s0 + i, hv, j);
                    if (p.safe_gate) {
                        // the block of I + L is the inverse of the given (lower) inverse
                        M.block(s0, s0, ns, ns) = D.triangularView<Eigen::Lower>().solve(detail::mat::Identity(ns, ns));
                    } else {
                        M.block(s0, s0, ns, ns) += D;
                    }
                }
                const detail::mat Ainv = M.triangularView<Eigen::Lower>().solve(detail::mat::Identity(n, n));
                for (std::int64_t i = 0; i < n; ++i)
                    for (std::int64_t j = 0; j < n; ++j) {
                        const std::int64_t si = i / BC, sj = j / BC;
                        const std::int64_t idx = r.index(sq.b, c0 + i, hv, j);
                        r.IL[idx] = M(i, j);
                        if (si > sj) {
                            r.Aqk[idx] = S(i, j);
                            r.aqk_written[idx] = 1;
                        }
                        if (si >= sj) {
                            r.Akk[idx] = Ainv(i, j);
                            r.akk_written[idx] = 1;
                        }
                    }
            }
        }
    }
    return r;
}

namespace detail {
/// Visits every diagonal block (sub-chunk s0 .. s0 + ns of a chunk, value head hv) in float64:
/// f(sequence, s0, ns, hv, k, g, D) with k, g the block's rows [ns, K] and D [ns, ns] the block of
/// Akkd: the strictly lower, beta-scaled L_ss, or, in safe-gate mode, (I + L_ss)^-1.
template <class F>
void for_each_diag_block(const inter_solve_problem& p, const inter_solve_args& a, F&& f) {
    const std::int64_t G = p.HV / p.H, BC = p.BC, K = p.K;
    for (const auto& sq : sequences(p, a)) {
        for (std::int64_t c0 = sq.begin; c0 < sq.end; c0 += p.BT) {
            const std::int64_t cend = std::min(sq.end, c0 + p.BT);
            for (std::int64_t s0 = c0; s0 < cend; s0 += BC) {
                const std::int64_t ns = std::min(BC, cend - s0);
                for (std::int64_t hv = 0; hv < p.HV; ++hv) {
                    mat k(ns, K), g(ns, K);
                    for (std::int64_t i = 0; i < ns; ++i)
                        for (std::int64_t kk = 0; kk < K; ++kk) {
                            k(i, kk) = read(a.k, sq.b, s0 + i, hv / G, kk);
                            g(i, kk) = read(a.g, sq.b, s0 + i, hv, kk);
                        }
                    mat L = gated_products(k, k, g).triangularView<Eigen::StrictlyLower>();
                    for (std::int64_t i = 0; i < ns; ++i) L.row(i) *= read(a.beta, sq.b, s0 + i, hv);
                    mat D = L;
                    if (p.safe_gate) {
                        const mat I = mat::Identity(ns, ns);
                        D = (I + L).triangularView<Eigen::UnitLower>().solve(I);
                    }
                    f(sq, s0, ns, hv, k, g, D);
                }
            }
        }
    }
}
}  // namespace detail

/// Builds Akkd [B, T, HV, BC] (dtype fp32, or fp64 for fp64 data) from the formulas in float64:
/// the strictly lower, beta-scaled diagonal block rows of L, or, in safe-gate mode, the rows of the
/// blocks' inverses (I + L_ss)^-1. Reads q, k, g, beta and cu_seqlens from `a`.
inline host_tensor make_akkd(const inter_solve_problem& p, const inter_solve_args& a) {
    host_tensor out(acc_dtype(a.q.type), {p.B, p.T, p.HV, p.BC});
    const std::int64_t BC = p.BC;
    detail::for_each_diag_block(p, a, [&](const sequence& sq, std::int64_t s0, std::int64_t ns, std::int64_t hv, const detail::mat&,
                                          const detail::mat&, const detail::mat& D) {
        for (std::int64_t i = 0; i < ns; ++i)
            for (std::int64_t j = 0; j < ns; ++j) store(out, ((sq.b * p.T + s0 + i) * p.HV + hv) * BC + j, D(i, j));
    });
    return out;
}

namespace detail {
/// cu_seqlens [N + 1] (int64) of the given sequence lengths.
inline host_tensor cu_seqlens_of(const std::vector<std::int64_t>& lengths) {
    host_tensor t(dtype::i64, {static_cast<std::int64_t>(lengths.size()) + 1});
    auto* cu = t.data<std::int64_t>();
    cu[0] = 0;
    for (std::size_t n = 0; n < lengths.size(); ++n) cu[n + 1] = cu[n] + lengths[n];
    return t;
}

/// A generator's varlen setup: B must be 1 (argument check naming `fn`); T becomes the total length.
inline host_tensor varlen_offsets(const std::vector<std::int64_t>& lengths, std::int64_t B, const char* fn, std::int64_t& T) {
    KDA_CHECK(B == 1, fn << ": argument 'B': varlen needs B == 1, got " << B);
    host_tensor cu = cu_seqlens_of(lengths);
    T = cu.data<std::int64_t>()[lengths.size()];
    return cu;
}
}  // namespace detail

/// Knobs of the input generator.
struct generator_options {
    std::uint64_t seed = 0;
    std::vector<std::int64_t> seqlens;  // non-empty: varlen with these lengths (B must be 1)
    bool beta_fp32 = false;             // beta in fp32 instead of X
    bool with_chunk_indices = true;     // varlen: also provide chunk_indices
    double lower_bound = -5.0;          // safe gate: per-token log-decay in (lower_bound, 0)
};

/// Realistic inputs: L2-normalised q and k, beta = sigmoid(N(0, 1)), and per-token log-decays
/// cumulated per chunk (restarting at every sequence start) in log2 space. Not safe gate:
/// log-decay = -exp(a) softplus(x), a ~ U(log 0.01, log 0.5) per (head, k), x ~ N(0, 1). Safe gate:
/// log-decay = lower_bound sigmoid(exp(a) x), a ~ U(0, log 16): down to lower_bound nats per token,
/// i.e. a sub-chunk may decay by ~2^-115. Akkd comes from make_akkd.
struct inputs : host_inputs {
    inter_solve_problem problem;
    /// Output tensor [B, T, HV, BT] of the data type, filled with `fill`.
    [[nodiscard]] host_tensor make_output(double fill) const {
        host_tensor t(q.type(), {problem.B, problem.T, problem.HV, problem.BT});
        for (std::int64_t i = 0; i < t.numel(); ++i) store(t, i, fill);
        return t;
    }
};

inline inputs make_inputs(inter_solve_problem p, dtype X, const generator_options& opt = {}) {
    inputs in;
    std::mt19937_64 rng(opt.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    if (!opt.seqlens.empty()) {
        in.cu_seqlens = detail::varlen_offsets(opt.seqlens, p.B, "kda::reference::make_inputs", p.T);
        if (opt.with_chunk_indices) {
            const auto ci = prepare_chunk_indices(in.cu_seqlens.data<std::int64_t>(), in.cu_seqlens.numel(), p.BT);
            in.chunk_indices = host_tensor(dtype::i64, {static_cast<std::int64_t>(ci.size() / 2), 2});
            std::copy(ci.begin(), ci.end(), in.chunk_indices.data<std::int64_t>());
        }
    }
    in.problem = p;
    const dtype A = acc_dtype(X);
    in.q = host_tensor(X, {p.B, p.T, p.H, p.K});
    in.k = host_tensor(X, {p.B, p.T, p.H, p.K});
    in.g = host_tensor(A, {p.B, p.T, p.HV, p.K});
    in.beta = host_tensor(opt.beta_fp32 ? dtype::fp32 : X, {p.B, p.T, p.HV});
    std::vector<double> row(static_cast<std::size_t>(p.K));
    for (auto* t : {&in.q, &in.k})
        for (std::int64_t r = 0; r < p.B * p.T * p.H; ++r) {
            double nrm = 0;
            for (auto& v : row) {
                v = normal(rng);
                nrm += v * v;
            }
            nrm = std::sqrt(nrm) + 1e-6;
            for (std::int64_t kk = 0; kk < p.K; ++kk) store(*t, r * p.K + kk, row[static_cast<std::size_t>(kk)] / nrm);
        }
    for (std::int64_t i = 0; i < in.beta.numel(); ++i) store(in.beta, i, 1.0 / (1.0 + std::exp(-normal(rng))));
    // per (head, k) rate, then per-token log-decays cumulated per chunk
    std::uniform_real_distribution<double> ua(p.safe_gate ? 0.0 : std::log(0.01), p.safe_gate ? std::log(16.0) : std::log(0.5));
    std::vector<double> rate(static_cast<std::size_t>(p.HV * p.K));
    for (auto& v : rate) v = std::exp(ua(rng));
    inter_solve_args tmp;
    tmp.cu_seqlens = in.cu_seqlens.ref();
    const auto seqs = sequences(p, tmp);
    for (const auto& sq : seqs)
        for (std::int64_t hv = 0; hv < p.HV; ++hv)
            for (std::int64_t kk = 0; kk < p.K; ++kk) {
                double acc = 0;
                for (std::int64_t t = sq.begin; t < sq.end; ++t) {
                    if ((t - sq.begin) % p.BT == 0) acc = 0;
                    const double x = normal(rng), a = rate[static_cast<std::size_t>(hv * p.K + kk)];
                    const double d = p.safe_gate ? opt.lower_bound / (1.0 + std::exp(-a * x)) : -a * std::log1p(std::exp(x));
                    acc += d / std::numbers::ln2;
                    store(in.g, ((sq.b * p.T + t) * p.HV + hv) * p.K + kk, acc);
                }
            }
    host_tensor dummy_out;
    inter_solve_args a = in.args(dummy_out, dummy_out);
    in.Akkd = make_akkd(p, a);
    return in;
}

// ---------------------------------------------------------------------------------------------
// The intra stage.

namespace detail {
/// One (chunk, value head) work item of the intra stage in float64: its n rows of q, k (the value
/// head's q/k head), g and beta, and I + L (L_ij = beta_i sum_k k_i k_j 2^(g_i - g_j), j < i).
struct chunk_rows {
    mat q, k, g, IL;
    Eigen::VectorXd beta;
    /// (I + L)^-1.
    [[nodiscard]] mat inverse() const { return IL.triangularView<Eigen::UnitLower>().solve(mat::Identity(IL.rows(), IL.cols())); }
};

inline chunk_rows read_chunk(const intra_problem& p, const intra_args& a, std::int64_t b, std::int64_t c0, std::int64_t n, std::int64_t hv) {
    const std::int64_t G = p.HV / p.H, K = p.K;
    chunk_rows c{mat(n, K), mat(n, K), mat(n, K), mat(), Eigen::VectorXd(n)};
    for (std::int64_t i = 0; i < n; ++i) {
        c.beta(i) = read(a.beta, b, c0 + i, hv);
        for (std::int64_t kk = 0; kk < K; ++kk) {
            c.q(i, kk) = read(a.q, b, c0 + i, hv / G, kk);
            c.k(i, kk) = read(a.k, b, c0 + i, hv / G, kk);
            c.g(i, kk) = read(a.g, b, c0 + i, hv, kk);
        }
    }
    c.IL = gated_products(c.k, c.k, c.g).triangularView<Eigen::StrictlyLower>();
    c.IL = c.beta.asDiagonal() * c.IL;
    c.IL.diagonal().setOnes();
    return c;
}
}  // namespace detail

/// The whole intra stage in float64 (outputs in `a` are not touched): Aqk[t_i, j] = S_qk[i, j] for
/// j <= i and 0 for j > i, Akk = (I + L)^-1, both written where i / BC >= j / BC and j < n. `IL`
/// holds I + L. Akkd is not read.
inline result intra(const intra_problem& p, const intra_args& a) {
    const inter_solve_args ia = kda::detail::as_inter_solve(a);
    result r = detail::empty_result(p);
    const std::int64_t BC = p.BC;
    for (const auto& sq : sequences(p, ia)) {
        for (std::int64_t c0 = sq.begin; c0 < sq.end; c0 += p.BT) {
            const std::int64_t n = std::min<std::int64_t>(p.BT, sq.end - c0);
            for (std::int64_t i = 0; i < n; ++i) r.chunk_pos[static_cast<std::size_t>(sq.b * p.T + c0 + i)] = static_cast<std::int32_t>(i);
            for (std::int64_t hv = 0; hv < p.HV; ++hv) {
                const detail::chunk_rows c = detail::read_chunk(p, a, sq.b, c0, n, hv);
                const detail::mat S = p.scale * detail::gated_products(c.q, c.k, c.g);
                const detail::mat& M = c.IL;
                const detail::mat Ainv = c.inverse();
                for (std::int64_t i = 0; i < n; ++i)
                    for (std::int64_t j = 0; j < n; ++j) {
                        const std::int64_t idx = r.index(sq.b, c0 + i, hv, j);
                        r.IL[static_cast<std::size_t>(idx)] = j <= i ? M(i, j) : 0.0;
                        if (i / BC < j / BC) continue;
                        r.Aqk[static_cast<std::size_t>(idx)] = j <= i ? S(i, j) : 0.0;
                        r.Akk[static_cast<std::size_t>(idx)] = Ainv(i, j);
                        r.aqk_written[static_cast<std::size_t>(idx)] = 1;
                        r.akk_written[static_cast<std::size_t>(idx)] = 1;
                    }
            }
        }
    }
    return r;
}

/// Float64 WY outputs of the whole intra stage (kda/intra.hpp): w, kg, qg [B, T, HV, K] and u
/// [B, T, HV, V] (V = 0: none), flat; `row_written` [B, T] marks the tokens inside a sequence,
/// whose rows are written in full.
struct wy_result {
    std::int64_t B = 0, T = 0, HV = 0, K = 0, V = 0;
    std::vector<double> w, u, kg, qg;
    std::vector<std::uint8_t> row_written;
};

/// The WY outputs in float64 from the exact inverse (I + L)^-1 of each chunk: w = A (beta k 2^g),
/// u = A (beta v) (when `a.v` is given), kg = k 2^(g_last - g), qg = q 2^g. Outputs in `a` are not
/// touched.
inline wy_result intra_wy(const intra_problem& p, const intra_args& a) {
    const inter_solve_args ia = kda::detail::as_inter_solve(a);
    wy_result r;
    r.B = p.B;
    r.T = p.T;
    r.HV = p.HV;
    r.K = p.K;
    const bool has_v = !a.v.empty_view();
    r.V = has_v ? p.V : 0;
    const std::int64_t K = p.K, V = r.V;
    r.w.assign(static_cast<std::size_t>(p.B * p.T * p.HV * K), 0.0);
    r.kg = r.w;
    r.qg = r.w;
    r.u.assign(static_cast<std::size_t>(p.B * p.T * p.HV * V), 0.0);
    r.row_written.assign(static_cast<std::size_t>(p.B * p.T), 0);
    auto exp2 = [](double x) { return std::exp2(x); };
    for (const auto& sq : sequences(p, ia)) {
        for (std::int64_t c0 = sq.begin; c0 < sq.end; c0 += p.BT) {
            const std::int64_t n = std::min<std::int64_t>(p.BT, sq.end - c0);
            for (std::int64_t i = 0; i < n; ++i) r.row_written[static_cast<std::size_t>(sq.b * p.T + c0 + i)] = 1;
            for (std::int64_t hv = 0; hv < p.HV; ++hv) {
                const detail::chunk_rows c = detail::read_chunk(p, a, sq.b, c0, n, hv);
                const detail::mat &q = c.q, &k = c.k, &g = c.g;
                detail::mat v(n, V);
                for (std::int64_t i = 0; i < n; ++i)
                    for (std::int64_t vv = 0; vv < V; ++vv) v(i, vv) = read(a.v, sq.b, c0 + i, hv, vv);
                const detail::mat Ainv = c.inverse();
                const detail::mat eg = g.unaryExpr(exp2);
                const detail::mat kb = c.beta.asDiagonal() * k.cwiseProduct(eg);
                const detail::mat w = Ainv * kb;
                const detail::mat u = Ainv * (c.beta.asDiagonal() * v);
                for (std::int64_t i = 0; i < n; ++i) {
                    const std::int64_t row = (sq.b * p.T + c0 + i) * p.HV + hv;
                    for (std::int64_t kk = 0; kk < K; ++kk) {
                        const auto e = static_cast<std::size_t>(row * K + kk);
                        r.w[e] = w(i, kk);
                        r.kg[e] = k(i, kk) * std::exp2(g(n - 1, kk) - g(i, kk));
                        r.qg[e] = q(i, kk) * eg(i, kk);
                    }
                    for (std::int64_t vv = 0; vv < V; ++vv) r.u[static_cast<std::size_t>(row * V + vv)] = u(i, vv);
                }
            }
        }
    }
    return r;
}

/// Float64 outputs of the diagonal-block producer and the masks of the entries it writes:
/// Aqk [B, T, HV, BT] (the diagonal blocks, j < n) and Akkd [B, T, HV, BC] (all BC entries of every
/// row inside a sequence).
struct diag_result {
    std::int64_t B = 0, T = 0, HV = 0, BT = 0, BC = 0;
    std::vector<double> Aqk, Akkd;
    std::vector<std::uint8_t> aqk_written, akkd_written;
    [[nodiscard]] std::int64_t aqk_index(std::int64_t b, std::int64_t t, std::int64_t hv, std::int64_t j) const {
        return ((b * T + t) * HV + hv) * BT + j;
    }
    [[nodiscard]] std::int64_t akkd_index(std::int64_t b, std::int64_t t, std::int64_t hv, std::int64_t j) const {
        return ((b * T + t) * HV + hv) * BC + j;
    }
};

/// The producer in float64 (outputs in `a` are not touched): Aqk = scale S_qk on and below the
/// diagonal of each diagonal block, 0 above it (columns inside the chunk); Akkd rows as make_akkd
/// (p.safe_gate picks the flavour), 0 in the columns past a short sub-chunk.
inline diag_result intra_diag(const intra_problem& p, const intra_diag_args& a) {
    const inter_solve_args ia = kda::detail::as_inter_solve(a);
    diag_result r;
    r.B = p.B;
    r.T = p.T;
    r.HV = p.HV;
    r.BT = p.BT;
    r.BC = p.BC;
    r.Aqk.assign(static_cast<std::size_t>(p.B * p.T * p.HV * p.BT), 0.0);
    r.aqk_written.assign(r.Aqk.size(), 0);
    r.Akkd.assign(static_cast<std::size_t>(p.B * p.T * p.HV * p.BC), 0.0);
    r.akkd_written.assign(r.Akkd.size(), 0);
    const std::int64_t G = p.HV / p.H, K = p.K;
    detail::for_each_diag_block(p, ia, [&](const sequence& sq, std::int64_t s0, std::int64_t ns, std::int64_t hv, const detail::mat& k,
                                          const detail::mat& g, const detail::mat& D) {
        detail::mat q(ns, K);
        for (std::int64_t i = 0; i < ns; ++i)
            for (std::int64_t kk = 0; kk < K; ++kk) q(i, kk) = read(a.q, sq.b, s0 + i, hv / G, kk);
        const detail::mat S = p.scale * detail::gated_products(q, k, g);
        const std::int64_t col0 = (s0 - sq.begin) % p.BT;  // the block's first column inside its chunk
        for (std::int64_t i = 0; i < ns; ++i) {
            for (std::int64_t j = 0; j < ns; ++j) {
                const auto idx = static_cast<std::size_t>(r.aqk_index(sq.b, s0 + i, hv, col0 + j));
                r.Aqk[idx] = j <= i ? S(i, j) : 0.0;
                r.aqk_written[idx] = 1;
            }
            for (std::int64_t j = 0; j < p.BC; ++j) {
                const auto idx = static_cast<std::size_t>(r.akkd_index(sq.b, s0 + i, hv, j));
                r.Akkd[idx] = j < ns ? D(i, j) : 0.0;
                r.akkd_written[idx] = 1;
            }
        }
    });
    return r;
}

/// The gate cumsum in float64: [B, T, HV, K] flat. softplus(x) = x above 20, log1p(exp(x)) else
/// (the definition, as in FLA); sums restart at every chunk start, chunks start at every sequence
/// start.
inline std::vector<double> chunk_local_cumsum(const cumsum_problem& p, const cumsum_args& a) {
    std::vector<double> out(static_cast<std::size_t>(p.B * p.T * p.HV * p.K), 0.0);
    inter_solve_problem sp;
    sp.B = p.B;
    sp.T = p.T;
    inter_solve_args sa;
    sa.cu_seqlens = a.cu_seqlens;
    const bool act = p.activation != gate_activation::none;
    const bool has_a = act && a.A_log.data != nullptr, has_bias = act && a.dt_bias.data != nullptr;
    for (const auto& sq : sequences(sp, sa))
        for (std::int64_t hv = 0; hv < p.HV; ++hv) {
            const double rate = has_a ? std::exp(read(a.A_log, hv)) : 1.0;
            for (std::int64_t kk = 0; kk < p.K; ++kk) {
                const double bias = has_bias ? read(a.dt_bias, hv * p.K + kk) : 0.0;
                double sum = 0;
                for (std::int64_t t = sq.begin; t < sq.end; ++t) {
                    if ((t - sq.begin) % p.BT == 0) sum = 0;
                    const double x = read(a.g, sq.b, t, hv, kk) + bias;
                    double d = x;
                    if (p.activation == gate_activation::kda) d = -rate * (x > 20 ? x : std::log1p(std::exp(x)));
                    if (p.activation == gate_activation::kda_lower_bound) d = p.lower_bound / (1.0 + std::exp(-rate * x));
                    sum += d;
                    out[static_cast<std::size_t>(((sq.b * p.T + t) * p.HV + hv) * p.K + kk)] = p.scale * sum;
                }
            }
        }
    return out;
}

/// Knobs of the gate-input generator.
struct gate_options {
    std::uint64_t seed = 0;
    std::vector<std::int64_t> seqlens;  // non-empty: varlen with these lengths (B must be 1)
    bool with_A_log = true;             // kda always has A_log; kda_lower_bound may go without
    bool with_dt_bias = true;
};

/// Raw inputs of chunk_local_cumsum and a matching output.
///   none:            g = per-token log-decays -a softplus(x), a ~ U(log 0.01, log 0.5) per (hv, k)
///   kda:             g ~ N(0, 2^2) with 1 in 32 entries ~ U(-30, 30) (both branches of softplus),
///                    A_log ~ U(log 0.01, log 0.5), dt_bias ~ N(0, 0.5^2)
///   kda_lower_bound: g as for kda, A_log ~ U(0, log 16), dt_bias ~ N(0, 0.5^2)
/// g is stored in X, A_log / dt_bias in X's accumulator type.
struct gate_inputs {
    cumsum_problem problem;
    host_tensor g, A_log, dt_bias, cu_seqlens;

    [[nodiscard]] cumsum_args args(host_tensor& g_out) const {
        cumsum_args a;
        a.g = g.ref();
        a.A_log = A_log.ref();
        a.dt_bias = dt_bias.ref();
        a.g_out = g_out.mref();
        a.cu_seqlens = cu_seqlens.ref();
        return a;
    }
    /// Output [B, T, HV, K] in the accumulator type, filled with `fill`.
    [[nodiscard]] host_tensor make_output(double fill) const {
        host_tensor t(acc_dtype(g.type()), {problem.B, problem.T, problem.HV, problem.K});
        for (std::int64_t i = 0; i < t.numel(); ++i) store(t, i, fill);
        return t;
    }
};

inline gate_inputs make_gate_inputs(cumsum_problem p, dtype X, const gate_options& opt = {}) {
    gate_inputs in;
    std::mt19937_64 rng(opt.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    if (!opt.seqlens.empty()) in.cu_seqlens = detail::varlen_offsets(opt.seqlens, p.B, "kda::reference::make_gate_inputs", p.T);
    in.problem = p;
    const dtype A = acc_dtype(X);
    in.g = host_tensor(X, {p.B, p.T, p.HV, p.K});
    const bool lb = p.activation == gate_activation::kda_lower_bound;
    if (p.activation == gate_activation::none) {
        std::vector<double> rate(static_cast<std::size_t>(p.HV * p.K));
        for (auto& v : rate) v = std::exp(std::log(0.01) + unit(rng) * (std::log(0.5) - std::log(0.01)));
        for (std::int64_t i = 0; i < in.g.numel(); ++i)
            store(in.g, i, -rate[static_cast<std::size_t>(i % (p.HV * p.K))] * std::log1p(std::exp(normal(rng))));
        return in;
    }
    for (std::int64_t i = 0; i < in.g.numel(); ++i) store(in.g, i, unit(rng) < 1.0 / 32 ? -30.0 + 60.0 * unit(rng) : 2.0 * normal(rng));
    if (opt.with_A_log || p.activation == gate_activation::kda) {
        in.A_log = host_tensor(A, {p.HV});
        for (std::int64_t hv = 0; hv < p.HV; ++hv)
            store(in.A_log, hv, lb ? unit(rng) * std::log(16.0) : std::log(0.01) + unit(rng) * (std::log(0.5) - std::log(0.01)));
    }
    if (opt.with_dt_bias) {
        in.dt_bias = host_tensor(A, {p.HV * p.K});
        for (std::int64_t i = 0; i < in.dt_bias.numel(); ++i) store(in.dt_bias, i, 0.5 * normal(rng));
    }
    return in;
}

}  // namespace kda::reference
