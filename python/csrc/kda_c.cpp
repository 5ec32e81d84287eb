// python/csrc/kda_c.cpp: the CPU half of libkda_c (kda_c.h); the CUDA half is kda_c_cuda.cu,
// compiled in only when nvcc was found (KDA_C_WITH_CUDA).
#include <kda/kda.hpp>

#include "kda_c.h"
#include "kda_c_impl.hpp"

#ifdef KDA_C_WITH_CUDA
int kda_c_run_cuda(const std::int64_t* desc, double scale, double lower_bound, char* err, std::int64_t errlen);
#endif

extern "C" int kda_c_run(const int64_t* desc, int64_t words, double scale, double lower_bound, char* err, int64_t errlen) {
    if (desc == nullptr || words != KDA_C_WORDS)
        return kda_c::report(err, errlen, KDA_C_RUNTIME_ERROR, "kda: the Python package and libkda_c disagree on the call layout (rebuild the package)");
    if (desc[KDA_C_H_DEVICE] == KDA_C_DEVICE_CUDA) {
#ifdef KDA_C_WITH_CUDA
        return kda_c_run_cuda(desc, scale, lower_bound, err, errlen);
#else
        return kda_c::report(err, errlen, KDA_C_NO_BACKEND, "kda: this build of the package has no CUDA backend (nvcc was not found when it was built)");
#endif
    }
    return kda_c::guarded(err, errlen, [&] {
        const kda::cpu_backend be{.threads = kda_c::int_field(desc[KDA_C_H_THREADS])};
        kda_c::run(be, desc, scale, lower_bound);
    });
}

extern "C" int kda_c_has_cuda(void) {
#ifdef KDA_C_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

extern "C" int kda_c_abi_version(void) { return 1; }
