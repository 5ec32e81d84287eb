#!/usr/bin/env bash
# bench/device_python.sh: the Python package on a GPU machine without network access, from the
# checkout's root. Installs the package from this tree (`pip install --no-build-isolation`:
# scikit-build-core and nvcc must be on that machine), runs tests/python, FLA's own KDA tests with
# kda as FLA's backend and without it (the control), the chunk_kda side-by-side and the binding's
# per-call cost. Logs and results go to $OUT (default /tmp/out).
#
#   FLA_SRC=.fla bash bench/device_python.sh
#
# FLA_SRC: a folder holding FLA's `fla/` package and its `tests/` from one commit (made on the build
# machine from a checkout: `git archive <commit> fla tests | tar x -C .fla`), put first on
# PYTHONPATH so that FLA's tests run against the FLA they were written for; einops must be
# importable (WHEELS: a folder of wheels to install first, e.g. `pip download --no-deps -d .whl einops`).
# STEPS: any of install pytest fla-tests compare binding (default: all, in that order).
# FLA_TESTS_K: pytest -k expression for FLA's tests (default: every test that reaches chunk_kda).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-install pytest fla-tests compare binding}
FLA_TESTS_K=${FLA_TESTS_K:-"chunk and not naive and not flash_kda and not ascend and not invalid"}
mkdir -p "$OUT"
step() { echo "== step $1: $(date +%T)"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [[ -n "${WHEELS:-}" ]]; then
  pip install --no-deps --no-index "$WHEELS"/*.whl >"$OUT/wheels.log" 2>&1
fi
if has install; then
  step install
  start=$SECONDS
  CUDAARCHS=${CUDAARCHS:-90a} pip install --no-build-isolation --no-deps --force-reinstall . >"$OUT/pip_install.log" 2>&1
  echo "rc=$? in $((SECONDS - start)) s" | tee -a "$OUT/pip_install.log"
fi
if has pytest; then
  step pytest
  (cd tests/python && python3 -m pytest -rs -p no:cacheprovider) >"$OUT/pytest.log" 2>&1
  tail -n 3 "$OUT/pytest.log"
fi
if has fla-tests; then
  step fla-tests
  export PYTHONPATH="${FLA_SRC:?set FLA_SRC}:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
  python3 -m pytest -p fla_tests_plugin -p no:cacheprovider -q "$FLA_SRC/tests/ops/test_kda.py" -k "$FLA_TESTS_K" \
    >"$OUT/fla_tests_kda_on.log" 2>&1
  tail -n 5 "$OUT/fla_tests_kda_on.log"
  FLA_KDA=0 python3 -m pytest -p fla_tests_plugin -p no:cacheprovider -q "$FLA_SRC/tests/ops/test_kda.py" -k "$FLA_TESTS_K" \
    >"$OUT/fla_tests_kda_off.log" 2>&1
  tail -n 5 "$OUT/fla_tests_kda_off.log"
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
