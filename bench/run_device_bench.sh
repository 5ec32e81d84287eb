#!/bin/bash
# bench/run_device_bench.sh: the GPU-machine side of the CUDA benchmarks, in one command.
# Run from the repository root on the GPU machine (the `run` tool: carry [".dev", ".whl"]), after
# building here (see docs/PERFORMANCE.md): .dev/ holds kda_bench_cuda_<variant> binaries,
# libkda_capi.so, lib/libbenchmark.so.1debian, and optionally kda_test_cuda + 02_cuda_minimal.
#   STEPS="bench compare compare-intra ncu profile suite" VARIANTS="cur old" FILTER=REGEX bash bench/run_device_bench.sh
# Logs: $OUT/results.tgz (bench_<variant>.txt, compare.txt/.json/.png, ncu.txt, suite.txt, the
# suite's logs.tgz), plus compare.txt and compare.png beside it ($OUT takes few files).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
FINAL_OUT=$OUT; OUT=/tmp/kda_w; rm -rf $OUT; mkdir -p $OUT
STEPS=${STEPS:-"bench compare"}
VARIANTS=${VARIANTS:-cur}
FILTER=${FILTER:-.}
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
for step in $STEPS; do
  s=$(date +%s)
  case $step in
    bench)
      for v in $VARIANTS; do
        echo "== bench $v"
        .dev/kda_bench_cuda_$v --benchmark_filter="$FILTER" --benchmark_counters_tabular=true > $OUT/bench_$v.txt 2>&1
        grep -E "^[A-Za-z0-9_]+/" $OUT/bench_$v.txt | awk '{printf "%-48s %9s us  TB/s %s  frac %s\n", $1, $2, $7, $9}'
      done ;;
    compare)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/compare_fla.py --lib .dev/libkda_capi.so --out $OUT ${COMPARE_ARGS:-} 2>&1 | grep -v Warning | tee $OUT/compare.txt ;;
    compare-intra)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/compare_fla.py --stage intra --lib .dev/libkda_capi.so --out $OUT ${COMPARE_ARGS:-} 2>&1 | grep -v Warning | tee $OUT/compare_intra.txt ;;
    ncu)
      ncu --set full --clock-control none -k regex:inter_solve_kernel -c 1 .dev/kda_bench_cuda_${NCU_VARIANT:-cur} \
        --benchmark_filter="${NCU_FILTER:-B8_T4096_H32/notsafe/tf32}" > $OUT/ncu.txt 2>&1
      grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Compute \(SM\) Throughput|Issue Slots Busy|Shared Memory Configuration Size|Dynamic Shared|Waves Per SM|L2 Hit|No Eligible|Active Warps Per Scheduler|Eligible Warps" $OUT/ncu.txt | head -40 ;;
    sass)
      # instruction mix of the inter-solve kernels (bf16, BT 64, tf32 / fp32, not safe): opcode counts
      for v in $VARIANTS; do
        cuobjdump -sass .dev/kda_bench_cuda_$v > $OUT/sass_$v.txt 2>&1
        echo "== sass $v: $(grep -c HMMA $OUT/sass_$v.txt) HMMA, $(grep -c MUFU.EX2 $OUT/sass_$v.txt) MUFU.EX2, $(wc -l < $OUT/sass_$v.txt) lines"
      done
      ncu --section SourceCounters --section WarpStateStats --clock-control none -k regex:inter_solve_kernel -c 1 .dev/kda_bench_cuda_${NCU_VARIANT:-cur} \
        --benchmark_filter="${NCU_FILTER:-B8_T4096_H32/notsafe/tf32}" > $OUT/ncu_source.txt 2>&1
      grep -A40 "Section: Source Counters" $OUT/ncu_source.txt | head -60
      grep -E "Stall|stall" $OUT/ncu_source.txt | head -30 ;;
    profile)
      # per-instruction execution counts of one launch (build the variant with -lineinfo), summed
      # per item, opcode and program window by bench/sass_profile.py
      ncu --section SourceCounters --import-source yes --clock-control none -k regex:inter_solve_kernel -c 1 -o $OUT/profile \
        .dev/kda_bench_cuda_${NCU_VARIANT:-cur} --benchmark_filter="${NCU_FILTER:-B8_T4096_H32/notsafe/tf32}" > $OUT/profile.log 2>&1
      ncu -i $OUT/profile.ncu-rep --page source --csv --print-source sass > $OUT/sass_src.csv 2>> $OUT/profile.log
      python3 bench/sass_profile.py $OUT/sass_src.csv --items ${PROFILE_ITEMS:-16384} | tee $OUT/profile.txt ;;
    suite)
      # the golden test reads tests/data/fla at the path compiled in (this checkout's, /work/main here)
      [ -d /work/main/tests/data/fla ] || { mkdir -p /work/main/tests/data && ln -s $PWD/tests/data/fla /work/main/tests/data/fla; }
      mkdir -p /tmp/kbin && cp .dev/kda_test_cuda .dev/02_cuda_minimal /tmp/kbin/ && cp scripts/device_suite.sh /tmp/kbin/
      (cd /tmp/kbin && LIMIT=${LIMIT:-400} OUT=$OUT bash device_suite.sh) 2>&1 | tee $OUT/suite.txt | head -150 ;;
  esac
  echo "== step $step: $(( $(date +%s)-s ))s"
done
tar czf $FINAL_OUT/results.tgz -C $OUT .
for f in compare.txt compare.png compare.json compare_intra.txt compare_intra.json; do [ -f $OUT/$f ] && cp $OUT/$f $FINAL_OUT/; done
