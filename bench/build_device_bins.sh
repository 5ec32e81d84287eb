#!/bin/bash
# bench/build_device_bins.sh: builds, on any machine with nvcc (no GPU needed), what
# bench/run_device_bench.sh runs on a GPU machine, into .dev/ (git-ignored; copy it there with the
# checkout, see bench/README.md).
#   bash bench/build_device_bins.sh [VARIANT:FLAGS ...]       (default: "cur:-Iinclude")
# Each VARIANT gives .dev/kda_bench_cuda_<VARIANT> (sm_90a only, to keep the build short); FLAGS are
# nvcc flags: another -I builds another kernel version, e.g. an older commit's include/ or a copy of
# include/ with a row of include/kda/cuda/tuning.hpp edited ("s2:-I/tmp/kda_s2/include").
# The first variant also gives .dev/libkda_capi.so (compare_fla.py). With SUITE=1 it also builds
# kda_test_cuda, kda-inter-solve, 02_cuda_minimal and bench_cpu (sm_80 + sm_90a, static cudart,
# no -march=native) in build-perf (or BUILD_DIR) and copies what the [cuda] ctest entries need to
# .dev/suite/.
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
  # the [cuda] ctest entries (the suite's parts and the kda-inter-solve checks) travel as a pruned
  # copy of the build tree, .dev/suite/: its CTestTestfile.cmake files, the binaries they run, and
  # the two paths that run_device_bench.sh rewrites on the GPU machine (ROOTS)
  B=${BUILD_DIR:-build-perf}
  # host code for a portable ISA level (SUITE_ISA, default x86-64-v3: AVX2 + FMA), not this machine's
  cmake -S . -B $B -DKDA_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=${SUITE_ISA:-x86-64-v3}" -DCMAKE_CUDA_ARCHITECTURES="80;90a" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build $B -j2 --target kda_test_cuda kda-inter-solve 02_cuda_minimal bench_cpu
  rm -rf .dev/suite && mkdir -p .dev/suite/build
  R=$PWD; (cd $B && find . -name CTestTestfile.cmake -exec cp --parents {} $R/.dev/suite/build \;)
  for f in tests/kda_test_cuda examples/kda-inter-solve examples/02_cuda_minimal bench/bench_cpu; do
    mkdir -p .dev/suite/build/$(dirname $f) && cp $B/$f .dev/suite/build/$f
  done
  ln -sf suite/build/tests/kda_test_cuda suite/build/examples/02_cuda_minimal .dev/
  echo "$PWD $(cd $B && pwd)" > .dev/suite/ROOTS
fi