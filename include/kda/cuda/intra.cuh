// kda/cuda/intra.cuh: the intra stage (kda/intra.hpp) for kda::cuda_backend (include this; nvcc only).
//
//   #include <kda/cuda/intra.cuh>
//   kda::chunk_local_cumsum(kda::cuda_backend{stream}, cumsum_problem, cumsum_args);
//   kda::chunk_kda_intra(kda::cuda_backend{stream}, problem, args);      // one fused kernel
//   kda::chunk_kda_intra_diag(kda::cuda_backend{stream}, problem, diag_args);
//
// Every call is stream-ordered: kernel launches on the backend's stream, no allocation, no
// synchronisation (graph-capturable). chunk_kda_intra is one fused kernel by default (the
// inter-solve kernel of kernel.cuh with the diagonal blocks computed in it: q, k, g and beta are
// read once, Aqk and Akk written once; args.Akkd is optional and neither read nor written). With
// cuda_backend::fuse_intra = false it is two launches, the producer (writes Aqk's diagonal blocks
// and the Akkd workspace) and the inter-solve kernel (reads Akkd, writes the rest of Aqk and Akk),
// which needs args.Akkd ([B, T, HV, BC] fp32, device memory) because the backend never allocates.
// Varlen calls pass host copies of cu_seqlens (and chunk_indices) as for inter_solve;
// chunk_local_cumsum needs cu_seqlens_host likewise.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "../intra.hpp"
#include "../params.hpp"
#include "backend.hpp"
#include "inter_solve.cuh"
#include "intra_kernel.cuh"
#include "launch.cuh"

namespace kda {

namespace cuda {

/// Work-item count on the chunk axis and the chunk_indices the kernels read (null: searched).
struct chunk_grid {
    const void* ci = nullptr;
    bool ci64 = true;
    std::int64_t num_chunks = 0, num_sequences = 0;
};
inline chunk_grid make_chunk_grid(const tensor_ref& cu_seqlens, const tensor_ref& chunk_indices, std::int64_t T, int BT) {
    chunk_grid r;
    if (cu_seqlens.data == nullptr) return r;
    r.num_sequences = cu_seqlens.shape[0] - 1;
    if (chunk_indices.data != nullptr || chunk_indices.rank == 2) {
        r.ci = chunk_indices.data;
        r.ci64 = chunk_indices.type == dtype::i64;
        r.num_chunks = chunk_indices.shape[0];
    } else {
        r.num_chunks = varlen_slots(T, r.num_sequences, BT);
    }
    return r;
}

/// Launches the diagonal-block producer on validated arguments.
template <class X, bool SafeGate>
void launch_diag(const cuda_backend& be, const intra_problem& p, const intra_diag_args& a) {
    const chunk_grid cg = make_chunk_grid(a.cu_seqlens, a.chunk_indices, p.T, p.BT);
    diag_kernel_params<X> dp;
    dp.p = make_params<X>(p, detail::as_inter_solve(a), cg.ci, cg.ci64, cg.num_chunks);
    dp.Akkd = static_cast<float*>(a.Akkd.data);
    dp.num_sequences = cg.num_sequences;
    dp.NC = p.BT / diag_bc;
    dp.vec_q = vector_loads_ok(a.q, p.K);
    dp.vec_k = vector_loads_ok(a.k, p.K);
    dp.vec_g = vector_loads_ok(a.g, p.K);
    const std::int64_t items = dp.p.chunks.num_chunks * dp.NC * p.HV;
    if (items == 0) return;
    const std::int64_t blocks = (items + diag_warps - 1) / diag_warps;
    const auto grid = static_cast<unsigned>(blocks < INT_MAX ? blocks : INT_MAX);
    diag_kernel<X, SafeGate><<<grid, 32 * diag_warps, 0, be.stream>>>(dp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

/// Launches the gate cumsum on validated arguments.
template <class X>
void launch_cumsum(const cuda_backend& be, const cumsum_problem& p, const cumsum_args& a) {
    cumsum_kernel_params<X> cp;
    cp.g = static_cast<const X*>(a.g.data);
    cp.A_log = static_cast<const float*>(a.A_log.data);
    cp.dt_bias = static_cast<const float*>(a.dt_bias.data);
    cp.out = static_cast<float*>(a.g_out.data);
    cp.g_s = detail::strides3(a.g);
    cp.out_s = detail::strides3(a.g_out);
    cp.HV = p.HV;
    cp.K = p.K;
    cp.scale = static_cast<float>(p.scale);
    cp.lower_bound = static_cast<float>(p.lower_bound);
    cp.activation = p.activation;
    if (p.activation == gate_activation::none) cp.A_log = cp.dt_bias = nullptr;
    cp.chunks.BT = p.BT;
    cp.chunks.T = p.T;
    cp.chunks.chunks_per_row = (p.T + p.BT - 1) / p.BT;
    if (a.cu_seqlens.data != nullptr) {
        cp.chunks.cu_seqlens = a.cu_seqlens.data;
        cp.chunks.cu_is64 = a.cu_seqlens.type == dtype::i64;
        cp.num_sequences = a.cu_seqlens.shape[0] - 1;
        cp.chunks.num_chunks = varlen_slots(p.T, cp.num_sequences, p.BT);
    } else {
        cp.chunks.num_chunks = p.B * cp.chunks.chunks_per_row;
    }
    const std::int64_t items = cp.chunks.num_chunks * p.HV;
    if (items == 0) return;
    const auto grid = static_cast<unsigned>(items < INT_MAX ? items : INT_MAX);
    cumsum_kernel<X><<<grid, 128, 0, be.stream>>>(cp);
    KDA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda

template <int BT, int BC>
struct chunk_kda_intra_policy<cuda_backend, BT, BC> {
    template <class X, class Mode>
    static void launch_diag(const cuda_backend& be, const intra_problem& p, const intra_diag_args& a) {
        cuda::launch_diag<X, Mode::safe_gate>(be, p, a);
    }

    template <class X, class Mode>
    static void launch_intra(const cuda_backend& be, const intra_problem& p, const intra_args& a) {
        if (be.fuse_intra) {
            // one kernel for both flavours (the diagonal blocks' factorisation does not depend on
            // the flag: kernel.cuh); Akkd is not touched
            cuda::launch_inter_solve<X, tile_config<BT, BC, 64>, variant<false, Mode::solve_precision>, true>(be, p, detail::as_inter_solve(a));
            return;
        }
        KDA_CHECK(!a.Akkd.empty_view(), "kda::chunk_kda_intra: argument 'Akkd': the cuda backend's two-kernel path (fuse_intra = false) needs a "
                                        "workspace [B, T, HV, BC] = ["
                                            << p.B << ", " << p.T << ", " << p.HV << ", " << p.BC
                                            << "] fp32 in device memory (it never allocates); the fused path (the default) needs none");
        cuda::launch_diag<X, Mode::safe_gate>(be, p, detail::diag_part(a, a.Akkd));
        cuda::launch_inter_solve<X, tile_config<BT, BC, 64>, Mode>(be, p, detail::as_inter_solve(a));
    }
};

template <>
struct chunk_local_cumsum_impl<cuda_backend> {
    static void run(const cuda_backend& be, const cumsum_problem& p, const cumsum_args& a) {
        int device = 0;
        KDA_CUDA_CHECK(cudaGetDevice(&device));
        const char* fn = "kda::chunk_local_cumsum";
        cuda_backend::check_pointer("g", a.g, device, fn);
        cuda_backend::check_pointer("A_log", a.A_log, device, fn);
        cuda_backend::check_pointer("dt_bias", a.dt_bias, device, fn);
        cuda_backend::check_pointer("g_out", as_const(a.g_out), device, fn);
        cuda_backend::check_pointer("cu_seqlens", a.cu_seqlens, device, fn);
        detail::dispatch_type(cuda_backend::element_types{}, a.g.type, "cuda", [&]<class X>() { cuda::launch_cumsum<X>(be, p, a); });
    }
};

}  // namespace kda
