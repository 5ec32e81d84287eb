// kda/detail/blocks.hpp: the block indexing, masks and gate factorisations of the tiled algorithm,
// stated once as host-device functions (no Eigen, no CUDA). The CPU backend, the CUDA kernel
// (cuda/phases.cuh: the gate exponents, Akkd's mask) and the tests call them; the kernel writes the
// row counts and the diagonal-block masks inline, in the same form (docs/DESIGN.md says why).
//
// A chunk of n <= BT valid rows is cut into sub-chunks of BC rows (tile_config: BT, BC, NC, pair,
// pair_of). Sub-chunk s holds rows [s BC, s BC + rows_in(s)); its first row's gate gn_s is the
// reference of its own rows (the seed's b_gqn = 2^(g - gn_s), every exponent <= 0 for decaying
// gates).
//
// The off-diagonal products gate key row j of sub-chunk sj for query sub-chunk si > sj by
//   kgt = k_j 2^(gn_si - g_j)
// Both backends split that exponent at the gate r of a reference row between the two sub-chunks,
//   kgt = ku_j f,   ku_j = k_j 2^(r - g_j)   (per key row),   f = 2^(gn_si - r)   (per column),
// so that ku is built once per key sub-chunk instead of once per pair. The two reference rows:
//   gate_split::next_first  r = gn_{sj+1}, the first row of the next sub-chunk (CPU): the adjacent
//                           pair si = sj + 1 needs no f, and both exponents are <= 0;
//   gate_split::own_last    r = gl_sj, the last valid row of sj (CUDA): one ku per sub-chunk serves
//                           every pair and, in the fused intra stage, the diagonal block, where
//                           f(m, m) = 2^(gn_m - gl_m) >= 1 (bounded there: cuda/traits.cuh,
//                           intra_factor_bound).
// The two forms give the same products up to the roundings of the split (tests/test_core.cpp
// checks both against the unsplit gate).
#pragma once

#include "../config.hpp"

namespace kda::detail {

/// Valid rows of sub-chunk s in a chunk of n rows (0 .. BC).
KDA_HOST_DEVICE constexpr int rows_in(int s, long long n, int BC) {
    const long long r = n - static_cast<long long>(s) * BC;
    return r <= 0 ? 0 : (r >= BC ? BC : static_cast<int>(r));
}

/// Row (of the chunk) of sub-chunk s's first-row gate gn_s.
KDA_HOST_DEVICE constexpr int first_row(int s, int BC) { return s * BC; }

/// Row of sub-chunk s's last valid row (its gate gl_s), in a chunk of n rows.
KDA_HOST_DEVICE constexpr int last_row(int s, int n, int BC) {
    const int r = s * BC + BC - 1;
    return r < n ? r : n - 1;
}

/// Where the off-diagonal gate is split (see the file comment).
enum class gate_split { next_first, own_last };

/// The reference row r of key sub-chunk sj under `split`, in a chunk of n rows.
KDA_HOST_DEVICE constexpr int split_row(gate_split split, int sj, int n, int BC) {
    return split == gate_split::next_first ? first_row(sj + 1, BC) : last_row(sj, n, BC);
}

/// The exponents (scalars, or a backend's vectors: each returns what T's subtraction returns).
/// Exponent of a query-side factor: q 2^(g - gn), k 2^(g - gn) (the seed's b_gqn).
template <class T>
KDA_HOST_DEVICE constexpr auto down_exponent(const T& g, const T& gn) {
    return g - gn;
}
/// Exponent of a key row's factor against the split's reference gate r: ku = k 2^(r - g).
template <class T>
KDA_HOST_DEVICE constexpr auto up_exponent(const T& r, const T& g) {
    return r - g;
}
/// Exponent of a pair's column factor: f = 2^(gn_si - r).
template <class T>
KDA_HOST_DEVICE constexpr auto pair_exponent(const T& gn_si, const T& r) {
    return gn_si - r;
}

/// The masks of a diagonal block (row i, column j inside the sub-chunk): Aqk keeps j <= i, L keeps
/// j < i (the strictly lower part); Akkd as read by the inter-solve step keeps j < i, or j <= i in
/// safe-gate mode (there the producer stored the inverse itself).
KDA_HOST_DEVICE constexpr bool aqk_keeps(int i, int j) { return j <= i; }
KDA_HOST_DEVICE constexpr bool l_keeps(int i, int j) { return j < i; }
KDA_HOST_DEVICE constexpr bool akkd_keeps(int i, int j, bool safe_gate) { return safe_gate ? j <= i : j < i; }

}  // namespace kda::detail
