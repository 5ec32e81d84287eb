// kda/kda.hpp: umbrella header. The core API and the CPU (Eigen) backend.
//
//   kda::inter_solve(kda::cpu_backend{}, problem, args);
//   kda::chunk_kda_intra(kda::cpu_backend{}, problem, intra_args);     (kda/intra.hpp)
//
// The CUDA backend lives in <kda/cuda/inter_solve.cuh> (nvcc only); the float64 reference in
// <kda/reference/reference.hpp>.
#pragma once

#include "args.hpp"
#include "config.hpp"
#include "cpu/backend.hpp"
#include "cpu/inter_solve.hpp"
#include "cpu/intra.hpp"
#include "dispatch.hpp"
#include "inter_solve.hpp"
#include "intra.hpp"
#include "params.hpp"
#include "tensor.hpp"
#include "tile_config.hpp"
#include "types.hpp"
#include "validate.hpp"
#include "varlen.hpp"
