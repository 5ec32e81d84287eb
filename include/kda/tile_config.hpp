// kda/tile_config.hpp: every compile-time constant of the tiled algorithm, in one place.
//
// A chunk of BT rows is cut into NC = BT / BC sub-chunks of BC rows; K is walked in slices of BK
// columns. The NC (NC - 1) / 2 sub-chunk pairs (si > sj) are numbered row by row:
// (1,0) -> 0, (2,0) -> 1, (2,1) -> 2, (3,0) -> 3, ...
#pragma once

#include "config.hpp"
#include "types.hpp"

namespace kda {

template <int BT_, int BC_, int BK_>
struct tile_config {
    static constexpr int BT = BT_;
    static constexpr int BC = BC_;
    static constexpr int BK = BK_;
    static constexpr int NC = BT / BC;
    static constexpr int NPAIR = NC * (NC - 1) / 2;

    static_assert(BC == 16, "The sub-chunk size BC must be 16: the diagonal blocks are 16 x 16 tiles.");
    static_assert(BT % BC == 0, "The chunk size BT must be a multiple of the sub-chunk size BC.");
    static_assert(NC >= 1 && NC <= 8, "A chunk must hold between 1 and 8 sub-chunks (BT between 16 and 128).");
    static_assert(BK == 16 || BK == 32 || BK == 64 || BK == 128, "The K slice BK must be 16, 32, 64 or 128.");

    /// Index of the off-diagonal pair (si, sj), si > sj.
    KDA_HOST_DEVICE static constexpr int pair(int si, int sj) { return si * (si - 1) / 2 + sj; }

    /// The pair of index p (the inverse of pair): a fixed chain of NC - 2 compares.
    KDA_HOST_DEVICE static constexpr void pair_of(int p, int& si, int& sj) {
        si = 1;
        for (int s = 2; s < NC; ++s) si += p >= pair(s, 0) ? 1 : 0;
        sj = p - pair(si, 0);
    }
};

/// Mode flags as a type (nvcc cannot take struct values as __global__ template arguments).
template <bool SafeGate, precision Precision>
struct variant {
    static constexpr bool safe_gate = SafeGate;
    static constexpr precision solve_precision = Precision;
};

/// The CPU backend's K slice for a head dimension: a 32-wide slice wastes less on small K.
constexpr int default_bk(long long K) { return K <= 32 ? 32 : 64; }

}  // namespace kda
