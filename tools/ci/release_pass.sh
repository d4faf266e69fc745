#!/usr/bin/env bash
# Pass 3 of tools/test.sh, run inside another release's chroot (tools/ci/chroot.sh): installs
# that release's packages (tools/setup.sh knows each release's names), builds this tree in
# RINGTRAIN_BUILD_DIR and runs the suites that can differ between releases.
#
# What runs: everything that touches oneDNN, the libraries or the file formats: kernels, model,
# optim (the PyTorch 2.6 reference cross-checks), io, data, the tokenizer check against
# tiktoken, net (ZeroMQ 4.3.5, CURVE, the wire), the train suites, and the package (a .deb of
# this release, installed, run from /usr/bin). Left out by default, because they are about
# the kernel and the network namespaces, which a chroot shares with the host, not about the
# release's libraries, and CI's time is bounded: the suites in $skip below.
#   RINGTRAIN_CHROOT_SUITES  meson test names to run instead (space separated; "all" for all)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${RINGTRAIN_BUILD_DIR:?RINGTRAIN_BUILD_DIR must name the build directory}
# Same kernel, same namespaces, same emulator as the host's pass: nothing the release changes.
# train/watch: its browser and Prometheus are the host's concern; the watcher's own code
# (history, HTTP parser, reply checks) runs here in train/watch_parts.
skip="net/netns net/slow_link train/watch"
export RINGTRAIN_NO_WATCH=1
echo "release pass: $(. /etc/os-release && echo "$PRETTY_NAME"), build directory $build"
bash tools/setup.sh tests || exit 1
# Debian 13 packages tiktoken (tools/setup.sh installs it): the tokenizer check must use it.
if [ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = trixie ]; then export RINGTRAIN_REQUIRE_TIKTOKEN=1; fi
names=()
if [ -n "${RINGTRAIN_CHROOT_SUITES:-}" ]; then
  [ "$RINGTRAIN_CHROOT_SUITES" = all ] || read -r -a names <<<"$RINGTRAIN_CHROOT_SUITES"
else
  while read -r name; do
    case " $skip " in *" $name "*) continue ;; esac
    names+=("$name")
  # `meson test --list` prints "ringtrain:SUITE / NAME"; meson test takes the NAME
  done < <(meson test -C "$build" --list --no-suite mixed 2>/dev/null | sed -n 's|^.* / ||p')
  [ ${#names[@]} -gt 0 ] || { echo "release pass: meson test --list named no tests in $build" >&2; exit 1; }
  echo "release pass: left out (same kernel and namespaces as the host's pass): $skip"
fi
meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "${RINGTRAIN_TEST_JOBS:-2}" "${names[@]}"
