// kda/cpu/tile_ops.hpp: the Eigen tile-ops policy for detail::inter_solve_chunk (one work item).
//
// Tiles are fixed-size row-major Eigen matrices: slice = [BC, BK], tile = [BC, BC], in the
// accumulator type (fp32, or fp64 for fp64 data). Gates 2^x are split into an exact power of two and
// exp(f ln 2) with |f| <= 1/2 (exp2.hpp): evaluating exp(x ln 2) directly in float would cost up
// to |x| 2^-24 relative error, which exceeds the fp32 target when sub-chunks decay by 2^-100 or more
// (safe gate), and integer x gives exact powers of two, as the exactness tests require.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "../detail/blocks.hpp"
#include "../params.hpp"
#include "../tile_config.hpp"
#include "../varlen.hpp"
#include "backend.hpp"
#include "exp2.hpp"

namespace kda::cpu {

/// Per-worker staging buffers: one chunk's q, k and g rows converted to the accumulator type,
/// K padded with zeros to whole BK slices. Staging turns the rows' scattered, page-strided reads
/// (one token = H K elements apart) into one pass of independent loads, and every later tile
/// read hits L2.
template <class Acc>
struct scratch {
    std::vector<Acc> q, k, g;
    volatile char touched = 0;  // keeps the loads of tile_ops::touch_rows (one worker writes it)
    void reserve(std::size_t n) {
        q.resize(n);
        k.resize(n);
        g.resize(n);
    }
};

/// n stored values -> accumulator type. bf16 is the top half of an fp32 (a shift the compiler
/// vectorises); fp16 goes through Eigen::half; fp32 / fp64 are copies.
template <class T, class Acc>
void convert_row(const T* src, Acc* dst, std::int64_t n) {
    if constexpr (std::is_same_v<T, bf16_t>) {
        for (std::int64_t j = 0; j < n; ++j) dst[j] = static_cast<Acc>(std::bit_cast<float>(static_cast<std::uint32_t>(src[j].bits) << 16));
    } else if constexpr (std::is_same_v<T, Acc>) {
        std::copy(src, src + n, dst);
    } else {
        for (std::int64_t j = 0; j < n; ++j) dst[j] = to_acc<Acc>(src[j]);
    }
}

/// c += a b for row-major [R, N] x [N, C]: rank-1 updates over N, each row of c held in C / W
/// packets of Eigen's native width W for Acc (one AVX-512 register per row of 16 floats), the R
/// rows independent FMA chains: a(i, k) broadcast, row k of b loaded once per k. Where Eigen has
/// no vector type for Acc its packets are Acc itself and this is the scalar loop. (Eigen's lazy
/// product runs one chain per row and its GEMM path packs 16 x 16 operands, both slower at this
/// size; GCC's own vectorisation of the scalar loop loads a(i, k) as a 64-byte vector and
/// broadcasts its first lane, 1.7x slower.)
template <class Acc, int R, int N, int C>
void mac(Eigen::Matrix<Acc, R, C, Eigen::RowMajor>& c, const Eigen::Matrix<Acc, R, N, Eigen::RowMajor>& a,
         const Eigen::Matrix<Acc, N, C, Eigen::RowMajor>& b) {
    namespace ei = Eigen::internal;
    using packet = typename ei::packet_traits<Acc>::type;
    constexpr int W = ei::packet_traits<Acc>::size;
    static_assert(C % W == 0, "mac: tile rows are whole packets");
    constexpr int CP = C / W;
    packet r[R][CP];
    for (int i = 0; i < R; ++i)
        for (int jp = 0; jp < CP; ++jp) r[i][jp] = ei::ploadu<packet>(c.data() + i * C + jp * W);
    for (int k = 0; k < N; ++k) {
        packet bk[CP];
        for (int jp = 0; jp < CP; ++jp) bk[jp] = ei::ploadu<packet>(b.data() + k * C + jp * W);
        for (int i = 0; i < R; ++i) {
            const packet aik = ei::pset1<packet>(a.data()[i * N + k]);
            for (int jp = 0; jp < CP; ++jp) r[i][jp] = ei::pmadd(aik, bk[jp], r[i][jp]);
        }
    }
    for (int i = 0; i < R; ++i)
        for (int jp = 0; jp < CP; ++jp) ei::pstoreu(c.data() + i * C + jp * W, r[i][jp]);
}

/// in^T for row-major [R, C] -> [C, R], in W x W blocks transposed in registers by Eigen's
/// ptranspose (W: Eigen's packet width for Acc; 1 where it has no vector type).
template <class Acc, int R, int C>
Eigen::Matrix<Acc, C, R, Eigen::RowMajor> transposed(const Eigen::Matrix<Acc, R, C, Eigen::RowMajor>& in) {
    namespace ei = Eigen::internal;
    using packet = typename ei::packet_traits<Acc>::type;
    constexpr int W = ei::packet_traits<Acc>::size;
    static_assert(R % W == 0 && C % W == 0, "transposed: whole W x W blocks");
    Eigen::Matrix<Acc, C, R, Eigen::RowMajor> out;
    for (int i0 = 0; i0 < R; i0 += W)
        for (int j0 = 0; j0 < C; j0 += W) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // a vector type's alignment attribute as a template argument, as in Eigen
            ei::PacketBlock<packet, W> b;
#pragma GCC diagnostic pop
            for (int r = 0; r < W; ++r) b.packet[r] = ei::ploadu<packet>(in.data() + (i0 + r) * C + j0);
            ei::ptranspose(b);
            for (int r = 0; r < W; ++r) ei::pstoreu(out.data() + (j0 + r) * R + i0, b.packet[r]);
        }
    return out;
}

/// Strictly lower L in `a` -> (I + L)^-1, by forward substitution: with Y = (I + L)^-1 - I, row r
/// of Y is -L[r] - sum_{m<r} L[r, m] Y[m] (row updates over the tile's width; Y[0] = 0).
template <class Acc, int BC>
void invert_unit_lower(Eigen::Matrix<Acc, BC, BC, Eigen::RowMajor>& a) {
    using tile = Eigen::Matrix<Acc, BC, BC, Eigen::RowMajor>;
    tile y = tile::Zero();
    for (int r = 1; r < BC; ++r) {
        auto yr = y.row(r);
        yr = -a.row(r);
        for (int m = 1; m < r; ++m) yr -= a(r, m) * y.row(m);
    }
    a = tile::Identity();
    a.template triangularView<Eigen::StrictlyLower>() = y;  // exact zeros above (no -0.0)
}

template <class X, class Cfg, class Mode>
class tile_ops {
public:
    using acc = acc_t<X>;
    static constexpr int BC = Cfg::BC;
    static constexpr int BK = Cfg::BK;
    using tile = Eigen::Matrix<acc, BC, BC, Eigen::RowMajor>;    // [BC, BC]
    using slice = Eigen::Matrix<acc, BC, BK, Eigen::RowMajor>;   // [BC, BK]
    using tslice = Eigen::Matrix<acc, BK, BC, Eigen::RowMajor>;  // [BK, BC]
    using vec = Eigen::Matrix<acc, 1, BK>;                       // [BK]
    /// A read-only [BC, BK] view of staged rows (row stride: the staging buffers' kp).
    using cslice = Eigen::Map<const slice, Eigen::Unaligned, Eigen::OuterStride<>>;

    /// Row stride of the staging buffers: K rounded up to whole slices.
    static std::int64_t padded_k(std::int64_t K) { return (K + BK - 1) / BK * BK; }

    /// Rows already in the staging buffers (the intra stage's producer staged them): every row of
    /// the chunk, q, k and g, `kp` apart, kp a multiple of BK, zeros in columns [K, kp).
    struct prestaged {
        std::int64_t kp;
    };
    tile_ops(const inter_solve_params<X>& P, const chunk_coords& c, std::int64_t hv, scratch<acc>& buf, prestaged s)
        : P_(P), c_(c), hv_(hv), h_(hv / (P.HV / P.H)), kp_(s.kp), buf_(buf) {
        zero_tail_rows();
    }

    /// Stages the chunk's rows.
    tile_ops(const inter_solve_params<X>& P, const chunk_coords& c, std::int64_t hv, scratch<acc>& buf)
        : tile_ops(P, c, hv, buf, prestaged{padded_k(P.K)}) {
        const int n = static_cast<int>(c_.n);
        for (int r = 0; r < n; ++r) {
            const std::int64_t t = c_.bos + c_.t0 + r;
            if (r >= BC) stage_row(P_.q + P_.q_s.at(c_.b, t, h_), buf_.q.data() + r * kp_);  // q of sub-chunk 0 is never read
            stage_row(P_.k + P_.k_s.at(c_.b, t, h_), buf_.k.data() + r * kp_);
            stage_row(P_.g + P_.g_s.at(c_.b, t, hv_), buf_.g.data() + r * kp_);
        }
        zero_tail_rows();
    }

    /// Reads one byte of every cache line of another work item's rows (the next item this worker
    /// takes): q, k, g and Akkd, and the Aqk and Akk rows it writes, so that they are in cache when
    /// that item stages, reads and stores them (a store to a line not in cache waits for it to be
    /// read first: most of the output rows' lines are written only in part). Staging itself
    /// interleaves each row's loads with its conversion and stores and waits on memory row after
    /// row; this loop has nothing but independent loads in flight (their pages' translations
    /// included). Measured on bench/bench_cpu (AMD EPYC VM, 4 KiB pages, one page per row): plain
    /// loads in one loop gain 5-10%; __builtin_prefetch, or the same loads spread over the tile
    /// products a few rows at a time, gain nothing.
    static void touch_rows(const inter_solve_params<X>& P, const chunk_coords& c, std::int64_t hv, scratch<acc>& buf) {
        const std::int64_t h = hv / (P.HV / P.H);
        char sum = 0;
        for (std::int64_t r = 0; r < c.n; ++r) {
            const std::int64_t t = c.bos + c.t0 + r;
            sum ^= touch_row(P.q + P.q_s.at(c.b, t, h), P.K);
            sum ^= touch_row(P.k + P.k_s.at(c.b, t, h), P.K);
            sum ^= touch_row(P.g + P.g_s.at(c.b, t, hv), P.K);
            sum ^= touch_row(P.Akkd + P.Akkd_s.at(c.b, t, hv), BC);
            sum ^= touch_row(P.Aqk + P.Aqk_s.at(c.b, t, hv), Cfg::BT);  // written: read first, the stores then hit
            sum ^= touch_row(P.Akk + P.Akk_s.at(c.b, t, hv), Cfg::BT);
        }
        buf.touched = sum;
    }

    [[nodiscard]] int rows(int s) const { return kda::detail::rows_in(s, c_.n, BC); }
    [[nodiscard]] int num_k() const { return static_cast<int>(P_.K); }

    cslice load_q(int s, int k0) const { return view(buf_.q, s, k0); }
    cslice load_k(int s, int k0) const { return view(buf_.k, s, k0); }
    cslice load_g(int s, int k0) const { return view(buf_.g, s, k0); }
    static vec first_row(const cslice& g) { return g.row(0); }

    /// 2^(g - gn) on the valid rows of sub-chunk s, 0 on the others (never evaluated there).
    slice decay_down(const cslice& g, const vec& gn, int s) const {
        slice out = exp2_of<BC, BK>((g.rowwise() - gn).array());
        const int nr = rows(s);
        if (nr < BC) out.bottomRows(BC - nr).setZero();
        return out;
    }
    static slice mul(const cslice& x, const slice& y) { return x.cwiseProduct(y); }
    /// (x 2^(gn - g))^T.
    static tslice gate_up(const cslice& x, const cslice& g, const vec& gn) {
        slice xg = exp2_of<BC, BK>(((-g).rowwise() + gn).array());
        xg.array() *= x.array();
        return transposed(xg);
    }

    /// 2^(gn - gr).
    static vec pair_gate(const vec& gn, const vec& gr) { return exp2_of<1, BK>(kda::detail::pair_exponent(gn, gr).array()); }
    /// Row k of xt times f[k].
    static tslice scale_k(const tslice& xt, const vec& f) { return f.transpose().asDiagonal() * xt; }

    static tile zero() { return tile::Zero(); }
    static void mma(tile& c, const slice& a, const tslice& bt) { mac(c, a, bt); }
    static tile mm(const tile& a, const tile& b) {
        tile c = tile::Zero();
        mac(c, a, b);
        return c;
    }
    static void mm_acc(tile& c, const tile& a, const tile& b) { mac(c, a, b); }
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
    /// Rows past the end hold L = 0 and come out as identity rows.
    static void invert_unit_lower(tile& a, int) { cpu::invert_unit_lower(a); }
    void store_akk(const tile& t, int si, int sj) const {
        const int nr = rows(si);
        const int nc = si == sj ? nr : BC;  // columns past a short chunk's end are not written
        for (int r = 0; r < nr; ++r) {
            X* dst = P_.Akk + P_.Akk_s.at(c_.b, token(si, r), hv_) + static_cast<std::int64_t>(sj) * BC;
            for (int j = 0; j < nc; ++j) dst[j] = from_acc<X>(t(r, j));
        }
        if (ai_ != nullptr)  // the unrounded block, for the WY outputs
            for (int r = 0; r < nr; ++r)
                for (int j = 0; j < nc; ++j) ai_[(si * BC + r) * Cfg::BT + sj * BC + j] = t(r, j);
    }
    /// Also keeps every stored Akk block, unrounded, in `ai` ([BT, BT] row-major; blocks above
    /// the diagonal are not touched).
    void keep_akk(acc* ai) { ai_ = ai; }

private:
    [[nodiscard]] std::int64_t token(int s, int r) const { return c_.bos + c_.t0 + static_cast<std::int64_t>(s) * BC + r; }

    acc beta(std::int64_t t) const {
        const std::int64_t off = P_.beta_s.at(c_.b, t, hv_);
        if (P_.beta_is_fp32) return static_cast<acc>(static_cast<const float*>(P_.beta)[off]);
        return to_acc<acc>(static_cast<const X*>(P_.beta)[off]);
    }

    /// Rows of sub-chunk s, columns [k0, k0 + BK) of a staged tensor, in place; rows past the
    /// chunk's end are 0 (zero_tail_rows), columns past K are 0 (stage_row).
    cslice view(const std::vector<acc>& staged, int s, int k0) const {
        return cslice(staged.data() + static_cast<std::int64_t>(s) * BC * kp_ + k0, Eigen::OuterStride<>(kp_));
    }

    /// Zeros the staged rows past the chunk's end up to its last sub-chunk's end (never read from
    /// the inputs), so that whole-sub-chunk views read zeros there.
    void zero_tail_rows() const {
        const std::int64_t end = (c_.n + BC - 1) / BC * BC;
        for (auto* v : {&buf_.q, &buf_.k, &buf_.g}) std::fill(v->data() + c_.n * kp_, v->data() + end * kp_, acc(0));
    }

    /// XOR of the first byte of every cache line of n values.
    template <class T>
    static char touch_row(const T* p, std::int64_t n) {
        const char* b = reinterpret_cast<const char*>(p);
        const std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(T));
        char sum = 0;
        for (std::int64_t o = 0; o < bytes; o += 64) sum ^= b[o];
        return sum;
    }

    /// One row of K stored values -> accumulator type, zero-padded to kp_.
    template <class T>
    void stage_row(const T* src, acc* dst) const {
        convert_row(src, dst, P_.K);
        std::fill(dst + P_.K, dst + kp_, acc(0));
    }

    /// 2^x elementwise, accurate to about one unit in the last place of the accumulator type
    /// (see exp2.hpp).
    template <int R, int C, class Expr>
    static Eigen::Matrix<acc, R, C, Eigen::RowMajor> exp2_of(const Expr& x_expr) {
        using arr = Eigen::Array<acc, R, C, Eigen::RowMajor>;
        return exp2_accurate<arr>(x_expr).matrix();
    }

    const inter_solve_params<X>& P_;
    chunk_coords c_;
    std::int64_t hv_, h_, kp_;
    scratch<acc>& buf_;
    acc* ai_ = nullptr;
};

}  // namespace kda::cpu
