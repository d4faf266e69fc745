#!/usr/bin/env bash
# Small-message latency: a barrier and a 4 KiB all-reduce, ringtrain's ring against
# torch.distributed's Gloo, at 2, 4 and 8 network-namespace hosts on a bridge (every link
# shaped to --rate, firewall off so that Gloo can connect), and one table.
#
#   sudo tools/bench/bench_latency.sh [--ranks 2,4,8] [--rate 1gbit] [--iters 200] [--sizes 0,4K]
#
# Size 0 is the barrier (ringtrain's is an all-reduce of nothing; Gloo's dist.barrier()).
# Times are medians over --iters runs, each started right after a barrier, in microseconds.
# Needs root (namespaces), build/ringtrain (or RINGTRAIN_BIN) and /usr/bin/python3 with torch.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
rank_list=2,4,8 rate=1gbit iters=200 sizes=0,4K
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) rank_list=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "bench_latency: unknown option $1" >&2; exit 2 ;;
  esac
done
source tools/netns/jobs.sh  # require_netns_bench, run_job, peers_ns
require_netns_bench bench_latency
prefix="rtl$$x" out=$(mktemp -d) ranks=0
cleanup() { [ "$ranks" -gt 0 ] && tools/netns/hosts.sh down "$prefix" "$ranks" >/dev/null 2>&1; rm -rf "$out"; }
trap cleanup EXIT

rt_ns() {
  ip netns exec "${prefix}h$1" "$bin" bench allreduce --rank "$1" --peers "$(peers_ns)" --sizes "$sizes" \
    --iters "$iters" --warmup 5 --json --insecure
}
gloo_ns() {
  ip netns exec "${prefix}h$1" "$py" tools/bench/bench_allreduce_gloo.py --rank "$1" --world "$ranks" \
    --master "$(tools/netns/hosts.sh addr 0):29510" --ifname eth0 --sizes "$sizes" --iters "$iters" --warmup 5 --json
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $rate links; sizes $sizes; $iters iterations" >&2
for n in ${rank_list//,/ }; do
  ranks=$n
  echo "# $n hosts ..." >&2
  tools/netns/hosts.sh up "$prefix" "$n" --rate "$rate" || exit 1
  run_job "rt_$n" 600 rt_ns
  run_job "gloo_$n" 600 gloo_ns
  tools/netns/hosts.sh down "$prefix" "$n"
  ranks=0
done

"$py" - "$out" "$rank_list" <<'PY'
import json, os, sys
out, rank_list = sys.argv[1], [int(n) for n in sys.argv[2].split(",")]
def results(name):
    path = os.path.join(out, name)
    rows = {json.loads(l)["bytes"]: json.loads(l) for l in open(path) if l.startswith("{")} if os.path.exists(path) else {}
    if not rows:
        err = open(path + ".0.err").read().strip().splitlines() if os.path.exists(path + ".0.err") else []
        return None, (err[-1] if err else open(path + ".status").read().strip())
    return rows, ""
sizes = None
print("| ranks | impl | barrier us | 4 KiB all-reduce us |")
print("|---:|---|---:|---:|")
for n in rank_list:
    for impl, name in (("ringtrain", "rt_%d" % n), ("gloo", "gloo_%d" % n)):
        rows, why = results(name)
        if rows is None:
            print("| %d | %s | failed: %s | - |" % (n, impl, why))
            continue
        cell = lambda b: "%.0f" % (rows[b]["time_s"] * 1e6) if b in rows else "-"
        print("| %d | %s | %s | %s |" % (n, impl, cell(0), cell(4096)))
PY
