// kda/validate.hpp: argument checks shared by every backend (can_implement).
//
// Every check runs before anything is written. A failure names the argument, what was expected and
// what was given. Index arithmetic is 64-bit and overflow-checked: a tensor whose largest offset
// (in bytes) does not fit in int64 is refused.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "tensor.hpp"
#include "varlen.hpp"

namespace kda {

/// Result of a check: ok, or the sentence that inter_solve would throw.
struct status {
    bool ok = true;
    std::string message;
    explicit operator bool() const { return ok; }
    static status success() { return {}; }
    static status failure(std::string m) { return {false, std::move(m)}; }
};

/// What a backend declares about itself; validation refuses everything else with a message.
struct backend_caps {
    const char* name = "cpu";
    bool supports_fp64 = true;
    /// Required pointer alignment in bytes for the contiguous tensors (0: the element size).
    std::int64_t alignment = 0;
    /// Whether the backend reads cu_seqlens / chunk_indices from host memory (the CPU) or needs the
    /// *_host copies to validate their contents (CUDA).
    bool index_tensors_on_host = true;
};

namespace detail {

inline bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) { return __builtin_mul_overflow(a, b, &out); }
inline bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) { return __builtin_add_overflow(a, b, &out); }

class checker {
public:
    explicit checker(const char* fn) : fn_(fn) {}

    template <class... Parts>
    bool fail(const char* arg, const Parts&... parts) {
        if (!st_.ok) return false;
        std::ostringstream os;
        os << fn_ << ": argument '" << arg << "': ";
        (os << ... << parts);
        st_ = status::failure(os.str());
        return false;
    }
    [[nodiscard]] bool ok() const { return st_.ok; }
    [[nodiscard]] const status& result() const { return st_; }

private:
    const char* fn_;
    status st_;
};

inline std::string fmt_shape(const extents_t& s, int rank) {
    std::ostringstream os;
    os << "[";
    for (int d = 0; d < rank; ++d) os << (d ? ", " : "") << s[d];
    os << "]";
    return os.str();
}

/// Byte range [lo, hi) covered by a tensor view (valid after check_layout succeeded).
struct byte_range {
    std::uintptr_t lo = 0, hi = 0;
};

template <class Ptr>
byte_range range_of(const basic_tensor_ref<Ptr>& t) {
    std::int64_t last = 0;
    for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.stride[d];
    const auto base = reinterpret_cast<std::uintptr_t>(t.data);
    return {base, base + static_cast<std::uintptr_t>((last + 1) * size_of(t.type))};
}

/// Checks a tensor's presence, rank, dtype, extents, strides, overflow, null pointer and alignment.
/// `names` spells the axes for the message, e.g. "[B, T, H, K]".
template <class Ptr>
bool check_layout(checker& c, const char* arg, const basic_tensor_ref<Ptr>& t, std::initializer_list<dtype> types,
                  const extents_t& expect, int rank, const char* names, bool inner_contiguous, std::int64_t alignment) {
    if (!c.ok()) return false;
    if (t.rank == 0 && t.data == nullptr) return c.fail(arg, "is required but was not given (expected ", names, " = ", fmt_shape(expect, rank), ")");
    if (t.rank != rank) return c.fail(arg, "expected rank ", rank, " ", names, ", got rank ", t.rank, " ", describe_shape(t));
    if (std::find(types.begin(), types.end(), t.type) == types.end()) {
        std::ostringstream os;
        int i = 0;
        for (auto d : types) os << (i++ ? " or " : "") << name(d);
        return c.fail(arg, "expected dtype ", os.str(), ", got ", name(t.type));
    }
    for (int d = 0; d < rank; ++d)
        if (t.shape[d] != expect[d])
            return c.fail(arg, "expected shape ", names, " = ", fmt_shape(expect, rank), ", got ", describe_shape(t));
    std::int64_t numel = 1;
    for (int d = 0; d < rank; ++d)
        if (mul_overflows(numel, t.shape[d], numel)) return c.fail(arg, "element count of ", describe_shape(t), " overflows int64");
    if (numel == 0) return true;  // nothing is read or written through an empty view
    if (t.data == nullptr) return c.fail(arg, "is a null pointer for ", numel, " elements");
    std::int64_t last = 0;
    for (int d = 0; d < rank; ++d) {
        if (t.stride[d] < 0) return c.fail(arg, "expected non-negative strides, got ", describe_strides(t));
        std::int64_t step = 0;
        if (mul_overflows(t.shape[d] - 1, t.stride[d], step) || add_overflows(last, step, last))
            return c.fail(arg, "largest offset of shape ", describe_shape(t), " with strides ", describe_strides(t), " overflows int64");
    }
    std::int64_t bytes = 0;
    if (mul_overflows(last + 1, size_of(t.type), bytes)) return c.fail(arg, "byte extent overflows int64");
    if (inner_contiguous && t.shape[rank - 1] > 1 && t.stride[rank - 1] != 1)
        return c.fail(arg, "expected a contiguous innermost axis (stride 1), got strides ", describe_strides(t));
    const std::int64_t align = alignment > 0 ? alignment : size_of(t.type);
    if (reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(align) != 0)
        return c.fail(arg, "pointer ", t.data, " is not aligned to ", align, " bytes");
    return true;
}

/// Sufficient condition for a view whose distinct indices address distinct elements: sorted by
/// stride, each stride covers the span of all smaller ones.
template <class Ptr>
bool non_self_overlapping(const basic_tensor_ref<Ptr>& t) {
    std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, extent)
    for (int d = 0; d < t.rank; ++d)
        if (t.shape[d] > 1) dims.emplace_back(t.stride[d], t.shape[d]);
    std::sort(dims.begin(), dims.end());
    std::int64_t span = 1;
    for (auto [s, e] : dims) {
        if (s < span) return false;
        span = s * (e - 1) + span;
    }
    return true;
}

/// Reads a rank-1 or rank-2 index tensor from host memory as int64.
inline std::vector<std::int64_t> read_indices(const tensor_ref& t) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(t.numel()));
    const bool is64 = t.type == dtype::i64;
    std::int64_t i = 0;
    if (t.rank == 1) {
        for (std::int64_t a = 0; a < t.shape[0]; ++a) v[i++] = load_index(t.data, is64, a * t.stride[0]);
    } else {
        for (std::int64_t a = 0; a < t.shape[0]; ++a)
            for (std::int64_t b = 0; b < t.shape[1]; ++b) v[i++] = load_index(t.data, is64, a * t.stride[0] + b * t.stride[1]);
    }
    return v;
}

}  // namespace detail

/// Which call's arguments are checked: they differ in the role of Akkd and Akk.
enum class step_kind {
    inter_solve,  // Akkd input, Aqk and Akk outputs
    intra_diag,   // the diagonal-block producer: Aqk and Akkd outputs, no Akk
    intra,        // the whole intra stage: Aqk and Akk outputs, Akkd an optional workspace (output)
};

namespace detail {
inline const char* step_name(step_kind s) {
    switch (s) {
        case step_kind::inter_solve: return "kda::inter_solve";
        case step_kind::intra_diag: return "kda::chunk_kda_intra_diag";
        case step_kind::intra: return "kda::chunk_kda_intra";
    }
    return "kda";
}

/// The varlen checks (cu_seqlens, chunk_indices and their host copies) on top of `c`.
inline status check_varlen(checker& c, const inter_solve_problem& p, const inter_solve_args& a, const backend_caps& caps) {
    const bool has_cu = !(a.cu_seqlens.rank == 0 && a.cu_seqlens.data == nullptr);
    const bool has_ci = !(a.chunk_indices.rank == 0 && a.chunk_indices.data == nullptr);
    // --- varlen
    if (!has_cu) {
        if (has_ci) c.fail("chunk_indices", "was given without cu_seqlens");
        return c.result();
    }
    if (a.cu_seqlens.rank != 1) return c.fail("cu_seqlens", "expected rank 1 [N + 1], got ", describe_shape(a.cu_seqlens)), c.result();
    if (a.cu_seqlens.type != dtype::i64 && a.cu_seqlens.type != dtype::i32)
        return c.fail("cu_seqlens", "expected dtype int64 or int32, got ", name(a.cu_seqlens.type)), c.result();
    if (a.cu_seqlens.shape[0] < 2) return c.fail("cu_seqlens", "expected at least 2 entries [N + 1], got ", a.cu_seqlens.shape[0]), c.result();
    if (a.cu_seqlens.data == nullptr) return c.fail("cu_seqlens", "is a null pointer"), c.result();
    if (reinterpret_cast<std::uintptr_t>(a.cu_seqlens.data) % static_cast<std::uintptr_t>(size_of(a.cu_seqlens.type)) != 0)
        return c.fail("cu_seqlens", "pointer is not aligned to its element size"), c.result();
    const std::int64_t N = a.cu_seqlens.shape[0] - 1;
    if (has_ci) {
        if (a.chunk_indices.rank != 2 || a.chunk_indices.shape[1] != 2)
            return c.fail("chunk_indices", "expected shape [NT, 2], got ", describe_shape(a.chunk_indices)), c.result();
        if (a.chunk_indices.type != dtype::i64 && a.chunk_indices.type != dtype::i32)
            return c.fail("chunk_indices", "expected dtype int64 or int32, got ", name(a.chunk_indices.type)), c.result();
        if (a.chunk_indices.shape[0] > 0 && a.chunk_indices.data == nullptr) return c.fail("chunk_indices", "is a null pointer"), c.result();
        if (reinterpret_cast<std::uintptr_t>(a.chunk_indices.data) % static_cast<std::uintptr_t>(size_of(a.chunk_indices.type)) != 0)
            return c.fail("chunk_indices", "pointer is not aligned to its element size"), c.result();
        if (a.chunk_indices.stride[1] != 1 || (a.chunk_indices.shape[0] > 1 && a.chunk_indices.stride[0] != 2))
            return c.fail("chunk_indices", "expected a contiguous [NT, 2] tensor, got strides ", describe_strides(a.chunk_indices)), c.result();
    }
    if (a.cu_seqlens.stride[0] != 1) return c.fail("cu_seqlens", "expected a contiguous tensor, got stride ", a.cu_seqlens.stride[0]), c.result();

    // contents, from host memory only
    const tensor_ref& cu_host = caps.index_tensors_on_host ? a.cu_seqlens : a.cu_seqlens_host;
    if (cu_host.data == nullptr)
        return c.fail("cu_seqlens_host", "the ", caps.name, " backend needs a host copy of cu_seqlens to validate it"), c.result();
    if (cu_host.rank != 1 || cu_host.shape[0] != N + 1 || (cu_host.type != dtype::i64 && cu_host.type != dtype::i32))
        return c.fail("cu_seqlens_host", "expected an int32/int64 tensor of shape [", N + 1, "], got ", describe_shape(cu_host), " ", name(cu_host.type)), c.result();
    const auto cu = detail::read_indices(cu_host);
    if (cu[0] != 0) return c.fail("cu_seqlens", "expected cu_seqlens[0] == 0, got ", cu[0]), c.result();
    for (std::int64_t n = 0; n < N; ++n) {
        if (cu[n + 1] < 0) return c.fail("cu_seqlens", "expected non-negative offsets, got cu_seqlens[", n + 1, "] = ", cu[n + 1]), c.result();
        if (cu[n + 1] < cu[n])
            return c.fail("cu_seqlens", "expected non-decreasing offsets, got cu_seqlens[", n + 1, "] = ", cu[n + 1], " < cu_seqlens[", n, "] = ", cu[n]), c.result();
    }
    if (cu[N] != p.T) return c.fail("cu_seqlens", "expected the last offset to equal T = ", p.T, ", got cu_seqlens[", N, "] = ", cu[N]), c.result();
    if (has_ci) {
        const tensor_ref& ci_host = caps.index_tensors_on_host ? a.chunk_indices : a.chunk_indices_host;
        if (ci_host.data == nullptr && a.chunk_indices.shape[0] > 0)
            return c.fail("chunk_indices_host", "the ", caps.name, " backend needs a host copy of chunk_indices to validate it"), c.result();
        if (ci_host.data != nullptr && (ci_host.rank != 2 || ci_host.shape[0] != a.chunk_indices.shape[0] || ci_host.shape[1] != 2))
            return c.fail("chunk_indices_host", "expected shape ", describe_shape(a.chunk_indices), ", got ", describe_shape(ci_host)), c.result();
        const auto expect = prepare_chunk_indices(cu, p.BT);
        const std::int64_t NT = static_cast<std::int64_t>(expect.size() / 2);
        if (a.chunk_indices.shape[0] != NT)
            return c.fail("chunk_indices", "does not match cu_seqlens: expected ", NT, " chunks of BT = ", p.BT, ", got ", a.chunk_indices.shape[0]), c.result();
        const auto ci = NT > 0 ? detail::read_indices(ci_host) : std::vector<std::int64_t>{};
        for (std::int64_t i = 0; i < 2 * NT; ++i)
            if (ci[i] != expect[i])
                return c.fail("chunk_indices", "does not match cu_seqlens: entry [", i / 2, ", ", i % 2, "] expected ", expect[i], ", got ", ci[i]), c.result();
    }
    return c.result();
}

/// The shared checks of every step. `a` carries the step's tensors; for the producer steps Akkd
/// is a (const) view of an output and Akk is absent (intra_diag).
inline status can_implement_step(const inter_solve_problem& p, const inter_solve_args& a, const backend_caps& caps, step_kind step) {
    detail::checker c(step_name(step));
    // --- sizes and modes
    if (p.B < 1) c.fail("B", "expected B >= 1, got ", p.B);
    if (p.T < 0) c.fail("T", "expected T >= 0, got ", p.T);
    if (p.H < 1) c.fail("H", "expected H >= 1, got ", p.H);
    if (p.HV < 1) c.fail("HV", "expected HV >= 1, got ", p.HV);
    if (c.ok() && p.HV % p.H != 0) c.fail("HV", "expected a multiple of H = ", p.H, ", got HV = ", p.HV);
    if (p.K < 1 || p.K > 256) c.fail("K", "expected 1 <= K <= 256, got ", p.K);
    if (p.BT != 32 && p.BT != 64) c.fail("BT", "expected 32 or 64, got ", p.BT);
    if (p.BC != 16) c.fail("BC", "expected 16, got ", p.BC);
    if (!(p.scale == p.scale) || p.scale == std::numeric_limits<double>::infinity() || p.scale == -std::numeric_limits<double>::infinity())
        c.fail("scale", "expected a finite number, got ", p.scale);
    const bool has_cu = !(a.cu_seqlens.rank == 0 && a.cu_seqlens.data == nullptr);
    if (has_cu && p.B != 1) c.fail("B", "expected B == 1 with cu_seqlens (varlen), got B = ", p.B);
    if (!c.ok()) return c.result();

    // --- tensors
    const dtype X = a.q.type;
    if (!(a.q.rank == 0 && a.q.data == nullptr)) {
        if (!is_floating(X)) return c.fail("q", "expected dtype bf16, fp16, fp32 or fp64, got ", name(X)), c.result();
        if (X == dtype::fp64 && !caps.supports_fp64)
            return c.fail("q", "dtype fp64 is not supported by the ", caps.name, " backend (expected bf16, fp16 or fp32)"), c.result();
    }
    const dtype A = acc_dtype(X);
    const auto al = caps.alignment;
    const extents_t qk{p.B, p.T, p.H, p.K};
    const extents_t gk{p.B, p.T, p.HV, p.K};
    const extents_t bt{p.B, p.T, p.HV, 0};
    const extents_t dd{p.B, p.T, p.HV, p.BC};
    const extents_t oo{p.B, p.T, p.HV, p.BT};
    detail::check_layout(c, "q", a.q, {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64}, qk, 4, "[B, T, H, K]", true, al);
    detail::check_layout(c, "k", a.k, {X}, qk, 4, "[B, T, H, K]", true, al);
    detail::check_layout(c, "g", a.g, {A}, gk, 4, "[B, T, HV, K]", true, al);
    if (X == dtype::fp32 || X == dtype::fp64)
        detail::check_layout(c, "beta", a.beta, {X}, bt, 3, "[B, T, HV]", false, 0);
    else
        detail::check_layout(c, "beta", a.beta, {X, dtype::fp32}, bt, 3, "[B, T, HV]", false, 0);
    const bool akkd_in = step == step_kind::inter_solve;
    const bool akkd_out = step == step_kind::intra_diag || (step == step_kind::intra && !a.Akkd.empty_view());
    const bool akk_out = step != step_kind::intra_diag;
    if (akkd_in || akkd_out) detail::check_layout(c, "Akkd", a.Akkd, {A}, dd, 4, "[B, T, HV, BC]", true, al);
    detail::check_layout(c, "Aqk", a.Aqk, {X}, oo, 4, "[B, T, HV, BT]", true, al);
    if (akk_out) detail::check_layout(c, "Akk", a.Akk, {X}, oo, 4, "[B, T, HV, BT]", true, al);
    if (!c.ok()) return c.result();
    if (p.T == 0) return c.result();  // a no-op: nothing is read or written

    // --- outputs: no self-overlap, no overlap with each other or with any input
    {
        std::vector<std::pair<const char*, const tensor_ref*>> ins = {{"q", &a.q}, {"k", &a.k}, {"g", &a.g}, {"beta", &a.beta}};
        if (akkd_in) ins.emplace_back("Akkd", &a.Akkd);
        const tensor_ref aqk = as_const(a.Aqk), akk = as_const(a.Akk);
        std::vector<std::pair<const char*, const tensor_ref*>> outs = {{"Aqk", &aqk}};
        if (akk_out) outs.emplace_back("Akk", &akk);
        if (akkd_out) outs.emplace_back("Akkd", &a.Akkd);
        auto disjoint = [](detail::byte_range x, detail::byte_range y) { return x.hi <= y.lo || y.hi <= x.lo; };
        for (std::size_t o = 0; o < outs.size(); ++o) {
            const auto [nm, t] = outs[o];
            if (!detail::non_self_overlapping(*t)) return c.fail(nm, "strides ", describe_strides(*t), " make distinct entries overlap"), c.result();
            const auto r = detail::range_of(*t);
            for (std::size_t e = 0; e < o; ++e)
                if (!disjoint(detail::range_of(*outs[e].second), r)) return c.fail(nm, "overlaps the memory of ", outs[e].first), c.result();
            for (auto [inm, it] : ins)
                if (!disjoint(detail::range_of(*it), r)) return c.fail(nm, "overlaps the memory of input ", inm), c.result();
        }
    }

    return check_varlen(c, p, a, caps);
}
}  // namespace detail

/// Checks every argument of an inter-solve call for a backend with capabilities `caps`.
/// Reads cu_seqlens / chunk_indices contents from host memory only (the tensors themselves on a
/// host backend, the *_host copies otherwise).
inline status can_implement(const inter_solve_problem& p, const inter_solve_args& a, const backend_caps& caps = {}) {
    return detail::can_implement_step(p, a, caps, step_kind::inter_solve);
}

}  // namespace kda
