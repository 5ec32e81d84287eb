// tests/test_intra_cpu.cpp: the intra stage on the CPU backend (kda/intra.hpp, kda/cpu/intra.hpp)
// against the float64 reference (kda/reference/reference.hpp):
//   [full]          chunk_kda_intra: every dtype, both flavours, BT 32 / 64, K 16 / 80 / 128 and
//                   19 / 83 / 131 (not multiples of 16), GVA,
//                   tails, varlen with and without chunk_indices (empty and short sequences), with
//                   and without a caller workspace; untouched entries bit for bit
//   [diag]          chunk_kda_intra_diag: Aqk's diagonal blocks and Akkd, both flavours; the
//                   one-call path leaves the same bits; thread-count invariance
//   [strong-decay]  safe-gate inputs (per-token log-decay down to -5 nats) through both flavours,
//                   and what each flavour gives for decays beyond the safe gate's bound
//   [cumsum]        chunk_local_cumsum: the three activations, restarts, varlen, dtypes; a
//                   hand-computed case; raw gates -> cumsum -> chunk_kda_intra end to end
//   [wy]            chunk_kda_intra's optional WY outputs (w, u, kg, qg): every dtype, both
//                   flavours, BT 32 / 64, K 64 / 37, dense and varlen, GVA; each output alone
//                   gives the bits of all four; the stage's own outputs keep their bits
//   [bad-input]     a defect per argument for all three entry points; T == 0 is a no-op
// Tolerances are those of tests/support/metrics.hpp (full_precision_tolerance): bf16 / fp16
// within 1.05x the rounding floor (+1e-6), fp32 1e-6 relative RMS, fp64 1e-12.
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/metrics.hpp"
#include "support/wy.hpp"

namespace {

using kda::dtype;
using kda::host_tensor;
namespace ref = kda::reference;
namespace kt = kda::testing;

constexpr double sentinel = 7.0;  // exact in every dtype; outputs here stay far below it

struct intra_case {
    dtype X = dtype::fp32;
    bool safe = false;
    int BT = 64;
    std::int64_t K = 64, B = 1, T = 100, H = 1, HV = 2;
    std::vector<std::int64_t> seqlens;  // varlen when non-empty
    bool with_ci = true;
    bool beta_fp32 = false;
    bool workspace = false;  // pass Akkd to chunk_kda_intra
    double lower_bound = -5.0;
    std::uint64_t seed = 1;

    [[nodiscard]] std::string describe() const {
        std::ostringstream os;
        os << kda::name(X) << (safe ? " safe" : " notsafe") << " BT" << BT << " K" << K << " B" << B << " T" << T << " H" << H << " HV" << HV;
        if (!seqlens.empty()) {
            os << " varlen[";
            for (std::size_t i = 0; i < seqlens.size(); ++i) os << (i ? "," : "") << seqlens[i];
            os << "]" << (with_ci ? "" : " no-chunk_indices");
        }
        if (beta_fp32) os << " beta-fp32";
        if (workspace) os << " workspace";
        os << " seed " << seed;
        return os.str();
    }
    [[nodiscard]] ref::inputs inputs() const {
        kda::intra_problem p;
        p.B = B;
        p.T = T;
        p.H = H;
        p.HV = HV;
        p.K = K;
        p.scale = 1.0 / std::sqrt(static_cast<double>(K));
        p.BT = BT;
        p.safe_gate = safe;
        ref::generator_options o;
        o.seed = seed;
        o.seqlens = seqlens;
        o.with_chunk_indices = with_ci;
        o.beta_fp32 = beta_fp32;
        o.lower_bound = lower_bound;
        return ref::make_inputs(p, X, o);
    }
};

/// [B, T, HV, BC] Akkd in the accumulator type, filled with `fill`.
host_tensor make_akkd_out(const ref::inputs& in, double fill) {
    const auto& p = in.problem;
    host_tensor t(kda::acc_dtype(in.q.type()), {p.B, p.T, p.HV, p.BC});
    for (std::int64_t i = 0; i < t.numel(); ++i) ref::store(t, i, fill);
    return t;
}

/// Entries outside `mask` whose bits differ between a and b.
std::int64_t changed_outside(const host_tensor& a, const host_tensor& b, const std::vector<std::uint8_t>& mask) {
    const auto es = static_cast<std::size_t>(kda::size_of(a.type()));
    std::int64_t n = 0;
    for (std::size_t i = 0; i < mask.size(); ++i)
        if (!mask[i] && std::memcmp(static_cast<const unsigned char*>(a.raw()) + i * es, static_cast<const unsigned char*>(b.raw()) + i * es, es) != 0)
            ++n;
    return n;
}

bool same_bits(const host_tensor& a, const host_tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.nbytes())) == 0;
}

/// Worst figures per dtype: ratio to the rounding floor (bf16 / fp16) and relative RMS error.
struct worst_table {
    std::map<std::string, std::pair<double, double>> rows;  // key -> (worst ratio, worst error)
    void add(const std::string& key, const kt::error_stats& s) {
        auto& r = rows[key];
        r.first = std::max(r.first, s.count ? s.ratio() : 0.0);
        r.second = std::max(r.second, s.err);
    }
    void print(const char* title) const {
        for (const auto& [k, v] : rows) {
            if (k.rfind("fp64", 0) == 0)  // no rounding floor: fp64 is the reference's own type
                std::printf("[cpu intra] %s %-14s worst error %.3e\n", title, k.c_str(), v.second);
            else
                std::printf("[cpu intra] %s %-14s worst error %.3e (%.4f x floor)\n", title, k.c_str(), v.second, v.first);
        }
    }
};

const kda::cpu_backend cpu2{2};

/// chunk_kda_intra on one case against reference::intra; returns (Aqk, Akk) stats.
std::pair<kt::error_stats, kt::error_stats> check_full(const intra_case& tc, bool safe_flavour_override = false, bool flavour = false) {
    INFO(tc.describe());
    ref::inputs in = tc.inputs();
    if (safe_flavour_override) in.problem.safe_gate = flavour;
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
    host_tensor ws = make_akkd_out(in, sentinel);
    const kda::intra_args a = in.intra_args(Aqk, Akk, tc.workspace ? &ws : nullptr);
    kda::chunk_kda_intra(cpu2, in.problem, a);
    const ref::result r = ref::intra(in.problem, a);
    const kt::comparison c = kt::compare(r, Aqk, Akk, Aqk0, Akk0);
    INFO("Aqk err " << c.aqk.err << " floor " << c.aqk.floor << " (" << c.aqk.count << " entries); Akk err " << c.akk.err << " floor "
                    << c.akk.floor << " (" << c.akk.count << " entries); first untouched entry changed: " << c.first_untouched);
    CHECK(c.aqk.count > 0);
    CHECK(c.untouched_changed == 0);
    CHECK(c.aqk.err <= kt::full_precision_tolerance(tc.X, c.aqk.floor));
    CHECK(c.akk.err <= kt::full_precision_tolerance(tc.X, c.akk.floor));
    if (tc.workspace) {
        // the workspace holds the producer's Akkd
        const ref::diag_result d = ref::intra_diag(in.problem, in.diag_args(Aqk, ws));
        const kt::error_stats s = kt::detail::stats(d.Akkd, d.akkd_written, ws);
        INFO("workspace Akkd err " << s.err);
        CHECK(s.err <= kt::full_precision_tolerance(kda::acc_dtype(tc.X), s.floor));
    }
    return {c.aqk, c.akk};
}

/// The varlen batches: an empty sequence, sequences shorter than a sub-chunk, short last chunks.
const std::vector<std::vector<std::int64_t>> varlen_batches = {{37, 0, 5, 100, 1, 16, 9}, {64, 13, 0, 71, 2}};

}  // namespace

TEST_CASE("chunk_kda_intra against the float64 reference", "[cpu][intra][full]") {
    worst_table aqk, akk;
    std::uint64_t seed = 100;
    int cases = 0;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64})
        for (bool safe : {false, true})
            for (int BT : {32, 64})
                for (std::int64_t K : {16, 80, 128})
                    for (int layout = 0; layout < 3; ++layout) {
                        intra_case tc;
                        tc.X = X;
                        tc.safe = safe;
                        tc.BT = BT;
                        tc.K = layout == 2 ? K + 3 : K;  // K = 19, 83, 131: rows that end inside a 16-column slice
                        tc.seed = ++seed;
                        if (layout == 0) {  // dense, batch of 2, GVA, T % BT != 0 (short last sub-chunk)
                            tc.B = 2;
                            tc.T = 100;
                            tc.H = 1;
                            tc.HV = 2;
                        } else {  // varlen, GVA with H = 2
                            tc.H = 2;
                            tc.HV = 4;
                            tc.seqlens = varlen_batches[static_cast<std::size_t>(layout - 1)];
                            tc.with_ci = layout == 1;
                        }
                        tc.beta_fp32 = (X == dtype::bf16 || X == dtype::fp16) && layout == 2;
                        tc.workspace = (cases % 2) == 1;
                        const auto [sq, sk] = check_full(tc);
                        const std::string key = std::string(kda::name(X)) + (safe ? " safe" : " notsafe");
                        aqk.add(key, sq);
                        akk.add(key, sk);
                        ++cases;
                    }
    std::printf("[cpu intra] chunk_kda_intra: %d cases\n", cases);
    aqk.print("Aqk (whole causal triangle)");
    akk.print("Akk");
}

TEST_CASE("chunk_kda_intra_diag against the float64 reference; the one-call path leaves the same bits", "[cpu][intra][diag]") {
    worst_table aqk, akkd;
    std::uint64_t seed = 300;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64})
        for (bool safe : {false, true})
            for (int BT : {32, 64})
                for (int layout = 0; layout < 2; ++layout) {
                    intra_case tc;
                    tc.X = X;
                    tc.safe = safe;
                    tc.BT = BT;
                    tc.K = layout == 0 ? 83 : 16;  // 83: the last 16-column slice of K is partial
                    tc.seed = ++seed;
                    if (layout == 0) {
                        tc.B = 2;
                        tc.T = 90;
                    } else {
                        tc.H = 2;
                        tc.HV = 4;
                        tc.seqlens = varlen_batches[0];
                        tc.with_ci = false;
                    }
                    INFO(tc.describe());
                    const ref::inputs in = tc.inputs();
                    host_tensor Aqk = in.make_output(sentinel), Akkd = make_akkd_out(in, sentinel);
                    const host_tensor Aqk0 = Aqk.clone(), Akkd0 = Akkd.clone();
                    const kda::intra_diag_args a = in.diag_args(Aqk, Akkd);
                    kda::chunk_kda_intra_diag(cpu2, in.problem, a);
                    const ref::diag_result r = ref::intra_diag(in.problem, a);
                    const kt::error_stats sq = kt::detail::stats(r.Aqk, r.aqk_written, Aqk);
                    const kt::error_stats sd = kt::detail::stats(r.Akkd, r.akkd_written, Akkd);
                    INFO("Aqk diag err " << sq.err << " floor " << sq.floor << "; Akkd err " << sd.err << " floor " << sd.floor);
                    CHECK(sq.count > 0);
                    CHECK(sd.count == Akkd.numel());  // every row lies in a sequence
                    CHECK(sq.err <= kt::full_precision_tolerance(X, sq.floor));
                    CHECK(sd.err <= kt::full_precision_tolerance(kda::acc_dtype(X), sd.floor));
                    CHECK(changed_outside(Aqk, Aqk0, r.aqk_written) == 0);
                    CHECK(changed_outside(Akkd, Akkd0, r.akkd_written) == 0);
                    const std::string key = std::string(kda::name(X)) + (safe ? " safe" : " notsafe");
                    aqk.add(key, sq);
                    akkd.add(key, sd);

                    // chunk_kda_intra with a workspace: the same Akkd, the same diagonal blocks of Aqk
                    host_tensor Aqk2 = in.make_output(sentinel), Akk2 = in.make_output(0), ws = make_akkd_out(in, sentinel);
                    kda::chunk_kda_intra(cpu2, in.problem, in.intra_args(Aqk2, Akk2, &ws));
                    CHECK(same_bits(ws, Akkd));
                    std::vector<std::uint8_t> off_diag(r.aqk_written.size());
                    for (std::size_t i = 0; i < off_diag.size(); ++i) off_diag[i] = !r.aqk_written[i];
                    CHECK(changed_outside(Aqk2, Aqk, off_diag) == 0);  // compares the diagonal-block entries
                }
    aqk.print("producer Aqk (diagonal blocks)");
    akkd.print("producer Akkd");
}

namespace {
/// A copy of a contiguous rank-3/4 tensor with `pad` more entries on its innermost axis (rank 3:
/// one more axis of pad + 1, the data at `offset` in it), the pads holding `fill`.
host_tensor padded_copy(const host_tensor& src, std::int64_t pad, double fill, std::int64_t offset = 0) {
    std::vector<std::int64_t> shape = src.shape();
    const bool vec = src.rank() == 3;
    if (vec) shape.push_back(1);
    const std::int64_t inner = shape.back(), rows = src.numel() / inner;
    shape.back() += pad;
    host_tensor out(src.type(), shape);
    for (std::int64_t i = 0; i < out.numel(); ++i) ref::store(out, i, fill);
    const auto es = static_cast<std::size_t>(kda::size_of(src.type()));
    for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(static_cast<unsigned char*>(out.raw()) + (r * shape.back() + offset) * static_cast<std::int64_t>(es),
                    static_cast<const unsigned char*>(src.raw()) + r * inner * static_cast<std::int64_t>(es), inner * es);
    return out;
}
/// A view of the first `inner` entries (from `offset`) of every row of a padded tensor, with the
/// logical shape `shape` (rank 3 or 4).
template <class Ref, class T>
Ref strided_view(T& padded, std::vector<std::int64_t> shape, std::int64_t offset = 0) {
    Ref r;
    const std::int64_t row = padded.shape().back();
    r.data = static_cast<unsigned char*>(const_cast<void*>(static_cast<const void*>(padded.raw()))) + offset * kda::size_of(padded.type());
    r.type = padded.type();
    r.rank = static_cast<int>(shape.size());
    for (int d = 0; d < r.rank; ++d) r.shape[d] = shape[static_cast<std::size_t>(d)];
    if (r.rank == 3) {
        r.stride = {shape[1] * shape[2] * row, shape[2] * row, row, 0};
    } else {
        r.stride = {shape[1] * shape[2] * row, shape[2] * row, row, 1};
    }
    return r;
}
}  // namespace

TEST_CASE("strided views: padded rows in and out give the same bits, pads untouched", "[cpu][intra][diag]") {
    for (bool safe : {false, true}) {
        intra_case tc;
        tc.X = dtype::bf16;
        tc.safe = safe;
        tc.B = 2;
        tc.T = 77;
        tc.H = 2;
        tc.HV = 4;
        tc.K = 48;
        tc.seed = 31;
        const ref::inputs in = tc.inputs();
        const auto& p = in.problem;
        host_tensor Aqk1 = in.make_output(0), Akk1 = in.make_output(0), ws1 = make_akkd_out(in, 0);
        kda::chunk_kda_intra(cpu2, p, in.intra_args(Aqk1, Akk1, &ws1));

        const host_tensor q = padded_copy(in.q, 8, 0), k = padded_copy(in.k, 5, 0), g = padded_copy(in.g, 4, 0), beta = padded_copy(in.beta, 2, 0, 1);
        host_tensor Aqk = padded_copy(Aqk1, 8, sentinel), Akk = padded_copy(Akk1, 3, sentinel), ws = padded_copy(ws1, 4, sentinel);
        for (host_tensor* t : {&Aqk, &Akk, &ws})  // the data part starts as sentinel too
            for (std::int64_t i = 0; i < t->numel(); ++i) ref::store(*t, i, sentinel);
        const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone(), ws0 = ws.clone();
        kda::intra_args a;
        a.q = strided_view<kda::tensor_ref>(q, {p.B, p.T, p.H, p.K});
        a.k = strided_view<kda::tensor_ref>(k, {p.B, p.T, p.H, p.K});
        a.g = strided_view<kda::tensor_ref>(g, {p.B, p.T, p.HV, p.K});
        a.beta = strided_view<kda::tensor_ref>(beta, {p.B, p.T, p.HV}, 1);
        a.Aqk = strided_view<kda::mutable_tensor_ref>(Aqk, {p.B, p.T, p.HV, p.BT});
        a.Akk = strided_view<kda::mutable_tensor_ref>(Akk, {p.B, p.T, p.HV, p.BT});
        a.Akkd = strided_view<kda::mutable_tensor_ref>(ws, {p.B, p.T, p.HV, p.BC});
        kda::chunk_kda_intra(cpu2, p, a);
        // rows: the first BT (BC) entries equal the contiguous run where it wrote, the pads are untouched
        const ref::result r = ref::intra(p, in.intra_args(Aqk1, Akk1));
        std::int64_t diff = 0, pad_written = 0;
        auto cmp_rows = [&](const host_tensor& padded, const host_tensor& padded0, const host_tensor& dense, const std::vector<std::uint8_t>* mask) {
            const std::int64_t w = dense.shape().back(), row = padded.shape().back();
            const kda::tensor_ref P = kt::flat(padded), P0 = kt::flat(padded0), D = kt::flat(dense);
            for (std::int64_t rr = 0; rr < dense.numel() / w; ++rr)
                for (std::int64_t j = 0; j < row; ++j) {
                    const double v = ref::read(P, rr * row + j);
                    if (j >= w) {
                        pad_written += v != ref::read(P0, rr * row + j);
                    } else if (mask == nullptr || (*mask)[static_cast<std::size_t>(rr * w + j)]) {
                        diff += v != ref::read(D, rr * w + j);
                    } else {
                        diff += v != sentinel;
                    }
                }
        };
        cmp_rows(Aqk, Aqk0, Aqk1, &r.aqk_written);
        cmp_rows(Akk, Akk0, Akk1, &r.akk_written);
        cmp_rows(ws, ws0, ws1, nullptr);
        INFO((safe ? "safe" : "not safe") << ": " << diff << " entries differ from the contiguous run, " << pad_written << " pad entries written");
        CHECK(diff == 0);
        CHECK(pad_written == 0);
    }
}

TEST_CASE("make_tensor with explicit strides: q, k slices of a fused projection, as in the README", "[cpu][intra][full]") {
    // the README's call with q and k taken from one [B, T, 2, H, K] buffer and beta from a
    // [B, T, HV, 2] one, against the same call on contiguous copies: the same bits
    const std::int64_t B = 1, T = 150, H = 2, HV = 4, K = 40, BT = 64;
    intra_case tc;
    tc.X = dtype::bf16;
    tc.T = T;
    tc.H = H;
    tc.HV = HV;
    tc.K = K;
    tc.seed = 61;
    const ref::inputs in = tc.inputs();
    const auto* q = in.q.data<kda::bf16_t>();
    const auto* k = in.k.data<kda::bf16_t>();
    const auto* beta = in.beta.data<kda::bf16_t>();
    std::vector<kda::bf16_t> qk(static_cast<std::size_t>(B * T * 2 * H * K)), beta2(static_cast<std::size_t>(B * T * HV * 2));
    for (std::int64_t t = 0; t < T; ++t) {
        for (std::int64_t i = 0; i < H * K; ++i) {
            qk[static_cast<std::size_t>((t * 2 + 0) * H * K + i)] = q[t * H * K + i];
            qk[static_cast<std::size_t>((t * 2 + 1) * H * K + i)] = k[t * H * K + i];
        }
        for (std::int64_t hv = 0; hv < HV; ++hv) beta2[static_cast<std::size_t>((t * HV + hv) * 2 + 1)] = beta[t * HV + hv];
    }
    std::vector<kda::bf16_t> Aqk(static_cast<std::size_t>(B * T * HV * BT)), Akk(Aqk.size());
    const kda::intra_problem problem{.B = B, .T = T, .H = H, .HV = HV, .K = K, .scale = 1.0 / std::sqrt(double(K))};
    kda::intra_args args;
    args.q = kda::make_tensor(qk.data(), {B, T, H, K}, {T * 2 * H * K, 2 * H * K, K, 1});
    args.k = kda::make_tensor(qk.data() + H * K, {B, T, H, K}, {T * 2 * H * K, 2 * H * K, K, 1});
    args.g = kda::make_tensor(in.g.data<float>(), {B, T, HV, K});
    args.beta = kda::make_tensor(beta2.data() + 1, {B, T, HV}, {T * HV * 2, HV * 2, 2});
    args.Aqk = kda::make_mutable_tensor(Aqk.data(), {B, T, HV, BT});
    args.Akk = kda::make_mutable_tensor(Akk.data(), {B, T, HV, BT});
    REQUIRE(kda::can_implement(problem, args, kda::cpu_backend::caps()));
    kda::chunk_kda_intra(cpu2, problem, args);

    ref::inputs dense = tc.inputs();
    dense.problem = problem;
    host_tensor Aqk1 = dense.make_output(0), Akk1 = dense.make_output(0);
    kda::chunk_kda_intra(cpu2, problem, dense.intra_args(Aqk1, Akk1));
    CHECK(std::memcmp(Aqk.data(), Aqk1.raw(), static_cast<std::size_t>(Aqk1.nbytes())) == 0);
    CHECK(std::memcmp(Akk.data(), Akk1.raw(), static_cast<std::size_t>(Akk1.nbytes())) == 0);
    CHECK(std::any_of(Akk.begin(), Akk.end(), [](kda::bf16_t v) { return v.bits != 0; }));
}

TEST_CASE("precision::tf32 on the CPU computes as fp32: the same bits", "[cpu][intra][full]") {
    // the CPU backend folds tf32 into fp32 (cpu_backend::effective_precision): every entry point
    for (dtype X : {dtype::bf16, dtype::fp32}) {
        intra_case tc;
        tc.X = X;
        tc.K = 40;
        tc.T = 90;
        tc.seed = 71;
        const ref::inputs in = tc.inputs();
        kda::intra_problem p32 = in.problem, p_tf = in.problem;
        p32.solve_precision = kda::precision::fp32;
        p_tf.solve_precision = kda::precision::tf32;
        host_tensor q1 = in.make_output(0), k1 = in.make_output(0), q2 = in.make_output(0), k2 = in.make_output(0);
        kda::chunk_kda_intra(cpu2, p32, in.intra_args(q1, k1));
        kda::chunk_kda_intra(cpu2, p_tf, in.intra_args(q2, k2));
        CHECK(same_bits(q1, q2));
        CHECK(same_bits(k1, k2));
        host_tensor q3 = in.make_output(0), k3 = in.make_output(0), q4 = in.make_output(0), k4 = in.make_output(0);
        kda::inter_solve(cpu2, p32, in.args(q3, k3));
        kda::inter_solve(cpu2, p_tf, in.args(q4, k4));
        CHECK(same_bits(q3, q4));
        CHECK(same_bits(k3, k4));
        host_tensor d1 = make_akkd_out(in, 0), d2 = make_akkd_out(in, 0);
        kda::chunk_kda_intra_diag(cpu2, p32, in.diag_args(q3, d1));
        kda::chunk_kda_intra_diag(cpu2, p_tf, in.diag_args(q4, d2));
        CHECK(same_bits(d1, d2));
        CHECK(same_bits(q3, q4));
    }
}

TEST_CASE("the intra stage does not depend on the thread count", "[cpu][intra][diag]") {
    intra_case tc;
    tc.X = dtype::bf16;
    tc.B = 2;
    tc.T = 333;
    tc.H = 2;
    tc.HV = 6;
    tc.K = 128;
    tc.seed = 5;
    for (bool safe : {false, true}) {
        tc.safe = safe;
        const ref::inputs in = tc.inputs();
        host_tensor q1 = in.make_output(0), k1 = in.make_output(0), q2 = in.make_output(0), k2 = in.make_output(0);
        kda::chunk_kda_intra(kda::cpu_backend{1}, in.problem, in.intra_args(q1, k1));
        kda::chunk_kda_intra(kda::cpu_backend{5}, in.problem, in.intra_args(q2, k2));
        CHECK(same_bits(q1, q2));
        CHECK(same_bits(k1, k2));
        kda::chunk_kda_intra(kda::cpu_backend{0}, in.problem, in.intra_args(q2, k2));
        CHECK(same_bits(q1, q2));
        CHECK(same_bits(k1, k2));
    }
}

TEST_CASE("strong decay: safe-gate inputs through both flavours", "[cpu][intra][strong-decay]") {
    // make_inputs with safe_gate: per-token log-decay lower_bound sigmoid(.) down to lower_bound
    // nats, i.e. a sub-chunk of 16 rows may decay by 15 * 5 / ln 2 ~ 108 (log2), a chunk of 64 by ~455.
    for (dtype X : {dtype::bf16, dtype::fp32, dtype::fp64})
        for (int BT : {32, 64})
            for (bool flavour : {true, false}) {
                intra_case tc;
                tc.X = X;
                tc.safe = true;  // the inputs' distribution
                tc.BT = BT;
                tc.K = 128;
                tc.B = 1;
                tc.T = 150;
                tc.H = 1;
                tc.HV = 2;
                tc.seed = 700 + static_cast<std::uint64_t>(BT);
                tc.lower_bound = -5.0;
                INFO("flavour " << (flavour ? "safe" : "not safe"));
                const auto [sq, sk] = check_full(tc, true, flavour);
                CHECK(std::isfinite(sq.err));
                CHECK(std::isfinite(sk.err));
                std::printf("[cpu intra] strong decay (lower_bound -5) %s BT%d, %-8s flavour: Aqk err %.3e (floor %.3e), Akk err %.3e (floor %.3e)\n",
                            std::string(kda::name(X)).c_str(), BT, flavour ? "safe" : "not-safe", sq.err, sq.floor, sk.err, sk.floor);
                // the producer alone, against the flavour's own Akkd
                ref::inputs in = tc.inputs();
                in.problem.safe_gate = flavour;
                host_tensor Aqk = in.make_output(sentinel), Akkd = make_akkd_out(in, sentinel);
                kda::chunk_kda_intra_diag(cpu2, in.problem, in.diag_args(Aqk, Akkd));
                const ref::diag_result r = ref::intra_diag(in.problem, in.diag_args(Aqk, Akkd));
                const kt::error_stats dq = kt::detail::stats(r.Aqk, r.aqk_written, Aqk), dd = kt::detail::stats(r.Akkd, r.akkd_written, Akkd);
                CHECK(dq.err <= kt::full_precision_tolerance(X, dq.floor));
                CHECK(dd.err <= kt::full_precision_tolerance(kda::acc_dtype(X), dd.floor));
            }
}

TEST_CASE("strong decay: the safe flavour's midpoint keeps a 2^-165 sub-chunk inside fp32", "[cpu][intra][strong-decay]") {
    // every gate decays by exactly 11 (log2) per token: a sub-chunk spans 2^-165. Factors around
    // the first row would need 2^165 (beyond fp32's 2^127); around the midpoint row 8 they stay
    // within 2^88. Both flavours must match the float64 reference.
    for (bool flavour : {true, false})
        for (int BT : {32, 64}) {
            intra_case tc;
            tc.X = dtype::fp32;
            tc.BT = BT;
            tc.K = 32;
            tc.T = 2 * BT + 5;
            tc.seed = 812;
            ref::inputs in = tc.inputs();
            in.problem.safe_gate = flavour;
            for (std::int64_t t = 0; t < in.problem.T; ++t)
                for (std::int64_t j = 0; j < in.problem.HV * in.problem.K; ++j)
                    ref::store(in.g, t * in.problem.HV * in.problem.K + j, -11.0 * static_cast<double>(t % BT));
            host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
            const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
            const kda::intra_args a = in.intra_args(Aqk, Akk);
            kda::chunk_kda_intra(cpu2, in.problem, a);
            const kt::comparison c = kt::compare(ref::intra(in.problem, a), Aqk, Akk, Aqk0, Akk0);
            INFO((flavour ? "safe" : "not-safe") << " flavour BT" << BT << ": Aqk err " << c.aqk.err << ", Akk err " << c.akk.err);
            CHECK(c.untouched_changed == 0);
            CHECK(c.aqk.err <= kt::full_precision_tolerance(dtype::fp32, c.aqk.floor));
            CHECK(c.akk.err <= kt::full_precision_tolerance(dtype::fp32, c.akk.floor));
        }
}

TEST_CASE("decay beyond the safe gate's bound: both flavours stay exact", "[cpu][intra][strong-decay]") {
    // lower_bound -20 nats per token: up to 15 * 20 / ln 2 ~ 433 (log2) inside one sub-chunk. The
    // not-safe flavour evaluates 2^(g_i - g_j) <= 1 term by term, so it stays within tolerance (the
    // far entries underflow to 0 as they should). The safe flavour's factors around the midpoint
    // would reach 2^(8 * 28.9) ~ 2^231, beyond fp32: past |g_i - g_r| = 64 it goes term by term
    // too (in fp64 it still factorises: the bound there is 960).
    for (dtype X : {dtype::fp32, dtype::fp64})
        for (bool flavour : {false, true}) {
            intra_case tc;
            tc.X = X;
            tc.safe = true;
            tc.BT = 64;
            tc.K = 64;
            tc.T = 128;
            tc.seed = 811;
            tc.lower_bound = -20.0;
            ref::inputs in = tc.inputs();
            in.problem.safe_gate = flavour;
            host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
            const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
            const kda::intra_args a = in.intra_args(Aqk, Akk);
            kda::chunk_kda_intra(cpu2, in.problem, a);
            const kt::comparison c = kt::compare(ref::intra(in.problem, a), Aqk, Akk, Aqk0, Akk0);
            std::printf("[cpu intra] decay beyond the bound (lower_bound -20) %s, %s flavour: Aqk err %.3e, Akk err %.3e\n",
                        std::string(kda::name(X)).c_str(), flavour ? "safe" : "not-safe", c.aqk.err, c.akk.err);
            INFO(kda::name(X) << (flavour ? " safe" : " not-safe") << " flavour: Aqk err " << c.aqk.err << ", Akk err " << c.akk.err);
            CHECK(c.untouched_changed == 0);
            CHECK(c.aqk.err <= kt::full_precision_tolerance(X, c.aqk.floor));
            CHECK(c.akk.err <= kt::full_precision_tolerance(X, c.akk.floor));
        }
}

// ---------------------------------------------------------------------------------------------
// chunk_local_cumsum

namespace {

kda::cumsum_problem cumsum_problem_of(kda::gate_activation act, std::int64_t B, std::int64_t T, int BT) {
    kda::cumsum_problem p;
    p.B = B;
    p.T = T;
    p.HV = 3;
    p.K = 40;
    p.BT = BT;
    p.activation = act;
    p.lower_bound = -5.0;
    return p;
}

const char* act_name(kda::gate_activation a) {
    switch (a) {
        case kda::gate_activation::none: return "none";
        case kda::gate_activation::kda: return "kda";
        case kda::gate_activation::kda_lower_bound: return "kda_lower_bound";
    }
    return "?";
}

/// Error budget of a chunk-local sum, entry by entry (scaled like the sums):
///   M_t = |scale| sum_{u <= t in the chunk} |d_u|          (the running magnitude)
///   C_t = |scale| sum_{u <= t in the chunk} kappa_u |d_u|  (the activations' conditioning)
/// with d_u the per-token log-decay and kappa_u the condition number of the activation at its
/// argument z_u: z sigmoid(z) / softplus(z) for kda (z = g + dt_bias; 1 above 20), |z| (1 - sigmoid(z))
/// for kda_lower_bound (z = exp(A_log) (g + dt_bias)), 0 for none. An evaluation in a precision of
/// unit roundoff u rounds z_u (and exp(A_log)), which moves d_u by up to a few kappa_u |d_u| u, so it
/// can promise |out - exact| <= tol M_t + 8 u C_t + N_t eta,
/// tol covering the sum's and the scale's roundings, N_t = |scale| max(1, |lower_bound|) times the
/// number of terms so far, and eta the absolute error allowed per term near underflow: 2^-120 for
/// fp32 evaluation (below fp32's normal range, 2^-126; Eigen's vectorised expf clamps its argument
/// to about -88.4 and so returns ~2^-127 for anything smaller), 2^-1000 for fp64. The formulas here
/// only weigh the tolerance; the expected values come from kda::reference::chunk_local_cumsum.
struct cumsum_budget {
    std::vector<double> M, C, N;
};
cumsum_budget budget_of(const kda::cumsum_problem& p, const kda::cumsum_args& a) {
    cumsum_budget b;
    b.M.assign(static_cast<std::size_t>(p.B * p.T * p.HV * p.K), 0.0);
    b.C = b.M;
    b.N = b.M;
    const double per_term = std::abs(p.scale) * std::max(1.0, std::abs(p.lower_bound));
    std::vector<std::int64_t> starts;  // chunk starts per batch row (varlen: B == 1)
    if (a.cu_seqlens.data != nullptr) {
        for (std::int64_t n = 0; n + 1 < a.cu_seqlens.shape[0]; ++n)
            for (auto t = static_cast<std::int64_t>(ref::read(a.cu_seqlens, n)); t < static_cast<std::int64_t>(ref::read(a.cu_seqlens, n + 1)); t += p.BT)
                starts.push_back(t);
    } else {
        for (std::int64_t t = 0; t < p.T; t += p.BT) starts.push_back(t);
    }
    starts.push_back(p.T);
    const bool act = p.activation != kda::gate_activation::none;
    for (std::int64_t bb = 0; bb < p.B; ++bb)
        for (std::size_t c = 0; c + 1 < starts.size(); ++c)
            for (std::int64_t hv = 0; hv < p.HV; ++hv)
                for (std::int64_t kk = 0; kk < p.K; ++kk) {
                    double m = 0, cc = 0, nn = 0;
                    const double rate = act && a.A_log.data != nullptr ? std::exp(ref::read(a.A_log, hv)) : 1.0;
                    const double bias = act && a.dt_bias.data != nullptr ? ref::read(a.dt_bias, hv * p.K + kk) : 0.0;
                    for (std::int64_t t = starts[c]; t < starts[c + 1]; ++t) {
                        const double x = ref::read(a.g, bb, t, hv, kk) + bias;
                        double kappa = 0, d = x;
                        if (p.activation == kda::gate_activation::kda) {
                            const double sp = x > 20 ? x : std::log1p(std::exp(x));
                            d = -rate * sp;
                            kappa = x > 20 ? 1.0 : std::abs(x) / (1 + std::exp(-x)) / sp;
                        }
                        if (p.activation == kda::gate_activation::kda_lower_bound) {
                            const double z = rate * x, sg = 1 / (1 + std::exp(-z));
                            d = p.lower_bound * sg;
                            kappa = std::abs(z) * (1 - sg);
                        }
                        m += std::abs(d * p.scale);
                        cc += std::abs(kappa * d * p.scale);
                        nn += per_term;
                        const auto idx = static_cast<std::size_t>(((bb * p.T + t) * p.HV + hv) * p.K + kk);
                        b.M[idx] = m;
                        b.C[idx] = cc;
                        b.N[idx] = nn;
                    }
                }
    return b;
}

/// Worst |out - exact| / (tol M_t + 8 u C_t + N_t eta) over all entries (<= 1 passes); NaN counts
/// as inf. u = 2^-24 (fp32 evaluation) or 2^-53 (fp64).
double cumsum_worst(const std::vector<double>& r, const host_tensor& out, const cumsum_budget& b, double tol, double u) {
    const double eta = u < 1e-10 ? std::ldexp(1.0, -1000) : std::ldexp(1.0, -120);
    const kda::tensor_ref o = kt::flat(out);
    double worst = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
        const double d = std::abs(ref::read(o, static_cast<std::int64_t>(i)) - r[i]);
        if (!(d == d)) return INFINITY;  // NaN: not written, or not finite
        const double bound = tol * b.M[i] + 8 * u * b.C[i] + eta * b.N[i];
        worst = std::max(worst, d == 0 ? 0.0 : (bound > 0 ? d / bound : INFINITY));
    }
    return worst;
}

/// The largest |out - exact| / M_t over entries with M_t >= 1e-30, for the printed figures.
double cumsum_rel(const std::vector<double>& r, const host_tensor& out, const cumsum_budget& b) {
    const kda::tensor_ref o = kt::flat(out);
    double worst = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
        const double d = std::abs(ref::read(o, static_cast<std::int64_t>(i)) - r[i]);
        if (d > 0 && b.M[i] >= 1e-30) worst = std::max(worst, d / b.M[i]);
    }
    return worst;
}

double cumsum_tolerance(dtype X) { return X == dtype::fp64 ? 1e-12 : 1e-6; }
double cumsum_roundoff(dtype X) { return X == dtype::fp64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

}  // namespace

TEST_CASE("chunk_local_cumsum against the float64 reference", "[cpu][intra][cumsum]") {
    std::map<std::string, std::pair<double, double>> worst;  // (worst error / bound, worst error / running magnitude)
    std::uint64_t seed = 900;
    for (auto act : {kda::gate_activation::none, kda::gate_activation::kda, kda::gate_activation::kda_lower_bound})
        for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64})
            for (int BT : {32, 64})
                for (int layout = 0; layout < 3; ++layout) {
                    kda::cumsum_problem p = cumsum_problem_of(act, layout == 0 ? 2 : 1, 150, BT);
                    ref::gate_options o;
                    o.seed = ++seed;
                    if (layout > 0) o.seqlens = varlen_batches[static_cast<std::size_t>(layout - 1)];
                    o.with_A_log = act != kda::gate_activation::kda_lower_bound || layout != 1;
                    o.with_dt_bias = layout != 2;
                    if (layout == 2) p.scale = 1.0;  // natural-log output
                    const ref::gate_inputs in = ref::make_gate_inputs(p, X, o);
                    host_tensor out = in.make_output(std::nan(""));
                    const kda::cumsum_args a = in.args(out);
                    kda::chunk_local_cumsum(cpu2, in.problem, a);
                    const std::vector<double> r = ref::chunk_local_cumsum(in.problem, a);
                    const cumsum_budget b = budget_of(in.problem, a);
                    const double w = cumsum_worst(r, out, b, cumsum_tolerance(X), cumsum_roundoff(X)), rel = cumsum_rel(r, out, b);
                    INFO(act_name(act) << " " << kda::name(X) << " BT" << BT << " layout " << layout << " (A_log " << o.with_A_log << ", dt_bias "
                                       << o.with_dt_bias << "): worst error / bound " << w << ", worst error / running magnitude " << rel);
                    CHECK(w <= 1.0);
                    auto& wk = worst[std::string(act_name(act)) + " " + std::string(kda::name(X))];
                    wk.first = std::max(wk.first, w);
                    wk.second = std::max(wk.second, rel);
                }
    for (const auto& [k, v] : worst)
        std::printf("[cpu intra] cumsum %-22s worst error / bound %.3f, worst error / running magnitude %.3e\n", k.c_str(), v.first, v.second);
}

TEST_CASE("chunk_local_cumsum: mixed-sign inputs, errors against the running magnitude", "[cpu][intra][cumsum]") {
    // activation none with g ~ N(0, 1): the sums cancel, the bound still holds against sum |g|
    for (dtype X : {dtype::fp32, dtype::fp64}) {
        kda::cumsum_problem p = cumsum_problem_of(kda::gate_activation::none, 1, 200, 64);
        ref::gate_options o;
        o.seed = 77;
        o.seqlens = {150, 50};
        ref::gate_inputs in = ref::make_gate_inputs(p, X, o);
        std::mt19937_64 rng(3);
        std::normal_distribution<double> normal;
        for (std::int64_t i = 0; i < in.g.numel(); ++i) ref::store(in.g, i, normal(rng));
        host_tensor out = in.make_output(0);
        kda::chunk_local_cumsum(cpu2, in.problem, in.args(out));
        const std::vector<double> r = ref::chunk_local_cumsum(in.problem, in.args(out));
        const double w = cumsum_worst(r, out, budget_of(in.problem, in.args(out)), cumsum_tolerance(X), cumsum_roundoff(X));
        INFO(kda::name(X) << ": worst error / bound " << w);
        CHECK(w <= 1.0);
    }
}

TEST_CASE("chunk_local_cumsum: restarts at chunk and sequence starts (hand-computed)", "[cpu][intra][cumsum]") {
    // per-token log-decay -1 everywhere, BT = 4, scale 1: sums -1, -2, -3, -4, -1, ... restarting
    // at every chunk start, and chunks start at each sequence start.
    kda::cumsum_problem p;
    p.B = 1;
    p.T = 12;
    p.HV = 2;
    p.K = 3;
    p.BT = 4;
    p.scale = 1.0;
    host_tensor g(dtype::fp32, {1, 12, 2, 3}), out(dtype::fp32, {1, 12, 2, 3}), cu(dtype::i32, {4});
    for (std::int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = -1.0f;
    const std::int32_t offs[4] = {0, 3, 3, 12};  // lengths 3, 0, 9
    std::copy(offs, offs + 4, cu.data<std::int32_t>());
    kda::cumsum_args a;
    a.g = g.ref();
    a.g_out = out.mref();
    a.cu_seqlens = cu.ref();
    kda::chunk_local_cumsum(cpu2, p, a);
    const float expect_t[12] = {-1, -2, -3, -1, -2, -3, -4, -1, -2, -3, -4, -1};
    for (std::int64_t t = 0; t < 12; ++t)
        for (std::int64_t j = 0; j < 6; ++j) CHECK(out.data<float>()[t * 6 + j] == expect_t[t]);
    const std::vector<double> r = ref::chunk_local_cumsum(p, a);
    for (std::int64_t t = 0; t < 12; ++t) CHECK(r[static_cast<std::size_t>(t * 6)] == expect_t[t]);
    // dense, B = 2, with the default scale 1 / ln 2
    p.B = 2;
    p.T = 6;
    p.scale = 1.0 / std::numbers::ln2;
    a.cu_seqlens = {};
    a.g.rank = a.g_out.rank = 4;
    a.g.shape = a.g_out.shape = {2, 6, 2, 3};
    a.g.stride = a.g_out.stride = kda::contiguous_strides(a.g.shape, 4);
    kda::chunk_local_cumsum(cpu2, p, a);
    const float expect_d[6] = {-1, -2, -3, -4, -1, -2};
    for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t t = 0; t < 6; ++t)
            for (std::int64_t j = 0; j < 6; ++j) CHECK(out.data<float>()[(b * 6 + t) * 6 + j] == Approx(expect_d[t] / std::numbers::ln2).epsilon(1e-6));
}

TEST_CASE("end to end: raw gates -> chunk_local_cumsum -> chunk_kda_intra", "[cpu][intra][cumsum]") {
    for (dtype X : {dtype::bf16, dtype::fp32})
        for (bool safe : {false, true}) {
            intra_case tc;
            tc.X = X;
            tc.safe = safe;
            tc.K = 64;
            tc.H = 1;
            tc.HV = 2;
            tc.seqlens = varlen_batches[1];
            tc.seed = 1234;
            ref::inputs in = tc.inputs();
            // g from raw gate inputs: kda (not safe) or kda_lower_bound with lower_bound -5 (safe)
            kda::cumsum_problem cp;
            cp.B = 1;
            cp.T = in.problem.T;
            cp.HV = in.problem.HV;
            cp.K = in.problem.K;
            cp.BT = in.problem.BT;
            cp.activation = safe ? kda::gate_activation::kda_lower_bound : kda::gate_activation::kda;
            cp.lower_bound = -5.0;
            ref::gate_options go;
            go.seed = 99;
            go.seqlens = tc.seqlens;
            const ref::gate_inputs gi = ref::make_gate_inputs(cp, X, go);
            host_tensor g = gi.make_output(0);
            kda::chunk_local_cumsum(cpu2, gi.problem, gi.args(g));
            in.g = std::move(g);
            host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
            const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
            const kda::intra_args a = in.intra_args(Aqk, Akk);
            kda::chunk_kda_intra(cpu2, in.problem, a);
            const kt::comparison c = kt::compare(ref::intra(in.problem, a), Aqk, Akk, Aqk0, Akk0);
            INFO(tc.describe() << ": Aqk err " << c.aqk.err << " floor " << c.aqk.floor << ", Akk err " << c.akk.err << " floor " << c.akk.floor);
            CHECK(c.untouched_changed == 0);
            CHECK(c.aqk.err <= kt::full_precision_tolerance(X, c.aqk.floor));
            CHECK(c.akk.err <= kt::full_precision_tolerance(X, c.akk.floor));
            // g itself against the float64 cumsum of the same raw inputs
            const std::vector<double> gr = ref::chunk_local_cumsum(gi.problem, gi.args(in.g));
            CHECK(cumsum_worst(gr, in.g, budget_of(gi.problem, gi.args(in.g)), 1e-6, std::ldexp(1.0, -24)) <= 1.0);
        }
}

// ---------------------------------------------------------------------------------------------
// Bad input


TEST_CASE("chunk_kda_intra's WY outputs (w, u, kg, qg) against the float64 reference", "[cpu][intra][wy]") {
    worst_table tw, tu, tkg, tqg;
    std::uint64_t seed = 700;
    int cases = 0;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64})
        for (bool safe : {false, true})
            for (int layout = 0; layout < 3; ++layout) {
                intra_case tc;
                tc.X = X;
                tc.safe = safe;
                tc.BT = layout == 1 ? 32 : 64;
                tc.K = layout == 2 ? 37 : 64;
                tc.seed = ++seed;
                if (layout == 0) {  // dense, GVA, a short last chunk
                    tc.B = 2;
                    tc.T = 100;
                } else {  // varlen: an empty sequence, length-1 and short ones
                    tc.H = 2;
                    tc.HV = 4;
                    tc.seqlens = varlen_batches[static_cast<std::size_t>(layout - 1)];
                    tc.with_ci = layout == 1;
                }
                INFO(tc.describe());
                ref::inputs in = tc.inputs();
                const std::int64_t V = layout == 2 ? 48 : 72;
                in.problem.V = V;
                host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
                host_tensor Aqk2 = in.make_output(sentinel), Akk2 = in.make_output(sentinel);
                kt::wy_tensors t(in, V, seed, sentinel);
                kda::intra_args a = in.intra_args(Aqk, Akk);
                t.attach(a);
                kda::chunk_kda_intra(cpu2, in.problem, a);
                // the stage's own outputs do not change when the WY outputs are requested
                kda::chunk_kda_intra(cpu2, in.problem, in.intra_args(Aqk2, Akk2));
                CHECK(same_bits(Aqk, Aqk2));
                CHECK(same_bits(Akk, Akk2));
                const ref::wy_result r = ref::intra_wy(in.problem, a);
                const auto mk = kt::row_mask(r, in.problem.K), mv = kt::row_mask(r, V);
                const kt::error_stats sw = kt::detail::stats(r.w, mk, t.w), su = kt::detail::stats(r.u, mv, t.u),
                                      skg = kt::detail::stats(r.kg, mk, t.kg), sqg = kt::detail::stats(r.qg, mk, t.qg);
                INFO("w err " << sw.err << " floor " << sw.floor << "; u " << su.err << " / " << su.floor << "; kg " << skg.err << " / " << skg.floor
                              << "; qg " << sqg.err << " / " << sqg.floor);
                CHECK(sw.count > 0);
                CHECK(su.count == sw.count / in.problem.K * V);
                for (const auto* st : {&sw, &su, &skg, &sqg}) CHECK(st->err <= kt::full_precision_tolerance(X, st->floor));
                const std::string key = std::string(kda::name(X)) + (safe ? " safe" : " notsafe");
                tw.add(key, sw);
                tu.add(key, su);
                tkg.add(key, skg);
                tqg.add(key, sqg);
                ++cases;
            }
    std::printf("[cpu intra] WY outputs: %d cases\n", cases);
    tw.print("w ");
    tu.print("u ");
    tkg.print("kg");
    tqg.print("qg");
}

TEST_CASE("chunk_kda_intra's WY outputs: each alone, the same bits as all four", "[cpu][intra][wy]") {
    intra_case tc;
    tc.X = dtype::bf16;
    tc.K = 40;
    tc.T = 90;
    ref::inputs in = tc.inputs();
    in.problem.V = 24;
    host_tensor Aqk = in.make_output(0), Akk = in.make_output(0);
    kt::wy_tensors all(in, 24, 5, sentinel);
    kda::intra_args a = in.intra_args(Aqk, Akk);
    all.attach(a);
    kda::chunk_kda_intra(cpu2, in.problem, a);
    CHECK(kt::wy_each_alone_mismatches(in, 24, 5, sentinel, all, Aqk, Akk, [&](const kda::intra_args& b) { kda::chunk_kda_intra(cpu2, in.problem, b); }) == 0);
}

TEST_CASE("bad input: chunk_kda_intra's WY outputs name the argument and write nothing", "[cpu][intra][bad-input][wy]") {
    intra_case tc;
    tc.X = dtype::fp32;
    tc.K = 32;
    tc.T = 70;
    ref::inputs in = tc.inputs();
    in.problem.V = 16;
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    kt::wy_tensors t(in, 16, 9, sentinel);
    host_tensor w_bf16(dtype::bf16, {tc.B, tc.T, tc.HV, tc.K}), w_short(dtype::fp32, {tc.B, tc.T, tc.HV, tc.K - 1});
    const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone(), w0 = t.w.clone(), u0 = t.u.clone(), kg0 = t.kg.clone(), qg0 = t.qg.clone();
    struct bad {
        const char* what;
        const char* expect;
        std::function<void(kda::intra_problem&, kda::intra_args&)> mutate;
    };
    const std::vector<bad> cases = {
        {"u without v", "'v'", [&](auto&, auto& a) { a.v = {}; }},
        {"v without u", "'v'", [&](auto&, auto& a) { a.u = {}; }},
        {"V of 0", "'V'", [&](auto& p, auto&) { p.V = 0; }},
        {"V not v's", "'v'", [&](auto& p, auto&) { p.V = 15; }},
        {"w dtype", "'w'", [&](auto&, auto& a) { a.w = w_bf16.mref(); }},
        {"w shape", "'w'", [&](auto&, auto& a) { a.w = w_short.mref(); }},
        {"kg overlaps k", "'kg'", [&](auto&, auto& a) { a.kg.data = const_cast<void*>(a.k.data); }},
        {"qg overlaps w", "'qg'", [&](auto&, auto& a) { a.qg = a.w; }},
        {"u overlaps Akk", "'u'", [&](auto&, auto& a) { a.u.data = a.Akk.data; }},
        {"w overlaps itself", "'w'", [&](auto&, auto& a) { a.w.stride[1] = 1; }},
    };
    for (const auto& bc : cases) {
        DYNAMIC_SECTION(bc.what) {
            kda::intra_problem p = in.problem;
            kda::intra_args a = in.intra_args(Aqk, Akk);
            t.attach(a);
            bc.mutate(p, a);
            REQUIRE_THROWS_WITH(kda::chunk_kda_intra(cpu2, p, a), Catch::Contains(bc.expect) && Catch::Contains("kda::chunk_kda_intra"));
            CHECK(same_bits(Aqk, Aqk0));
            CHECK(same_bits(Akk, Akk0));
            CHECK(same_bits(t.w, w0));
            CHECK(same_bits(t.u, u0));
            CHECK(same_bits(t.kg, kg0));
            CHECK(same_bits(t.qg, qg0));
        }
    }
}

TEST_CASE("bad input: every entry point names the argument and writes nothing", "[cpu][intra][bad-input]") {
    intra_case tc;
    tc.X = dtype::bf16;
    tc.H = 2;
    tc.HV = 4;
    tc.seqlens = {40, 60};
    tc.K = 64;
    const ref::inputs in = tc.inputs();
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel), Akkd = make_akkd_out(in, sentinel);
    const host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone(), Akkd0 = Akkd.clone();
    host_tensor akkd_bf16(dtype::bf16, {1, 100, 4, 16}), cu_bad(dtype::i64, {3});
    auto set_cu = [&](std::int64_t a0, std::int64_t a1, std::int64_t a2) {
        auto* c = cu_bad.data<std::int64_t>();
        c[0] = a0, c[1] = a1, c[2] = a2;
    };
    auto unchanged = [&] { return same_bits(Aqk, Aqk0) && same_bits(Akk, Akk0) && same_bits(Akkd, Akkd0); };

    struct bad {
        const char* what;
        const char* expect;
        std::function<void(kda::intra_problem&, kda::intra_args&)> mutate;
    };
    const std::vector<bad> cases = {
        {"q shape", "'q'", [](auto&, auto& a) { a.q.shape[3] = 32; }},
        {"Akk missing", "'Akk'", [](auto&, auto& a) { a.Akk = {}; }},
        {"Akkd dtype", "'Akkd'", [&](auto&, auto& a) { a.Akkd = akkd_bf16.mref(); }},
        {"Akkd width", "'Akkd'", [](auto&, auto& a) { a.Akkd.shape[3] = 8; }},
        {"HV not a multiple of H", "'HV'", [](auto& p, auto&) { p.HV = 3; }},
        {"BT = 48", "'BT'", [](auto& p, auto&) { p.BT = 48; }},
        {"cu_seqlens not ending at T", "'cu_seqlens'", [&](auto&, auto& a) { set_cu(0, 40, 99), a.cu_seqlens = cu_bad.ref(); }},
        {"cu_seqlens decreasing", "'cu_seqlens'", [&](auto&, auto& a) { set_cu(0, 101, 100), a.cu_seqlens = cu_bad.ref(); }},
        {"g dtype", "'g'", [&](auto&, auto& a) { a.g = in.q.ref(); }},
        {"Aqk overlaps q", "overlaps", [](auto&, auto& a) { a.Aqk.data = const_cast<void*>(a.q.data), a.Aqk.type = a.q.type; }},
        {"Akkd overlaps Aqk", "overlaps", [](auto&, auto& a) { a.Akkd.data = a.Aqk.data, a.Akkd.type = kda::dtype::fp32; }},
    };
    for (const auto& bc : cases) {
        INFO("bad input: " << bc.what);
        // chunk_kda_intra
        {
            kda::intra_problem p = in.problem;
            kda::intra_args a = in.intra_args(Aqk, Akk, &Akkd);
            bc.mutate(p, a);
            REQUIRE_THROWS_WITH(kda::chunk_kda_intra(cpu2, p, a), Catch::Contains(bc.expect) && Catch::Contains("kda::chunk_kda_intra"));
            CHECK(unchanged());
        }
        // chunk_kda_intra_diag (no Akk)
        if (std::string(bc.what) != "Akk missing") {
            kda::intra_problem p = in.problem;
            kda::intra_args a = in.intra_args(Aqk, Akk, &Akkd);
            bc.mutate(p, a);
            kda::intra_diag_args d;
            d.q = a.q, d.k = a.k, d.g = a.g, d.beta = a.beta, d.Aqk = a.Aqk, d.Akkd = a.Akkd, d.cu_seqlens = a.cu_seqlens, d.chunk_indices = a.chunk_indices;
            REQUIRE_THROWS_WITH(kda::chunk_kda_intra_diag(cpu2, p, d), Catch::Contains(bc.expect) && Catch::Contains("kda::chunk_kda_intra_diag"));
            CHECK(unchanged());
        }
    }
    {  // the producer needs its Akkd output
        kda::intra_diag_args d = in.diag_args(Aqk, Akkd);
        d.Akkd = {};
        REQUIRE_THROWS_WITH(kda::chunk_kda_intra_diag(cpu2, in.problem, d), Catch::Contains("'Akkd'"));
        CHECK(unchanged());
    }
    {  // negative thread count (the backend's own check)
        REQUIRE_THROWS_WITH(kda::chunk_kda_intra(kda::cpu_backend{-1}, in.problem, in.intra_args(Aqk, Akk, &Akkd)), Catch::Contains("'threads'"));
        CHECK(unchanged());
    }

    // T == 0: a no-op for both
    {
        kda::intra_problem p0 = in.problem;
        p0.T = 0;
        host_tensor e4(dtype::bf16, {1, 0, 2, 64}), eg(dtype::fp32, {1, 0, 4, 64}), eb(dtype::bf16, {1, 0, 4}), ed(dtype::fp32, {1, 0, 4, 16}),
            eo(dtype::bf16, {1, 0, 4, 64}), eo2(dtype::bf16, {1, 0, 4, 64});
        kda::intra_args a0;
        a0.q = e4.ref(), a0.k = e4.ref(), a0.g = eg.ref(), a0.beta = eb.ref(), a0.Aqk = eo.mref(), a0.Akk = eo2.mref();
        CHECK_NOTHROW(kda::chunk_kda_intra(cpu2, p0, a0));
        a0.Akkd = ed.mref();
        CHECK_NOTHROW(kda::chunk_kda_intra(cpu2, p0, a0));
        kda::intra_diag_args d0;
        d0.q = e4.ref(), d0.k = e4.ref(), d0.g = eg.ref(), d0.beta = eb.ref(), d0.Aqk = eo.mref(), d0.Akkd = ed.mref();
        CHECK_NOTHROW(kda::chunk_kda_intra_diag(cpu2, p0, d0));
    }
}

TEST_CASE("bad input: chunk_local_cumsum names the argument and writes nothing", "[cpu][intra][bad-input]") {
    kda::cumsum_problem p = cumsum_problem_of(kda::gate_activation::kda, 1, 0, 64);
    ref::gate_options o;
    o.seed = 5;
    o.seqlens = {40, 60};
    const ref::gate_inputs in = ref::make_gate_inputs(p, dtype::bf16, o);
    host_tensor out = in.make_output(sentinel);
    const host_tensor out0 = out.clone();
    host_tensor cu_bad(dtype::i64, {3}), alog64(dtype::fp64, {3}), gcopy(dtype::fp32, {1, 100, 3, 40});
    struct bad {
        const char* what;
        const char* expect;
        std::function<void(kda::cumsum_problem&, kda::cumsum_args&)> mutate;
    };
    const std::vector<bad> cases = {
        {"g shape", "'g'", [](auto&, auto& a) { a.g.shape[3] = 32; }},
        {"g_out dtype", "'g_out'", [&](auto&, auto& a) { a.g_out.type = dtype::bf16; }},
        {"g_out overlaps g", "'g_out'", [&](auto&, auto& a) {
             // an fp32 g and an output on the same memory
             a.g = gcopy.ref();
             a.g_out = gcopy.mref();
         }},
        {"A_log missing (kda)", "'A_log'", [](auto&, auto& a) { a.A_log = {}; }},
        {"A_log dtype", "'A_log'", [&](auto&, auto& a) { a.A_log = alog64.ref(); }},
        {"A_log with activation none", "'A_log'", [](auto& pp, auto&) { pp.activation = kda::gate_activation::none; }},
        {"lower_bound = 0", "'lower_bound'", [](auto& pp, auto&) { pp.activation = kda::gate_activation::kda_lower_bound, pp.lower_bound = 0.0; }},
        {"lower_bound > 0", "'lower_bound'", [](auto& pp, auto&) { pp.activation = kda::gate_activation::kda_lower_bound, pp.lower_bound = 2.0; }},
        {"dt_bias shape", "'dt_bias'", [](auto&, auto& a) { a.dt_bias.shape[0] = 7; }},
        {"K = 0", "'K'", [](auto& pp, auto&) { pp.K = 0; }},
        {"BT = 0", "'BT'", [](auto& pp, auto&) { pp.BT = 0; }},
        {"scale inf", "'scale'", [](auto& pp, auto&) { pp.scale = INFINITY; }},
        {"B = 2 with cu_seqlens", "'B'", [](auto& pp, auto&) { pp.B = 2; }},
        {"cu_seqlens not from 0", "'cu_seqlens'", [&](auto&, auto& a) {
             auto* c = cu_bad.data<std::int64_t>();
             c[0] = 1, c[1] = 40, c[2] = 100;
             a.cu_seqlens = cu_bad.ref();
         }},
        {"cu_seqlens not ending at T", "'cu_seqlens'", [&](auto&, auto& a) {
             auto* c = cu_bad.data<std::int64_t>();
             c[0] = 0, c[1] = 40, c[2] = 90;
             a.cu_seqlens = cu_bad.ref();
         }},
    };
    for (const auto& bc : cases) {
        INFO("bad input: " << bc.what);
        kda::cumsum_problem pp = in.problem;
        kda::cumsum_args a = in.args(out);
        bc.mutate(pp, a);
        REQUIRE_THROWS_WITH(kda::chunk_local_cumsum(cpu2, pp, a), Catch::Contains(bc.expect) && Catch::Contains("kda::chunk_local_cumsum"));
        CHECK(same_bits(out, out0));
    }
    // T == 0 is a no-op
    kda::cumsum_problem p0 = in.problem;
    p0.T = 0;
    host_tensor e(dtype::bf16, {1, 0, 3, 40}), eo(dtype::fp32, {1, 0, 3, 40});
    kda::cumsum_args a0;
    a0.g = e.ref();
    a0.g_out = eo.mref();
    a0.A_log = in.A_log.ref();
    CHECK_NOTHROW(kda::chunk_local_cumsum(cpu2, p0, a0));
}
