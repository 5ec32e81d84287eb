// kda/cpu/exp2.hpp: 2^x for Eigen arrays, accurate to about one unit in the last place.
//
// Shared by the inter-solve tiles (tile_ops.hpp) and the intra producer (intra.hpp). Evaluating
// exp(x ln 2) directly in float costs up to |x| 2^-24 relative error, which exceeds the fp32
// target once a sub-chunk decays by 2^-100 or more (safe gate). Instead x = n + f with
// n = round(x), 2^f = exp(f ln 2) by Eigen's vectorised expf (|f ln 2| <= 0.35, so rounding f ln 2
// costs < 2^-25 relative), and 2^n is applied as two exact power-of-two factors, so that results in
// the subnormal range are rounded once and integer x gives exact powers of two. Double: glibc's exp2.
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <numbers>
#include <type_traits>

namespace kda::cpu {

/// 2^x elementwise for a plain Eigen array (fixed or dynamic size) of float or double.
template <class Arr>
Arr exp2_accurate(const Arr& x) {
    using S = typename Arr::Scalar;
    static_assert(std::is_same_v<S, float> || std::is_same_v<S, double>, "exp2_accurate: float or double arrays only");
    if constexpr (std::is_same_v<S, float>) {
        const Arr n = x.round().cwiseMax(-252.0f).cwiseMin(254.0f);
        const Arr e = ((x - n) * std::numbers::ln2_v<float>).exp();
        Arr out(x.rows(), x.cols());
        const float* pn = n.data();
        const float* pe = e.data();
        float* po = out.data();
        for (Eigen::Index i = 0; i < x.size(); ++i) {
            const int ni = pn[i] == pn[i] ? static_cast<int>(pn[i]) : 0;  // NaN propagates through e
            const int h1 = ni >> 1, h2 = ni - h1;                             // each in [-126, 127]
            po[i] = pe[i] * std::bit_cast<float>((h1 + 127) << 23) * std::bit_cast<float>((h2 + 127) << 23);
        }
        return out;
    } else {
        return x.unaryExpr([](double v) { return std::exp2(v); });
    }
}

}  // namespace kda::cpu
