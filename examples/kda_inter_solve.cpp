// kda-inter-solve: runs the inter-subchunk + solve step on a case file (safetensors) and writes the
// result (safetensors), so that PyTorch users can drive kda without a C++ build of their own.
//
//   kda-inter-solve --in CASE.safetensors --out RESULT.safetensors
//                   [--backend cpu|cuda|both] [--precision tf32|fp32] [--threads N] [--check]
//
// CASE holds q k g beta Akkd scale, optionally Aqk_diag (the starting Aqk; zeros when absent),
// cu_seqlens and chunk_indices, and the metadata BT (64), BC (16), safe_gate (false): the layout of
// the golden files (kda/io/case.hpp has the details). RESULT holds Aqk and Akk ([B, T, HV, BT], the
// dtype of q; Akk starts at zero) and the metadata backend, precision and milliseconds. With
// --backend both it holds the CPU's Aqk / Akk and the CUDA backend's Aqk_cuda / Akk_cuda, and the
// command prints their difference and both errors against the float64 reference; --check prints
// the errors for a single backend (and FLA's, when CASE also holds FLA's outputs Aqk and Akk).
//
// Exit status: 0 on success; 2 on any error (bad flags, a bad or inconsistent case file, a backend
// that is not available), with one line on stderr, and RESULT is not created (it is written to a
// temporary file and renamed only when everything succeeded).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>
#include <kda/reference.hpp>

#if KDA_WITH_CUDA_BRIDGE
#include "tools/cuda_bridge/cuda_bridge.hpp"  // kda::bridge: host wrapper of the CUDA backend (nvcc-compiled)
#endif

namespace {

constexpr int exit_bad_input = 2;

/// The outputs of one backend run.
struct outputs {
    kda::host_tensor Aqk, Akk;
    double ms = 0;
};

bool cuda_built() {
#if KDA_WITH_CUDA_BRIDGE
    return true;
#else
    return false;
#endif
}

bool cuda_present() {
#if KDA_WITH_CUDA_BRIDGE
    return kda::bridge::cuda_device_present();
#else
    return false;
#endif
}

outputs run_cpu(const kda::io::inter_solve_case& c, const kda::inter_solve_problem& p, int threads) {
    outputs o{c.initial_aqk(), c.initial_akk(), 0};
    kda::cpu_backend be;
    be.threads = threads;
    const auto t0 = std::chrono::steady_clock::now();
    kda::inter_solve(be, p, c.args(o.Aqk, o.Akk));
    o.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return o;
}

outputs run_cuda([[maybe_unused]] const kda::io::inter_solve_case& c, [[maybe_unused]] const kda::inter_solve_problem& p) {
    outputs o{c.initial_aqk(), c.initial_akk(), 0};
#if KDA_WITH_CUDA_BRIDGE
    o.ms = kda::bridge::cuda_inter_solve_host(p, c.args(o.Aqk, o.Akk));
#else
    KDA_CHECK(false, "--backend cuda: this kda-inter-solve was built without CUDA");
#endif
    return o;
}

/// Relative RMS of (x - y) over the masked entries, relative to the exact values (or to y when
/// none are given); the floor is that of rounding the exact values to x's dtype.
struct rel_error {
    double err = 0, floor = 0;
};
double value(const kda::host_tensor& t, std::size_t i) {
    kda::tensor_ref r = t.ref();
    r.rank = 1;
    r.shape[0] = t.numel();
    r.stride[0] = 1;
    return kda::reference::read(r, static_cast<std::int64_t>(i));
}
rel_error error_vs_exact(const kda::host_tensor& x, const std::vector<double>& exact, const std::vector<std::uint8_t>& mask) {
    double e2 = 0, f2 = 0, n2 = 0;
    for (std::size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) {
            const double v = value(x, i), r = kda::reference::round_to(x.type(), exact[i]);
            e2 += (v - exact[i]) * (v - exact[i]);
            f2 += (r - exact[i]) * (r - exact[i]);
            n2 += exact[i] * exact[i];
        }
    const double den = n2 > 0 ? n2 : 1.0;
    return {std::sqrt(e2 / den), std::sqrt(f2 / den)};
}
double rel_diff(const kda::host_tensor& x, const kda::host_tensor& y, const std::vector<std::uint8_t>& mask, double* max_abs) {
    double e2 = 0, n2 = 0, mx = 0;
    for (std::size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) {
            const double a = value(x, i), b = value(y, i);
            e2 += (a - b) * (a - b);
            n2 += b * b;
            mx = std::max(mx, std::abs(a - b));
        }
    *max_abs = mx;
    return n2 > 0 ? std::sqrt(e2 / n2) : std::sqrt(e2);
}

std::string sci(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

void print_errors(const std::string& who, const kda::host_tensor& Aqk, const kda::host_tensor& Akk, const kda::reference::result& ref) {
    const rel_error q = error_vs_exact(Aqk, ref.Aqk, ref.aqk_written), k = error_vs_exact(Akk, ref.Akk, ref.akk_written);
    std::cout << who << " vs float64: Aqk rel RMS " << sci(q.err) << " (floor " << sci(q.floor) << ", " << sci(q.floor > 0 ? q.err / q.floor : 0)
              << "x), Akk rel RMS " << sci(k.err) << " (floor " << sci(k.floor) << ", " << sci(k.floor > 0 ? k.err / k.floor : 0) << "x)\n";
}

/// FLA's outputs, when the case file holds them with the shape and dtype of ours.
bool has_fla_outputs(const kda::io::safetensors_file& f, const kda::host_tensor& like) {
    for (const char* nm : {"Aqk", "Akk"}) {
        const kda::host_tensor* t = f.find(nm);
        if (t == nullptr || t->shape() != like.shape() || t->type() != like.type()) return false;
    }
    return true;
}

/// One line for stderr, whatever the message holds.
std::string one_line(std::string s) {
    for (char& ch : s)
        if (ch == '\n' || ch == '\r') ch = ' ';
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Runs KDA's inter-subchunk + solve step (FLA's chunk_kda_fwd_kernel_inter_solve_fused) on a safetensors case file.",
                 "kda-inter-solve"};
    std::string in, out, backend, prec = "fp32";
    int threads = 0;
    bool check = false;
    app.add_option("--in", in, "case file: q k g beta Akkd scale [Aqk_diag cu_seqlens chunk_indices], metadata BT BC safe_gate")->required();
    app.add_option("--out", out, "result file: Aqk and Akk, metadata backend precision milliseconds")->required();
    app.add_option("--backend", backend, "cpu, cuda or both (default: cuda when a GPU is present, else cpu)")
        ->check(CLI::IsMember({"cpu", "cuda", "both"}));
    app.add_option("--precision", prec, "solve precision: tf32 (FLA's) or fp32 (default, the most accurate)")->check(CLI::IsMember({"tf32", "fp32"}));
    app.add_option("--threads", threads, "CPU worker threads (0: all hardware threads)")->check(CLI::NonNegativeNumber);
    app.add_flag("--check", check, "print the errors against the float64 reference (and FLA's, when the case holds FLA's Aqk and Akk)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help
        std::cerr << "kda-inter-solve: error: " << one_line(e.what()) << "\n";
        return exit_bad_input;
    }

    try {
        if (backend.empty()) backend = cuda_present() ? "cuda" : "cpu";
        if (backend != "cpu") {
            KDA_CHECK(cuda_built(), "--backend " << backend << ": this kda-inter-solve was built without CUDA (use --backend cpu)");
            KDA_CHECK(cuda_present(), "--backend " << backend << ": no CUDA device is present (use --backend cpu)");
        }
        const kda::io::safetensors_file file = kda::io::safetensors_file::load(in);
        const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(file, kda::io::detail::printable(in));
        kda::inter_solve_problem p = c.problem;
        p.solve_precision = prec == "tf32" ? kda::precision::tf32 : kda::precision::fp32;

        std::optional<outputs> cpu, cuda;
        if (backend == "cpu" || backend == "both") cpu = run_cpu(c, p, threads);
        if (backend == "cuda" || backend == "both") cuda = run_cuda(c, p);
        const outputs& primary = cpu ? *cpu : *cuda;

        std::map<std::string, kda::host_tensor> tensors;
        std::map<std::string, std::string> meta{{"backend", backend}, {"precision", prec}, {"milliseconds", std::to_string(primary.ms)}};
        tensors.emplace("Aqk", primary.Aqk.clone());
        tensors.emplace("Akk", primary.Akk.clone());
        if (cpu && cuda) {
            tensors.emplace("Aqk_cuda", cuda->Aqk.clone());
            tensors.emplace("Akk_cuda", cuda->Akk.clone());
            meta["milliseconds_cuda"] = std::to_string(cuda->ms);
        }

        std::cout << "kda-inter-solve: " << kda::name(c.q.type()) << " B=" << p.B << " T=" << p.T << " H=" << p.H << " HV=" << p.HV << " K=" << p.K
                  << " BT=" << p.BT << (p.safe_gate ? " safe_gate" : "") << (c.cu_seqlens.defined() ? " varlen" : "") << ", precision " << prec
                  << "\n";
        if (cpu) std::cout << "cpu:  " << cpu->ms << " ms\n";
        if (cuda) std::cout << "cuda: " << cuda->ms << " ms (kernel)\n";
        if ((check || (cpu && cuda)) && p.T > 0) {
            kda::host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
            const kda::reference::result ref = kda::reference::inter_solve(p, c.args(a0, k0));
            if (cpu) print_errors("cpu ", cpu->Aqk, cpu->Akk, ref);
            if (cuda) print_errors("cuda", cuda->Aqk, cuda->Akk, ref);
            if (cpu && cuda) {
                double mq = 0, mk = 0;
                const double dq = rel_diff(cuda->Aqk, cpu->Aqk, ref.aqk_written, &mq), dk = rel_diff(cuda->Akk, cpu->Akk, ref.akk_written, &mk);
                std::cout << "cuda vs cpu: Aqk rel RMS diff " << sci(dq) << " (max abs " << sci(mq) << "), Akk rel RMS diff " << sci(dk)
                          << " (max abs " << sci(mk) << ")\n";
            }
            if (check && has_fla_outputs(file, primary.Aqk)) print_errors("FLA ", file.at("Aqk"), file.at("Akk"), ref);
        }
        kda::io::safetensors_file::save(out, tensors, meta);
        std::cout << "wrote " << out << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "kda-inter-solve: error: " << one_line(e.what()) << "\n";
        return exit_bad_input;
    }
}
