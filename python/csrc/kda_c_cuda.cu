// python/csrc/kda_c_cuda.cu: the CUDA half of libkda_c (see kda_c.h): the same calls on
// kda::cuda_backend, on the stream the caller names, with no allocation and no synchronisation.
#include <kda/cuda/inter_solve.cuh>
#include <kda/cuda/intra.cuh>

#include "kda_c.h"
#include "kda_c_impl.hpp"

int kda_c_run_cuda(const std::int64_t* desc, double scale, double lower_bound, char* err, std::int64_t errlen) {
    return kda_c::guarded(err, errlen, [&] {
        const kda::cuda_backend be{.stream = reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(desc[KDA_C_H_STREAM])),
                                   .use_tma = true,
                                   .fuse_intra = desc[KDA_C_H_FUSE] != 0};
        kda_c::run(be, desc, scale, lower_bound);
    });
}
