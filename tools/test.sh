#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs what is missing (the "tests"
# package group of tools/setup.sh: Boost.Test, PyTorch, namespace tools, ...), builds, runs
# `meson test`, and ends with one line "N passed, N failed, N skipped". Any failure of the
# build or of meson itself counts as a failure in that line and in the exit code.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RINGTRAIN_BUILD_DIR:-build}
logs=("$build/meson-logs/testlog.json")
san_build=${RINGTRAIN_SAN_BUILD_DIR:-build-san}
# A log left by an earlier run must never be read as this run's result.
rm -f "${logs[0]}" "$san_build/meson-logs/testlog.json"
rc=0
bash tools/setup.sh tests || rc=$?
if [ "$rc" -eq 0 ]; then
  meson test -C "$build" --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "$@"
  rc=$?
  # --- sanitizer pass: the net and train suites once more, built with ASan+UBSan
  # (tools/test_sanitizers.sh, in build-san). Their results count in the summary line. Left
  # out when test names are given, so that running one suite stays quick.
  if [ $# -eq 0 ] && [ "${RINGTRAIN_SKIP_SANITIZERS:-0}" != 1 ]; then
    bash tools/test_sanitizers.sh || rc=1
    logs+=("$san_build/meson-logs/testlog.json")
  fi
  # --- end of the sanitizer pass
else
  echo "test: tools/setup.sh failed (exit $rc): nothing was tested" >&2
fi
/usr/bin/python3 tools/test_summary.py "$rc" "${logs[@]}" || rc=1
exit $rc
