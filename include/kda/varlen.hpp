// kda/varlen.hpp: the map from a work item (chunk index) to the rows it covers, one for every backend.
//
// Dense mode: chunk i_t of NT_b = ceil(T / BT) per batch row covers tokens [c BT, min(T, (c+1) BT))
// of batch row b = i_t / NT_b. Varlen mode (B == 1) with chunk_indices: chunk_indices[i_t] = (n, c)
// names chunk c of sequence n, which covers tokens [cu[n] + c BT, min(cu[n+1], cu[n] + (c+1) BT)).
// Varlen mode without chunk_indices: work slots found by a search over cu_seqlens
// (locate_varlen_slot), so that no backend has to build a list (the CUDA backend may not allocate).
//
// The slots: with cu_seqlens of N + 1 offsets and chunk size BT, sequence n owns the slots
//   [S(n), S(n + 1)),   S(n) = floor(cu[n] / BT) + n.
// S is strictly increasing, and S(n + 1) - S(n) = floor(cu[n+1] / BT) - floor(cu[n] / BT) + 1 is at
// least ceil(len_n / BT) (floor(a + b) >= floor(a) + floor(b)), so every chunk has a slot: slot v
// of sequence n is its chunk c = v - S(n). A slot past the sequence's last chunk is idle (n = 0
// rows); there are at most N + 1 of them among the S(N) = floor(T / BT) + N slots. Finding n is a
// binary search over cu_seqlens: ceil(log2 N) reads per work item, no memory of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "config.hpp"
#include "types.hpp"

namespace kda {

namespace detail {
/// Reads entry i of an int32 or int64 index array.
KDA_HOST_DEVICE inline std::int64_t load_index(const void* p, bool is64, std::int64_t i) {
    return is64 ? static_cast<const std::int64_t*>(p)[i] : static_cast<std::int64_t>(static_cast<const std::int32_t*>(p)[i]);
}
/// a / b for 0 <= a and 0 < b: a 32-bit division where both fit (one hardware sequence on a GPU,
/// where a 64-bit division is a long software routine), else the 64-bit one.
KDA_HOST_DEVICE inline std::int64_t udiv(std::int64_t a, std::int64_t b) {
    if (((a | b) >> 32) == 0) return static_cast<std::int64_t>(static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b));
    return a / b;
}
}  // namespace detail

/// Rows of one chunk: batch row, first token of its sequence, chunk start within the sequence, and
/// the number of valid rows n (1..BT).
struct chunk_coords {
    std::int64_t b = 0;
    std::int64_t bos = 0;
    std::int64_t t0 = 0;
    std::int64_t n = 0;
};

/// Trivially copyable description of the chunk grid, usable in device code.
struct chunk_map {
    const void* cu_seqlens = nullptr;     // null in dense mode
    const void* chunk_indices = nullptr;  // [NT, 2]
    bool cu_is64 = true;
    bool ci_is64 = true;
    std::int64_t T = 0;                   // dense mode: tokens per batch row
    std::int64_t chunks_per_row = 0;      // dense mode: ceil(T / BT)
    std::int64_t num_chunks = 0;          // total work items along the chunk axis
    int BT = 64;

    KDA_HOST_DEVICE chunk_coords operator()(std::int64_t i_t) const {
        chunk_coords c;
        if (cu_seqlens == nullptr) {
            c.b = detail::udiv(i_t, chunks_per_row);
            c.bos = 0;
            c.t0 = (i_t - c.b * chunks_per_row) * BT;
            const std::int64_t left = T - c.t0;
            c.n = left < BT ? left : BT;
        } else {
            const std::int64_t i_n = detail::load_index(chunk_indices, ci_is64, 2 * i_t);
            const std::int64_t i_c = detail::load_index(chunk_indices, ci_is64, 2 * i_t + 1);
            c.b = 0;
            c.bos = detail::load_index(cu_seqlens, cu_is64, i_n);
            const std::int64_t eos = detail::load_index(cu_seqlens, cu_is64, i_n + 1);
            c.t0 = i_c * BT;
            const std::int64_t left = eos - c.bos - c.t0;
            c.n = left < BT ? left : BT;
        }
        return c;
    }
};

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
/// the search above (varlen without chunk_indices). n == 0: an idle slot, nothing to do.
KDA_HOST_DEVICE inline chunk_coords locate_chunk(const chunk_map& m, std::int64_t num_sequences, std::int64_t i_t) {
    if (m.cu_seqlens != nullptr && m.chunk_indices == nullptr) return locate_varlen_slot(m.cu_seqlens, m.cu_is64, num_sequences, m.BT, i_t);
    return m(i_t);
}

/// The chunk axis of one call, as every backend walks it: the map and, for the cu_seqlens search,
/// the number of sequences (params.hpp: make_chunk_grid builds it from the arguments).
struct chunk_grid {
    chunk_map map;
    std::int64_t num_sequences = 0;  // varlen: N

    /// Work items along the chunk axis (slots, in the search).
    [[nodiscard]] KDA_HOST_DEVICE std::int64_t num_chunks() const { return map.num_chunks; }
    /// The rows of work item i_t (n == 0: an idle slot of the search).
    [[nodiscard]] KDA_HOST_DEVICE chunk_coords operator()(std::int64_t i_t) const { return locate_chunk(map, num_sequences, i_t); }
};

/// FLA's prepare_chunk_indices: for cu_seqlens of N + 1 entries, the flat list of (n, c) pairs,
/// one per chunk c of sequence n, in order. Empty sequences contribute no chunk.
/// Entries are int64, laid out as [NT, 2] row-major.
inline std::vector<std::int64_t> prepare_chunk_indices(const std::int64_t* cu_seqlens, std::int64_t count, int BT) {
    KDA_CHECK(BT > 0, "kda::prepare_chunk_indices: argument 'BT': expected a positive chunk size, got " << BT);
    KDA_CHECK(count >= 1, "kda::prepare_chunk_indices: argument 'cu_seqlens': expected at least 1 entry, got " << count);
    std::vector<std::int64_t> out;
    for (std::int64_t n = 0; n + 1 < count; ++n) {
        const std::int64_t len = cu_seqlens[n + 1] - cu_seqlens[n];
        KDA_CHECK(len >= 0, "kda::prepare_chunk_indices: argument 'cu_seqlens': expected non-decreasing offsets, got cu_seqlens["
                                << n + 1 << "] = " << cu_seqlens[n + 1] << " < cu_seqlens[" << n << "] = " << cu_seqlens[n]);
        for (std::int64_t c = 0; c * BT < len; ++c) {
            out.push_back(n);
            out.push_back(c);
        }
    }
    return out;
}

inline std::vector<std::int64_t> prepare_chunk_indices(const std::vector<std::int64_t>& cu_seqlens, int BT) {
    return prepare_chunk_indices(cu_seqlens.data(), static_cast<std::int64_t>(cu_seqlens.size()), BT);
}

}  // namespace kda
