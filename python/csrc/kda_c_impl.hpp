// python/csrc/kda_c_impl.hpp: turns a kda_c.h call description into kda's problem and argument
// bundles and runs it on one backend. Included by kda_c.cpp (CPU) and kda_c_cuda.cu (CUDA); holds
// no validation of its own: kda's entry points check every argument and throw kda::error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include <kda/intra.hpp>

#include "kda_c.h"

namespace kda_c {

inline kda::tensor_ref tensor(const std::int64_t* desc, int slot) {
    const std::int64_t* w = desc + KDA_C_HEADER + slot * KDA_C_TENSOR;
    kda::tensor_ref t;
    if (w[1] < 0) return t;  // absent: the default (null, rank 0) view
    t.data = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(w[0]));
    t.type = static_cast<kda::dtype>(w[1]);
    t.rank = static_cast<int>(w[2]);
    for (int d = 0; d < kda::max_rank; ++d) {
        t.shape[d] = w[3 + d];
        t.stride[d] = w[3 + kda::max_rank + d];
    }
    return t;
}

inline kda::mutable_tensor_ref output(const std::int64_t* desc, int slot) {
    const kda::tensor_ref t = tensor(desc, slot);
    kda::mutable_tensor_ref m;
    m.data = const_cast<void*>(t.data);
    m.type = t.type;
    m.rank = t.rank;
    m.shape = t.shape;
    m.stride = t.stride;
    return m;
}

/// An int field of a problem from a 64-bit word, saturated (kda refuses the out-of-range value).
inline int int_field(std::int64_t w) {
    return static_cast<int>(std::clamp<std::int64_t>(w, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

inline kda::inter_solve_problem problem(const std::int64_t* h, double scale) {
    kda::inter_solve_problem p;
    p.B = h[KDA_C_H_B];
    p.T = h[KDA_C_H_T];
    p.H = h[KDA_C_H_H];
    p.HV = h[KDA_C_H_HV];
    p.K = h[KDA_C_H_K];
    p.BT = int_field(h[KDA_C_H_BT]);
    p.scale = scale;
    p.safe_gate = h[KDA_C_H_SAFE_GATE] != 0;
    p.solve_precision = h[KDA_C_H_TF32] != 0 ? kda::precision::tf32 : kda::precision::fp32;
    p.V = h[KDA_C_H_V];
    return p;
}

/// The tensors every step bundle shares.
template <class Args>
Args common(const std::int64_t* d) {
    Args a;
    a.q = tensor(d, KDA_C_T_Q);
    a.k = tensor(d, KDA_C_T_K);
    a.g = tensor(d, KDA_C_T_G);
    a.beta = tensor(d, KDA_C_T_BETA);
    a.Aqk = output(d, KDA_C_T_AQK);
    a.cu_seqlens = tensor(d, KDA_C_T_CU_SEQLENS);
    a.chunk_indices = tensor(d, KDA_C_T_CHUNK_INDICES);
    a.cu_seqlens_host = tensor(d, KDA_C_T_CU_SEQLENS_HOST);
    a.chunk_indices_host = tensor(d, KDA_C_T_CHUNK_INDICES_HOST);
    return a;
}

/// Runs the call described by `d` on backend `be`.
template <class Backend>
void run(const Backend& be, const std::int64_t* d, double scale, double lower_bound) {
    switch (d[KDA_C_H_OP]) {
        case KDA_C_OP_INTRA: {
            auto a = common<kda::intra_args>(d);
            a.Akk = output(d, KDA_C_T_AKK);
            a.Akkd = output(d, KDA_C_T_AKKD);
            a.v = tensor(d, KDA_C_T_V);
            a.w = output(d, KDA_C_T_W);
            a.u = output(d, KDA_C_T_U);
            a.kg = output(d, KDA_C_T_KG);
            a.qg = output(d, KDA_C_T_QG);
            kda::chunk_kda_intra(be, problem(d, scale), a);
            return;
        }
        case KDA_C_OP_INTRA_DIAG: {
            auto a = common<kda::intra_diag_args>(d);
            a.Akkd = output(d, KDA_C_T_AKKD);
            kda::chunk_kda_intra_diag(be, problem(d, scale), a);
            return;
        }
        case KDA_C_OP_INTER_SOLVE: {
            auto a = common<kda::inter_solve_args>(d);
            a.Akkd = tensor(d, KDA_C_T_AKKD);
            a.Akk = output(d, KDA_C_T_AKK);
            kda::inter_solve(be, problem(d, scale), a);
            return;
        }
        case KDA_C_OP_CUMSUM: {
            kda::cumsum_problem p;
            p.B = d[KDA_C_H_B];
            p.T = d[KDA_C_H_T];
            p.HV = d[KDA_C_H_HV];
            p.K = d[KDA_C_H_K];
            p.BT = int_field(d[KDA_C_H_BT]);
            p.scale = scale;
            p.lower_bound = lower_bound;
            const std::int64_t act = d[KDA_C_H_ACTIVATION];
            if (act < 0 || act > 2) throw kda::error("kda.chunk_local_cumsum: argument 'activation': unknown code " + std::to_string(act));
            p.activation = static_cast<kda::gate_activation>(act);
            kda::cumsum_args a;
            a.g = tensor(d, KDA_C_T_G);
            a.A_log = tensor(d, KDA_C_T_A_LOG);
            a.dt_bias = tensor(d, KDA_C_T_DT_BIAS);
            a.g_out = output(d, KDA_C_T_G_OUT);
            a.cu_seqlens = tensor(d, KDA_C_T_CU_SEQLENS);
            a.cu_seqlens_host = tensor(d, KDA_C_T_CU_SEQLENS_HOST);
            kda::chunk_local_cumsum(be, p, a);
            return;
        }
        default: throw kda::error("kda: unknown operation code " + std::to_string(d[KDA_C_H_OP]));
    }
}

inline int report(char* err, std::int64_t errlen, int code, std::string_view msg) {
    if (err != nullptr && errlen > 0) {
        const std::size_t n = msg.size() < static_cast<std::size_t>(errlen - 1) ? msg.size() : static_cast<std::size_t>(errlen - 1);
        std::memcpy(err, msg.data(), n);
        err[n] = '\0';
    }
    return code;
}

/// Runs `f`, turning exceptions into kda_c.h's codes: kda::error is a refused argument unless it
/// reports a failed CUDA call.
template <class F>
int guarded(char* err, std::int64_t errlen, F&& f) {
    try {
        f();
        return KDA_C_OK;
    } catch (const kda::error& e) {
        const std::string_view m = e.what();
        const bool cuda_failure = m.find("CUDA call") != std::string_view::npos;
        return report(err, errlen, cuda_failure ? KDA_C_RUNTIME_ERROR : KDA_C_BAD_ARGUMENT, m);
    } catch (const std::exception& e) {
        return report(err, errlen, KDA_C_RUNTIME_ERROR, e.what());
    } catch (...) {
        return report(err, errlen, KDA_C_RUNTIME_ERROR, "kda: unknown exception");
    }
}

}  // namespace kda_c
