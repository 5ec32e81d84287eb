// examples/01_cpu_minimal.cpp: the quickstart. Builds a realistic problem (B1 T4096 H16 K128 bf16 by
// default) and runs, on the CPU backend, (1) the whole intra stage in one call, kda::chunk_kda_intra
// from (q, k, g, beta), and (2) the inter-solve step alone, kda::inter_solve (given the diagonal
// blocks). Each is checked against the float64 reference on exactly the entries it writes: relative
// RMS error next to the rounding floor of the dtype. With the CUDA bridge and a device present, the
// CUDA backend runs both on the same inputs too.
//
//   01_cpu_minimal [--T=4096] [--H=16] [--HV=H] [--K=128] [--BT=64] [--dtype=bf16|fp16|fp32|fp64]
//                  [--safe-gate] [--threads=0] [--seed=0]
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "../tests/support/bounds.hpp"  // kda::testing::full_precision_tolerance: the test suite's bounds

#ifdef KDA_WITH_CUDA_BRIDGE
#include "tools/cuda_bridge/cuda_bridge.hpp"  // kda::bridge: host wrapper of the CUDA backend (nvcc-compiled)
#endif

// Relative RMS error of `out` over the written entries, next to the floor (the exact answer rounded
// once to the output dtype). Returns false past the test suite's bound (tests/support/bounds.hpp):
// 1.05x the floor + 1e-6 for bf16 / fp16, 64x the floor for fp32, 1.5e-14 for fp64 (whose floor is 0).
static bool report(const char* what, const std::vector<double>& exact, const std::vector<std::uint8_t>& written,
                   const kda::host_tensor& out) {
    kda::tensor_ref flat = out.ref();
    flat.rank = 1, flat.stride[0] = 1;
    double e2 = 0, f2 = 0, n2 = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        if (!written[i]) continue;
        const double x = exact[i], r = kda::reference::round_to(out.type(), x);
        e2 += std::pow(kda::reference::read(flat, static_cast<std::int64_t>(i)) - x, 2);
        f2 += (r - x) * (r - x), n2 += x * x;
    }
    if (n2 == 0) return std::printf("  %-4s no nonzero entries written (T <= BC?)\n", what), e2 == 0;
    const double err = std::sqrt(e2 / n2), floor = std::sqrt(f2 / n2);
    std::printf("  %-4s rel. RMS error %.3e   floor %.3e", what, err, floor);
    if (floor > 0) std::printf("   (%.2fx)", err / floor);
    std::printf("\n");
    return err <= kda::testing::full_precision_tolerance(out.type(), floor);
}

int main(int argc, char** argv) try {
    std::map<std::string, std::string> opt;  // --name=value, or --flag
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i], kv = a.rfind("--", 0) == 0 ? a.substr(2) : a;
        const auto eq = kv.find('=');
        opt[kv.substr(0, eq)] = eq == std::string::npos ? "1" : kv.substr(eq + 1);
    }
    auto num = [&](const char* k, long long dflt) { return opt.count(k) ? std::stoll(opt[k]) : dflt; };
    const std::map<std::string, kda::dtype> dtypes{
        {"bf16", kda::dtype::bf16}, {"fp16", kda::dtype::fp16}, {"fp32", kda::dtype::fp32}, {"fp64", kda::dtype::fp64}};
    const std::string dt = opt.count("dtype") ? opt["dtype"] : "bf16";
    if (!dtypes.count(dt)) throw kda::error("01_cpu_minimal: --dtype must be bf16, fp16, fp32 or fp64, got '" + dt + "'");

    kda::inter_solve_problem p;
    p.B = 1, p.T = num("T", 4096), p.H = num("H", 16), p.HV = num("HV", p.H), p.K = num("K", 128);
    p.BT = static_cast<int>(num("BT", 64)), p.scale = 1.0 / std::sqrt(static_cast<double>(p.K));
    p.safe_gate = opt.count("safe-gate") > 0;
    kda::reference::generator_options gen;
    gen.seed = static_cast<std::uint64_t>(num("seed", 0));
    const auto in = kda::reference::make_inputs(p, dtypes.at(dt), gen);  // q, k, g, beta, Akkd
    kda::host_tensor Aqk = in.make_output(0.0), Akk = in.make_output(0.0);
    const kda::inter_solve_args args = in.args(Aqk, Akk);

    // The one call. Run it 3 times and keep the fastest (the first one also warms the caches).
    const kda::cpu_backend cpu{static_cast<int>(num("threads", 0))};
    double best_ms = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        kda::inter_solve(cpu, p, args);
        best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const auto t0 = std::chrono::steady_clock::now();
    const kda::reference::result ref = kda::reference::inter_solve(p, args);  // float64 oracle
    const double ref_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    // The whole intra stage in one call: (q, k, g, beta) -> Aqk (whole causal triangle) and Akk.
    kda::host_tensor iAqk = in.make_output(0.0), iAkk = in.make_output(0.0);
    kda::intra_args ia;
    ia.q = in.q.ref(), ia.k = in.k.ref(), ia.g = in.g.ref(), ia.beta = in.beta.ref();
    ia.Aqk = iAqk.mref(), ia.Akk = iAkk.mref();  // ia.Akkd: optional workspace on the CPU
    double intra_ms = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t1 = std::chrono::steady_clock::now();
        kda::chunk_kda_intra(cpu, p, ia);
        intra_ms = std::min(intra_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count());
    }
    const kda::reference::result iref = kda::reference::intra(p, ia);  // float64 oracle of the whole stage

    std::printf("kda quickstart: B=%lld T=%lld H=%lld HV=%lld K=%lld BT=%d %s%s\n", (long long)p.B, (long long)p.T,
                (long long)p.H, (long long)p.HV, (long long)p.K, p.BT, dt.c_str(), p.safe_gate ? " safe_gate" : "");
    std::printf("cpu, threads=%d, chunk_kda_intra (whole stage): %.2f ms per call (best of 3)\n", cpu.resolved_threads(), intra_ms);
    bool ok = report("Aqk", iref.Aqk, iref.aqk_written, iAqk);
    ok = report("Akk", iref.Akk, iref.akk_written, iAkk) && ok;
    std::printf("cpu, threads=%d, inter_solve (step alone): %.2f ms per call (best of 3); float64 reference: %.0f ms\n",
                cpu.resolved_threads(), best_ms, ref_ms);
    ok = report("Aqk", ref.Aqk, ref.aqk_written, Aqk) && ok;
    ok = report("Akk", ref.Akk, ref.akk_written, Akk) && ok;

#ifdef KDA_WITH_CUDA_BRIDGE
    if (dt == "fp64") {
        std::printf("cuda: skipped: fp64 is CPU only\n");
    } else if (!kda::bridge::cuda_device_present()) {
        std::printf("cuda: skipped: built with the CUDA backend, but no CUDA device is present\n");
    } else {
        kda::host_tensor jAqk = in.make_output(0.0), jAkk = in.make_output(0.0);
        kda::intra_args ca = ia;
        ca.Aqk = jAqk.mref(), ca.Akk = jAkk.mref();
        double intra_cuda_ms = 1e300;  // kernel time (CUDA events), best of 3; the bridge also copies in and out
        for (int rep = 0; rep < 3; ++rep) intra_cuda_ms = std::min(intra_cuda_ms, kda::bridge::cuda_intra_host(p, ca));
        std::printf("cuda, chunk_kda_intra: %.3f ms per call (kernels, best of 3)\n", intra_cuda_ms);
        ok = report("Aqk", iref.Aqk, iref.aqk_written, jAqk) && ok;
        ok = report("Akk", iref.Akk, iref.akk_written, jAkk) && ok;
        kda::host_tensor cAqk = in.make_output(0.0), cAkk = in.make_output(0.0);
        double cuda_ms = 1e300;
        for (int rep = 0; rep < 3; ++rep) cuda_ms = std::min(cuda_ms, kda::bridge::cuda_inter_solve_host(p, in.args(cAqk, cAkk)));
        std::printf("cuda, inter_solve: %.3f ms per call (kernel, best of 3)\n", cuda_ms);
        ok = report("Aqk", ref.Aqk, ref.aqk_written, cAqk) && ok;
        ok = report("Akk", ref.Akk, ref.akk_written, cAkk) && ok;
    }
#else
    std::printf("cuda: skipped: built without the CUDA backend (no nvcc found, or -DKDA_ENABLE_CUDA=OFF)\n");
#endif
    std::printf("%s\n", ok ? "check: every error is within the test suite's bound (bf16 / fp16: 1.05x the floor)"
                            : "check FAILED: an error exceeds the test suite's bound (bf16 / fp16: 1.05x the floor)");
    return ok ? 0 : 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
