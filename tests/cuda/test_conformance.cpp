// tests/cuda/test_conformance.cpp: the conformance suite (tests/conformance.hpp) for the CUDA
// backend in fp32 precision, and the same checks in tf32 precision except bit-exactness (tf32
// rounds exact 22-bit operands of the merge).
#include "conformance.hpp"
#include "cuda/runners.hpp"

using kda::testing::cuda_runner;
using kda::testing::cuda_tf32_runner;

KDA_CONFORMANCE_SUITE(cuda_runner, "[cuda]")

TEST_CASE("cuda tf32: dense grids", "[cuda][tf32][grid]") {
    for (auto X : {kda::dtype::bf16, kda::dtype::fp16, kda::dtype::fp32})
        kda::testing::check_grid(cuda_tf32_runner{}, kda::testing::dense_grid(X), (std::string("dense grid ") + std::string(kda::name(X))).c_str());
}

TEST_CASE("cuda tf32: varlen grid", "[cuda][tf32][varlen]") {
    for (auto X : {kda::dtype::bf16, kda::dtype::fp16, kda::dtype::fp32})
        kda::testing::check_grid(cuda_tf32_runner{}, kda::testing::varlen_grid(X), (std::string("varlen grid ") + std::string(kda::name(X))).c_str());
}

TEST_CASE("cuda tf32: properties", "[cuda][tf32][properties]") {
    const cuda_tf32_runner run{};
    const auto prec = kda::precision::tf32;
    for (auto X : {kda::dtype::bf16, kda::dtype::fp16, kda::dtype::fp32})
        for (bool safe : {false, true}) {
            for (int BT : {32, 64}) {
                kda::testing::check_closed_form(run, X, safe, BT, 0.5, prec);
                kda::testing::check_closed_form(run, X, safe, BT, 0.3, prec);
                for (std::int64_t P : {21, 32, 48, 100}) kda::testing::check_causality(run, X, safe, BT, P, prec);
            }
            kda::testing::check_isolation(run, X, safe, false, prec);
            kda::testing::check_isolation(run, X, safe, true, prec);
            kda::testing::check_strided(run, X, safe, prec);
        }
}
