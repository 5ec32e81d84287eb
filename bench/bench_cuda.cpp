// bench/bench_cuda.cpp: Google Benchmark of the CUDA backend (through bench/kda_capi.cu).
//
//   kda_bench_cuda [--benchmark_filter=REGEX] [--benchmark_out=FILE --benchmark_out_format=json]
//
// Every benchmark shape (docs/PERFORMANCE.md) in both gate modes (not safe / safe) and both precisions (tf32 / fp32).
// Each iteration: flush L2 (a 512 MiB memset), then one launch between two CUDA events (manual
// time). B1 T1024 H32 is launched as a one-node CUDA graph (graph replay), the others directly.
// Counters: traffic_MB (the unique DRAM bytes a perfect kernel moves: q, k once per q/k head, g,
// beta, Akkd, the off-diagonal Aqk blocks and Akk's lower block triangle), TBps (traffic / time)
// and frac_copy (TBps / the device-to-device copy rate measured at start, read + write counted).
// The intra/ benchmarks time the whole intra stage (kda::chunk_kda_intra: the fused kernel) on the
// first five shapes, intra2k/ the same through the two-kernel path (producer + inter-solve); their
// traffic is that of a fused stage (q, k, g, beta read; the lower block triangles of Aqk and Akk
// written; no Akkd). notma/ times the inter-solve step with per-thread copies instead of the
// tensor copy engine (cuda_backend::use_tma = false).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kda_capi.h"

namespace {

#define CK(x)                                                                                   \
    do {                                                                                        \
        const cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                                \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            std::exit(3);                                                                       \
        }                                                                                       \
    } while (0)

struct shape {
    std::string name;
    std::int64_t B, T, H, HV, K;
    int dtype;                          // 0 bf16, 1 fp16
    std::vector<std::int64_t> lengths;  // varlen: sequence lengths (B = 1)
    bool graph;
};

std::vector<std::int64_t> short_seqs() {  // 256 sequences of 16..512 tokens (std::mt19937, seed 7)
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> d(16, 512);
    std::vector<std::int64_t> v(256);
    for (auto& x : v) x = d(rng);
    return v;
}

std::vector<shape> shapes() {
    return {
        {"B1_T8192_H96", 1, 8192, 96, 96, 128, 0, {}, false},
        {"B8_T4096_H32", 8, 4096, 32, 32, 128, 0, {}, false},
        {"GVA_B4_T4096_H16_HV32", 4, 4096, 16, 32, 128, 0, {}, false},
        {"varlen6_H64", 1, 0, 64, 64, 128, 0, {1300, 547, 2048, 963, 271, 3063}, false},
        {"B1_T1024_H32_graph", 1, 1024, 32, 32, 128, 0, {}, true},
        {"B1_T65536_H16", 1, 65536, 16, 16, 128, 0, {}, false},
        {"varlen256_H32", 1, 0, 32, 32, 128, 0, short_seqs(), false},
        {"B8_T4096_H32_K64", 8, 4096, 32, 32, 64, 0, {}, false},
        {"B8_T4096_H32_fp16", 8, 4096, 32, 32, 128, 1, {}, false},
    };
}

double g_copy_tbps = 0;  // measured device-to-device copy rate
void* g_flush = nullptr;
constexpr std::size_t flush_bytes = 512ull << 20;

double measure_copy() {
    const std::size_t n = 2ull << 30;
    void *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int i = 0; i < 6; ++i) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i > 0 && ms < best) best = ms;
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * static_cast<double>(n) / (best * 1e-3) / 1e12;
}

double traffic_bytes(const shape& s, std::int64_t T) {
    const double X = s.dtype == 2 ? 4 : 2, NC = 4, BC = 16;
    const double tok = static_cast<double>(s.B) * static_cast<double>(T);
    return tok * (2.0 * s.H * s.K * X + s.HV * s.K * 4.0 + s.HV * X + s.HV * BC * 4.0 + s.HV * BC * (NC - 1) / 2 * X + s.HV * BC * (NC + 1) / 2 * X);
}

/// Unique bytes of the whole intra stage (see the top of the file).
double intra_traffic_bytes(const shape& s, std::int64_t T) {
    const double X = s.dtype == 2 ? 4 : 2, NC = 4, BC = 16;
    const double tok = static_cast<double>(s.B) * static_cast<double>(T);
    return tok * (2.0 * s.H * s.K * X + s.HV * s.K * 4.0 + s.HV * X + 2.0 * s.HV * BC * (NC + 1) / 2 * X);
}

void run_shape(benchmark::State& st, const shape& s, bool safe, bool tf32, bool intra, int flags) {
    const auto launch = intra ? &kda_capi_intra : &kda_capi_inter_solve;
    std::int64_t T = s.T;
    std::vector<std::int64_t> cu{0};
    for (auto l : s.lengths) cu.push_back(cu.back() + l);
    if (!s.lengths.empty()) T = cu.back();
    const std::int64_t es = s.dtype == 2 ? 4 : 2;
    const std::int64_t nqk = s.B * T * s.H * s.K, ng = s.B * T * s.HV * s.K, nb = s.B * T * s.HV, nout = s.B * T * s.HV * 64;
    void *q, *k, *g, *beta, *akkd, *aqk, *akk, *dcu = nullptr;
    CK(cudaMalloc(&q, nqk * es));
    CK(cudaMalloc(&k, nqk * es));
    CK(cudaMalloc(&g, ng * 4));
    CK(cudaMalloc(&beta, nb * es));
    CK(cudaMalloc(&akkd, nb * 16 * 4));
    CK(cudaMalloc(&aqk, nout * es));
    CK(cudaMalloc(&akk, nout * es));
    CK(cudaMemset(aqk, 0, nout * es));
    CK(cudaMemset(akk, 0, nout * es));
    if (!s.lengths.empty()) {
        CK(cudaMalloc(&dcu, cu.size() * 8));
        CK(cudaMemcpy(dcu, cu.data(), cu.size() * 8, cudaMemcpyHostToDevice));
    }
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    kda_capi_call c{};
    c.dtype = s.dtype, c.BT = 64, c.B = s.B, c.T = T, c.H = s.H, c.HV = s.HV, c.K = s.K, c.scale = 1.0 / std::sqrt(static_cast<double>(s.K));
    c.safe_gate = safe, c.tf32 = tf32, c.beta_fp32 = 0, c.flags = flags;
    c.q = q, c.k = k, c.g = g, c.beta = beta, c.Akkd = akkd, c.Aqk = aqk, c.Akk = akk, c.stream = stream;
    if (dcu != nullptr) c.cu_seqlens = dcu, c.cu_seqlens_host = cu.data(), c.num_seqs = static_cast<std::int64_t>(s.lengths.size());
    kda_capi_fill_inputs(&c, 42);
    char err[512] = {0};
    if (launch(&c, err, sizeof err) != 0) {
        st.SkipWithError(err);
        return;
    }
    CK(cudaStreamSynchronize(stream));
    cudaGraphExec_t exec = nullptr;
    if (s.graph) {
        cudaGraph_t graph;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        launch(&c, err, sizeof err);
        CK(cudaStreamEndCapture(stream, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        CK(cudaGraphDestroy(graph));
        CK(cudaGraphLaunch(exec, stream));
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double total = 0;
    std::int64_t iters = 0;
    for (auto _ : st) {
        CK(cudaMemsetAsync(g_flush, iters & 0xff, flush_bytes, stream));
        CK(cudaEventRecord(e0, stream));
        if (exec != nullptr)
            CK(cudaGraphLaunch(exec, stream));
        else
            launch(&c, err, sizeof err);
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        st.SetIterationTime(ms * 1e-3);
        total += ms * 1e-3;
        ++iters;
    }
    const double bytes = intra ? intra_traffic_bytes(s, T) : traffic_bytes(s, T);
    const double tbps = iters > 0 ? bytes * static_cast<double>(iters) / total / 1e12 : 0;
    st.counters["traffic_MB"] = bytes / 1e6;
    st.counters["TBps"] = tbps;
    st.counters["copy_TBps"] = g_copy_tbps;
    st.counters["frac_copy"] = tbps / g_copy_tbps;
    if (exec != nullptr) CK(cudaGraphExecDestroy(exec));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaStreamDestroy(stream));
    for (void* p : {q, k, g, beta, akkd, aqk, akk, dcu})
        if (p != nullptr) CK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        std::printf("kda_bench_cuda: no CUDA device\n");
        return 0;
    }
    g_copy_tbps = measure_copy();
    CK(cudaMalloc(&g_flush, flush_bytes));
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    benchmark::AddCustomContext("gpu", prop.name);
    benchmark::AddCustomContext("copy_TBps", std::to_string(g_copy_tbps));
    const auto all = shapes();
    // groups: the inter-solve step; the intra stage (fused kernel); the intra stage through the
    // two-kernel path (intra2k/); the inter-solve step with per-thread copies (notma/, two shapes)
    struct group {
        const char* prefix;
        bool intra;
        int flags;
        std::size_t shapes;
    };
    const group groups[] = {{"", false, 0, all.size()},
                            {"intra/", true, 0, 5},  // the intra stage's table uses the first five shapes
                            {"intra2k/", true, KDA_CAPI_TWO_KERNELS, 5},
                            {"notma/", false, KDA_CAPI_NO_TMA, 2}};
    for (const group& gr : groups)
        for (std::size_t i = 0; i < gr.shapes; ++i) {
            const shape& s = all[i];
            for (int safe = 0; safe < 2; ++safe)
                for (int tf32 = 1; tf32 >= 0; --tf32) {
                    if (gr.flags == KDA_CAPI_NO_TMA && !tf32) continue;
                    const std::string name = std::string(gr.prefix) + s.name + (safe ? "/safe" : "/notsafe") + (tf32 ? "/tf32" : "/fp32");
                    const bool intra = gr.intra;
                    const int flags = gr.flags;
                    benchmark::RegisterBenchmark(name.c_str(), [s, safe, tf32, intra, flags](benchmark::State& st) { run_shape(st, s, safe, tf32, intra, flags); })
                        ->UseManualTime()
                        ->Unit(benchmark::kMicrosecond)
                        ->Iterations(30);
                }
        }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    CK(cudaFree(g_flush));
    return 0;
}
