#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs what is missing (the "tests"
# package group of tools/setup.sh: Boost.Test, PyTorch, namespace tools, ...), builds, runs
# `meson test`, and ends with one line "N passed, N failed, N skipped". Any failure of the
# build or of meson itself counts as a failure in that line and in the exit code.
#
# The passes, all counted in that line:
#   1. this host's release (Debian 12 here): every suite, build/
#   2. the net and train suites again under AddressSanitizer + UBSan (tools/ci/test_sanitizers.sh)
#   2b. fuzzing: one libFuzzer target per parser, its corpus then 12 s each (tools/ci/test_fuzz.sh)
#   3. Debian 13 in a chroot made by debootstrap (tools/ci/chroot.sh, kept between runs):
#      its own packages (oneDNN 3.7, GCC 14, Boost 1.83, ZeroMQ 4.3.5, PyTorch 2.6), build-trixie/,
#      the suites in RINGTRAIN_CHROOT_SUITES (default: all but the ones named in tools/ci/release_pass.sh)
#   4. one job across the two builds: rank 0 from build/, rank 1 from build-trixie/ (train/mixed_releases)
# Passes 3 and 4 need root (chroot, namespaces); without it they are skipped with a message.
# Settings: RINGTRAIN_SKIP_SANITIZERS=1, RINGTRAIN_SKIP_FUZZ=1, RINGTRAIN_SKIP_CHROOT=1 leave those passes out;
# test names as arguments run only those tests of pass 1.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RINGTRAIN_BUILD_DIR:-build}
san_build=${RINGTRAIN_SAN_BUILD_DIR:-build-san}
fuzz_build=${RINGTRAIN_FUZZ_BUILD_DIR:-build-fuzz}
other_release=${RINGTRAIN_OTHER_RELEASE:-trixie}
other_build=build-$other_release
logs=("$build/meson-logs/testlog.json")
# A log left by an earlier run must never be read as this run's result.
rm -f "$build/meson-logs/testlog.json" "$build/meson-logs/mixed.json" "$san_build/meson-logs/testlog.json" \
  "$fuzz_build/meson-logs/testlog.json" \
  "$other_build/meson-logs/testlog.json"
rc=0
stamp() { printf '\n=== test: %s (%dm%02ds so far)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

stamp "pass 1: this host's release"
bash tools/setup.sh tests || rc=$?
if [ "$rc" -eq 0 ]; then
  if [ $# -gt 0 ]; then
    meson test -C "$build" --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "$@" || rc=1
  elif [ -n "${RINGTRAIN_TEST_SKIP:-}" ]; then
    # Every test of pass 1 but those named (tools/ci/from_nothing.sh: what a chroot shares with the host)
    names=()
    while read -r name; do
      case " $RINGTRAIN_TEST_SKIP " in *" $name "*) continue ;; esac
      names+=("$name")
    # `meson test --list` prints "ringtrain:SUITE / NAME"; meson test takes the NAME
    done < <(meson test -C "$build" --list --no-suite mixed 2>/dev/null | sed -n 's|^.* / ||p')
    if [ ${#names[@]} -eq 0 ]; then
      echo "test: meson test --list named no tests in $build" >&2; rc=1
    else
      echo "test: left out (RINGTRAIN_TEST_SKIP): $RINGTRAIN_TEST_SKIP"
      meson test -C "$build" --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "${names[@]}" || rc=1
    fi
  else
    meson test -C "$build" --no-suite mixed --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" || rc=1
  fi
  # Left out when test names are given, so that running one suite stays quick.
  if [ $# -eq 0 ] && [ "${RINGTRAIN_SKIP_SANITIZERS:-0}" != 1 ]; then
    stamp "pass 2: sanitizers"
    bash tools/ci/test_sanitizers.sh || rc=1
    logs+=("$san_build/meson-logs/testlog.json")
  fi
  if [ $# -eq 0 ] && [ "${RINGTRAIN_SKIP_FUZZ:-0}" != 1 ]; then
    stamp "pass 2b: fuzzing"
    RINGTRAIN_FUZZ_BUILD_DIR=$fuzz_build bash tools/ci/test_fuzz.sh || rc=1
    logs+=("$fuzz_build/meson-logs/testlog.json")
  fi
  if [ $# -eq 0 ] && [ "${RINGTRAIN_SKIP_CHROOT:-0}" != 1 ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "test: passes 3 and 4 (Debian $other_release chroot, mixed releases) skipped: they need root" >&2
    else
      stamp "pass 3: Debian $other_release in a chroot"
      logs+=("$other_build/meson-logs/testlog.json")
      rm -f "$other_build/ringtrain"  # pass 4 must run this run's build of it, or not at all
      bash tools/ci/chroot.sh --release "$other_release" -- \
        env RINGTRAIN_BUILD_DIR="$other_build" bash tools/ci/release_pass.sh || rc=1
      stamp "pass 4: one job, ranks built on two releases"
      logs+=("$build/meson-logs/mixed.json")
      if [ -x "$other_build/ringtrain" ]; then
        RINGTRAIN_OTHER_RELEASE_BIN=$PWD/$other_build/ringtrain RINGTRAIN_OTHER_RELEASE=$other_release \
          meson test -C "$build" --no-rebuild --suite mixed --logbase mixed --print-errorlogs || rc=1
      else
        echo "test: pass 4 not run: the $other_release build failed" >&2
      fi
    fi
  fi
else
  echo "test: tools/setup.sh failed (exit $rc): nothing was tested" >&2
fi
stamp "summary"
/usr/bin/python3 tools/ci/test_summary.py "$rc" "${logs[@]}" || rc=1
exit $rc
