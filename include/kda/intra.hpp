// kda/intra.hpp: the whole intra-chunk stage of the KDA forward pass, from (q, k, g, beta).
//
//   kda::chunk_local_cumsum(backend, cumsum_problem, cumsum_args)
//       per-token log-decays (optionally raw gate inputs, through KDA's gate activations)
//       -> chunk-local cumulative sums in log2 space: the `g` every other call takes.
//   kda::chunk_kda_intra(backend, intra_problem, intra_args)            <- the one-call path
//       (q, k, g, beta) -> Aqk (the whole causal lower triangle of each chunk, diagonal blocks
//       included) and Akk = (I + L)^-1 (its lower block triangle).
//   kda::chunk_kda_intra_diag(backend, intra_problem, intra_diag_args)
//       only the producer of the diagonal blocks: Aqk's diagonal blocks and Akkd, the input of
//       kda::inter_solve (FLA's chunk_kda_fwd_intra_token_parallel / ..._intra_sub_chunk).
//
// The two flavours of the producer (problem.safe_gate, as in FLA):
//   not safe gate: every diagonal-block entry is sum_k x_i[k] k_j[k] 2^(g_i[k] - g_j[k]), exponents
//       <= 0 for decaying gates; the backends factorise it around a row of the sub-chunk while its
//       gates stay within their bound of that row and evaluate it term by term past it, so it is
//       finite for any decay; Akkd row i holds beta_i L[i, j] for j < i inside the sub-chunk, 0
//       elsewhere.
//   safe gate: one factorisation per sub-chunk around its midpoint row r = min(BC / 2, n_s - 1),
//       2^(g_i - g_j) = 2^(g_i - g_r) 2^(g_r - g_j), so that no factor exceeds about half of the
//       sub-chunk's decay (FLA's lower-bounded gate keeps that inside fp32); Akkd then holds the
//       block's inverse (I + L_ss)^-1 (unit lower triangle, 0 above).
//
// What is written (rows of tokens inside a sequence only; n = rows of the token's chunk):
//   chunk_kda_intra_diag: Aqk[t_i, j] for j in i's sub-chunk and j < n (scale * S_qk for j <= i,
//       0 for j > i); Akkd[t_i, 0 .. BC) (all BC entries). Nothing else.
//   chunk_kda_intra: Aqk[t_i, j] for j / BC <= i / BC and j < n (0 above the diagonal inside the
//       diagonal blocks); Akk[t_i, j] for j / BC <= i / BC and j < n. Blocks above the diagonal
//       blocks are left untouched (zero-initialise the outputs to get zeros there), as in FLA.
//       `Akkd` is an optional workspace [B, T, HV, BC] in the accumulator type. The CPU
//       backend runs the producer into it (or into a per-call buffer when absent). The CUDA
//       backend's fused kernel (the default) neither needs nor touches it; its two-kernel path
//       (cuda_backend::fuse_intra = false) requires it (the backend never allocates).
//       The CUDA fused kernel evaluates the diagonal blocks of both flavours alike: factorised
//       around each sub-chunk's first row while its gates stay within 2^+-112 of it (always
//       true for FLA's lower-bounded safe gate), term by term past that.
//       Optional WY outputs (FLA's recompute_w_u_fwd, formed in the same pass from Akk before it
//       is rounded to X; each written where given, every row of a sequence, all columns):
//         w  [B, T, HV, K] = Akk (beta k 2^g)        u  [B, T, HV, V] = Akk (beta v)
//         kg [B, T, HV, K] = k 2^(g_last - g)        qg [B, T, HV, K] = q 2^g
//       products over the chunk's rows (Akk's whole lower triangle, the blocks the stage writes),
//       beta of the row, g_last the gate of the chunk's last row; u needs v [B, T, HV, V] and
//       problem.V. All of dtype X.
//
// Every entry point validates all arguments first and throws kda::error naming the argument;
// nothing is written on failure. T == 0 is a no-op.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>

#include "args.hpp"
#include "dispatch.hpp"
#include "inter_solve.hpp"
#include "tensor.hpp"
#include "validate.hpp"

namespace kda {

/// The producer and the whole stage take the inter-solve step's problem description (sizes, scale,
/// BT, BC, safe_gate, solve_precision).
using intra_problem = inter_solve_problem;

/// Tensors of chunk_kda_intra_diag.
struct intra_diag_args {
    tensor_ref q, k, g, beta;  // as for inter_solve
    mutable_tensor_ref Aqk;    // [B, T, HV, BT] X: the diagonal blocks are written
    mutable_tensor_ref Akkd;   // [B, T, HV, BC] Acc: L_ss rows (not safe) or (I + L_ss)^-1 rows (safe)
    tensor_ref cu_seqlens, chunk_indices, cu_seqlens_host, chunk_indices_host;  // as for inter_solve
};

/// Tensors of chunk_kda_intra.
struct intra_args {
    tensor_ref q, k, g, beta;    // as for inter_solve
    mutable_tensor_ref Aqk, Akk;  // [B, T, HV, BT] X
    mutable_tensor_ref Akkd;      // optional workspace [B, T, HV, BC] Acc (see the top of this file)
    tensor_ref cu_seqlens, chunk_indices, cu_seqlens_host, chunk_indices_host;
    // optional WY outputs (see the top of this file): v [B, T, HV, V] X (with u only), w, kg, qg
    // [B, T, HV, K] X, u [B, T, HV, V] X
    tensor_ref v;
    mutable_tensor_ref w, u, kg, qg;
    [[nodiscard]] bool wy() const { return !w.empty_view() || !u.empty_view() || !kg.empty_view() || !qg.empty_view(); }
};

namespace detail {
/// The tensors every call shares (inputs, Aqk, the index tensors), copied from any args bundle.
template <class To, class From>
To with_common(const From& a) {
    To r;
    r.q = a.q;
    r.k = a.k;
    r.g = a.g;
    r.beta = a.beta;
    r.Aqk = a.Aqk;
    r.cu_seqlens = a.cu_seqlens;
    r.chunk_indices = a.chunk_indices;
    r.cu_seqlens_host = a.cu_seqlens_host;
    r.chunk_indices_host = a.chunk_indices_host;
    return r;
}

/// The producer's tensors in the inter-solve bundle (Akkd: a read-only view of the output).
inline inter_solve_args as_inter_solve(const intra_diag_args& a) {
    inter_solve_args r = with_common<inter_solve_args>(a);
    r.Akkd = as_const(a.Akkd);
    return r;
}
/// The whole stage's tensors in the inter-solve bundle (Akkd: the workspace, when given).
inline inter_solve_args as_inter_solve(const intra_args& a) {
    inter_solve_args r = with_common<inter_solve_args>(a);
    r.Akkd = as_const(a.Akkd);
    r.Akk = a.Akk;
    return r;
}
/// The producer's half of a chunk_kda_intra call, writing into `akkd`.
inline intra_diag_args diag_part(const intra_args& a, const mutable_tensor_ref& akkd) {
    intra_diag_args r = with_common<intra_diag_args>(a);
    r.Akkd = akkd;
    return r;
}
}  // namespace detail

/// Checks every argument of a chunk_kda_intra_diag call.
inline status can_implement(const intra_problem& p, const intra_diag_args& a, const backend_caps& caps = {}) {
    return detail::can_implement_step(p, detail::as_inter_solve(a), caps, step_kind::intra_diag);
}
namespace detail {
/// The WY outputs of a chunk_kda_intra call (and v), on top of the step's checks: layouts, and no
/// overlap with each other, the stage's outputs or any input.
inline status check_wy(const intra_problem& p, const intra_args& a, const backend_caps& caps) {
    checker c(step_name(step_kind::intra));
    const bool has_v = !a.v.empty_view(), has_u = !a.u.empty_view();
    if (has_u && !has_v) return c.fail("v", "is required when u is given"), c.result();
    if (has_v && !has_u) return c.fail("v", "was given without u (v is read only to form u)"), c.result();
    if (has_u && p.V < 1) return c.fail("V", "expected V >= 1 with u and v, got ", p.V), c.result();
    const dtype X = a.q.type;
    const extents_t wk{p.B, p.T, p.HV, p.K}, wv{p.B, p.T, p.HV, p.V};
    const std::pair<const char*, const mutable_tensor_ref*> outs[] = {{"w", &a.w}, {"u", &a.u}, {"kg", &a.kg}, {"qg", &a.qg}};
    if (has_v) check_layout(c, "v", a.v, {X}, wv, 4, "[B, T, HV, V]", true, caps.alignment);
    for (auto [nm, t] : outs)
        if (!t->empty_view()) check_layout(c, nm, *t, {X}, t == &a.u ? wv : wk, 4, t == &a.u ? "[B, T, HV, V]" : "[B, T, HV, K]", true, caps.alignment);
    if (!c.ok() || p.T == 0) return c.result();
    const tensor_ref aqk = as_const(a.Aqk), akk = as_const(a.Akk), akkd = as_const(a.Akkd);
    std::vector<std::pair<const char*, const tensor_ref*>> others = {{"q", &a.q}, {"k", &a.k}, {"g", &a.g}, {"beta", &a.beta}, {"Aqk", &aqk}, {"Akk", &akk}};
    if (!a.Akkd.empty_view()) others.emplace_back("Akkd", &akkd);
    if (has_v) others.emplace_back("v", &a.v);
    auto disjoint = [](byte_range x, byte_range y) { return x.hi <= y.lo || y.hi <= x.lo; };
    std::vector<tensor_ref> done;
    std::vector<const char*> done_names;
    for (auto [nm, t] : outs) {
        if (t->empty_view() || t->numel() == 0) continue;
        const tensor_ref ct = as_const(*t);
        if (!non_self_overlapping(ct)) return c.fail(nm, "strides ", describe_strides(ct), " make distinct entries overlap"), c.result();
        const auto r = range_of(ct);
        for (auto [onm, o] : others)
            if (!o->empty_view() && o->numel() > 0 && !disjoint(range_of(*o), r)) return c.fail(nm, "overlaps the memory of ", onm), c.result();
        for (std::size_t e = 0; e < done.size(); ++e)
            if (!disjoint(range_of(done[e]), r)) return c.fail(nm, "overlaps the memory of ", done_names[e]), c.result();
        done.push_back(ct);
        done_names.push_back(nm);
    }
    return c.result();
}
}  // namespace detail

/// Checks every argument of a chunk_kda_intra call (Akkd only when given; the WY outputs and v
/// only when given).
inline status can_implement(const intra_problem& p, const intra_args& a, const backend_caps& caps = {}) {
    const status st = detail::can_implement_step(p, detail::as_inter_solve(a), caps, step_kind::intra);
    if (!st) return st;
    if (!a.wy() && a.v.empty_view()) return st;
    return detail::check_wy(p, a, caps);
}

// ---------------------------------------------------------------------------------------------
// The gate cumsum.

/// What the per-token input of chunk_local_cumsum is (FLA's kda_gate_chunk_cumsum).
enum class gate_activation {
    none,             // g already holds per-token log-decays (natural log)
    kda,              // log-decay = -exp(A_log[hv]) softplus(g + dt_bias[hv, k])
    kda_lower_bound,  // log-decay = lower_bound sigmoid(exp(A_log[hv]) (g + dt_bias[hv, k]))
                      // (without A_log: lower_bound sigmoid(g + dt_bias)); the safe-gate form
};

/// Sizes and modes of a chunk_local_cumsum call.
struct cumsum_problem {
    std::int64_t B = 1, T = 0, HV = 1, K = 0;
    int BT = 64;                             // chunk size: the sums restart at every chunk start
    double scale = 1.0 / std::numbers::ln2;  // multiplies the sums: 1 / ln 2 gives log2 space
    gate_activation activation = gate_activation::none;
    double lower_bound = -5.0;  // kda_lower_bound only; must be < 0
};

/// Tensors of a chunk_local_cumsum call.
///   g        [B, T, HV, K]  bf16, fp16, fp32 (fp64 on the CPU); K contiguous
///   A_log    [HV]           fp32 (fp64 with fp64 g): required for kda, optional for kda_lower_bound
///   dt_bias  [HV * K]       same dtype as A_log, optional (added to g before the activation)
///   g_out    [B, T, HV, K]  fp32 (fp64 with fp64 g); may not overlap the inputs
///   cu_seqlens [N + 1] int64/int32 (varlen, B == 1): chunks restart at every sequence start
struct cumsum_args {
    tensor_ref g, A_log, dt_bias;
    mutable_tensor_ref g_out;
    tensor_ref cu_seqlens, cu_seqlens_host;
};

/// Checks every argument of a chunk_local_cumsum call.
inline status can_implement(const cumsum_problem& p, const cumsum_args& a, const backend_caps& caps = {}) {
    detail::checker c("kda::chunk_local_cumsum");
    if (p.B < 1) c.fail("B", "expected B >= 1, got ", p.B);
    if (p.T < 0) c.fail("T", "expected T >= 0, got ", p.T);
    if (p.HV < 1) c.fail("HV", "expected HV >= 1, got ", p.HV);
    if (p.K < 1) c.fail("K", "expected K >= 1, got ", p.K);
    if (p.BT < 1 || p.BT > 4096) c.fail("BT", "expected 1 <= BT <= 4096, got ", p.BT);
    if (!std::isfinite(p.scale)) c.fail("scale", "expected a finite number, got ", p.scale);
    if (p.activation == gate_activation::kda_lower_bound && !(p.lower_bound < 0 && std::isfinite(p.lower_bound)))
        c.fail("lower_bound", "expected a finite negative number, got ", p.lower_bound);
    const bool has_cu = !a.cu_seqlens.empty_view();
    if (has_cu && p.B != 1) c.fail("B", "expected B == 1 with cu_seqlens (varlen), got B = ", p.B);
    if (!c.ok()) return c.result();
    const dtype X = a.g.type;
    if (!a.g.empty_view()) {
        if (!is_floating(X)) return c.fail("g", "expected dtype bf16, fp16, fp32 or fp64, got ", name(X)), c.result();
        if (X == dtype::fp64 && !caps.supports_fp64)
            return c.fail("g", "dtype fp64 is not supported by the ", caps.name, " backend (expected bf16, fp16 or fp32)"), c.result();
    }
    const dtype A = acc_dtype(X);
    const extents_t gk{p.B, p.T, p.HV, p.K};
    detail::check_layout(c, "g", a.g, {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64}, gk, 4, "[B, T, HV, K]", true, caps.alignment);
    detail::check_layout(c, "g_out", a.g_out, {A}, gk, 4, "[B, T, HV, K]", true, caps.alignment);
    const bool need_a = p.activation == gate_activation::kda;
    const bool use_a = p.activation != gate_activation::none && !a.A_log.empty_view();
    const bool use_bias = p.activation != gate_activation::none && !a.dt_bias.empty_view();
    if (p.activation == gate_activation::none) {
        if (!a.A_log.empty_view()) c.fail("A_log", "was given, but activation is none (g holds log-decays already)");
        if (!a.dt_bias.empty_view()) c.fail("dt_bias", "was given, but activation is none (g holds log-decays already)");
    }
    if (need_a || use_a) detail::check_layout(c, "A_log", a.A_log, {A}, extents_t{p.HV, 0, 0, 0}, 1, "[HV]", true, 0);
    if (use_bias) detail::check_layout(c, "dt_bias", a.dt_bias, {A}, extents_t{p.HV * p.K, 0, 0, 0}, 1, "[HV * K]", true, 0);
    if (!c.ok() || p.T == 0) return c.result();
    if (!detail::non_self_overlapping(a.g_out)) return c.fail("g_out", "strides ", describe_strides(a.g_out), " make distinct entries overlap"), c.result();
    {
        auto disjoint = [](detail::byte_range x, detail::byte_range y) { return x.hi <= y.lo || y.hi <= x.lo; };
        const auto ro = detail::range_of(a.g_out);
        const std::pair<const char*, const tensor_ref*> ins[] = {{"g", &a.g}, {"A_log", &a.A_log}, {"dt_bias", &a.dt_bias}};
        for (auto [nm, t] : ins)
            if (!t->empty_view() && t->numel() > 0 && !disjoint(detail::range_of(*t), ro)) return c.fail("g_out", "overlaps the memory of input ", nm), c.result();
    }
    if (!has_cu) return c.result();
    // varlen: reuse the inter-solve checks of cu_seqlens (shape, dtype, contents from host memory)
    inter_solve_problem ip;
    ip.B = 1;
    ip.T = p.T;
    ip.K = 1;
    inter_solve_args ia;
    ia.cu_seqlens = a.cu_seqlens;
    ia.cu_seqlens_host = a.cu_seqlens_host;
    return detail::check_varlen(c, ip, ia, caps);
}

// ---------------------------------------------------------------------------------------------
// Policy templates and entry points.

/// Primary template of the intra stage for one compile-time chunk size: only backends specialise
/// it. A specialisation provides
///   template <class X, class Mode> static void launch_diag(be, p, const intra_diag_args&);
///   template <class X, class Mode> static void launch_intra(be, p, const intra_args&);
/// on validated arguments.
template <class Backend, int BT, int BC>
struct chunk_kda_intra_policy {
    static_assert(detail::always_false<Backend>,
                  "kda::chunk_kda_intra_policy has no implementation for this Backend: include <kda/cpu/intra.hpp> "
                  "for kda::cpu_backend, or <kda/cuda/intra.cuh> (compiled by nvcc) for kda::cuda_backend.");
};

/// The gate cumsum of a backend: only backends specialise it, with
///   static void run(be, const cumsum_problem&, const cumsum_args&) on validated arguments.
template <class Backend>
struct chunk_local_cumsum_impl {
    static_assert(detail::always_false<Backend>,
                  "kda::chunk_local_cumsum has no implementation for this Backend: include <kda/cpu/intra.hpp> or <kda/cuda/intra.cuh>.");
};

namespace detail {
template <class Backend, class Args>
void validate_intra_or_throw(const Backend& be, const intra_problem& p, const Args& a) {
    const status st = can_implement(p, a, Backend::caps());
    if (!st) throw kda::error(st.message);
    be.check(p, as_inter_solve(a));
}

/// Calls F::template operator()<Policy, X, Mode>() for the runtime BT, dtype and modes.
template <class Backend, class F>
void dispatch_intra(const intra_problem& p, dtype X, F&& f) {
    dispatch_bt(p.BT, [&]<int BT>() {
        using policy = chunk_kda_intra_policy<Backend, BT, 16>;
        dispatch_type(typename Backend::element_types{}, X, Backend::caps().name, [&]<class T>() {
            dispatch_bool(p.safe_gate, [&](auto sg) {
                dispatch_precision(Backend::effective_precision(p.solve_precision),
                                   [&]<precision P>() { f.template operator()<policy, T, variant<decltype(sg)::value, P>>(); });
            });
        });
    });
}
}  // namespace detail

/// The diagonal-block producer alone (see the top of this file).
template <class Backend>
void chunk_kda_intra_diag(const Backend& be, const intra_problem& p, const intra_diag_args& a) {
    detail::validate_intra_or_throw(be, p, a);
    if (p.T == 0) return;
    detail::dispatch_intra<Backend>(p, a.q.type, [&]<class Policy, class X, class Mode>() { Policy::template launch_diag<X, Mode>(be, p, a); });
}

/// The whole intra-chunk stage in one call (see the top of this file).
template <class Backend>
void chunk_kda_intra(const Backend& be, const intra_problem& p, const intra_args& a) {
    detail::validate_intra_or_throw(be, p, a);
    if (p.T == 0) return;
    detail::dispatch_intra<Backend>(p, a.q.type, [&]<class Policy, class X, class Mode>() { Policy::template launch_intra<X, Mode>(be, p, a); });
}

/// Chunk-local cumulative sums of the (activated) per-token log-decays, times scale.
template <class Backend>
void chunk_local_cumsum(const Backend& be, const cumsum_problem& p, const cumsum_args& a) {
    const status st = can_implement(p, a, Backend::caps());
    if (!st) throw kda::error(st.message);
    if (p.T == 0) return;
    chunk_local_cumsum_impl<Backend>::run(be, p, a);
}

}  // namespace kda
