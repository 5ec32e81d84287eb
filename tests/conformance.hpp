// tests/conformance.hpp: the conformance suite, reusable for any backend.
//
// A Runner wraps a backend for host tensors:
//   std::string name() const;
//   bool supports(kda::dtype X) const;
//   std::vector<kda::precision> precisions() const;          // the modes to test
//   void operator()(const kda::inter_solve_problem&, const kda::inter_solve_args& host_args) const;
//        // runs the step; outputs are host tensors; throws kda::error on bad input
//   double tolerance(kda::dtype X, kda::precision p, double floor) const;  // on relative RMS
//   double compute_roundoff(kda::precision p) const;           // unit roundoff of its products
// KDA_CONFORMANCE_SUITE(Runner, "[tag]") then registers every test case below for that runner, and
// KDA_CONFORMANCE_FP64_GRID(Runner, "[tag]") the fp64 dense grid for a runner that supports fp64;
// tests/test_cpu.cpp is the first user.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kda/reference/host_tensor.hpp>
#include <kda/reference/reference.hpp>

#include "cases.hpp"
#include "support/catch.hpp"
#include "support/metrics.hpp"

namespace kda::testing {

inline constexpr double sentinel = -3.75;  // exact in every dtype; the step never writes it by chance here

/// Residual of Akk (I + L) = I on the entries Akk holds, against
///   4 u_X sum_m |Akk_im| |(I + L)_mj| + 4 eta sum_m |(I + L)_mj|
///     + 4 (n + K) u_c (sum_m |Akk_im|) max_m |(I + L)_mj|:
/// the rounding of Akk to X (u_X: its unit roundoff), the absolute rounding of entries that decayed
/// below the normal range (eta: X's subnormal spacing), and, normwise, the backward error of a
/// triangular inversion over n terms (Higham, ch. 8) plus that of L's K-term dot products, whose
/// terms may cancel (u_c: the products' unit roundoff).
template <class Runner>
void check_identity(const Runner& run, const test_case& tc, precision prec, const inter_solve_problem& p, const reference::result& ref,
                    const host_tensor& Akk) {
    const double uX = unit_roundoff(tc.X), uc = run.compute_roundoff(prec);
    const tensor_ref o = flat(Akk);
    const std::int64_t BT = p.BT, HV = p.HV;
    double worst = 0;
    std::int64_t worst_at = -1;
    for (std::int64_t bt = 0; bt < ref.B * ref.T; ++bt) {
        const std::int64_t pos = ref.chunk_pos[static_cast<std::size_t>(bt)];
        for (std::int64_t hv = 0; hv < HV; ++hv) {
            const std::int64_t base = (bt * HV + hv) * BT;
            for (std::int64_t j = 0; j < BT; ++j) {
                if (!ref.akk_written[static_cast<std::size_t>(base + j)]) continue;
                double sum = 0, mag = 0, col = 0, row_abs = 0, col_max = 0;
                for (std::int64_t m = j; m <= pos; ++m) {  // (I + L)[m, j] = 0 for m < j
                    const double ak = reference::read(o, base + m);
                    const double il = ref.IL[static_cast<std::size_t>(((bt - (pos - m)) * HV + hv) * BT + j)];
                    sum += ak * il;
                    mag += std::abs(ak * il);
                    col += std::abs(il);
                    row_abs += std::abs(ak);
                    col_max = std::max(col_max, std::abs(il));
                }
                const double resid = std::abs(sum - (j == pos ? 1.0 : 0.0));
                const double n = static_cast<double>(pos - j + 1);
                const double bound = 4 * uX * mag + 4 * subnormal_spacing(tc.X) * col +
                                     4 * (n + static_cast<double>(p.K)) * uc * row_abs * col_max;
                const double r = resid / (bound + 1e-300);
                if (!(r <= worst)) {
                    worst = r;
                    worst_at = base + j;
                }
            }
        }
    }
    INFO(run.name() << " " << name(prec) << ": " << tc.describe() << ": worst Akk (I + L) - I residual / bound = " << worst
                    << " at flat index " << worst_at);
    CHECK(worst <= 1.0);
}

/// Worst figures over a run of cases, printed by the grid tests.
struct worst_figures {
    double aqk_ratio = 0, akk_ratio = 0, aqk_err = 0, akk_err = 0;
    std::int64_t cases = 0;
    void add(const comparison& c) {
        aqk_ratio = std::max(aqk_ratio, c.aqk.count ? c.aqk.ratio() : 0.0);
        akk_ratio = std::max(akk_ratio, c.akk.count ? c.akk.ratio() : 0.0);
        aqk_err = std::max(aqk_err, c.aqk.err);
        akk_err = std::max(akk_err, c.akk.err);
        ++cases;
    }
};

/// Every conformance check of one case: accuracy vs the float64 reference on the written entries,
/// untouched entries bit-for-bit, and Akk (I + L) = I on the written triangle.
template <class Runner>
comparison check_case(const Runner& run, const test_case& tc, precision prec) {
    inter_solve_problem p = tc.problem();
    p.solve_precision = prec;
    reference::generator_options opt;
    opt.seed = tc.seed;
    opt.seqlens = tc.seqlens;
    opt.beta_fp32 = tc.beta_fp32;
    opt.with_chunk_indices = tc.with_chunk_indices;
    const reference::inputs in = reference::make_inputs(p, tc.X, opt);
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
    const inter_solve_args a = in.args(Aqk, Akk);
    INFO(run.name() << " " << name(prec) << ": " << tc.describe());
    run(in.problem, a);
    const reference::result ref = reference::inter_solve(in.problem, a);
    const comparison c = compare(ref, Aqk, Akk, Aqk0, Akk0);
    INFO("Aqk err " << c.aqk.err << " floor " << c.aqk.floor << " (" << c.aqk.count << " entries); Akk err " << c.akk.err << " floor "
                    << c.akk.floor << " (" << c.akk.count << " entries)");
    INFO("first untouched entry that changed: " << c.first_untouched);
    CHECK(c.untouched_changed == 0);
    CHECK(c.aqk.err <= run.tolerance(tc.X, prec, c.aqk.floor));
    CHECK(c.akk.err <= run.tolerance(tc.X, prec, c.akk.floor));

    // Akk (I + L) = I on the written triangle, within the rounding of Akk and of the products.
    check_identity(run, tc, prec, p, ref, Akk);
    return c;
}

/// Runs a list of cases in every precision the runner tests and prints the worst figures.
template <class Runner>
void check_grid(const Runner& run, const std::vector<test_case>& cases, const char* label) {
    for (precision prec : run.precisions()) {
        worst_figures w;
        for (const auto& tc : cases) {
            if (!run.supports(tc.X)) continue;
            w.add(check_case(run, tc, prec));
        }
        std::printf("[%s %s] %s: %lld cases; worst relative RMS error Aqk %.3g (%.4f x floor), Akk %.3g (%.4f x floor)\n",
                    run.name().c_str(), std::string(name(prec)).c_str(), label, static_cast<long long>(w.cases), w.aqk_err, w.aqk_ratio,
                    w.akk_err, w.akk_ratio);
    }
}

// ---------------------------------------------------------------------------------------------
// Exactness: inputs for which fp32 arithmetic is exact all the way through.

/// Small-integer q/k with two non-zeros per row, integer log2 gates (per-token decay 0 or -1),
/// beta in {0, 1/2, 1}, scale 1/4. Retries seeds until every exact output fits 22 bits on a 2^-16
/// grid (so that every partial product and sum of the tiled path is exact too).
inline reference::inputs make_exact_inputs(inter_solve_problem p, dtype X, std::uint64_t seed, reference::result& ref_out) {
    p.scale = 0.25;
    for (int attempt = 0; attempt < 200; ++attempt) {
        std::mt19937_64 rng(seed * 1000 + static_cast<std::uint64_t>(attempt));
        reference::generator_options opt;
        opt.seed = seed;
        reference::inputs in = reference::make_inputs(p, X, opt);
        std::uniform_int_distribution<std::int64_t> coord(0, p.K - 1), val(-2, 2), b3(0, 2), dec(0, 9);
        for (auto* t : {&in.q, &in.k}) {
            for (std::int64_t i = 0; i < t->numel(); ++i) reference::store(*t, i, 0.0);
            for (std::int64_t r = 0; r < p.B * p.T * p.H; ++r)
                for (int nz = 0; nz < 2; ++nz) {
                    std::int64_t v = val(rng);
                    if (v == 0) v = 1;
                    reference::store(*t, r * p.K + coord(rng), static_cast<double>(v));
                }
        }
        for (std::int64_t i = 0; i < in.beta.numel(); ++i) reference::store(in.beta, i, 0.5 * static_cast<double>(b3(rng)));
        for (std::int64_t b = 0; b < p.B; ++b)
            for (std::int64_t hv = 0; hv < p.HV; ++hv)
                for (std::int64_t kk = 0; kk < p.K; ++kk) {
                    double acc = 0;
                    for (std::int64_t t = 0; t < p.T; ++t) {
                        if (t % p.BT == 0) acc = 0;
                        acc -= dec(rng) == 0 ? 1.0 : 0.0;
                        reference::store(in.g, ((b * p.T + t) * p.HV + hv) * p.K + kk, acc);
                    }
                }
        host_tensor none;
        in.problem.scale = p.scale;
        in.Akkd = reference::make_akkd(in.problem, in.args(none, none));
        ref_out = reference::inter_solve(in.problem, in.args(none, none));
        auto fits = [](double v) { return std::abs(v) < 64.0 && std::ldexp(v, 16) == std::round(std::ldexp(v, 16)); };
        bool ok = true;
        for (std::size_t i = 0; i < ref_out.Akk.size() && ok; ++i) ok = fits(ref_out.Akk[i]) && fits(ref_out.Aqk[i]);
        const tensor_ref d = flat(in.Akkd);
        for (std::int64_t i = 0; i < in.Akkd.numel() && ok; ++i) ok = fits(reference::read(d, i));
        if (ok) return in;
    }
    FAIL("no exactly representable input found in 200 attempts");
    return {};
}

/// Outputs equal round_X(exact) bit for bit on every written entry.
template <class Runner>
void check_exact(const Runner& run, dtype X, bool safe, int BT, std::int64_t T, std::int64_t K, precision prec) {
    inter_solve_problem p;
    p.B = 2;
    p.T = T;
    p.H = 2;
    p.HV = 4;
    p.K = K;
    p.BT = BT;
    p.safe_gate = safe;
    p.solve_precision = prec;
    reference::result ref;
    const reference::inputs in = make_exact_inputs(p, X, 11 + static_cast<std::uint64_t>(T) + (safe ? 100 : 0), ref);
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    run(in.problem, in.args(Aqk, Akk));
    const tensor_ref oq = flat(Aqk), ok = flat(Akk);
    std::int64_t bad = 0, nonzero = 0, first = -1;
    for (std::size_t i = 0; i < ref.Akk.size(); ++i) {
        const auto ii = static_cast<std::int64_t>(i);
        if (ref.aqk_written[i] && reference::read(oq, ii) != reference::round_to(X, ref.Aqk[i])) bad++, first = first < 0 ? ii : first;
        if (ref.akk_written[i] && reference::read(ok, ii) != reference::round_to(X, ref.Akk[i])) bad++, first = first < 0 ? ii : first;
        nonzero += (ref.akk_written[i] && ref.Akk[i] != 0 && !(ref.Akk[i] == 1.0)) + (ref.aqk_written[i] && ref.Aqk[i] != 0);
    }
    INFO(run.name() << " " << name(prec) << " exact inputs: " << name(X) << (safe ? " safe" : " notsafe") << " BT" << BT << " T" << T << " K" << K
                    << ": " << bad << " entries differ (first at flat index " << first << ")");
    CHECK(nonzero > 50);  // the inputs exercise the products, not only zeros
    CHECK(bad == 0);
}

// ---------------------------------------------------------------------------------------------
// Closed form: identical unit keys, zero decay, constant beta: (I + L)^-1 has entries
// -beta (1 - beta)^(i - j - 1) below the diagonal.
template <class Runner>
void check_closed_form(const Runner& run, dtype X, bool safe, int BT, double beta, precision prec) {
    inter_solve_problem p;
    p.B = 1;
    p.T = 3 * BT - 5;
    p.H = 1;
    p.HV = 2;
    p.K = 64;
    p.BT = BT;
    p.safe_gate = safe;
    p.solve_precision = prec;
    reference::generator_options opt;
    opt.seed = 3;
    reference::inputs in = reference::make_inputs(p, X, opt);
    for (std::int64_t r = 0; r < p.T * p.H; ++r)
        for (std::int64_t kk = 0; kk < p.K; ++kk) reference::store(in.k, r * p.K + kk, kk == 5 ? 1.0 : 0.0);
    for (std::int64_t i = 0; i < in.g.numel(); ++i) reference::store(in.g, i, 0.0);
    for (std::int64_t i = 0; i < in.beta.numel(); ++i) reference::store(in.beta, i, beta);
    host_tensor none;
    in.Akkd = reference::make_akkd(in.problem, in.args(none, none));
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const inter_solve_args a = in.args(Aqk, Akk);
    run(in.problem, a);
    const reference::result ref = reference::inter_solve(in.problem, a);
    const double b = reference::read(flat(in.beta), 0);  // beta as stored in X
    std::vector<double> closed(ref.Akk.size(), 0.0);
    double ref_dev = 0;
    for (std::int64_t t = 0; t < p.T; ++t)
        for (std::int64_t hv = 0; hv < p.HV; ++hv)
            for (std::int64_t j = 0; j < BT; ++j) {
                const std::int64_t i = t % BT, idx = ref.index(0, t, hv, j);
                closed[static_cast<std::size_t>(idx)] = i == j ? 1.0 : (i > j ? -b * std::pow(1.0 - b, static_cast<double>(i - j - 1)) : 0.0);
                if (ref.akk_written[static_cast<std::size_t>(idx)])
                    ref_dev = std::max(ref_dev, std::abs(ref.Akk[static_cast<std::size_t>(idx)] - closed[static_cast<std::size_t>(idx)]));
            }
    reference::result cf = ref;
    cf.Akk = closed;
    const comparison c = compare(cf, Aqk, Akk, Aqk, Akk);
    INFO(run.name() << " " << name(prec) << " closed form: " << name(X) << (safe ? " safe" : " notsafe") << " BT" << BT << " beta " << b
                    << ": Akk err " << c.akk.err << " floor " << c.akk.floor << "; reference vs closed form " << ref_dev);
    // the reference agrees with the closed form, up to the rounding of Akkd (fp32, or fp64 for fp64
    // data) in safe-gate mode, where Akkd holds the blocks' inverses
    CHECK(ref_dev < (safe ? 64 * unit_roundoff(acc_dtype(X)) : 1e-12));
    CHECK(c.akk.err <= run.tolerance(X, prec, c.akk.floor));
}

// ---------------------------------------------------------------------------------------------
// Causality: changing every input at tokens >= P leaves every output row < P bit-identical.
template <class Runner>
void check_causality(const Runner& run, dtype X, bool safe, int BT, std::int64_t P, precision prec) {
    inter_solve_problem p;
    p.B = 1;
    p.T = 150;
    p.H = 2;
    p.HV = 4;
    p.K = 80;
    p.BT = BT;
    p.safe_gate = safe;
    p.solve_precision = prec;
    reference::generator_options o1, o2;
    o1.seed = 21;
    o2.seed = 22;
    const reference::inputs a = reference::make_inputs(p, X, o1);
    reference::inputs b = reference::make_inputs(p, X, o1);
    const reference::inputs other = reference::make_inputs(p, X, o2);
    // tokens >= P of b come from `other`
    auto splice = [&](host_tensor& dst, const host_tensor& src) {
        const std::int64_t row = dst.numel() / (p.B * p.T) * size_of(dst.type());
        std::memcpy(static_cast<unsigned char*>(dst.raw()) + P * row, static_cast<const unsigned char*>(src.raw()) + P * row,
                    static_cast<std::size_t>((p.T - P) * row));
    };
    splice(b.q, other.q);
    splice(b.k, other.k);
    splice(b.g, other.g);
    splice(b.beta, other.beta);
    splice(b.Akkd, other.Akkd);
    host_tensor q1 = a.make_output(sentinel), k1 = a.make_output(sentinel), q2 = a.make_output(sentinel), k2 = a.make_output(sentinel);
    run(a.problem, a.args(q1, k1));
    run(b.problem, b.args(q2, k2));
    const std::size_t prefix = static_cast<std::size_t>(P * p.HV * p.BT * size_of(X));
    const std::size_t total = static_cast<std::size_t>(q1.nbytes());
    INFO(run.name() << " " << name(prec) << " causality: " << name(X) << (safe ? " safe" : " notsafe") << " BT" << BT << " P " << P);
    CHECK(std::memcmp(q1.raw(), q2.raw(), prefix) == 0);
    CHECK(std::memcmp(k1.raw(), k2.raw(), prefix) == 0);
    CHECK(std::memcmp(q1.raw(), q2.raw(), total) != 0);  // the change did reach the later rows
}

// ---------------------------------------------------------------------------------------------
// Isolation: a NaN planted in one chunk's inputs changes no other chunk, sequence or head.
template <class Runner>
void check_isolation(const Runner& run, dtype X, bool safe, bool varlen, precision prec) {
    inter_solve_problem p;
    p.B = varlen ? 1 : 2;
    p.T = 130;
    p.H = 2;
    p.HV = 4;
    p.K = 64;
    p.BT = 64;
    p.safe_gate = safe;
    p.solve_precision = prec;
    reference::generator_options opt;
    opt.seed = 31;
    if (varlen) opt.seqlens = {100, 45, 90};
    const reference::inputs clean = reference::make_inputs(p, X, opt);
    const std::int64_t T = clean.problem.T;
    // the poisoned chunk: tokens [64, 100) of the first sequence (varlen) / batch row 1, tokens
    // [64, 128); the NaN sits in its second sub-chunk, whose q rows the step reads
    const std::int64_t b0 = varlen ? 0 : 1, t0 = 64, t1 = varlen ? 100 : 128, t_nan = t0 + 20, h = 1;
    const std::int64_t G = p.HV / p.H;
    for (const char* which : {"q", "k", "g", "beta", "Akkd"}) {
        reference::inputs bad = reference::make_inputs(p, X, opt);
        const std::string w = which;
        const double nan = std::nan("");
        std::int64_t hv_hit = h * G;  // value heads that read the poisoned tensor row
        if (w == "q") reference::store(bad.q, ((b0 * T + t_nan) * p.H + h) * p.K + 7, nan);
        if (w == "k") reference::store(bad.k, ((b0 * T + t_nan) * p.H + h) * p.K + 7, nan);
        if (w == "g") reference::store(bad.g, ((b0 * T + t_nan) * p.HV + hv_hit) * p.K + 7, nan);
        if (w == "beta") reference::store(bad.beta, (b0 * T + t_nan) * p.HV + hv_hit, nan);
        if (w == "Akkd") reference::store(bad.Akkd, ((b0 * T + t_nan) * p.HV + hv_hit) * p.BC + 1, nan);
        const bool group = w == "q" || w == "k";
        host_tensor q1 = clean.make_output(sentinel), k1 = clean.make_output(sentinel);
        host_tensor q2 = clean.make_output(sentinel), k2 = clean.make_output(sentinel);
        run(clean.problem, clean.args(q1, k1));
        run(bad.problem, bad.args(q2, k2));
        const tensor_ref a1 = flat(q1), a2 = flat(q2), c1 = flat(k1), c2 = flat(k2);
        std::int64_t leaked = 0, poisoned = 0;
        for (std::int64_t b = 0; b < p.B; ++b)
            for (std::int64_t t = 0; t < T; ++t)
                for (std::int64_t hv = 0; hv < p.HV; ++hv) {
                    const bool inside = b == b0 && t >= t0 && t < t1 && (group ? hv / G == h : hv == hv_hit);
                    for (std::int64_t j = 0; j < p.BT; ++j) {
                        const std::int64_t i = ((b * T + t) * p.HV + hv) * p.BT + j;
                        const double x1 = reference::read(a1, i), x2 = reference::read(a2, i);
                        const double y1 = reference::read(c1, i), y2 = reference::read(c2, i);
                        const bool same = std::memcmp(&x1, &x2, sizeof x1) == 0 && std::memcmp(&y1, &y2, sizeof y1) == 0;
                        if (!inside && !same) ++leaked;
                        if (inside && (std::isnan(x2) || std::isnan(y2))) ++poisoned;
                    }
                }
        INFO(run.name() << " " << name(prec) << " isolation: NaN in " << w << ", " << name(X) << (safe ? " safe" : " notsafe")
                        << (varlen ? " varlen" : " dense"));
        CHECK(leaked == 0);
        CHECK(poisoned > 0);  // the NaN did reach its own chunk
    }
}

// ---------------------------------------------------------------------------------------------
// Strides: q, k as slices of a fused projection, padded g / Akkd / outputs, beta with a head
// stride: the outputs equal a contiguous run's bit for bit, and the padding is never written.
template <class Runner>
void check_strided(const Runner& run, dtype X, bool safe, precision prec) {
    inter_solve_problem p;
    p.B = 2;
    p.T = 90;
    p.H = 2;
    p.HV = 4;
    p.K = 80;
    p.BT = 32;
    p.safe_gate = safe;
    p.solve_precision = prec;
    reference::generator_options opt;
    opt.seed = 41;
    const reference::inputs in = reference::make_inputs(p, X, opt);
    host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel);
    run(in.problem, in.args(q1, k1));

    const std::int64_t es = size_of(X), as = size_of(acc_dtype(X)), KP = p.K + 8;
    // fused [B, T, 3, H, KP]: q at slot 0, k at slot 2
    host_tensor fused(X, {p.B * p.T, 3, p.H, KP});  // [B, T, 3, H, KP] flattened to rank 4
    host_tensor gpad(acc_dtype(X), {p.B, p.T, p.HV, p.K + 4});
    host_tensor bpad(X, {p.B, p.T, p.HV, 3});
    host_tensor dpad(acc_dtype(X), {p.B, p.T, p.HV, p.BC + 4});
    host_tensor opad_q(X, {p.B, p.T, p.HV, p.BT + 8}), opad_k(X, {p.B, p.T, p.HV, p.BT + 8});
    for (std::int64_t i = 0; i < opad_q.numel(); ++i) reference::store(opad_q, i, sentinel), reference::store(opad_k, i, sentinel);
    const host_tensor opad_q0 = opad_q.clone(), opad_k0 = opad_k.clone();
    auto copy_rows = [](host_tensor& dst, std::int64_t dst_row, std::int64_t dst_off, const host_tensor& src, std::int64_t src_row,
                        std::int64_t rows, std::int64_t es_) {
        for (std::int64_t r = 0; r < rows; ++r)
            std::memcpy(static_cast<unsigned char*>(dst.raw()) + (r * dst_row + dst_off) * es_,
                        static_cast<const unsigned char*>(src.raw()) + r * src_row * es_, static_cast<std::size_t>(src_row * es_));
    };
    for (std::int64_t bt = 0; bt < p.B * p.T; ++bt)
        for (std::int64_t h = 0; h < p.H; ++h) {
            std::memcpy(static_cast<unsigned char*>(fused.raw()) + ((bt * 3 + 0) * p.H + h) * KP * es,
                        static_cast<const unsigned char*>(in.q.raw()) + (bt * p.H + h) * p.K * es, static_cast<std::size_t>(p.K * es));
            std::memcpy(static_cast<unsigned char*>(fused.raw()) + ((bt * 3 + 2) * p.H + h) * KP * es,
                        static_cast<const unsigned char*>(in.k.raw()) + (bt * p.H + h) * p.K * es, static_cast<std::size_t>(p.K * es));
        }
    copy_rows(gpad, p.K + 4, 0, in.g, p.K, p.B * p.T * p.HV, as);
    copy_rows(dpad, p.BC + 4, 0, in.Akkd, p.BC, p.B * p.T * p.HV, as);
    copy_rows(bpad, 3, 1, in.beta, 1, p.B * p.T * p.HV, es);

    inter_solve_args a;
    auto view = [](const host_tensor& t, std::int64_t offset, extents_t shape, extents_t stride, int rank) {
        tensor_ref r;
        r.data = static_cast<const unsigned char*>(t.raw()) + offset * size_of(t.type());
        r.type = t.type();
        r.rank = rank;
        r.shape = shape;
        r.stride = stride;
        return r;
    };
    const std::int64_t ts = 3 * p.H * KP;
    a.q = view(fused, 0, {p.B, p.T, p.H, p.K}, {p.T * ts, ts, KP, 1}, 4);
    a.k = view(fused, 2 * p.H * KP, {p.B, p.T, p.H, p.K}, {p.T * ts, ts, KP, 1}, 4);
    a.g = view(gpad, 0, {p.B, p.T, p.HV, p.K}, {p.T * p.HV * (p.K + 4), p.HV * (p.K + 4), p.K + 4, 1}, 4);
    a.beta = view(bpad, 1, {p.B, p.T, p.HV, 0}, {p.T * p.HV * 3, p.HV * 3, 3, 0}, 3);
    a.Akkd = view(dpad, 0, {p.B, p.T, p.HV, p.BC}, {p.T * p.HV * (p.BC + 4), p.HV * (p.BC + 4), p.BC + 4, 1}, 4);
    auto oview = [&](host_tensor& t) {
        mutable_tensor_ref r;
        r.data = t.raw();
        r.type = t.type();
        r.rank = 4;
        r.shape = {p.B, p.T, p.HV, p.BT};
        r.stride = {p.T * p.HV * (p.BT + 8), p.HV * (p.BT + 8), p.BT + 8, 1};
        return r;
    };
    a.Aqk = oview(opad_q);
    a.Akk = oview(opad_k);
    run(in.problem, a);
    std::int64_t diff = 0, pad_written = 0;
    for (std::int64_t r = 0; r < p.B * p.T * p.HV; ++r) {
        diff += std::memcmp(static_cast<const unsigned char*>(opad_q.raw()) + r * (p.BT + 8) * es,
                            static_cast<const unsigned char*>(q1.raw()) + r * p.BT * es, static_cast<std::size_t>(p.BT * es)) != 0;
        diff += std::memcmp(static_cast<const unsigned char*>(opad_k.raw()) + r * (p.BT + 8) * es,
                            static_cast<const unsigned char*>(k1.raw()) + r * p.BT * es, static_cast<std::size_t>(p.BT * es)) != 0;
        const std::size_t off = static_cast<std::size_t>((r * (p.BT + 8) + p.BT) * es);
        pad_written += std::memcmp(static_cast<const unsigned char*>(opad_q.raw()) + off, static_cast<const unsigned char*>(opad_q0.raw()) + off,
                                   static_cast<std::size_t>(8 * es)) != 0;
        pad_written += std::memcmp(static_cast<const unsigned char*>(opad_k.raw()) + off, static_cast<const unsigned char*>(opad_k0.raw()) + off,
                                   static_cast<std::size_t>(8 * es)) != 0;
    }
    INFO(run.name() << " " << name(prec) << " strided views: " << name(X) << (safe ? " safe" : " notsafe"));
    CHECK(diff == 0);
    CHECK(pad_written == 0);
}

// ---------------------------------------------------------------------------------------------
// Bad input: every invalid argument raises kda::error naming it, and the outputs are unchanged.
template <class Runner>
void check_bad_inputs(const Runner& run, dtype X) {
    inter_solve_problem p;
    p.B = 1;
    p.T = 100;
    p.H = 2;
    p.HV = 4;
    p.K = 64;
    p.BT = 64;
    reference::generator_options opt;
    opt.seed = 51;
    opt.seqlens = {40, 60};
    const reference::inputs in = reference::make_inputs(p, X, opt);
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
    host_tensor cu_bad(dtype::i64, {3}), ci_bad(dtype::i64, {3, 2}), wrong_x(X == dtype::fp32 ? dtype::bf16 : dtype::fp32, {1, 100, 2, 64});
    host_tensor beta_wrong(X, {1, 100, 2});
    struct bad_case {
        const char* what;
        const char* expect;  // substring of the message
        std::function<void(inter_solve_problem&, inter_solve_args&)> mutate;
    };
    // the index tensors' mutations apply to their host copies too: a backend that reads them on the
    // device validates the host copies (a copy that differs from its device tensor goes unseen)
    auto use_cu = [](auto& a, const tensor_ref& cu) { a.cu_seqlens = a.cu_seqlens_host = cu; };
    auto set_cu = [&](auto& a, std::int64_t a0, std::int64_t a1, std::int64_t a2) {
        auto* c = cu_bad.data<std::int64_t>();
        c[0] = a0, c[1] = a1, c[2] = a2;
        use_cu(a, cu_bad.ref());
    };
    std::vector<bad_case> cases = {
        {"q shape", "'q'", [](auto&, auto& a) { a.q.shape[3] = 32; }},
        {"k dtype", "'k'", [&](auto&, auto& a) { a.k = wrong_x.ref(); }},
        {"g dtype", "'g'", [&](auto&, auto& a) { a.g = in.q.ref(); }},
        {"beta shape", "'beta'", [&](auto&, auto& a) { a.beta = beta_wrong.ref(); }},
        {"Akkd width", "'Akkd'", [](auto&, auto& a) { a.Akkd.shape[3] = 8; }},
        {"Aqk width vs BT", "'Aqk'", [](auto& pp, auto&) { pp.BT = 32; }},
        {"Akk missing", "'Akk'", [](auto&, auto& a) { a.Akk = {}; }},
        {"HV not a multiple of H", "'HV'", [](auto& pp, auto&) { pp.HV = 3; }},
        {"H zero", "'H'", [](auto& pp, auto&) { pp.H = 0; }},
        {"K = 0", "'K'", [](auto& pp, auto&) { pp.K = 0; }},
        {"K = 300", "'K'", [](auto& pp, auto&) { pp.K = 300; }},
        {"BT = 48", "'BT'", [](auto& pp, auto&) { pp.BT = 48; }},
        {"BC = 8", "'BC'", [](auto& pp, auto&) { pp.BC = 8; }},
        {"scale NaN", "'scale'", [](auto& pp, auto&) { pp.scale = std::nan(""); }},
        {"B = 2 with cu_seqlens", "'B'", [](auto& pp, auto&) { pp.B = 2; }},
        {"cu_seqlens not from 0", "'cu_seqlens'", [&](auto&, auto& a) { set_cu(a, 1, 40, 100); }},
        {"cu_seqlens decreasing", "'cu_seqlens'", [&](auto&, auto& a) { set_cu(a, 0, 101, 100); }},
        {"cu_seqlens not ending at T", "'cu_seqlens'", [&](auto&, auto& a) { set_cu(a, 0, 40, 99); }},
        {"cu_seqlens negative", "'cu_seqlens'", [&](auto&, auto& a) { set_cu(a, 0, -4, 100); }},
        {"cu_seqlens dtype", "'cu_seqlens'", [&](auto&, auto& a) { use_cu(a, in.beta.ref()); }},
        {"chunk_indices mismatch", "'chunk_indices'", [&](auto&, auto& a) {
             auto* c = ci_bad.data<std::int64_t>();
             const std::int64_t v[6] = {0, 0, 1, 0, 1, 2};
             std::copy(v, v + 6, c);
             a.chunk_indices = a.chunk_indices_host = ci_bad.ref();
         }},
        {"chunk_indices without cu_seqlens", "'chunk_indices'", [&](auto&, auto& a) { use_cu(a, tensor_ref{}); }},
        {"null q", "'q'", [](auto&, auto& a) { a.q.data = nullptr; }},
        {"misaligned q", "aligned", [](auto&, auto& a) { a.q.data = static_cast<const unsigned char*>(a.q.data) + 1; }},
        {"non-contiguous K", "contiguous", [](auto&, auto& a) { a.k.stride[3] = 2; }},
        {"negative stride", "'g'", [](auto&, auto& a) { a.g.stride[1] = -a.g.stride[1]; }},
        {"overflowing strides", "overflows", [](auto&, auto& a) { a.q.stride[1] = std::int64_t{1} << 60; }},
        {"Aqk overlaps Akk", "overlaps", [](auto&, auto& a) { a.Akk = a.Aqk; }},
        {"Aqk overlaps q", "overlaps", [](auto&, auto& a) { a.Aqk.data = const_cast<void*>(a.q.data), a.Aqk.type = a.q.type; }},
    };
    if (!run.supports(dtype::fp64)) {
        host_tensor q64(dtype::fp64, {1, 100, 2, 64});
        cases.push_back({"fp64 unsupported", "'q'", [q = std::make_shared<host_tensor>(std::move(q64))](auto&, auto& a) { a.q = q->ref(); }});
    }
    for (const auto& bc : cases) {
        inter_solve_problem pp = in.problem;
        inter_solve_args a = in.args(Aqk, Akk);
        bc.mutate(pp, a);
        INFO(run.name() << " bad input: " << bc.what);
        REQUIRE_THROWS_WITH(run(pp, a), Catch::Contains(bc.expect));
        CHECK(std::memcmp(Aqk.raw(), Aqk0.raw(), static_cast<std::size_t>(Aqk.nbytes())) == 0);
        CHECK(std::memcmp(Akk.raw(), Akk0.raw(), static_cast<std::size_t>(Akk.nbytes())) == 0);
    }
    // T = 0 is a no-op, not an error
    inter_solve_problem p0 = in.problem;
    p0.T = 0;
    inter_solve_args a0;
    host_tensor e4(X, {1, 0, 2, 64}), eg(acc_dtype(X), {1, 0, 4, 64}), eb(X, {1, 0, 4}), ed(acc_dtype(X), {1, 0, 4, 16}), eo(X, {1, 0, 4, 64}),
        eo2(X, {1, 0, 4, 64});
    a0.q = e4.ref(), a0.k = e4.ref(), a0.g = eg.ref(), a0.beta = eb.ref(), a0.Akkd = ed.ref(), a0.Aqk = eo.mref(), a0.Akk = eo2.mref();
    CHECK_NOTHROW(run(p0, a0));
}

}  // namespace kda::testing

/// Registers the whole conformance suite for a Runner type (default-constructible).
#define KDA_CONFORMANCE_SUITE(RUNNER, TAG)                                                                          \
    TEST_CASE(#RUNNER ": dense grid, bf16", TAG "[conformance][grid][bf16]") {                                     \
        kda::testing::check_grid(RUNNER{}, kda::testing::dense_grid(kda::dtype::bf16), "dense grid bf16");          \
    }                                                                                                              \
    TEST_CASE(#RUNNER ": dense grid, fp16", TAG "[conformance][grid][fp16]") {                                     \
        kda::testing::check_grid(RUNNER{}, kda::testing::dense_grid(kda::dtype::fp16), "dense grid fp16");          \
    }                                                                                                              \
    TEST_CASE(#RUNNER ": dense grid, fp32", TAG "[conformance][grid][fp32]") {                                     \
        kda::testing::check_grid(RUNNER{}, kda::testing::dense_grid(kda::dtype::fp32), "dense grid fp32");          \
    }                                                                                                              \
    TEST_CASE(#RUNNER ": varlen grid", TAG "[conformance][grid][varlen]") {                                        \
        for (auto X : {kda::dtype::bf16, kda::dtype::fp16, kda::dtype::fp32, kda::dtype::fp64})                     \
            if (RUNNER{}.supports(X))                                                                                  \
                kda::testing::check_grid(RUNNER{}, kda::testing::varlen_grid(X), ("varlen grid " + std::string(kda::name(X))).c_str()); \
    }                                                                                                              \
    TEST_CASE(#RUNNER ": properties", TAG "[conformance][properties]") {                                           \
        const RUNNER run{};                                                                                        \
        for (auto prec : run.precisions())                                                                         \
            for (auto X : {kda::dtype::bf16, kda::dtype::fp16, kda::dtype::fp32, kda::dtype::fp64}) {              \
                if (!run.supports(X)) continue;                                                                    \
                for (bool safe : {false, true}) {                                                                  \
                    for (int BT : {32, 64}) {                                                                      \
                        kda::testing::check_exact(run, X, safe, BT, 100, 48, prec);                                \
                        kda::testing::check_closed_form(run, X, safe, BT, 0.5, prec);                              \
                        kda::testing::check_closed_form(run, X, safe, BT, 0.3, prec);                              \
                        for (std::int64_t P : {21, 32, 48, 100}) kda::testing::check_causality(run, X, safe, BT, P, prec); \
                    }                                                                                              \
                    kda::testing::check_isolation(run, X, safe, false, prec);                                      \
                    kda::testing::check_isolation(run, X, safe, true, prec);                                       \
                    kda::testing::check_strided(run, X, safe, prec);                                               \
                }                                                                                                  \
            }                                                                                                      \
    }                                                                                                              \
    TEST_CASE(#RUNNER ": bad input", TAG "[conformance][bad-input]") {                                             \
        const RUNNER run{};                                                                                        \
        for (auto X : {kda::dtype::bf16, kda::dtype::fp32})                                                        \
            if (run.supports(X)) kda::testing::check_bad_inputs(run, X);                                           \
    }

/// Registers the fp64 dense grid for a Runner that supports fp64. A backend without fp64 does not
/// register it (the bad-input case checks that fp64 is refused instead), so that no ctest entry
/// passes without running it.
#define KDA_CONFORMANCE_FP64_GRID(RUNNER, TAG)                                                                      \
    TEST_CASE(#RUNNER ": dense grid, fp64", TAG "[conformance][grid][fp64]") {                                     \
        REQUIRE(RUNNER{}.supports(kda::dtype::fp64));                                                              \
        kda::testing::check_grid(RUNNER{}, kda::testing::dense_grid(kda::dtype::fp64), "dense grid fp64");          \
    }
