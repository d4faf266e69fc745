#!/usr/bin/env bash
# Builds the Debian package ringtrain_<version>_<arch>.deb for the release it runs on (its
# library names in Depends, the release in the version: +deb12, +deb13, +ubuntu24.04, so that a
# bookworm and a trixie package are never mixed up): one portable build
# (-Dnative=false, so the package runs on every x86-64 host), `meson install`ed into a
# staging tree, with Depends computed from the binary's shared libraries (dpkg-shlibdeps).
# Install it on each host with `apt install ./ringtrain_<version>_amd64.deb`.
#
#   bash tools/package-deb.sh [--build-dir build-deb] [--out DIR]
#
# The build directory is kept and reused: a second run only rebuilds what changed. The
# path of the .deb is the last line printed.
#   RINGTRAIN_DEB_MAINTAINER  the Maintainer field (default: ringtrain developers <ringtrain@invalid>)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/fail_loudly.sh"
cd "$(dirname "$0")/.."
build=build-deb out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package-deb: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
out=${out:-$build}

# The trainer's build dependencies and dpkg-dev; no corpus, no tests.
RINGTRAIN_NO_CORPUS=1 bash tools/setup.sh --no-build package

options=(--buildtype=release -Dnative=false -Dtests=disabled --prefix=/usr)
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" "${options[@]}"
else
  meson setup "$build" "${options[@]}"
fi
meson compile -C "$build"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
meson install -C "$build" --no-rebuild --strip --quiet --destdir "$root"
gzip -9n "$root/usr/share/man/man1/ringtrain.1"
chmod -R u=rwX,go=rX "$root"

# The Debian version orders snapshots: 0.1.0+git20261130235959.9c1c31bc968c (commit time,
# revision), so a package built from a newer commit upgrades the installed one.
version=$("$root/usr/bin/ringtrain" --version | awk '{print $2}')
revision=$("$root/usr/bin/ringtrain" --version | sed -n 's/.*(git \(.*\))$/\1/p' | tr -- - .)
if [ -n "$revision" ] && [ "$revision" != unknown ]; then
  version=$version+git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$revision
fi
# The release last: Depends names that release's libraries (libdnnl2 on Debian 12, libdnnl3.6
# on Debian 13), so the package installs there only. Debian 12 -> +deb12, Ubuntu 24.04 -> +ubuntu24.04.
# shellcheck disable=SC1091
os_id=$(. /etc/os-release && echo "${ID:-}") os_version=$(. /etc/os-release && echo "${VERSION_ID:-}")
case "$os_id" in
  debian) release_tag=deb${os_version%%.*} ;;
  *) release_tag=$os_id$os_version ;;
esac
release_tag=$(printf %s "$release_tag" | tr -cd 'a-z0-9.')
[ -n "$release_tag" ] || { echo "package-deb: /etc/os-release names no release (ID, VERSION_ID); cannot tag the package" >&2; exit 1; }
version=$version+$release_tag
arch=$(dpkg --print-architecture)
# dpkg-shlibdeps reads debian/control of the directory it runs in: give it a minimal one.
mkdir -p "$stage/src/debian"
printf 'Source: ringtrain\n\nPackage: ringtrain\nArchitecture: any\n' > "$stage/src/debian/control"
depends=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/ringtrain" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package-deb: dpkg-shlibdeps found no shared libraries in usr/bin/ringtrain" >&2; exit 1; }

mkdir -p "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<EOF
Package: ringtrain
Version: $version
Architecture: $arch
Maintainer: ${RINGTRAIN_DEB_MAINTAINER:-ringtrain developers <ringtrain@invalid>}
Installed-Size: $(du -sk "$root" | cut -f1)
Depends: $depends
Section: science
Priority: optional
Description: pretrain nanochat GPT models on the CPUs of several hosts
 One binary that trains nanochat-architecture GPT models on CPUs (oneDNN, OpenMP),
 across hosts with a ring all-reduce over ZeroMQ on fixed ports. Includes a systemd
 template unit: put a job's flags in /etc/ringtrain/<job>.conf and run
 systemctl start ringtrain@<job>. Built portable: runs on any x86-64 CPU.
EOF
# Files under /etc are conffiles: an upgrade keeps the user's edits, purge removes them.
(cd "$root" && find etc -type f | sed 's|^|/|') > "$root/DEBIAN/conffiles"
install -m 755 tools/dist/deb/postinst tools/dist/deb/prerm tools/dist/deb/postrm "$root/DEBIAN/"

mkdir -p "$out"
deb=$out/ringtrain_${version}_${arch}.deb
dpkg-deb --root-owner-group --build "$root" "$deb.tmp" >/dev/null
mv "$deb.tmp" "$deb"
echo "package-deb: Depends: $depends"
echo "$deb"
