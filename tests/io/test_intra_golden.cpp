// tests/io/test_intra_golden.cpp: the intra stage (kda/intra.hpp) on the golden FLA cases
// (tests/data/fla/*.safetensors, produced on an H200 by FLA's Triton kernels). Each file holds FLA's
// inputs q, k, g, beta, the producer's outputs Aqk_diag and Akkd (chunk_kda_fwd_intra_token_parallel,
// or chunk_kda_fwd_kernel_intra_sub_chunk in safe-gate mode) and the inter-solve step's Aqk and Akk.
//
// For every file:
//   1. chunk_kda_intra_diag on q, k, g, beta (flavour from the metadata), against the float64
//      reference::intra_diag, and FLA's producer outputs against the same reference, on the entries
//      both write: Aqk's diagonal blocks on and below the diagonal (j <= i), Akkd's strictly lower part
//      (not safe gate: L_ss) or lower part with the diagonal (safe gate: (I + L_ss)^-1). Ours must be
//      within the rounding-floor tolerance (tests/support/bounds.hpp); FLA's errors are printed.
//   2. chunk_kda_intra (one call), against reference::intra (Aqk's whole causal lower triangle, Akk's
//      lower block triangle, Akk from q, k, g, beta alone), and FLA's final Aqk and Akk against the
//      same reference: ours within the tolerance, FLA's within its measured range. Entries outside the written masks keep their
//      starting zeros, in ours and in FLA's.
// A table of both errors per case is printed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include "support/catch.hpp"
#include "support/metrics.hpp"

namespace {

namespace fs = std::filesystem;
namespace kt = kda::testing;

std::vector<std::string> golden_files() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(KDA_FLA_DATA_DIR))
        if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// Error stats of `out` against `exact` on `mask` (floor: rounding to out's dtype).
kt::error_stats stats(const std::vector<double>& exact, const std::vector<std::uint8_t>& mask, const kda::host_tensor& out) {
    return kt::detail::stats(exact, mask, out);
}

}  // namespace

TEST_CASE("golden FLA cases: the intra stage against float64 and against FLA", "[intra-golden]") {
    const std::vector<std::string> files = golden_files();
    REQUIRE(files.size() >= 9);
    std::printf("%-10s %-4s %-5s | %-31s | %-31s | %-31s | %-31s\n", "case", "X", "gate", "Aqk_diag err: ours / FLA (floor)",
                "Akkd err: ours / FLA", "Aqk err: ours / FLA (floor)", "Akk err: ours / FLA (floor)");
    for (const std::string& path : files) {
        const std::string name = fs::path(path).stem().string();
        INFO("case " << name);
        const kda::io::safetensors_file f = kda::io::safetensors_file::load(path);
        const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(f, name);
        const kda::intra_problem& p = c.problem;
        const kda::dtype X = c.q.type(), A = kda::acc_dtype(X);
        const std::int64_t BC = p.BC;

        // ---- 1. the producer
        kda::host_tensor Aqk_d(X, {p.B, p.T, p.HV, p.BT}), Akkd(A, {p.B, p.T, p.HV, p.BC});
        kda::intra_diag_args d;
        d.q = c.q.ref();
        d.k = c.k.ref();
        d.g = c.g.ref();
        d.beta = c.beta.ref();
        d.Aqk = Aqk_d.mref();
        d.Akkd = Akkd.mref();
        d.cu_seqlens = c.cu_seqlens.ref();
        d.chunk_indices = c.chunk_indices.ref();
        kda::chunk_kda_intra_diag(kda::cpu_backend{2}, p, d);
        const kda::reference::diag_result rd = kda::reference::intra_diag(p, d);

        kda::host_tensor Aqk(X, {p.B, p.T, p.HV, p.BT}), Akk(X, {p.B, p.T, p.HV, p.BT});
        const kda::host_tensor zeros(X, {p.B, p.T, p.HV, p.BT});
        kda::intra_args a;
        a.q = c.q.ref();
        a.k = c.k.ref();
        a.g = c.g.ref();
        a.beta = c.beta.ref();
        a.Aqk = Aqk.mref();
        a.Akk = Akk.mref();
        a.cu_seqlens = c.cu_seqlens.ref();
        a.chunk_indices = c.chunk_indices.ref();
        const kda::reference::result rf = kda::reference::intra(p, a);  // chunk_pos too

        // entries both producers write: j <= i inside the block (Aqk), strictly lower or lower (Akkd)
        std::vector<std::uint8_t> mq(rd.aqk_written.size(), 0), md(rd.akkd_written.size(), 0);
        for (std::int64_t bt = 0; bt < p.B * p.T; ++bt) {
            const std::int64_t i = rf.chunk_pos[static_cast<std::size_t>(bt)];
            if (i < 0) continue;
            for (std::int64_t hv = 0; hv < p.HV; ++hv) {
                for (std::int64_t j = 0; j < p.BT; ++j) {
                    const auto idx = static_cast<std::size_t>((bt * p.HV + hv) * p.BT + j);
                    mq[idx] = rd.aqk_written[idx] && j <= i;
                }
                for (std::int64_t j = 0; j < BC; ++j) {
                    const auto idx = static_cast<std::size_t>((bt * p.HV + hv) * BC + j);
                    md[idx] = rd.akkd_written[idx] && (p.safe_gate ? j <= i % BC : j < i % BC);
                }
            }
        }
        const kt::error_stats oq = stats(rd.Aqk, mq, Aqk_d), fq = stats(rd.Aqk, mq, f.at("Aqk_diag"));
        const kt::error_stats od = stats(rd.Akkd, md, Akkd), fd = stats(rd.Akkd, md, f.at("Akkd"));
        INFO("producer: Aqk_diag ours " << oq.err << " FLA " << fq.err << " floor " << oq.floor << "; Akkd ours " << od.err << " FLA " << fd.err
                                        << " floor " << od.floor);
        CHECK(oq.count > 0);
        CHECK(od.count > 0);
        CHECK(oq.err <= kt::full_precision_tolerance(X, oq.floor));
        CHECK(od.err <= kt::full_precision_tolerance(A, od.floor));
        // the data and the reference agree about FLA's producer: its Akkd is fp32 arithmetic (tf32
        // products in safe-gate mode: ~2.6e-5), its Aqk_diag within 1.2x X's rounding floor
        CHECK(fd.err < (p.safe_gate ? 1e-4 : 1e-6));
        CHECK(fq.err <= 1.2 * fq.floor + 1e-6);

        // ---- 2. the whole stage in one call
        kda::chunk_kda_intra(kda::cpu_backend{2}, p, a);
        const kt::comparison ours = kt::compare(rf, Aqk, Akk, zeros, zeros);
        const kt::comparison fla = kt::compare(rf, f.at("Aqk"), f.at("Akk"), zeros, zeros);
        INFO("stage: Aqk ours " << ours.aqk.err << " FLA " << fla.aqk.err << " floor " << ours.aqk.floor << "; Akk ours " << ours.akk.err << " FLA "
                                << fla.akk.err << " floor " << ours.akk.floor << "; first untouched entry changed " << ours.first_untouched);
        CHECK(ours.untouched_changed == 0);
        CHECK(fla.untouched_changed == 0);
        CHECK(ours.aqk.err <= kt::full_precision_tolerance(X, ours.aqk.floor));
        CHECK(ours.akk.err <= kt::full_precision_tolerance(X, ours.akk.floor));
        CHECK(fla.aqk.err < 3e-3);
        CHECK(fla.akk.err < 1e-3);

        std::printf("%-10s %-4s %-5s | %.3e / %.3e (%.3e) | %.3e / %.3e             | %.3e / %.3e (%.3e) | %.3e / %.3e (%.3e)\n", name.c_str(),
                    std::string(kda::name(X)).c_str(), p.safe_gate ? "safe" : "plain", oq.err, fq.err, oq.floor, od.err, fd.err, ours.aqk.err,
                    fla.aqk.err, ours.aqk.floor, ours.akk.err, fla.akk.err, ours.akk.floor);
    }
}
