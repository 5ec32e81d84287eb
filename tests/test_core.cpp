// tests/test_core.cpp: host-only unit tests of the core (no backend): varlen mapping, tile
// configuration, layout checks, dtype tables, the CUDA tuning table's row choice, the reference's
// own consistency.
#include <kda/reference/host_tensor.hpp>
#include <kda/intra.hpp>
#include <kda/params.hpp>
#include <kda/reference/reference.hpp>
#include <kda/tile_config.hpp>
#include <kda/validate.hpp>
#include <kda/detail/blocks.hpp>
#include <kda/detail/merge.hpp>
#include <kda/varlen.hpp>
#include <kda/cuda/tuning.hpp>  // host-parsable: the CUDA backend's tuning table

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <random>

#include "support/catch.hpp"

// compile-time checks: the configuration traits
static_assert(kda::tile_config<64, 16, 64>::NC == 4 && kda::tile_config<64, 16, 64>::NPAIR == 6);
static_assert(kda::tile_config<32, 16, 32>::NC == 2 && kda::tile_config<32, 16, 32>::NPAIR == 1);
static_assert(kda::tile_config<64, 16, 64>::pair(3, 2) == 5 && kda::tile_config<64, 16, 64>::pair(2, 0) == 1);
// pair_of inverts pair for every chunk size
template <class Cfg>
constexpr bool pair_of_inverts_pair() {
    for (int si = 1; si < Cfg::NC; ++si)
        for (int sj = 0; sj < si; ++sj) {
            int a = -1, b = -1;
            Cfg::pair_of(Cfg::pair(si, sj), a, b);
            if (a != si || b != sj) return false;
        }
    return true;
}
static_assert(pair_of_inverts_pair<kda::tile_config<32, 16, 32>>() && pair_of_inverts_pair<kda::tile_config<64, 16, 64>>() &&
              pair_of_inverts_pair<kda::tile_config<128, 16, 64>>());
static_assert(kda::default_bk(16) == 32 && kda::default_bk(32) == 32 && kda::default_bk(33) == 64);
static_assert(kda::size_of(kda::dtype::bf16) == 2 && kda::size_of(kda::dtype::i64) == 8);
static_assert(std::is_trivially_copyable_v<kda::inter_solve_params<kda::bf16_t>>);

TEST_CASE("prepare_chunk_indices matches ceil(len / BT) per sequence, empty sequences included", "[core][varlen]") {
    const std::vector<std::int64_t> cu = {0, 5, 5, 69, 70, 134};
    const auto ci = kda::prepare_chunk_indices(cu, 64);
    const std::vector<std::int64_t> expect = {0, 0, 2, 0, 3, 0, 4, 0};
    CHECK(ci == expect);
    CHECK(kda::prepare_chunk_indices(std::vector<std::int64_t>{0}, 64).empty());
    CHECK_THROWS_WITH(kda::prepare_chunk_indices(std::vector<std::int64_t>{0, 5, 3}, 64), Catch::Contains("non-decreasing"));
}

TEST_CASE("varlen slots without chunk_indices cover exactly prepare_chunk_indices", "[core][varlen]") {
    std::mt19937_64 rng(9);
    std::uniform_int_distribution<std::int64_t> len(0, 300), count(1, 40);
    for (int trial = 0; trial < 300; ++trial) {
        for (int BT : {32, 64}) {
            std::vector<std::int64_t> cu{0};
            const std::int64_t n = count(rng);
            for (std::int64_t i = 0; i < n; ++i) cu.push_back(cu.back() + (trial % 5 == 0 ? len(rng) % 3 : len(rng)));
            const std::vector<std::int64_t> expect = kda::prepare_chunk_indices(cu, BT);
            std::vector<std::int64_t> got;
            const std::int64_t slots = kda::varlen_slots(cu.back(), n, BT);
            std::int64_t idle = 0;
            for (std::int64_t v = 0; v < slots; ++v) {
                const kda::chunk_coords c = kda::locate_varlen_slot(cu.data(), true, n, BT, v);
                if (c.n == 0) {
                    ++idle;
                    continue;
                }
                // the sequence is the one starting at c.bos whose chunk c.t0 / BT this is
                const auto it = std::upper_bound(cu.begin(), cu.end(), c.bos + c.t0) - 1;
                got.push_back(it - cu.begin());
                got.push_back(c.t0 / BT);
                CHECK(c.n == std::min<std::int64_t>(BT, *(it + 1) - c.bos - c.t0));
            }
            INFO("trial " << trial << " BT " << BT << " sequences " << n);
            CHECK(got == expect);
            CHECK(idle <= n + 1);
        }
    }
}

TEST_CASE("chunk_map covers every token exactly once", "[core][varlen]") {
    const std::vector<std::int64_t> cu = {0, 1, 17, 17, 100, 164};
    for (int BT : {32, 64}) {
        const auto ci = kda::prepare_chunk_indices(cu, BT);
        kda::chunk_map m;
        m.cu_seqlens = cu.data();
        m.chunk_indices = ci.data();
        m.num_chunks = static_cast<std::int64_t>(ci.size() / 2);
        m.BT = BT;
        std::vector<int> seen(164, 0);
        for (std::int64_t i = 0; i < m.num_chunks; ++i) {
            const auto c = m(i);
            REQUIRE(c.n >= 1);
            REQUIRE(c.n <= BT);
            for (std::int64_t r = 0; r < c.n; ++r) seen[static_cast<std::size_t>(c.bos + c.t0 + r)]++;
        }
        for (int s : seen) CHECK(s == 1);
    }
    kda::chunk_map dense;
    dense.T = 100;
    dense.BT = 64;
    dense.chunks_per_row = 2;
    dense.num_chunks = 6;
    CHECK(dense(3).b == 1);
    CHECK(dense(3).t0 == 64);
    CHECK(dense(3).n == 36);
}

TEST_CASE("detail::udiv: 32-bit division where both operands fit, 64-bit otherwise, same quotients", "[core][varlen]") {
    const std::int64_t big = std::int64_t{1} << 40;
    const std::int64_t as[] = {0, 1, 63, 64, 65, 4294967295LL, 4294967296LL, big + 12345, 9223372036854775807LL};
    const std::int64_t bs[] = {1, 3, 64, 4294967295LL, 4294967296LL, big};
    for (std::int64_t a : as)
        for (std::int64_t b : bs) {
            INFO(a << " / " << b);
            CHECK(kda::detail::udiv(a, b) == a / b);
        }
    // a dense grid past 2^32 chunks per batch row still maps chunk i to row i / chunks_per_row
    kda::chunk_map dense;
    dense.T = 64 * (std::int64_t{1} << 33);
    dense.BT = 64;
    dense.chunks_per_row = std::int64_t{1} << 33;
    dense.num_chunks = 2 * dense.chunks_per_row;
    CHECK(dense(dense.chunks_per_row + 5).b == 1);
    CHECK(dense(dense.chunks_per_row + 5).t0 == 5 * 64);
}

TEST_CASE("both gate splits reproduce the unsplit off-diagonal gate; every factor off the diagonal is <= 1", "[core][blocks]") {
    using kda::detail::gate_split;
    constexpr int BT = 64, BC = 16;
    std::mt19937_64 rng(21);
    std::uniform_real_distribution<double> decay(0.0, 1.5);
    for (int n : {64, 57, 37, 17}) {
        std::vector<double> g(BT, 0.0);  // one column of a decaying log2 gate, chunk-local cumsum
        for (int r = 0; r < n; ++r) g[r] = (r > 0 ? g[r - 1] : 0.0) - decay(rng);
        const int NS = (n + BC - 1) / BC;
        double worst = 0;
        for (gate_split split : {gate_split::next_first, gate_split::own_last})
            for (int si = 1; si < NS; ++si)
                for (int sj = 0; sj < si; ++sj) {
                    const double gn = g[kda::detail::first_row(si, BC)];
                    const double ref = g[kda::detail::split_row(split, sj, n, BC)];
                    const double f = kda::detail::pair_exponent(gn, ref);
                    CHECK(f <= 0);
                    for (int j = sj * BC; j < sj * BC + kda::detail::rows_in(sj, n, BC); ++j) {
                        const double up = kda::detail::up_exponent(ref, g[j]);
                        CHECK(up <= 0);
                        const double split_gate = std::exp2(up) * std::exp2(f), gate = std::exp2(gn - g[j]);
                        worst = std::max(worst, std::abs(split_gate - gate) / gate);
                    }
                }
        CHECK(worst < 1e-13);
        // the fused diagonal blocks (own_last): f(m, m) = 2^(gn_m - gl_m) >= 1, and the split
        // still gives 2^(g_i - g_j) for j <= i
        for (int m = 0; m < NS; ++m) {
            const double gn = g[kda::detail::first_row(m, BC)], gl = g[kda::detail::split_row(gate_split::own_last, m, n, BC)];
            CHECK(kda::detail::pair_exponent(gn, gl) >= 0);
            for (int i = m * BC; i < m * BC + kda::detail::rows_in(m, n, BC); ++i)
                for (int j = m * BC; j <= i; ++j) {
                    const double a = std::exp2(kda::detail::down_exponent(g[i], gn)) * std::exp2(kda::detail::up_exponent(gl, g[j])) *
                                     std::exp2(kda::detail::pair_exponent(gn, gl));
                    CHECK(std::abs(a - std::exp2(g[i] - g[j])) <= 1e-13 * std::exp2(g[i] - g[j]));
                }
        }
    }
    CHECK(kda::detail::rows_in(3, 57, 16) == 9);
    CHECK(kda::detail::rows_in(4, 57, 16) == 0);
    CHECK(kda::detail::last_row(3, 57, 16) == 56);
    CHECK(kda::detail::split_row(gate_split::next_first, 1, 57, 16) == 32);
    CHECK((kda::detail::aqk_keeps(3, 3) && !kda::detail::l_keeps(3, 3) && kda::detail::l_keeps(3, 2) && !kda::detail::aqk_keeps(2, 3)));
    CHECK((kda::detail::akkd_keeps(3, 3, true) && !kda::detail::akkd_keeps(3, 3, false)));
}

TEST_CASE("both merge orders give the blocks of (I + L)^-1", "[core][merge]") {
    using tile = Eigen::Matrix<double, 16, 16>;
    struct ops_t {
        static tile mm(const tile& a, const tile& b) { return a * b; }
        static void mm_acc(tile& c, const tile& a, const tile& b) { c += a * b; }
        static tile neg(const tile& a) { return -a; }
    } ops;
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-0.25, 0.25);
    for (int NS : {4, 3, 2}) {
        const int N = 16 * NS;
        Eigen::MatrixXd L = Eigen::MatrixXd::Zero(N, N);
        for (int i = 0; i < N; ++i)
            for (int j = 0; j < i; ++j) L(i, j) = u(rng);
        const Eigen::MatrixXd exact = (Eigen::MatrixXd::Identity(N, N) + L).inverse();
        auto block = [](const Eigen::MatrixXd& m, int i, int j) -> tile { return m.block(16 * i, 16 * j, 16, 16); };
        auto run = [&](bool two_by_two) {
            tile ai[4][4];
            for (int s = 0; s < NS; ++s) ai[s][s] = (tile::Identity() + block(L, s, s)).inverse();
            auto get_l = [&](int i, int j) { return block(L, i, j); };
            auto get_ai = [&](int i, int j) -> const tile& { return ai[i][j]; };
            auto set = [&](int i, int j, const tile& t) { ai[i][j] = t; };
            if (two_by_two)
                kda::detail::merge_2x2(ops, get_l, get_ai, set);
            else
                kda::detail::merge_by_distance(ops, NS, get_l, get_ai, set);
            double worst = 0;
            for (int i = 0; i < NS; ++i)
                for (int j = 0; j <= i; ++j) worst = std::max(worst, (ai[i][j] - block(exact, i, j)).cwiseAbs().maxCoeff());
            return worst;
        };
        INFO("NS " << NS);
        CHECK(run(false) < 1e-12);
        if (NS == 4) CHECK(run(true) < 1e-12);
    }
}

TEST_CASE("layout checks: self-overlap and byte ranges", "[core][validate]") {
    kda::host_tensor t(kda::dtype::fp32, {2, 3, 4, 5});
    auto r = t.mref();
    CHECK(kda::detail::non_self_overlapping(r));
    r.stride[2] = 2;  // rows of 5 at stride 2 overlap
    CHECK_FALSE(kda::detail::non_self_overlapping(r));
    CHECK_THROWS_WITH(kda::host_tensor(kda::dtype::fp64, {std::int64_t{1} << 40, std::int64_t{1} << 40}), Catch::Contains("overflows"));
}

TEST_CASE("can_implement names the argument, the expectation and the value", "[core][validate]") {
    kda::inter_solve_problem p;
    p.T = 10;
    p.K = 64;
    p.H = 2;
    p.HV = 5;
    kda::inter_solve_args a;
    const auto st = kda::can_implement(p, a);
    CHECK_FALSE(st.ok);
    CHECK(st.message == "kda::inter_solve: argument 'HV': expected a multiple of H = 2, got HV = 5");
    p.HV = 4;
    const auto st2 = kda::can_implement(p, a);
    CHECK(st2.message.find("argument 'q': is required but was not given (expected [B, T, H, K] = [1, 10, 2, 64])") != std::string::npos);
}

TEST_CASE("can_implement: valid calls of every step succeed; the caps decide fp64, alignment and host index copies", "[core][validate]") {
    kda::inter_solve_problem p;
    p.T = 70;
    p.H = 2;
    p.HV = 4;
    p.K = 24;
    kda::reference::generator_options opt;
    opt.seed = 3;
    opt.seqlens = {30, 40};
    // a CUDA-like backend: no fp64, 16-byte rows, index tensors in device memory
    kda::backend_caps gpu;
    gpu.name = "gpu-like";
    gpu.supports_fp64 = false;
    gpu.alignment = 16;
    gpu.index_tensors_on_host = false;
    for (const kda::dtype X : {kda::dtype::bf16, kda::dtype::fp64}) {
        INFO(kda::name(X));
        const auto in = kda::reference::make_inputs(p, X, opt);
        kda::host_tensor Aqk = in.make_output(0), Akk = in.make_output(0);
        kda::host_tensor Akkd(kda::acc_dtype(X), {1, in.problem.T, 4, 16});
        kda::inter_solve_args a = in.args(Aqk, Akk);
        const kda::intra_args ia = in.intra_args(Aqk, Akk);
        const kda::intra_diag_args da = in.diag_args(Aqk, Akkd);
        const kda::backend_caps cpu;  // the default caps: the CPU's
        CHECK(kda::can_implement(in.problem, a, cpu));
        CHECK(kda::can_implement(in.problem, a).message.empty());
        CHECK(kda::can_implement(in.problem, ia, cpu));
        CHECK(kda::can_implement(in.problem, da, cpu));
        if (X == kda::dtype::fp64) {
            const auto st = kda::can_implement(in.problem, a, gpu);
            CHECK(st.message == "kda::inter_solve: argument 'q': dtype fp64 is not supported by the gpu-like backend (expected bf16, fp16 or fp32)");
            CHECK_FALSE(kda::can_implement(in.problem, ia, gpu));
            continue;
        }
        // without host copies of the index tensors a device-side backend cannot validate them
        // (host bundles carry the tensors as their own host copies: drop them)
        a.cu_seqlens_host = {};
        a.chunk_indices_host = {};
        CHECK(kda::can_implement(in.problem, a, gpu).message.find("argument 'cu_seqlens_host'") != std::string::npos);
        a.cu_seqlens_host = a.cu_seqlens;
        a.chunk_indices_host = a.chunk_indices;
        CHECK(kda::can_implement(in.problem, a, gpu));
        // K = 24 bf16 rows are 48 bytes: a view that starts one element in is aligned for the CPU, not to 16 bytes
        kda::host_tensor q2(X, {1, in.problem.T, 2, 25});
        a.q = q2.ref();
        a.q.data = static_cast<const unsigned char*>(q2.raw()) + 2;
        a.q.shape[3] = 24;
        a.q.stride = {in.problem.T * 50, 50, 25, 1};
        CHECK(kda::can_implement(in.problem, a, cpu));
        CHECK(kda::can_implement(in.problem, a, gpu).message.find("argument 'q'") != std::string::npos);
    }

    kda::cumsum_problem cp;
    cp.HV = 2;
    cp.K = 8;
    cp.activation = kda::gate_activation::kda;
    kda::reference::gate_options go;
    go.seed = 4;
    go.seqlens = {5, 9};
    for (const kda::dtype X : {kda::dtype::fp32, kda::dtype::fp64}) {
        const auto gin = kda::reference::make_gate_inputs(cp, X, go);
        kda::host_tensor g = gin.make_output(0);
        kda::cumsum_args ca = gin.args(g);
        CHECK(kda::can_implement(gin.problem, ca, kda::backend_caps{}));
        if (X == kda::dtype::fp64) {
            CHECK(kda::can_implement(gin.problem, ca, gpu).message.find("dtype fp64 is not supported by the gpu-like backend") != std::string::npos);
            continue;
        }
        CHECK(kda::can_implement(gin.problem, ca, gpu).message.find("argument 'cu_seqlens_host'") != std::string::npos);
        ca.cu_seqlens_host = ca.cu_seqlens;
        CHECK(kda::can_implement(gin.problem, ca, gpu));
        ca.A_log = {};
        CHECK(kda::can_implement(gin.problem, ca, gpu).message.find("argument 'A_log'") != std::string::npos);
    }
}

TEST_CASE("reference: (I + L) Akk = I and Aqk causal structure in float64", "[core][reference]") {
    for (bool safe : {false, true}) {
        kda::inter_solve_problem p;
        p.B = 1;
        p.T = 150;
        p.H = 1;
        p.HV = 2;
        p.K = 32;
        p.safe_gate = safe;
        kda::reference::generator_options opt;
        opt.seed = 9;
        opt.seqlens = {70, 80};
        const auto in = kda::reference::make_inputs(p, kda::dtype::fp64, opt);
        kda::host_tensor none;
        const auto r = kda::reference::inter_solve(in.problem, in.args(none, none));
        double worst = 0;
        for (std::int64_t t = 0; t < in.problem.T; ++t) {
            const std::int64_t pos = r.chunk_pos[static_cast<std::size_t>(t)];
            for (std::int64_t hv = 0; hv < p.HV; ++hv)
                for (std::int64_t j = 0; j <= pos; ++j) {
                    double s = 0;
                    for (std::int64_t m = j; m <= pos; ++m)
                        s += r.Akk[static_cast<std::size_t>(r.index(0, t, hv, m))] * r.IL[static_cast<std::size_t>(r.index(0, t - (pos - m), hv, j))];
                    worst = std::max(worst, std::abs(s - (j == pos ? 1.0 : 0.0)));
                }
        }
        CHECK(worst < 1e-12);
        // decaying gates and normalised keys keep the inverse in [-1, 1]
        for (std::size_t i = 0; i < r.Akk.size(); ++i)
            if (r.akk_written[i]) REQUIRE(std::abs(r.Akk[i]) <= 1.0 + 1e-12);
    }
}

TEST_CASE("CUDA tuning table: the newest row arch not above the target, then the row of the chunk size over the any-size row", "[core][tuning]") {
    using namespace kda::cuda::tuning;
    for (kernel_step s : {kernel_step::inter_solve, kernel_step::fused_intra})
        for (kda::precision p : {kda::precision::tf32, kda::precision::fp32})
            for (int bt : {32, 64})
                for (int arch : {80, 86, 90, 100}) {
                    CAPTURE(static_cast<int>(s), static_cast<int>(p), bt, arch);
                    const kernel_choice& c = choice(s, p, bt, arch);
                    REQUIRE(c.step == s);
                    REQUIRE(c.solve_precision == p);
                    CHECK(c.arch <= arch);
                    CHECK((c.bt == 0 || c.bt == bt));
                    // no row it passed over was eligible and better
                    for (const kernel_choice& o : table) {
                        if (o.step != s || o.solve_precision != p || o.arch > arch || (o.bt != 0 && o.bt != bt)) continue;
                        CHECK(o.arch <= c.arch);
                        if (o.arch == c.arch && o.bt == bt) CHECK(c.bt == bt);
                    }
                    // the host launches the sm_90 row's layout; every row shares the K slice (the default BK)
                    const kernel_choice& host = choice(s, p, bt, 90);
                    CHECK(c.k_slice == choice(s, p, 0, 90).k_slice);
                    CHECK(c.stages == host.stages);
                    CHECK(c.warps == host.warps);
                    CHECK((s == kernel_step::inter_solve || c.warps == 4));  // phase 6 (fused WY outputs) needs 4 warps
                    CHECK(c.min_blocks >= 1);
                }
    // the chunk-size-32 rows: more blocks per SM than the any-size rows (BT 32 halves the shared
    // memory of a block); chunk size 64 reads the any-size rows
    for (kernel_step s : {kernel_step::inter_solve, kernel_step::fused_intra})
        for (kda::precision p : {kda::precision::tf32, kda::precision::fp32}) {
            CHECK(choice(s, p, 32, 90).bt == 32);
            CHECK(choice(s, p, 64, 90).bt == 0);
            CHECK(choice(s, p, 32, 90).min_blocks > choice(s, p, 64, 90).min_blocks);
            CHECK(choice(s, p, 32, 80).arch == 80);
        }
}
