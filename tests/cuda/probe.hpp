// tests/cuda/probe.hpp: direct calls of the CUDA backend on device memory, for the tests that the
// bridge cannot express (host pointers handed to the library, missing host copies, graph capture,
// explicit instantiations). Plain C++ interface; the implementation (probe.cu) is compiled by nvcc.
#pragma once

#include <string>

#include <kda/args.hpp>
#include <kda/intra.hpp>

namespace kda::testing::probe {

/// What the CUDA runtime says about devices: their number (>= 1); 0 when there is none
/// (cudaErrorNoDevice, or cudaErrorInsufficientDriver on a machine without the NVIDIA kernel
/// driver, /proc/driver/nvidia/version); -1 for any other error, with the runtime's name and
/// text in `error` (a driver older than the runtime, a driver/library mismatch, ...).
int device_count(std::string& error);

/// Whether the device has the tensor copy engine (compute capability 9.0 or later).
bool device_has_tensor_copies();

/// Which staging the kernel of this call would use, decided as its launch decides it
/// (kda::cuda::make_tma_maps on device copies of `host_args`): `engine`, the tensor copy engine
/// (else per-thread copies); `joined`, through maps that join each tensor's heads (rows of no
/// 16-byte multiple); `g_threads`, g by per-thread copies beside q's and k's joined maps. bf16 data
/// and BT = 64; `intra` picks the fused intra kernel.
struct tensor_copies {
    bool engine = false, joined = false, g_threads = false;
};
tensor_copies staging_of(const inter_solve_problem& p, const inter_solve_args& host_args, bool intra);

/// The widths in bytes of the per-thread copies that would stage q, k and g where the tensor copy
/// engine does not (kda::cuda::per_thread_copy_bytes on device copies of `host_args`, as the launch
/// decides it): 16, 8 or 4; 2 for 16-bit rows staged in runs from aligned words.
struct copy_widths {
    int q = 0, k = 0, g = 0;
};
copy_widths per_thread_copy_widths(const inter_solve_problem& p, const inter_solve_args& host_args);

/// Runs kda::inter_solve(kda::cuda_backend{stream}, ...) on device copies of `host_args`, except
/// that the tensor named `keep_on_host` ("q", "k", "g", "beta", "Akkd", "Aqk", "Akk", "cu_seqlens",
/// "chunk_indices") is passed as its host pointer. Returns kda::error's message, "" if none.
std::string run_with_host_tensor(const inter_solve_problem& p, const inter_solve_args& host_args, const std::string& keep_on_host);

/// Runs on device copies with cu_seqlens_host (drop_cu) and / or chunk_indices_host (drop_ci)
/// left out (varlen). Returns kda::error's message, "" if none.
std::string run_without_host_copies(const inter_solve_problem& p, const inter_solve_args& host_args, bool drop_cu, bool drop_ci);

/// Captures kda::inter_solve into a CUDA graph (global capture mode) on a fresh stream, replays
/// it `replays` times and copies the outputs back into host_args' outputs.
void run_in_graph(const inter_solve_problem& p, const inter_solve_args& host_args, int replays);

/// Runs chunk_kda_inter_solve<cuda_backend, p.BT, 16, BK>::run (BK 16 or 32) and copies the
/// outputs back.
void run_policy(const inter_solve_problem& p, const inter_solve_args& host_args, int BK);

/// Runs kda::chunk_kda_intra on device copies of `host_args`, fused or through the two-kernel path
/// (cuda_backend::fuse_intra), with the Akkd workspace left out when drop_workspace (or, with
/// `keep_on_host` naming a tensor, with that tensor passed as its host pointer). Returns
/// kda::error's message, "" if none; the outputs are copied back.
std::string run_intra(const intra_problem& p, const intra_args& host_args, bool drop_workspace, const std::string& keep_on_host = "",
                      bool fuse = true);

/// Runs kda::chunk_local_cumsum on device copies, with `keep_on_host` ("g", "A_log", "dt_bias",
/// "g_out") passed as its host pointer. Returns kda::error's message, "" if none.
std::string run_cumsum_with_host_tensor(const cumsum_problem& p, const cumsum_args& host_args, const std::string& keep_on_host);

/// Captures kda::chunk_kda_intra (fused: one launch; else two) into a CUDA graph, replays it
/// `replays` times and copies Aqk and Akk back.
void run_intra_in_graph(const intra_problem& p, const intra_args& host_args, int replays, bool fuse = true);

}  // namespace kda::testing::probe
