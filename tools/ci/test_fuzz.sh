#!/usr/bin/env bash
# The fuzzing pass: builds the libFuzzer targets with clang (build-fuzz, -Dfuzz=enabled:
# ASan + UBSan + coverage) and runs each as a meson test (suite fuzz): its corpus under
# test/fuzz/corpus/ first, then RINGTRAIN_FUZZ_SECONDS of fuzzing (default 12). tools/test.sh
# calls this after the sanitizer pass and counts these results in its summary line.
#   RINGTRAIN_FUZZ_BUILD_DIR  build directory (default: build-fuzz)
#   RINGTRAIN_BUILD_ONLY=1    build, run nothing
#   bash tools/ci/test_fuzz.sh fuzz/http_head      one target; RINGTRAIN_FUZZ_SECONDS=600 for a long run
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${RINGTRAIN_FUZZ_BUILD_DIR:-build-fuzz}
rm -f "$build/meson-logs/testlog.json"
if ! command -v clang++ >/dev/null; then
  echo "fuzz pass: clang++ is missing (bash tools/setup.sh --no-build fuzz installs it)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  CXX=clang++ CC=clang meson setup "$build" -Dfuzz=enabled -Dtests=disabled -Dnative=false --buildtype=plain \
    -Doptimization=1 -Db_lundef=false || exit 1
fi
# one binary per test/fuzz/fuzz_<name>.cpp
targets=$(cd test/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')
compile_log="$build/fuzz-compile.log"
# shellcheck disable=SC2086
if ! meson compile -C "$build" $targets >"$compile_log" 2>&1; then
  tail -n 60 "$compile_log"
  echo "fuzz pass: the build failed (whole log: $compile_log)" >&2
  exit 1
fi
[ "${RINGTRAIN_BUILD_ONLY:-0}" = 1 ] && exit 0  # tools/test.sh builds early, tests later
meson test -C "$build" --no-rebuild --suite fuzz --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "$@"
