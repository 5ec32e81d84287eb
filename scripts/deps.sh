#!/usr/bin/env bash
# Installs the Debian 12 packages kda's build, tests, benchmarks and examples need, and nothing
# else. Idempotent and quiet: when every package is present it only asks dpkg (well under a second);
# `apt-get update` runs only when something is missing. Needs root (or sudo) only in that case.
#
#   scripts/deps.sh            compiler, CMake, Eigen, Catch2, Google Benchmark, nlohmann-json, CLI11
#   scripts/deps.sh --fuzz     also clang and its sanitizer/libFuzzer runtime (KDA_FUZZ=ON)
#   KDA_FUZZ=1 scripts/deps.sh same as --fuzz
set -euo pipefail

packages=(cmake make g++ libeigen3-dev catch2 libbenchmark-dev nlohmann-json3-dev libcli11-dev)
for arg in "$@"; do
  case "$arg" in
    --fuzz) KDA_FUZZ=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "scripts/deps.sh: unknown argument '$arg' (expected --fuzz)" >&2; exit 2 ;;
  esac
done
if [[ "${KDA_FUZZ:-0}" == 1 ]]; then
  packages+=(clang libclang-rt-14-dev)
fi

# A tool already on PATH counts as present (e.g. a newer cmake from pip): only libraries must be dpkg's.
has_tool() {
  case "$1" in
    cmake)  # 3.25 or newer
      local v major minor
      v=$(cmake --version 2>/dev/null | sed -n '1s/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
      [[ -n "$v" ]] && read -r major minor <<<"$v" && ((major > 3 || (major == 3 && minor >= 25))) ;;
    make | g++ | clang) command -v "$1" >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

missing=()
for p in "${packages[@]}"; do
  has_tool "$p" && continue
  # "install ok installed" is the only state in which the package's files are all there.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "scripts/deps.sh: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "scripts/deps.sh: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
