// tests/io/test_case.cpp: kda::io::inter_solve_case, the map from a case file to (problem, args):
// valid cases (dense, varlen with and without chunk_indices, T = 0) and one test per defect.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <kda/io/case.hpp>
#include <kda/kda.hpp>

#include "io/io_support.hpp"
#include "support/catch.hpp"

using kda::dtype;
using kda::host_tensor;
using kda::io::inter_solve_case;
using kda::io::safetensors_file;
namespace kio = kda::testing::io;

namespace {
/// from_file after a round trip through bytes, as the command sees it.
inter_solve_case through_bytes(const safetensors_file& f) {
    return inter_solve_case::from_file(safetensors_file::parse(safetensors_file::to_bytes(f.tensors, f.metadata), "case"), "case");
}
bool same_bytes(const host_tensor& a, const host_tensor& b) {
    return a.type() == b.type() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.nbytes())) == 0;
}
}  // namespace

TEST_CASE("a case file gives the problem and the tensors it describes", "[io][case]") {
    const safetensors_file f = kio::small_case();
    const inter_solve_case c = through_bytes(f);
    CHECK(c.problem.B == 1);
    CHECK(c.problem.T == 40);
    CHECK(c.problem.H == 2);
    CHECK(c.problem.HV == 2);
    CHECK(c.problem.K == 16);
    CHECK(c.problem.BT == 64);
    CHECK(c.problem.BC == 16);
    CHECK(c.problem.scale == 0.25);
    CHECK_FALSE(c.problem.safe_gate);
    CHECK(c.problem.solve_precision == kda::precision::fp32);
    CHECK(same_bytes(c.q, f.at("q")));
    CHECK(same_bytes(c.Akkd, f.at("Akkd")));
    CHECK_FALSE(c.cu_seqlens.defined());
    // no Aqk_diag: Aqk starts at zero, like Akk
    const host_tensor a = c.initial_aqk();
    CHECK(a.shape() == std::vector<std::int64_t>{1, 40, 2, 64});
    CHECK(same_bytes(a, host_tensor(dtype::bf16, {1, 40, 2, 64})));
    CHECK(same_bytes(c.initial_akk(), host_tensor(dtype::bf16, {1, 40, 2, 64})));
}

TEST_CASE("a case runs like the same call made directly", "[io][case]") {
    for (bool varlen : {false, true}) {
        INFO("varlen " << varlen);
        const safetensors_file f = kio::small_case(varlen);
        const inter_solve_case c = through_bytes(f);
        host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
        kda::inter_solve(kda::cpu_backend{1}, c.problem, c.args(Aqk, Akk));

        kda::inter_solve_problem p = c.problem;
        kda::inter_solve_args a;
        a.q = f.at("q").ref();
        a.k = f.at("k").ref();
        a.g = f.at("g").ref();
        a.beta = f.at("beta").ref();
        a.Akkd = f.at("Akkd").ref();
        host_tensor Aqk2(dtype::bf16, {p.B, p.T, p.HV, p.BT}), Akk2(dtype::bf16, {p.B, p.T, p.HV, p.BT});
        a.Aqk = Aqk2.mref();
        a.Akk = Akk2.mref();
        if (varlen) {
            a.cu_seqlens = f.at("cu_seqlens").ref();
            a.chunk_indices = f.at("chunk_indices").ref();
        }
        kda::inter_solve(kda::cpu_backend{1}, p, a);
        CHECK(same_bytes(Aqk, Aqk2));
        CHECK(same_bytes(Akk, Akk2));
    }
}

TEST_CASE("a varlen case without chunk_indices gets them built from cu_seqlens", "[io][case]") {
    safetensors_file f = kio::small_case(true);
    const host_tensor expect = f.at("chunk_indices").clone();
    f.tensors.erase("chunk_indices");
    const inter_solve_case c = through_bytes(f);
    CHECK(c.built_chunk_indices);
    CHECK(same_bytes(c.chunk_indices, expect));
}

TEST_CASE("a case reads int32 index tensors, fp32 beta, Aqk_diag and consistent size metadata", "[io][case]") {
    safetensors_file f = kio::small_case(true);
    host_tensor cu(dtype::i32, {5});
    for (int i = 0; i < 5; ++i) cu.data<std::int32_t>()[i] = static_cast<std::int32_t>(f.at("cu_seqlens").data<std::int64_t>()[i]);
    f.tensors.insert_or_assign("cu_seqlens", std::move(cu));
    host_tensor beta(dtype::fp32, {1, 52, 2});
    for (std::int64_t i = 0; i < beta.numel(); ++i) beta.data<float>()[i] = 0.5f;
    f.tensors.insert_or_assign("beta", std::move(beta));
    f.tensors.insert_or_assign("Aqk_diag", kio::iota(dtype::bf16, {1, 52, 2, 64}));
    f.metadata.insert({{"B", "1"}, {"T", "52"}, {"H", "2"}, {"HV", "2"}, {"K", "16"}, {"dtype", "bfloat16"}, {"solve_precision", "ieee"}});
    const inter_solve_case c = through_bytes(f);
    CHECK(same_bytes(c.initial_aqk(), f.at("Aqk_diag")));
    CHECK(c.problem.solve_precision == kda::precision::fp32);
    host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
    CHECK_NOTHROW(kda::inter_solve(kda::cpu_backend{1}, c.problem, c.args(Aqk, Akk)));
}

TEST_CASE("T = 0 is a valid no-op case, as in the library", "[io][case]") {
    safetensors_file f;
    f.tensors.emplace("q", host_tensor(dtype::bf16, {1, 0, 2, 16}));
    f.tensors.emplace("k", host_tensor(dtype::bf16, {1, 0, 2, 16}));
    f.tensors.emplace("g", host_tensor(dtype::fp32, {1, 0, 2, 16}));
    f.tensors.emplace("beta", host_tensor(dtype::bf16, {1, 0, 2}));
    f.tensors.emplace("Akkd", host_tensor(dtype::fp32, {1, 0, 2, 16}));
    f.tensors.emplace("scale", kio::iota(dtype::fp32, {}));
    const inter_solve_case c = through_bytes(f);
    CHECK(c.problem.T == 0);
    host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
    CHECK(Aqk.numel() == 0);
    CHECK_NOTHROW(kda::inter_solve(kda::cpu_backend{1}, c.problem, c.args(Aqk, Akk)));
}

TEST_CASE("the golden files load as cases", "[io][case]") {
    const inter_solve_case c = inter_solve_case::load(std::string(KDA_FLA_DATA_DIR) + "/gva.safetensors");
    CHECK(c.problem.H == 2);
    CHECK(c.problem.HV == 4);
    CHECK(c.problem.K == 64);
    CHECK(c.problem.T == 130);
    CHECK(c.problem.solve_precision == kda::precision::tf32);
    CHECK(c.problem.scale == 0.125);
    const inter_solve_case s = inter_solve_case::load(std::string(KDA_FLA_DATA_DIR) + "/safe_gate.safetensors");
    CHECK(s.problem.safe_gate);
    const inter_solve_case b = inter_solve_case::load(std::string(KDA_FLA_DATA_DIR) + "/bt32.safetensors");
    CHECK(b.problem.BT == 32);
}

TEST_CASE("defective case files are refused with a message naming the defect", "[io][case][hostile]") {
    for (const auto& d : kio::case_defects()) {
        DYNAMIC_SECTION(d.name) {
            safetensors_file f = kio::small_case(d.varlen);
            d.apply(f);
            // the unmodified case is valid; the defect alone makes it fail
            CHECK_NOTHROW(through_bytes(kio::small_case(d.varlen)));
            CHECK_THAT(kio::error_of([&] { (void)through_bytes(f); }), Catch::Matchers::Contains(d.message) && Catch::Matchers::Contains("kda::io::inter_solve_case: case: "));
        }
    }
}
