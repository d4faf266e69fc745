#!/usr/bin/env bash
# Does parameter averaging cost quality? Trains the same model four times with two local
# ranks (loopback): --sync grad, --sync avg --sync-every H, the same with --sync-overlap,
# and --sync diloco --sync-every H, on the same data and tokens, then prints the final val
# bpb of each against grad and plots the curves in one PNG.
#
#   tools/bench_sync_quality.sh [--depth 4] [--steps 400] [--every 8] [--out runs/sync-quality] [--data DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
depth=4 steps=400 every=8 out=runs/sync-quality data="" port=29520
while [ $# -gt 0 ]; do
  case "$1" in
    --depth) depth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    *) echo "bench_sync_quality: unknown option $1" >&2; exit 2 ;;
  esac
done
# Install what is missing (the corpus); the binary is built separately.
bash tools/setup.sh --no-build || exit 1
if [ -z "$data" ]; then
  data=data/kdoc-8192
  [ -f "$data/meta.json" ] || "$bin" data prepare --input /usr/share/doc/linux-doc-6.1/html/_sources --out "$data" --vocab 8192 --threads 2 --quiet
fi
# Evaluate at sync steps (a multiple of H), where every mode's replicas agree.
eval_every=$(( (steps / 8 + every - 1) / every * every ))
common=(train --data "$data" --depth "$depth" --seq-len 256 --device-batch 8 --steps "$steps" --eval-every "$eval_every"
        --eval-tokens 32768 --threads 1 --no-progress --peers "127.0.0.1:$port,127.0.0.1:$((port + 1))")
run() {
  local name=$1; shift
  rm -rf "${out:?}/$name"
  "$bin" "${common[@]}" --out "$out/$name" --rank 1 "$@" > "$out/$name.r1.log" 2>&1 &
  "$bin" "${common[@]}" --out "$out/$name" --rank 0 "$@" 2> "$out/$name.log"
  wait
}
mkdir -p "$out"
run grad --sync grad
run avg --sync avg --sync-every "$every"
run avg-overlap --sync avg --sync-every "$every" --sync-overlap
run diloco --sync diloco --sync-every "$every"
"$py" tools/plot_metrics.py "$out/grad/metrics.jsonl" "$out/avg/metrics.jsonl" "$out/avg-overlap/metrics.jsonl" \
  "$out/diloco/metrics.jsonl" --label "grad" --label "avg H=$every" --label "avg H=$every overlapped" \
  --label "diloco H=$every" --out "$out/sync-quality.png" \
  --title "d$depth, 2 ranks: gradient vs parameter averaging"
"$py" - "$out" <<'PY'
import json, sys
base = None
print("| sync | final val bpb | vs grad |\n|---|---|---|")
for name in ("grad", "avg", "avg-overlap", "diloco"):
    recs = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}/metrics.jsonl") if "val_bpb" in l]
    bpb = recs[-1]["val_bpb"]
    base = base or bpb
    print(f"| {name} | {bpb:.4f} (step {recs[-1]['step']}, {recs[-1]['tokens']:.0f} tokens) | {100 * (bpb / base - 1):+.2f}% |")
PY
