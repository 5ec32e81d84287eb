#!/usr/bin/env bash
# bench/device_python.sh: the Python package on a GPU machine without network access, from the
# checkout's root. Installs the package from this tree (`pip install --no-build-isolation`:
# scikit-build-core and nvcc must be on that machine), runs tests/python, FLA's own KDA tests with
# kda as FLA's backend and without it (the control), the chunk_kda side-by-side and the binding's
# per-call cost. Logs and results: $OUT/python_logs.tgz (default OUT /tmp/out), written after every
# step so that a run cut short still returns what it did; compare_chunk_kda.txt / .json beside it.
#
#   FLA_SRC=.fla bash bench/device_python.sh
#
# FLA_SRC: a folder holding FLA's `fla/` package and its `tests/` from one commit (made on the build
# machine from a checkout: `git archive <commit> fla tests | tar x -C .fla`), put first on
# PYTHONPATH so that FLA's tests run against the FLA they were written for; einops must be
# importable (WHEELS: a folder of wheels to install first, e.g. `pip download --no-deps -d .whl einops`).
# STEPS: any of install pytest fla-tests compare binding (default: all, in that order).
# WHEEL: a wheel of this tree to install instead of building it there (for a machine without
# scikit-build-core): `pip wheel . --no-build-isolation --no-deps -w .dev/wheel
# -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90a` on the build machine; the wheel is tagged
# py3-none-<platform>, so it serves that machine's Python whatever the build machine's.
# pip runs as `python3 -m pip`, so that the package lands where the python3 that runs the tests
# (and has torch) looks for it.
# FLA_TESTS: the test functions of FLA's tests/ops/test_kda.py to run (default: every one that reaches
# chunk_kda), each case a pytest of its own, FLA_JOBS (8) at once (15 on one 80 GB GPU ran out of
# its memory); FLA_TIMEOUT: seconds for a case (default 420); FLA_BUDGET: seconds after which no
# case starts (default 3600); FLA_RESUME=1: a later call on the same machine keeps the logs and
# runs only the cases that did not finish (cut or not started). Logs
# fla_<1|0>_<n>.log (kda on / the control, n: the case's line in fla_cases.txt); outcomes, kda's
# calls and declines per test function in fla_tests_summary.txt (bench/fla_tests_summary.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-install pytest fla-tests compare binding}
FLA_TESTS=${FLA_TESTS:-"test_chunk test_chunk_state_v_first test_chunk_use_beta_sigmoid_in_kernel test_chunk_varlen test_chunk_varlen_prefill test_chunk_return_intermediate_states"}
FINAL_OUT=$OUT
OUT=/tmp/kda_py_logs
[[ -n "${FLA_RESUME:-}" ]] || rm -rf "$OUT"
mkdir -p "$OUT" "$FINAL_OUT"
save() { tar czf "$FINAL_OUT/python_logs.tgz" -C "$OUT" .; }
step() { save; echo "== step $1: $(date +%T)"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [[ -n "${WHEELS:-}" ]]; then
  python3 -m pip install --no-deps --no-index "$WHEELS"/*.whl >"$OUT/wheels.log" 2>&1
fi
if has install; then
  step install
  start=$SECONDS
  if [[ -n "${WHEEL:-}" ]]; then
    python3 -m pip install --no-deps --force-reinstall "$WHEEL" >"$OUT/pip_install.log" 2>&1
  else
    CUDAARCHS=${CUDAARCHS:-90a} python3 -m pip install --no-build-isolation --no-deps --force-reinstall . >"$OUT/pip_install.log" 2>&1
  fi
  echo "rc=$? in $((SECONDS - start)) s" | tee -a "$OUT/pip_install.log"
  python3 -c "import kda; print('kda: CUDA backend', kda.has_cuda(), '; CPU level', kda.cpu_level())" 2>&1 | tee -a "$OUT/pip_install.log"
  # the toolchain and what the libraries link and export (only kda_c_* may be exported)
  pkg=$(python3 -c "import kda, os; print(os.path.dirname(kda.__file__))" 2>/dev/null)
  { c++ --version | head -n 1
    for lib in "$pkg"/*.so; do
      echo "$lib: needs $(readelf -d "$lib" | grep -o 'Shared library: \[[^]]*\]' | tr '\n' ' ')"
      echo "  exported: $(nm -D --defined-only "$lib" | awk '{print $NF}' | sort | head -n 6 | tr '\n' ' ')"
    done; } >>"$OUT/pip_install.log" 2>&1
fi
if has pytest; then
  step pytest
  (cd tests/python && python3 -m pytest -rs -p no:cacheprovider) >"$OUT/pytest.log" 2>&1
  tail -n 3 "$OUT/pytest.log"
fi
if has fla-tests; then
  step fla-tests
  export PYTHONPATH="${FLA_SRC:?set FLA_SRC}:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
  # one pytest per FLA test case and switch (kda on: FLA_KDA=1, then the control: FLA_KDA=0), FLA_JOBS
  # at once from one queue: Triton's compiles and autotuning are CPU-bound and single-threaded per
  # process. A case starts only while FLA_BUDGET seconds have not run out and is cut at FLA_TIMEOUT.
  file="$FLA_SRC/tests/ops/test_kda.py"
  for t in $FLA_TESTS; do echo "$file::$t"; done | xargs python3 -m pytest --collect-only -q -p no:cacheprovider 2>/dev/null |
    grep -o '::test_.*' | sed "s|^|$file|" >"$OUT/fla_cases.txt"
  for on in 1 0; do awk -v on=$on '{print on " " NR " " $0}' "$OUT/fla_cases.txt"; done >"$OUT/fla_queue.txt"
  export OUT FLA_RESUME=${FLA_RESUME:-} FLA_TIMEOUT=${FLA_TIMEOUT:-420} fla_deadline=$(( $(date +%s) + ${FLA_BUDGET:-3600} ))
  xargs -d '\n' -P "${FLA_JOBS:-8}" -n 1 bash -c '
    on=${0%% *}; rest=${0#* }; n=${rest%% *}; case_id=${rest#* }; log="$OUT/fla_${on}_$n.log"
    if [[ -n "$FLA_RESUME" ]] && grep -q "^exit: " "$log" 2>/dev/null && ! grep -q "^exit: 124" "$log"; then exit 0; fi
    echo "case: ${case_id##*::}" >"$log"; left=$(( fla_deadline - $(date +%s) ))
    if (( left < 30 )); then echo "outcome: not started (FLA_BUDGET spent)" >>"$log"; exit 0; fi
    FLA_KDA=$on timeout $(( left < FLA_TIMEOUT ? left : FLA_TIMEOUT )) \
      python3 -m pytest -p fla_tests_plugin -p no:cacheprovider -q -rs "$case_id" >>"$log" 2>&1
    echo "exit: $?" >>"$log"' <"$OUT/fla_queue.txt"
  python3 bench/fla_tests_summary.py "$OUT" | tee "$OUT/fla_tests_summary.txt"
fi
if has compare; then
  step compare
  python3 bench/compare_chunk_kda.py --out "$OUT" 2>&1 | tee "$OUT/compare_chunk_kda.txt"
fi
if has binding; then
  step binding
  for dev in cuda cpu; do python3 bench/binding_overhead.py --device $dev 2>&1 | tee "$OUT/binding_$dev.txt"; done
fi
step done
for f in compare_chunk_kda.txt compare_chunk_kda.json; do if [[ -f "$OUT/$f" ]]; then cp "$OUT/$f" "$FINAL_OUT/"; fi; done
