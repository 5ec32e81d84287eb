// tests/cuda/test_cuda.cpp: CUDA-only checks beyond the conformance suite: CUDA against the CPU
// backend on identical inputs, bitwise repeatability, the tensor copy engine against per-thread
// copies (bit for bit, or against float64 where maps that join the heads group the K sums
// differently), the narrow staging paths, explicit BK
// instantiations, bad inputs that only a device backend has (host memory, missing host copies),
// graph capture, a compact case list for compute-sanitizer ([sanitize]) and
// outputs of more than 2^31 elements ([.large], run explicitly with "[large]").
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_bridge.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include "conformance.hpp"
#include "cuda/probe.hpp"
#include "cuda/runners.hpp"
#include "cuda/setup.hpp"
#include "support/catch.hpp"
#include "support/metrics.hpp"

namespace {

using kda::testing::make_problem;
using kda::testing::setup;

using kda::dtype;
using kda::host_tensor;
using kda::precision;
using kda::testing::sentinel;

/// A problem and its inputs, for the tests below.

/// A spread of shapes: tails, GVA, K not a multiple of the vector width, varlen with and without
/// chunk_indices (empty and length-1 sequences included; K = 60: 120-byte 16-bit rows), beta in fp32;
/// K = 255: 16-bit rows aligned to 2 bytes and fp32 rows aligned to 4, over 16 slices of 16.
std::vector<setup> spread(precision prec) {
    std::vector<setup> out;
    std::uint64_t seed = 300;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
        for (int BT : {32, 64})
            for (bool safe : {false, true}) {
                for (std::int64_t K : {1, 20, 64, 100, 255, 256}) {
                    setup s;
                    s.p = make_problem(2, 2 * BT + 19, 2, 4, K, BT, safe, prec);
                    s.X = X;
                    s.seed = ++seed;
                    out.push_back(s);
                }
                setup v;
                v.p = make_problem(1, 0, 1, 3, 48, BT, safe, prec);
                v.X = X;
                v.seqlens = {1, 70, 0, 33, 16, 129};
                v.with_ci = (seed % 2) == 0;
                v.beta_fp32 = X != dtype::fp32;
                v.seed = ++seed;
                out.push_back(v);
                v.with_ci = !v.with_ci;
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

/// Runs the CPU backend on fresh outputs.
void run_cpu(const kda::reference::inputs& in, host_tensor& Aqk, host_tensor& Akk) {
    kda::inter_solve(kda::cpu_backend{2}, in.problem, in.args(Aqk, Akk));
}

bool same_bytes(const host_tensor& a, const host_tensor& b) { return std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.nbytes())) == 0; }

/// Outputs of the step (written over sentinel-filled tensors) against the float64 reference: the
/// written entries within the runner's tolerance, every other entry untouched.
void check_float64(const kda::reference::inputs& in, const host_tensor& Aqk, const host_tensor& Akk) {
    host_tensor Aqk0 = in.make_output(sentinel), Akk0 = in.make_output(sentinel);
    const auto ref = kda::reference::inter_solve(in.problem, in.args(Aqk0, Akk0));
    const auto c = kda::testing::compare(ref, Aqk, Akk, Aqk0, Akk0);
    const kda::testing::cuda_runner run;
    const kda::dtype X = Aqk.type();
    INFO("against float64: Aqk err " << c.aqk.err << " floor " << c.aqk.floor << ", Akk err " << c.akk.err << " floor " << c.akk.floor);
    CHECK(c.aqk.count > 0);
    CHECK(c.untouched_changed == 0);
    CHECK(c.aqk.err <= run.tolerance(X, in.problem.solve_precision, c.aqk.floor));
    CHECK(c.akk.err <= run.tolerance(X, in.problem.solve_precision, c.akk.floor));
}

/// A view of t's data copied `shift` elements into `storage` (allocated here, one element-aligned
/// buffer): the same values, off their alignment.
kda::tensor_ref shifted(const host_tensor& t, host_tensor& storage, std::int64_t shift) {
    storage = host_tensor(t.type(), {t.numel() + shift});
    const std::int64_t off = shift * size_of(t.type());
    std::memcpy(static_cast<unsigned char*>(storage.raw()) + off, t.raw(), static_cast<std::size_t>(t.nbytes()));
    kda::tensor_ref r = t.ref();
    r.data = static_cast<const unsigned char*>(storage.raw()) + off;
    return r;
}

}  // namespace

TEST_CASE("cuda: matches the CPU backend on the same inputs", "[cuda][vs-cpu]") {
    for (precision prec : {precision::fp32, precision::tf32}) {
        double worst_fp32 = 0, worst_16 = 0;
        for (const setup& s : spread(prec)) {
            const auto in = s.make();
            host_tensor cq = in.make_output(sentinel), ck = in.make_output(sentinel);
            host_tensor gq = in.make_output(sentinel), gk = in.make_output(sentinel);
            run_cpu(in, cq, ck);
            kda::bridge::cuda_inter_solve_host(in.problem, in.args(gq, gk));
            host_tensor n0 = in.make_output(0), n1 = in.make_output(0);
            const auto ref = kda::reference::inter_solve(in.problem, in.args(n0, n1));
            const double dq = kda::testing::rel_rms(gq, cq, ref.aqk_written), dk = kda::testing::rel_rms(gk, ck, ref.akk_written);
            // both leave the same entries untouched
            const auto cmp = kda::testing::compare(ref, gq, gk, cq, ck);
            INFO(s.describe() << ": CUDA vs CPU relative RMS Aqk " << dq << " Akk " << dk);
            CHECK(cmp.untouched_changed == 0);
            // fp32 mode: both compute at fp32, so they differ by a few fp32 roundings (fp32 data) or
            // by rare one-ulp rounding flips (16-bit data); tf32 mode: by the tf32 error
            const double u = kda::testing::unit_roundoff(s.X);
            const double bound = prec == precision::tf32 ? 3e-3 : (s.X == dtype::fp32 ? 2e-6 : 0.1 * u);
            CHECK(dq <= bound);
            CHECK(dk <= bound);
            (s.X == dtype::fp32 ? worst_fp32 : worst_16) = std::max({s.X == dtype::fp32 ? worst_fp32 : worst_16, dq, dk});
        }
        std::printf("[cuda %s] CUDA vs CPU: worst relative RMS difference fp32 data %.3g, 16-bit data %.3g\n", std::string(name(prec)).c_str(),
                    worst_fp32, worst_16);
    }
}

TEST_CASE("cuda: repeated runs are bitwise identical", "[cuda][repeat]") {
    for (precision prec : {precision::fp32, precision::tf32})
        for (const setup& s : spread(prec)) {
            if (s.p.K != 100 && s.seqlens.empty()) continue;
            const auto in = s.make();
            host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel);
            kda::bridge::cuda_inter_solve_host(in.problem, in.args(q1, k1));
            for (int rep = 0; rep < 3; ++rep) {
                host_tensor q2 = in.make_output(sentinel), k2 = in.make_output(sentinel);
                kda::bridge::cuda_inter_solve_host(in.problem, in.args(q2, k2));
                INFO(s.describe() << " repetition " << rep);
                CHECK(same_bytes(q1, q2));
                CHECK(same_bytes(k1, k2));
            }
        }
}

TEST_CASE("cuda: the tensor copy engine and per-thread copies give the same bits", "[cuda][tma]") {
    // the spread's tails (rows past T, K tails, partial varlen chunks whose boxes read the next
    // sequence's rows), GVA, both BT and precisions: cuda_backend::use_tma on (where the layout
    // allows it; on devices without the engine both runs copy per thread) and off. Rows of a
    // 16-byte multiple: maps of rows, the same columns in each K slice as the per-thread copies, the
    // same bits. Other rows (K 20 and 100 of 16-bit data here) may take maps that join the heads,
    // whose slices start up to 7 columns before the head's first: the K sums are grouped
    // differently, so both runs are checked against float64 instead.
    int compared = 0;
    for (precision prec : {precision::fp32, precision::tf32})
        for (const setup& s : spread(prec)) {
            const auto in = s.make();
            host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel), q2 = in.make_output(sentinel), k2 = in.make_output(sentinel);
            kda::bridge::cuda_options without;
            without.use_tma = false;
            kda::bridge::cuda_inter_solve_host(in.problem, in.args(q1, k1));
            kda::bridge::cuda_inter_solve_host(in.problem, in.args(q2, k2), without);
            INFO(s.describe());
            if ((s.p.K * kda::size_of(s.X)) % 16 == 0) {
                CHECK(same_bytes(q1, q2));
                CHECK(same_bytes(k1, k2));
            } else {
                check_float64(in, q1, k1);
                check_float64(in, q2, k2);
            }
            ++compared;
        }
    CHECK(compared > 0);
}

TEST_CASE("cuda: which staging runs: tensor copies of rows or of joined heads, per-thread copies otherwise", "[cuda][tma]") {
    // bf16 K = 128 rows are 256 bytes: maps of rows where the device has the copy engine, 16-byte
    // copies per thread without it. K = 100, 37 and 255 rows (200, 74, 510 bytes) fit no map of
    // rows; maps that join the heads need 16-byte multiples only of the token strides: K = 100 with
    // 2 heads (400 bytes), K = 37 and 255 with 8 heads (592, 4080 bytes; fp32 g 1184, 8160), not
    // with 2 (148, 1020 bytes), nor K = 37 with 4 heads of q / k and 8 of g (GVA; 296-byte q / k
    // tokens). K = 37 with 8 heads of q / k and 16 of g (GVA; 592-byte q / k tokens): q and k
    // through joined maps, g by per-thread copies, since one shift per q / k head cannot start g's
    // boxes on 16-byte boundaries too (the inter-solve kernel; the fused kernel copies all three
    // per thread there). Per-thread copies, where they run: 8 bytes
    // for K = 100 (its fp32 g, 400-byte rows: 16), runs from aligned words for K = 37 and 255 (g: 4
    // bytes). Where both runs stage the same columns per slice (maps of rows, or per-thread copies
    // either way) use_tma = false gives the same bits; joined maps are checked against float64.
    // The same values one element off their alignment take runs from aligned words (no map) and
    // give use_tma = false's bits. [intra][tma]: the fused kernel.
    struct expected {
        std::int64_t K, H, HV;
        bool maps, joined, g_threads;
        int q, g;
    };
    const bool engine = kda::testing::probe::device_has_tensor_copies();
    for (const expected e : {expected{128, 2, 2, true, false, false, 16, 16}, expected{100, 2, 2, true, true, false, 8, 16},
                             expected{37, 2, 2, false, false, false, 2, 4}, expected{37, 8, 8, true, true, false, 2, 4},
                             expected{37, 4, 8, false, false, false, 2, 4}, expected{37, 8, 16, true, true, true, 2, 4},
                             expected{255, 2, 2, false, false, false, 2, 4},
                             expected{255, 8, 8, true, true, false, 2, 4}}) {
        setup s;
        s.p = make_problem(1, 200, e.H, e.HV, e.K, 64, false, precision::tf32);
        s.seed = 5;
        const auto in = s.make();
        host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel);
        INFO(s.describe());
        for (bool intra : {false, true}) {
            // the fused kernel has no instantiation with g per thread: it copies all three per thread there
            const bool taken = engine && !(intra && e.g_threads);
            const auto st = kda::testing::probe::staging_of(in.problem, in.args(q1, k1), intra);
            CHECK(st.engine == (taken && e.maps));
            CHECK(st.joined == (taken && e.joined));
            CHECK(st.g_threads == (taken && e.g_threads));
        }
        const auto widths = kda::testing::probe::per_thread_copy_widths(in.problem, in.args(q1, k1));
        CHECK(widths.q == e.q);
        CHECK(widths.k == e.q);
        CHECK(widths.g == e.g);
        host_tensor q2 = in.make_output(sentinel), k2 = in.make_output(sentinel);
        kda::bridge::cuda_options without;
        without.use_tma = false;
        kda::bridge::cuda_inter_solve_host(in.problem, in.args(q1, k1));
        kda::bridge::cuda_inter_solve_host(in.problem, in.args(q2, k2), without);
        if (engine && e.joined) {
            check_float64(in, q1, k1);
            check_float64(in, q2, k2);
        } else {
            CHECK(same_bytes(q1, q2));
            CHECK(same_bytes(k1, k2));
        }
        host_tensor sq, sk, q3 = in.make_output(sentinel), k3 = in.make_output(sentinel);
        kda::inter_solve_args a = in.args(q3, k3);
        a.q = shifted(in.q, sq, 1);
        a.k = shifted(in.k, sk, 1);
        const auto off = kda::testing::probe::per_thread_copy_widths(in.problem, a);
        CHECK(off.q == 2);
        CHECK(off.k == 2);
        CHECK_FALSE(kda::testing::probe::staging_of(in.problem, a, false).engine);
        kda::bridge::cuda_inter_solve_host(in.problem, a);
        CHECK(same_bytes(q2, q3));
        CHECK(same_bytes(k2, k3));
    }
}

TEST_CASE("cuda: maps that join the heads against float64", "[cuda][tma]") {
    // 16-bit rows aligned to 2 bytes (K 37, 255) or 8 (K 36, 100), fp32 rows to 4 (K 63, 255, 1),
    // 8 heads, so that every shift occurs; GVA with K = 100 (16-bit data: joined, shifts 0 and 4;
    // fp32: maps of rows), and GVA with K = 37 (fp32: 63), 8 q / k heads and 16 value heads (q and
    // k joined, g by per-thread copies); tails of T, partial varlen chunks, both BT and precisions,
    // safe gate and not. On a device with the copy engine these take joined maps (the staging test
    // above checks which for bf16); elsewhere per-thread copies: checked against float64 either way.
    std::uint64_t seed = 700;
    for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
        for (int BT : {32, 64})
            for (precision prec : {precision::tf32, precision::fp32})
                for (int shape = 0; shape < 5; ++shape) {
                    setup s;
                    const bool safe = (shape + BT / 32) % 2 == 0;
                    switch (shape) {
                        case 0: s.p = make_problem(2, BT + 23, 8, 8, X == dtype::fp32 ? 63 : 37, BT, safe, prec); break;
                        case 1: s.p = make_problem(1, 2 * BT + 3, 8, 8, 255, BT, safe, prec); break;
                        case 2: s.p = make_problem(1, 0, 4, 8, 100, BT, safe, prec); break;
                        case 4: s.p = make_problem(2, BT + 23, 8, 16, X == dtype::fp32 ? 63 : 37, BT, safe, prec); break;
                        default: s.p = make_problem(1, 0, 8, 8, X == dtype::fp32 ? 1 : 36, BT, safe, prec); break;
                    }
                    s.X = X;
                    if (shape == 2 || shape == 3) s.seqlens = {5, BT + 7, 1, 2 * BT};
                    s.seed = ++seed;
                    INFO(s.describe());
                    const auto in = s.make();
                    host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel);
                    kda::bridge::cuda_inter_solve_host(in.problem, in.args(q1, k1));
                    check_float64(in, q1, k1);
                }
}

TEST_CASE("cuda: tensors aligned to their element but not to 16 bytes take the narrow paths", "[cuda][align]") {
    // shift 1: every tensor one element off 16 bytes (bf16 rows staged from aligned words, fp32 rows
    // by 4-byte copies, element-wise stores); shift 2: 4- / 8-byte copies, two-element stores
    for (dtype X : {dtype::bf16, dtype::fp32})
        for (bool safe : {false, true})
            for (std::int64_t shift : {1, 2}) {
                setup s;
                s.p = make_problem(2, 150, 2, 4, 64, 64, safe);
                s.X = X;
                s.seed = 77;
                const auto in = s.make();
                host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel);
                kda::bridge::cuda_inter_solve_host(in.problem, in.args(q1, k1));
                // the same data `shift` elements further into larger buffers
                host_tensor sq, sk, sg, sd, so1, so2;
                host_tensor q2 = in.make_output(sentinel), k2 = in.make_output(sentinel);
                kda::inter_solve_args a = in.args(q2, k2);
                a.q = shifted(in.q, sq, shift);
                a.k = shifted(in.k, sk, shift);
                a.g = shifted(in.g, sg, shift);
                a.Akkd = shifted(in.Akkd, sd, shift);
                kda::tensor_ref oq = shifted(q2, so1, shift), ok = shifted(k2, so2, shift);
                a.Aqk.data = const_cast<void*>(oq.data);
                a.Akk.data = const_cast<void*>(ok.data);
                kda::bridge::cuda_inter_solve_host(in.problem, a);
                std::memcpy(q2.raw(), oq.data, static_cast<std::size_t>(q2.nbytes()));
                std::memcpy(k2.raw(), ok.data, static_cast<std::size_t>(k2.nbytes()));
                INFO(name(X) << (safe ? " safe" : " notsafe") << ": misaligned by " << shift << " element(s) vs aligned");
                CHECK(same_bytes(q1, q2));
                CHECK(same_bytes(k1, k2));
            }
}

TEST_CASE("cuda: every BK through the policy template, masked K tails", "[cuda][policy]") {
    struct policy_runner : kda::testing::cuda_runner {
        int BK = 64;
        void operator()(const kda::inter_solve_problem& p, const kda::inter_solve_args& a) const { kda::testing::probe::run_policy(p, a, BK); }
    };
    for (dtype X : {dtype::bf16, dtype::fp32})
        for (std::int64_t K : {1, 16, 31, 33, 80, 100, 256})
            for (bool safe : {false, true})
                for (int BT : {32, 64})
                    for (int BK : {16, 32}) {
                        kda::testing::test_case tc;
                        tc.B = 2;
                        tc.T = 2 * BT + 7;
                        tc.H = 2;
                        tc.HV = 4;
                        tc.K = K;
                        tc.BT = BT;
                        tc.safe_gate = safe;
                        tc.X = X;
                        tc.seed = 900 + static_cast<std::uint64_t>(K);
                        policy_runner r;
                        r.BK = BK;
                        INFO("BK " << BK);
                        kda::testing::check_case(r, tc, precision::fp32);
                    }
}

TEST_CASE("cuda: host memory is refused, naming the argument", "[cuda][bad-input]") {
    setup s;
    s.p = make_problem(1, 0, 2, 4, 64, 64, false);
    s.seqlens = {40, 60};
    const auto in = s.make();
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const auto a = in.args(Aqk, Akk);
    CHECK(kda::testing::probe::run_with_host_tensor(in.problem, a, "none").empty());
    for (const char* nm : {"q", "k", "g", "beta", "Akkd", "Aqk", "Akk", "cu_seqlens", "chunk_indices"}) {
        const std::string msg = kda::testing::probe::run_with_host_tensor(in.problem, a, nm);
        INFO("host tensor " << nm << ": " << msg);
        CHECK_THAT(msg, Catch::Contains(std::string("'") + nm + "'") && Catch::Contains("host memory"));
    }
}

TEST_CASE("cuda: varlen without host copies of the index tensors is refused", "[cuda][bad-input]") {
    setup s;
    s.p = make_problem(1, 0, 2, 4, 64, 64, false);
    s.seqlens = {40, 60};
    const auto in = s.make();
    host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const auto a = in.args(Aqk, Akk);
    CHECK(kda::testing::probe::run_without_host_copies(in.problem, a, false, false).empty());
    CHECK_THAT(kda::testing::probe::run_without_host_copies(in.problem, a, true, false), Catch::Contains("'cu_seqlens_host'"));
    CHECK_THAT(kda::testing::probe::run_without_host_copies(in.problem, a, false, true), Catch::Contains("'chunk_indices_host'"));
    CHECK(kda::testing::probe::run_without_host_copies(in.problem, a, true, true).find("'cu_seqlens_host'") != std::string::npos);
}

TEST_CASE("cuda: a call captured into a CUDA graph computes the same outputs", "[cuda][graph]") {
    for (bool varlen : {false, true}) {
        setup s;
        s.p = make_problem(varlen ? 1 : 2, 150, 2, 4, 80, 64, false);
        if (varlen) s.seqlens = {70, 1, 90};
        s.with_ci = false;
        s.seed = 5;
        const auto in = s.make();
        host_tensor q1 = in.make_output(sentinel), k1 = in.make_output(sentinel), q2 = in.make_output(sentinel), k2 = in.make_output(sentinel);
        kda::bridge::cuda_inter_solve_host(in.problem, in.args(q1, k1));
        kda::testing::probe::run_in_graph(in.problem, in.args(q2, k2), 2);
        INFO((varlen ? "varlen" : "dense"));
        CHECK(same_bytes(q1, q2));
        CHECK(same_bytes(k1, k2));
    }
}

TEST_CASE("cuda: a compact case list for compute-sanitizer", "[cuda][sanitize]") {
    // every dtype, BT, mode and precision once, with tails, GVA and varlen (no chunk_indices);
    // tf32 with 8 heads: the 16-bit rows take maps that join the heads on a device with the copy engine
    std::uint64_t seed = 600;
    for (precision prec : {precision::fp32, precision::tf32})
        for (dtype X : {dtype::bf16, dtype::fp16, dtype::fp32})
            for (int BT : {32, 64})
                for (bool safe : {false, true}) {
                    kda::testing::test_case tc;
                    tc.B = 2;
                    tc.T = BT + 23;
                    tc.H = prec == precision::tf32 ? 8 : 1;
                    tc.HV = prec == precision::tf32 ? 8 : 2;
                    tc.K = X == dtype::fp16 ? 37 : X == dtype::bf16 ? 36 : 80;  // 74-byte rows (runs from words), 72-byte (8-byte copies)
                    tc.BT = BT;
                    tc.safe_gate = safe;
                    tc.X = X;
                    tc.seed = ++seed;
                    if (safe && X == dtype::bf16) {
                        tc.B = 1;
                        tc.seqlens = {5, BT + 3, 0, 17};
                        tc.with_chunk_indices = BT == 32;
                    }
                    if (prec == precision::fp32)
                        kda::testing::check_case(kda::testing::cuda_runner{}, tc, prec);
                    else
                        kda::testing::check_case(kda::testing::cuda_tf32_runner{}, tc, prec);
                }
}

// ---------------------------------------------------------------------------------------------
// Outputs of more than 2^31 elements: B = 1, T = 2^21 + 3 2^16 + 37, HV = 16, BT = 64, K = 16
// (Aqk and Akk hold 2.35e9 entries each). Checked on sampled chunks, among them the ones past
// element 2^31 and the short last chunk, against the float64 reference and the CPU backend; and
// on every row, that the diagonal of Akk is 1 and the block above it untouched.

namespace {

std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
double unit(std::uint64_t x) { return static_cast<double>(mix(x) >> 11) * 0x1.0p-53; }

template <class F>
void parallel(std::int64_t n, const F& f) {
    const int nt = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
    std::vector<std::thread> pool;
    for (int t = 0; t < nt; ++t)
        pool.emplace_back([&, t] {
            for (std::int64_t i = t; i < n; i += nt) f(i);
        });
    for (auto& th : pool) th.join();
}

}  // namespace

TEST_CASE("cuda: outputs of more than 2^31 elements", "[cuda][.large]") {
    const std::int64_t T = (std::int64_t{1} << 21) + 3 * (std::int64_t{1} << 16) + 37, H = 4, HV = 16, K = 16, BT = 64;
    const kda::inter_solve_problem p = make_problem(1, T, H, HV, K, BT, false);
    REQUIRE(T * HV * BT > (std::int64_t{1} << 31));
    const dtype X = dtype::bf16;
    host_tensor q(X, {1, T, H, K}), k(X, {1, T, H, K}), g(dtype::fp32, {1, T, HV, K}), beta(X, {1, T, HV}), Akkd(dtype::fp32, {1, T, HV, 16});
    // inputs from a hash: normalised q/k rows, beta in (0.1, 0.9), chunk-local cumulative decays
    parallel(T, [&](std::int64_t t) {
        for (std::int64_t h = 0; h < H; ++h)
            for (auto* x : {&q, &k}) {
                double v[16], nrm = 0;
                for (std::int64_t c = 0; c < K; ++c) {
                    v[c] = unit((((t * H + h) * K + c) << 1) + (x == &q)) - 0.5;
                    nrm += v[c] * v[c];
                }
                for (std::int64_t c = 0; c < K; ++c) kda::reference::store(*x, (t * H + h) * K + c, v[c] / std::sqrt(nrm + 1e-12));
            }
        for (std::int64_t hv = 0; hv < HV; ++hv) kda::reference::store(beta, t * HV + hv, 0.1 + 0.8 * unit(0x5eed0000000ull + t * HV + hv));
    });
    // chunk by chunk (cache-friendly): g[t] = -sum of 0.3 U(0, 1) decays since the chunk's start
    parallel((T + BT - 1) / BT, [&](std::int64_t c) {
        float* gp = g.data<float>();
        double acc[16 * 16] = {};
        for (std::int64_t t = c * BT; t < std::min(T, (c + 1) * BT); ++t)
            for (std::int64_t i = 0; i < HV * K; ++i) {
                acc[i] -= 0.3 * unit(0x7777000000000ull + t * HV * K + i);
                gp[t * HV * K + i] = static_cast<float>(acc[i]);
            }
    });
    // sampled chunks: the first, one in the middle, the two around element 2^31, the last full one
    // and the short last one; a varlen sub-problem holds their rows for the reference and the CPU
    const std::int64_t NT = (T + BT - 1) / BT, boundary = ((std::int64_t{1} << 31) / (HV * BT)) / BT;
    const std::vector<std::int64_t> chunks = {0, NT / 2, boundary - 1, boundary, boundary + 1, NT - 2, NT - 1};
    kda::inter_solve_problem sp = p;
    std::vector<std::int64_t> lens;
    for (auto c : chunks) lens.push_back(std::min(BT, T - c * BT));
    sp.T = 0;
    for (auto l : lens) sp.T += l;
    host_tensor sq(X, {1, sp.T, H, K}), sk(X, {1, sp.T, H, K}), sg(dtype::fp32, {1, sp.T, HV, K}), sb(X, {1, sp.T, HV});
    host_tensor cu(dtype::i64, {static_cast<std::int64_t>(chunks.size()) + 1});
    auto copy_rows = [](host_tensor& dst, std::int64_t drow, const host_tensor& src, std::int64_t srow, std::int64_t rows) {
        const std::int64_t w = dst.nbytes() / dst.shape()[1];
        std::memcpy(static_cast<unsigned char*>(dst.raw()) + drow * w, static_cast<const unsigned char*>(src.raw()) + srow * w,
                    static_cast<std::size_t>(rows * w));
    };
    {
        std::int64_t off = 0;
        cu.data<std::int64_t>()[0] = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
            for (auto [d, s] : {std::pair<host_tensor*, const host_tensor*>{&sq, &q}, {&sk, &k}, {&sg, &g}, {&sb, &beta}})
                copy_rows(*d, off, *s, chunks[i] * BT, lens[i]);
            off += lens[i];
            cu.data<std::int64_t>()[i + 1] = off;
        }
    }
    kda::inter_solve_args sa;
    sa.q = sq.ref(), sa.k = sk.ref(), sa.g = sg.ref(), sa.beta = sb.ref(), sa.cu_seqlens = cu.ref();
    const host_tensor sd = kda::reference::make_akkd(sp, sa);
    {
        std::int64_t off = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
            copy_rows(Akkd, chunks[i] * BT, sd, off, lens[i]);
            off += lens[i];
        }
    }
    sa.Akkd = sd.ref();

    // the big run
    host_tensor Aqk(X, {1, T, HV, BT}), Akk(X, {1, T, HV, BT});
    const std::uint16_t sbits = kda::cpu::from_acc<kda::bf16_t>(static_cast<float>(sentinel)).bits;
    std::fill_n(static_cast<std::uint16_t*>(Aqk.raw()), Aqk.numel(), sbits);
    std::fill_n(static_cast<std::uint16_t*>(Akk.raw()), Akk.numel(), sbits);
    kda::inter_solve_args a;
    a.q = q.ref(), a.k = k.ref(), a.g = g.ref(), a.beta = beta.ref(), a.Akkd = Akkd.ref(), a.Aqk = Aqk.mref(), a.Akk = Akk.mref();
    const double ms = kda::bridge::cuda_inter_solve_host(p, a);
    std::printf("[cuda large] T %lld HV %lld: %lld output entries per tensor, kernel %.3f ms\n", static_cast<long long>(T),
                static_cast<long long>(HV), static_cast<long long>(Aqk.numel()), ms);

    // every row: Akk's diagonal entry is 1, the entry right of the diagonal block untouched
    std::atomic<std::int64_t> bad_diag{0}, bad_upper{0};
    const auto* akk = static_cast<const std::uint16_t*>(Akk.raw());
    const std::uint16_t one = kda::cpu::from_acc<kda::bf16_t>(1.0f).bits;
    parallel(T, [&](std::int64_t t) {
        const std::int64_t i = t % BT, right = (i / 16 + 1) * 16;
        for (std::int64_t hv = 0; hv < HV; ++hv) {
            const std::int64_t row = (t * HV + hv) * BT;
            if (akk[row + i] != one) bad_diag++;
            if (right < BT && akk[row + right] != sbits) bad_upper++;
        }
    });
    CHECK(bad_diag == 0);
    CHECK(bad_upper == 0);

    // sampled chunks against float64 and the CPU backend
    host_tensor rq(X, {1, sp.T, HV, BT}), rk(X, {1, sp.T, HV, BT}), cq(X, {1, sp.T, HV, BT}), ck(X, {1, sp.T, HV, BT});
    {
        std::int64_t off = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
            copy_rows(rq, off, Aqk, chunks[i] * BT, lens[i]);
            copy_rows(rk, off, Akk, chunks[i] * BT, lens[i]);
            off += lens[i];
        }
    }
    for (std::int64_t i = 0; i < cq.numel(); ++i) {
        cq.data<kda::bf16_t>()[i].bits = sbits;
        ck.data<kda::bf16_t>()[i].bits = sbits;
    }
    const host_tensor cq0 = cq.clone(), ck0 = ck.clone();
    sa.Aqk = cq.mref(), sa.Akk = ck.mref();
    kda::inter_solve(kda::cpu_backend{0}, sp, sa);
    const auto ref = kda::reference::inter_solve(sp, sa);
    const auto gpu = kda::testing::compare(ref, rq, rk, cq0, ck0);
    const auto cpu = kda::testing::compare(ref, cq, ck, cq0, ck0);
    INFO("GPU Aqk err " << gpu.aqk.err << " floor " << gpu.aqk.floor << ", Akk err " << gpu.akk.err << " floor " << gpu.akk.floor
                        << "; first untouched entry changed: " << gpu.first_untouched);
    CHECK(gpu.untouched_changed == 0);
    CHECK(gpu.aqk.err <= kda::testing::full_precision_tolerance(X, gpu.aqk.floor));
    CHECK(gpu.akk.err <= kda::testing::full_precision_tolerance(X, gpu.akk.floor));
    CHECK(cpu.aqk.err <= kda::testing::full_precision_tolerance(X, cpu.aqk.floor));
    CHECK(kda::testing::rel_rms(rq, cq, ref.aqk_written) <= 0.1 * kda::testing::unit_roundoff(X));
    CHECK(kda::testing::rel_rms(rk, ck, ref.akk_written) <= 0.1 * kda::testing::unit_roundoff(X));
    std::printf("[cuda large] sampled chunks: Aqk err %.3g (%.4f x floor), Akk err %.3g (%.4f x floor)\n", gpu.aqk.err, gpu.aqk.ratio(),
                gpu.akk.err, gpu.akk.ratio());
}

// ---------------------------------------------------------------------------------------------
// Kernel time of a typical shape (a baseline for tuning, not a test of speed): B = 1, T = 16384,
// H = HV = 16, K = 128, BT = 64, bf16, both precisions. Prints the best of 5 kernel times (CUDA
// events, through the bridge) and the bandwidth of the fewest bytes the step must move.
TEST_CASE("cuda: kernel time of a typical shape", "[cuda][.timing]") {
    const kda::inter_solve_problem p0 = make_problem(1, 16384, 16, 16, 128, 64, false);
    kda::reference::generator_options opt;
    opt.seed = 3;
    const auto in = kda::reference::make_inputs(p0, dtype::bf16, opt);
    const double T = 16384, H = 16, HV = 16, K = 128, chunks = T / 64;
    const double bytes = 2 * T * H * K * 2 + T * HV * K * 4 + T * HV * 2 + T * HV * 16 * 4 + chunks * HV * (6 + 10) * 256 * 2;
    for (precision prec : {precision::fp32, precision::tf32}) {
        kda::inter_solve_problem p = in.problem;
        p.solve_precision = prec;
        host_tensor Aqk = in.make_output(0), Akk = in.make_output(0);
        double best = 1e300;
        for (int rep = 0; rep < 5; ++rep) best = std::min(best, kda::bridge::cuda_inter_solve_host(p, in.args(Aqk, Akk)));
        std::printf("[cuda timing] B1 T16384 H16 HV16 K128 BT64 bf16 %s: %.1f us, %.0f GB/s of %.0f MB (minimum bytes)\n",
                    std::string(name(prec)).c_str(), best * 1e3, bytes / (best * 1e-3) / 1e9, bytes / 1e6);
    }
}
