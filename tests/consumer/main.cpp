// tests/consumer/main.cpp: what a downstream program does with kda: include the umbrella header, run
// the CPU backend on a small generated problem, and check the result.
//
// Checks: the entries the step writes match the float64 reference (relative RMS error below 1e-6 on
// fp32 data, whose rounding floor is about 3e-8), Akk's diagonal is exactly 1, the entries the step
// does not own keep their sentinel, and a bad argument is refused with a kda::error that names it.
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

namespace {
int failures = 0;
void expect(bool ok, const std::string& what) {
    if (!ok) {
        std::fprintf(stderr, "FAILED: %s\n", what.c_str());
        ++failures;
    }
}
}  // namespace

int main() {
    // Short last chunk (200 = 3 x 64 + 8), GVA (HV = 2 H), K not a multiple of the K slice.
    kda::inter_solve_problem p;
    p.B = 2, p.T = 200, p.H = 2, p.HV = 4, p.K = 48, p.BT = 64, p.scale = 1.0 / std::sqrt(48.0);
    const auto in = kda::reference::make_inputs(p, kda::dtype::fp32);
    const float sentinel = 1234.5f;
    kda::host_tensor Aqk = in.make_output(sentinel), Akk = in.make_output(sentinel);
    const kda::inter_solve_args args = in.args(Aqk, Akk);

    kda::inter_solve(kda::cpu_backend{2}, p, args);

    const kda::reference::result ref = kda::reference::inter_solve(p, args);
    const float* aqk = Aqk.data<float>();
    const float* akk = Akk.data<float>();
    double e2 = 0, n2 = 0;
    std::int64_t untouched_changed = 0, written = 0;
    for (std::size_t i = 0; i < ref.Akk.size(); ++i) {
        for (auto [out, exact, mask] : {std::tuple{aqk, &ref.Aqk, &ref.aqk_written}, std::tuple{akk, &ref.Akk, &ref.akk_written}}) {
            if ((*mask)[i]) {
                e2 += std::pow(out[i] - (*exact)[i], 2), n2 += std::pow((*exact)[i], 2), ++written;
            } else if (out[i] != sentinel) {
                ++untouched_changed;
            }
        }
    }
    const double err = std::sqrt(e2 / n2);
    std::printf("kda consumer: %lld entries written, relative RMS error %.3e vs float64\n", static_cast<long long>(written), err);
    expect(written > 0, "the step wrote nothing");
    expect(err < 1e-6, "relative RMS error " + std::to_string(err) + " >= 1e-6 for fp32 data");
    expect(untouched_changed == 0, std::to_string(untouched_changed) + " entries the step does not own were changed");
    for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t t = 0; t < p.T; ++t)
            for (std::int64_t hv = 0; hv < p.HV; ++hv)
                expect(akk[ref.index(b, t, hv, t % p.BT)] == 1.0f, "Akk's diagonal is not exactly 1 at token " + std::to_string(t));

    // A bad argument: kda::error, naming it, and nothing written.
    kda::inter_solve_problem bad = p;
    bad.K = 300;
    try {
        kda::inter_solve(kda::cpu_backend{}, bad, args);
        expect(false, "K = 300 was accepted");
    } catch (const kda::error& e) {
        expect(std::string(e.what()).find("'K'") != std::string::npos, std::string("the message does not name K: ") + e.what());
    }
    std::printf("%s\n", failures == 0 ? "kda consumer: OK" : "kda consumer: FAILED");
    return failures == 0 ? 0 : 1;
}
