// kda/cuda/traits.cuh: what one instantiation of the chunk kernel is (nvcc only): the step it
// runs, its parameters, and the constants derived from its tile configuration and tuning row.
//
// The chunk kernel (phases.cuh) runs two steps, named as types like the mode flags (variant):
//   inter_solve_step   reads Akkd; writes Aqk's off-diagonal blocks and Akk
//                      (kda::inter_solve, and the second kernel of the two-kernel intra stage);
//   fused_intra_step   computes the diagonal blocks too, so it reads only q, k, g and beta and
//                      writes Aqk's whole causal lower triangle and Akk (kda::chunk_kda_intra);
//   fused_intra_wy_step  the same plus phase 6, the WY outputs w, u, kg, qg (kernel_params::wy).
#pragma once

#include <cuda.h>  // CUtensorMap (a plain struct: nothing of the driver API is called here)

#include <cstdint>

#include "../params.hpp"
#include "../tile_config.hpp"
#include "../types.hpp"
#include "tuning.hpp"

namespace kda::cuda {

struct inter_solve_step {
    static constexpr tuning::kernel_step id = tuning::kernel_step::inter_solve;
    static constexpr bool diagonal_blocks = false;  // phase 1 computes the off-diagonal blocks only
    static constexpr bool reads_akkd = true;        // phase 3 inverts Akkd's blocks
    static constexpr bool wy = false;               // no phase 6
    static constexpr bool g_threads = false;        // g through the copy engine where q and k go (below)
};
/// The inter-solve step for joined q / k maps beside g staged by per-thread copies
/// (kernel_params::joined_g_threads): its own instantiation, so that the kernel of every other
/// layout keeps its code and registers (the loop in the same kernel cost that kernel's maps of rows
/// one more spilled value per K slice).
struct inter_solve_g_threads_step : inter_solve_step {
    static constexpr bool g_threads = true;
};
struct fused_intra_step {
    static constexpr tuning::kernel_step id = tuning::kernel_step::fused_intra;
    static constexpr bool diagonal_blocks = true;  // phase 1 computes the diagonal blocks too (L_ss, Aqk_ss)
    static constexpr bool reads_akkd = false;
    static constexpr bool wy = false;
    static constexpr bool g_threads = false;  // no instantiation with g per thread: per-thread copies of all three instead
};
/// The fused step with phase 6, the WY outputs (kernel_params::wy): its own instantiation, so that
/// the kernel without them keeps its code (the same tuning row as fused_intra_step).
struct fused_intra_wy_step : fused_intra_step {
    static constexpr bool wy = true;
};

/// Tensor maps of the tensor copy engine (sm_90): boxes of [BT rows, BK columns] of q, k, g and
/// [BT rows, BC] of Akkd (launch.cuh: make_tma_maps). Zero-filled past T and past K (maps that
/// join the heads: past the last head's columns).
struct tma_maps {
    CUtensorMap q, k, g, akkd;
};

/// What the kernel receives: the shared params plus what the launch learned about the layout.
template <class X>
struct kernel_params {
    inter_solve_params<X> p;
    tma_maps tm{};                   // valid when tma
    std::int64_t num_sequences = 0;  // varlen without chunk_indices: N, for the cu_seqlens search
    std::int64_t group = 1;          // value heads per q/k head, HV / H
    bool tma = false;                // q, k, g (and Akkd) through the tensor maps (sm_90 builds only)
    // with tma: q, k and g through maps that join each tensor's heads into one row axis (launch.cuh:
    // encode_joined), for rows whose length is not a multiple of 16 bytes. Head h's K columns are
    // read as if preceded by `shift` = (h * q's head stride) mod (16 / sizeof(X)) columns, so that
    // every box starts on a 16-byte boundary: slice s covers the head's columns [16 s - shift,
    // 16 s - shift + 16), and the columns outside [0, K) (the neighbouring heads' data) are zeroed
    // in shared memory before the build (chunk_item::mask_columns)
    bool joined = false;
    bool vec_q = false, vec_k = false, vec_g = false;  // 16-byte loads (cp.async) are legal for this tensor
    // otherwise: the width of the tensor's per-thread cp.async copies, 8 or 4 bytes (2: 16-bit runs from aligned words)
    std::uint8_t narrow_q = 0, narrow_k = 0, narrow_g = 0;
    bool pair_out = false;  // Aqk and Akk take stores of two adjacent elements (2 sizeof(X) aligned)
    bool vec_out = false;   // Aqk and Akk take 16-byte stores of 8 (2-byte X) or 4 (fp32) elements
    bool vec_akkd = false;  // Akkd rows may be copied as 16-byte vectors
    wy_params<X> wy{};      // the intra stage's optional WY outputs (phase 6); none by default
    // read by the launch, not the kernel: with joined, g is staged by per-thread 4-byte copies into
    // the same columns [16 s - shift, 16 s - shift + 16) of its value head, zero-filled outside
    // [0, K), where one shift does not start g's boxes on 16-byte boundaries too (GVA with K not a
    // multiple of 4: launch.cuh, joined_g_agrees); the copies complete with the slice's barrier.
    // Set for the inter-solve step only, which then launches inter_solve_g_threads_step's kernel.
    bool joined_g_threads = false;
};
/// The fused intra stage's factorisation bound (log2): a sub-chunk whose gates stay within
/// intra_factor_bound of its first and last rows (|g - gn_m| and |gl_m - g| on every valid row
/// and column) keeps every factor of its diagonal blocks inside 2^+-112 (normal fp32 / tf32, with
/// room for |q|, |k| down to 2^-14); FLA's lower-bounded safe gate (>= -5 nats per token) spans at
/// most 15 * 5 / ln 2 = 108.2 in a 16-row sub-chunk. Past it the block is evaluated term by term.
inline constexpr float intra_factor_bound = 112.f;


constexpr int round_up(int v, int m) { return (v + m - 1) / m * m; }

/// Derived constants of one instantiation: the tile configuration (BT, BC, BK = the K slice, NC,
/// NPAIR), the step, and the tuning row of (step, precision) for the architecture being compiled.
template <class X, class Cfg, class Step, precision P>
struct kernel_traits {
    using config = Cfg;
    static constexpr tuning::kernel_choice tune = tuning::choice(Step::id, P, Cfg::BT);
    static constexpr int BT = Cfg::BT, BC = Cfg::BC, NC = Cfg::NC, NPAIR = Cfg::NPAIR, BK = Cfg::BK;
    static constexpr int D = Step::diagonal_blocks ? 1 : 0;  // diagonal blocks in phase 1
    static constexpr int stages = tune.stages;
    static constexpr int warps = tune.warps;
    static constexpr int threads = 32 * warps;
    static constexpr int blocks = NPAIR + D * NC;          // Aqk / L blocks of phase 1 (pairs, then diagonal)
    static constexpr int units = 2 * blocks;               // phase-1 products of 16 x 8: (block, half of sj)
    static constexpr int units_per_warp = units > 0 ? (units + warps - 1) / warps : 1;
    static constexpr int a_first = 1 - D;                  // first sub-chunk with A operands
    // staging (phase 1): the raw slices, rows of BK elements (no padding: the build reads rows)
    static constexpr int x_ld = BK;  // s_q, s_k [BT, BK] in X
    static constexpr int g_ld = BK;  // s_g [BT, BK] in fp32
    static constexpr int x_bytes = BT * x_ld * static_cast<int>(sizeof(X));
    static constexpr int g_bytes = BT * g_ld * 4;
    static constexpr int staging_bytes = 2 * x_bytes + g_bytes;  // one stage
    // built operands of one slice (phase 1), fp32: the gated A operands of sub-chunks a_first ..
    // NC - 1 (q and k) in mma fragment order (chunk_kernel::a_slot), the up-gated k of sub-chunks
    // 0 .. NC - 2 + D as rows of BK with 16-byte chunks swizzled (op_at), the per-block column
    // factors as plain rows of BK
    static constexpr int op_rows = (NC - 1 + D) * BC;
    static constexpr int off_op_aq = 0, off_op_ak = op_rows * BK, off_op_ku = 2 * op_rows * BK, off_op_f = 3 * op_rows * BK;
    static constexpr int ops_bytes = (3 * op_rows + blocks) * BK * 4;
    static constexpr int phase1_bytes = stages * staging_bytes + ops_bytes;
    static constexpr int diag_per_warp = (NC + warps - 1) / warps;  // diagonal blocks per warp (phase 3)
    // build tasks per thread and slice (a task: two rows, four columns)
    static constexpr int build_iters = (BT * BK / 8 + threads - 1) / threads;
    // tiles (phases 2-5), [BC, BC] fp32 each
    static constexpr int t_ld = BC + 4;
    static constexpr int tile_floats = BC * t_ld;
    static constexpr int off_aqk = 0;                             // blocks scaled Aqk tiles (pairs, then diagonal)
    static constexpr int off_l = off_aqk + blocks * tile_floats;  // NPAIR beta-scaled L blocks
    static constexpr int off_ai = off_l + NPAIR * tile_floats;    // NC diagonal blocks: L_ss, then inverses
    static constexpr int off_aoff = off_ai + NC * tile_floats;    // NPAIR merged blocks Ai_ij
    static constexpr int off_tmp = off_aoff + NPAIR * tile_floats; // one scratch tile per warp
    static constexpr int tiles_bytes = (off_tmp + warps * tile_floats) * 4;
    // phase 6 (WY outputs, fused_intra_wy_step only): two staged slices [BT, wy_ld] fp32 beside the Ai
    // tiles, in the bytes of the Aqk and L tiles (stored by then) where they are enough, else past
    // the tiles
    static constexpr int wy_cols = 32;
    static constexpr int wy_ld = wy_cols + 8;  // B-operand loads by (k row tig, column gid) hit 32 banks
    static constexpr int wy_floats = BT * wy_ld;
    static constexpr int wy_bytes = 2 * wy_floats * 4;
    static constexpr int off_wy_bytes = off_ai * 4 >= wy_bytes ? 0 : tiles_bytes;
    static constexpr int wy_end = Step::wy ? off_wy_bytes + wy_bytes : 0;
    static constexpr int union_floor = phase1_bytes > tiles_bytes ? phase1_bytes : tiles_bytes;
    static constexpr int union_bytes = round_up(union_floor > wy_end ? union_floor : wy_end, 128);
    static constexpr int off_beta_bytes = union_bytes;                     // beta of the chunk's rows [BT] fp32
    static constexpr int off_flags_bytes = off_beta_bytes + BT * 4;        // one word: sub-chunks past the bound (fused intra)
    static constexpr int off_akkd_bytes = round_up(off_flags_bytes + 16, 128);  // Akkd of the chunk's rows [BT, BC] fp32 (inter-solve)
    static constexpr int off_bars_bytes = off_akkd_bytes + (Step::reads_akkd ? BT * BC * 4 : 0);  // stages + 1 mbarriers
    static constexpr int smem_bytes = off_bars_bytes + 8 * (stages + 1);

    static_assert(BC == 16, "The CUDA kernel's tiles are 16 x 16: BC must be 16.");
    static_assert(BK == 16 || BK == 32, "The CUDA kernel's K slice BK must be 16 or 32: at 64 the staging and built operands need over 130 KB "
                                        "of shared memory per block (one block per SM).");
    static_assert(stages >= 2 && stages <= 4, "The copy pipeline holds 2 to 4 stages.");
    static_assert((x_ld * sizeof(X)) % 16 == 0 && (g_ld * 4) % 16 == 0, "Staging rows must stay 16-byte aligned for the vector stores.");
    static_assert(x_bytes % 128 == 0 && staging_bytes % 128 == 0, "Each staging slice must start 128-byte aligned (tensor copies).");
    static_assert(units_per_warp <= 5, "Too many phase-1 units per warp for the register budget.");
    static_assert(BT <= threads, "Each chunk row's beta is prefetched by one thread.");
    static_assert(BC % 2 == 0, "Pair stores never straddle a sub-chunk boundary.");
    static_assert((t_ld * 4) % 16 == 0 && (off_ai * 4) % 16 == 0 && (tile_floats * 4) % 16 == 0, "Tile rows must be 16-byte aligned (float4 row loads).");
    static_assert((stages * staging_bytes) % 16 == 0, "The built operands must start 16-byte aligned.");
    static_assert(NC <= 8, "The flag word holds one bit per sub-chunk.");
    static_assert(!Step::wy || warps * 8 == wy_cols, "Phase 6 gives each warp 8 columns of a 32-column slice.");
    static_assert(NC * (NC + 1) / 2 * 2 * 32 * 4 <= (NC + NPAIR) * tile_floats, "Phase 6's A fragments fit in the Ai tiles.");
    static_assert(off_wy_bytes >= tiles_bytes || off_wy_bytes + wy_bytes <= off_ai * 4, "Phase 6's buffers stay clear of the Ai tiles.");
};

/// Per-block copy-pipeline state, kept across the work items of a block: the parity each mbarrier
/// waits for next (bit s: stage s; bit `stages`: the Akkd barrier).
struct pipe_state {
    unsigned parity = 0;
};

}  // namespace kda::cuda
