// kda/varlen.hpp: the map from a work item (chunk index) to the rows it covers.
//
// Dense mode: chunk i_t of NT_b = ceil(T / BT) per batch row covers tokens [c BT, min(T, (c+1) BT))
// of batch row b = i_t / NT_b. Varlen mode (B == 1): chunk_indices[i_t] = (n, c) names chunk c of
// sequence n, which covers tokens [cu[n] + c BT, min(cu[n+1], cu[n] + (c+1) BT)).
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
