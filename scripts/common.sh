# scripts/common.sh: sourced by scripts/demo and scripts/test (not run on its own).
# Sets: root (the source tree), jobs (parallel build jobs), and puts nvcc on PATH when the CUDA
# toolkit sits in its usual place but PATH lacks it, so CMake finds it and the CUDA targets build.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${KDA_JOBS:-2}  # 2 cores on the project's machines; override with KDA_JOBS=N
if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# run_logged LOG CMD...: runs CMD with its output in LOG; on failure prints the log's tail and exits.
run_logged() {
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $*" >&2
    echo "---- last 60 lines of $log" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
}

# configure BUILD_DIR [cmake options]: configures (or reconfigures) a build tree, quietly.
configure() {
  local dir=$1
  shift
  mkdir -p "$dir"
  run_logged "$dir/configure.log" cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE="${KDA_BUILD_TYPE:-Release}" "$@"
  grep -E "kda: CUDA backend targets" "$dir/configure.log" || true
}
