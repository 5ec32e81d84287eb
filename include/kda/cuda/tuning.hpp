// kda/cuda/tuning.hpp: the CUDA kernel's tuning choices, as constexpr functions in one place.
//
// None of these choices changes a result bit: the K slice width only cuts the k8 steps of one
// sequential accumulation into groups, and the occupancy hint only limits registers.
//
//   kernel_bk(BK)            K slice staged per pipeline stage (the dispatcher's BK is a hint)
//   stages                   depth of the cp.async pipeline over K slices
//   min_blocks(P, x, BT)     __launch_bounds__ minimum resident blocks per SM (register cap)
//
// How these were chosen (regenerate after a kernel change): build one benchmark binary per
// candidate through the KDA_CUDA_TUNE_* hooks below, e.g.
//   bash bench/build_device_bins.sh "cur:-Iinclude" "bk64:-Iinclude -DKDA_CUDA_TUNE_BK=64" "m3:-Iinclude -DKDA_CUDA_TUNE_MINB=3"
// run them side by side on the GPU in one call (STEPS=bench VARIANTS="cur bk64 m3" bash
// bench/run_device_bench.sh), read TBps per shape, and write the winners here.
// Check registers and spills with `nvcc -Xptxas -v` (bench/build_device_bins.sh prints them).
// The hooks exist for that measurement only; a normal build defines none of them.
#pragma once

#include "../types.hpp"

namespace kda::cuda::tuning {

/// K slice per stage. 32 keeps the shared memory of a BT = 64 block at 56 KB (two stages of raw
/// q, k (X) and g (fp32) slices 32 KB, one slice's built operands 19 KB, Akkd 4 KB, beta), so four
/// blocks fit in an SM beside the register limit; 64 would double the first two (3 blocks/SM).
/// Measured on an H200 with the second session's kernel (bf16, K = 128, B1 T8192 H96, not safe,
/// tf32; bench/results/2026-12-02_h200_tuning_sweep.txt): BK 32 724 us, BK 64 929 us; not
/// re-measured for the third session's kernel (the built operands need BK % 32 == 0).
constexpr int kernel_bk(int /*dispatcher_bk*/) {
#ifdef KDA_CUDA_TUNE_BK
    return KDA_CUDA_TUNE_BK;
#else
    return 32;
#endif
}

/// cp.async pipeline depth over the K slices (2: the next slice loads while this one computes).
constexpr int stages = 2;

/// Minimum resident blocks (of 128 threads) per SM asked of ptxas: 4 caps registers at 128 per
/// thread, which with 56 KB of shared memory per block is also the shared-memory limit. Measured
/// on an H200 (bf16, K = 128, Google Benchmark, L2 flushed), third session's kernel: the 3xTF32
/// (fp32) path at 4 blocks (<= 16 bytes of spills) against 3 (<= 161 registers, no spills): B1
/// T8192 H96 572 / 594 us, B8 T4096 H32 757 / 783 us, B1 T1024 H32 (graph) 34.0 / 41.3 us (not
/// safe). Second session's kernel, tf32: 4 blocks 724 us, 3 blocks 822 us, 2 blocks 819 us.
constexpr int min_blocks(precision p, int /*x_size*/, int BT) {
#ifdef KDA_CUDA_TUNE_MINB
    (void)p;
    (void)BT;
    return KDA_CUDA_TUNE_MINB;
#else
    (void)p;
    return BT > 64 ? 2 : 4;
#endif
}

}  // namespace kda::cuda::tuning
