#!/usr/bin/env bash
# Side-by-side forward+backward benchmark: `ringtrain bench model` against the PyTorch
# reference (tools/reference/nanochat_ref.py bench), or with --against against another
# ringtrain binary, on the same config, interleaved A B A B ... so that both see the same
# machine load. Prints one table of medians.
#
# usage: tools/bench_model_compare.sh [--rounds 3] [--depth 8] [--device-batch 2] [--seq-len 1024]
#          [--threads 2] [--steps 5] [--warmup 2] [--bin build/ringtrain] [--against OTHER_RINGTRAIN]
#          [--chroot RELEASE]
# example: tools/bench_model_compare.sh --rounds 3 --steps 5 --warmup 2
#   Debian 12 against Debian 13 on the same machine (as root): each round also runs the build in
#          build-trixie/ and the PyTorch reference of the Debian 13 chroot (tools/ci/chroot.sh):
#          sudo tools/bench_model_compare.sh --rounds 3 --steps 5 --warmup 2 --chroot trixie
#   native against portable (the .deb's build): bash tools/package-deb.sh, then
#          tools/bench_model_compare.sh --rounds 3 --steps 5 --warmup 2 --against build-deb/ringtrain
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/fail_loudly.sh"
cd "$(dirname "$0")/.."

rounds=3 depth=8 batch=2 seqlen=1024 threads=2 steps=5 warmup=2 bin=build/ringtrain against="" chroot=""
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
    --against) against=$2; shift 2 ;;
    --chroot) chroot=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_model_compare.sh: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
if [[ -z "$against" ]]; then
  # Install what is missing (PyTorch for the reference); the binary is built separately.
  bash tools/setup.sh --no-build reference || exit 1
  a_name=ringtrain b_name=pytorch
else
  [[ -x "$against" ]] || { echo "bench_model_compare.sh: --against $against is not an executable" >&2; exit 2; }
  a_name=$bin b_name=$against
fi
[[ -x "$bin" ]] || { echo "bench_model_compare.sh: $bin not found; build it (meson compile -C build) or pass --bin" >&2; exit 2; }
if [[ -n "$chroot" ]]; then
  [[ -z "$against" ]] || { echo "bench_model_compare.sh: --chroot compares with the reference; drop --against" >&2; exit 2; }
  [[ -x "build-$chroot/ringtrain" ]] || { echo "bench_model_compare.sh: build-$chroot/ringtrain not found; build it with: sudo bash tools/ci/chroot.sh --release $chroot -- env RINGTRAIN_BUILD_DIR=build-$chroot bash tools/setup.sh reference" >&2; exit 2; }
fi
in_chroot() { bash tools/ci/chroot.sh --release "$chroot" --bind "$out" -- env OMP_NUM_THREADS="$threads" "$@"; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
versions() {  # "oneDNN X, PyTorch Y, Debian Z" of the host, or inside the chroot with in_chroot
  "$@" /usr/bin/python3 -c 'import re, torch
v = open("/usr/include/oneapi/dnnl/dnnl_version.h").read()
dnnl = ".".join(re.search(r"DNNL_VERSION_%s (\d+)" % k, v).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
rel = open("/etc/debian_version").read().strip()
print(f"Debian {rel}, oneDNN {dnnl}, PyTorch {torch.__version__}")'
}
common=(--depth "$depth" --device-batch "$batch" --seq-len "$seqlen" --threads "$threads" --steps "$steps" --warmup "$warmup" --json)
for ((r = 0; r < rounds; r++)); do
  echo "round $((r + 1))/$rounds: $a_name" >&2
  OMP_NUM_THREADS=$threads "$bin" bench model "${common[@]}" >>"$out/a.jsonl"
  echo "round $((r + 1))/$rounds: $b_name" >&2
  if [[ -z "$against" ]]; then
    OMP_NUM_THREADS=$threads "$python" tools/reference/nanochat_ref.py bench "${common[@]}" >>"$out/b.jsonl"
  else
    OMP_NUM_THREADS=$threads "$against" bench model "${common[@]}" >>"$out/b.jsonl"
  fi
  if [[ -n "$chroot" ]]; then
    echo "round $((r + 1))/$rounds: ringtrain of $chroot" >&2
    in_chroot "build-$chroot/ringtrain" bench model "${common[@]}" >>"$out/c.jsonl"
    echo "round $((r + 1))/$rounds: pytorch of $chroot" >&2
    in_chroot /usr/bin/python3 tools/reference/nanochat_ref.py bench "${common[@]}" >>"$out/d.jsonl"
  fi
done
# What ran: the CPU (model and the flags that decide oneDNN's kernels) and the library versions.
echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(nproc) cpus;" \
  "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "host:   $(versions)"
[[ -z "$chroot" ]] || echo "chroot: $(versions in_chroot)"

"$python" - "$out" "$depth" "$batch" "$seqlen" "$threads" "$a_name" "$b_name" "$chroot" <<'PY'
import json, statistics, sys
out, depth, batch, seqlen, threads, a_name, b_name, chroot = sys.argv[1:]
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    return [r for r in rows if "summary" not in r]
rt, pt = load("a"), load("b")
if chroot:
    # Four rows: each release's ringtrain and PyTorch, every ratio within this run.
    rows = [(f"ringtrain (host)", rt), ("pytorch (host)", pt),
            (f"ringtrain ({chroot})", load("c")), (f"pytorch ({chroot})", load("d"))]
    med = lambda rows, k: statistics.median(r[k] for r in rows)
    peak = max(r["peak_gflops"] for r in rt)
    flops = rt[0]["flops_per_token"]
    print(f"d{depth}, batch {batch} x {seqlen}, {threads} threads; medians over {len(rt)} measured steps per row")
    print(f"{'impl':<22} {'tok/s':>9} {'step s':>8} {'MFU':>6} {'peak RSS MB':>12} {'/ host ringtrain':>17}")
    base = med(rt, "tok_per_s")
    for name, rows_ in rows:
        tps = med(rows_, "tok_per_s")
        print(f"{name:<22} {tps:9.1f} {med(rows_, 'step_s'):8.3f} {tps * flops / (peak * 1e9):6.3f} "
              f"{max(r['peak_rss_mb'] for r in rows_):12.0f} {tps / base:16.2f}x")
    c_tps, d_tps = med(load("c"), "tok_per_s"), med(load("d"), "tok_per_s")
    print(f"ringtrain / pytorch: host {base / med(pt, 'tok_per_s'):.2f}x, {chroot} {c_tps / d_tps:.2f}x   "
          f"(host oneDNN f32 matmul peak: {peak:.1f} GFLOP/s, {chroot}'s: {max(r['peak_gflops'] for r in load('c')):.1f})")
    sys.exit(0)
med = lambda rows, k: statistics.median(r[k] for r in rows)
rt_tps, pt_tps = med(rt, "tok_per_s"), med(pt, "tok_per_s")
peak = max(r["peak_gflops"] for r in rt)
flops = rt[0]["flops_per_token"]
print(f"d{depth}, batch {batch} x {seqlen}, {threads} threads; medians over {len(rt)} / {len(pt)} measured steps")
w = max(10, len(a_name), len(b_name))
print(f"{'impl':<{w}} {'tok/s':>9} {'step s':>8} {'MFU':>6} {'peak RSS MB':>12}")
for name, rows, tps in ((a_name, rt, rt_tps), (b_name, pt, pt_tps)):
    mfu = tps * flops / (peak * 1e9)
    print(f"{name:<{w}} {tps:9.1f} {med(rows, 'step_s'):8.3f} {mfu:6.3f} {max(r['peak_rss_mb'] for r in rows):12.0f}")
print(f"ratio {a_name} / {b_name}: {rt_tps / pt_tps:.2f}x   (oneDNN f32 matmul peak in the same run: {peak:.1f} GFLOP/s)")
PY
