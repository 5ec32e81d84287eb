// kda/cpu/tile_ops.hpp: the Eigen tile-ops policy for detail::inter_solve_chunk (one work item).
//
// Tiles are fixed-size row-major Eigen matrices: slice = [BC, BK], tile = [BC, BC], in the
// accumulator type (fp32, or fp64 for fp64 data). Gates 2^x are evaluated as exp(x ln 2) in double
// for fp32 accumulation (vectorised by Eigen): rounding x ln 2 in float would cost up to |x| 2^-24
// relative error, which exceeds the fp32 target when sub-chunks decay by 2^-100 or more (safe gate);
// in double the error is far below fp32's rounding, and integer x gives exact powers of two.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "../params.hpp"
#include "../tile_config.hpp"
#include "../varlen.hpp"
#include "backend.hpp"

namespace kda::cpu {

template <class X, class Cfg, class Mode>
class tile_ops {
public:
    using acc = acc_t<X>;
    static constexpr int BC = Cfg::BC;
    static constexpr int BK = Cfg::BK;
    using tile = Eigen::Matrix<acc, BC, BC, Eigen::RowMajor>;   // [BC, BC]
    using slice = Eigen::Matrix<acc, BC, BK, Eigen::RowMajor>;  // [BC, BK]
    using vec = Eigen::Matrix<acc, 1, BK>;                      // [BK]

    tile_ops(const inter_solve_params<X>& P, const chunk_coords& c, std::int64_t hv)
        : P_(P), c_(c), hv_(hv), h_(hv / (P.HV / P.H)) {}

    [[nodiscard]] int rows(int s) const {
        const std::int64_t r = c_.n - static_cast<std::int64_t>(s) * BC;
        return static_cast<int>(std::clamp<std::int64_t>(r, 0, BC));
    }
    [[nodiscard]] int num_k() const { return static_cast<int>(P_.K); }

    slice load_q(int s, int k0) const { return load_slice(P_.q, P_.q_s, h_, s, k0); }
    slice load_k(int s, int k0) const { return load_slice(P_.k, P_.k_s, h_, s, k0); }
    slice load_g(int s, int k0) const { return load_slice(P_.g, P_.g_s, hv_, s, k0); }
    static vec first_row(const slice& g) { return g.row(0); }

    /// x 2^(g - gn) on the valid rows of sub-chunk s, 0 on the others.
    slice gate_down(const slice& x, const slice& g, const vec& gn, int s) const {
        slice out = x.cwiseProduct(exp2_of(g.rowwise() - gn));
        const int nr = rows(s);
        if (nr < BC) out.bottomRows(BC - nr).setZero();
        return out;
    }
    /// x 2^(gn - g).
    static slice gate_up(const slice& x, const slice& g, const vec& gn) {
        return x.cwiseProduct(exp2_of((-g).rowwise() + gn));
    }

    static tile zero() { return tile::Zero(); }
    static void mma_nt(tile& c, const slice& a, const slice& b) { c.noalias() += a * b.transpose(); }
    static tile mm(const tile& a, const tile& b) {
        tile c;
        c.noalias() = a * b;
        return c;
    }
    static void mm_acc(tile& c, const tile& a, const tile& b) { c.noalias() += a * b; }
    static tile neg(const tile& a) { return -a; }

    void store_aqk(const tile& t, int si, int sj) const {
        const int nr = rows(si);
        for (int r = 0; r < nr; ++r) {
            X* dst = P_.Aqk + P_.Aqk_s.at(c_.b, token(si, r), hv_) + static_cast<std::int64_t>(sj) * BC;
            for (int j = 0; j < BC; ++j) dst[j] = from_acc<X>(t(r, j) * P_.scale);
        }
    }
    void scale_rows_beta(tile& t, int si) const {
        const int nr = rows(si);
        for (int r = 0; r < nr; ++r) t.row(r) *= beta(token(si, r));
    }
    /// Akkd's block of sub-chunk s: strict lower part (not safe) or lower part with the diagonal
    /// (safe gate, the block is the inverse itself). Rows and columns past the chunk's end are 0,
    /// and nothing past it is read.
    tile load_diag(int s) const {
        tile t = tile::Zero();
        const int nr = rows(s);
        for (int r = 0; r < nr; ++r) {
            const acc* src = P_.Akkd + P_.Akkd_s.at(c_.b, token(s, r), hv_);
            const int ncol = Mode::safe_gate ? r + 1 : r;
            for (int j = 0; j < ncol; ++j) t(r, j) = src[j];
        }
        return t;
    }
    /// Forward substitution: with Y = (I + L)^-1 - I, row r of Y is -L[r] - L[r, :r] Y[:r].
    /// Rows past the end hold L = 0 and come out as identity rows.
    static void invert_unit_lower(tile& a, int) {
        tile y = tile::Zero();
        for (int r = 1; r < BC; ++r) y.row(r) = -(a.row(r) + a.row(r) * y);  // y rows >= r are still 0
        a = tile::Identity();
        a.template triangularView<Eigen::StrictlyLower>() = y;  // exact zeros above (no -0.0)
    }
    void store_akk(const tile& t, int si, int sj) const {
        const int nr = rows(si);
        const int nc = si == sj ? nr : BC;  // columns past a short chunk's end are not written
        for (int r = 0; r < nr; ++r) {
            X* dst = P_.Akk + P_.Akk_s.at(c_.b, token(si, r), hv_) + static_cast<std::int64_t>(sj) * BC;
            for (int j = 0; j < nc; ++j) dst[j] = from_acc<X>(t(r, j));
        }
    }

private:
    [[nodiscard]] std::int64_t token(int s, int r) const { return c_.bos + c_.t0 + static_cast<std::int64_t>(s) * BC + r; }

    acc beta(std::int64_t t) const {
        const std::int64_t off = P_.beta_s.at(c_.b, t, hv_);
        if (P_.beta_is_fp32) return static_cast<acc>(static_cast<const float*>(P_.beta)[off]);
        return to_acc<acc>(static_cast<const X*>(P_.beta)[off]);
    }

    template <class T>
    slice load_slice(const T* base, const axis_strides& st, std::int64_t head, int s, int k0) const {
        slice out = slice::Zero();
        const int nr = rows(s);
        const int nk = static_cast<int>(std::min<std::int64_t>(BK, P_.K - k0));
        using E = eigen_scalar_t<T>;
        for (int r = 0; r < nr; ++r) {
            const T* src = base + st.at(c_.b, token(s, r), head) + k0;
            out.row(r).head(nk) = Eigen::Map<const Eigen::Matrix<E, 1, Eigen::Dynamic>>(reinterpret_cast<const E*>(src), nk).template cast<acc>();
        }
        return out;
    }

    /// 2^x elementwise, accurate to the accumulator's rounding (see the header comment).
    template <class Expr>
    static slice exp2_of(const Expr& x) {
        constexpr double ln2 = std::numbers::ln2;
        if constexpr (std::is_same_v<acc, float>) {
            return (x.template cast<double>().array() * ln2).exp().template cast<float>().matrix();
        } else {
            // fp64 data: glibc's exp2 (scalar; exact on integers, as the exactness tests require)
            return x.unaryExpr([](double v) { return std::exp2(v); });
        }
    }

    const inter_solve_params<X>& P_;
    chunk_coords c_;
    std::int64_t hv_, h_;
};

}  // namespace kda::cpu
