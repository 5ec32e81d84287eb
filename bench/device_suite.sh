#!/bin/bash
# bench/device_suite.sh: on a machine with a CUDA GPU, runs the [cuda] test suite (parts in
# parallel), the four compute-sanitizer tools on a compact case list, the >2^31-element case and
# the CUDA example; logs -> $OUT/logs.tgz, summary -> stdout. Needs only the driver, the
# compute-sanitizer of a CUDA toolkit, and two binaries built elsewhere with
# -DKDA_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES="80;90a" (kda_test_cuda, 02_cuda_minimal).
# Usage, from the folder holding them (or KDA_BIN_DIR=that folder): LIMIT=300 OUT=DIR bash device_suite.sh
# With CTEST_DIR=a build tree (or build_device_bins.sh's pruned copy, paths rewritten), the suite's
# parts run as that tree's [cuda] ctest entries (`ctest -L cuda`), the kda-inter-solve checks included.
# (bench/run_device_bench.sh, step `suite`, does this for you.)
cd "${KDA_BIN_DIR:-$(dirname "$0")}"
export PATH=$PATH:/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer
L=/tmp/kdalogs; rm -rf $L; mkdir -p $L
T=./kda_test_cuda
LIMIT=${LIMIT:-500}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
parts=("[conformance][grid][bf16]" "[conformance][grid][fp16]" "[conformance][grid][fp32]" "[conformance][grid][fp64]"
       "[conformance][varlen]" "[conformance][properties]" "[conformance][bad-input]" "[tf32][grid]" "[tf32][varlen]"
       "[tf32][properties]" "[varlen-search]" "[vs-cpu]" "[repeat]" "[align]" "[policy]" "[bad-input]~[conformance]"
       "[graph]" "[sanitize]" "[golden]" "[intra][grid]" "[intra][diag]" "[intra][decay]" "[intra][cumsum]"
       "[intra][bad-input]" "[tma]~[intra]" "[intra][tma]")
if [ -n "${CTEST_DIR:-}" ]; then
  # the [cuda] ctest entries of a build tree (the parts above and the kda-inter-solve checks)
  ( s=$(date +%s); timeout $LIMIT ctest --test-dir "$CTEST_DIR" -L cuda -j 8 -V > $L/ctest.log 2>&1
    echo "rc=$? $(( $(date +%s)-s ))s ctest -L cuda" > $L/ctest.rc ) &
else
  i=0
  for p in "${parts[@]}"; do
    i=$((i+1))
    ( s=$(date +%s); timeout $LIMIT $T "[cuda]$p" > $L/t$i.log 2>&1; echo "rc=$? $(( $(date +%s)-s ))s test $p" > $L/t$i.rc ) &
  done
fi
SAN="[cuda][sanitize],[cuda][align],[cuda][graph],[cuda][intra][diag],[cuda][intra][cumsum],[cuda][intra][decay],[cuda][intra][tma]"
for tool in memcheck racecheck initcheck synccheck; do
  ( s=$(date +%s); timeout $LIMIT compute-sanitizer --tool $tool --error-exitcode 99 $T "$SAN" > $L/san_$tool.log 2>&1; echo "rc=$? $(( $(date +%s)-s ))s sanitizer $tool" > $L/san_$tool.rc ) &
done
( s=$(date +%s); timeout $LIMIT $T "[large]" > $L/large.log 2>&1; echo "rc=$? $(( $(date +%s)-s ))s large" > $L/large.rc ) &
( ./02_cuda_minimal 300 2 > $L/example.log 2>&1; echo "rc=$? example" > $L/example.rc ) &
wait
# timing last, alone on the GPU
( s=$(date +%s); timeout 120 $T "[timing]" > $L/timing.log 2>&1; echo "rc=$? $(( $(date +%s)-s ))s timing" > $L/timing.rc )
tar czf $OUT/logs.tgz -C $L .
echo "==== figures"
grep -H "^\[cuda\|^golden cuda\|^cuda intra\|02_cuda_minimal" $L/*.log | sed "s|$L/||"
echo "==== sanitizer summaries"
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/san_*.log
echo "==== test summaries"
for f in $L/t*.log $L/large.log $L/timing.log; do [ -f $f ] && echo "$(basename $f): $(grep -h "test cases\|All tests passed\|No test cases matched" $f | tail -1)"; done
[ -f $L/ctest.log ] && grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped|Not Run" $L/ctest.log | tail -40
echo "==== exit codes"
cat $L/*.rc
echo "==== failures (first lines)"
for f in $L/*.log; do if grep -q "FAILED\|failed\|error" $f; then echo "--- $(basename $f)"; grep -m3 -B2 -A12 "FAILED" $f | head -40; fi; done | head -150
