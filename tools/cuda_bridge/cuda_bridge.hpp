// cuda_bridge.hpp: run the CUDA backend on host tensors, from plain C++ (no CUDA header here).
//
//   if (kda::bridge::cuda_device_present()) {
//       const double ms = kda::bridge::cuda_inter_solve_host(problem, args);  // args: host tensors
//   }
//
// Link the CMake target kda_cuda_bridge (built when nvcc is found). Meant for tests, examples and
// tools: every call allocates device memory, copies and synchronises, which the library itself
// never does.
#pragma once

#include <string>

#include <kda/args.hpp>
#include <kda/intra.hpp>

namespace kda::bridge {

/// What the CUDA runtime says about devices: their number (>= 1); 0 when there is none
/// (cudaErrorNoDevice, or cudaErrorInsufficientDriver on a machine without the NVIDIA kernel
/// driver, /proc/driver/nvidia/version); -1 for any other error, with the runtime's name and text
/// in `error` (a driver older than the runtime, a driver/library mismatch, ...). Never throws.
int cuda_device_count(std::string& error) noexcept;

/// Whether a CUDA device and a working driver are present (cuda_device_count > 0). Never throws.
bool cuda_device_present() noexcept;

/// The cuda_backend options a bridge call runs with (see kda/cuda/backend.hpp).
struct cuda_options {
    bool use_tma = true;     // the tensor copy engine where the device and the layout allow it
    bool fuse_intra = true;  // chunk_kda_intra as one kernel (false: producer + inter-solve)
};

/// Validates `host_args` (host tensors, outputs included) exactly as kda::inter_solve with the
/// cuda backend would (kda::error naming the argument, nothing written on failure), copies every
/// tensor to the current device (the outputs too, so entries the step does not own keep their
/// contents; strides and the pointers' alignment modulo 256 bytes are preserved), runs
/// kda::inter_solve(kda::cuda_backend{stream}, ...) on a stream of its own, copies Aqk and Akk back
/// into the host buffers and returns the kernel's time in milliseconds (CUDA events around the
/// launch). In varlen mode cu_seqlens / chunk_indices are host tensors too; chunk_indices may be
/// omitted (the kernel then searches cu_seqlens).
double cuda_inter_solve_host(const kda::inter_solve_problem& problem, const kda::inter_solve_args& host_args, const cuda_options& options = {});

/// The same for kda::chunk_kda_intra: when host_args.Akkd is absent and the two-kernel path is
/// asked for (options.fuse_intra false), the bridge allocates the device workspace itself (the
/// library never does); when given, it is copied back too (the fused path leaves it as it was).
/// The WY outputs (w, u, kg, qg) are copied back where given.
double cuda_intra_host(const kda::intra_problem& problem, const kda::intra_args& host_args, const cuda_options& options = {});

/// The same for kda::chunk_kda_intra_diag (Aqk and Akkd are copied back).
double cuda_intra_diag_host(const kda::intra_problem& problem, const kda::intra_diag_args& host_args);

/// The same for kda::chunk_local_cumsum (g_out is copied back).
double cuda_cumsum_host(const kda::cumsum_problem& problem, const kda::cumsum_args& host_args);

}  // namespace kda::bridge
