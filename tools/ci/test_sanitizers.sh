#!/usr/bin/env bash
# The net and train suites again, built with AddressSanitizer and UndefinedBehaviorSanitizer
# in a build directory of their own (default build-san): an out-of-bounds access, a
# use-after-free, a leak or undefined behaviour on any path they take (bytes from the
# network, checkpoints, the trainer) fails the run. tools/test.sh calls this after the
# plain suites and counts these results in its summary line.
#   RINGTRAIN_SAN_BUILD_DIR  build directory (default: build-san)
#   RINGTRAIN_BUILD_ONLY=1   build, run nothing
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${RINGTRAIN_SAN_BUILD_DIR:-build-san}
rm -f "$build/meson-logs/testlog.json"  # a failed build must not leave an old result to count
if [ ! -f "$build/build.ninja" ]; then
  # -O1 keeps the instrumented tests fast enough; -march=native off: the same code on every host.
  meson setup "$build" --buildtype=plain -Doptimization=1 -Db_sanitize=address,undefined -Db_lundef=false \
    -Dnative=false || exit 1
fi
# Only what the two suites run (the other suites' binaries are not built here); the link
# emulator carries net/slow_link's traffic.
# Its output (pages of library warnings at -O1) goes to a log, shown only when the build fails,
# so that the end of a CI run still shows the tests' results.
compile_log="$build/sanitizer-compile.log"
if ! meson compile -C "$build" ringtrain test_net net_rank_driver hostile_peer test_train link-emulator >"$compile_log" 2>&1; then
  tail -n 60 "$compile_log"
  echo "sanitizer pass: the build failed (whole log: $compile_log)" >&2
  exit 1
fi
[ "${RINGTRAIN_BUILD_ONLY:-0}" = 1 ] && exit 0  # tools/test.sh builds early, tests later
# Stop at the first report, with a stack; leaks count (suppressions: what libraries keep or lose themselves).
export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=1:quarantine_size_mb=64${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/tools/ci/sanitizer_suppressions.txt${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
meson test -C "$build" --no-rebuild --suite net --suite train --print-errorlogs \
  --num-processes "${RINGTRAIN_TEST_JOBS:-2}" --timeout-multiplier 3
