// kda/cuda/backend.hpp: the CUDA backend's state, declared capabilities and device-pointer checks.
//
// Parses with a host compiler (it includes only the CUDA runtime API, the half-type headers and
// the tuning table); the device code (ptx.cuh, mma.cuh, traits.cuh, phases.cuh, intra_kernel.cuh)
// and the launchers (launch.cuh) need nvcc. Users include <kda/cuda/inter_solve.cuh> and
// <kda/cuda/intra.cuh>.
//
//   kda::inter_solve(kda::cuda_backend{stream}, problem, args);   // args hold device pointers
//
// Work is stream-ordered: one kernel launch on `stream`, no allocation, no synchronisation, so a
// call may be captured into a CUDA graph. Varlen calls must pass host copies of cu_seqlens (and of
// chunk_indices, when given) in args.cu_seqlens_host / args.chunk_indices_host: validation reads
// those, never the device tensors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "../args.hpp"
#include "../config.hpp"
#include "../dispatch.hpp"
#include "../types.hpp"
#include "../validate.hpp"
#include "tuning.hpp"

/// KDA_CUDA_CHECK(expr): throws kda::error naming the call and CUDA's description of the error.
#ifndef KDA_CUDA_CHECK
#define KDA_CUDA_CHECK(expr)                                                                                        \
    do {                                                                                                            \
        const cudaError_t kda_cuda_err_ = (expr);                                                                   \
        if (kda_cuda_err_ != cudaSuccess)                                                                           \
            ::kda::detail::throw_error(__FILE__, __LINE__,                                                          \
                                       std::string("kda: CUDA call '" #expr "' failed: ") +                         \
                                           cudaGetErrorName(kda_cuda_err_) + ": " + cudaGetErrorString(kda_cuda_err_)); \
    } while (0)
#endif

namespace kda {

// CUDA's half types carry the same bits as kda's storage types and may be passed directly.
template <> struct dtype_of<__nv_bfloat16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<__half> { static constexpr dtype value = dtype::fp16; };

/// CUDA backend: one thread block per (chunk, value head) work item, tensor-core products.
/// Precision: tf32 runs every product on tf32 tensor cores (FLA's behaviour); fp32 splits every
/// operand into two tf32 parts (3xTF32), so that every product, the off-diagonal ones included,
/// is accurate to fp32.
struct cuda_backend {
    /// The stream the kernel is launched on (nullptr: the legacy default stream).
    cudaStream_t stream = nullptr;
    /// Stage q, k, g and Akkd through the tensor copy engine where the device (compute capability
    /// 9.0+) and the tensors' layout allow it (see launch.cuh); false: per-thread cp.async copies
    /// everywhere. Both paths compute the same bits where the rows of q, k and g are multiples of
    /// 16 bytes; for other rows the copy engine's K slices may start up to 7 columns before each
    /// head's first (maps that join the heads), which groups the K sums differently: other bits,
    /// at the same rounding floor.
    bool use_tma = true;
    /// chunk_kda_intra as one fused kernel (the diagonal blocks computed beside the inter-solve
    /// products; Akkd is neither needed nor written); false: the producer kernel writing the Akkd
    /// workspace, then the inter-solve kernel reading it (FLA's two-step structure).
    bool fuse_intra = true;

    using element_types = type_list<bf16_t, fp16_t, float>;
    /// The K slice the runtime entry points instantiate: the tuning table's (tuning.hpp; the same
    /// for both precisions, as kda::inter_solve picks BK before the precision). An explicit
    /// chunk_kda_inter_solve<cuda_backend, BT, 16, BK> may also take BK = 32.
    static constexpr int k_slice = cuda::tuning::choice(cuda::tuning::kernel_step::inter_solve, precision::tf32, 0).k_slice;
    static_assert(k_slice == cuda::tuning::choice(cuda::tuning::kernel_step::inter_solve, precision::fp32, 0).k_slice,
                  "Both precisions of the inter-solve step must share the K slice.");
    using k_slices = int_list<k_slice>;
    static constexpr int default_bk(std::int64_t) { return k_slice; }

    static backend_caps caps() {
        backend_caps c;
        c.name = "cuda";
        c.supports_fp64 = false;
        // The loads fall back to element-wise access where a tensor is not 16-byte aligned (see
        // launch.cuh), so only the element size is required.
        c.alignment = 0;
        c.index_tensors_on_host = false;
        return c;
    }
    static constexpr precision effective_precision(precision p) { return p; }

    /// Backend-specific checks beyond kda::can_implement: every tensor the kernel reads or writes
    /// must be reachable from the current device (device or managed memory, or mapped pinned host
    /// memory); plain host memory is refused with the argument's name.
    void check(const inter_solve_problem& p, const inter_solve_args& a) const {
        if (p.T == 0) return;  // nothing is read or written
        int device = 0;
        KDA_CUDA_CHECK(cudaGetDevice(&device));
        check_pointer("q", a.q, device);
        check_pointer("k", a.k, device);
        check_pointer("g", a.g, device);
        check_pointer("beta", a.beta, device);
        check_pointer("Akkd", a.Akkd, device);
        check_pointer("Aqk", as_const(a.Aqk), device);
        check_pointer("Akk", as_const(a.Akk), device);
        check_pointer("cu_seqlens", a.cu_seqlens, device);
        check_pointer("chunk_indices", a.chunk_indices, device);
    }

    /// Throws kda::error (naming `fn` and `arg`) unless tensor t (if given) is reachable from
    /// `device`.
    static void check_pointer(const char* arg, const tensor_ref& t, int device, const char* fn = "kda::inter_solve") {
        if (t.data == nullptr || t.numel() == 0) return;
        cudaPointerAttributes attr{};
        const cudaError_t e = cudaPointerGetAttributes(&attr, t.data);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();  // older runtimes report unknown pointers as an error: clear it
            KDA_CHECK(false, fn << ": argument '" << arg << "': pointer " << t.data
                                << " is not known to CUDA (expected device memory): " << cudaGetErrorString(e));
        }
        KDA_CHECK(attr.type != cudaMemoryTypeUnregistered,
                  fn << ": argument '" << arg << "': pointer " << t.data
                     << " is plain host memory; the cuda backend needs device memory (or managed / mapped pinned memory)");
        KDA_CHECK(attr.devicePointer != nullptr, fn << ": argument '" << arg << "': pointer " << t.data << " is not accessible from the device");
        KDA_CHECK(attr.type != cudaMemoryTypeDevice || attr.device == device,
                  fn << ": argument '" << arg << "': pointer " << t.data << " lives on device " << attr.device << ", but the current device is "
                     << device);
    }
};

}  // namespace kda
