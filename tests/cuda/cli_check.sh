#!/usr/bin/env bash
# tests/cuda/cli_check.sh: the kda-inter-solve command's CUDA paths on one golden FLA case, for the
# [cuda] ctest entries (cuda.cli.*): --backend both runs the CPU and the CUDA backend on the file's
# inputs and --check holds each one's errors to the suite's bounds against the float64 reference
# (exit 1 past them). Exits 77 (skipped) where kda_test_cuda finds no device, as the suite does.
#
#   cli_check.sh KDA_TEST_CUDA KDA_INTER_SOLVE CASE.safetensors STAGE PRECISION OUT_DIR
set -uo pipefail
probe=$1 cli=$2 case=$3 stage=$4 precision=$5 out=$6
[[ -x "$probe" && -x "$cli" ]] || { echo "missing $probe or $cli: build kda_test_cuda and kda-inter-solve"; exit 1; }
"$probe" "[cuda][policy]" >/dev/null 2>&1
rc=$?
if [[ $rc == 77 ]]; then
  echo "no CUDA device: skipped"
  exit 77
fi
mkdir -p "$out"
result="$out/$(basename "$case" .safetensors).$stage.$precision.safetensors"
rm -f "$result"
"$cli" --in "$case" --out "$result" --stage "$stage" --backend both --precision "$precision" --check
rc=$?
[[ $rc == 0 && ! -s "$result" ]] && { echo "kda-inter-solve exited 0 without writing $result"; exit 1; }
exit $rc
