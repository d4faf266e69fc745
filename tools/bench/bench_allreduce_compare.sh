#!/usr/bin/env bash
# ringtrain's ring all-reduce against torch.distributed's Gloo, side by side, and one table.
#
#   sudo tools/bench/bench_allreduce_compare.sh [--sizes 1M,16M,64M,256M] [--rate 1gbit] [--ranks 2]
#                                         [--no-loopback] [--gloo-timeout 60] [--key FILE|new]
#                                         [--chunk-bytes 256K]
#
# Settings, each with both implementations:
#   - loopback (127.0.0.1, no limit);
#   - N network-namespace hosts on a bridge, every link shaped to --rate (tools/netns/hosts.sh);
#   - the same hosts with the user's firewall: policy drop, only TCP 29500-29510 open.
#     Gloo opens ephemeral ports there and hangs; it is killed after --gloo-timeout seconds
#     and reported as "hangs (blocked by firewall)".
# ringtrain runs with f32 and with bf16 on the wire, in plaintext (--insecure between the
# namespace hosts); with --key also encrypted (CurveZMQ, f32) in every setting, right after
# the plaintext run of the same setting ("new": a fresh key in the scratch directory).
# --chunk-bytes sets ringtrain's pipeline chunk (the default is the trainer's), for tuning.
# Needs root (namespaces), build/ringtrain (or RINGTRAIN_BIN) and /usr/bin/python3 with torch.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
sizes=1M,16M,64M,256M rate=1gbit ranks=2 loopback=1 gloo_timeout=60 key="" chunk=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --no-loopback) loopback=0; shift ;;
    --gloo-timeout) gloo_timeout=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --chunk-bytes) chunk=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source tools/netns/jobs.sh  # require_netns_bench, run_job, peers_ns, line_mbps
require_netns_bench bench_allreduce_compare

prefix="rtb$$x"
out=$(mktemp -d)
hosts() { tools/netns/hosts.sh "$@"; }
cleanup() { hosts down "$prefix" "$ranks" >/dev/null 2>&1; rm -rf "$out"; }
trap cleanup EXIT
if [ "$key" = new ]; then
  key=$out/job.key
  "$bin" keygen --out "$key" >/dev/null || exit 1
fi

peers_lo() { local s="" r; for r in $(seq 0 $((ranks - 1))); do s+="${s:+,}127.0.0.1:$((29600 + r))"; done; echo "$s"; }

rt_lo_f32() { "$bin" bench allreduce ${chunk:+--chunk-bytes "$chunk"} --rank "$1" --peers "$(peers_lo)" --sizes "$sizes" --json; }
rt_lo_bf16() { "$bin" bench allreduce ${chunk:+--chunk-bytes "$chunk"} --rank "$1" --peers "$(peers_lo)" --sizes "$sizes" --json --wire bf16; }
gloo_lo() { "$py" tools/bench/bench_allreduce_gloo.py --rank "$1" --world "$ranks" --master 127.0.0.1:29650 --sizes "$sizes" --json; }
rt_lo_curve() { "$bin" bench allreduce ${chunk:+--chunk-bytes "$chunk"} --rank "$1" --peers "$(peers_lo)" --sizes "$sizes" --json --key "$key"; }
rt_ns_f32() { ip netns exec "${prefix}h$1" "$bin" bench allreduce ${chunk:+--chunk-bytes "$chunk"} --rank "$1" --peers "$(peers_ns)" --sizes "$sizes" --json --insecure; }
rt_ns_bf16() { ip netns exec "${prefix}h$1" "$bin" bench allreduce ${chunk:+--chunk-bytes "$chunk"} --rank "$1" --peers "$(peers_ns)" --sizes "$sizes" --json --wire bf16 --insecure; }
rt_ns_curve() { ip netns exec "${prefix}h$1" "$bin" bench allreduce ${chunk:+--chunk-bytes "$chunk"} --rank "$1" --peers "$(peers_ns)" --sizes "$sizes" --json --key "$key"; }
gloo_ns() {
  ip netns exec "${prefix}h$1" "$py" tools/bench/bench_allreduce_gloo.py --rank "$1" --world "$ranks" \
    --master "$(hosts addr 0):29510" --ifname eth0 --sizes "$sizes" --json --timeout "$gloo_timeout"
}

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); sizes $sizes; $ranks ranks" >&2
if [ $loopback = 1 ]; then
  echo "# loopback ..." >&2
  run_job lo_rt_f32 900 rt_lo_f32
  [ -n "$key" ] && run_job lo_rt_curve 900 rt_lo_curve
  run_job lo_rt_bf16 900 rt_lo_bf16
  run_job lo_gloo 900 gloo_lo
fi
echo "# namespaces, $rate links ..." >&2
hosts up "$prefix" "$ranks" --rate "$rate"
run_job ns_rt_f32 900 rt_ns_f32
[ -n "$key" ] && run_job ns_rt_curve 900 rt_ns_curve
run_job ns_rt_bf16 900 rt_ns_bf16
run_job ns_gloo 900 gloo_ns
echo "# namespaces, $rate links, firewall: only TCP 29500-29510 open ..." >&2
hosts firewall "$prefix" "$ranks" 29500-29510
run_job fw_rt_f32 900 rt_ns_f32
[ -n "$key" ] && run_job fw_rt_curve 900 rt_ns_curve
run_job fw_gloo "$gloo_timeout" gloo_ns

line_MBps=$(line_mbps "$rate") || exit 2
"$py" - "$out" "$line_MBps" "$loopback" "${key:+1}" <<'PY'
import json, os, sys
out, line, loopback, curve = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
ns = "netns %.0f MB/s" % line
rows = [("loopback", "none", "lo_rt_f32", "ringtrain", "f32"), ("loopback", "none", "lo_rt_curve", "ringtrain CURVE", "f32"),
        ("loopback", "none", "lo_rt_bf16", "ringtrain", "bf16"), ("loopback", "none", "lo_gloo", "gloo", "f32")] if loopback else []
rows += [(ns, "none", "ns_rt_f32", "ringtrain", "f32"), (ns, "none", "ns_rt_curve", "ringtrain CURVE", "f32"),
         (ns, "none", "ns_rt_bf16", "ringtrain", "bf16"), (ns, "none", "ns_gloo", "gloo", "f32"),
         (ns, "29500-29510", "fw_rt_f32", "ringtrain", "f32"), (ns, "29500-29510", "fw_rt_curve", "ringtrain CURVE", "f32"),
         (ns, "29500-29510", "fw_gloo", "gloo", "f32")]
rows = [r for r in rows if curve or "CURVE" not in r[3]]
print("| link | firewall | impl | wire | bytes | time ms | algbw MB/s | busbw MB/s | busbw % of line |")
print("|---|---|---|---|---:|---:|---:|---:|---:|")
for link, fw, name, impl, wire in rows:
    status = open(os.path.join(out, name + ".status")).read().strip()
    results = [json.loads(l) for l in open(os.path.join(out, name)) if l.startswith("{")]
    if not results:
        err = open(os.path.join(out, name + ".0.err")).read().strip().splitlines()
        if status == "timeout" and fw != "none":
            why = "hangs (blocked by firewall)"
        else:
            why = "failed: " + (err[-1] if err else status)
        print("| %s | %s | %s | %s | - | - | - | - | %s |" % (link, fw, impl, wire, why))
        continue
    for r in results:
        pct = "%.0f%%" % (100 * r["busbw_MBps"] / line) if link.startswith("netns") else "-"
        print("| %s | %s | %s | %s | %d | %.2f | %.1f | %.1f | %s |" % (link, fw, impl, wire, r["bytes"], r["time_s"] * 1e3,
                                                                     r["algbw_MBps"], r["busbw_MBps"], pct))
PY
