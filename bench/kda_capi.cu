// bench/kda_capi.cu: a C ABI around kda::inter_solve with the CUDA backend, on device pointers, for
// the benchmark (bench_cuda.cpp) and the side-by-side harness (compare_fla.py, through ctypes with
// torch data_ptrs). Built as libkda_capi.so (static cudart inside) and as a static library.
//
//   int kda_capi_inter_solve(const kda_capi_call* c, char* err, int errlen);   // 0: launched
//
// One launch on c->stream (two for chunk_kda_intra's two-kernel path), no synchronisation; c->flags
// picks the backend's options (kda_capi.h). Varlen: cu_seqlens (device, int64) plus its host
// copy; chunk_indices optional (device + host, int64 [NT, 2]).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <cstdio>
#include <cstring>
#include <exception>

#include <kda/cuda/inter_solve.cuh>
#include <kda/cuda/intra.cuh>

#include "kda_capi.h"

namespace {
/// The call's problem and tensors (device pointers; Akkd as given).
struct lowered {
    kda::inter_solve_problem p;
    kda::inter_solve_args a;
};
lowered lower(const kda_capi_call* c) {
    lowered r;
    {
        const kda::dtype X = c->dtype == 0 ? kda::dtype::bf16 : c->dtype == 1 ? kda::dtype::fp16 : kda::dtype::fp32;
        kda::inter_solve_problem p;
        p.B = c->B, p.T = c->T, p.H = c->H, p.HV = c->HV, p.K = c->K, p.BT = c->BT, p.scale = c->scale;
        p.safe_gate = c->safe_gate != 0;
        p.solve_precision = c->tf32 ? kda::precision::tf32 : kda::precision::fp32;
        const std::int64_t B = c->B, T = c->T, H = c->H, HV = c->HV, K = c->K, BT = c->BT;
        kda::inter_solve_args a;
        a.q = kda::tensor_ref{c->q, X, 4, {B, T, H, K}, kda::contiguous_strides({B, T, H, K}, 4)};
        a.k = kda::tensor_ref{c->k, X, 4, {B, T, H, K}, kda::contiguous_strides({B, T, H, K}, 4)};
        a.g = kda::tensor_ref{c->g, kda::dtype::fp32, 4, {B, T, HV, K}, kda::contiguous_strides({B, T, HV, K}, 4)};
        const kda::dtype bt = c->beta_fp32 ? kda::dtype::fp32 : X;
        a.beta = kda::tensor_ref{c->beta, bt, 3, {B, T, HV, 0}, kda::contiguous_strides({B, T, HV, 0}, 3)};
        a.Akkd = kda::tensor_ref{c->Akkd, kda::dtype::fp32, 4, {B, T, HV, 16}, kda::contiguous_strides({B, T, HV, 16}, 4)};
        a.Aqk = kda::mutable_tensor_ref{c->Aqk, X, 4, {B, T, HV, BT}, kda::contiguous_strides({B, T, HV, BT}, 4)};
        a.Akk = kda::mutable_tensor_ref{c->Akk, X, 4, {B, T, HV, BT}, kda::contiguous_strides({B, T, HV, BT}, 4)};
        if (c->num_seqs > 0) {
            const std::int64_t n1 = c->num_seqs + 1;
            a.cu_seqlens = kda::tensor_ref{c->cu_seqlens, kda::dtype::i64, 1, {n1, 0, 0, 0}, {1, 0, 0, 0}};
            a.cu_seqlens_host = kda::tensor_ref{c->cu_seqlens_host, kda::dtype::i64, 1, {n1, 0, 0, 0}, {1, 0, 0, 0}};
            if (c->num_chunks > 0) {
                a.chunk_indices = kda::tensor_ref{c->chunk_indices, kda::dtype::i64, 2, {c->num_chunks, 2, 0, 0}, {2, 1, 0, 0}};
                a.chunk_indices_host = kda::tensor_ref{c->chunk_indices_host, kda::dtype::i64, 2, {c->num_chunks, 2, 0, 0}, {2, 1, 0, 0}};
            }
        }
        r.p = p;
        r.a = a;
    }
    return r;
}

kda::cuda_backend backend_of(const kda_capi_call* c) {
    return {.stream = static_cast<cudaStream_t>(c->stream), .use_tma = (c->flags & KDA_CAPI_NO_TMA) == 0,
            .fuse_intra = (c->flags & KDA_CAPI_TWO_KERNELS) == 0};
}

template <class F>
int guarded(const kda_capi_call* c, char* err, int errlen, F&& f) {
    try {
        // chunk sizes 64 and 32 (kda's two), each at the backend's K slice (16) only: one slice
        // keeps the benchmark's build small
        if (c->BT != 64 && c->BT != 32) {
            if (err != nullptr && errlen > 0) std::snprintf(err, static_cast<std::size_t>(errlen), "kda_capi: BT must be 32 or 64, got %d", c->BT);
            return 2;
        }
        f(lower(c));
        return 0;
    } catch (const std::exception& e) {
        if (err != nullptr && errlen > 0) std::snprintf(err, static_cast<std::size_t>(errlen), "%s", e.what());
        return 1;
    }
}
}  // namespace

extern "C" int kda_capi_inter_solve(const kda_capi_call* c, char* err, int errlen) {
    return guarded(c, err, errlen, [&](const lowered& l) {
        if (c->BT == 32)
            kda::chunk_kda_inter_solve<kda::cuda_backend, 32, 16, 16>::run(backend_of(c), l.p, l.a);
        else
            kda::chunk_kda_inter_solve<kda::cuda_backend, 64, 16, 16>::run(backend_of(c), l.p, l.a);
    });
}

namespace {
kda::intra_args intra_args_of(const lowered& l) {
    kda::intra_args ia;
    ia.q = l.a.q, ia.k = l.a.k, ia.g = l.a.g, ia.beta = l.a.beta;
    ia.Aqk = l.a.Aqk, ia.Akk = l.a.Akk;
    ia.Akkd = kda::mutable_tensor_ref{const_cast<void*>(l.a.Akkd.data), l.a.Akkd.type, 4, l.a.Akkd.shape, l.a.Akkd.stride};
    ia.cu_seqlens = l.a.cu_seqlens, ia.cu_seqlens_host = l.a.cu_seqlens_host;
    ia.chunk_indices = l.a.chunk_indices, ia.chunk_indices_host = l.a.chunk_indices_host;
    return ia;
}
}  // namespace

extern "C" int kda_capi_intra(const kda_capi_call* c, char* err, int errlen) {
    return guarded(c, err, errlen, [&](const lowered& l) { kda::chunk_kda_intra(backend_of(c), l.p, intra_args_of(l)); });
}

extern "C" int kda_capi_intra_wy(const kda_capi_call* c, const kda_capi_wy* wy, char* err, int errlen) {
    return guarded(c, err, errlen, [&](const lowered& l) {
        kda::intra_args ia = intra_args_of(l);
        kda::intra_problem p = l.p;
        const kda::dtype X = l.a.q.type;
        const std::int64_t B = p.B, T = p.T, HV = p.HV, K = p.K, V = wy->V;
        auto out = [&](void* ptr, std::int64_t d) {
            return ptr == nullptr ? kda::mutable_tensor_ref{} : kda::mutable_tensor_ref{ptr, X, 4, {B, T, HV, d}, kda::contiguous_strides({B, T, HV, d}, 4)};
        };
        if (wy->v != nullptr) {
            p.V = V;
            ia.v = kda::tensor_ref{wy->v, X, 4, {B, T, HV, V}, kda::contiguous_strides({B, T, HV, V}, 4)};
        }
        ia.w = out(wy->w, K);
        ia.u = out(wy->u, V);
        ia.kg = out(wy->kg, K);
        ia.qg = out(wy->qg, K);
        kda::chunk_kda_intra(backend_of(c), p, ia);
    });
}

namespace {

__device__ float hash01(unsigned long long x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<float>((x ^ (x >> 31)) >> 40) * 0x1.0p-24f;
}

template <class X>
__global__ void fill_x(X* p, std::int64_t n, float lo, float span, unsigned long long seed) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = lo + span * hash01(seed * 0x100000000ull + static_cast<unsigned long long>(i));
        if constexpr (sizeof(X) == 4)
            p[i] = v;
        else if constexpr (std::is_same_v<X, __nv_bfloat16>)
            p[i] = __float2bfloat16(v);
        else
            p[i] = __float2half(v);
    }
}

/// g[b, t, hv, k] = -(t % BT + 1) * rate(hv, k): chunk-local, non-increasing inside a chunk.
__global__ void fill_g(float* g, std::int64_t BTk, std::int64_t T, std::int64_t HVK, int BT, unsigned long long seed) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < BTk; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t t = (i / HVK) % T, col = i % HVK;
        g[i] = -static_cast<float>(t % BT + 1) * (0.01f + 0.1f * hash01(seed * 0x100000000ull + static_cast<unsigned long long>(col)));
    }
}

/// Akkd row t: 0.05 * noise on columns j < t % 16, 0 elsewhere.
__global__ void fill_akkd(float* a, std::int64_t rows, unsigned long long seed) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * 16; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t j = i % 16;
        // rows are (b, t, hv); the position inside the sub-chunk is not known here: use (row % 16)
        const std::int64_t r = (i / 16) % 16;
        a[i] = j < r ? 0.05f * (hash01(seed * 0x100000000ull + static_cast<unsigned long long>(i)) - 0.5f) : 0.f;
    }
}

template <class X>
void fill_all(const kda_capi_call* c, unsigned long long seed, cudaStream_t s) {
    const std::int64_t nqk = c->B * c->T * c->H * c->K, ng = c->B * c->T * c->HV * c->K, nb = c->B * c->T * c->HV;
    const float a = 1.f / std::sqrt(static_cast<float>(c->K));
    fill_x<X><<<1024, 256, 0, s>>>(static_cast<X*>(const_cast<void*>(c->q)), nqk, -0.5f * a, a, seed + 1);
    fill_x<X><<<1024, 256, 0, s>>>(static_cast<X*>(const_cast<void*>(c->k)), nqk, -0.5f * a, a, seed + 2);
    fill_g<<<1024, 256, 0, s>>>(static_cast<float*>(const_cast<void*>(c->g)), ng, c->T, c->HV * c->K, c->BT, seed + 3);
    if (c->beta_fp32)
        fill_x<float><<<256, 256, 0, s>>>(static_cast<float*>(const_cast<void*>(c->beta)), nb, 0.1f, 0.8f, seed + 4);
    else
        fill_x<X><<<256, 256, 0, s>>>(static_cast<X*>(const_cast<void*>(c->beta)), nb, 0.1f, 0.8f, seed + 4);
    fill_akkd<<<1024, 256, 0, s>>>(static_cast<float*>(const_cast<void*>(c->Akkd)), nb, seed + 5);
}

}  // namespace

extern "C" int kda_capi_fill_inputs(const kda_capi_call* c, unsigned long long seed) {
    const auto s = static_cast<cudaStream_t>(c->stream);
    if (c->dtype == 0)
        fill_all<__nv_bfloat16>(c, seed, s);
    else if (c->dtype == 1)
        fill_all<__half>(c, seed, s);
    else
        fill_all<float>(c, seed, s);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
