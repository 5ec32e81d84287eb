#!/usr/bin/env bash
# Installs the packages kda's build, tests, benchmarks and examples need, and nothing else, on
# Debian 12 or Ubuntu 22.04 / 24.04 (read from /etc/os-release). Idempotent and quiet: when every
# package is present it only asks dpkg (well under a second); `apt-get update` runs only when
# something is missing. Needs root (or sudo) only in that case.
#
#   scripts/deps.sh            compiler, CMake, Eigen, Catch2, Google Benchmark, nlohmann-json, CLI11
#   scripts/deps.sh --fuzz     also clang and its sanitizer/libFuzzer runtime (KDA_FUZZ=ON)
#   KDA_FUZZ=1 scripts/deps.sh same as --fuzz
#
# The package names are the same on the three releases (catch2 is Catch2 2.13 on Debian 12 and
# Ubuntu 22.04, Catch2 3 on Ubuntu 24.04; the tests take either). Two things differ:
#   - Ubuntu 22.04's cmake is 3.22, older than the 3.25 kda needs: a newer one comes from PyPI
#     (`pip install cmake`) unless one is already on PATH;
#   - clang's sanitizer/libFuzzer runtime is libclang-rt-N-dev for the distribution's clang N where
#     apt knows that package (Debian 12: clang 14; Ubuntu 24.04: clang 18), else
#     libclang-common-N-dev, which holds it in the older packaging of Ubuntu 22.04's clang 14.
set -euo pipefail

packages=(cmake make g++ libeigen3-dev catch2 libbenchmark-dev nlohmann-json3-dev libcli11-dev)
for arg in "$@"; do
  case "$arg" in
    --fuzz) KDA_FUZZ=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "scripts/deps.sh: unknown argument '$arg' (expected --fuzz)" >&2; exit 2 ;;
  esac
done

distro=unknown
if [[ -r /etc/os-release ]]; then
  # shellcheck disable=SC1091
  distro=$(. /etc/os-release && echo "${ID:-}-${VERSION_ID:-}")
fi
case "$distro" in
  debian-12 | ubuntu-22.04 | ubuntu-24.04) ;;
  *) echo "scripts/deps.sh: $distro is not one of Debian 12, Ubuntu 22.04, Ubuntu 24.04; trying the same package names" >&2 ;;
esac

# A tool already on PATH counts as present (e.g. a newer cmake from pip): only libraries must be dpkg's.
cmake_new_enough() {
  local v major minor
  v=$(cmake --version 2>/dev/null | sed -n '1s/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  [[ -n "$v" ]] && read -r major minor <<<"$v" && ((major > 3 || (major == 3 && minor >= 25)))
}
has_tool() {
  case "$1" in
    cmake) cmake_new_enough ;;
    make | g++ | clang) command -v "$1" >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

sudo=()
need_root() {
  if [[ $(id -u) -ne 0 && ${#sudo[@]} -eq 0 ]]; then
    command -v sudo >/dev/null || { echo "scripts/deps.sh: need root (or sudo) to install $*" >&2; exit 1; }
    sudo=(sudo)
  fi
}
updated=0
apt_install() {
  need_root "$@"
  export DEBIAN_FRONTEND=noninteractive
  if [[ $updated == 0 ]]; then "${sudo[@]}" apt-get update -qq >/dev/null; updated=1; fi
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

missing=()
for p in "${packages[@]}"; do
  has_tool "$p" && continue
  # "install ok installed" is the only state in which the package's files are all there.
  installed "$p" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "scripts/deps.sh: installing ${missing[*]}" >&2
  apt_install "${missing[@]}"
fi

if ! cmake_new_enough; then
  echo "scripts/deps.sh: the distribution's cmake is older than 3.25; installing cmake from PyPI" >&2
  command -v pip3 >/dev/null || apt_install python3-pip
  need_root cmake
  "${sudo[@]}" python3 -m pip install -q "cmake>=3.25"
  hash -r
  cmake_new_enough || { echo "scripts/deps.sh: still no cmake >= 3.25 on PATH (pip put it in $(python3 -m site --user-base)/bin?)" >&2; exit 1; }
fi

if [[ "${KDA_FUZZ:-0}" == 1 ]]; then
  has_tool clang || installed clang || apt_install clang
  major=$(clang --version | sed -n '1s/.*clang version \([0-9]*\).*/\1/p')
  rt=libclang-rt-$major-dev
  if ! installed "$rt"; then
    # apt's lists decide which of the two holds the runtime; refresh them once if they know neither
    if ! apt-cache show "$rt" >/dev/null 2>&1 && ! installed "libclang-common-$major-dev" && [[ $updated == 0 ]]; then
      need_root "$rt"
      "${sudo[@]}" apt-get update -qq >/dev/null
      updated=1
    fi
    if apt-cache show "$rt" >/dev/null 2>&1; then
      echo "scripts/deps.sh: installing $rt" >&2
      apt_install "$rt"
    elif ! installed "libclang-common-$major-dev"; then
      echo "scripts/deps.sh: installing libclang-common-$major-dev" >&2
      apt_install "libclang-common-$major-dev"
    fi
  fi
fi
