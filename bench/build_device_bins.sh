#!/bin/bash
# bench/build_device_bins.sh: builds, on any machine with nvcc (no GPU needed), what
# bench/run_device_bench.sh runs on a GPU machine, into .dev/ (git-ignored; copy it there with the
# checkout, see bench/README.md).
#   bash bench/build_device_bins.sh [VARIANT:FLAGS ...]       (default: "cur:-Iinclude")
# Each VARIANT gives .dev/kda_bench_cuda_<VARIANT> (sm_90a only, to keep the build short); FLAGS are
# nvcc flags: another -I builds another kernel version, e.g. an older commit's include/ or a copy of
# include/ with a row of include/kda/cuda/tuning.hpp edited ("s2:-I/tmp/kda_s2/include").
# The first variant also gives .dev/libkda_capi.so (compare_fla.py). With SUITE=1 it also builds
# kda_test_cuda and 02_cuda_minimal (sm_80 + sm_90a, static cudart) in build-perf for the suite.
set -e
cd "$(dirname "$0")/.."
mkdir -p .dev/lib
cp -L /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian .dev/lib/   # the GPU machine has no Google Benchmark
[ $# -gt 0 ] || set -- "cur:-Iinclude"
NV="nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC"
g++ -O2 -std=c++20 -Wall -Wextra -I/usr/local/cuda/include -c bench/bench_cuda.cpp -o /tmp/kda_bench_main.o
first=1
for spec in "$@"; do
  name=${spec%%:*}; flags=${spec#*:}
  $NV $flags -Xptxas -v -c bench/kda_capi.cu -o /tmp/kda_capi_$name.o 2> /tmp/kda_ptxas_$name.log
  grep -E "spill|Used" /tmp/kda_ptxas_$name.log | paste - - | sed -E 's/ptxas info *: //g' | sort | uniq -c
  g++ -o .dev/kda_bench_cuda_$name /tmp/kda_bench_main.o /tmp/kda_capi_$name.o -L/usr/local/cuda/lib64 -lcudart_static \
    -L.dev/lib -l:libbenchmark.so.1debian -Wl,-rpath,'$ORIGIN/lib' -lpthread -ldl -lrt
  if [ $first = 1 ]; then
    g++ -shared -o .dev/libkda_capi.so /tmp/kda_capi_$name.o -L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt
    first=0
  fi
  echo "built .dev/kda_bench_cuda_$name"
done
if [ "${SUITE:-0}" = 1 ]; then
  cmake -S . -B build-perf -DKDA_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES="80;90a" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build-perf -j2 --target kda_test_cuda 02_cuda_minimal
  cp build-perf/tests/kda_test_cuda build-perf/examples/02_cuda_minimal .dev/
fi
