#!/usr/bin/env bash
# Side-by-side forward+backward benchmark: `ringtrain bench model` against the PyTorch
# reference (tools/reference/nanochat_ref.py bench) on the same config, interleaved
# A B A B ... so that both see the same machine load. Prints one table of medians.
#
# usage: tools/bench_model_compare.sh [--rounds 3] [--depth 8] [--device-batch 2] [--seq-len 1024]
#                                     [--threads 2] [--steps 5] [--warmup 2] [--bin build/ringtrain]
# example: tools/bench_model_compare.sh --rounds 3 --steps 5 --warmup 2
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 depth=8 batch=2 seqlen=1024 threads=2 steps=5 warmup=2 bin=build/ringtrain
python=/usr/bin/python3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --device-batch) batch=$2; shift 2 ;;
    --seq-len) seqlen=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_model_compare.sh: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
# Install what is missing (PyTorch for the reference); the binary is built separately.
bash tools/setup.sh --no-build reference || exit 1
[[ -x "$bin" ]] || { echo "bench_model_compare.sh: $bin not found; build it (meson compile -C build) or pass --bin" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--depth "$depth" --device-batch "$batch" --seq-len "$seqlen" --threads "$threads" --steps "$steps" --warmup "$warmup" --json)
for ((r = 0; r < rounds; r++)); do
  echo "round $((r + 1))/$rounds: ringtrain" >&2
  OMP_NUM_THREADS=$threads "$bin" bench model "${common[@]}" >>"$out/ringtrain.jsonl"
  echo "round $((r + 1))/$rounds: pytorch" >&2
  OMP_NUM_THREADS=$threads "$python" tools/reference/nanochat_ref.py bench "${common[@]}" >>"$out/pytorch.jsonl"
done

"$python" - "$out" "$depth" "$batch" "$seqlen" "$threads" <<'PY'
import json, statistics, sys
out, depth, batch, seqlen, threads = sys.argv[1:]
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    return [r for r in rows if "summary" not in r]
rt, pt = load("ringtrain"), load("pytorch")
med = lambda rows, k: statistics.median(r[k] for r in rows)
rt_tps, pt_tps = med(rt, "tok_per_s"), med(pt, "tok_per_s")
peak = max(r["peak_gflops"] for r in rt)
flops = rt[0]["flops_per_token"]
print(f"d{depth}, batch {batch} x {seqlen}, {threads} threads; medians over {len(rt)} / {len(pt)} measured steps")
print(f"{'impl':<10} {'tok/s':>9} {'step s':>8} {'MFU':>6} {'peak RSS MB':>12}")
for name, rows, tps in (("ringtrain", rt, rt_tps), ("pytorch", pt, pt_tps)):
    mfu = tps * flops / (peak * 1e9)
    print(f"{name:<10} {tps:9.1f} {med(rows, 'step_s'):8.3f} {mfu:6.3f} {max(r['peak_rss_mb'] for r in rows):12.0f}")
print(f"ratio ringtrain/pytorch: {rt_tps / pt_tps:.2f}x   (oneDNN f32 matmul peak in the same run: {peak:.1f} GFLOP/s)")
PY
