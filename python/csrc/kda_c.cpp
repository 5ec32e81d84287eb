// python/csrc/kda_c.cpp: the CPU half of libkda_c (kda_c.h); the CUDA half is kda_c_cuda.cu,
// compiled in only when nvcc was found (KDA_C_WITH_CUDA). On x86-64 the same file is also built
// for the x86-64-v3 and v4 levels as CPU-only libraries (python/CMakeLists.txt), which the
// package loads for CPU calls when kda_c_cpu_level() allows.
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

extern "C" int kda_c_abi_version(void) { return 3; }

extern "C" int kda_c_cpu_level(void) {
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
#if defined(__clang__) || __GNUC__ < 12  // no level names: the features that set v3 / v4 apart
    const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2");
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    return v4 ? 4 : v3 ? 3 : 0;
#else
    return __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : __builtin_cpu_supports("x86-64-v2") ? 2 : 0;
#endif
#else
    return 0;
#endif
}
