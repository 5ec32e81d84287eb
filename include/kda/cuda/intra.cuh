// kda/cuda/intra.cuh: the intra stage (kda/intra.hpp) for kda::cuda_backend (include this; nvcc only).
//
//   #include <kda/cuda/intra.cuh>
//   kda::chunk_local_cumsum(kda::cuda_backend{stream}, cumsum_problem, cumsum_args);
//   kda::chunk_kda_intra(kda::cuda_backend{stream}, problem, args);      // one fused kernel
//   kda::chunk_kda_intra_diag(kda::cuda_backend{stream}, problem, diag_args);
//
// Every call is stream-ordered: kernel launches on the backend's stream, no allocation, no
// synchronisation (graph-capturable). chunk_kda_intra is one fused kernel by default (the chunk
// kernel of phases.cuh running fused_intra_step: the diagonal blocks computed beside the
// inter-solve products; q, k, g and beta are read once, Aqk and Akk written once; args.Akkd is
// optional and neither read nor written). With
// cuda_backend::fuse_intra = false it is two launches, the producer (writes Aqk's diagonal blocks
// and the Akkd workspace) and the inter-solve kernel (reads Akkd, writes the rest of Aqk and Akk),
// which needs args.Akkd ([B, T, HV, BC] fp32, device memory) because the backend never allocates.
// Varlen calls pass host copies of cu_seqlens (and chunk_indices) as for inter_solve;
// chunk_local_cumsum needs cu_seqlens_host likewise.
#pragma once

#include <cuda_runtime.h>

#include "../intra.hpp"
#include "../tile_config.hpp"
#include "backend.hpp"
#include "inter_solve.cuh"
#include "launch.cuh"

namespace kda {

template <int BT, int BC>
struct chunk_kda_intra_policy<cuda_backend, BT, BC> {
    /// The chunk kernel's tiling: the backend's K slice (tuning.hpp).
    using config = tile_config<BT, BC, cuda_backend::k_slice>;

    template <class X, class Mode>
    static void launch_diag(const cuda_backend& be, const intra_problem& p, const intra_diag_args& a) {
        cuda::launch_diag<X, Mode::safe_gate>(be, p, a);
    }

    template <class X, class Mode>
    static void launch_intra(const cuda_backend& be, const intra_problem& p, const intra_args& a) {
        if (a.wy() && p.T > 0) {
            KDA_CHECK(be.fuse_intra, "kda::chunk_kda_intra: argument 'w': the WY outputs (w, u, kg, qg) come from the cuda backend's fused kernel "
                                     "only; its two-kernel path (fuse_intra = false) does not form them");
            int device = 0;
            KDA_CUDA_CHECK(cudaGetDevice(&device));
            const char* fn = "kda::chunk_kda_intra";
            cuda_backend::check_pointer("v", a.v, device, fn);
            cuda_backend::check_pointer("w", as_const(a.w), device, fn);
            cuda_backend::check_pointer("u", as_const(a.u), device, fn);
            cuda_backend::check_pointer("kg", as_const(a.kg), device, fn);
            cuda_backend::check_pointer("qg", as_const(a.qg), device, fn);
        }
        if (be.fuse_intra) {
            // one kernel for both flavours (the diagonal blocks' factorisation does not depend on
            // the flag: phases.cuh); Akkd is not touched
            using fused = variant<false, Mode::solve_precision>;
            if (a.wy())
                cuda::launch_chunk_kernel<X, config, fused, cuda::fused_intra_wy_step>(be, p, detail::as_inter_solve(a), make_wy_params<X>(p, a));
            else
                cuda::launch_chunk_kernel<X, config, fused, cuda::fused_intra_step>(be, p, detail::as_inter_solve(a));
            return;
        }
        KDA_CHECK(!a.Akkd.empty_view(), "kda::chunk_kda_intra: argument 'Akkd': the cuda backend's two-kernel path (fuse_intra = false) needs a "
                                        "workspace [B, T, HV, BC] = ["
                                            << p.B << ", " << p.T << ", " << p.HV << ", " << p.BC
                                            << "] fp32 in device memory (it never allocates); the fused path (the default) needs none");
        cuda::launch_diag<X, Mode::safe_gate>(be, p, detail::diag_part(a, a.Akkd));
        cuda::launch_chunk_kernel<X, config, Mode, cuda::inter_solve_step>(be, p, detail::as_inter_solve(a));
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
