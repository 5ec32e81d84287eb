// tests/cuda/test_golden.cpp: the golden FLA cases (tests/data/fla) on the CUDA backend, in both
// precisions. fp32: within the floor-based bounds of tests/support/metrics.hpp against the float64
// reference. tf32 (FLA's products): at least as accurate as FLA's own outputs in the file (within
// 5%), on Aqk and on Akk. Entries the step must not write keep their starting values.
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_bridge.hpp>
#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>
#include <kda/reference.hpp>

#include "support/catch.hpp"
#include "support/metrics.hpp"

TEST_CASE("cuda: golden FLA cases against float64 and against FLA", "[cuda][golden]") {
    const std::string name = GENERATE(as<std::string>{}, "basic_tail", "gva", "varlen", "k80", "bt32", "safe_gate", "fp16", "fp32", "fp32_ieee");
    INFO("case " << name);
    const std::string path = std::string(KDA_FLA_DATA_DIR) + "/" + name + ".safetensors";
    const kda::io::safetensors_file f = kda::io::safetensors_file::load(path);
    const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(f, name);
    const kda::dtype X = c.q.type();

    kda::host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
    const kda::reference::result ref = kda::reference::inter_solve(c.problem, c.args(a0, k0));
    const auto fla = kda::testing::compare(ref, f.at("Aqk"), f.at("Akk"), a0, k0);

    for (kda::precision prec : {kda::precision::fp32, kda::precision::tf32}) {
        kda::inter_solve_problem p = c.problem;
        p.solve_precision = prec;
        kda::host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
        kda::bridge::cuda_inter_solve_host(p, c.args(Aqk, Akk));
        const auto ours = kda::testing::compare(ref, Aqk, Akk, a0, k0);
        INFO(kda::name(prec) << ": Aqk " << ours.aqk.err << " (FLA " << fla.aqk.err << ", floor " << ours.aqk.floor << "), Akk " << ours.akk.err
                             << " (FLA " << fla.akk.err << ", floor " << ours.akk.floor << "); first untouched entry changed: " << ours.first_untouched);
        CHECK(ours.aqk.count > 0);
        CHECK(ours.akk.count > 0);
        CHECK(ours.untouched_changed == 0);
        if (prec == kda::precision::fp32) {
            CHECK(ours.aqk.err <= kda::testing::full_precision_tolerance(X, ours.aqk.floor));
            CHECK(ours.akk.err <= kda::testing::full_precision_tolerance(X, ours.akk.floor));
        } else {
            CHECK(ours.aqk.err <= 1.05 * fla.aqk.err);
            CHECK(ours.akk.err <= 1.05 * fla.akk.err);
        }
        std::printf("golden cuda %-10s %-4s %-4s  Aqk: ours %.3e floor %.3e (%.3fx) FLA %.3e (%.3fx)  |  Akk: ours %.3e floor %.3e (%.3fx) FLA %.3e (%.3fx)\n",
                    name.c_str(), std::string(kda::name(X)).c_str(), std::string(kda::name(prec)).c_str(), ours.aqk.err, ours.aqk.floor,
                    ours.aqk.ratio(), fla.aqk.err, fla.aqk.ratio(), ours.akk.err, ours.akk.floor, ours.akk.ratio(), fla.akk.err, fla.akk.ratio());
    }
}
