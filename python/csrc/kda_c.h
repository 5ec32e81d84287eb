/* python/csrc/kda_c.h: the torch-free C ABI of the Python package (libkda_c). One entry point runs
   one kda call (kda::chunk_kda_intra, kda::inter_solve, kda::chunk_local_cumsum or
   kda::chunk_kda_intra_diag) on the CPU backend or, when built with CUDA, the CUDA backend.

   The call is described by a flat array of int64 words, so that Python builds it with one
   conversion of a list (python/kda/_lib.py mirrors this layout: keep the two in step):

     desc[0 .. KDA_C_HEADER)                  the header (KDA_C_H_* below)
     desc[KDA_C_HEADER + s * KDA_C_TENSOR ..)  tensor slot s (KDA_C_T_* below): data pointer,
                                               dtype (KDA_C_DT_*; -1: absent), rank, 4 extents,
                                               4 strides in elements

   Return value: 0 done (work launched on the stream for CUDA); KDA_C_BAD_ARGUMENT: kda refused
   an argument, nothing was written, err holds kda's sentence naming it; KDA_C_RUNTIME_ERROR: a
   CUDA call failed or another error; KDA_C_NO_BACKEND: the library was built without the
   requested backend. */
#pragma once
#include <stdint.h>
#ifndef KDA_C_EXPORT
#define KDA_C_EXPORT
#endif
#ifdef __cplusplus
extern "C" {
#endif

enum {
    KDA_C_OK = 0,
    KDA_C_BAD_ARGUMENT = 1,
    KDA_C_RUNTIME_ERROR = 2,
    KDA_C_NO_BACKEND = 3,
};
enum { KDA_C_OP_INTRA = 0, KDA_C_OP_INTER_SOLVE = 1, KDA_C_OP_CUMSUM = 2, KDA_C_OP_INTRA_DIAG = 3 };
enum { KDA_C_DEVICE_CPU = 0, KDA_C_DEVICE_CUDA = 1 };
/* dtype codes: kda::dtype's order */
enum { KDA_C_DT_BF16 = 0, KDA_C_DT_FP16 = 1, KDA_C_DT_FP32 = 2, KDA_C_DT_FP64 = 3, KDA_C_DT_I32 = 4, KDA_C_DT_I64 = 5 };
/* header words */
enum {
    KDA_C_H_OP,
    KDA_C_H_DEVICE,
    KDA_C_H_B,
    KDA_C_H_T,
    KDA_C_H_H,
    KDA_C_H_HV,
    KDA_C_H_K,
    KDA_C_H_BT,
    KDA_C_H_SAFE_GATE,
    KDA_C_H_TF32,       /* 1: precision::tf32, 0: precision::fp32 */
    KDA_C_H_ACTIVATION, /* cumsum: 0 none, 1 kda, 2 kda_lower_bound */
    KDA_C_H_THREADS,    /* CPU workers (0: all hardware threads) */
    KDA_C_H_STREAM,     /* cudaStream_t as an integer */
    KDA_C_H_FUSE,       /* CUDA chunk_kda_intra: 1 one fused kernel, 0 producer + inter-solve (needs Akkd) */
    KDA_C_H_V,          /* chunk_kda_intra's WY outputs: the value head dimension of v and u */
    KDA_C_HEADER
};
/* tensor slots */
enum {
    KDA_C_T_Q,
    KDA_C_T_K,
    KDA_C_T_G,
    KDA_C_T_BETA,
    KDA_C_T_AKKD,
    KDA_C_T_AQK,
    KDA_C_T_AKK,
    KDA_C_T_CU_SEQLENS,
    KDA_C_T_CHUNK_INDICES,
    KDA_C_T_CU_SEQLENS_HOST,
    KDA_C_T_CHUNK_INDICES_HOST,
    KDA_C_T_A_LOG,
    KDA_C_T_DT_BIAS,
    KDA_C_T_G_OUT,
    KDA_C_T_V, /* chunk_kda_intra's optional WY outputs (kda/intra.hpp): v in, w, u, kg, qg out */
    KDA_C_T_W,
    KDA_C_T_U,
    KDA_C_T_KG,
    KDA_C_T_QG,
    KDA_C_SLOTS
};
enum { KDA_C_TENSOR = 11, KDA_C_WORDS = KDA_C_HEADER + KDA_C_SLOTS * KDA_C_TENSOR };

/* Runs one call. `scale` is the score scale (or the cumsum's scale), `lower_bound` the cumsum's
   kda_lower_bound parameter. `err` (may be null) receives a NUL-terminated message on failure. */
KDA_C_EXPORT int kda_c_run(const int64_t* desc, int64_t words, double scale, double lower_bound, char* err, int64_t errlen);
/* Whether the library was built with the CUDA backend. */
KDA_C_EXPORT int kda_c_has_cuda(void);
/* Version of the C ABI above, its layout and its functions (bumped when either changes). */
KDA_C_EXPORT int kda_c_abi_version(void);
/* The x86-64 level this CPU runs (0: baseline or not x86-64, 2, 3 or 4: x86-64-v2 / v3 / v4, the
   operating system's support for the vector registers included): which of the package's CPU
   libraries (libkda_c_x86_64_v3 / _v4, the same calls built for that level) it may load. */
KDA_C_EXPORT int kda_c_cpu_level(void);

#ifdef __cplusplus
}
#endif
