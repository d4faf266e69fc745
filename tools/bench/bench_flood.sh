#!/usr/bin/env bash
# The training rate with and without strangers flooding a rank's port, side by side:
#
#   tools/bench/bench_flood.sh [--rounds 3] [--depth 4] [--steps 30] [--warmup 5] [--data DIR]
#                        [--hold 5000] [--rate 200]
#
# A keyed 2-rank job on loopback, each rank started at systemd's default soft open-file
# limit (1024, prlimit; the hard limit stays this shell's) with one thread. Rounds interleave: a run without the
# flood, then one during which tools/bench/conn_flood.py holds --hold connections to rank 0's
# port and opens --rate more a second (none of them holds the key). Printed: the CPU model
# and flags, each run's tok/s after --warmup steps (tools/bench/metrics_rate.py), whether every
# checkpoint was saved, the medians and their ratio. On a 2-core machine the flooder runs
# on the same cores as the ranks, so the ratio includes the CPU it takes; a flooder on
# another host costs the ranks only what their kernel and libzmq spend on its connections.
# Nothing else should run on the machine meanwhile.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
rounds=3 depth=4 steps=30 warmup=5 data="" hold=5000 rate=200
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --hold) hold=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) echo "bench_flood: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$steps" -gt "$warmup" ] || { echo "bench_flood: --steps must exceed --warmup" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_flood: no $bin; build first (tools/setup.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/rt-flood.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
if [ -z "$data" ]; then
  data=data/kdoc-8192
  [ -f "$data/meta.json" ] || "$bin" data prepare --out "$data" --vocab 8192 --threads 2 --quiet || exit 1
fi
"$bin" keygen --out "$work/job.key" >/dev/null || exit 1
port=29620
peers=127.0.0.1:$port,127.0.0.1:$((port + 1))
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "open files: soft 1024 at start, hard $(ulimit -Hn)"
echo "cores: $(nproc); d$depth, 2 ranks x 1 thread, $steps steps, tok/s after step $warmup; flood: --hold $hold --rate $rate"

run() {  # run TAG FLOOD(0|1): prints "TOK_PER_S SAVED"
  local out=$work/$1 pids=() flood=""
  for r in 0 1; do
    prlimit --nofile=1024: -- "$bin" train --data "$data" --out "$out" --depth "$depth" --seq-len 256 \
      --device-batch 2 --total-batch 0 --steps "$steps" --save-every 5 --eval-every 0 --eval-tokens 4096 --threads 1 --no-progress \
      --rank $r --peers "$peers" --key "$work/job.key" >"$out.r$r.log" 2>&1 &
    pids+=($!)
  done
  if [ "$2" = 1 ]; then
    for _ in $(seq 600); do grep -q '"step"' "$out/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
    "$py" tools/bench/conn_flood.py "127.0.0.1:$port" --hold "$hold" --rate "$rate" --seconds 36000 >"$out.flood.log" 2>&1 &
    flood=$!
  fi
  local ok=1
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  if [ -n "$flood" ]; then kill "$flood" 2>/dev/null; wait "$flood" 2>/dev/null; cat "$out.flood.log" >&2; fi
  local want=$(((steps - 1) / 5 + 1)) saved0 saved1  # every 5th step and the final one
  saved0=$(ls -d "$out"/rank0/step_* 2>/dev/null | wc -l)
  saved1=$(ls -d "$out"/rank1/step_* 2>/dev/null | wc -l)
  [ "$ok" = 1 ] && [ "$saved0" = "$want" ] && [ "$saved1" = "$want" ] || ok=0
  echo "$("$py" tools/bench/metrics_rate.py "$out/metrics.jsonl" "$warmup" | cut -d' ' -f1) $ok"
  rm -rf "$out"
}

plain=() flooded=()
printf '%-6s %-12s %-12s\n' round "tok/s" "tok/s flood"
for i in $(seq "$rounds"); do
  read -r a ok_a < <(run "plain$i" 0)
  read -r b ok_b < <(run "flood$i" 1)
  [ "$ok_a" = 1 ] && [ "$ok_b" = 1 ] || { echo "bench_flood: round $i: a run failed or missed a checkpoint (logs in $work)" >&2; trap - EXIT; exit 1; }
  plain+=("$a") flooded+=("$b")
  printf '%-6s %-12s %-12s\n' "$i" "$a" "$b"
done
"$py" - "${plain[*]}" "${flooded[*]}" <<'EOF'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"median   {ma:<12.0f} {mb:<12.0f} ratio flood/plain {mb / ma:.3f} (every checkpoint saved in every run)")
EOF
