// kda/cuda/varlen_search.hpp: varlen chunks without a chunk_indices list, for a backend that may
// not allocate.
//
// With cu_seqlens of N + 1 offsets and chunk size BT, sequence n owns the work slots
//   [S(n), S(n + 1)),   S(n) = floor(cu[n] / BT) + n.
// S is strictly increasing, and S(n + 1) - S(n) = floor(cu[n+1] / BT) - floor(cu[n] / BT) + 1 is at
// least ceil(len_n / BT) (floor(a + b) >= floor(a) + floor(b)), so every chunk has a slot: slot v
// of sequence n is its chunk c = v - S(n). A slot past the sequence's last chunk is idle (n = 0
// rows); there are at most N + 1 of them among the S(N) = floor(T / BT) + N slots. Finding n is a
// binary search over cu_seqlens: ceil(log2 N) reads per work item, no memory of our own.
// Plain C++ (host and device), so the host tests check it against kda::prepare_chunk_indices.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../varlen.hpp"

namespace kda::cuda {

/// Number of work slots for cu_seqlens of num_sequences + 1 entries ending at T.
KDA_HOST_DEVICE constexpr std::int64_t varlen_slots(std::int64_t T, std::int64_t num_sequences, int BT) { return T / BT + num_sequences; }

/// The rows of slot v; n == 0 marks an idle slot. `cu` holds num_sequences + 1 offsets.
KDA_HOST_DEVICE inline chunk_coords locate_varlen_slot(const void* cu, bool cu_is64, std::int64_t num_sequences, int BT, std::int64_t v) {
    std::int64_t lo = 0, hi = num_sequences - 1;  // the last n with S(n) <= v (S(0) = 0 <= v)
    while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo + 1) / 2;
        if (detail::udiv(detail::load_index(cu, cu_is64, mid), BT) + mid <= v)
            lo = mid;
        else
            hi = mid - 1;
    }
    chunk_coords c;
    c.b = 0;
    c.bos = detail::load_index(cu, cu_is64, lo);
    const std::int64_t eos = detail::load_index(cu, cu_is64, lo + 1);
    c.t0 = (v - (detail::udiv(c.bos, BT) + lo)) * BT;
    const std::int64_t left = eos - c.bos - c.t0;
    c.n = left <= 0 ? 0 : (left < BT ? left : BT);
    return c;
}

/// The rows of work item i_t: chunk_map's own mapping (dense, or varlen with chunk_indices), or
/// the search above (varlen without chunk_indices).
KDA_HOST_DEVICE inline chunk_coords locate_chunk(const chunk_map& m, std::int64_t num_sequences, std::int64_t i_t) {
    if (m.cu_seqlens != nullptr && m.chunk_indices == nullptr) return locate_varlen_slot(m.cu_seqlens, m.cu_is64, num_sequences, m.BT, i_t);
    return m(i_t);
}

}  // namespace kda::cuda
