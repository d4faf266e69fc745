#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs what is missing, builds, runs
# `meson test`, and ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RINGTRAIN_BUILD_DIR:-build}
bash tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }
meson test -C "$build" --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "$@"
rc=$?
logs=("$build/meson-logs/testlog.json")

# --- sanitizer pass: the net and train suites once more, built with ASan+UBSan
# (tools/test_sanitizers.sh, in build-san). Their results count in the summary line. Left
# out when test names are given, so that running one suite stays quick.
if [ $# -eq 0 ] && [ "${RINGTRAIN_SKIP_SANITIZERS:-0}" != 1 ]; then
  bash tools/test_sanitizers.sh || rc=1
  logs+=("${RINGTRAIN_SAN_BUILD_DIR:-build-san}/meson-logs/testlog.json")
fi
# --- end of the sanitizer pass

/usr/bin/python3 tools/test_summary.py "${logs[@]}" || rc=1
exit $rc
