// tests/cuda/main.cpp: Catch2's main for the [cuda] tests. Without a CUDA device (or driver) it
// says so and exits 77, which CTest reports as skipped (SKIP_RETURN_CODE 77).
#define CATCH_CONFIG_RUNNER
#include <cstdio>

#include <cuda_bridge.hpp>

#include "support/catch.hpp"

int main(int argc, char** argv) {
    if (!kda::bridge::cuda_device_present()) {
        std::puts("no CUDA device: skipping the [cuda] tests");
        return 77;
    }
    return Catch::Session().run(argc, argv);
}
