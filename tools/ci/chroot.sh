#!/usr/bin/env bash
# Runs a command inside a Debian chroot of another release (default: Debian 13, trixie), with
# this source tree mounted at the same path, so that one checkout builds and tests on two
# releases. Needs root. The chroot is made with debootstrap from Debian's archive the first
# time and kept (RINGTRAIN_CHROOT_CACHE, default /var/cache/ringtrain): later runs on the same
# machine reuse it, and tools/setup.sh inside it installs only what is missing.
#
#   sudo bash tools/ci/chroot.sh [--release trixie] [--bind DIR]... -- COMMAND [ARG...]
#   sudo bash tools/ci/chroot.sh --release trixie -- bash tools/setup.sh tests
#
# --bind DIR mounts a host directory at the same path inside (a test's scratch directory, so
# that a rank in the chroot reads the same data and writes where the test looks).
# --fresh makes the chroot anew, as a bare machine: a minimal debootstrap with git and
# ca-certificates only, no package of ringtrain's (tools/ci/from_nothing.sh); it replaces the kept one.
#
# The command runs as root in the source tree, with a clean environment (PATH, HOME, LANG,
# CI and every RINGTRAIN_* and OMP_* variable are passed in). /proc, /sys, /dev and /dev/pts are
# mounted for it and unmounted afterwards, also when it fails or is interrupted.
#   RINGTRAIN_DEBIAN_MIRROR  the archive to debootstrap from (default http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/../.."
# Each invocation gets a mount namespace of its own: its /proc, /sys, /dev and binds are seen
# by its command only and vanish with it, so several may use one chroot at once (a rank of a
# test while a build runs) without one's mounts colliding with or unmounting another's.
if [ -z "${RT_CHROOT_OWN_MOUNTS:-}" ] && [ "$(id -u)" = 0 ]; then
  export RT_CHROOT_OWN_MOUNTS=1
  exec unshare --mount --propagation private bash tools/ci/chroot.sh "$@"
fi
release=trixie
binds=()
fresh=0
while [ $# -gt 0 ]; do
  case "$1" in
    --release) release=$2; shift 2 ;;
    --bind) [ -d "${2:-}" ] || { echo "chroot: --bind ${2:-} is not a directory" >&2; exit 2; }
            binds+=("$(cd "$2" && pwd)"); shift 2 ;;
    --fresh) fresh=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "chroot: unknown option '$1'; usage: tools/ci/chroot.sh [--release NAME] -- COMMAND" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "chroot: no command given; usage: tools/ci/chroot.sh [--release NAME] -- COMMAND" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "chroot: must run as root (debootstrap, mount and chroot need it); run it with sudo" >&2; exit 2; }
case "$release" in
  *[!a-z]*|"") echo "chroot: release '$release' is not a Debian code name (e.g. trixie)" >&2; exit 2 ;;
esac

cache=${RINGTRAIN_CHROOT_CACHE:-/var/cache/ringtrain}
root=$cache/chroot-$release
src=$PWD

if [ "$fresh" = 1 ]; then
  rm -rf --one-file-system "$root"
fi
if [ ! -f "$root/.ringtrain-chroot-ready" ]; then
  if ! command -v debootstrap >/dev/null; then
    echo "chroot: installing debootstrap"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
  fi
  # Built aside and renamed when complete: an interrupted debootstrap never passes for a chroot.
  mkdir -p "$cache"
  rm -rf "$root.new"
  include=()
  [ "$fresh" = 0 ] || include=(--include=git,ca-certificates)
  echo "chroot: creating a Debian $release chroot in $root (debootstrap${include:+ with git and ca-certificates only}, about a minute)"
  t0=$(date +%s)
  if ! debootstrap --variant=minbase "${include[@]}" "$release" "$root.new" "${RINGTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
       >"$cache/debootstrap-$release.log" 2>&1; then
    tail -n 20 "$cache/debootstrap-$release.log" >&2
    echo "chroot: debootstrap of $release failed (log: $cache/debootstrap-$release.log)" >&2
    exit 1
  fi
  # Only the main archive; no recommends, as tools/setup.sh asks on the host (a --fresh one
  # stays as debootstrap left it: a bare machine has no such setting).
  [ "$fresh" = 1 ] || echo 'APT::Install-Recommends "false";' > "$root.new/etc/apt/apt.conf.d/90ringtrain"
  touch "$root.new/.ringtrain-chroot-ready"
  rm -rf "$root"
  mv "$root.new" "$root"
  echo "chroot: $release ready in $(( $(date +%s) - t0 )) s"
fi

mounts=()
cleanup() {
  local i
  for (( i=${#mounts[@]}-1; i>=0; i-- )); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind-mounts host path $1 at $2 inside the chroot
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounts+=("$root$2")
}
# The chroot's / must be a mount point (this namespace's own): the network-namespace tools
# inside run `mount --make-rslave /`, which fails on a plain directory.
mount --bind "$root" "$root"; mounts+=("$root")
mkdir -p "$root/proc" "$root/sys"
mount -t proc proc "$root/proc"; mounts+=("$root/proc")
mount -t sysfs sys "$root/sys"; mounts+=("$root/sys")
bind /dev /dev
bind /dev/pts /dev/pts
bind /dev/shm /dev/shm
bind "$src" "$src"
# Read-only files the tests expect beside the checkout (the shared specification, if any).
[ -d "$src/../shared" ] && bind "$src/../shared" "$(cd "$src/.." && pwd)/shared"
for dir in "${binds[@]}"; do bind "$dir" "$dir"; done
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

env_args=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
[ -z "${CI:-}" ] || env_args+=(CI="$CI")
# RINGTRAIN_* (the tests' settings) and OMP_* (a rank's thread count must be the one asked for)
while IFS='=' read -r name value; do
  env_args+=("$name=$value")
done < <(env | grep -E '^(RINGTRAIN|OMP)_' || true)
quoted=$(printf ' %q' "$@")
# The command runs in the background and this script waits for it, so that a signal to this
# script (a test's timeout, Ctrl-C) reaches the command at once: bash runs no trap while a
# foreground child runs, and a killed wrapper must not leave a trainer running in the chroot.
# chroot, env and bash all exec, so the child's pid is the command's own.
child=
on_signal() {
  [ -z "$child" ] || kill -TERM "$child" 2>/dev/null
  wait "$child" 2>/dev/null
  exit 143
}
trap on_signal INT TERM
set +e
chroot "$root" /usr/bin/env -i "${env_args[@]}" bash -c "cd $(printf %q "$src") && exec$quoted" &
child=$!
wait "$child"
rc=$?
exit $rc
