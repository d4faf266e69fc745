#!/usr/bin/env bash
# The README's two commands on a bare machine: a Debian chroot made anew by a minimal
# debootstrap with git and ca-certificates only (tools/ci/chroot.sh --fresh: nothing of
# ringtrain's installed, nothing kept from an earlier run), a fresh clone of this checkout's
# commit in it, then, exactly as README.md says:
#   1. `bash tools/demo.sh`   installs what is missing, builds, prepares the corpus, trains
#                             two local ranks, evaluates, samples and plots;
#   2. `bash tools/test.sh`   (with --tests) installs the test packages and runs the suites.
# It fails if a command exits non-zero or prints nothing, or if the demo left no checkpoint,
# sample or plot. Needs root.
#
#   sudo bash tools/ci/from_nothing.sh --release bookworm            the demo
#   sudo bash tools/ci/from_nothing.sh --release trixie --tests      the demo, then the tests
#
# What the demo runs with (fewer steps than its default 200, for CI's time; all else as is):
#   RINGTRAIN_FROM_NOTHING_STEPS   the demo's optimizer steps (default 40)
# What the test command runs with --tests: pass 1 of tools/test.sh, the suites that can
# differ between releases (everything that touches oneDNN, the libraries or the file
# formats: kernels, model, optim with the PyTorch reference, io, data, the tokenizer check,
# net with ZeroMQ and CURVE, the train suites, the package). Left out: the suites in
# RINGTRAIN_FROM_NOTHING_SKIP (default below), which test the kernel's network namespaces,
# the link emulator and the host's browser: the chroot shares the host's kernel, and pass 1
# on the host runs them. The other passes of tools/test.sh (sanitizers, fuzzing, the
# chroot itself) run on the host only.
# The clone's build directory stays in the chroot (/root/from-nothing/ringtrain/build):
# tools/test.sh reads its test log and runs pass 4 with its binary.
set -uo pipefail
cd "$(dirname "$0")/../.."
release=
tests=0
while [ $# -gt 0 ]; do
  case "$1" in
    --release) release=${2:-}; shift 2 ;;
    --tests) tests=1; shift ;;
    --inside) shift; break ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "from_nothing: unknown option '$1'; usage: tools/ci/from_nothing.sh --release NAME [--tests]" >&2; exit 2 ;;
  esac
done
skip=${RINGTRAIN_FROM_NOTHING_SKIP:-net/netns net/slow_link train/watch}
steps=${RINGTRAIN_FROM_NOTHING_STEPS:-40}
stamp() { printf '\n=== from nothing: %s (%dm%02ds so far)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

if [ "${1:-}" != inside-chroot ]; then
  [ -n "$release" ] || { echo "from_nothing: --release NAME is required (e.g. bookworm, trixie)" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "from_nothing: must run as root (debootstrap and chroot need it); run it with sudo" >&2; exit 2; }
  git diff --quiet HEAD 2>/dev/null || echo "from_nothing: note: uncommitted changes are not in the clone; it tests commit $(git rev-parse --short HEAD)" >&2
  exec bash tools/ci/chroot.sh --release "$release" --fresh -- \
    env RINGTRAIN_FROM_NOTHING_SKIP="$skip" RINGTRAIN_FROM_NOTHING_STEPS="$steps" \
    bash tools/ci/from_nothing.sh --inside inside-chroot "$PWD" "$tests"
fi

# Inside the bare chroot, as root: $2 the checkout to clone, $3 whether to run the tests.
src=$2 tests=$3
work=/root/from-nothing
stamp "a bare $(. /etc/os-release && echo "$PRETTY_NAME"): $(dpkg-query -W -f '.\n' | wc -l) packages, $(command -v g++ meson python3 2>/dev/null | wc -l) of g++, meson, python3"
rm -rf "$work" && mkdir -p "$work"
git clone -q "$src" "$work/ringtrain" || { echo "from_nothing: git clone of $src failed" >&2; exit 1; }
cd "$work/ringtrain" || exit 1
echo "from nothing: a fresh clone of $(git log -1 --format='%h %s' | cut -c1-100) in $PWD"

# A command's output is kept as well as shown: "prints nothing" is a failure of its own.
run_logged() {  # run_logged LOG COMMAND...: rc of the command
  local log=$1 rc
  shift
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  [ -s "$log" ] || { echo "from_nothing: '$*' printed nothing (exit $rc)" >&2; [ "$rc" != 0 ] || rc=1; }
  return "$rc"
}

stamp "the README's first command: bash tools/demo.sh (RINGTRAIN_DEMO_STEPS=$steps)"
rc=0
RINGTRAIN_DEMO_STEPS=$steps RINGTRAIN_DEMO_EVAL_EVERY=$((steps / 2)) run_logged "$work/demo.log" bash tools/demo.sh || rc=$?
if [ "$rc" != 0 ]; then
  echo "from_nothing: FAILED: bash tools/demo.sh exited $rc on a bare $(. /etc/os-release && echo "$PRETTY_NAME")" >&2
  exit 1
fi
missing=()
ls -d runs/demo/rank0/step_* >/dev/null 2>&1 || missing+=("a checkpoint (runs/demo/rank0/step_*)")
ls -d runs/demo/rank1/step_* >/dev/null 2>&1 || missing+=("rank 1's checkpoint (runs/demo/rank1/step_*)")
[ -s runs/demo/curves.png ] || missing+=("the plot (runs/demo/curves.png)")
grep -q '"val_bpb"' "$work/demo.log" || missing+=("the evaluation's val_bpb")
grep -q '^The kernel' "$work/demo.log" || missing+=("the sample (a line starting with the prompt)")
grep -q '^done in ' "$work/demo.log" || missing+=("its closing summary")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'from_nothing: FAILED: the demo exited 0 without %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "from nothing: the demo reached its checkpoint, sample and plot"

[ "$tests" = 1 ] || exit 0
stamp "the README's second command: bash tools/test.sh (pass 1, without: $skip)"
# Debian 13 packages tiktoken (tools/setup.sh installs it): the tokenizer check must use it.
[ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" != trixie ] || export RINGTRAIN_REQUIRE_TIKTOKEN=1
RINGTRAIN_TEST_SKIP=$skip RINGTRAIN_SKIP_SANITIZERS=1 RINGTRAIN_SKIP_FUZZ=1 RINGTRAIN_SKIP_CHROOT=1 RINGTRAIN_NO_WATCH=1 \
  run_logged "$work/test.log" bash tools/test.sh
