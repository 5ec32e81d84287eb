// tests/cases.hpp: the one case table that feeds every backend's conformance suite.
//
// Axes (issue "Foundation"): B {1, 2}; T {1, 15, 16, 17, 63, 64, 65, 200}; (H, HV) {(1,1), (2,2),
// (2,4), (1,3)}; K {16, 32, 64, 80, 128, 256}; BT {32, 64}; safe gate and not; every dtype; plus
// varlen batches with lengths 0..200 (empty sequences are allowed and produce no chunk), with and
// without chunk_indices, and beta in fp32. Seeds are derived from the case and printed on failure.
#pragma once

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <kda/args.hpp>
#include <kda/types.hpp>

namespace kda::testing {

struct test_case {
    std::int64_t B = 1, T = 64, H = 1, HV = 1, K = 64;
    int BT = 64;
    bool safe_gate = false;
    dtype X = dtype::fp32;
    std::vector<std::int64_t> seqlens;  // varlen when non-empty
    bool with_chunk_indices = true;
    bool beta_fp32 = false;
    std::uint64_t seed = 1;

    [[nodiscard]] std::string describe() const {
        std::ostringstream os;
        os << name(X) << " B" << B << " T" << T << " H" << H << " HV" << HV << " K" << K << " BT" << BT << (safe_gate ? " safe" : " notsafe");
        if (!seqlens.empty()) {
            os << " varlen[";
            for (std::size_t i = 0; i < seqlens.size(); ++i) os << (i ? "," : "") << seqlens[i];
            os << "]" << (with_chunk_indices ? "" : " no-chunk_indices");
        }
        if (beta_fp32) os << " beta-fp32";
        os << " seed " << seed;
        return os.str();
    }
    [[nodiscard]] inter_solve_problem problem() const {
        inter_solve_problem p;
        p.B = B;
        p.T = T;
        p.H = H;
        p.HV = HV;
        p.K = K;
        p.scale = 1.0 / std::sqrt(static_cast<double>(K));
        p.BT = BT;
        p.safe_gate = safe_gate;
        return p;
    }
};

/// The dense grid for one dtype: the full product of every axis above (1536 cases).
inline std::vector<test_case> dense_grid(dtype X) {
    std::vector<test_case> out;
    std::uint64_t seed = 1000 * (static_cast<std::uint64_t>(X) + 1);
    for (std::int64_t B : {1, 2})
        for (std::int64_t T : {1, 15, 16, 17, 63, 64, 65, 200})
            for (auto [H, HV] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {2, 2}, {2, 4}, {1, 3}})
                for (std::int64_t K : {16, 32, 64, 80, 128, 256})
                    for (int BT : {32, 64})
                        for (bool safe : {false, true}) {
                            test_case c;
                            c.B = B;
                            c.T = T;
                            c.H = H;
                            c.HV = HV;
                            c.K = K;
                            c.BT = BT;
                            c.safe_gate = safe;
                            c.X = X;
                            c.seed = ++seed;
                            out.push_back(c);
                        }
    return out;
}

/// Varlen batches for one dtype: random lengths 1..200 with some empty and length-1 sequences,
/// every (H, HV), both BT, both modes, with and without chunk_indices, beta in X and in fp32.
inline std::vector<test_case> varlen_grid(dtype X) {
    std::vector<test_case> out;
    std::mt19937_64 rng(77 + static_cast<std::uint64_t>(X));
    std::uniform_int_distribution<std::int64_t> len(1, 200), count(1, 6);
    std::uint64_t seed = 5000 * (static_cast<std::uint64_t>(X) + 1);
    int variant = 0;
    for (auto [H, HV] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {2, 2}, {2, 4}, {1, 3}})
        for (int BT : {32, 64})
            for (bool safe : {false, true}) {
                test_case c;
                c.H = H;
                c.HV = HV;
                c.K = (variant % 3 == 0) ? 80 : (variant % 3 == 1 ? 32 : 128);
                c.BT = BT;
                c.safe_gate = safe;
                c.X = X;
                const std::int64_t n = count(rng);
                for (std::int64_t i = 0; i < n; ++i) c.seqlens.push_back(len(rng));
                if (variant % 4 == 1) c.seqlens.insert(c.seqlens.begin() + 1 % (n + 1), 0);  // an empty sequence
                if (variant % 4 == 2) c.seqlens.push_back(1);                                 // a length-1 sequence
                c.with_chunk_indices = variant % 2 == 0;
                c.beta_fp32 = (X == dtype::bf16 || X == dtype::fp16) && variant % 3 == 2;
                c.seed = ++seed;
                ++variant;
                out.push_back(c);
            }
    return out;
}

}  // namespace kda::testing
