// kda/cpu/exp2.hpp: 2^x for Eigen arrays, accurate to about one unit in the last place.
//
// Shared by the inter-solve tiles (tile_ops.hpp) and the intra producer (intra.hpp). Evaluating
// exp(x ln 2) directly in float costs up to |x| 2^-24 relative error, which exceeds the fp32
// target once a sub-chunk decays by 2^-100 or more (safe gate). Instead, in float:
//   x is clamped to [-252, 254] (2^-252 is 0 in float, 2^254 is infinite once scaled; NaN stays
//   NaN), x = n + f with n = round(x) (round half to even, by adding and subtracting 1.5 2^23)
//   and |f| <= 1/2 exact,
//   2^f = sum_{m<=7} (f ln 2)^m / m!, Horner in float: the truncation error is below 2^-27
//   relative, so the result is within about one ulp (worst seen over 2e7 arguments in [-40, 40]:
//   0.86 ulp with fused multiply-adds, 1.15 ulp where the build targets no FMA instruction and each
//   step is a multiply and an add; std::fma there would be a scalar library call per element,
//   which made the step 3x slower in bench_cpu built for baseline x86-64);
//   f = 0 gives exactly 1,
//   2^n is applied as two exact power-of-two factors (each exponent in [-126, 127]), so that
//   results in the subnormal range are rounded once and integer x gives exact powers of two.
// The loop is plain scalar code over contiguous floats with no branches; compilers vectorise it
// (AVX-512 / AVX2 / NEON lanes under -march=native) and it stays correct where they do not.
// Double: glibc's exp2.
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace kda::cpu {

namespace detail {
/// a b + c: fused where the build targets an FMA instruction (x86-64 with FMA3, which every AVX2
/// target has; AArch64), a multiply and an add elsewhere.
inline float madd(float a, float b, float c) {
#if defined(__FMA__) || defined(__AVX2__) || defined(__ARM_FEATURE_FMA) || defined(__aarch64__)
    return std::fma(a, b, c);
#else
    return a * b + c;
#endif
}

/// 2^x for one float, as described at the top of this file (written to vectorise in loops).
inline float exp2_float(float x) {
    constexpr float lo = -252.0f, hi = 254.0f, shifter = 12582912.0f;  // 1.5 2^23
    // (I + ...) coefficients (ln 2)^m / m!, m = 7 .. 1
    constexpr float c7 = 1.5252733804059841e-05f, c6 = 1.5403530393381609e-04f, c5 = 1.3333558146428443e-03f,
                    c4 = 9.6181291076284772e-03f, c3 = 5.5504108664821580e-02f, c2 = 2.4022650695910071e-01f,
                    c1 = 6.9314718055994531e-01f;
    float xc = x < lo ? lo : x;  // NaN compares false and passes through
    xc = xc > hi ? hi : xc;
    const float biased = xc + shifter;                                             // n in the low mantissa bits
    const std::int32_t n = std::bit_cast<std::int32_t>(biased) - std::bit_cast<std::int32_t>(shifter);
    const float f = xc - (biased - shifter);                                       // exact, |f| <= 1/2
    float p = c7;
    p = madd(p, f, c6);
    p = madd(p, f, c5);
    p = madd(p, f, c4);
    p = madd(p, f, c3);
    p = madd(p, f, c2);
    p = madd(p, f, c1);
    p = madd(p, f, 1.0f);
    const std::int32_t h1 = n >> 1, h2 = n - h1;  // each in [-126, 127] for n in [-252, 254]
    // unsigned shifts: a NaN input may leave any n here, and its p is NaN anyway
    const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>(h1 + 127) << 23);
    const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>(h2 + 127) << 23);
    return p * s1 * s2;
}
}  // namespace detail

/// 2^x elementwise for a plain Eigen array (fixed or dynamic size) of float or double.
template <class Arr>
Arr exp2_accurate(const Arr& x) {
    using S = typename Arr::Scalar;
    static_assert(std::is_same_v<S, float> || std::is_same_v<S, double>, "exp2_accurate: float or double arrays only");
    Arr out(x.rows(), x.cols());
    const S* px = x.data();
    S* po = out.data();
    for (Eigen::Index i = 0; i < x.size(); ++i) {
        if constexpr (std::is_same_v<S, float>)
            po[i] = detail::exp2_float(px[i]);
        else
            po[i] = std::exp2(px[i]);
    }
    return out;
}

}  // namespace kda::cpu
