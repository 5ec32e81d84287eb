// tests/support/wy.hpp: the WY outputs of chunk_kda_intra (w, u, kg, qg) and v for a test case,
// and the reference's row mask spread over their entries. Shared by the CPU and CUDA suites.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <kda/intra.hpp>
#include <kda/reference/reference.hpp>

namespace kda::testing {

/// v [B, T, HV, V] (normal entries), and the outputs w, kg, qg [B, T, HV, K], u [B, T, HV, V]
/// filled with `fill`, of the inputs' dtype.
struct wy_tensors {
    host_tensor v, w, u, kg, qg;
    wy_tensors(const reference::inputs& in, std::int64_t V, std::uint64_t seed, double fill) {
        const auto& p = in.problem;
        const dtype X = in.q.type();
        v = host_tensor(X, {p.B, p.T, p.HV, V});
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> normal(0.0, 1.0);
        for (std::int64_t i = 0; i < v.numel(); ++i) reference::store(v, i, normal(rng));
        for (auto [t, d] : {std::pair{&w, p.K}, std::pair{&u, V}, std::pair{&kg, p.K}, std::pair{&qg, p.K}}) {
            *t = host_tensor(X, {p.B, p.T, p.HV, d});
            for (std::int64_t i = 0; i < t->numel(); ++i) reference::store(*t, i, fill);
        }
    }
    /// Requests all four outputs in `a`.
    void attach(intra_args& a) {
        a.v = v.ref();
        a.w = w.mref();
        a.u = u.mref();
        a.kg = kg.mref();
        a.qg = qg.mref();
    }
};

/// Asks for each WY output alone (`run(args)`: one chunk_kda_intra call into Aqk and Akk) and
/// counts the outputs, of 16, whose bits differ from `all` (one call asking for all four) where
/// asked for, or from their fill where not.
template <class Run>
int wy_each_alone_mismatches(const reference::inputs& in, std::int64_t V, std::uint64_t seed, double fill, const wy_tensors& all, host_tensor& Aqk,
                             host_tensor& Akk, Run&& run) {
    auto same = [](const host_tensor& x, const host_tensor& y) {
        return x.nbytes() == y.nbytes() && std::memcmp(x.raw(), y.raw(), static_cast<std::size_t>(x.nbytes())) == 0;
    };
    int bad = 0;
    for (int which = 0; which < 4; ++which) {
        wy_tensors one(in, V, seed, fill);
        intra_args b = in.intra_args(Aqk, Akk);
        const host_tensor w0 = one.w.clone(), u0 = one.u.clone(), kg0 = one.kg.clone(), qg0 = one.qg.clone();
        if (which == 0) b.w = one.w.mref();
        if (which == 1) b.v = one.v.ref(), b.u = one.u.mref();
        if (which == 2) b.kg = one.kg.mref();
        if (which == 3) b.qg = one.qg.mref();
        run(b);
        bad += !same(one.w, which == 0 ? all.w : w0);
        bad += !same(one.u, which == 1 ? all.u : u0);
        bad += !same(one.kg, which == 2 ? all.kg : kg0);
        bad += !same(one.qg, which == 3 ? all.qg : qg0);
    }
    return bad;
}

/// The [B, T] row mask of the reference spread over the entries of rows of `d` columns, HV heads.
inline std::vector<std::uint8_t> row_mask(const reference::wy_result& r, std::int64_t d) {
    std::vector<std::uint8_t> m(static_cast<std::size_t>(r.B * r.T * r.HV * d));
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = r.row_written[i / static_cast<std::size_t>(r.HV * d)];
    return m;
}

}  // namespace kda::testing
