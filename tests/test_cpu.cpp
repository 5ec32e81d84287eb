// tests/test_cpu.cpp: the conformance suite for the CPU backend, plus CPU-only checks (explicit
// BK instantiations through the policy template, thread-count invariance, the 2^x kernel).
#include <kda/cpu/exp2.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include <cmath>
#include <limits>

#include "conformance.hpp"
#include "support/catch.hpp"

namespace {

/// The CPU backend as a conformance Runner: computes at fp32 (fp64 for fp64) in both precisions.
struct cpu_runner {
    int threads = 2;
    [[nodiscard]] std::string name() const { return "cpu"; }
    [[nodiscard]] bool supports(kda::dtype) const { return true; }
    [[nodiscard]] std::vector<kda::precision> precisions() const { return {kda::precision::fp32}; }
    void operator()(const kda::inter_solve_problem& p, const kda::inter_solve_args& a) const {
        kda::inter_solve(kda::cpu_backend{threads}, p, a);
    }
    [[nodiscard]] double tolerance(kda::dtype X, kda::precision, double floor) const {
        return kda::testing::full_precision_tolerance(X, floor);
    }
    [[nodiscard]] double compute_roundoff(kda::precision) const { return std::ldexp(1.0, -24); }
};

}  // namespace

KDA_CONFORMANCE_SUITE(cpu_runner, "[cpu]")
KDA_CONFORMANCE_FP64_GRID(cpu_runner, "[cpu]")

namespace {
template <int BT, int BK>
void check_policy_instantiation(kda::dtype X, std::int64_t K, bool safe) {
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
    struct policy_runner : cpu_runner {
        void operator()(const kda::inter_solve_problem& p, const kda::inter_solve_args& a) const {
            kda::chunk_kda_inter_solve<kda::cpu_backend, BT, 16, BK>::run(kda::cpu_backend{2}, p, a);
        }
    };
    kda::testing::check_case(policy_runner{}, tc, kda::precision::fp32);
}
}  // namespace

TEST_CASE("cpu: every BK through the policy template, masked K tails", "[cpu][policy]") {
    for (auto X : {kda::dtype::bf16, kda::dtype::fp32, kda::dtype::fp64})
        for (std::int64_t K : {1, 16, 31, 33, 80, 100, 256})
            for (bool safe : {false, true}) {
                check_policy_instantiation<64, 32>(X, K, safe);
                check_policy_instantiation<64, 64>(X, K, safe);
                check_policy_instantiation<32, 32>(X, K, safe);
                check_policy_instantiation<32, 64>(X, K, safe);
            }
}

TEST_CASE("cpu: the policy template refuses a problem of another BT", "[cpu][policy]") {
    kda::inter_solve_problem p;
    p.BT = 32;
    p.K = 16;
    kda::inter_solve_args a;
    REQUIRE_THROWS_WITH((kda::chunk_kda_inter_solve<kda::cpu_backend, 64, 16, 64>::run(kda::cpu_backend{}, p, a)), Catch::Contains("'BT'"));
}

TEST_CASE("cpu: results do not depend on the thread count", "[cpu][threads]") {
    kda::inter_solve_problem p;
    p.B = 2;
    p.T = 333;
    p.H = 2;
    p.HV = 6;
    p.K = 128;
    p.scale = 0.1;
    kda::reference::generator_options opt;
    opt.seed = 5;
    const auto in = kda::reference::make_inputs(p, kda::dtype::bf16, opt);
    auto q1 = in.make_output(0), k1 = in.make_output(0), q2 = in.make_output(0), k2 = in.make_output(0);
    kda::inter_solve(kda::cpu_backend{1}, in.problem, in.args(q1, k1));
    kda::inter_solve(kda::cpu_backend{5}, in.problem, in.args(q2, k2));
    kda::inter_solve(kda::cpu_backend{0}, in.problem, in.args(q2, k2));
    CHECK(std::memcmp(q1.raw(), q2.raw(), static_cast<std::size_t>(q1.nbytes())) == 0);
    CHECK(std::memcmp(k1.raw(), k2.raw(), static_cast<std::size_t>(k1.nbytes())) == 0);
    REQUIRE_THROWS_WITH(kda::inter_solve(kda::cpu_backend{-1}, in.problem, in.args(q2, k2)), Catch::Contains("'threads'"));
}

TEST_CASE("cpu: the 2^x kernel is within 1.25 ulp, exact on integers, and keeps its range rules", "[cpu][exp2]") {
    // about one ulp either way: 0.86 with fused multiply-adds, 1.15 without (cpu/exp2.hpp)
    using arr = Eigen::Array<float, Eigen::Dynamic, 1>;
    constexpr int n = 1 << 20;
    arr x(n);
    for (int i = 0; i < n; ++i) x[i] = -126.0f + 253.0f * (static_cast<float>(i) + 0.5f) / n;  // normal results only
    const arr y = kda::cpu::exp2_accurate(x);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
        const double exact = std::exp2(static_cast<double>(x[i]));
        const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
        worst = std::max(worst, std::abs(static_cast<double>(y[i]) - exact) / ulp);
    }
    INFO("worst error " << worst << " ulp over " << n << " arguments in [-126, 127]");
    CHECK(worst <= 1.25);

    arr ints(149 + 128);
    for (int e = -149; e <= 127; ++e) ints[e + 149] = static_cast<float>(e);  // subnormal 2^-149 .. 2^127
    const arr pow2 = kda::cpu::exp2_accurate(ints);
    for (int e = -149; e <= 127; ++e) CHECK(pow2[e + 149] == std::ldexp(1.0f, e));

    arr edge(4);
    edge << std::numeric_limits<float>::quiet_NaN(), -300.0f, 300.0f, -0.0f;
    const arr r = kda::cpu::exp2_accurate(edge);
    CHECK(std::isnan(r[0]));
    CHECK(r[1] == 0.0f);
    CHECK(std::isinf(r[2]));
    CHECK(r[3] == 1.0f);
}
