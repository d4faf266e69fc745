#!/usr/bin/env bash
# Does parameter averaging cost quality, and does compressing it? Trains the same model with
# two local ranks (loopback): --sync grad, --sync avg --sync-every H, the same with
# --sync-overlap, --sync diloco --sync-every H with f32, bf16 and int8 on the wire, and avg
# overlapped with int8, on the same data and tokens, then prints the final val bpb of each
# against grad and against f32 diloco, the bytes rank 0 sent per sync, and plots the curves
# in one PNG.
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
run diloco-bf16 --sync diloco --sync-every "$every" --wire bf16
run diloco-int8 --sync diloco --sync-every "$every" --wire int8
run avg-overlap-int8 --sync avg --sync-every "$every" --sync-overlap --wire int8
"$py" tools/plot_metrics.py "$out/grad/metrics.jsonl" "$out/avg/metrics.jsonl" "$out/avg-overlap/metrics.jsonl" \
  "$out/diloco/metrics.jsonl" "$out/diloco-int8/metrics.jsonl" --label "grad" --label "avg H=$every" \
  --label "avg H=$every overlapped" --label "diloco H=$every" --label "diloco H=$every int8" --out "$out/sync-quality.png" \
  --title "d$depth, 2 ranks: gradient vs parameter averaging"
"$py" - "$out" "$every" <<'PY'
import json, sys
out, every = sys.argv[1], int(sys.argv[2])
def final(name):
    recs = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    evals = [r for r in recs if "val_bpb" in r]
    steps = [r for r in recs if "bytes_sent" in r]
    syncs = sum(1 for r in steps if r["step"] % every == 0)
    return evals[-1], sum(r["bytes_sent"] for r in steps) / syncs / 1e6 if syncs else float("nan")
grad, diloco = final("grad")[0]["val_bpb"], final("diloco")[0]["val_bpb"]
print("| sync | wire | final val bpb | vs grad | vs diloco f32 | MB sent per sync (rank 0) |\n|---|---|---|---|---|---|")
for name, wire in (("grad", "f32"), ("avg", "f32"), ("avg-overlap", "f32"), ("diloco", "f32"), ("diloco-bf16", "bf16"),
                   ("diloco-int8", "int8"), ("avg-overlap-int8", "int8")):
    ev, mb = final(name)
    bpb = ev["val_bpb"]
    per_sync = "-" if name == "grad" else f"{mb:.2f}"
    print(f"| {name.replace('-' + wire, '')} | {wire} | {bpb:.4f} (step {ev['step']}, {ev['tokens']:.0f} tokens) | "
          f"{100 * (bpb / grad - 1):+.2f}% | {100 * (bpb / diloco - 1):+.2f}% | {per_sync} |")
PY
