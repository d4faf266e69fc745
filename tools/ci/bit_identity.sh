#!/usr/bin/env bash
# Shows that a change leaves training bit for bit the same: a fixed d2 run of 20 steps on two
# local ranks with --sync grad, avg (bf16 wire), diloco (int8 wire), diloco overlapped (int8,
# --overlap-steps 2) and streaming diloco (int4, 2 fragments, 1 step late), once with this tree's build/ringtrain and once with a build of REV, and
# every rank's final model.safetensors and the tensors of its state.safetensors compared byte
# for byte. A refactor must print "identical"
# for every run; exit 1 names the first run that differs.
#
#   bash tools/ci/bit_identity.sh --base REV        e.g. --base origin/main, or a commit before the change
#   bash tools/ci/bit_identity.sh --base-bin PATH   compare with an already built ringtrain
#
# REV is built in a git worktree under $TMPDIR (ringtrain only, portable, a few minutes on 2
# cores). The corpus is the installed kernel documentation (tools/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
base="" base_bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --base-bin) base_bin=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bit_identity: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
[ -n "$base$base_bin" ] || { echo "bit_identity: give --base REV or --base-bin PATH; see --help" >&2; exit 2; }
new_bin=$PWD/build/ringtrain
[ -x "$new_bin" ] || { echo "bit_identity: build/ringtrain is missing; run bash tools/setup.sh first" >&2; exit 2; }
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base-src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
if [ -z "$base_bin" ]; then
  git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "bit_identity: '$base' is not a commit" >&2; exit 2; }
  git worktree add --detach "$work/base-src" "$base" >/dev/null
  meson setup "$work/base-build" "$work/base-src" -Dtests=disabled --buildtype=release >/dev/null
  ninja -C "$work/base-build" ringtrain >/dev/null
  base_bin=$work/base-build/ringtrain
fi

corpus=$(ls -d /usr/share/doc/linux-doc*/html/_sources/process 2>/dev/null | head -1)
[ -n "$corpus" ] || { echo "bit_identity: no kernel documentation installed; run bash tools/setup.sh" >&2; exit 2; }
"$new_bin" data prepare --input "$corpus" --out "$work/data" --vocab 512 --quiet >/dev/null
"$new_bin" keygen --out "$work/job.key" >/dev/null

# A tiny model, 20 steps, the same on both binaries. Each rank has its own port.
flags=(--data "$work/data" --depth 2 --head-dim 32 --seq-len 64 --window-pattern SL --threads 1 --device-batch 2
       --total-batch 0 --steps 20 --eval-every 0 --no-progress --seed 3 --key "$work/job.key")
run() {  # BIN OUT SYNC_FLAGS...
  local bin=$1 out=$2; shift 2
  local port=$((30000 + RANDOM % 20000))
  local peers=127.0.0.1:$port,127.0.0.1:$((port + 1))
  "$bin" train "${flags[@]}" "$@" --out "$out" --rank 1 --peers "$peers" >"$out.rank1.log" 2>&1 &
  local pid=$!
  "$bin" train "${flags[@]}" "$@" --out "$out" --rank 0 --peers "$peers" >"$out.rank0.log" 2>&1 || { wait $pid || true; return 1; }
  wait $pid
}
tensors_of() {  # a state.safetensors without its JSON header's scalars: the bytes after the header
  python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; sys.stdout.buffer.write(b[8+n:])' "$1" | sha256sum
}
status=0
for case in "grad:--sync grad" "avg-bf16:--sync avg --sync-every 4 --wire bf16" "diloco-int8:--sync diloco --sync-every 4 --wire int8" \
  "diloco-int8-overlap:--sync diloco --sync-every 4 --wire int8 --sync-overlap --overlap-steps 2" \
  "diloco-int4-stream:--sync diloco --sync-every 4 --wire int4 --sync-fragments 2 --sync-overlap --overlap-steps 1"; do
  name=${case%%:*}
  read -r -a sync <<<"${case#*:}"
  run "$base_bin" "$work/base-$name" "${sync[@]}" || { echo "bit_identity: $name: the base build's run failed (logs in $work)"; exit 1; }
  run "$new_bin" "$work/new-$name" "${sync[@]}" || { echo "bit_identity: $name: this tree's run failed"; exit 1; }
  same=1
  for rank in 0 1; do
    a=$work/base-$name/rank$rank/step_000020 b=$work/new-$name/rank$rank/step_000020
    cmp -s "$a/model.safetensors" "$b/model.safetensors" || same=0
    [ "$(tensors_of "$a/state.safetensors")" = "$(tensors_of "$b/state.safetensors")" ] || same=0
  done
  if [ $same = 1 ]; then
    echo "bit_identity: $name: identical ($(sha256sum <"$work/new-$name/rank0/step_000020/model.safetensors" | cut -c1-16), both ranks)"
  else
    echo "bit_identity: $name: DIFFERS between the base build and this tree"
    status=1
  fi
done
exit $status
