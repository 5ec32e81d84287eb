// tests/cuda/test_golden.cpp: the golden FLA cases (tests/data/fla) on the CUDA backend, in both
// precisions. fp32: within the floor-based bounds of tests/support/metrics.hpp against the float64
// reference. tf32 (FLA's products): at least as accurate as FLA's own outputs in the file (within
// 5%), on Aqk and on Akk. Entries the step must not write keep their starting values.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_bridge.hpp>
#include <kda/io/case.hpp>
#include <kda/intra.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>
#include <kda/reference/reference.hpp>

#include "support/catch.hpp"
#include "support/metrics.hpp"

TEST_CASE("cuda: golden FLA cases against float64 and against FLA", "[cuda][golden]") {
    const std::string name = GENERATE(as<std::string>{}, "basic_tail", "gva", "varlen", "k80", "bt32", "safe_gate", "fp16", "fp32", "fp32_ieee");
    INFO("case " << name);
    const std::string path = std::string(KDA_FLA_DATA_DIR) + "/" + name + ".safetensors";
    const kda::io::safetensors_file f = kda::io::safetensors_file::load(path);
    const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(f, name);
    const kda::dtype X = c.q.type();

    kda::host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
    const kda::reference::result ref = kda::reference::inter_solve(c.problem, c.args(a0, k0));
    const auto fla = kda::testing::compare(ref, f.at("Aqk"), f.at("Akk"), a0, k0);

    for (kda::precision prec : {kda::precision::fp32, kda::precision::tf32}) {
        kda::inter_solve_problem p = c.problem;
        p.solve_precision = prec;
        kda::host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
        kda::bridge::cuda_inter_solve_host(p, c.args(Aqk, Akk));
        const auto ours = kda::testing::compare(ref, Aqk, Akk, a0, k0);
        INFO(kda::name(prec) << ": Aqk " << ours.aqk.err << " (FLA " << fla.aqk.err << ", floor " << ours.aqk.floor << "), Akk " << ours.akk.err
                             << " (FLA " << fla.akk.err << ", floor " << ours.akk.floor << "); first untouched entry changed: " << ours.first_untouched);
        CHECK(ours.aqk.count > 0);
        CHECK(ours.akk.count > 0);
        CHECK(ours.untouched_changed == 0);
        if (prec == kda::precision::fp32) {
            CHECK(ours.aqk.err <= kda::testing::full_precision_tolerance(X, ours.aqk.floor));
            CHECK(ours.akk.err <= kda::testing::full_precision_tolerance(X, ours.akk.floor));
        } else {
            CHECK(ours.aqk.err <= 1.05 * fla.aqk.err);
            CHECK(ours.akk.err <= 1.05 * fla.akk.err);
        }
        std::printf("golden cuda %-10s %-4s %-4s  Aqk: ours %.3e floor %.3e (%.3fx) FLA %.3e (%.3fx)  |  Akk: ours %.3e floor %.3e (%.3fx) FLA %.3e (%.3fx)\n",
                    name.c_str(), std::string(kda::name(X)).c_str(), std::string(kda::name(prec)).c_str(), ours.aqk.err, ours.aqk.floor,
                    ours.aqk.ratio(), fla.aqk.err, fla.aqk.ratio(), ours.akk.err, ours.akk.floor, ours.akk.ratio(), fla.akk.err, fla.akk.ratio());
    }
}

TEST_CASE("cuda: golden FLA cases through the whole intra stage", "[cuda][golden][intra]") {
    const std::string name = GENERATE(as<std::string>{}, "basic_tail", "gva", "varlen", "k80", "bt32", "safe_gate", "fp16", "fp32", "fp32_ieee");
    INFO("case " << name);
    const std::string path = std::string(KDA_FLA_DATA_DIR) + "/" + name + ".safetensors";
    const kda::io::safetensors_file f = kda::io::safetensors_file::load(path);
    const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(f, name);
    const kda::dtype X = c.q.type();

    // FLA's outputs (its producer's diagonal blocks + its inter-solve step) against float64
    kda::host_tensor z0 = c.initial_akk(), z1 = c.initial_akk();
    const kda::inter_solve_args ia = c.args(z0, z1);
    kda::intra_args a;
    a.q = ia.q, a.k = ia.k, a.g = ia.g, a.beta = ia.beta;
    a.cu_seqlens = ia.cu_seqlens, a.chunk_indices = ia.chunk_indices;
    a.Aqk = z0.mref(), a.Akk = z1.mref();
    const kda::reference::result ref = kda::reference::intra(c.problem, a);
    const auto fla = kda::testing::compare(ref, f.at("Aqk"), f.at("Akk"), z0, z1);

    // the producer alone, against float64 and FLA's Aqk_diag / Akkd, on the entries both write:
    // Aqk's diagonal blocks on and below the diagonal; Akkd's strict lower part (not safe) or lower
    // part with the diagonal (safe gate)
    {
        const kda::intra_problem& p = c.problem;
        kda::host_tensor dAqk = c.initial_akk(), dAkkd(kda::dtype::fp32, {p.B, p.T, p.HV, 16});
        kda::intra_diag_args d;
        d.q = a.q, d.k = a.k, d.g = a.g, d.beta = a.beta, d.cu_seqlens = a.cu_seqlens, d.chunk_indices = a.chunk_indices;
        d.Aqk = dAqk.mref(), d.Akkd = dAkkd.mref();
        kda::bridge::cuda_intra_diag_host(p, d);
        const kda::reference::diag_result dr = kda::reference::intra_diag(p, d);
        std::vector<std::uint8_t> mq = dr.aqk_written, mk = dr.akkd_written;
        auto row_in_block = [&](std::int64_t flat_row) { return ref.chunk_pos[static_cast<std::size_t>(flat_row / p.HV)] % 16; };
        for (std::size_t i = 0; i < mq.size(); ++i)
            if (mq[i] && static_cast<int>(i % static_cast<std::size_t>(p.BT)) % 16 > row_in_block(static_cast<std::int64_t>(i) / p.BT)) mq[i] = 0;
        for (std::size_t i = 0; i < mk.size(); ++i) {
            const int j = static_cast<int>(i % 16), r = row_in_block(static_cast<std::int64_t>(i) / 16);
            if (mk[i] && (p.safe_gate ? j > r : j >= r)) mk[i] = 0;
        }
        const auto oq = kda::testing::detail::stats(dr.Aqk, mq, dAqk), fq = kda::testing::detail::stats(dr.Aqk, mq, f.at("Aqk_diag"));
        const auto ok_ = kda::testing::detail::stats(dr.Akkd, mk, dAkkd), fk = kda::testing::detail::stats(dr.Akkd, mk, f.at("Akkd"));
        INFO("producer: Aqk_diag ours " << oq.err << " FLA " << fq.err << " floor " << oq.floor << "; Akkd ours " << ok_.err << " FLA " << fk.err);
        CHECK(oq.count > 0);
        CHECK(oq.err <= kda::testing::full_precision_tolerance(X, oq.floor));
        // Akkd is fp32 arithmetic on fp32 storage: the fp32 bound (64x its floor; measured on the H200:
        // 1.5e-7 against FLA's 1.0e-7, 5.8e-9 in safe-gate mode)
        CHECK(ok_.err <= kda::testing::full_precision_tolerance(kda::dtype::fp32, ok_.floor));
        std::printf("golden cuda diag  %-10s %-4s  Aqk_diag: ours %.3e FLA %.3e floor %.3e  |  Akkd: ours %.3e FLA %.3e\n", name.c_str(),
                    std::string(kda::name(X)).c_str(), oq.err, fq.err, oq.floor, ok_.err, fk.err);
    }

    for (bool fuse : {true, false})
    for (kda::precision prec : {kda::precision::fp32, kda::precision::tf32}) {
        kda::intra_problem p = c.problem;
        p.solve_precision = prec;
        kda::host_tensor Aqk = c.initial_akk(), Akk = c.initial_akk();  // zeros
        const kda::host_tensor Aqk0 = Aqk.clone(), Akk0 = Akk.clone();
        a.Aqk = Aqk.mref(), a.Akk = Akk.mref();
        kda::bridge::cuda_options opt;
        opt.fuse_intra = fuse;
        kda::bridge::cuda_intra_host(p, a, opt);
        const auto ours = kda::testing::compare(ref, Aqk, Akk, Aqk0, Akk0);
        INFO((fuse ? "fused " : "two kernels ") << kda::name(prec) << ": Aqk " << ours.aqk.err << " (FLA " << fla.aqk.err << ", floor "
                                               << ours.aqk.floor << "), Akk " << ours.akk.err << " (FLA " << fla.akk.err << ", floor " << ours.akk.floor << ")");
        CHECK(ours.untouched_changed == 0);
        if (prec == kda::precision::fp32) {
            CHECK(ours.aqk.err <= kda::testing::full_precision_tolerance(X, ours.aqk.floor));
            CHECK(ours.akk.err <= kda::testing::full_precision_tolerance(X, ours.akk.floor));
        } else {
            CHECK(ours.aqk.err <= 1.05 * fla.aqk.err);
            CHECK(ours.akk.err <= 1.05 * fla.akk.err);
        }
        std::printf("golden cuda intra %-5s %-10s %-4s %-4s  Aqk: ours %.3e floor %.3e FLA %.3e  |  Akk: ours %.3e floor %.3e FLA %.3e\n",
                    fuse ? "fused" : "2-k", name.c_str(), std::string(kda::name(X)).c_str(), std::string(kda::name(prec)).c_str(), ours.aqk.err,
                    ours.aqk.floor, fla.aqk.err, ours.akk.err, ours.akk.floor, fla.akk.err);
    }
}
