// kda/io/case.hpp: one inter-solve call described by a safetensors file (a "case"), as the golden
// files of FLA and the kda-inter-solve command lay it out; or, with case_kind::intra, one call of
// the whole intra stage (kda::chunk_kda_intra, from q, k, g, beta: no Akkd).
//
// Tensors (ALGORITHM.md names; X = q's dtype, Acc = fp32, or fp64 for fp64 data):
//   q, k [B, T, H, K] X;  g [B, T, HV, K] Acc;  beta [B, T, HV] X or fp32;  Akkd [B, T, HV, BC] Acc;
//   scale: one floating value, shape [] or [1];
//   Aqk_diag [B, T, HV, BT] X      optional: Aqk as the producer left it (zeros when absent);
//   cu_seqlens [N + 1], chunk_indices [NT, 2] (int64 or int32)  optional varlen; chunk_indices is
//   built from cu_seqlens when absent.
// Metadata (strings): BT (default 64), BC (16), safe_gate ("true"/"false", default false),
// solve_precision ("tf32", or "fp32"/"ieee"; default fp32). B, T, H, HV, K and dtype may be given
// too; when they are, they must agree with the tensors.
//
// B, T, H, K come from q and HV from g. Loading checks every tensor against the others and then
// runs kda::can_implement (CPU capabilities), so a loaded case is a valid call: T == 0 is a valid
// no-op, as in the library, and K == 0 is refused with the library's message. Every failure is a
// kda::error that starts "kda::io::inter_solve_case: SOURCE:" and names the tensor or metadata key.
//
// case_kind::intra (the intra stage): the same file without Akkd. Akkd and Aqk_diag are ignored
// when present (neither is read nor checked; Aqk starts at zero), and the loaded case is checked
// with kda::can_implement of kda::chunk_kda_intra (intra_args(Aqk, Akk) gives its arguments).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../args.hpp"
#include "../config.hpp"
#include "../intra.hpp"
#include "../reference/host_tensor.hpp"
#include "../types.hpp"
#include "../validate.hpp"
#include "../varlen.hpp"
#include "safetensors.hpp"

namespace kda::io {

/// Which call a case file describes.
enum class case_kind {
    inter_solve,  // kda::inter_solve: q k g beta Akkd scale [Aqk_diag]
    intra,        // kda::chunk_kda_intra: q k g beta scale (Akkd and Aqk_diag ignored)
};

/// The inputs (host_inputs: q, k, g, beta, Akkd, cu_seqlens, chunk_indices, and the argument
/// bundles over them; Akkd undefined for case_kind::intra, the index tensors in dense mode).
struct inter_solve_case : host_inputs {
    std::string source;  // the file, for messages
    inter_solve_problem problem;
    case_kind kind = case_kind::inter_solve;
    host_tensor Aqk_start;                  // Aqk before the step: Aqk_diag, or zeros (always zeros for intra)
    bool built_chunk_indices = false;       // chunk_indices came from cu_seqlens, not the file

    /// Reads and validates a case file.
    static inter_solve_case load(const std::filesystem::path& path, case_kind kind = case_kind::inter_solve) {
        const safetensors_file f = safetensors_file::load(path);
        return from_file(f, detail::printable(path.string()), kind);
    }

    /// Validates a parsed file and copies its inputs.
    static inter_solve_case from_file(const safetensors_file& f, const std::string& source = "<memory>", case_kind kind = case_kind::inter_solve) {
        inter_solve_case c;
        c.source = source;
        c.kind = kind;
        const bool intra = kind == case_kind::intra;
        const std::string where = "kda::io::inter_solve_case: " + source + ": ";
        auto fail = [&](const std::string& what) { KDA_CHECK(false, where << what); };
        auto shape_of = [](const host_tensor& t) { return detail::fmt_extents(t.shape()); };

        // --- presence and ranks
        if (intra) {
            for (const char* nm : {"q", "k", "g", "beta", "scale"})
                if (!f.contains(nm)) fail(std::string("tensor '") + nm + "' is missing (an intra-stage case needs q, k, g, beta and scale)");
        } else {
            for (const char* nm : {"q", "k", "g", "beta", "Akkd", "scale"})
                if (!f.contains(nm)) fail(std::string("tensor '") + nm + "' is missing (a case needs q, k, g, beta, Akkd and scale)");
        }
        const host_tensor& q = f.at("q");
        const host_tensor& k = f.at("k");
        const host_tensor& g = f.at("g");
        const host_tensor& beta = f.at("beta");
        const host_tensor* Akkd = intra ? nullptr : &f.at("Akkd");
        const host_tensor& scale = f.at("scale");
        auto need_rank = [&](const host_tensor& t, const char* nm, int r, const char* axes) {
            if (t.rank() != r) fail(std::string("tensor '") + nm + "': expected rank " + std::to_string(r) + " " + axes + ", got " + shape_of(t));
        };
        need_rank(q, "q", 4, "[B, T, H, K]");
        need_rank(k, "k", 4, "[B, T, H, K]");
        need_rank(g, "g", 4, "[B, T, HV, K]");
        need_rank(beta, "beta", 3, "[B, T, HV]");
        if (Akkd) need_rank(*Akkd, "Akkd", 4, "[B, T, HV, BC]");

        // --- sizes: B, T, H, K from q, HV from g; every other tensor must agree
        inter_solve_problem& p = c.problem;
        p.B = q.shape()[0];
        p.T = q.shape()[1];
        p.H = q.shape()[2];
        p.K = q.shape()[3];
        p.HV = g.shape()[2];
        if (k.shape() != q.shape()) fail("tensor 'k' has shape " + shape_of(k) + " but q has " + shape_of(q) + "; both are [B, T, H, K]");
        if (g.shape()[0] != p.B || g.shape()[1] != p.T || g.shape()[3] != p.K)
            fail("tensor 'g' has shape " + shape_of(g) + " but q " + shape_of(q) + " says [B, T, HV, K] = [" + std::to_string(p.B) + ", " +
                 std::to_string(p.T) + ", HV, " + std::to_string(p.K) + "]");
        if (beta.shape() != std::vector<std::int64_t>{p.B, p.T, p.HV})
            fail("tensor 'beta' has shape " + shape_of(beta) + " but q and g say [B, T, HV] = " + detail::fmt_extents({p.B, p.T, p.HV}));
        if (Akkd && (Akkd->shape()[0] != p.B || Akkd->shape()[1] != p.T || Akkd->shape()[2] != p.HV))
            fail("tensor 'Akkd' has shape " + shape_of(*Akkd) + " but q and g say [B, T, HV, BC] = [" + std::to_string(p.B) + ", " +
                 std::to_string(p.T) + ", " + std::to_string(p.HV) + ", BC]");

        // --- metadata
        // BT and BC size the outputs, so they are checked before anything is allocated.
        p.BT = static_cast<int>(meta_int(f, "BT", 64, where, 1 << 20));
        p.BC = static_cast<int>(meta_int(f, "BC", 16, where, 1 << 20));
        if (p.BT != 32 && p.BT != 64) fail("metadata 'BT': expected 32 or 64, got " + std::to_string(p.BT));
        if (p.BC != 16) fail("metadata 'BC': expected 16, got " + std::to_string(p.BC));
        p.safe_gate = meta_bool(f, "safe_gate", false, where);
        if (const auto sp = f.meta("solve_precision")) {
            if (*sp == "tf32")
                p.solve_precision = precision::tf32;
            else if (*sp == "fp32" || *sp == "ieee")
                p.solve_precision = precision::fp32;
            else
                fail("metadata 'solve_precision': expected tf32, fp32 or ieee, got " + detail::printable(*sp));
        }
        const std::pair<const char*, std::int64_t> sizes[] = {{"B", p.B}, {"T", p.T}, {"H", p.H}, {"HV", p.HV}, {"K", p.K}};
        for (const auto& [key, have] : sizes)
            if (f.meta(key)) {
                const std::int64_t said = meta_int(f, key, 0, where);
                if (said != have)
                    fail(std::string("metadata '") + key + "' = " + std::to_string(said) + " disagrees with the tensors (" + key + " = " +
                         std::to_string(have) + " from " + (std::string(key) == "HV" ? "g " + shape_of(g) : "q " + shape_of(q)) + ")");
            }
        if (Akkd && Akkd->shape()[3] != p.BC)
            fail("tensor 'Akkd' has " + std::to_string(Akkd->shape()[3]) + " columns but BC = " + std::to_string(p.BC) +
                 (f.meta("BC") ? " (metadata)" : " (default; no BC metadata)"));
        if (const auto dt = f.meta("dtype")) {
            const auto said = dtype_from_name(*dt);
            if (!said) fail("metadata 'dtype': unknown dtype " + detail::printable(*dt));
            if (*said != q.type())
                fail("metadata 'dtype' = " + detail::printable(*dt) + " disagrees with q's dtype " + std::string(name(q.type())));
        }

        // --- dtypes that the library would refuse with a less specific message
        if (!is_floating(q.type())) fail("tensor 'q': expected dtype BF16, F16, F32 or F64, got " + std::string(safetensors_name(q.type())));
        if (k.type() != q.type())
            fail("tensor 'k' has dtype " + std::string(safetensors_name(k.type())) + " but q has " + std::string(safetensors_name(q.type())));

        // --- scale
        if (scale.numel() != 1 || scale.rank() > 1) fail("tensor 'scale': expected one value (shape [] or [1]), got " + shape_of(scale));
        if (!is_floating(scale.type())) fail("tensor 'scale': expected a floating dtype, got " + std::string(safetensors_name(scale.type())));
        p.scale = read_scalar(scale);

        // --- optional tensors
        const extents_t out_shape{p.B, p.T, p.HV, p.BT};
        if (const host_tensor* d = intra ? nullptr : f.find("Aqk_diag")) {
            if (d->rank() != 4 || d->shape()[0] != p.B || d->shape()[1] != p.T || d->shape()[2] != p.HV)
                fail("tensor 'Aqk_diag' has shape " + shape_of(*d) + ", expected [B, T, HV, BT] = " + detail::fmt_extents({p.B, p.T, p.HV, p.BT}));
            if (d->shape()[3] != p.BT)
                fail("tensor 'Aqk_diag' has " + std::to_string(d->shape()[3]) + " columns but BT = " + std::to_string(p.BT) +
                     (f.meta("BT") ? " (metadata)" : " (default; no BT metadata)"));
            if (d->type() != q.type())
                fail("tensor 'Aqk_diag' has dtype " + std::string(safetensors_name(d->type())) + " but q has " +
                     std::string(safetensors_name(q.type())));
            c.Aqk_start = d->clone();
        } else {
            c.Aqk_start = host_tensor(q.type(), {out_shape[0], out_shape[1], out_shape[2], out_shape[3]});
        }
        c.q = q.clone();
        c.k = k.clone();
        c.g = g.clone();
        c.beta = beta.clone();
        if (Akkd) c.Akkd = Akkd->clone();
        if (const host_tensor* cu = f.find("cu_seqlens")) c.cu_seqlens = cu->clone();
        if (const host_tensor* ci = f.find("chunk_indices")) c.chunk_indices = ci->clone();

        // --- the library's own checks (sizes, dtypes, HV % H, K range, cu_seqlens contents, ...)
        host_tensor Aqk = c.Aqk_start.clone(), Akk = c.initial_akk();
        const status st = intra ? can_implement(p, c.intra_args(Aqk, Akk)) : can_implement(p, c.args(Aqk, Akk));
        if (!st) fail(st.message);
        if (c.cu_seqlens.defined() && !c.chunk_indices.defined() && p.T > 0) {
            const auto ci = prepare_chunk_indices(kda::detail::read_indices(c.cu_seqlens.ref()), p.BT);
            c.chunk_indices = host_tensor(dtype::i64, {static_cast<std::int64_t>(ci.size() / 2), 2});
            std::copy(ci.begin(), ci.end(), c.chunk_indices.data<std::int64_t>());
            c.built_chunk_indices = true;
        }
        return c;
    }

    /// A fresh Aqk output holding the starting values.
    [[nodiscard]] host_tensor initial_aqk() const { return Aqk_start.clone(); }
    /// A fresh, zero Akk output.
    [[nodiscard]] host_tensor initial_akk() const { return host_tensor(q.type(), {problem.B, problem.T, problem.HV, problem.BT}); }

    /// dtype from a metadata spelling: kda's (bf16), torch's (bfloat16, torch.bfloat16) or safetensors' (BF16).
    static std::optional<dtype> dtype_from_name(std::string s) {
        if (s.rfind("torch.", 0) == 0) s = s.substr(6);
        if (const auto t = dtype_from_safetensors(s)) return t;
        const std::pair<const char*, dtype> names[] = {{"bf16", dtype::bf16},    {"bfloat16", dtype::bf16}, {"fp16", dtype::fp16},
                                                       {"float16", dtype::fp16}, {"half", dtype::fp16},     {"fp32", dtype::fp32},
                                                       {"float32", dtype::fp32}, {"float", dtype::fp32},    {"fp64", dtype::fp64},
                                                       {"float64", dtype::fp64}, {"double", dtype::fp64}};
        for (const auto& [n, t] : names)
            if (s == n) return t;
        return std::nullopt;
    }

private:
    static std::int64_t meta_int(const safetensors_file& f, const char* key, std::int64_t fallback, const std::string& where,
                                 std::int64_t max = std::int64_t{1} << 40) {
        const auto v = f.meta(key);
        if (!v) return fallback;
        std::int64_t out = 0;
        const char* b = v->data();
        const char* e = b + v->size();
        const auto [ptr, ec] = std::from_chars(b, e, out);
        KDA_CHECK(ec == std::errc() && ptr == e && !v->empty(), where << "metadata '" << key << "': expected an integer, got " << detail::printable(*v));
        KDA_CHECK(out >= 0 && out <= max, where << "metadata '" << key << "': expected a size in [0, " << max << "], got " << out);
        return out;
    }
    static bool meta_bool(const safetensors_file& f, const char* key, bool fallback, const std::string& where) {
        const auto v = f.meta(key);
        if (!v) return fallback;
        if (*v == "true" || *v == "True" || *v == "1") return true;
        if (*v == "false" || *v == "False" || *v == "0") return false;
        KDA_CHECK(false, where << "metadata '" << key << "': expected true or false, got " << detail::printable(*v));
        return fallback;
    }
    static double read_scalar(const host_tensor& t) {
        switch (t.type()) {
            case dtype::fp32: return *t.data<float>();
            case dtype::fp64: return *t.data<double>();
            case dtype::bf16: {
                const std::uint32_t bits = static_cast<std::uint32_t>(t.data<bf16_t>()->bits) << 16;
                float v;
                std::memcpy(&v, &bits, 4);
                return v;
            }
            case dtype::fp16: return half_to_double(t.data<fp16_t>()->bits);
            default: return 0;
        }
    }
    /// IEEE binary16 -> double, exact (the core has no half arithmetic; see kda/types.hpp).
    static double half_to_double(std::uint16_t h) {
        const int sign = (h >> 15) ? -1 : 1;
        const int exp = (h >> 10) & 0x1f;
        const int man = h & 0x3ff;
        if (exp == 0) return sign * std::ldexp(static_cast<double>(man), -24);
        if (exp == 31) return man ? std::nan("") : sign * INFINITY;
        return sign * std::ldexp(static_cast<double>(man | 0x400), exp - 25);
    }
};

}  // namespace kda::io
