#!/usr/bin/env bash
# Does parameter averaging cost quality, and does compressing it? Trains the same model with
# two local ranks (loopback): --sync grad, --sync avg --sync-every H, the same with
# --sync-overlap, --sync diloco --sync-every H with f32, bf16, int8 and int4 on the wire, and
# avg overlapped with int8 and int4, and streaming diloco (--sync-fragments F, overlapped by
# H/F steps) with int8 and int4, on the same data and tokens, then prints the final val bpb
# of each against grad and against f32 diloco, the bytes rank 0 sent per H steps and in its
# busiest step, and plots the curves in one PNG.
#
#   tools/bench/bench_sync_quality.sh [--depth 4] [--steps 400] [--every 8] [--fragments 4] [--stream-overlap 1] [--out runs/sync-quality] [--data DIR]
#                               [--seeds "42"] [--runs "grad avg avg-overlap diloco diloco-bf16 diloco-int8 diloco-int4 avg-overlap-int8 avg-overlap-int4 diloco-stream-int8 diloco-stream-int4"]
#                               [--reuse]
#
# --seeds repeats every run once per seed (initialisation and data order) and the table
# gives the mean over the seeds, with each seed's value: diloco at small H swings by a few
# percent from one seed to the next, more than int8 moves it, so one seed cannot tell
# them apart. --runs picks some of the runs (the comparisons need grad and diloco).
# --reuse keeps the runs already in --out that reached the last step (e.g. to add seeds).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/fail_loudly.sh"
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
depth=4 steps=400 every=8 fragments=4 stream_overlap=1 out=runs/sync-quality data="" port=29520 seeds=42
runs="grad avg avg-overlap diloco diloco-bf16 diloco-int8 diloco-int4 avg-overlap-int8 avg-overlap-int4 diloco-stream-int8 diloco-stream-int4" reuse=0
while [ $# -gt 0 ]; do
  case "$1" in
    --depth) depth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --fragments) fragments=$2; shift 2 ;;
    --stream-overlap) stream_overlap=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --reuse) reuse=1; shift ;;
    *) echo "bench_sync_quality: unknown option $1" >&2; exit 2 ;;
  esac
done
# Install what is missing (the corpus); the binary is built separately.
bash tools/setup.sh --no-build || exit 1
if [ -z "$data" ]; then
  data=data/kdoc-8192
  [ -f "$data/meta.json" ] || "$bin" data prepare --out "$data" --vocab 8192 --threads 2 --quiet
fi
# Evaluate at sync steps (a multiple of H), where every mode's replicas agree.
eval_every=$(( (steps / 8 + every - 1) / every * every ))
common=(train --data "$data" --depth "$depth" --seq-len 256 --device-batch 8 --total-batch 0 --steps "$steps" --eval-every "$eval_every"
        --eval-tokens 32768 --threads 1 --no-progress --peers "127.0.0.1:$port,127.0.0.1:$((port + 1))")
# Seed 42's run (the default seed) goes to $out/NAME, another seed's to $out/NAME.seedS,
# wherever it stands in --seeds: a later call with more seeds finds each run again.
seed_dir() { if [ "$2" = 42 ]; then echo "$out/$1"; else echo "$out/$1.seed$2"; fi; }
run() {
  local name=$1; shift
  case " $runs " in *" $name "*) ;; *) return 0 ;; esac
  local seed dir
  for seed in $seeds; do
    dir=$(seed_dir "$name" "$seed")
    if [ "$reuse" = 1 ] && grep -q "\"step\":$steps,.*val_bpb\|val_bpb.*\"step\":$steps," "$dir/metrics.jsonl" 2>/dev/null; then continue; fi
    rm -rf "${dir:?}"
    "$bin" "${common[@]}" --seed "$seed" --out "$dir" --rank 1 "$@" > "$dir.r1.log" 2>&1 &
    "$bin" "${common[@]}" --seed "$seed" --out "$dir" --rank 0 "$@" 2> "$dir.log"
    wait
  done
}
mkdir -p "$out"
run grad --sync grad
run avg --sync avg --sync-every "$every"
run avg-overlap --sync avg --sync-every "$every" --sync-overlap
run diloco --sync diloco --sync-every "$every"
run diloco-bf16 --sync diloco --sync-every "$every" --wire bf16
run diloco-int8 --sync diloco --sync-every "$every" --wire int8
run diloco-int4 --sync diloco --sync-every "$every" --wire int4
run avg-overlap-int8 --sync avg --sync-every "$every" --sync-overlap --wire int8
run avg-overlap-int4 --sync avg --sync-every "$every" --sync-overlap --wire int4
# --overlap-steps of streaming averages: 1 by default (see docs/benchmarks.md: with 3 or more
# fragments at H=8, 2 steps cost quality where 1 does not).
stream=(--sync diloco --sync-every "$every" --sync-fragments "$fragments" --sync-overlap --overlap-steps "$stream_overlap")
run diloco-stream-int8 "${stream[@]}" --wire int8
run diloco-stream-int4 "${stream[@]}" --wire int4
plots=() labels=() first_seed=${seeds%% *}
for name in grad avg avg-overlap diloco diloco-int8 diloco-int4; do
  dir=$(seed_dir "$name" "$first_seed")
  [ -f "$dir/metrics.jsonl" ] && case " $runs " in *" $name "*) plots+=("$dir/metrics.jsonl") labels+=(--label "$name H=$every") ;; esac
done
[ ${#plots[@]} = 0 ] || "$py" tools/plot/plot_metrics.py "${plots[@]}" "${labels[@]}" --out "$out/sync-quality.png" \
  --title "d$depth, 2 ranks: gradient vs parameter averaging"
FRAGMENTS=$fragments STREAM_OVERLAP=$stream_overlap "$py" - "$out" "$every" "$seeds" "$runs" <<'PY'
import json, os, statistics, sys
out, every, seeds, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def final(name, seed):
    d = f"{out}/{name}" if seed == "42" else f"{out}/{name}.seed{seed}"  # as the script's seed_dir
    recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
    evals = [r for r in recs if "val_bpb" in r]
    steps = [r for r in recs if "bytes_sent" in r]
    # Whole periods of H steps before the last step (which, streaming, averages every
    # fragment at once), and the busiest step among them.
    periods = (steps[-1]["step"] - 1) // every if steps else 0
    before = [r for r in steps if r["step"] <= periods * every]
    busiest = max((r["bytes_sent"] for r in before), default=0) / 1e6
    return evals[-1], (sum(r["bytes_sent"] for r in before) / periods / 1e6 if periods else float("nan"), busiest)
def results(name):
    return [final(name, s) for s in seeds]
def mean_bpb(name):
    return statistics.mean(ev["val_bpb"] for ev, _ in results(name)) if name in runs else None
grad, diloco = mean_bpb("grad"), mean_bpb("diloco")
pct = lambda a, b: f"{100 * (a / b - 1):+.2f}%" if b else "-"
print(f"seeds: {' '.join(seeds)} (val bpb: the mean over them, then each seed's)")
# Seeds swing a run by several percent (the outer steps of small H make loss spikes whose
# course differs from one run to the next), so each run is also set against f32 diloco of
# its own seed: the mean of those per-seed ratios, +- its standard error.
def paired(name):
    if "diloco" not in runs or len(seeds) < 2:
        return "-"
    r = [a["val_bpb"] / b["val_bpb"] - 1 for (a, _), (b, _) in zip(results(name), results("diloco"))]
    return f"{100 * statistics.mean(r):+.2f}% +- {100 * statistics.stdev(r) / len(r) ** 0.5:.2f}%"
print("| sync | wire | final val bpb | per seed | vs grad | vs diloco f32 | per seed vs diloco f32 (mean +- s.e.) | MB sent per H steps (rank 0) | MB in its busiest step |\n|---|---|---|---|---|---|---|---|---|")
for name, wire in (("grad", "f32"), ("avg", "f32"), ("avg-overlap", "f32"), ("diloco", "f32"), ("diloco-bf16", "bf16"),
                   ("diloco-int8", "int8"), ("diloco-int4", "int4"), ("avg-overlap-int8", "int8"),
                   ("avg-overlap-int4", "int4"), ("diloco-stream-int8", "int8"), ("diloco-stream-int4", "int4")):
    if name not in runs:
        continue
    res = results(name)
    ev, (mb, busiest) = res[0]
    bpb = statistics.mean(e["val_bpb"] for e, _ in res)
    per_seed = " / ".join(f"{e['val_bpb']:.4f}" for e, _ in res)
    per_sync = "-" if name == "grad" else f"{mb:.2f}"
    label = name.replace('-' + wire, '').replace("diloco-stream", f"diloco, {os.environ.get('FRAGMENTS', '?')} fragments, overlapped {os.environ.get('STREAM_OVERLAP', '?')} step(s)")
    print(f"| {label} | {wire} | {bpb:.4f} (step {ev['step']}, {ev['tokens']:.0f} tokens) | {per_seed} | "
          f"{pct(bpb, grad)} | {pct(bpb, diloco)} | {paired(name)} | {per_sync} | {busiest:.2f} |")
PY
