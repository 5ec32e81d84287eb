// tests/io/test_golden.cpp: the golden cases of FLA (tests/data/fla, produced by FLA's Triton
// kernels on an H200). For each case, the CPU backend runs on the file's inputs (Aqk starts as
// Aqk_diag, Akk as zeros) and is compared, on exactly the entries the step writes,
//   - with the float64 reference: bf16 / fp16 within 1.05x the rounding floor, fp32 within 64x
//     (tests/support/bounds.hpp);
//   - FLA's outputs with the same reference: FLA's own error as measured once (listed in
//     tests/data/fla/README.md and below), which pins the data and the reference; the difference
//     between ours and FLA's is printed.
// Entries the step must not write keep their starting values, bit for bit.
#include <cstdio>
#include <string>
#include <vector>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include "io/io_support.hpp"
#include "support/catch.hpp"
#include "support/metrics.hpp"

namespace {

struct golden_case {
    const char* name;
    double fla_aqk, fla_akk;  // FLA's relative RMS error against float64 (README.md)
};

// FLA's own error per case, from `kda-inter-solve --in CASE --out /tmp/r.safetensors --backend cpu --check`.
const std::vector<golden_case> golden_cases = {
    {"basic_tail", 1.843e-3, 2.435e-4}, {"gva", 1.832e-3, 3.440e-4},  {"varlen", 1.831e-3, 2.393e-4},
    {"k80", 1.858e-3, 3.063e-4},        {"bt32", 1.747e-3, 2.148e-4}, {"safe_gate", 2.049e-3, 6.329e-5},
    {"fp16", 7.585e-4, 1.222e-4},       {"fp32", 7.647e-4, 1.235e-4}, {"fp32_ieee", 7.647e-4, 6.555e-5},
};

/// sqrt(sum (a - b)^2 / sum exact^2) over the masked entries.
double diff_rel_exact(const kda::host_tensor& a, const kda::host_tensor& b, const std::vector<double>& exact, const std::vector<std::uint8_t>& mask) {
    const kda::tensor_ref x = kda::testing::flat(a), y = kda::testing::flat(b);
    double e2 = 0, n2 = 0;
    for (std::size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) {
            const double d = kda::reference::read(x, static_cast<std::int64_t>(i)) - kda::reference::read(y, static_cast<std::int64_t>(i));
            e2 += d * d;
            n2 += exact[i] * exact[i];
        }
    return std::sqrt(e2 / n2);
}

}  // namespace

TEST_CASE("golden FLA cases: CPU backend against float64 and against FLA", "[golden]") {
    const golden_case gc = GENERATE(from_range(golden_cases));
    INFO("case " << gc.name);
    const std::string path = std::string(KDA_FLA_DATA_DIR) + "/" + gc.name + ".safetensors";
    const kda::io::safetensors_file f = kda::io::safetensors_file::load(path);
    const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(f, gc.name);
    const kda::inter_solve_problem& p = c.problem;
    const kda::dtype X = c.q.type();

    kda::host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
    kda::inter_solve(kda::cpu_backend{2}, p, c.args(Aqk, Akk));
    kda::host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
    const kda::reference::result ref = kda::reference::inter_solve(p, c.args(a0, k0));

    // ours against float64, and the entries the step must not write
    const auto ours = kda::testing::compare(ref, Aqk, Akk, a0, k0);
    const double tol_q = kda::testing::full_precision_tolerance(X, ours.aqk.floor), tol_k = kda::testing::full_precision_tolerance(X, ours.akk.floor);
    CHECK(ours.aqk.count > 0);
    CHECK(ours.akk.count > 0);
    CHECK(ours.aqk.err <= tol_q);
    CHECK(ours.akk.err <= tol_k);
    INFO("first changed entry that the step must not write: " << ours.first_untouched);
    CHECK(ours.untouched_changed == 0);

    // FLA against float64: as measured when the data was added (pins the data and the reference)
    const kda::host_tensor& fla_aqk = f.at("Aqk");
    const kda::host_tensor& fla_akk = f.at("Akk");
    const auto fla = kda::testing::compare(ref, fla_aqk, fla_akk, a0, k0);
    CHECK(fla.aqk.err == Approx(gc.fla_aqk).epsilon(0.02));
    CHECK(fla.akk.err == Approx(gc.fla_akk).epsilon(0.02));
    CHECK(fla.untouched_changed == 0);  // FLA, too, left the diagonal blocks of Aqk and the upper blocks of Akk alone

    // ours against FLA, printed only: by the triangle inequality it lies within ours.err + FLA's
    // error, both checked above, so no bound on it could fail on its own
    const double dq = diff_rel_exact(Aqk, fla_aqk, ref.Aqk, ref.aqk_written), dk = diff_rel_exact(Akk, fla_akk, ref.Akk, ref.akk_written);

    std::printf("golden %-10s %-4s  Aqk: ours %.3e floor %.3e (%.3fx) FLA %.3e  |  Akk: ours %.3e floor %.3e (%.3fx) FLA %.3e  |  ours vs FLA %.2e %.2e\n",
                gc.name, std::string(kda::name(X)).c_str(), ours.aqk.err, ours.aqk.floor, ours.aqk.ratio(), fla.aqk.err, ours.akk.err, ours.akk.floor,
                ours.akk.ratio(), fla.akk.err, dq, dk);
}
