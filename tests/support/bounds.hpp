// tests/support/bounds.hpp: the suite's bounds on the relative RMS error of an output, next to its
// rounding floor (tests/support/metrics.hpp defines both). Plain C++ on kda/types.hpp alone, so that
// kda-inter-solve --check (examples/kda_inter_solve.cpp) holds a run to the same bounds.
#pragma once

#include <cmath>

#include <kda/types.hpp>

namespace kda::testing {

/// Unit roundoff of a dtype (half an ulp at 1).
inline double unit_roundoff(dtype X) {
    switch (X) {
        case dtype::bf16: return std::ldexp(1.0, -8);
        case dtype::fp16: return std::ldexp(1.0, -11);
        case dtype::fp32: return std::ldexp(1.0, -24);
        default: return std::ldexp(1.0, -53);
    }
}

/// Spacing of a dtype's subnormals: the absolute rounding error of values near underflow.
inline double subnormal_spacing(dtype X) {
    switch (X) {
        case dtype::bf16: return std::ldexp(1.0, -133);
        case dtype::fp16: return std::ldexp(1.0, -24);
        case dtype::fp32: return std::ldexp(1.0, -149);
        default: return std::ldexp(1.0, -1074);
    }
}

/// The tolerance of a backend that computes at full fp32 (fp64 for fp64 data), on the relative RMS
/// error of an output stored in X whose rounding floor is `floor`. Each bound with its derivation;
/// "measured" figures are the worst over the dense and varlen grids (tests/conformance.hpp), the
/// intra stage (tests/test_intra_cpu.cpp) and the goldens, on the CPU and, from
/// bench/results/2026-12-04_h200_device_suite.txt, on the H200:
inline double full_precision_tolerance(dtype X, double floor) {
    switch (X) {
        case dtype::bf16:
        case dtype::fp16:
            // rounding to X after an fp32 computation whose relative error is below 1e-6 (fp32 data:
            // at most 8.9e-7 measured): err <= floor + 1e-6; 1.05 leaves room for the rounding of a
            // value already off by that error. Measured: 1.0000x the floor; 3x fails for any floor > 5e-7
            // (bf16 / fp16 floors are >= 1e-5).
            return 1.05 * floor + 1e-6;
        case dtype::fp32:
            // the error of fp32 arithmetic over K-term products, next to the error of rounding the
            // result once (both proportional to 2^-24): measured at most 25.2x the floor on the CPU,
            // 41.6x on the H200 (dense grid, Akk); 64x leaves 1.5x over the worst and fails 3x of it.
            return 64 * floor;
        default:
            // fp64 data against the float64 reference: no rounding floor (the reference is float64), so
            // an absolute bound: measured at most 8.94e-15 (dense grid, Aqk; Akk at most 1.4e-16);
            // 1.5e-14 leaves 1.7x over the worst and fails 3x of it.
            return 1.5e-14;
    }
}

/// Unit roundoff of tf32 (10 explicit mantissa bits): the rounding of each operand of a product in
/// the tf32 mode (FLA's behaviour on tensor cores).
inline constexpr double tf32_roundoff = 0x1p-11;

/// Tolerance of the tf32 mode (the CUDA backend), on the relative RMS error of an output whose
/// rounding floor is `floor`. Each product term of a K-term sum carries at most 2u (both operands
/// rounded to tf32, u = 2^-11); the terms' errors are independent, so the sum's relative RMS error is
/// 2u / sqrt(3) times sqrt(sum t_k^2) / |sum t_k|, which does not grow with K for keys and queries
/// of random direction (both grow as sqrt(K)). 4u (1.95e-3) allows a factor 3.5 on that for the
/// merge's second rounding and the solve; measured at most 2.2u (fp32 data, Aqk, dense grid, on the
/// H200; Akk 0.26u): 1.8x over the worst, and 3x of it fails. The floor adds as in fp32 mode.
inline double tf32_tolerance(double floor) { return 1.05 * floor + 4 * tf32_roundoff; }

}  // namespace kda::testing
