// bench/bench_cpu.cpp: Google Benchmark of the CPU backend, next to this machine's own limits.
//
// Cases are named by their parameters:
//   inter_solve/cpu/X:bf16/B:1/T:4096/H:16/HV:16/K:128/BT:64/safe_gate:0/threads:2
//   intra/cpu/X:bf16/B:1/T:4096/H:16/HV:16/K:128/BT:64/safe_gate:0/threads:2   (chunk_kda_intra)
//   machine/sgemm_eigen/n:1024/threads:2      compute ceiling: Eigen SGEMM, one per thread
//   machine/memcpy/MiB:128/threads:2          memory ceiling: memcpy, one buffer pair per thread
//
// Counters of an inter_solve case:
//   bytes_per_second  the step's unique traffic per second. Read: q and k once per q/k head (X), g
//                     and Akkd (fp32, fp64 for fp64 data), beta (X). Written: Aqk's off-diagonal
//                     blocks (BC (NC-1)/2 values per token and value head) and Akk's lower block
//                     triangle (BC (NC+1)/2 per token and value head), in X.
//   FLOP/s            the off-diagonal products (2 x NPAIR x BC x BC x K x 2 flops per chunk and
//                     value head) plus the block merge (sum over d of (NC-d)(d+1) BC x BC x BC
//                     products, 2 BC^3 flops each). Gates (exp2) and conversions are not counted.
//   AI                arithmetic intensity, flop per byte of unique traffic.
//   roofline          achieved FLOP/s / min(SGEMM rate, AI x copy rate) for the same thread count:
//                     the fraction of the roofline the step reaches on this machine.
//   sgemm_GFLOPs, copy_GBs   the two ceilings, measured in this process before the case runs.
// The copy rate counts the bytes read plus the bytes written (2 bytes per byte copied), as the
// step's traffic does.
//
// Counters of an intra case (kda::chunk_kda_intra: the diagonal-block producer, then the step):
//   step_ms           the inter-solve step alone on the same problem and thread count, median of
//                     5 calls timed in this process just before the case runs
//   vs_step           the whole stage's time per call / step_ms (the stage's target is <= 1.5)
//   bytes_per_second  the stage's unique traffic: q, k (X), g (fp32 / fp64), beta (X) read; the
//                     whole causal Aqk lower block triangle and Akk's written (X). The Akkd
//                     workspace between the two parts is not counted.
//
// Counters of a scaling case (--scaling: B8 T4096 H32 HV32, bf16, K 128, not safe; the step and the
// whole stage, one case per thread count):
//   ms_per_call       seconds per call, in ms
//   one_thread_ms     the same call on one thread, median of 3 timed in this process before the first
//                     case of that shape runs
//   efficiency        parallel efficiency, one_thread_ms / (threads x ms_per_call)
//   sgemm_efficiency  the machine's own: the SGEMM rate at this thread count / (threads x the rate
//                     on one thread), both measured in this process (machine/sgemm_eigen's method)
//   GBs, copy_GBs     the call's unique traffic per second, and the memcpy rate at this thread count
//
//   bench_cpu [--threads=1,2] [--scaling] [Google Benchmark flags, e.g. --benchmark_filter=bf16]
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

// ---------------------------------------------------------------- the machine's ceilings

/// Runs body(thread) on `threads` threads that start together; returns the slowest one's seconds.
double timed_parallel(int threads, const std::function<void(int)>& body) {
    std::barrier sync(threads);
    std::vector<double> secs(static_cast<std::size_t>(threads));
    auto run = [&](int t) {
        sync.arrive_and_wait();
        const auto t0 = clock_type::now();
        body(t);
        secs[static_cast<std::size_t>(t)] = std::chrono::duration<double>(clock_type::now() - t0).count();
    };
    std::vector<std::jthread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(run, t);
    run(0);
    pool.clear();  // joins
    return *std::max_element(secs.begin(), secs.end());
}

constexpr int sgemm_n = 1024;           // 2 x 4 MiB operands per thread: Eigen's blocking keeps it compute-bound
constexpr std::int64_t copy_mib = 128;  // per thread, 4x the 32 MiB L3 of this machine

/// Eigen SGEMM rate in flop/s: one n x n x n product per thread, all at once, best of 5.
double sgemm_rate(int threads) {
    const Eigen::Index n = sgemm_n;
    std::vector<Eigen::MatrixXf> A, B, C;
    for (int t = 0; t < threads; ++t) {
        A.push_back(Eigen::MatrixXf::Random(n, n));
        B.push_back(Eigen::MatrixXf::Random(n, n));
        C.push_back(Eigen::MatrixXf::Zero(n, n));
    }
    double best = 1e300;
    for (int rep = 0; rep < 5; ++rep)
        best = std::min(best, timed_parallel(threads, [&](int t) {
            const auto i = static_cast<std::size_t>(t);
            C[i].noalias() = A[i] * B[i];
            benchmark::DoNotOptimize(C[i].data());
        }));
    return 2.0 * static_cast<double>(n) * n * n * threads / best;
}

/// memcpy rate in bytes/s (read + written): copy_mib MiB per thread, all at once, best of 5.
double copy_rate(int threads) {
    const std::size_t bytes = static_cast<std::size_t>(copy_mib) << 20;
    std::vector<std::unique_ptr<char[]>> src, dst;
    for (int t = 0; t < threads; ++t) {
        src.emplace_back(new char[bytes]);
        dst.emplace_back(new char[bytes]);
        std::memset(src.back().get(), 1, bytes);  // touch every page before timing
        std::memset(dst.back().get(), 0, bytes);
    }
    double best = 1e300;
    for (int rep = 0; rep < 5; ++rep)
        best = std::min(best, timed_parallel(threads, [&](int t) {
            const auto i = static_cast<std::size_t>(t);
            std::memcpy(dst[i].get(), src[i].get(), bytes);
            benchmark::ClobberMemory();
        }));
    return 2.0 * static_cast<double>(bytes) * threads / best;
}

struct ceilings {
    double flops = 0, bytes = 0;  // per second
};
/// Measured once per thread count and kept for every case with that count.
const ceilings& machine(int threads) {
    static std::map<int, ceilings> cache;
    auto it = cache.find(threads);
    if (it == cache.end()) it = cache.emplace(threads, ceilings{sgemm_rate(threads), copy_rate(threads)}).first;
    return it->second;
}

// ---------------------------------------------------------------- the step's traffic and work

struct shape {
    kda::dtype X = kda::dtype::bf16;
    std::int64_t B = 1, T = 4096, H = 16, HV = 16, K = 128;
    int BT = 64;
    bool safe_gate = false;

    [[nodiscard]] std::string name() const {
        std::ostringstream os;
        os << "X:" << kda::name(X) << "/B:" << B << "/T:" << T << "/H:" << H << "/HV:" << HV << "/K:" << K << "/BT:" << BT
           << "/safe_gate:" << safe_gate;
        return os.str();
    }
    [[nodiscard]] kda::inter_solve_problem problem() const {
        kda::inter_solve_problem p;
        p.B = B, p.T = T, p.H = H, p.HV = HV, p.K = K, p.BT = BT, p.safe_gate = safe_gate;
        p.scale = 1.0 / std::sqrt(static_cast<double>(K));
        return p;
    }
};

struct work {
    double bytes = 0, flops = 0;
};

/// Unique traffic and counted flops of one call, chunk by chunk (short last chunks included).
/// intra: the whole stage's traffic (no Akkd read; Aqk's diagonal blocks written too).
work step_work(const shape& s, bool intra = false) {
    const double x = static_cast<double>(kda::size_of(s.X));
    const double acc = static_cast<double>(kda::size_of(kda::acc_dtype(s.X)));
    const std::int64_t BC = 16;
    work w;
    const double tokens = static_cast<double>(s.B * s.T);
    w.bytes = tokens * (2.0 * s.H * s.K * x + s.HV * (s.K * acc + x + (intra ? 0 : BC * acc)));  // q, k; g, beta, Akkd
    for (std::int64_t c0 = 0; c0 < s.T; c0 += s.BT) {
        const std::int64_t n = std::min<std::int64_t>(s.BT, s.T - c0);
        const std::int64_t NS = (n + BC - 1) / BC;  // sub-chunks with rows
        double written = 0;  // Aqk + Akk entries of one value head
        for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t si = i / BC;
            const std::int64_t lower = std::min((si + 1) * BC, n);  // Akk's lower block triangle
            const std::int64_t aqk = intra ? lower : si * BC;         // Aqk: with or without the diagonal block
            written += static_cast<double>(aqk + lower);
        }
        double merge = 0;
        for (std::int64_t d = 1; d < NS; ++d) merge += static_cast<double>((NS - d) * (d + 1));
        const double npair = static_cast<double>(NS * (NS - 1) / 2);
        w.bytes += static_cast<double>(s.B * s.HV) * written * x;
        w.flops += static_cast<double>(s.B * s.HV) *
                   (2.0 * npair * BC * BC * static_cast<double>(s.K) * 2.0 + merge * 2.0 * BC * BC * BC);
    }
    return w;
}

/// Inputs and outputs of one shape, generated once (the float64 generator takes about a second).
struct problem_data {
    kda::reference::inputs in;
    kda::host_tensor Aqk, Akk;
};
problem_data& data_for(const shape& s) {
    static std::map<std::string, std::unique_ptr<problem_data>> cache;
    auto& slot = cache[s.name()];
    if (!slot) {
        slot = std::make_unique<problem_data>();
        slot->in = kda::reference::make_inputs(s.problem(), s.X);
        slot->Aqk = slot->in.make_output(0.0);
        slot->Akk = slot->in.make_output(0.0);
    }
    return *slot;
}

// ---------------------------------------------------------------- cases

/// One warm-up call (pages in the outputs), then the timed calls; returns their seconds.
template <class Call>
double timed_loop(benchmark::State& state, const Call& call) {
    call();
    double seconds = 0;
    for (auto _ : state) {
        const auto t0 = clock_type::now();
        call();
        seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    return seconds;
}

void bm_inter_solve(benchmark::State& state, shape s, int threads) {
    problem_data& d = data_for(s);
    const kda::inter_solve_args args = d.in.args(d.Aqk, d.Akk);
    const kda::cpu_backend be{threads};
    const ceilings& roof = machine(threads);
    const work w = step_work(s);

    const double seconds = timed_loop(state, [&] { kda::inter_solve(be, d.in.problem, args); });
    const double iters = static_cast<double>(state.iterations());
    const double ai = w.flops / w.bytes;
    const double achieved = w.flops * iters / seconds;
    state.SetBytesProcessed(static_cast<std::int64_t>(w.bytes * iters));
    state.counters["FLOP/s"] = benchmark::Counter(w.flops * iters, benchmark::Counter::kIsRate);
    state.counters["AI"] = ai;
    state.counters["roofline"] = achieved / std::min(roof.flops, ai * roof.bytes);
    state.counters["sgemm_GFLOPs"] = roof.flops * 1e-9;
    state.counters["copy_GBs"] = roof.bytes * 1e-9;
}

/// The whole intra stage, next to the step alone on the same problem.
void bm_intra(benchmark::State& state, shape s, int threads) {
    problem_data& d = data_for(s);
    const kda::cpu_backend be{threads};
    const work w = step_work(s, true);
    kda::host_tensor workspace(kda::acc_dtype(s.X), {s.B, s.T, s.HV, 16});
    const kda::intra_args args = d.in.intra_args(d.Aqk, d.Akk, &workspace);

    const kda::inter_solve_args step_args = d.in.args(d.Aqk, d.Akk);
    std::vector<double> step_ms;
    for (int rep = 0; rep < 6; ++rep) {  // the first call warms up
        const auto t0 = clock_type::now();
        kda::inter_solve(be, d.in.problem, step_args);
        step_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    }
    std::sort(step_ms.begin() + 1, step_ms.end());
    const double step_median = step_ms[3];

    const double seconds = timed_loop(state, [&] { kda::chunk_kda_intra(be, d.in.problem, args); });
    const double iters = static_cast<double>(state.iterations());
    state.SetBytesProcessed(static_cast<std::int64_t>(w.bytes * iters));
    state.counters["step_ms"] = step_median;
    state.counters["vs_step"] = seconds * 1e3 / iters / step_median;
}

/// Seconds of one call on one thread: median of 3 after a warm-up call, once per shape and part.
double one_thread_seconds(const shape& s, bool intra) {
    static std::map<std::string, double> cache;
    const std::string key = s.name() + (intra ? "/intra" : "/step");
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    problem_data& d = data_for(s);
    const kda::cpu_backend be{1};
    kda::host_tensor workspace(kda::acc_dtype(s.X), {s.B, s.T, s.HV, 16});
    std::vector<double> secs;
    for (int rep = 0; rep < 4; ++rep) {
        const auto t0 = clock_type::now();
        if (intra)
            kda::chunk_kda_intra(be, d.in.problem, d.in.intra_args(d.Aqk, d.Akk, &workspace));
        else
            kda::inter_solve(be, d.in.problem, d.in.args(d.Aqk, d.Akk));
        if (rep > 0) secs.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    std::sort(secs.begin(), secs.end());
    return cache[key] = secs[1];
}

/// Thread scaling of the step (intra = false) or the whole stage on one shape.
void bm_scaling(benchmark::State& state, shape s, int threads, bool intra) {
    problem_data& d = data_for(s);
    const double one = one_thread_seconds(s, intra);
    const kda::cpu_backend be{threads};
    kda::host_tensor workspace(kda::acc_dtype(s.X), {s.B, s.T, s.HV, 16});
    const kda::intra_args iargs = d.in.intra_args(d.Aqk, d.Akk, &workspace);
    const kda::inter_solve_args sargs = d.in.args(d.Aqk, d.Akk);
    const double seconds = timed_loop(state, [&] {
        if (intra)
            kda::chunk_kda_intra(be, d.in.problem, iargs);
        else
            kda::inter_solve(be, d.in.problem, sargs);
    });
    const double per_call = seconds / static_cast<double>(state.iterations());
    state.counters["ms_per_call"] = per_call * 1e3;
    state.counters["one_thread_ms"] = one * 1e3;
    state.counters["efficiency"] = one / (threads * per_call);
    const ceilings& here = machine(threads);
    state.counters["sgemm_efficiency"] = here.flops / (threads * machine(1).flops);
    state.counters["GBs"] = step_work(s, intra).bytes / per_call * 1e-9;
    state.counters["copy_GBs"] = here.bytes * 1e-9;
}

void bm_sgemm(benchmark::State& state, int threads) {
    double rate = 0;
    for (auto _ : state) rate = sgemm_rate(threads);
    state.counters["GFLOP/s"] = rate * 1e-9;
}

void bm_copy(benchmark::State& state, int threads) {
    double rate = 0;
    for (auto _ : state) rate = copy_rate(threads);
    state.counters["GB/s"] = rate * 1e-9;
}

struct options {
    std::vector<int> threads{1, 2};
    bool scaling = false;
};

/// Takes this program's own flags out of argv (the rest goes to Google Benchmark).
options parse_options(int& argc, char** argv) {
    options o;
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--threads=", 0) == 0) {
            o.threads.clear();
            std::stringstream ss(a.substr(10));
            for (std::string v; std::getline(ss, v, ',');) o.threads.push_back(std::stoi(v));
        } else if (a == "--scaling") {
            o.scaling = true;
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const options opt = parse_options(argc, argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

    if (opt.scaling) {  // only the scaling cases
        shape s;
        s.B = 8, s.T = 4096, s.H = 32, s.HV = 32;
        for (bool intra : {false, true})
            for (int t : opt.threads)
                benchmark::RegisterBenchmark(
                    ((intra ? "scaling/intra/cpu/" : "scaling/inter_solve/cpu/") + s.name() + "/threads:" + std::to_string(t)).c_str(),
                    bm_scaling, s, t, intra)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
        benchmark::RunSpecifiedBenchmarks();
        benchmark::Shutdown();
        return 0;
    }
    const std::vector<int>& thread_counts = opt.threads;

    // the step: bf16 and fp32, K 128 and 64, not safe and safe; the whole stage: K 128
    std::vector<shape> steps, stages;
    for (kda::dtype x : {kda::dtype::bf16, kda::dtype::fp32})
        for (std::int64_t K : {128, 64})
            for (bool safe : {false, true}) {
                shape s;
                s.X = x, s.K = K, s.safe_gate = safe;
                steps.push_back(s);
                if (K == 128) stages.push_back(s);
            }
    for (int t : thread_counts) {
        const std::string suffix = "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("machine/sgemm_eigen/n:" + std::to_string(sgemm_n) + suffix).c_str(), bm_sgemm, t)
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("machine/memcpy/MiB:" + std::to_string(copy_mib) + suffix).c_str(), bm_copy, t)
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
        for (const shape& s : steps)
            benchmark::RegisterBenchmark(("inter_solve/cpu/" + s.name() + suffix).c_str(), bm_inter_solve, s, t)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        for (const shape& s : stages)
            benchmark::RegisterBenchmark(("intra/cpu/" + s.name() + suffix).c_str(), bm_intra, s, t)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
