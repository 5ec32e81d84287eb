// kda/args.hpp: the problem description and the argument bundle of one inter-solve call.
//
// Tensors (ALGORITHM.md; X is the data type: bf16, fp16, fp32, or fp64 on the CPU; "Acc" is fp32,
// or fp64 when X is fp64):
//   q, k      [B, T, H, K]    X          (token and head strides free, K contiguous)
//   g         [B, T, HV, K]   Acc        chunk-local cumulative log2 gates
//   beta      [B, T, HV]      X or fp32  (any strides)
//   Akkd      [B, T, HV, BC]  Acc        diagonal blocks of L (or their inverses, safe gate)
//   Aqk, Akk  [B, T, HV, BT]  X          outputs; only the entries the step owns are written
//   cu_seqlens    [N + 1]     int64 or int32   optional (varlen, B == 1)
//   chunk_indices [NT, 2]     int64 or int32   optional; built by kda::prepare_chunk_indices
#pragma once

#include <cstdint>

#include "tensor.hpp"
#include "types.hpp"

namespace kda {

/// What is computed: sizes, score scale and modes. T == 0 (or a varlen batch with no tokens) is a
/// valid no-op; K must be in [1, 256].
struct inter_solve_problem {
    std::int64_t B = 1;   // batch (1 in varlen mode)
    std::int64_t T = 0;   // tokens per batch row (total tokens in varlen mode)
    std::int64_t H = 1;   // q/k heads
    std::int64_t HV = 1;  // value heads, a multiple of H (GVA: value head hv reads q/k head hv / (HV / H))
    std::int64_t K = 0;   // head dimension
    double scale = 1.0;   // score scale, usually K^-0.5
    int BT = 64;          // chunk size: 32 or 64
    int BC = 16;          // sub-chunk size: 16
    bool safe_gate = false;                      // Akkd holds (I + L_ss)^-1 instead of L_ss
    precision solve_precision = precision::fp32;  // see kda::precision
    std::int64_t V = 0;   // value head dimension: only chunk_kda_intra's optional v and u have it
};

/// The tensors of one call. Optional tensors are left default-constructed (null, rank 0).
struct inter_solve_args {
    tensor_ref q, k, g, beta, Akkd;
    mutable_tensor_ref Aqk, Akk;
    tensor_ref cu_seqlens;     // optional; where the backend reads its data (device memory for CUDA)
    tensor_ref chunk_indices;  // optional; same memory as cu_seqlens
    /// Optional host copies of cu_seqlens / chunk_indices for backends whose tensors live in device
    /// memory: their contents are validated from these, never by a hidden device-to-host copy.
    tensor_ref cu_seqlens_host;
    tensor_ref chunk_indices_host;
};

}  // namespace kda
