#!/usr/bin/env bash
# Uneven hosts: two ranks on 127.0.0.1, each pinned to its own core with one thread, rank 1
# held to a fraction of its core by a cgroup v2 CPU quota (cpu.max, default half). Trains
# the same global batch
#   - each rank alone (one process, its even half of the batch): its separate rate;
#   - both together with an even fixed split (--device-batch G/2 on each);
#   - both together with --device-batch auto (the batch split by measured speed);
# and prints tok/s of each against the sum of the separate rates.
#
#   sudo tools/bench/bench_uneven.sh [--depth 4] [--seq-len 512] [--total-batch 8192] [--steps 12]
#                              [--warmup 2] [--quota 50000] [--data DIR]
#
# --quota is the slow rank's cpu.max quota in microseconds per 100000 (50000: half a core).
# Needs root (cgroups), the cpu controller (cgroup v2, or v1's cpu hierarchy: cfs_quota_us),
# and build/ringtrain.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
depth=4 seq=512 total=8192 steps=12 warmup=2 quota=50000 data="" port=29540
while [ $# -gt 0 ]; do
  case "$1" in
    --depth) depth=$2; shift 2 ;;
    --seq-len) seq=$2; shift 2 ;;
    --total-batch) total=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --quota) quota=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    *) echo "bench_uneven: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench_uneven: needs root (a cgroup for the slow rank)" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_uneven: no $bin; build first (meson compile -C build)" >&2; exit 2; }
root=/sys/fs/cgroup
if grep -qw cpu "$root/cgroup.controllers" 2>/dev/null; then  # v2
  echo +cpu > "$root/cgroup.subtree_control" 2>/dev/null
  cg=$root/ringtrain-uneven-$$
  mkdir "$cg" && echo "$quota 100000" > "$cg/cpu.max"
elif [ -d "$root/cpu" ]; then  # v1
  cg=$root/cpu/ringtrain-uneven-$$
  mkdir "$cg" && echo 100000 > "$cg/cpu.cfs_period_us" && echo "$quota" > "$cg/cpu.cfs_quota_us"
else
  echo "bench_uneven: no cgroup cpu controller under $root" >&2; exit 2
fi || { echo "bench_uneven: cannot make a cgroup with a CPU quota ($cg)" >&2; rmdir "$cg" 2>/dev/null; exit 1; }
work=$(mktemp -d /tmp/rt-uneven.XXXXXX)
cleanup() { for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; sleep 0.2; rmdir "$cg" 2>/dev/null; [ "${RINGTRAIN_KEEP_BENCH:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
if [ -z "$data" ]; then
  bash tools/setup.sh --no-build || exit 1
  data=data/kdoc-8192
  [ -f "$data/meta.json" ] || "$bin" data prepare --out "$data" --vocab 8192 --threads 2 --quiet
fi
half=$(( total / seq / 2 ))
[ "$half" -ge 1 ] || { echo "bench_uneven: --total-batch must be at least 2 x --seq-len" >&2; exit 2; }
fast() { taskset -c 0 "$@"; }
slow() { ( echo "$BASHPID" > "$cg/cgroup.procs" && exec taskset -c 1 "$@" ); }
common=(train --data "$data" --depth "$depth" --seq-len "$seq" --steps 1000 --stop-after "$((steps + warmup))"
        --eval-every 0 --eval-tokens "$seq" --threads 1 --no-progress)
alone() {  # name, fast|slow
  "$2" "$bin" "${common[@]}" --device-batch "$half" --total-batch 0 --out "$work/$1" > "$work/$1.log" 2>&1
  "$py" tools/bench/metrics_rate.py "$work/$1/metrics.jsonl" "$warmup"
}
together() {  # name, then the --device-batch of rank 0 and of rank 1
  local peers="127.0.0.1:$port,127.0.0.1:$((port + 1))" out=$work/$1
  slow "$bin" "${common[@]}" --total-batch "$total" --device-batch "$3" --out "$out" --rank 1 --peers "$peers" > "$work/$1.r1.log" 2>&1 &
  fast "$bin" "${common[@]}" --total-batch "$total" --device-batch "$2" --out "$out" --rank 0 --peers "$peers" > "$work/$1.log" 2>&1
  wait
  "$py" tools/bench/metrics_rate.py "$out/metrics.jsonl" "$warmup"
}
echo "bench_uneven: d$depth, T $seq, $total tokens per step, rank 1 at cpu.max $quota/100000; work dir $work" >&2
r0=$(alone fast-alone fast)
r1=$(alone slow-alone slow)
even=$(together even "$half" "$half")
auto=$(together auto auto auto)
split=$(grep -o 'device-batch auto: .*' "$work/auto.log" | head -1)
"$py" - "${r0% *}" "${r1% *}" "${even% *}" "${auto% *}" "$split" <<'PY'
import sys
def num(s):
    try: return float(s)
    except ValueError: return float("nan")
r0, r1, even, auto = (num(a) for a in sys.argv[1:5])
total = r0 + r1
print("| run | tok/s | vs sum of separate rates |\n|---|---:|---:|")
print("| rank 0 alone (full core) | %.1f | - |" % r0)
print("| rank 1 alone (cpu.max quota) | %.1f | - |" % r1)
print("| sum of the separate rates | %.1f | 1.00 |" % total)
print("| together, even fixed split | %.1f | %.2f |" % (even, even / total))
print("| together, --device-batch auto | %.1f | %.2f |" % (auto, auto / total))
print(sys.argv[5])
PY
