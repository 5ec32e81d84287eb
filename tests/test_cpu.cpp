// tests/test_cpu.cpp: the conformance suite for the CPU backend, plus CPU-only checks (explicit
// BK instantiations through the policy template, thread-count invariance).
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

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
