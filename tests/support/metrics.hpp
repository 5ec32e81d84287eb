// tests/support/metrics.hpp: accuracy metrics against the float64 reference.
//
// Errors are relative RMS over exactly the entries the step writes:
//   err   = sqrt(sum (out - exact)^2 / sum exact^2)
//   floor = sqrt(sum (round_X(exact) - exact)^2 / sum exact^2)   (rounding the exact answer once)
// When every written exact value is 0, both are absolute RMS instead.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include <kda/reference/host_tensor.hpp>
#include <kda/reference/reference.hpp>

#include "bounds.hpp"

namespace kda::testing {

struct error_stats {
    double err = 0, floor = 0;
    std::int64_t count = 0;
    [[nodiscard]] double ratio() const { return floor > 0 ? err / floor : (err == 0 ? 1.0 : INFINITY); }
};

struct comparison {
    error_stats aqk, akk;
    std::int64_t untouched_changed = 0;  // entries the step must not write whose bits changed
    std::string first_untouched;         // where the first one is
};

/// Flat view of a contiguous host tensor (for element reads by flat index).
inline tensor_ref flat(const host_tensor& t) {
    tensor_ref r = t.ref();
    r.rank = 1;
    r.shape[0] = t.numel();
    r.stride[0] = 1;
    return r;
}

namespace detail {
inline error_stats stats(const std::vector<double>& exact, const std::vector<std::uint8_t>& mask, const host_tensor& out) {
    const tensor_ref o = flat(out);
    double e2 = 0, f2 = 0, n2 = 0;
    error_stats s;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        if (!mask[i]) continue;
        const double x = exact[i], y = reference::read(o, static_cast<std::int64_t>(i));
        const double r = reference::round_to(out.type(), x);
        e2 += (y - x) * (y - x);
        f2 += (r - x) * (r - x);
        n2 += x * x;
        ++s.count;
    }
    const double den = n2 > 0 ? n2 : (s.count > 0 ? static_cast<double>(s.count) : 1.0);
    s.err = std::sqrt(e2 / den);
    s.floor = std::sqrt(f2 / den);
    if (!std::isfinite(e2)) s.err = INFINITY;
    return s;
}
}  // namespace detail

/// Compares outputs with the reference; Aqk0 / Akk0 are the outputs' contents before the call.
inline comparison compare(const reference::result& ref, const host_tensor& Aqk, const host_tensor& Akk, const host_tensor& Aqk0,
                          const host_tensor& Akk0) {
    comparison c;
    c.aqk = detail::stats(ref.Aqk, ref.aqk_written, Aqk);
    c.akk = detail::stats(ref.Akk, ref.akk_written, Akk);
    const std::int64_t es = size_of(Aqk.type());
    auto bytes = [es](const host_tensor& t, std::int64_t i) { return static_cast<const unsigned char*>(t.raw()) + i * es; };
    for (std::int64_t i = 0; i < Aqk.numel(); ++i) {
        const bool q_changed = !ref.aqk_written[static_cast<std::size_t>(i)] && std::memcmp(bytes(Aqk, i), bytes(Aqk0, i), static_cast<std::size_t>(es)) != 0;
        const bool k_changed = !ref.akk_written[static_cast<std::size_t>(i)] && std::memcmp(bytes(Akk, i), bytes(Akk0, i), static_cast<std::size_t>(es)) != 0;
        if (q_changed || k_changed) {
            if (c.untouched_changed == 0) {
                std::ostringstream os;
                const std::int64_t BT = ref.BT, HV = ref.HV, T = ref.T;
                os << (q_changed ? "Aqk" : "Akk") << "[b=" << i / (BT * HV * T) << ", t=" << (i / (BT * HV)) % T << ", hv=" << (i / BT) % HV
                   << ", j=" << i % BT << "]";
                c.first_untouched = os.str();
            }
            ++c.untouched_changed;
        }
    }
    return c;
}

/// Relative RMS difference of two outputs on the masked entries (relative to b).
inline double rel_rms(const host_tensor& a, const host_tensor& b, const std::vector<std::uint8_t>& mask) {
    const tensor_ref x = flat(a), y = flat(b);
    double e2 = 0, n2 = 0;
    for (std::size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) {
            const double u = reference::read(x, static_cast<std::int64_t>(i)), v = reference::read(y, static_cast<std::int64_t>(i));
            e2 += (u - v) * (u - v);
            n2 += v * v;
        }
    return n2 > 0 ? std::sqrt(e2 / n2) : std::sqrt(e2);
}

}  // namespace kda::testing
