// kda/detail/merge.hpp: phase 4 of the tiled algorithm, the block merge of Akk = (I + L)^-1, in
// its two orders, written once over a backend's tile products (no Eigen, no CUDA).
//
// Given the diagonal inverses Ai_ss = (I + L_ss)^-1 and the beta-scaled blocks L_ij (i > j), the
// blocks below the diagonal are
//   Ai_ij = -Ai_ii (sum_{m=j}^{i-1} L_im Ai_mj).
// merge_by_distance evaluates them by distance d = i - j from the diagonal outwards (the schedule's
// order; the CPU, and the CUDA kernel for partial chunks and in fp32 mode). merge_2x2 evaluates a
// whole chunk of four sub-chunks as a 2 x 2 block inverse of its 32 x 32 halves (the CUDA kernel in
// tf32 mode, phases.cuh: merge4, which deals these products to four warps in three rounds). Both
// perform the same 16 tile products; tests/test_core.cpp checks them against each other.
//
// `ops` provides mm(a, b), mm_acc(c, a, b) (c += a b) and neg(a); L(i, j) and Ai(i, j) return the
// blocks (Ai(i, j) for i > j only after set(i, j, tile) stored it).
#pragma once

namespace kda::detail {

template <class Ops, class LFn, class AiFn, class SetFn>
void merge_by_distance(Ops& ops, int NS, LFn&& L, AiFn&& Ai, SetFn&& set) {
    for (int d = 1; d < NS; ++d)
        for (int i = d; i < NS; ++i) {
            const int j = i - d;
            auto sum = ops.mm(L(i, j), Ai(j, j));  // L_ij Ai_jj
            for (int m = j + 1; m < i; ++m) ops.mm_acc(sum, L(i, m), Ai(m, j));
            set(i, j, ops.neg(ops.mm(Ai(i, i), sum)));
        }
}

/// NS = 4 only. With A = [Ai_00 0; Ai_10 Ai_11] and B = [Ai_22 0; Ai_32 Ai_33] the inverses of the
/// two diagonal halves and C = [L_20 L_21; L_30 L_31], the lower-left half is -B (C A):
///   round 1: Ai_10 = -Ai_11 (L_10 Ai_00), Ai_32 = -Ai_33 (L_32 Ai_22), T_21 = L_21 Ai_11, T_31 = L_31 Ai_11
///   round 2: T_20 = L_20 Ai_00 + L_21 Ai_10, T_30 = L_30 Ai_00 + L_31 Ai_10,
///            Ai_21 = -Ai_22 T_21, Ai_31 = -(Ai_32 T_21 + Ai_33 T_31)
///   round 3: Ai_20 = -Ai_22 T_20, Ai_30 = -(Ai_32 T_20 + Ai_33 T_30)
/// (the products of one round are independent of each other).
template <class Ops, class LFn, class AiFn, class SetFn>
void merge_2x2(Ops& ops, LFn&& L, AiFn&& Ai, SetFn&& set) {
    set(1, 0, ops.neg(ops.mm(Ai(1, 1), ops.mm(L(1, 0), Ai(0, 0)))));
    set(3, 2, ops.neg(ops.mm(Ai(3, 3), ops.mm(L(3, 2), Ai(2, 2)))));
    const auto t21 = ops.mm(L(2, 1), Ai(1, 1));
    const auto t31 = ops.mm(L(3, 1), Ai(1, 1));
    auto t20 = ops.mm(L(2, 0), Ai(0, 0));
    ops.mm_acc(t20, L(2, 1), Ai(1, 0));
    auto t30 = ops.mm(L(3, 0), Ai(0, 0));
    ops.mm_acc(t30, L(3, 1), Ai(1, 0));
    set(2, 1, ops.neg(ops.mm(Ai(2, 2), t21)));
    auto a31 = ops.mm(Ai(3, 2), t21);
    ops.mm_acc(a31, Ai(3, 3), t31);
    set(3, 1, ops.neg(a31));
    set(2, 0, ops.neg(ops.mm(Ai(2, 2), t20)));
    auto a30 = ops.mm(Ai(3, 2), t20);
    ops.mm_acc(a30, Ai(3, 3), t30);
    set(3, 0, ops.neg(a30));
}

}  // namespace kda::detail
