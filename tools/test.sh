#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs what is missing (the "tests"
# package group of tools/setup.sh: Boost.Test, PyTorch, namespace tools, ...), builds, runs
# `meson test`, and ends with one line "N passed, N failed, N skipped". Any failure of the
# build or of meson itself counts as a failure in that line and in the exit code.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RINGTRAIN_BUILD_DIR:-build}
log="$build/meson-logs/testlog.json"
# A log left by an earlier run must never be read as this run's result.
rm -f "$log"
rc=0
bash tools/setup.sh tests || rc=$?
if [ "$rc" -eq 0 ]; then
  meson test -C "$build" --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "$@"
  rc=$?
else
  echo "test: tools/setup.sh failed (exit $rc): nothing was tested" >&2
fi
/usr/bin/python3 tools/test_summary.py "$log" "$rc" || rc=1
exit $rc
