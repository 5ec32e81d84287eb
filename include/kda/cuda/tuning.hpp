// kda/cuda/tuning.hpp: the chunk kernel's tuning choices, as data: one row per (step, precision,
// architecture, chunk size), each with the reason for its values.
//
// No choice in this table changes a result bit: the K slice only cuts the k8 steps of one
// sequential accumulation into groups, the pipeline depth, warp count and copy placement only
// change who computes what when, the occupancy hint only limits registers, and the merge order,
// flat units and flat build reorder independent work or compute values that are then dropped.
// (The one accuracy trade-off of the kernel, three partial products per k8 step in the fp32
// mode, is part of that mode's definition: mma.cuh.)
//
//   bt           the chunk size BT the row is for; 0: any (a row of the exact chunk size wins)
//   k_slice      K columns staged per pipeline stage: the K slice of kda::inter_solve and
//                kda::chunk_kda_intra on this backend (cuda_backend::default_bk)
//   stages       depth of the copy pipeline over K slices
//   warps        warps per block (4 wherever phase 6, the WY outputs, runs: 8 columns each)
//   min_blocks   __launch_bounds__ minimum resident blocks per SM (caps registers at
//                65536 / (32 warps min_blocks))
//   merge4       the merge of whole four-sub-chunk chunks as a 2 x 2 block inverse (phases.cuh)
//   late_copies  the next slice's tensor copies issued inside the build round, not before the wait
//   flat_units   the products over K as one branch-free sequence of unit slots
//   flat_build   the operand build as one branch-free sequence per task
//
// The sm_90 rows for any chunk size were measured on an H200 (bf16, K = 128, Google Benchmark with
// L2 flushed, every candidate beside the kernel of its time in the same call; docs/PERFORMANCE.md,
// "Tuning in effect" and "Measured and dropped"); every large benchmark shape ranked the candidates
// the same way. The chunk-size-32 rows were measured on an H100 (bench/compare_fla.py --bt 32, bf16,
// every candidate's library in the same call). The sm_80 rows repeat the sm_90 ones: no sm_80
// device was measured. A candidate is measured by building a benchmark binary from a copy of the
// headers with the row edited (bench/build_device_bins.sh takes one include directory per variant).
#pragma once

#include "../types.hpp"

namespace kda::cuda::tuning {

/// The two steps the chunk kernel runs (traits.cuh: inter_solve_step, fused_intra_step).
enum class kernel_step { inter_solve, fused_intra };

struct kernel_choice {
    kernel_step step;
    precision solve_precision;
    int arch;  // compute capability x 10 of the rows' targets: 80 (sm_80 .. sm_89), 90 (sm_90 and later)
    int bt;    // chunk size of the row; 0: any
    int k_slice, stages, warps, min_blocks;
    bool merge4, late_copies, flat_units, flat_build;
    const char* why;
};

inline constexpr kernel_choice table[] = {
    // step                       precision        arch BT  K  st  w  blk  merge4 late   flat_u flat_b
    {kernel_step::inter_solve, precision::tf32, 90, 0, 16, 3, 4, 5, true, true, false, false,
     "449 / 346 us on B8 T4096 H32 / B1 T8192 H96 (2 stages with early copies 457 / 354; flat units 1-3% slower: spills at 96 registers)"},
    {kernel_step::inter_solve, precision::fp32, 90, 0, 16, 2, 4, 5, false, false, true, false,
     "602 / 459 us (K slice 32 at 4 blocks: 636 / 483; late copies 1-2% slower; the 2 x 2 merge 5-7% slower on short sequences)"},
    {kernel_step::fused_intra, precision::tf32, 90, 0, 16, 3, 4, 4, true, true, false, true,
     "593 / 453 us (guarded build 596 / 455; 5 blocks at 96 registers 18-24% slower)"},
    {kernel_step::fused_intra, precision::fp32, 90, 0, 16, 3, 4, 4, false, true, true, true,
     "819 / 620 us (guarded units 862 / 654)"},
    {kernel_step::inter_solve, precision::tf32, 90, 32, 16, 3, 2, 10, true, true, false, false,
     "BT 32, H100: 447 / 345 us safe on B8 T4096 H32 / B1 T8192 H96; at K 37 210 us (4 warps at 7 blocks: 453 / 354, K 37 254; "
     "2 warps at 12 blocks 454 / 352, K 37 221; 4 warps at 5, 6, 8 blocks: 487 / 386, 455 / 355, 508 / 392)"},
    {kernel_step::inter_solve, precision::fp32, 90, 32, 16, 2, 2, 12, false, false, true, false,
     "BT 32, H100: 464 / 351 us safe (4 warps at 7 blocks 490 / 386; 2 warps at 10 blocks 450 / 348, but 3-9% slower on 12 of "
     "15 not-safe rows; 4 warps at 5, 6 blocks: 564 / 436, 531 / 407)"},
    {kernel_step::fused_intra, precision::tf32, 90, 32, 16, 3, 4, 7, true, true, false, true,
     "BT 32, H100: 552 / 422 us safe (4 blocks 675 / 520; 5: 621 / 474; 6: 566 / 435)"},
    {kernel_step::fused_intra, precision::fp32, 90, 32, 16, 3, 4, 6, false, true, true, true,
     "BT 32, H100: 737 / 572 us safe (4 blocks 799 / 606; 7: 756 / 571)"},
    {kernel_step::inter_solve, precision::tf32, 80, 0, 16, 3, 4, 5, true, true, false, false, "not measured on sm_80: the sm_90 row"},
    {kernel_step::inter_solve, precision::fp32, 80, 0, 16, 2, 4, 5, false, false, true, false, "not measured on sm_80: the sm_90 row"},
    {kernel_step::fused_intra, precision::tf32, 80, 0, 16, 3, 4, 4, true, true, false, true, "not measured on sm_80: the sm_90 row"},
    {kernel_step::fused_intra, precision::fp32, 80, 0, 16, 3, 4, 4, false, true, true, true, "not measured on sm_80: the sm_90 row"},
    {kernel_step::inter_solve, precision::tf32, 80, 32, 16, 3, 2, 10, true, true, false, false, "not measured on sm_80: the sm_90 row"},
    {kernel_step::inter_solve, precision::fp32, 80, 32, 16, 2, 2, 12, false, false, true, false, "not measured on sm_80: the sm_90 row"},
    {kernel_step::fused_intra, precision::tf32, 80, 32, 16, 3, 4, 7, true, true, false, true, "not measured on sm_80: the sm_90 row"},
    {kernel_step::fused_intra, precision::fp32, 80, 32, 16, 3, 4, 6, false, true, true, true, "not measured on sm_80: the sm_90 row"},
};

/// The architecture row this compilation pass reads: its target in device code, sm_90 in host
/// code (the host reads only the layout columns, which static_asserts keep equal across rows).
constexpr int compiled_arch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    return 80;
#else
    return 90;
#endif
}

/// The row of (step, precision, chunk size, arch): the largest row arch not above the target,
/// and of its rows the one of this chunk size if there is one, else the one for any (bt 0).
constexpr const kernel_choice& choice(kernel_step s, precision p, int bt, int arch = compiled_arch()) {
    const kernel_choice* best = nullptr;
    auto rank = [bt](const kernel_choice& c) { return c.arch * 2 + (c.bt == bt ? 1 : 0); };
    for (const kernel_choice& c : table)
        if (c.step == s && c.solve_precision == p && c.arch <= arch && (c.bt == 0 || c.bt == bt) &&
            (best == nullptr || rank(c) > rank(*best)))
            best = &c;
    return *best;  // every (step, precision) has an arch-80 row for any chunk size (static_asserts below)
}

/// The host launches with the layout of the sm_90 row: every row of a (step, precision, chunk
/// size) must agree on it (K slice, stages and warps fix the shared memory and the block size),
/// and every row of a (step, precision) on the K slice (the backend's default BK for every chunk
/// size).
constexpr bool same_layout_on_every_arch() {
    for (const kernel_choice& a : table)
        for (const kernel_choice& b : table) {
            if (a.step != b.step || a.solve_precision != b.solve_precision) continue;
            if (a.k_slice != b.k_slice) return false;
            if (a.bt == b.bt && (a.stages != b.stages || a.warps != b.warps)) return false;
        }
    return true;
}
constexpr bool has_every_row() {
    for (kernel_step s : {kernel_step::inter_solve, kernel_step::fused_intra})
        for (precision p : {precision::tf32, precision::fp32}) {
            bool found = false;
            for (const kernel_choice& c : table) found = found || (c.step == s && c.solve_precision == p && c.arch == 80 && c.bt == 0);
            if (!found) return false;
        }
    return true;
}
static_assert(has_every_row(), "The tuning table needs an arch-80 row for any chunk size for every (step, precision).");
static_assert(same_layout_on_every_arch(), "The rows of one (step, precision) must share the K slice, and those of one chunk size stages and warps (the host launches them).");

}  // namespace kda::cuda::tuning
