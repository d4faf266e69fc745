#!/usr/bin/env bash
# Installs the Debian packages ringtrain needs (only those missing), then configures and
# builds build/ringtrain. Safe to run again: it does nothing that is already done.
#   RINGTRAIN_BUILD_DIR   build directory (default: build)
#   RINGTRAIN_NO_CORPUS=1 skip the kernel documentation package (the demo corpus)
#   RINGTRAIN_BUILD_TARGETS only these meson targets (default: all, tests included)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake meson ninja-build pkg-config
  libdnnl-dev libzmq3-dev libsodium-dev cppzmq-dev libcxxopts-dev libboost-test-dev libpcre2-dev nlohmann-json3-dev zlib1g-dev
  # Debian's oneDNN CMake package (built with an OpenCL GPU runtime) fails to load without
  # the OpenCL headers and library, and libdnnl-dev does not depend on them
  ocl-icd-opencl-dev opencl-c-headers
  # the PyTorch reference and Gloo baseline, on OpenBLAS (never the reference BLAS)
  python3-torch python3-numpy libopenblas0-openmp python3-matplotlib
  # multi-host tests: network namespaces, firewall, traffic shaping, process tools
  iproute2 nftables procps psmisc
)
[ "${RINGTRAIN_NO_CORPUS:-0}" = 1 ] || packages+=(linux-doc-6.1)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# PyTorch takes its BLAS from the libblas.so.3 alternative: make sure it is OpenBLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: pointing libblas.so.3 at OpenBLAS (was: ${blas:-none})"
     ${sudo:-} update-alternatives --set libblas.so.3-x86_64-linux-gnu \
       /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ;;
esac

build=${RINGTRAIN_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release
fi
# RINGTRAIN_BUILD_TARGETS (e.g. "ringtrain") builds only those; by default everything, tests included.
# shellcheck disable=SC2086
meson compile -C "$build" ${RINGTRAIN_BUILD_TARGETS:-}
