// tests/cuda/main.cpp: Catch2's main for the [cuda] tests. Without a CUDA device it says so and
// exits 77, which CTest reports as skipped (SKIP_RETURN_CODE 77); with KDA_REQUIRE_GPU=1 in the
// environment it fails instead (exit 1), for machines that must run the device tests. Any other
// error of the CUDA runtime (a broken or mismatched driver: probe::device_count) fails (exit 1)
// and names the error, whatever KDA_REQUIRE_GPU says.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/probe.hpp"
#include "support/catch.hpp"

int main(int argc, char** argv) {
    std::string error;
    const int devices = kda::testing::probe::device_count(error);
    if (devices < 0) {
        std::fprintf(stderr, "CUDA runtime error while counting devices: %s\n", error.c_str());
        return 1;
    }
    if (devices == 0) {
        const char* require = std::getenv("KDA_REQUIRE_GPU");
        if (require != nullptr && std::strcmp(require, "1") == 0) {
            std::fprintf(stderr, "no CUDA device, and KDA_REQUIRE_GPU=1: failing the [cuda] tests\n");
            return 1;
        }
        std::puts("no CUDA device: skipping the [cuda] tests (KDA_REQUIRE_GPU=1 makes this a failure)");
        return 77;
    }
    return Catch::Session().run(argc, argv);
}
