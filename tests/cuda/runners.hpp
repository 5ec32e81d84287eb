// tests/cuda/runners.hpp: the CUDA backend as conformance Runners (tests/conformance.hpp), through
// kda::bridge (host tensors in, host tensors out), one per solve precision.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <cuda_bridge.hpp>
#include <kda/args.hpp>
#include <kda/types.hpp>

#include "support/metrics.hpp"

namespace kda::testing {

template <precision P>
struct cuda_runner_of {
    [[nodiscard]] std::string name() const { return P == precision::fp32 ? "cuda" : "cuda-tf32"; }
    [[nodiscard]] bool supports(dtype X) const { return X == dtype::bf16 || X == dtype::fp16 || X == dtype::fp32; }
    [[nodiscard]] std::vector<precision> precisions() const { return {P}; }
    void operator()(const inter_solve_problem& p, const inter_solve_args& a) const { (void)bridge::cuda_inter_solve_host(p, a); }
    [[nodiscard]] double tolerance(dtype X, precision prec, double floor) const {
        return prec == precision::fp32 ? full_precision_tolerance(X, floor) : tf32_tolerance(floor);
    }
    /// fp32: the products are accurate to fp32. tf32: both operands of a product are rounded to
    /// tf32 (u = 2^-11 each), so a product carries up to 2^-10.
    [[nodiscard]] double compute_roundoff(precision prec) const { return prec == precision::fp32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -10); }
};

using cuda_runner = cuda_runner_of<precision::fp32>;
using cuda_tf32_runner = cuda_runner_of<precision::tf32>;

}  // namespace kda::testing
