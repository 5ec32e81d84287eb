// tests/cuda/setup.hpp: a problem and the knobs of its generated inputs, shared by the [cuda] tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <kda/args.hpp>
#include <kda/reference/reference.hpp>

namespace kda::testing {

/// A problem and its inputs (reference::make_inputs).
struct setup {
    inter_solve_problem p;
    dtype X = dtype::bf16;
    std::vector<std::int64_t> seqlens;
    bool with_ci = true;
    bool beta_fp32 = false;
    std::uint64_t seed = 1;
    double lower_bound = -5.0;

    [[nodiscard]] reference::inputs make() const {
        reference::generator_options opt;
        opt.seed = seed;
        opt.seqlens = seqlens;
        opt.with_chunk_indices = with_ci;
        opt.beta_fp32 = beta_fp32;
        opt.lower_bound = lower_bound;
        return reference::make_inputs(p, X, opt);
    }
    [[nodiscard]] std::string describe() const {
        std::ostringstream os;
        os << name(X) << " B" << p.B << " T" << p.T << " H" << p.H << " HV" << p.HV << " K" << p.K << " BT" << p.BT
           << (p.safe_gate ? " safe" : " notsafe") << " " << name(p.solve_precision);
        if (!seqlens.empty()) os << " varlen(" << seqlens.size() << ")" << (with_ci ? "" : " no-chunk_indices");
        os << " seed " << seed;
        return os.str();
    }
};

/// A problem with scale K^-0.5.
inline inter_solve_problem make_problem(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t HV, std::int64_t K, int BT, bool safe,
                                        precision prec = precision::fp32) {
    inter_solve_problem p;
    p.B = B;
    p.T = T;
    p.H = H;
    p.HV = HV;
    p.K = K;
    p.scale = 1.0 / std::sqrt(static_cast<double>(K));
    p.BT = BT;
    p.safe_gate = safe;
    p.solve_precision = prec;
    return p;
}

}  // namespace kda::testing
