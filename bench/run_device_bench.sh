#!/bin/bash
# bench/run_device_bench.sh: the GPU-machine side of the CUDA benchmarks, in one command.
# Run from the repository root on a machine with a CUDA GPU (driver, Nsight Compute and Python 3
# with torch + triton; no compiler needed), after building the binaries on any machine with nvcc
# (bench/build_device_bins.sh) and copying the checkout there with .dev/ and .whl/
# (bench/README.md): .dev/ holds kda_bench_cuda_<variant> binaries, libkda_capi.so,
# lib/libbenchmark.so.1debian, and optionally kda_test_cuda + 02_cuda_minimal; .whl/ holds FLA's
# wheels for the compare steps.
#   STEPS="bench compare compare-intra compare-dispatch ncu profile suite cpu" VARIANTS="cur old" FILTER=REGEX bash bench/run_device_bench.sh
# Logs: $OUT/results.tgz (bench_<variant>.txt, compare.txt/.json/.png, ncu.txt, suite.txt, the
# suite's logs.tgz, bench_cpu_scaling.txt), plus compare.txt and compare.png beside it ($OUT takes
# few files).
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
    compare-dispatch)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/compare_fla.py --stage dispatch --lib .dev/libkda_capi.so --out $OUT ${COMPARE_ARGS:-} 2>&1 | grep -v Warning | tee $OUT/compare_dispatch.txt ;;
    compare-intra)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/compare_fla.py --stage intra --lib .dev/libkda_capi.so --out $OUT ${COMPARE_ARGS:-} 2>&1 | grep -v Warning | tee $OUT/compare_intra.txt ;;
    ncu)
      # ncu --set full on one launch per filter (NCU_FILTERS, space-separated benchmark names)
      i=0
      for f in ${NCU_FILTERS:-${NCU_FILTER:-B8_T4096_H32/notsafe/tf32}}; do
        i=$((i+1))
        ncu --set full --clock-control none -k 'regex:(inter_solve|chunk)_kernel' -c 1 .dev/kda_bench_cuda_${NCU_VARIANT:-cur} \
          --benchmark_filter="^$f/" > $OUT/ncu$i.txt 2>&1
        echo "== ncu $f"
        grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Compute \(SM\) Throughput|Issue Slots Busy|Shared Memory Configuration Size|Dynamic Shared|L2 Hit|No Eligible|Active Warps Per Scheduler|Eligible Warps" $OUT/ncu$i.txt | head -24
      done ;;
    sass)
      # instruction mix of the inter-solve kernels (bf16, BT 64, tf32 / fp32, not safe): opcode counts
      for v in $VARIANTS; do
        cuobjdump -sass .dev/kda_bench_cuda_$v > $OUT/sass_$v.txt 2>&1
        echo "== sass $v: $(grep -c HMMA $OUT/sass_$v.txt) HMMA, $(grep -c MUFU.EX2 $OUT/sass_$v.txt) MUFU.EX2, $(wc -l < $OUT/sass_$v.txt) lines"
      done
      ncu --section SourceCounters --section WarpStateStats --clock-control none -k 'regex:(inter_solve|chunk)_kernel' -c 1 .dev/kda_bench_cuda_${NCU_VARIANT:-cur} \
        --benchmark_filter="${NCU_FILTER:-B8_T4096_H32/notsafe/tf32}" > $OUT/ncu_source.txt 2>&1
      grep -A40 "Section: Source Counters" $OUT/ncu_source.txt | head -60
      grep -E "Stall|stall" $OUT/ncu_source.txt | head -30 ;;
    profile)
      # per-instruction execution counts and stall samples of one launch per filter (build the
      # variant with -lineinfo), summed per item, opcode and program window by bench/sass_profile.py;
      # the stall reasons (average warps stalled per issued instruction) and the speed-of-light,
      # occupancy and bank-conflict figures beside them
      i=0
      for f in ${NCU_FILTERS:-${NCU_FILTER:-B8_T4096_H32/notsafe/tf32}}; do
        i=$((i+1))
        ncu --section SourceCounters --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
          --section MemoryWorkloadAnalysis_Tables --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active \
          --import-source yes --clock-control none -k 'regex:(inter_solve|chunk)_kernel' -c 1 -o $OUT/profile$i \
          .dev/kda_bench_cuda_${NCU_VARIANT:-cur} --benchmark_filter="^$f/" > $OUT/profile$i.log 2>&1
        ncu -i $OUT/profile$i.ncu-rep --print-details all > $OUT/profile${i}_details.txt 2>> $OUT/profile$i.log
        ncu -i $OUT/profile$i.ncu-rep --page source --csv --print-source sass > $OUT/sass_src$i.csv 2>> $OUT/profile$i.log
        echo "== profile $f"
        grep -E "Duration|DRAM Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|No Eligible|Issued Warp|bank|Warp Cycles Per Issued" $OUT/profile${i}_details.txt | head -20
        grep -E "issue_stalled" $OUT/profile${i}_details.txt | awk '{v=$NF; if (v+0 > 0.05) print}' | sort -k3 -n -r | head -14
        python3 bench/sass_profile.py $OUT/sass_src$i.csv --items ${PROFILE_ITEMS:-16384} | tee $OUT/profile$i.txt | head -${PROFILE_LINES:-60}
      done ;;
    cpu)
      # the CPU backend's thread scaling on this machine's cores (bench_cpu --scaling, built with
      # KDA_NATIVE=OFF by build_device_bins.sh SUITE=1)
      LD_LIBRARY_PATH=$PWD/.dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} .dev/suite/build/bench/bench_cpu --scaling \
        --threads=${CPU_THREADS:-1,2,4,8,16} --benchmark_counters_tabular=true > $OUT/bench_cpu_scaling.txt 2>&1
      grep -E "^scaling|^Run on|CPU" $OUT/bench_cpu_scaling.txt ;;
    suite)
      # the golden test reads tests/data/fla at the absolute path compiled in (the build's checkout):
      # link this checkout's copy there when the two differ
      fla=$(grep -a -o -m1 '/[[:print:]]*/tests/data/fla' .dev/kda_test_cuda | head -1)
      [ -z "$fla" ] || [ -d "$fla" ] || { mkdir -p "$(dirname "$fla")" && ln -s $PWD/tests/data/fla "$fla"; }
      mkdir -p /tmp/kbin && cp -L .dev/kda_test_cuda .dev/02_cuda_minimal /tmp/kbin/ && cp bench/device_suite.sh /tmp/kbin/
      ctest_dir=
      if [ -f .dev/suite/ROOTS ]; then
        # build_device_bins.sh's pruned build tree: its absolute paths (checkout, build tree) -> here
        read -r src bld < .dev/suite/ROOTS
        find .dev/suite/build -name CTestTestfile.cmake -exec sed -i "s|$bld|$PWD/.dev/suite/build|g; s|$src|$PWD|g" {} +
        ctest_dir=$PWD/.dev/suite/build
      fi
      (cd /tmp/kbin && CTEST_DIR=$ctest_dir LIMIT=${LIMIT:-400} OUT=$OUT bash device_suite.sh) > $OUT/suite.txt 2>&1
      grep -A40 "==== sanitizer summaries" $OUT/suite.txt | head -60 ;;
  esac
  echo "== step $step: $(( $(date +%s)-s ))s"
  tar czf $FINAL_OUT/results.tgz -C $OUT .  # after every step, so a run cut short still returns what it did
done
for f in compare.txt compare.png compare.json compare_intra.txt compare_intra.json compare_dispatch.txt compare_dispatch.json; do if [ -f $OUT/$f ]; then cp $OUT/$f $FINAL_OUT/; fi; done
