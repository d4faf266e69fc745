#!/usr/bin/env bash
# Does a second TCP stream per ring link help on a long, lossy path? Two namespace hosts
# joined by the slow-link path (tools/netns/hosts.sh: 100 Mbit/s, 40 ms round trip, 0.1% loss
# each way by default; the userspace link emulator where sch_netem is missing), with the job
# key, and `ringtrain bench allreduce` of one size with --streams 1, 2, 4 and 8, in
# interleaved rounds: per setting the median bus bandwidth and its share of the line.
#
#   sudo tools/bench/bench_streams.sh [--streams "1 2 4 8"] [--size 32M] [--wire f32] [--rounds 3]
#                                     [--rate 100mbit] [--netem "delay 10ms loss 0.05%"]
#
# One all-reduce of SIZE bytes of f32 (sent as --wire) per run, so that each number is what
# one parameter average of that size takes (the share of the line counts f32 bytes: with
# another --wire it is the rate of the values, not of the bytes). Nothing else should run
# on the machine meanwhile.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
streams="1 2 4 8" size=32M wire=f32 rounds=3 rate=100mbit netem="delay 10ms loss 0.05%" ranks=2
while [ $# -gt 0 ]; do
  case "$1" in
    --streams) streams=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --wire) wire=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --netem) netem=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_streams: unknown option $1; see --help" >&2; exit 2 ;;
  esac
done
source tools/netns/jobs.sh  # require_netns_bench, run_job, peers_ns, line_mbps
require_netns_bench bench_streams
prefix="rts$$x"
out=$(mktemp -d)
hosts() { tools/netns/hosts.sh "$@"; }
cleanup() { hosts down "$prefix" "$ranks" >/dev/null 2>&1; rm -rf "$out"; }
trap cleanup EXIT
"$bin" keygen --out "$out/job.key" >/dev/null || exit 1
hosts up "$prefix" "$ranks" --rate "$rate" --netem "$netem" --link-cpus 0,1 --firewall 29500-29510 || exit 1
rt() {  # rank; $S streams
  ip netns exec "${prefix}h$1" taskset -c "$1" "$bin" bench allreduce --rank "$1" --peers "$(peers_ns)" --sizes "$size" \
    --iters 1 --warmup 0 --wire "$wire" --streams "$S" --key "$out/job.key" --json
}
for i in $(seq 1 "$rounds"); do
  for S in $streams; do
    run_job "s$S-r$i" 900 rt
    echo "# round $i, --streams $S: $(cat "$out/s$S-r$i" | tr -d '\n')" >&2
  done
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); flags: $(grep -m1 -o 'avx512[a-z_0-9]*\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "link: $rate, netem '$netem' on both ends (hosts.sh); $ranks ranks, job key, one all-reduce of $size as $wire"
"$py" - "$out" "$(line_mbps "$rate")" "$rounds" $streams <<'PY'
import json, os, statistics, sys
out, line, rounds, streams = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
print("| --streams | seconds per all-reduce (rounds) | median | bus MB/s (median) | share of the line | vs 1 stream |")
print("|---:|---|---:|---:|---:|---:|")
base = None
for s in streams:
    times, bus = [], []
    for i in range(1, rounds + 1):
        recs = [json.loads(l) for l in open(os.path.join(out, f"s{s}-r{i}")) if l.startswith("{")]
        if recs:
            times.append(recs[0]["time_s"]); bus.append(recs[0]["busbw_MBps"])
    if not times:
        print(f"| {s} | failed | - | - | - | - |"); continue
    t, b = statistics.median(times), statistics.median(bus)
    base = base or t
    print(f"| {s} | {' / '.join('%.1f' % x for x in times)} | {t:.1f} | {b:.2f} | {100 * b / line:.0f}% | {base / t:.2f}x |")
PY
