/* bench/kda_capi.h: C ABI of bench/kda_capi.cu (see there). Field order is mirrored by the ctypes
   structure in bench/compare_fla.py: keep the two in step. */
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
enum { KDA_CAPI_TWO_KERNELS = 1, KDA_CAPI_NO_TMA = 2 };
typedef struct kda_capi_call {
    int32_t dtype; /* 0 bf16, 1 fp16, 2 fp32 */
    int32_t BT;
    int64_t B, T, H, HV, K;
    double scale;
    int32_t safe_gate, tf32, beta_fp32;
    int32_t flags; /* KDA_CAPI_TWO_KERNELS: chunk_kda_intra as producer + inter-solve; KDA_CAPI_NO_TMA: no tensor copies */
    const void *q, *k, *g, *beta, *Akkd;
    void *Aqk, *Akk;
    const void *cu_seqlens, *cu_seqlens_host, *chunk_indices, *chunk_indices_host;
    int64_t num_seqs, num_chunks;
    void* stream;
} kda_capi_call;
int kda_capi_inter_solve(const kda_capi_call* c, char* err, int errlen);
/* kda::chunk_kda_intra on the same fields: q, k, g, beta in; Aqk, Akk out; Akkd is the fp32
   workspace [B, T, HV, 16] (written by the two-kernel path only). */
int kda_capi_intra(const kda_capi_call* c, char* err, int errlen);
/* The WY outputs of chunk_kda_intra (contiguous, c's dtype; null: not requested): v in and u out
   [B, T, HV, V], w, kg, qg out [B, T, HV, K]. */
typedef struct kda_capi_wy {
    int64_t V;
    const void* v;
    void *w, *u, *kg, *qg;
} kda_capi_wy;
/* kda_capi_intra with the WY outputs (the fused kernel only). */
int kda_capi_intra_wy(const kda_capi_call* c, const kda_capi_wy* wy, char* err, int errlen);
#ifdef __cplusplus
}
#endif
#ifdef __cplusplus
extern "C" {
#endif
/* Fills c's inputs (q, k, g, beta, Akkd; B, T, H, HV, K, BT, dtype, beta_fp32 as in c) on the
   device with benchmark data: q, k in [-0.5, 0.5) / sqrt(K), decaying chunk-local gates, beta in
   (0, 1), small Akkd blocks. Asynchronous on c->stream. */
int kda_capi_fill_inputs(const kda_capi_call* c, unsigned long long seed);
#ifdef __cplusplus
}
#endif
