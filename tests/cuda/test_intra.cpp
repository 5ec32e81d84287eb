// tests/cuda/test_intra.cpp: the intra stage (kda/intra.hpp) on the CUDA backend.
//   [intra][grid]    chunk_kda_intra against the float64 reference (whole causal Aqk and
//                    (I + L)^-1), fused and two-kernel paths, both flavours, both precisions,
//                    dtypes, BT, K tails, GVA, varlen with and without chunk_indices; entries
//                    outside the stage's part unchanged
//   [intra][diag]    chunk_kda_intra_diag: Aqk's diagonal blocks against float64, Akkd against the
//                    float64 Akkd (reference::make_akkd), and against the CPU backend
//   [intra][decay]   strong decay (per-token log-decay down to -5 nats): both flavours finite and
//                    within tolerance
//   [intra][cumsum]  chunk_local_cumsum, all activations, dense and varlen, against float64
//   [intra][tma]     the fused kernel with and without the tensor copy engine: the same bits on rows
//                    of a 16-byte multiple, both runs against float64 on the others (joined maps)
//   [intra][graph]   the fused kernel and the two launches captured into a CUDA graph give the same bits
//   [intra][wy]      the fused kernel's WY outputs (w, u, kg, qg) against float64: dtypes, BT, both
//                    flavours and precisions, K and V tails (16-bit rows 2-byte aligned), GVA, varlen;
//                    Aqk and Akk keep their bits; each output alone gives the bits of all four
//   [intra][bad-input] missing workspace (two-kernel path), host memory: refused, naming the argument
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bridge.hpp>
#include <kda/intra.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include "cuda/probe.hpp"
#include "cuda/runners.hpp"
#include "cuda/setup.hpp"
#include "support/catch.hpp"
#include "support/metrics.hpp"
#include "support/wy.hpp"

namespace {

using kda::testing::make_problem;
using kda::testing::setup;

using kda::dtype;
using kda::host_tensor;
using kda::precision;

/// The tolerance of a precision mode (runners.hpp): fp32 at the floor, tf32 FLA's products.
double tolerance(dtype X, precision prec, double floor) {
    return prec == precision::fp32 ? kda::testing::full_precision_tolerance(X, floor) : kda::testing::tf32_tolerance(floor);
}

/// A run of the stage against float64: it wrote entries, left the rest alone, and both outputs
/// sit within the precision mode's tolerance of their rounding floors.
void check_at_floor(const kda::testing::comparison& c, dtype X, precision prec) {
    INFO("Aqk err " << c.aqk.err << " floor " << c.aqk.floor << ", Akk err " << c.akk.err << " floor " << c.akk.floor
                    << ", untouched changed " << c.untouched_changed << " first " << c.first_untouched);
    CHECK(c.aqk.count > 0);
    CHECK(c.untouched_changed == 0);
    CHECK(c.aqk.err <= tolerance(X, prec, c.aqk.floor));
    CHECK(c.akk.err <= tolerance(X, prec, c.akk.floor));
}

std::vector<setup> spread() {
    std::vector<setup> out;
    std::uint64_t seed = 900;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
        for (int BT : {32, 64})
            for (bool safe : {false, true})
                for (precision prec : {precision::fp32, precision::tf32}) {
                    for (std::int64_t K : {16, 37, 80, 100, 128, 255}) {  // 37, 255 / 100: 16-bit rows 2- / 8-byte aligned
                        setup s;
                        s.p = make_problem(2, 2 * BT + 21, 2, 4, K, BT, safe, prec);
                        s.X = X;
                        s.seed = ++seed;
                        out.push_back(s);
                    }
                    setup v;
                    v.p = make_problem(1, 0, 1, 2, 64, BT, safe, prec);
                    v.X = X;
                    v.seqlens = {5, 70, 0, 33, 16, 129};
                    v.with_ci = (seed % 2) == 0;
                    v.seed = ++seed;
                    out.push_back(v);
                    setup u = v;  // 16-bit rows of 120 bytes (8-byte copies) in varlen chunks
                    u.p = make_problem(1, 0, 4, 4, 60, BT, safe, prec);
                    u.seqlens = {31, 65, 64};
                    u.seed = ++seed;
                    out.push_back(u);
                }
    return out;
}

/// Mask of the diagonal-block entries of Aqk that chunk_kda_intra_diag writes.
std::vector<std::uint8_t> diag_mask(const kda::reference::result& ref) {
    std::vector<std::uint8_t> m(ref.aqk_written.size(), 0);
    for (std::int64_t b = 0; b < ref.B; ++b)
        for (std::int64_t t = 0; t < ref.T; ++t) {
            const int i = ref.chunk_pos[static_cast<std::size_t>(b * ref.T + t)];
            if (i < 0) continue;
            for (std::int64_t hv = 0; hv < ref.HV; ++hv)
                for (std::int64_t j = 0; j < ref.BT; ++j) {
                    const std::int64_t idx = ref.index(b, t, hv, j);
                    m[static_cast<std::size_t>(idx)] = ref.aqk_written[static_cast<std::size_t>(idx)] && j / 16 == i / 16;
                }
        }
    return m;
}

}  // namespace

TEST_CASE("cuda: chunk_kda_intra against float64", "[cuda][intra][grid]") {
    // both paths: the fused kernel (default; no workspace given) and the two-kernel path
    for (bool fuse : {true, false}) {
        double worst[2] = {0, 0}, worst_fp32[2] = {0, 0};
        kda::bridge::cuda_options opt;
        opt.fuse_intra = fuse;
        for (const setup& s : spread()) {
            INFO(s.describe() << (fuse ? " fused" : " two kernels"));
            const auto in = s.make();
            host_tensor Aqk = in.make_output(7.0), Akk = in.make_output(7.0);
            const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
            host_tensor ws(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
            const kda::intra_args a = in.intra_args(Aqk, Akk, fuse ? nullptr : &ws);
            const kda::reference::result ref = kda::reference::intra(in.problem, a);
            kda::bridge::cuda_intra_host(in.problem, a, opt);
            const auto c = kda::testing::compare(ref, Aqk, Akk, Aqk0, Akk0);
            check_at_floor(c, s.X, s.p.solve_precision);
            if (s.p.solve_precision == precision::fp32) {
                double* w = s.X != dtype::fp32 ? worst : worst_fp32;
                w[0] = std::max(w[0], s.X != dtype::fp32 ? c.aqk.ratio() : c.aqk.err);
                w[1] = std::max(w[1], s.X != dtype::fp32 ? c.akk.ratio() : c.akk.err);
            }
        }
        std::printf("cuda intra grid (%s, fp32 mode): bf16/fp16 worst Aqk %.4fx floor, Akk %.4fx floor; fp32 data Aqk %.2e, Akk %.2e\n",
                    fuse ? "fused" : "two kernels", worst[0], worst[1], worst_fp32[0], worst_fp32[1]);
    }
}

TEST_CASE("cuda: the fused intra kernel gives the same bits with and without the tensor copy engine", "[cuda][intra][tma]") {
    // partial chunks (the copy engine reads rows of the next sequence there; the build masks them),
    // K tails, GVA, both BT, both precisions, every dtype. Rows of no 16-byte multiple (K = 37 with
    // 8 heads, K = 100 with GVA) take maps that join the heads where the device has the copy
    // engine, whose K slices start up to 7 columns before each head's first: the K sums are grouped
    // differently from per-thread copies, so both runs are checked against float64 there. K = 37
    // with GVA (8 q / k heads, 16 value heads): per-thread copies (no fused kernel takes g per
    // thread beside joined maps).
    std::uint64_t seed = 3100;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
        for (int BT : {32, 64})
            for (precision prec : {precision::tf32, precision::fp32})
                for (int shape = 0; shape < 5; ++shape) {
                    const bool varlen = shape % 2 == 1, odd = shape >= 2;
                    const std::int64_t H = odd && !varlen ? 8 : 2, K = odd ? (varlen ? 100 : 37) : (varlen ? 80 : 128);
                    setup s;
                    s.p = make_problem(varlen ? 1 : 2, varlen ? 0 : 3 * BT + 5, H, shape == 2 ? H : 2 * H, K, BT, false, prec);
                    s.X = X;
                    if (varlen) s.seqlens = {5, 70, 0, 33, 16, 129};
                    s.seed = ++seed;
                    INFO(s.describe());
                    const auto in = s.make();
                    host_tensor A1 = in.make_output(7.0), K1 = in.make_output(7.0), A2 = in.make_output(7.0), K2 = in.make_output(7.0);
                    kda::bridge::cuda_options with, without;
                    without.use_tma = false;
                    kda::bridge::cuda_intra_host(in.problem, in.intra_args(A1, K1), with);
                    kda::bridge::cuda_intra_host(in.problem, in.intra_args(A2, K2), without);
                    if ((K * kda::size_of(X)) % 16 == 0) {
                        CHECK(std::memcmp(A1.raw(), A2.raw(), static_cast<std::size_t>(A1.nbytes())) == 0);
                        CHECK(std::memcmp(K1.raw(), K2.raw(), static_cast<std::size_t>(K1.nbytes())) == 0);
                        continue;
                    }
                    host_tensor Aqk0 = in.make_output(7.0), Akk0 = in.make_output(7.0);
                    const kda::reference::result ref = kda::reference::intra(in.problem, in.intra_args(Aqk0, Akk0));
                    for (const auto* out : {&A1, &A2}) {
                        INFO((out == &A1 ? "copy engine" : "per-thread copies"));
                        check_at_floor(kda::testing::compare(ref, *out, out == &A1 ? K1 : K2, Aqk0, Akk0), X, prec);
                    }
                }
}

TEST_CASE("cuda: chunk_kda_intra_diag against float64 and the CPU backend", "[cuda][intra][diag]") {
    std::uint64_t seed = 1200;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
        for (bool safe : {false, true})
            for (int BT : {32, 64}) {
                setup s;
                s.p = make_problem(1, 0, 2, 4, 80, BT, safe, precision::fp32);
                s.X = X;
                s.seqlens = {3, 64, 17, 0, 100};
                s.seed = ++seed;
                INFO(s.describe());
                const auto in = s.make();
                // float64: Aqk's diagonal blocks from the whole-stage reference, Akkd from make_akkd
                host_tensor o1 = in.make_output(0.0), o2 = in.make_output(0.0);
                const kda::reference::result ref = kda::reference::intra(in.problem, in.intra_args(o1, o2));
                const std::vector<std::uint8_t> mask = diag_mask(ref);
                kda::reference::result ref_diag = ref;
                ref_diag.aqk_written = mask;
                ref_diag.akk_written.assign(mask.size(), 0);

                host_tensor Aqk = in.make_output(7.0), dummy = in.make_output(7.0);
                const host_tensor Aqk0 = Aqk.clone();
                host_tensor Akkd(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
                const kda::intra_diag_args d = in.diag_args(Aqk, Akkd);
                kda::bridge::cuda_intra_diag_host(in.problem, d);
                const auto c = kda::testing::compare(ref_diag, Aqk, dummy, Aqk0, dummy);
                INFO("diag Aqk err " << c.aqk.err << " floor " << c.aqk.floor << "; untouched changed " << c.untouched_changed << " " << c.first_untouched);
                CHECK(c.aqk.count > 0);
                CHECK(c.untouched_changed == 0);
                CHECK(c.aqk.err <= kda::testing::full_precision_tolerance(X, c.aqk.floor));

                // Akkd: every entry of every valid row, against the float64 evaluation (rounded to fp32)
                kda::inter_solve_args ia = in.args(o1, o2);
                const host_tensor akkd_ref = kda::reference::make_akkd(in.problem, ia);
                std::vector<std::uint8_t> rows(static_cast<std::size_t>(Akkd.numel()), 0);
                for (std::int64_t t = 0; t < in.problem.T; ++t)
                    if (ref.chunk_pos[static_cast<std::size_t>(t)] >= 0)
                        for (std::int64_t e = 0; e < in.problem.HV * 16; ++e) rows[static_cast<std::size_t>(t * in.problem.HV * 16 + e)] = 1;
                const double akkd_err = kda::testing::rel_rms(Akkd, akkd_ref, rows);
                INFO("Akkd rel err " << akkd_err);
                CHECK(akkd_err <= 2e-6);

                // the CPU backend's producer on the same inputs
                host_tensor Aqk_cpu = in.make_output(7.0);
                host_tensor Akkd_cpu(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
                kda::intra_diag_args dc = d;
                dc.Aqk = Aqk_cpu.mref();
                dc.Akkd = Akkd_cpu.mref();
                kda::chunk_kda_intra_diag(kda::cpu_backend{2}, in.problem, dc);
                CHECK(kda::testing::rel_rms(Akkd, Akkd_cpu, rows) <= 2e-6);
                CHECK(kda::testing::rel_rms(Aqk, Aqk_cpu, mask) <= kda::testing::unit_roundoff(X) + 1e-6);
            }
}

TEST_CASE("cuda: strong decay stays finite and accurate in both flavours", "[cuda][intra][decay]") {
    // safe-gate inputs, per-token log-decay down to -5 nats (FLA's lower bound: a sub-chunk decays
    // by up to ~2^-115, factors around the midpoint stay below 2^64) and down to -12 nats (past
    // 2^64: the producer's term-by-term path), run through both flavours of the producer
    for (double lb : {-5.0, -12.0})
    for (bool safe_flavour : {true, false}) {
        setup s;
        s.p = make_problem(2, 150, 2, 2, 128, 64, true, precision::fp32);
        s.X = dtype::bf16;
        s.seed = 77;
        s.lower_bound = lb;
        auto in = s.make();
        in.problem.safe_gate = safe_flavour;
        INFO(s.describe() << " lower bound " << lb << " run as " << (safe_flavour ? "safe" : "not safe"));
        host_tensor Aqk = in.make_output(0.0), Akk = in.make_output(0.0);
        const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
        host_tensor ws(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
        const kda::intra_args a = in.intra_args(Aqk, Akk, &ws);
        const kda::reference::result ref = kda::reference::intra(in.problem, a);
        // the fused kernel (at -12 nats every sub-chunk leaves the factorisation's range: its
        // diagonal blocks go term by term) and the two-kernel path
        for (bool fuse : {true, false}) {
            kda::bridge::cuda_options opt;
            opt.fuse_intra = fuse;
            host_tensor A = Aqk0.clone(), K = Akk0.clone();
            kda::bridge::cuda_intra_host(in.problem, in.intra_args(A, K, fuse ? nullptr : &ws), opt);
            const auto c = kda::testing::compare(ref, A, K, Aqk0, Akk0);
            INFO((fuse ? "fused" : "two kernels") << ": Aqk err " << c.aqk.err << " floor " << c.aqk.floor << ", Akk err " << c.akk.err << " floor " << c.akk.floor);
            CHECK(std::isfinite(c.aqk.err));
            CHECK(std::isfinite(c.akk.err));
            CHECK(c.untouched_changed == 0);
            CHECK(c.aqk.err <= kda::testing::full_precision_tolerance(dtype::bf16, c.aqk.floor));
            CHECK(c.akk.err <= kda::testing::full_precision_tolerance(dtype::bf16, c.akk.floor));
            std::printf("cuda intra strong decay (lower bound %.0f nats), %s flavour, %s: Aqk %.3e (floor %.3e), Akk %.3e (floor %.3e)\n", lb,
                        safe_flavour ? "safe" : "not-safe", fuse ? "fused" : "two kernels", c.aqk.err, c.aqk.floor, c.akk.err, c.akk.floor);
        }
    }
}

TEST_CASE("cuda: chunk_local_cumsum against float64", "[cuda][intra][cumsum]") {
    std::mt19937_64 rng(5);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (auto act : {kda::gate_activation::none, kda::gate_activation::kda, kda::gate_activation::kda_lower_bound})
        for (dtype X : {dtype::bf16, dtype::fp32})
            for (bool varlen : {false, true}) {
                kda::cumsum_problem p;
                p.B = varlen ? 1 : 2;
                p.HV = 3;
                p.K = 80;
                p.BT = 64;
                p.activation = act;
                host_tensor cu;
                if (varlen) {
                    const std::vector<std::int64_t> cuv = {0, 5, 5, 90, 200};
                    cu = host_tensor(dtype::i64, {5});
                    std::memcpy(cu.data<std::int64_t>(), cuv.data(), cuv.size() * 8);
                    p.T = 200;
                } else {
                    p.T = 150;
                }
                INFO("activation " << static_cast<int>(act) << " " << name(X) << (varlen ? " varlen" : " dense"));
                host_tensor g(X, {p.B, p.T, p.HV, p.K}), A_log(dtype::fp32, {p.HV}), bias(dtype::fp32, {p.HV * p.K});
                for (std::int64_t i = 0; i < g.numel(); ++i)
                    kda::reference::store(g, i, act == kda::gate_activation::none ? -std::abs(normal(rng)) * 0.3 : normal(rng));
                for (std::int64_t i = 0; i < A_log.numel(); ++i) kda::reference::store(A_log, i, std::log(0.5 + i));
                for (std::int64_t i = 0; i < bias.numel(); ++i) kda::reference::store(bias, i, 0.5 * normal(rng));
                host_tensor out(dtype::fp32, {p.B, p.T, p.HV, p.K});
                for (std::int64_t i = 0; i < out.numel(); ++i) kda::reference::store(out, i, 7.0);
                kda::cumsum_args a;
                a.g = g.ref();
                if (act != kda::gate_activation::none) {
                    a.A_log = A_log.ref();
                    a.dt_bias = bias.ref();
                }
                a.g_out = out.mref();
                a.cu_seqlens = cu.ref();
                const std::vector<double> ref = kda::reference::chunk_local_cumsum(p, a);
                kda::bridge::cuda_cumsum_host(p, a);
                double e2 = 0, n2 = 0, worst = 0, mag = 0;
                for (std::int64_t i = 0; i < out.numel(); ++i) {
                    const double y = kda::reference::read(kda::testing::flat(out), i), x = ref[static_cast<std::size_t>(i)];
                    e2 += (y - x) * (y - x);
                    n2 += x * x;
                    worst = std::max(worst, std::abs(y - x));
                    mag = std::max(mag, std::abs(x));
                }
                INFO("rel RMS " << std::sqrt(e2 / n2) << ", max abs " << worst << " of max |x| " << mag);
                CHECK(std::sqrt(e2 / n2) <= 2e-6);
                CHECK(worst <= 1e-5 * mag);
            }
}

TEST_CASE("cuda: chunk_kda_intra captured into a CUDA graph", "[cuda][intra][graph]") {
    setup s;
    s.p = make_problem(1, 0, 2, 4, 128, 64, true, precision::tf32);
    s.X = dtype::bf16;
    s.seqlens = {100, 1, 300};
    s.seed = 4;
    const auto in = s.make();
    for (bool fuse : {true, false}) {
        INFO((fuse ? "fused" : "two kernels"));
        host_tensor A1 = in.make_output(0.0), K1 = in.make_output(0.0), A2 = in.make_output(0.0), K2 = in.make_output(0.0);
        host_tensor ws(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
        kda::bridge::cuda_options opt;
        opt.fuse_intra = fuse;
        kda::bridge::cuda_intra_host(in.problem, in.intra_args(A1, K1, &ws), opt);
        kda::testing::probe::run_intra_in_graph(in.problem, in.intra_args(A2, K2, &ws), 3, fuse);
        CHECK(std::memcmp(A1.raw(), A2.raw(), static_cast<std::size_t>(A1.nbytes())) == 0);
        CHECK(std::memcmp(K1.raw(), K2.raw(), static_cast<std::size_t>(K1.nbytes())) == 0);
    }
}

namespace {

/// A copy of `t` ([..., n]) with `pad` extra entries per innermost row, set to `fill`.
host_tensor padded(const host_tensor& t, std::int64_t pad, double fill) {
    std::vector<std::int64_t> shape = t.shape();
    const std::int64_t n = shape.back(), rows = t.numel() / std::max<std::int64_t>(n, 1);
    shape.back() = n + pad;
    host_tensor out(t.type(), shape);
    for (std::int64_t i = 0; i < out.numel(); ++i) kda::reference::store(out, i, fill);
    const auto es = static_cast<std::size_t>(kda::size_of(t.type()));
    for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(static_cast<unsigned char*>(out.raw()) + static_cast<std::size_t>(r * (n + pad)) * es,
                    static_cast<const unsigned char*>(t.raw()) + static_cast<std::size_t>(r * n) * es, static_cast<std::size_t>(n) * es);
    return out;
}

/// A view of the first `n` entries of each row of a padded tensor ([B, T, D, n + pad]; rank 3 for beta).
template <class Ref, class T>
Ref padded_view(T& t, std::int64_t n) {
    Ref r = [&] {
        if constexpr (std::is_same_v<Ref, kda::tensor_ref>) return t.ref();
        else return t.mref();
    }();
    r.shape[r.rank - 1] = n;  // the strides stay those of the padded rows
    return r;
}

}  // namespace

TEST_CASE("cuda: chunk_kda_intra on strided views gives the contiguous run's bits, pads untouched; T = 0 is a no-op",
          "[cuda][intra][grid]") {
    for (dtype X : {dtype::bf16, dtype::fp32})
        for (bool fuse : {true, false}) {
            INFO(kda::name(X) << (fuse ? " fused" : " two kernels"));
            setup s;
            s.p = make_problem(2, 77, 2, 4, 48, 64, false, precision::fp32);
            s.X = X;
            s.seed = 51;
            const auto in = s.make();
            const auto& p = in.problem;
            kda::bridge::cuda_options opt;
            opt.fuse_intra = fuse;
            host_tensor Aqk1 = in.make_output(0), Akk1 = in.make_output(0);
            host_tensor ws1(dtype::fp32, {p.B, p.T, p.HV, 16}), ws2(dtype::fp32, {p.B, p.T, p.HV, 16 + 4});
            kda::bridge::cuda_intra_host(p, in.intra_args(Aqk1, Akk1, fuse ? nullptr : &ws1), opt);

            // q, k, g with padded rows; beta as [B, T, HV, 2] (head stride 2); outputs with 8 pad entries
            const host_tensor q = padded(in.q, 8, 0), k = padded(in.k, 5, 0), g = padded(in.g, 4, 0);
            host_tensor beta2 = padded(host_tensor(in.beta.type(), {p.B, p.T, p.HV, 1}), 1, 0);
            for (std::int64_t i = 0; i < in.beta.numel(); ++i) kda::reference::store(beta2, 2 * i, kda::reference::read(kda::testing::flat(in.beta), i));
            host_tensor Aqk = padded(Aqk1, 8, 7.0), Akk = padded(Akk1, 8, 7.0);
            for (host_tensor* t : {&Aqk, &Akk})
                for (std::int64_t i = 0; i < t->numel(); ++i) kda::reference::store(*t, i, 7.0);
            const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
            kda::intra_args a = in.intra_args(Aqk1, Akk1);
            a.q = padded_view<kda::tensor_ref>(q, p.K);
            a.k = padded_view<kda::tensor_ref>(k, p.K);
            a.g = padded_view<kda::tensor_ref>(g, p.K);
            a.beta = padded_view<kda::tensor_ref>(beta2, 1);
            a.beta.rank = 3;
            a.beta.shape[3] = 0;
            a.beta.stride[3] = 0;
            a.Aqk = padded_view<kda::mutable_tensor_ref>(Aqk, p.BT);
            a.Akk = padded_view<kda::mutable_tensor_ref>(Akk, p.BT);
            if (!fuse) a.Akkd = padded_view<kda::mutable_tensor_ref>(ws2, 16);
            kda::bridge::cuda_intra_host(p, a, opt);
            const kda::reference::result r = kda::reference::intra(p, in.intra_args(Aqk1, Akk1));
            std::int64_t diff = 0, pad_written = 0;
            auto compare_rows = [&](const host_tensor& padded_out, const host_tensor& padded0, const host_tensor& dense, const std::vector<std::uint8_t>& mask) {
                const kda::tensor_ref P = kda::testing::flat(padded_out), P0 = kda::testing::flat(padded0), D = kda::testing::flat(dense);
                const std::int64_t w = p.BT, row = p.BT + 8;
                for (std::int64_t rr = 0; rr < dense.numel() / w; ++rr)
                    for (std::int64_t j = 0; j < row; ++j) {
                        const double v = kda::reference::read(P, rr * row + j);
                        if (j >= w)
                            pad_written += v != kda::reference::read(P0, rr * row + j);
                        else if (mask[static_cast<std::size_t>(rr * w + j)])
                            diff += v != kda::reference::read(D, rr * w + j);
                        else
                            diff += v != 7.0;
                    }
            };
            compare_rows(Aqk, Aqk0, Aqk1, r.aqk_written);
            compare_rows(Akk, Akk0, Akk1, r.akk_written);
            INFO(diff << " entries differ from the contiguous run, " << pad_written << " pad entries written");
            CHECK(diff == 0);
            CHECK(pad_written == 0);

            // T = 0: valid, nothing to do
            setup z = s;
            z.p.T = 0;
            const auto zin = z.make();
            host_tensor zq = zin.make_output(0), zk = zin.make_output(0);
            host_tensor zws(dtype::fp32, {z.p.B, 0, z.p.HV, 16});
            CHECK_NOTHROW(kda::bridge::cuda_intra_host(zin.problem, zin.intra_args(zq, zk, fuse ? nullptr : &zws), opt));
        }
}

TEST_CASE("cuda: the fused kernel's WY outputs against float64", "[cuda][intra][wy]") {
    std::uint64_t seed = 4000;
    double worst_fp32_mode = 0;
    int cases = 0;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
        for (int BT : {32, 64})
            for (bool safe : {false, true})
                for (precision prec : {precision::fp32, precision::tf32})
                    for (int layout = 0; layout < 3; ++layout) {
                        setup s;
                        s.X = X;
                        s.seed = ++seed;
                        std::int64_t V = 64;
                        if (layout == 0) {  // dense, GVA, a short last chunk
                            s.p = make_problem(2, 2 * BT + 21, 2, 4, 128, BT, safe, prec);
                            V = 96;
                        } else if (layout == 1) {  // 2-byte-aligned 16-bit rows, V tail
                            s.p = make_problem(1, BT + 9, 1, 2, 37, BT, safe, prec);
                            V = 45;
                        } else {  // varlen with length-1 and empty sequences
                            s.p = make_problem(1, 0, 1, 2, 64, BT, safe, prec);
                            s.seqlens = {5, 1, 70, 0, 33, 129};
                            s.with_ci = (seed % 2) == 0;
                        }
                        INFO(s.describe() << " V" << V);
                        auto in = s.make();
                        in.problem.V = V;
                        host_tensor Aqk = in.make_output(7.0), Akk = in.make_output(7.0), Aqk2 = in.make_output(7.0), Akk2 = in.make_output(7.0);
                        kda::testing::wy_tensors t(in, V, seed, 7.0);
                        kda::intra_args a = in.intra_args(Aqk, Akk);
                        t.attach(a);
                        kda::bridge::cuda_intra_host(in.problem, a);
                        kda::bridge::cuda_intra_host(in.problem, in.intra_args(Aqk2, Akk2));
                        CHECK(std::memcmp(Aqk.raw(), Aqk2.raw(), static_cast<std::size_t>(Aqk.nbytes())) == 0);
                        CHECK(std::memcmp(Akk.raw(), Akk2.raw(), static_cast<std::size_t>(Akk.nbytes())) == 0);
                        const kda::reference::wy_result r = kda::reference::intra_wy(in.problem, a);
                        const auto mk = kda::testing::row_mask(r, in.problem.K), mv = kda::testing::row_mask(r, V);
                        const auto sw = kda::testing::detail::stats(r.w, mk, t.w), su = kda::testing::detail::stats(r.u, mv, t.u);
                        const auto skg = kda::testing::detail::stats(r.kg, mk, t.kg), sqg = kda::testing::detail::stats(r.qg, mk, t.qg);
                        INFO("w err " << sw.err << " floor " << sw.floor << "; u " << su.err << " / " << su.floor << "; kg " << skg.err << " / "
                                      << skg.floor << "; qg " << sqg.err << " / " << sqg.floor);
                        CHECK(sw.count > 0);
                        CHECK(su.count == sw.count / in.problem.K * V);
                        CHECK(sw.err <= tolerance(X, prec, sw.floor));
                        CHECK(su.err <= tolerance(X, prec, su.floor));
                        CHECK(skg.err <= kda::testing::full_precision_tolerance(X, skg.floor));
                        CHECK(sqg.err <= kda::testing::full_precision_tolerance(X, sqg.floor));
                        if (prec == precision::fp32 && X != dtype::fp32) worst_fp32_mode = std::max({worst_fp32_mode, sw.ratio(), su.ratio()});
                        ++cases;
                    }
    std::printf("cuda intra WY outputs: %d cases; fp32 mode, bf16/fp16: worst w/u %.4fx floor\n", cases, worst_fp32_mode);
}

TEST_CASE("cuda: each WY output alone gives the bits of all four; the two-kernel path refuses them", "[cuda][intra][wy]") {
    setup s;
    s.p = make_problem(1, 150, 1, 2, 100, 64, false, precision::tf32);
    s.X = dtype::bf16;
    auto in = s.make();
    in.problem.V = 40;
    host_tensor Aqk = in.make_output(0), Akk = in.make_output(0);
    kda::testing::wy_tensors all(in, 40, 3, 7.0);
    kda::intra_args a = in.intra_args(Aqk, Akk);
    all.attach(a);
    kda::bridge::cuda_intra_host(in.problem, a);
    CHECK(kda::testing::wy_each_alone_mismatches(in, 40, 3, 7.0, all, Aqk, Akk, [&](const kda::intra_args& b) { kda::bridge::cuda_intra_host(in.problem, b); }) == 0);
    auto same = [](const host_tensor& x, const host_tensor& y) { return std::memcmp(x.raw(), y.raw(), static_cast<std::size_t>(x.nbytes())) == 0; };
    kda::bridge::cuda_options two;
    two.fuse_intra = false;
    host_tensor ws(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
    kda::intra_args c = in.intra_args(Aqk, Akk, &ws);
    kda::testing::wy_tensors fresh(in, 40, 3, 7.0);
    fresh.attach(c);
    const host_tensor w0 = fresh.w.clone();
    REQUIRE_THROWS_WITH(kda::bridge::cuda_intra_host(in.problem, c, two), Catch::Contains("argument 'w'") && Catch::Contains("fuse_intra"));
    CHECK(same(fresh.w, w0));
}

TEST_CASE("cuda: intra-stage bad input is refused, naming the argument", "[cuda][intra][bad-input]") {
    setup s;
    s.p = make_problem(1, 100, 1, 2, 64, 64, false, precision::fp32);
    s.X = dtype::bf16;
    const auto in = s.make();
    host_tensor Aqk = in.make_output(7.0), Akk = in.make_output(7.0);
    const host_tensor Aqk0 = Aqk.clone();
    host_tensor ws(dtype::fp32, {in.problem.B, in.problem.T, in.problem.HV, 16});
    const kda::intra_args a = in.intra_args(Aqk, Akk, &ws);
    // the two-kernel path needs the workspace (named, nothing written); the fused one does not
    const std::string no_ws = kda::testing::probe::run_intra(in.problem, a, true, "", false);
    INFO(no_ws);
    CHECK(no_ws.find("argument 'Akkd'") != std::string::npos);
    CHECK(std::memcmp(Aqk.raw(), Aqk0.raw(), static_cast<std::size_t>(Aqk.nbytes())) == 0);
    CHECK(kda::testing::probe::run_intra(in.problem, a, true, "", true).empty());
    {
        host_tensor o1 = in.make_output(7.0), o2 = in.make_output(7.0);
        const kda::reference::result ref = kda::reference::intra(in.problem, in.intra_args(o1, o2));
        INFO("fused without workspace");
        check_at_floor(kda::testing::compare(ref, Aqk, Akk, Aqk0, in.make_output(7.0)), s.X, s.p.solve_precision);
    }
    for (const char* t : {"q", "Aqk", "Akkd"}) {
        const std::string m = kda::testing::probe::run_intra(in.problem, a, false, t);
        INFO(t << ": " << m);
        CHECK(m.find(std::string("argument '") + t + "'") != std::string::npos);
        CHECK(m.find("host memory") != std::string::npos);
    }
    kda::cumsum_problem cp;
    cp.T = 10;
    cp.HV = 1;
    cp.K = 8;
    host_tensor g(dtype::fp32, {1, 10, 1, 8}), out(dtype::fp32, {1, 10, 1, 8});
    kda::cumsum_args ca;
    ca.g = g.ref();
    ca.g_out = out.mref();
    for (const char* t : {"g", "g_out"}) {
        const std::string m = kda::testing::probe::run_cumsum_with_host_tensor(cp, ca, t);
        INFO(t << ": " << m);
        CHECK(m.find(std::string("argument '") + t + "'") != std::string::npos);
    }
}
