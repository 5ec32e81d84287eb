// examples/02_cuda_minimal.cu: the CUDA backend called directly on device memory, as a framework
// would call it: inputs already on the device, one launch on the caller's stream, nothing else.
//
//   02_cuda_minimal [T] [H]        (defaults: T = 1000 tokens, H = 4 heads; K = 64, bf16)
//
// The inputs are made on the host without the reference (no Eigen in a .cu file): normalised
// pseudo-random q / k, beta in (0, 1), decaying gates, and Akkd = the beta-scaled strictly lower
// diagonal blocks of L, computed here in double. The check is a property every valid output has:
// Akk (I + L) = I on a few rows, with I + L rebuilt in double from the same inputs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <kda/cuda/inter_solve.cuh>

namespace {

double hash01(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((x ^ (x >> 31)) >> 11) * 0x1.0p-53;
}

/// A device buffer holding a copy of `host`.
template <class T>
T* upload(const std::vector<T>& host) {
    T* d = nullptr;
    KDA_CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(T)));
    KDA_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

}  // namespace

int main(int argc, char** argv) try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("02_cuda_minimal: no CUDA device: nothing to run\n");
        return 77;  // ctest: skipped (SKIP_RETURN_CODE), never counted as passed
    }
    const std::int64_t B = 1, T = argc > 1 ? std::atoll(argv[1]) : 1000, H = argc > 2 ? std::atoll(argv[2]) : 4, HV = H, K = 64;
    const int BT = 64, BC = 16;

    // ---- host inputs [B, T, H, K] etc. (B = 1)
    std::vector<double> q(T * H * K), k(T * H * K), g(T * HV * K), beta(T * HV);
    for (std::int64_t r = 0; r < T * H; ++r)
        for (auto* x : {&q, &k}) {
            double n2 = 0;
            for (std::int64_t c = 0; c < K; ++c) n2 += std::pow((*x)[r * K + c] = hash01((r * K + c) * 2 + (x == &q)) - 0.5, 2);
            for (std::int64_t c = 0; c < K; ++c) (*x)[r * K + c] /= std::sqrt(n2);
        }
    for (std::int64_t i = 0; i < T * HV; ++i) beta[i] = 0.1 + 0.8 * hash01(i + (1ull << 40));
    for (std::int64_t t = 0; t < T; ++t)  // chunk-local cumulative log2 decays
        for (std::int64_t i = 0; i < HV * K; ++i) g[t * HV * K + i] = (t % BT ? g[(t - 1) * HV * K + i] : 0.0) - 0.2 * hash01(t * HV * K + i + (1ull << 41));
    // the inputs as stored (bf16 q / k / beta), so that L below is built from what the kernel reads
    std::vector<__nv_bfloat16> qb(q.size()), kb(k.size()), bb(beta.size());
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = __bfloat162float(qb[i] = __float2bfloat16(static_cast<float>(q[i])));
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = __bfloat162float(kb[i] = __float2bfloat16(static_cast<float>(k[i])));
    for (std::size_t i = 0; i < beta.size(); ++i) beta[i] = __bfloat162float(bb[i] = __float2bfloat16(static_cast<float>(beta[i])));
    std::vector<float> gf(g.begin(), g.end());
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = gf[i];
    // L[i, j] = beta_i sum_c k_i k_j 2^(g_i - g_j), same chunk, j < i
    auto L = [&](std::int64_t ti, std::int64_t tj, std::int64_t hv) {
        double s = 0;
        for (std::int64_t c = 0; c < K; ++c) s += k[(ti * H + hv) * K + c] * k[(tj * H + hv) * K + c] * std::exp2(g[(ti * HV + hv) * K + c] - g[(tj * HV + hv) * K + c]);
        return beta[ti * HV + hv] * s;
    };
    std::vector<float> Akkd(T * HV * BC, 0.f);
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t hv = 0; hv < HV; ++hv)
            for (std::int64_t j = 0; j < t % BC; ++j) Akkd[(t * HV + hv) * BC + j] = static_cast<float>(L(t, t - t % BC + j, hv));

    // ---- device tensors and the call
    cudaStream_t stream;
    KDA_CUDA_CHECK(cudaStreamCreate(&stream));
    __nv_bfloat16 *dq = upload(qb), *dk = upload(kb), *db = upload(bb), *dAqk = nullptr, *dAkk = nullptr;
    float *dg = upload(gf), *dAkkd = upload(Akkd);
    KDA_CUDA_CHECK(cudaMalloc(&dAqk, T * HV * BT * sizeof(__nv_bfloat16)));
    KDA_CUDA_CHECK(cudaMalloc(&dAkk, T * HV * BT * sizeof(__nv_bfloat16)));
    KDA_CUDA_CHECK(cudaMemsetAsync(dAkk, 0, T * HV * BT * sizeof(__nv_bfloat16), stream));  // blocks above stay 0

    kda::inter_solve_problem p;
    p.B = B, p.T = T, p.H = H, p.HV = HV, p.K = K, p.BT = BT, p.scale = 1.0 / std::sqrt(static_cast<double>(K));
    kda::inter_solve_args a;
    a.q = kda::make_tensor(dq, {B, T, H, K});
    a.k = kda::make_tensor(dk, {B, T, H, K});
    a.g = kda::make_tensor(dg, {B, T, HV, K});
    a.beta = kda::make_tensor(db, {B, T, HV});
    a.Akkd = kda::make_tensor(dAkkd, {B, T, HV, BC});
    a.Aqk = kda::make_mutable_tensor(dAqk, {B, T, HV, BT});
    a.Akk = kda::make_mutable_tensor(dAkk, {B, T, HV, BT});
    kda::inter_solve(kda::cuda_backend{stream}, p, a);  // validates, then one launch on `stream`

    std::vector<__nv_bfloat16> Akk(T * HV * BT);
    KDA_CUDA_CHECK(cudaMemcpyAsync(Akk.data(), dAkk, Akk.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost, stream));
    KDA_CUDA_CHECK(cudaStreamSynchronize(stream));

    // ---- check: (Akk (I + L))[i, j] = delta_ij on the last chunk's rows of head 0. The exact
    // inverse rounded once to bf16 (relative error <= u = 2^-8 per entry) leaves a residual of at
    // most u sum_m |Akk[i, m]| |(I + L)[m, j]|; the kernel's fp32 arithmetic adds at most 2^-20
    // (16 fp32 ulps at 1, |Akk| <= 1) per entry. An output whose residual passes that bound anywhere fails.
    const std::int64_t c0 = (T - 1) / BT * BT, hv = 0;
    const double u = std::ldexp(1.0, -8);
    double worst = 0, worst_ratio = 0;
    for (std::int64_t ti = c0; ti < T; ++ti)
        for (std::int64_t tj = c0; tj <= ti; ++tj) {
            double s = 0, bound = 0;
            for (std::int64_t tm = tj; tm <= ti; ++tm) {
                const double il = tm == tj ? 1.0 : L(tm, tj, hv);
                const double a = static_cast<double>(__bfloat162float(Akk[(ti * HV + hv) * BT + (tm - c0)]));
                s += a * il;
                bound += (u * std::abs(a) + std::ldexp(1.0, -20)) * std::abs(il);
            }
            const double r = std::abs(s - (ti == tj ? 1.0 : 0.0));
            worst = std::max(worst, r);
            worst_ratio = std::max(worst_ratio, r == 0 ? 0.0 : r / bound);
        }
    std::printf("02_cuda_minimal: T=%lld H=%lld K=%lld bf16: worst |Akk (I + L) - I| on the last chunk = %.2e, %.2f of its rounding bound\n",
                static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(K), worst, worst_ratio);
    for (void* ptr : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(db), static_cast<void*>(dg), static_cast<void*>(dAkkd),
                      static_cast<void*>(dAqk), static_cast<void*>(dAkk)})
        KDA_CUDA_CHECK(cudaFree(ptr));
    KDA_CUDA_CHECK(cudaStreamDestroy(stream));
    return worst_ratio <= 1.0 ? 0 : 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
