// kda/cuda/tuning.hpp: the CUDA kernel's tuning choices, as constexpr functions in one place.
//
// None of the first four choices changes a result bit: the K slice width only cuts the k8 steps
// of one sequential accumulation into groups, the pipeline depth and warp count only change who
// computes what when, and the occupancy hint only limits registers. The fifth is an accuracy
// trade-off of the fp32 precision mode (documented at its function).
//
//   kernel_bk(BK, P, intra)      K slice staged per pipeline stage (the dispatcher's BK is a hint)
//   stages(P, intra)             depth of the copy pipeline over K slices
//   warps(intra)                 warps per block
//   min_blocks(P, x, BT, intra)  __launch_bounds__ minimum resident blocks per SM (register cap)
//   fp32_lo_lo()                 fp32 mode: the fourth (lo lo) tensor-core product over K
//   merge4(P)                    the merge of whole chunks as a 2 x 2 block inverse (NC = 4)
//   late_copies(P, intra)        where in a K slice's round the next tensor copies are issued
//   flat_units(P, intra)         the products over K as one branch-free sequence of unit slots
//   flat_build(P, intra)         the operand build as one branch-free sequence per task
//
// Only fp32_lo_lo changes results; every other choice gives the same bits (the last four reorder
// independent work or compute values that are then dropped).
//
// `intra` is the fused intra-stage kernel (chunk_kda_intra: the diagonal blocks computed in the
// same kernel), false the inter-solve step.
//
// How these were chosen (regenerate after a kernel change): build one benchmark binary per
// candidate through the KDA_CUDA_TUNE_* hooks below, e.g.
//   bash bench/build_device_bins.sh "cur:-Iinclude" "bk32:-Iinclude -DKDA_CUDA_TUNE_BK=32"
//        "s3m5:-Iinclude -DKDA_CUDA_TUNE_STAGES=3 -DKDA_CUDA_TUNE_MINB=5 -DKDA_CUDA_TUNE_INTRA_MINB=4"
//   (one command line)
// run them side by side on the GPU in one call (STEPS=bench VARIANTS="cur bk32 s3m5" bash
// bench/run_device_bench.sh), read the time or TBps per shape, and write the winners into the
// table below (docs/PERFORMANCE.md, "Tuning in effect"). A hook applies to every
// precision (KDA_CUDA_TUNE_BK, _STAGES) or to one step (_MINB: inter-solve, _INTRA_MINB: fused);
// KDA_CUDA_TUNE_LO_LO=1 restores the fp32 mode's fourth product. A build-task permutation
// against bank conflicts (measured 2.4% at BK 32 tf32, nothing at BK 16) was dropped.
// Check registers and spills with `nvcc -Xptxas -v` (bench/build_device_bins.sh prints them).
// The hooks exist for that measurement only; a normal build defines none of them.
#pragma once

#include "../types.hpp"

namespace kda::cuda::tuning {

// The table (measured on an H200, bf16, K = 128, Google Benchmark with L2 flushed, every candidate
// beside the kernel of its time in the same call; docs/PERFORMANCE.md, "Tuning in effect" and
// "Measured and dropped"):
//
//   step          precision  K slice  stages  copies  blocks/SM (registers)  units / build  B8 T4096 H32 / B1 T8192 H96
//   inter-solve   tf32       16       3       late    5 (<= 102, 96 used)    guarded        449 / 346 us (2 stages, early: 457 / 354)
//   inter-solve   fp32       16       2       early   5 (<= 102, 96 used)    flat / guarded 602 / 459 us (BK 32, 4 blocks, guarded: 636 / 483)
//   intra (fused) tf32       16       3       late    4 (<= 128)             guarded / flat 593 / 453 us (guarded build: 596 / 455)
//   intra (fused) fp32       16       3       late    4 (<= 128)             flat / flat    819 / 620 us (guarded units: 862 / 654)
//
// Rejected: flat units for tf32 (1-3% slower in both steps: 24-28 bytes of spills at 96
// registers), a flat build for the inter-solve step (2.5% slower: more instructions for warps
// 0 and 3), 6 blocks per SM (80 registers: 40-50% slower), 5 blocks for the fused kernel (96
// registers: 18-24% slower), 4 stages (6-10% slower), the 2 x 2 merge in fp32 mode (+-1% on the
// large shapes, 5-7% slower on 256 short sequences and the graph shape), and two diagonal
// inverses per warp with the off-diagonal Aqk stores on the warps left free (0-3% slower).
//
// Every large benchmark shape ranked the candidates the same way, so the table is keyed by step
// and precision only. Why: a block's phases are serial (copies, build, products, solve, stores),
// so throughput comes from co-resident blocks; a 16-column slice halves the staging and built
// operands (smaller shared memory and fewer live registers per block), which buys the fifth block
// for both inter-solve modes and the fourth for the fused kernel.

namespace detail {
constexpr bool is_tf32(precision p) { return p == precision::tf32; }
}  // namespace detail

/// K slice per pipeline stage (the dispatcher's BK is only a hint): 16 or a multiple of 32. 16
/// everywhere: the fp32 inter-solve step at 16 columns and 5 blocks per
/// SM (with flat units) is 2.5-7% faster than at 32 and 4 blocks, but for the graph shape (1-3%
/// slower).
constexpr int kernel_bk(int /*dispatcher_bk*/, precision p, bool intra) {
#ifdef KDA_CUDA_TUNE_BK
    (void)p;
    (void)intra;
    return KDA_CUDA_TUNE_BK;
#else
    (void)p;
    (void)intra;
    return 16;
#endif
}

/// Copy pipeline depth over the K slices (slices s + 1 .. s + stages - 1 load while s computes).
/// 3 for the tf32 inter-solve step (with late copies: 0.6-3% faster
/// than 2 stages with early copies; 3 stages alone 1-2.5%); fp32 keeps 2 (3 stages measured equal).
constexpr int stages(precision p, bool intra) {
#ifdef KDA_CUDA_TUNE_STAGES
    (void)p;
    (void)intra;
    return KDA_CUDA_TUNE_STAGES;
#else
    return intra || detail::is_tf32(p) ? 3 : 2;
#endif
}

/// Measurement only (never defined in a normal build: the results are then wrong): phases the
/// kernel leaves out, to time the others by difference. Bits: 1 the diagonal inverses and the
/// merge, 2 the stores, 4 the operand build, 8 the products.
constexpr int skip_phases() {
#ifdef KDA_CUDA_TUNE_SKIP
    return KDA_CUDA_TUNE_SKIP;
#else
    return 0;
#endif
}

/// fp32 precision: whether each k8 step of the products over K also adds the lo lo partial
/// product (4 tensor-core products instead of 3; the merge and the two-kernel producer always take
/// all four). Off: leaving it out made the fp32 mode 4-7% faster and moved the worst fp32-data
/// errors of the conformance grids and golden cases by a few percent either way (bf16 / fp16: no
/// change, at the rounding floor).
constexpr bool fp32_lo_lo() {
#ifdef KDA_CUDA_TUNE_LO_LO
    return KDA_CUDA_TUNE_LO_LO != 0;
#else
    return false;
#endif
}

/// The merge of whole four-sub-chunk chunks (kernel.cuh): true, a 2 x 2 block inverse in three
/// rounds of at most two tile products per warp; false, by distance from the diagonal (2 + 3 + 4
/// products on warp 0). Same products in all, in another order. Measured (H200, bf16, K = 128, not
/// safe, us; distance order -> 2 x 2 merge with late copies for every step): tf32 B8 T4096 H32 468 -> 458, B1 T8192 H96 362
/// -> 358, fused 650 -> 614; fp32 644 -> 659, fused 854 -> 875 (slower: four tensor-core products
/// per k8 step in the merge, 128 registers). Hook KDA_CUDA_TUNE_MERGE4.
constexpr bool merge4(precision p) {
#ifdef KDA_CUDA_TUNE_MERGE4
    (void)p;
    return KDA_CUDA_TUNE_MERGE4 != 0;
#else
    return detail::is_tf32(p);
#endif
}

/// Where thread 0 issues the tensor copies of slice s + stages - 1 (kernel.cuh, products):
/// false, before waiting for slice s (its stage has been free since the products of s - 1
/// started); true, after the barrier that opens the build of s, with the column factors moved
/// from warp 0 to the last warp so that warp 0's build share carries the copies instead of its
/// products (every warp has the same number of product units). Measured: late is 2.8-3.1% faster for the fused kernel (3 stages), 2-5% slower for the inter-solve
/// step at 2 stages (the copy of s + 1 then starts only once s has landed), no better at 3.
/// With the unit codes of kernel.cuh, late copies at 3 stages made the tf32
/// inter-solve step 0.6-3% faster than early ones at 2 (B8 T4096 H32 464 -> 451 us); fp32 stays
/// early at 2 stages (late: 1-2% slower). Hook KDA_CUDA_TUNE_LATE_COPIES.
constexpr bool late_copies(precision p, bool intra) {
#ifdef KDA_CUDA_TUNE_LATE_COPIES
    (void)p;
    (void)intra;
    return KDA_CUDA_TUNE_LATE_COPIES != 0;
#else
    return intra || detail::is_tf32(p);
#endif
}

/// Whether a warp computes every one of its unit slots in the products over K, valid or not
/// (kernel.cuh, slice_products): one branch-free sequence of loads and tensor-core products per
/// k16 step instead of a break after the last valid unit. Measured: fp32 2%
/// faster in the inter-solve step and 5% in the fused kernel (its longer chains per unit
/// overlap); tf32 1-3% slower (spills at the register cap). Hook KDA_CUDA_TUNE_FLAT_UNITS.
constexpr bool flat_units(precision p, bool intra) {
#ifdef KDA_CUDA_TUNE_FLAT_UNITS
    (void)p;
    (void)intra;
    return KDA_CUDA_TUNE_FLAT_UNITS != 0;
#else
    (void)intra;
    return !detail::is_tf32(p);
#endif
}

/// Whether every thread computes both parts of its operand-build task (the gated A operands and
/// the up-gated ku rows) whatever its sub-chunk, storing only the parts that sub-chunk has
/// (kernel.cuh, build_operands): one branch-free sequence instead of two guarded ones. In the
/// inter-solve step the first sub-chunk has no A rows and the last no ku rows, so flat, warps 0
/// and 3 compute what they drop: 2.5% slower. The fused kernel's sub-chunks have
/// both parts but in partial chunks; there the flat form measured 0.5-1% faster (fewer branches).
/// Hook KDA_CUDA_TUNE_FLAT_BUILD.
constexpr bool flat_build(precision p, bool intra) {
#ifdef KDA_CUDA_TUNE_FLAT_BUILD
    (void)p;
    (void)intra;
    return KDA_CUDA_TUNE_FLAT_BUILD != 0;
#else
    (void)p;
    return intra;
#endif
}

/// Warps per block (hooks KDA_CUDA_TUNE_WARPS: inter-solve, _INTRA_WARPS: fused). The inter-solve
/// step: 4 (12 units of 16 x 8 per chunk, 3 per warp; measured: 8 warps were slower on every shape,
/// the one-wave B1 T1024 H32 graph included, 29.0 -> 33.1-34.9 us, at 64-80 registers with spills). The fused
/// intra stage has 20 units (the diagonal blocks too): 4 warps of 5 units (measured: 8 warps of 3
/// at 2 blocks per SM were 17% slower on B8 T4096 H32, 838 against 714 us, both at BK 32).
constexpr int warps(bool intra) {
#if defined(KDA_CUDA_TUNE_INTRA_WARPS) || defined(KDA_CUDA_TUNE_WARPS)
#ifndef KDA_CUDA_TUNE_INTRA_WARPS
#define KDA_CUDA_TUNE_INTRA_WARPS 4
#endif
#ifndef KDA_CUDA_TUNE_WARPS
#define KDA_CUDA_TUNE_WARPS 4
#endif
    return intra ? KDA_CUDA_TUNE_INTRA_WARPS : KDA_CUDA_TUNE_WARPS;
#else
    return intra ? 4 : 4;
#endif
}

/// Minimum resident blocks per SM asked of ptxas (caps registers at 65536 / (threads x blocks));
/// the table above. BT = 32 blocks are smaller and take the same caps. Measured: 6 blocks for
/// the inter-solve step (80 registers, 112-236 bytes of spills) measured 40-50% slower, 5 for the
/// fused kernel (96 registers) 18-24% slower.
constexpr int min_blocks(precision p, int /*x_size*/, int BT, bool intra) {
    (void)BT;
    if (intra) {
#ifdef KDA_CUDA_TUNE_INTRA_MINB
        (void)p;
        return KDA_CUDA_TUNE_INTRA_MINB;
#else
        (void)p;
        return warps(true) >= 8 ? 2 : 4;
#endif
    }
#ifdef KDA_CUDA_TUNE_MINB
    (void)p;
    return KDA_CUDA_TUNE_MINB;
#else
    (void)p;
    return 5;
#endif
}

}  // namespace kda::cuda::tuning
