#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs what is missing (the "tests"
# package group of tools/setup.sh: Boost.Test, PyTorch, namespace tools, ...), builds, runs
# `meson test`, and ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RINGTRAIN_BUILD_DIR:-build}
bash tools/setup.sh tests || { echo "0 passed, 1 failed"; exit 1; }
meson test -C "$build" --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "$@"
rc=$?
/usr/bin/python3 tools/test_summary.py "$build/meson-logs/testlog.json" || rc=1
exit $rc
