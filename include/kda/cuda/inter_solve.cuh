// kda/cuda/inter_solve.cuh: chunk_kda_inter_solve for kda::cuda_backend (include this; nvcc only).
//
//   #include <kda/cuda/inter_solve.cuh>
//   kda::inter_solve(kda::cuda_backend{stream}, problem, args);      // runtime BT, BK = cuda_backend::k_slice
//   kda::chunk_kda_inter_solve<kda::cuda_backend, 64, 16, 16>::run(kda::cuda_backend{stream}, problem, args);
//
// Writes Aqk's off-diagonal blocks and the lower block triangle of Akk = (I + L)^-1 (see
// ALGORITHM.md) with one kernel launch on the stream. Every tensor must be device-accessible
// memory (checked, naming the argument); varlen calls pass host copies of cu_seqlens (and
// chunk_indices, when given) in args.cu_seqlens_host / chunk_indices_host for validation. Without
// chunk_indices the kernel maps work items onto sequences by a search over cu_seqlens (no hidden
// allocation). Both precisions are honoured: tf32 (FLA's products) and fp32 (every product to fp32).
#pragma once

#include "../inter_solve.hpp"
#include "../tile_config.hpp"
#include "backend.hpp"
#include "launch.cuh"

namespace kda {

template <int BT, int BC, int BK>
struct chunk_kda_inter_solve<cuda_backend, BT, BC, BK> {
    using config = tile_config<BT, BC, BK>;
    static_assert(BK == 16 || BK == 32, "kda::chunk_kda_inter_solve<cuda_backend, BT, BC, BK>: the CUDA kernel's K slice BK must be 16 (the tuned "
                                        "one, cuda_backend::k_slice) or 32; at 64 a block needs over 130 KB of shared memory.");

    /// Validates, then launches. See kda/inter_solve.hpp.
    static void run(const cuda_backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
        detail::run_policy<chunk_kda_inter_solve, cuda_backend, BT, BC>(be, p, a);
    }

    /// Launches on validated arguments (called by the dispatcher).
    template <class X, class Mode>
    static void launch(const cuda_backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
        cuda::launch_chunk_kernel<X, config, Mode, cuda::inter_solve_step>(be, p, a);
    }
};

}  // namespace kda
