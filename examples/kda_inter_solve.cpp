// kda-inter-solve: runs the inter-subchunk + solve step, or the whole intra stage, on a case file
// (safetensors) and writes the result (safetensors), so that PyTorch users can drive kda without a
// C++ build of their own.
//
//   kda-inter-solve --in CASE.safetensors --out RESULT.safetensors
//                   [--stage inter-solve|intra] [--gate cumulated|raw|kda|kda-lower-bound]
//                   [--lower-bound X] [--backend cpu|cuda|both] [--precision tf32|fp32]
//                   [--threads N] [--check] [--max-error-ratio R]
//
// --stage inter-solve (default): kda::inter_solve. CASE holds q k g beta Akkd scale, optionally
// Aqk_diag (the starting Aqk; zeros when absent), cu_seqlens and chunk_indices, and the metadata
// BT (64), BC (16), safe_gate (false): the layout of the golden files (kda/io/case.hpp has the
// details).
// --stage intra: kda::chunk_kda_intra, the whole intra stage from (q, k, g, beta): CASE holds
// q k g beta scale [cu_seqlens chunk_indices] and the same metadata; Akkd and Aqk_diag are not
// needed and ignored when present (Aqk starts at zero).
//
// --gate says what CASE's g holds (either stage):
//   cumulated (default)  FLA's chunk-local cumsum of the log-decays in log2 space, [B, T, HV, K]
//                        fp32 (fp64 for fp64 data): used as it is, as in the golden files.
//   raw                  per-token log-decays (natural log) [B, T, HV, K], bf16 / fp16 / fp32 (fp64
//                        for fp64 data): the command first runs kda::chunk_local_cumsum (activation
//                        none, scale 1 / ln 2) on the chosen backend. CASE must not hold A_log or
//                        dt_bias (they would be ignored: probably a missing --gate kda).
//   kda                  gate pre-activations; log-decay = -exp(A_log[hv]) softplus(g + dt_bias[hv, k]).
//                        A_log [HV] is required, dt_bias [HV * K] optional; both fp32 (fp64 for fp64
//                        data), from CASE.
//   kda-lower-bound      gate pre-activations; log-decay = X sigmoid(exp(A_log[hv]) (g + dt_bias)),
//                        X = --lower-bound (default -5, must be < 0); A_log and dt_bias optional.
// The cumsum runs on the chosen backend (with --backend both: on each, feeding its own stage).
//
// RESULT holds Aqk and Akk ([B, T, HV, BT], the dtype of q; both start at zero, except Aqk starts
// at Aqk_diag for the inter-solve stage) and the metadata stage, gate, backend, precision and
// milliseconds (the stage's call; milliseconds_gate: the cumsum's). With --backend both it holds
// the CPU's Aqk / Akk and the CUDA backend's Aqk_cuda / Akk_cuda, and the command prints their
// difference and both errors against the float64 reference (kda::reference::inter_solve or
// kda::reference::intra; with a gate other than cumulated its g is the float64 cumsum of the raw
// inputs); --check prints the errors for a single backend (and FLA's, when CASE also holds FLA's
// outputs Aqk and Akk, compared on the entries the stage writes).
//
// --check also holds each backend's Aqk and Akk to a bound on the relative RMS error: by default the
// test suite's (tests/support/bounds.hpp: for bf16 / fp16 data 1.05x the rounding floor, for fp32
// and fp64 data a multiple of the floor measured on the suite; FLA's tf32 products on the CUDA
// backend add their own term); --max-error-ratio R (implies --check) replaces it by R x the floor.
//
// Exit status: 0 on success; 1 when --check finds an error above its bound (RESULT is written, and
// one line per failed bound goes to stderr); 2 on any error (bad flags, a bad or inconsistent case
// file, a backend that is not available), with one line on stderr, and RESULT is not created (it is
// written to a temporary file and renamed only when everything succeeded).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include "../tests/support/bounds.hpp"  // kda::testing: the suite's error bounds, the default of --check

#if KDA_WITH_CUDA_BRIDGE
#include "tools/cuda_bridge/cuda_bridge.hpp"  // kda::bridge: host wrapper of the CUDA backend (nvcc-compiled)
#endif

namespace {

constexpr int exit_check_failed = 1;
constexpr int exit_bad_input = 2;

/// The outputs of one backend run.
struct outputs {
    kda::host_tensor Aqk, Akk;
    kda::host_tensor g;  // the cumulated gates of this backend's cumsum (undefined with --gate cumulated)
    double ms = 0, gate_ms = 0;
};

enum class stage { inter_solve, intra };

/// The gate cumsum that turns the file's g into the cumulated g (absent with --gate cumulated).
struct gate_step {
    kda::cumsum_problem problem;
    kda::host_tensor g_raw;                 // the file's g
    const kda::host_tensor* A_log = nullptr;    // from the file, or none
    const kda::host_tensor* dt_bias = nullptr;  // from the file, or none

    [[nodiscard]] kda::cumsum_args args(const kda::io::inter_solve_case& c, kda::host_tensor& g_out) const {
        kda::cumsum_args a;
        a.g = g_raw.ref();
        if (A_log) a.A_log = A_log->ref();
        if (dt_bias) a.dt_bias = dt_bias->ref();
        a.g_out = g_out.mref();
        a.cu_seqlens = c.cu_seqlens.ref();
        a.cu_seqlens_host = a.cu_seqlens;
        return a;
    }
};

bool cuda_built() {
#if KDA_WITH_CUDA_BRIDGE
    return true;
#else
    return false;
#endif
}

/// The number of CUDA devices (0 without a device or without CUDA in this build); -1 for an error
/// of the CUDA runtime (a broken or mismatched driver), described in `error`.
int cuda_devices(std::string& error) {
#if KDA_WITH_CUDA_BRIDGE
    return kda::bridge::cuda_device_count(error);
#else
    (void)error;
    return 0;
#endif
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The stage's arguments over the case's inputs, with `g` in place of the case's g when defined.
kda::inter_solve_args step_args(const kda::io::inter_solve_case& c, outputs& o) {
    kda::inter_solve_args a = c.args(o.Aqk, o.Akk);
    if (o.g.defined()) a.g = o.g.ref();
    return a;
}
kda::intra_args stage_args(const kda::io::inter_solve_case& c, outputs& o) {
    kda::intra_args a = c.intra_args(o.Aqk, o.Akk);
    if (o.g.defined()) a.g = o.g.ref();
    return a;
}

outputs run_cpu(const kda::io::inter_solve_case& c, const kda::inter_solve_problem& p, stage st, const std::optional<gate_step>& gate, int threads) {
    outputs o{c.initial_aqk(), c.initial_akk(), {}, 0, 0};
    kda::cpu_backend be;
    be.threads = threads;
    if (gate) {
        o.g = c.g.clone();  // the right dtype and shape; overwritten
        const auto t0 = std::chrono::steady_clock::now();
        kda::chunk_local_cumsum(be, gate->problem, gate->args(c, o.g));
        o.gate_ms = ms_since(t0);
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (st == stage::intra)
        kda::chunk_kda_intra(be, p, stage_args(c, o));
    else
        kda::inter_solve(be, p, step_args(c, o));
    o.ms = ms_since(t0);
    return o;
}

outputs run_cuda([[maybe_unused]] const kda::io::inter_solve_case& c, [[maybe_unused]] const kda::inter_solve_problem& p,
                 [[maybe_unused]] stage st, [[maybe_unused]] const std::optional<gate_step>& gate) {
    outputs o{c.initial_aqk(), c.initial_akk(), {}, 0, 0};
#if KDA_WITH_CUDA_BRIDGE
    if (gate) {
        o.g = c.g.clone();
        o.gate_ms = kda::bridge::cuda_cumsum_host(gate->problem, gate->args(c, o.g));
    }
    if (st == stage::intra)
        o.ms = kda::bridge::cuda_intra_host(p, stage_args(c, o));
    else
        o.ms = kda::bridge::cuda_inter_solve_host(p, step_args(c, o));
#else
    KDA_CHECK(false, "--backend cuda: this kda-inter-solve was built without CUDA");
#endif
    return o;
}

/// --gate other than cumulated: takes the file's g out of `f` and puts a zero placeholder of the
/// cumulated g's dtype (q's accumulator type) in its place, so that the case loader checks every
/// shape; the raw g and its dtype are checked once the case is loaded (gate_step_for).
std::optional<kda::host_tensor> take_raw_gate(kda::io::safetensors_file& f) {
    auto g = f.tensors.find("g");
    const kda::host_tensor* q = f.find("q");
    if (g == f.tensors.end() || q == nullptr || !kda::is_floating(q->type()) || !kda::is_floating(g->second.type())) return std::nullopt;
    kda::host_tensor raw = std::move(g->second);
    g->second = kda::host_tensor(kda::acc_dtype(q->type()), raw.shape());
    return raw;
}

/// --stage intra with --gate cumulated and a g that is not of the cumulated gates' dtype: most
/// likely per-token gates without --gate (the loader would only name the dtype).
void intra_gate_hint(const kda::io::safetensors_file& f, const std::string& source) {
    const kda::host_tensor* g = f.find("g");
    const kda::host_tensor* q = f.find("q");
    if (g == nullptr || q == nullptr || !kda::is_floating(g->type()) || !kda::is_floating(q->type())) return;
    const kda::dtype acc = kda::acc_dtype(q->type());
    KDA_CHECK(g->type() == acc, source << ": tensor 'g' has dtype " << kda::io::safetensors_name(g->type()) << ", but --gate cumulated (the default) "
                                       << "takes the chunk-local cumulated log2 gates in " << kda::io::safetensors_name(acc)
                                       << "; for per-token gates pass --gate raw, kda or kda-lower-bound");
}

/// The cumsum of --gate `gate` over the loaded case; every failure names the flag and the tensor.
gate_step gate_step_for(const std::string& gate, double lower_bound, kda::host_tensor g_raw, const kda::io::safetensors_file& f,
                        const kda::io::inter_solve_case& c) {
    const std::string where = c.source + ": --gate " + gate + ": ";
    gate_step s;
    const kda::inter_solve_problem& p = c.problem;
    s.problem.B = p.B;
    s.problem.T = p.T;
    s.problem.HV = p.HV;
    s.problem.K = p.K;
    s.problem.BT = p.BT;
    s.problem.scale = 1.0 / std::numbers::ln2;
    s.problem.activation = gate == "raw" ? kda::gate_activation::none : gate == "kda" ? kda::gate_activation::kda : kda::gate_activation::kda_lower_bound;
    s.problem.lower_bound = lower_bound;
    const kda::dtype acc = kda::acc_dtype(c.q.type());
    KDA_CHECK(kda::acc_dtype(g_raw.type()) == acc, where << "tensor 'g' has dtype " << kda::io::safetensors_name(g_raw.type()) << " but q has "
                                                       << kda::io::safetensors_name(c.q.type()) << " (g must be BF16, F16 or F32"
                                                       << (acc == kda::dtype::fp64 ? "; F64 data needs F64 g)" : ", F64 only for F64 data)"));
    s.g_raw = std::move(g_raw);
    const char* acc_name = acc == kda::dtype::fp64 ? "F64" : "F32";
    if (s.problem.activation == kda::gate_activation::none) {
        for (const char* nm : {"A_log", "dt_bias"})
            KDA_CHECK(!f.contains(nm), where << "the file holds tensor '" << nm << "', which only --gate kda or kda-lower-bound use "
                                             << "(raw g holds log-decays already)");
    } else {
        s.A_log = f.find("A_log");
        s.dt_bias = f.find("dt_bias");
        KDA_CHECK(s.A_log || s.problem.activation != kda::gate_activation::kda,
                  where << "tensor 'A_log' [HV] (" << acc_name << ") is missing: the kda activation needs it (only kda-lower-bound may go without)");
        if (s.A_log)
            KDA_CHECK(s.A_log->shape() == std::vector<std::int64_t>{p.HV} && s.A_log->type() == acc,
                      where << "tensor 'A_log': expected [" << p.HV << "] " << acc_name << " ([HV]), got " << kda::io::detail::fmt_extents(s.A_log->shape())
                            << " " << kda::io::safetensors_name(s.A_log->type()));
        if (s.dt_bias)
            KDA_CHECK(s.dt_bias->shape() == std::vector<std::int64_t>{p.HV * p.K} && s.dt_bias->type() == acc,
                      where << "tensor 'dt_bias': expected [" << p.HV * p.K << "] " << acc_name << " ([HV * K]), got "
                            << kda::io::detail::fmt_extents(s.dt_bias->shape()) << " " << kda::io::safetensors_name(s.dt_bias->type()));
    }
    kda::host_tensor g_out = c.g.clone();
    const kda::status st = kda::can_implement(s.problem, s.args(c, g_out), kda::cpu_backend::caps());
    KDA_CHECK(st, where << st.message);
    return s;
}

/// The float64 cumulated gates of `gate` (the reference's g), as an fp64 tensor.
kda::host_tensor exact_gates(const gate_step& gate, const kda::io::inter_solve_case& c) {
    kda::host_tensor dummy = c.g.clone();
    const std::vector<double> v = kda::reference::chunk_local_cumsum(gate.problem, gate.args(c, dummy));
    kda::host_tensor g(kda::dtype::fp64, c.g.shape());
    std::copy(v.begin(), v.end(), g.data<double>());
    return g;
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

/// The bound of --check on an error whose rounding floor is `floor`: R x floor with
/// --max-error-ratio R, else the suite's bound for the backend's arithmetic (`tf32`: the CUDA
/// backend's tf32 products; the CPU computes both precisions at full precision).
struct error_bound {
    std::optional<double> ratio;  // --max-error-ratio
    [[nodiscard]] double operator()(kda::dtype X, bool tf32, double floor) const {
        if (ratio) return *ratio * floor;
        return tf32 ? kda::testing::tf32_tolerance(floor) : kda::testing::full_precision_tolerance(X, floor);
    }
};

/// Prints one backend's errors; returns the failed bounds, one line each.
std::vector<std::string> print_errors(const std::string& who, const kda::host_tensor& Aqk, const kda::host_tensor& Akk, const kda::reference::result& ref,
                                      const std::optional<error_bound>& bound = std::nullopt, bool tf32 = false) {
    const rel_error q = error_vs_exact(Aqk, ref.Aqk, ref.aqk_written), k = error_vs_exact(Akk, ref.Akk, ref.akk_written);
    std::cout << who << " vs float64: Aqk rel RMS " << sci(q.err) << " (floor " << sci(q.floor) << ", " << sci(q.floor > 0 ? q.err / q.floor : 0)
              << "x), Akk rel RMS " << sci(k.err) << " (floor " << sci(k.floor) << ", " << sci(k.floor > 0 ? k.err / k.floor : 0) << "x)\n";
    std::vector<std::string> failed;
    if (!bound) return failed;
    for (const auto& [nm, e] : {std::pair<const char*, rel_error>{"Aqk", q}, {"Akk", k}}) {
        const double b = (*bound)(Aqk.type(), tf32, e.floor);
        if (!(e.err <= b))
            failed.push_back(who + " " + nm + " rel RMS error " + sci(e.err) + " exceeds the bound " + sci(b) + " (floor " + sci(e.floor) + ")");
    }
    return failed;
}

void print_gate_error(const std::string& who, const kda::host_tensor& g, const std::vector<double>& exact) {
    const rel_error e = error_vs_exact(g, exact, std::vector<std::uint8_t>(exact.size(), 1));
    std::cout << who << " gate cumsum vs float64: g rel RMS " << sci(e.err) << " (floor " << sci(e.floor) << ")\n";
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
    CLI::App app{"Runs KDA's inter-subchunk + solve step (FLA's chunk_kda_fwd_kernel_inter_solve_fused), or the whole intra stage "
                 "from (q, k, g, beta), on a safetensors case file.",
                 "kda-inter-solve"};
    std::string in, out, backend, prec = "fp32", stage_name = "inter-solve", gate = "cumulated";
    int threads = 0;
    double lower_bound = -5.0;
    bool check = false;
    double max_error_ratio = 0;
    app.add_option("--in", in,
                   "case file: q k g beta scale, Akkd [Aqk_diag] (inter-solve stage only), [cu_seqlens chunk_indices], "
                   "[A_log dt_bias] (--gate kda|kda-lower-bound); metadata BT BC safe_gate")
        ->required();
    app.add_option("--out", out, "result file: Aqk and Akk, metadata stage gate backend precision milliseconds")->required();
    app.add_option("--stage", stage_name,
                   "inter-solve (default: kda::inter_solve, needs Akkd) or intra (kda::chunk_kda_intra: the whole intra stage from "
                   "q, k, g, beta; Akkd and Aqk_diag are ignored, Aqk starts at zero)")
        ->check(CLI::IsMember({"inter-solve", "intra"}));
    app.add_option("--gate", gate,
                   "what the file's g holds: cumulated (default: FLA's chunk-local cumsum in log2 space, fp32), raw (per-token "
                   "natural-log decays: the command runs kda::chunk_local_cumsum first), kda (pre-activations: "
                   "-exp(A_log) softplus(g + dt_bias); tensors A_log [HV] required, dt_bias [HV*K] optional) or "
                   "kda-lower-bound (pre-activations: lower_bound sigmoid(exp(A_log) (g + dt_bias)); A_log, dt_bias optional). "
                   "A_log and dt_bias: fp32 (fp64 for fp64 data). The cumsum runs on the chosen backend")
        ->check(CLI::IsMember({"cumulated", "raw", "kda", "kda-lower-bound"}));
    CLI::Option* lb_opt = app.add_option("--lower-bound", lower_bound, "the lower bound of --gate kda-lower-bound (default -5; must be < 0)");
    app.add_option("--backend", backend, "cpu, cuda or both (default: cuda when a GPU is present, else cpu)")
        ->check(CLI::IsMember({"cpu", "cuda", "both"}));
    app.add_option("--precision", prec, "solve precision: tf32 (FLA's) or fp32 (default, the most accurate)")->check(CLI::IsMember({"tf32", "fp32"}));
    app.add_option("--threads", threads, "CPU worker threads (0: all hardware threads)")->check(CLI::NonNegativeNumber);
    app.add_flag("--check", check,
                 "print the errors against the float64 reference (and FLA's, when the case holds FLA's Aqk and Akk), and exit 1 when "
                 "an error of ours exceeds its bound (default: the test suite's; see --max-error-ratio)");
    CLI::Option* ratio_opt = app.add_option("--max-error-ratio", max_error_ratio,
                                            "with --check (implied): the bound on each relative RMS error is this multiple of its rounding "
                                            "floor (the error of rounding the float64 answer once to the output's dtype), e.g. 1.05; fp64 data "
                                            "has no floor (keep the default there)")
                                 ->check(CLI::PositiveNumber);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help
        std::cerr << "kda-inter-solve: error: " << one_line(e.what()) << "\n";
        return exit_bad_input;
    }

    std::optional<error_bound> bound;
    if (ratio_opt->count() > 0) check = true;
    if (check) bound = error_bound{ratio_opt->count() > 0 ? std::optional<double>(max_error_ratio) : std::nullopt};
    try {
        std::string cuda_error;
        const int devices = cuda_devices(cuda_error);
        if (backend.empty()) {
            // the default: the GPU where one works; a broken driver is reported, not taken for "no GPU"
            if (devices < 0) std::cerr << "kda-inter-solve: CUDA runtime error (" << cuda_error << "): running on the CPU\n";
            backend = devices > 0 ? "cuda" : "cpu";
        }
        if (backend != "cpu") {
            KDA_CHECK(cuda_built(), "--backend " << backend << ": this kda-inter-solve was built without CUDA (use --backend cpu)");
            KDA_CHECK(devices >= 0, "--backend " << backend << ": the CUDA runtime failed to count devices: " << cuda_error);
            KDA_CHECK(devices > 0, "--backend " << backend << ": no CUDA device is present (use --backend cpu)");
        }
        KDA_CHECK(lb_opt->count() == 0 || gate == "kda-lower-bound", "--lower-bound applies to --gate kda-lower-bound only (the gate is " << gate << ")");
        KDA_CHECK(lower_bound < 0 && std::isfinite(lower_bound), "--lower-bound: expected a finite negative number, got " << lower_bound);
        const stage st = stage_name == "intra" ? stage::intra : stage::inter_solve;
        kda::io::safetensors_file file = kda::io::safetensors_file::load(in);
        std::optional<kda::host_tensor> g_raw;
        if (gate != "cumulated") g_raw = take_raw_gate(file);
        if (st == stage::intra && gate == "cumulated") intra_gate_hint(file, kda::io::detail::printable(in));
        const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(
            file, kda::io::detail::printable(in), st == stage::intra ? kda::io::case_kind::intra : kda::io::case_kind::inter_solve);
        std::optional<gate_step> gs;
        KDA_CHECK(g_raw || gate == "cumulated", c.source << ": --gate " << gate << ": tensor 'g' is not a raw gate tensor");  // unreachable: the loader refuses first
        if (g_raw) gs = gate_step_for(gate, lower_bound, std::move(*g_raw), file, c);
        kda::inter_solve_problem p = c.problem;
        p.solve_precision = prec == "tf32" ? kda::precision::tf32 : kda::precision::fp32;

        std::optional<outputs> cpu, cuda;
        if (backend == "cpu" || backend == "both") cpu = run_cpu(c, p, st, gs, threads);
        if (backend == "cuda" || backend == "both") cuda = run_cuda(c, p, st, gs);
        const outputs& primary = cpu ? *cpu : *cuda;

        std::map<std::string, kda::host_tensor> tensors;
        std::map<std::string, std::string> meta{{"stage", stage_name},
                                                {"gate", gate},
                                                {"backend", backend},
                                                {"precision", prec},
                                                {"milliseconds", std::to_string(primary.ms)}};
        if (gs) meta["milliseconds_gate"] = std::to_string(primary.gate_ms);
        if (gate == "kda-lower-bound") meta["lower_bound"] = std::to_string(lower_bound);
        tensors.emplace("Aqk", primary.Aqk.clone());
        tensors.emplace("Akk", primary.Akk.clone());
        if (cpu && cuda) {
            tensors.emplace("Aqk_cuda", cuda->Aqk.clone());
            tensors.emplace("Akk_cuda", cuda->Akk.clone());
            meta["milliseconds_cuda"] = std::to_string(cuda->ms);
            if (gs) meta["milliseconds_gate_cuda"] = std::to_string(cuda->gate_ms);
        }

        std::cout << "kda-inter-solve: " << (st == stage::intra ? "intra stage" : "inter-solve step") << ", " << kda::name(c.q.type()) << " B=" << p.B
                  << " T=" << p.T << " H=" << p.H << " HV=" << p.HV << " K=" << p.K << " BT=" << p.BT << (p.safe_gate ? " safe_gate" : "")
                  << (c.cu_seqlens.defined() ? " varlen" : "") << ", gate " << gate << ", precision " << prec << "\n";
        if (cpu) std::cout << "cpu:  " << cpu->ms << " ms" << (gs ? " (+ " + std::to_string(cpu->gate_ms) + " ms gate cumsum)" : "") << "\n";
        if (cuda) std::cout << "cuda: " << cuda->ms << " ms (kernel)" << (gs ? " (+ " + std::to_string(cuda->gate_ms) + " ms gate cumsum)" : "") << "\n";
        std::vector<std::string> failed;  // the bounds of --check that an error exceeds
        if ((check || (cpu && cuda)) && p.T > 0) {
            kda::host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
            const kda::host_tensor g64 = gs ? exact_gates(*gs, c) : kda::host_tensor{};
            kda::reference::result ref;
            if (st == stage::intra) {
                kda::intra_args ra = c.intra_args(a0, k0);
                if (gs) ra.g = g64.ref();
                ref = kda::reference::intra(p, ra);
            } else {
                kda::inter_solve_args ra = c.args(a0, k0);
                if (gs) ra.g = g64.ref();
                ref = kda::reference::inter_solve(p, ra);
            }
            if (gs) {
                const std::vector<double> exact(g64.data<double>(), g64.data<double>() + g64.numel());
                if (cpu) print_gate_error("cpu ", cpu->g, exact);
                if (cuda) print_gate_error("cuda", cuda->g, exact);
            }
            if (cpu) failed = print_errors("cpu ", cpu->Aqk, cpu->Akk, ref, bound);
            if (cuda) {
                const auto f = print_errors("cuda", cuda->Aqk, cuda->Akk, ref, bound, p.solve_precision == kda::precision::tf32);
                failed.insert(failed.end(), f.begin(), f.end());
            }
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
        for (const std::string& f : failed) std::cerr << "kda-inter-solve: check failed: " << f << "\n";
        return failed.empty() ? 0 : exit_check_failed;
    } catch (const std::exception& e) {
        std::cerr << "kda-inter-solve: error: " << one_line(e.what()) << "\n";
        return exit_bad_input;
    }
}
