// kda/detail/schedule.hpp: the tiled inter-solve algorithm of one (chunk, value head), written once
// as phases over a backend's tile-ops policy. No Eigen, no CUDA: each backend supplies the ops.
// The phases carry the names of the CUDA kernel's (cuda/phases.cuh: chunk_item): products,
// park_products, diagonal_inverses, merge, store_outputs; the block indexing, masks and gate
// factorisations are detail/blocks.hpp's, the merge orders detail/merge.hpp's.
//
// For a chunk of n <= BT rows cut into sub-chunks s = 0 .. NS-1 (NS = ceil(n / BC)):
//   1. off-diagonal products, K in BK slices, with the reference gate gn_s = g[first row of s]:
//        gqn = 2^(g_si - gn_si) (rows past n -> 0), qg = q_si gqn, kg = k_si gqn
//        kgt = k_sj 2^(gn_si - g_sj), factorised as 2^(gn_si - gn_sj+1) 2^(gn_sj+1 - g_sj)
//        (blocks.hpp: gate_split::next_first):
//          ku_sj = k_sj 2^(gn_sj+1 - g_sj) once per sj (the adjacent pair's operand itself),
//          f = 2^(gn_si - gn_sj+1) a [BK] vector per farther pair
//        (all exponents <= 0 for decaying gates: si > sj, and sub-chunk sj + 1 starts after sj)
//        Aqk_ij += qg kgt^T,  L_ij += kg kgt^T               for every si > sj
//      Per K slice that is NS - 1 tiles of 2^x for gqn and NS - 1 for ku, not one per pair.
//   2. Aqk_ij *= scale (stored); row r of L_ij *= beta[t_r]
//   3. diagonal inverses Ai_ss = (I + L_ss)^-1 by forward substitution of Akkd (or Akkd itself
//      in safe-gate mode)
//   4. block merge, by distance d = i - j from the diagonal outwards:
//        Ai_ij = -Ai_ii (sum_{m=j}^{i-1} L_im Ai_mj)
//   5. store the lower block triangle of Akk.
//
// The tile-ops policy `Ops` provides (slice = [BC, BK], cslice = a read-only [BC, BK] (on the CPU a
// view of the staged rows), tslice = [BK, BC] (a transposed slice), vec = [BK], tile = [BC, BC],
// all in the accumulator type):
//   int  rows(s)                       valid rows of sub-chunk s (0 .. BC)
//   int  num_k()                       K
//   cslice load_q(s, k0), load_k(s, k0), load_g(s, k0)  rows >= rows(s), columns >= K read as 0
//   vec  first_row(cslice)
//   slice decay_down(g, gn, s)         2^(g - gn) on valid rows of s, 0 elsewhere (the seed's b_gqn)
//   slice mul(cslice x, slice y)       elementwise product
//   tslice gate_up(x, g, gn)           (x 2^(gn - g))^T
//   vec  pair_gate(gn, gr)             2^(gn - gr)
//   tslice scale_k(xt, f)              row k of xt times f[k]
//   tile zero()
//   void mma(tile& acc, a, bt)         acc += a bt   ([BC, BK] x [BK, BC])
//   void store_aqk(tile, si, sj)       scaled by the call's scale
//   void scale_rows_beta(tile&, si)
//   tile load_diag(s)                  not safe: strict lower part of Akkd's block; safe: lower part
//                                      incl. diagonal. Rows/columns past rows(s) are 0.
//   void invert_unit_lower(tile&, s)   strictly lower L_ss -> (I + L_ss)^-1 (not safe-gate only)
//   tile mm(a, b), void mm_acc(tile& c, a, b)  (c += a b), tile neg(a)
//   void store_akk(tile, si, sj)       writes rows < rows(si), columns < rows(sj)
#pragma once

#include <cstdint>

#include "../tile_config.hpp"
#include "blocks.hpp"
#include "merge.hpp"

namespace kda::detail {

/// One (chunk, value head) work item as a struct of phases, run in order by run().
template <class Cfg, class Mode, class Ops>
struct chunk_schedule {
    static constexpr int NC = Cfg::NC, BK = Cfg::BK, NP = Cfg::NPAIR > 0 ? Cfg::NPAIR : 1;
    using tile = typename Ops::tile;
    using slice = typename Ops::slice;
    using cslice = typename Ops::cslice;

    Ops& ops;
    int NS = 0;       // sub-chunks holding at least one row
    tile b_Aqk[NP];   // the seed's b_Aqk10 .. b_Aqk32, indexed by pair
    tile b_Akk[NP];   // L_ij (products over K, then beta-scaled)
    tile b_Ai[NC];    // b_Ai[s] = Ai_ss
    tile b_Aoff[NP];  // b_Aoff[pair(i, j)] = Ai_ij

    explicit chunk_schedule(Ops& o) : ops(o) {
        while (NS < NC && ops.rows(NS) > 0) ++NS;
    }

    [[nodiscard]] const tile& Ai(int i, int j) const { return i == j ? b_Ai[i] : b_Aoff[Cfg::pair(i, j)]; }

    /// Phase 1: the off-diagonal products over K, gated to each query sub-chunk's first row.
    void products() {
        for (int p = 0; p < Cfg::NPAIR; ++p) b_Aqk[p] = b_Akk[p] = ops.zero();
        if (NS <= 1) return;
        using tslice = typename Ops::tslice;
        using vec = typename Ops::vec;
        tslice b_ku[NC];  // ku_sj^T = (k_sj 2^(gn_sj+1 - g_sj))^T, for sj < NS - 1
        vec b_gn[NC];     // gn_s, for s >= 1
        for (int k0 = 0; k0 < ops.num_k(); k0 += BK) {
            for (int si = 1; si < NS; ++si) {
                const cslice b_g = ops.load_g(si, k0);                                               // [BC, BK]
                b_gn[si] = ops.first_row(b_g);                                                       // [BK]
                b_ku[si - 1] = ops.gate_up(ops.load_k(si - 1, k0), ops.load_g(si - 1, k0), b_gn[si]);  // [BK, BC]
                const slice b_gqn = ops.decay_down(b_g, b_gn[si], si);                               // [BC, BK]
                const slice b_qg = ops.mul(ops.load_q(si, k0), b_gqn);                               // [BC, BK]
                const slice b_kg = ops.mul(ops.load_k(si, k0), b_gqn);                               // [BC, BK]
                for (int sj = 0; sj < si; ++sj) {
                    auto accumulate = [&](const tslice& b_kgt) {
                        ops.mma(b_Aqk[Cfg::pair(si, sj)], b_qg, b_kgt);
                        ops.mma(b_Akk[Cfg::pair(si, sj)], b_kg, b_kgt);
                    };
                    if (sj + 1 == si)
                        accumulate(b_ku[sj]);  // f = 1
                    else
                        accumulate(ops.scale_k(b_ku[sj], ops.pair_gate(b_gn[si], b_gn[sj + 1])));  // [BK, BC]
                }
            }
        }
    }

    /// Phase 2: store Aqk's off-diagonal blocks (scaled); beta-scale the rows of the L blocks.
    void park_products() {
        for (int si = 1; si < NS; ++si)
            for (int sj = 0; sj < si; ++sj) {
                ops.store_aqk(b_Aqk[Cfg::pair(si, sj)], si, sj);
                ops.scale_rows_beta(b_Akk[Cfg::pair(si, sj)], si);
            }
    }

    /// Phase 3: the diagonal inverses (I + L_ss)^-1 of Akkd's blocks (safe gate: Akkd's lower part
    /// is the inverse already).
    void diagonal_inverses() {
        for (int s = 0; s < NS; ++s) {
            b_Ai[s] = ops.load_diag(s);
            if constexpr (!Mode::safe_gate) ops.invert_unit_lower(b_Ai[s], s);
        }
    }

    /// Phase 4: the block merge, by distance from the diagonal (merge.hpp).
    void merge() {
        merge_by_distance(
            ops, NS, [&](int i, int j) -> const tile& { return b_Akk[Cfg::pair(i, j)]; }, [&](int i, int j) -> const tile& { return Ai(i, j); },
            [&](int i, int j, const tile& t) { b_Aoff[Cfg::pair(i, j)] = t; });
    }

    /// Phase 5: store the lower block triangle of Akk.
    void store_outputs() {
        for (int i = 0; i < NS; ++i)
            for (int j = 0; j <= i; ++j) ops.store_akk(Ai(i, j), i, j);
    }

    void run() {
        products();
        park_products();
        diagonal_inverses();
        merge();
        store_outputs();
    }
};

template <class Cfg, class Mode, class Ops>
void inter_solve_chunk(Ops& ops) {
    chunk_schedule<Cfg, Mode, Ops>(ops).run();
}

}  // namespace kda::detail
