#!/usr/bin/env bash
# Installs the Debian packages a task needs (only those missing), then configures and builds
# build/ringtrain. Safe to run again: it does nothing that is already done.
#
#   bash tools/setup.sh                     the trainer and the demo corpus (tools/demo.sh)
#   bash tools/setup.sh tests               and all that the test suite needs (tools/test.sh)
#   bash tools/setup.sh --no-build reference netns   packages only (the benchmark scripts)
#
# Package groups (the trainer's are always installed):
#   trainer    compiler, build tools, and the libraries ringtrain builds and runs with
#   corpus     the Linux kernel documentation, the demo's corpus (not with RINGTRAIN_NO_CORPUS=1)
#   reference  PyTorch on OpenBLAS: the reference model and the Gloo baseline
#   netns      network namespaces, firewall, traffic shaping, process tools: multi-host runs
#   package    dpkg-shlibdeps, for tools/package-deb.sh
#   watch      a browser and Prometheus: the watch page's tests load it and scrape /metrics
#   fuzz       clang with libFuzzer (tools/ci/test_fuzz.sh)
#   tests      Boost.Test, and every group above: what `meson test` runs
# Settings:
#   RINGTRAIN_BUILD_DIR      build directory (default: build)
#   RINGTRAIN_BUILD_TARGETS  only these meson targets (default: all, tests included if configured)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/fail_loudly.sh"
cd "$(dirname "$0")/.."

# trainer: what ringtrain builds and runs with (the demo needs nothing more but its corpus)
trainer=(
  g++ cmake meson ninja-build pkg-config python3
  libdnnl-dev libzmq3-dev libsodium-dev cppzmq-dev libcxxopts-dev libpcre2-dev nlohmann-json3-dev zlib1g-dev
  libzstd-dev libsnappy-dev  # parquet pages (nanochat's data shards)
  # Debian's oneDNN CMake package (built with an OpenCL GPU runtime) fails to load without
  # the OpenCL headers and library, and libdnnl-dev does not depend on them
  ocl-icd-opencl-dev opencl-c-headers
)
# The release decides the few names that differ (tested: Debian 12 bookworm, Debian 13 trixie;
# Ubuntu 24.04 noble and Linux Mint 22 have the same names as trixie, with their kernel's docs).
# shellcheck disable=SC1091
release=$(. /etc/os-release 2>/dev/null && echo "${UBUNTU_CODENAME:-${VERSION_CODENAME:-}}")
# tiktoken (the tokenizer check loads our tokenizer with it) is packaged from Debian 13 on.
tiktoken=()
case "$release" in
  bookworm) corpus=(linux-doc-6.1) ;;
  trixie) corpus=(linux-doc-6.12) tiktoken=(python3-tiktoken) ;;
  noble) corpus=(linux-doc) ;;
  *) corpus=(linux-doc)
     echo "setup: release '${release:-unknown}' is not one ringtrain is tested on (Debian 12, Debian 13); trying the names of Debian 13" >&2 ;;
esac
# PyTorch with OpenBLAS, never the reference BLAS: that runs 30x slower (see the BLAS step below)
reference=(python3-torch python3-numpy libopenblas0-openmp "${tiktoken[@]}")
netns=(iproute2 nftables procps psmisc)
package=(dpkg-dev)
watch=(chromium prometheus fonts-dejavu-core)
fuzz=(clang)
# Boost.Test; the tests group also takes every group above
tests=(libboost-test-dev)

build_after=1
packages=("${trainer[@]}")
[ "${RINGTRAIN_NO_CORPUS:-0}" = 1 ] || packages+=("${corpus[@]}")
want_tests=0 want_reference=0
for group in "$@"; do
  case "$group" in
    --no-build) build_after=0 ;;
    corpus) packages+=("${corpus[@]}") ;;
    reference) packages+=("${reference[@]}"); want_reference=1 ;;
    netns) packages+=("${netns[@]}") ;;
    package) packages+=("${package[@]}") ;;
    watch) packages+=("${watch[@]}") ;;
    fuzz) packages+=("${fuzz[@]}") ;;
    tests) packages+=("${tests[@]}" "${corpus[@]}" "${reference[@]}" "${netns[@]}" "${package[@]}")
           # RINGTRAIN_NO_WATCH=1: not the browser nor clang (another release's chroot runs neither
           # train/watch nor the fuzzing pass)
           [ "${RINGTRAIN_NO_WATCH:-0}" = 1 ] || packages+=("${watch[@]}" "${fuzz[@]}")
           want_tests=1 want_reference=1 ;;
    *) echo "setup: unknown group '$group'; groups: corpus reference netns package watch fuzz tests (and --no-build)" >&2
       exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# PyTorch takes its BLAS from the libblas.so.3 alternative: make sure it is OpenBLAS.
if [ "$want_reference" = 1 ]; then
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
  case "$blas" in
    *openblas*) ;;
    *) echo "setup: pointing libblas.so.3 at OpenBLAS (was: ${blas:-none})"
       $sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu \
         /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ;;
  esac
fi

[ "$build_after" = 1 ] || exit 0
build=${RINGTRAIN_BUILD_DIR:-build}
# The tests build only where Boost.Test is found (-Dtests=auto); the tests group insists.
option_value() {  # the value a configured build directory has for meson option $1
  /usr/bin/python3 -c 'import json, sys; print(next((o["value"] for o in json.load(open(sys.argv[1]))
                                                     if o["name"] == sys.argv[2]), ""))' \
    "$build/meson-info/intro-buildoptions.json" "$1" 2>/dev/null || true
}
options=()
[ "$want_tests" = 0 ] || options+=(-Dtests=enabled)
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release "${options[@]}"
elif [ ${#missing[@]} -gt 0 ] || { [ "$want_tests" = 1 ] && [ "$(option_value tests)" != enabled ]; }; then
  # New packages (or the tests) may change what meson finds: configure again, keeping the objects.
  meson setup --reconfigure "$build" "${options[@]}"
fi
# RINGTRAIN_BUILD_TARGETS (e.g. "ringtrain") builds only those; by default everything.
# shellcheck disable=SC2086
meson compile -C "$build" ${RINGTRAIN_BUILD_TARGETS:-}
