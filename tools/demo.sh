#!/usr/bin/env bash
# The main job on an embedded default: installs what is missing, builds, prepares the Linux
# kernel documentation (Debian's linux-doc-6.1 or linux-doc-6.12) as a corpus, and trains a small nanochat
# model with two ranks on this machine, talking over loopback on two fixed ports. Then it
# evaluates, samples text and plots the curves.
#
# Settings (environment variables, all optional):
#   RINGTRAIN_DEMO_PORT   first of the two ports (default 29500; the ranks use PORT and PORT+1)
#   RINGTRAIN_DEMO_STEPS  optimizer steps (default 200, about 10 minutes on 2 cores)
#   RINGTRAIN_DEMO_DEPTH  model depth (default 4)
#   RINGTRAIN_DEMO_VOCAB  tokenizer vocabulary (default 8192)
#   RINGTRAIN_DEMO_OUT    run directory (default runs/demo)
#   RINGTRAIN_DEMO_DATA   prepared data directory (default data/kdoc-<vocab>)
#   RINGTRAIN_DEMO_INPUT  corpus (default: the installed /usr/share/doc/linux-doc*/html/_sources)
#   RINGTRAIN_DEMO_SEQ_LEN, RINGTRAIN_DEMO_BATCH, RINGTRAIN_DEMO_EVAL_EVERY, RINGTRAIN_DEMO_EVAL_TOKENS
#   RINGTRAIN_SKIP_SETUP=1  use the existing build (tests); RINGTRAIN_BIN  the binary
set -euo pipefail
. "$(dirname "$0")/lib/fail_loudly.sh"
cd "$(dirname "$0")/.."

port=${RINGTRAIN_DEMO_PORT:-29500}
steps=${RINGTRAIN_DEMO_STEPS:-200}
depth=${RINGTRAIN_DEMO_DEPTH:-4}
vocab=${RINGTRAIN_DEMO_VOCAB:-8192}
out=${RINGTRAIN_DEMO_OUT:-runs/demo}
seq_len=${RINGTRAIN_DEMO_SEQ_LEN:-256}
batch=${RINGTRAIN_DEMO_BATCH:-8}
eval_every=${RINGTRAIN_DEMO_EVAL_EVERY:-50}
eval_tokens=${RINGTRAIN_DEMO_EVAL_TOKENS:-16384}
data=${RINGTRAIN_DEMO_DATA:-data/kdoc-$vocab}
bin=${RINGTRAIN_BIN:-build/ringtrain}

step() { printf '\n== %s   (%dm%02ds so far)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

if [ "${RINGTRAIN_SKIP_SETUP:-0}" != 1 ]; then
  step "1/5 install missing packages and build"
  # The demo needs only the trainer; `bash tools/test.sh` builds the tests.
  RINGTRAIN_BUILD_TARGETS=${RINGTRAIN_BUILD_TARGETS:-ringtrain} bash tools/setup.sh
fi

# The newest kernel documentation installed: looked for only after the step above installed it
# (the release's linux-doc package); a fresh machine has none before.
input=${RINGTRAIN_DEMO_INPUT:-$(ls -d /usr/share/doc/linux-doc*/html/_sources 2>/dev/null | sort -V | tail -n 1 || true)}
if [ -z "$input" ] || [ ! -e "$input" ]; then
  echo "demo: no corpus at '${input:-/usr/share/doc/linux-doc*/html/_sources}': run bash tools/setup.sh (it installs Debian's linux-doc), or set RINGTRAIN_DEMO_INPUT to a directory of text" >&2
  exit 2
fi
[ -x "$bin" ] || { echo "demo: $bin is missing: run bash tools/setup.sh (or set RINGTRAIN_BIN)" >&2; exit 2; }

step "2/5 prepare the corpus: $input -> $data"
if [ -f "$data/meta.json" ]; then
  echo "already prepared ($data/meta.json)"
else
  "$bin" data prepare --input "$input" --out "$data" --vocab "$vocab" --threads 2
fi

step "3/5 train d$depth on two local ranks (127.0.0.1:$port and :$((port + 1)))"
peers="127.0.0.1:$port,127.0.0.1:$((port + 1))"
mkdir -p "$out"
rm -rf "$out/rank0" "$out/rank1" "$out/metrics.jsonl"
# The job key: only its holders can join the ranks, read their status or stop them, and
# everything between the ranks is encrypted. One key per run directory, made once.
key="$out/job.key"
[ -f "$key" ] || "$bin" keygen --out "$key"
common=(train --data "$data" --out "$out" --depth "$depth" --seq-len "$seq_len" --device-batch "$batch" --total-batch 0
        --steps "$steps" --eval-every "$eval_every" --eval-tokens "$eval_tokens" --threads 1 --peers "$peers"
        --key "$key")
# Rank 1 runs in the background with its log in a file; rank 0 shows progress here. If this
# script ends for any reason, rank 1 ends with it: no orphaned trainer keeps the port.
"$bin" "${common[@]}" --rank 1 > "$out/rank1.log" 2>&1 &
rank1=$!
trap 'kill $rank1 2>/dev/null || true' EXIT
"$bin" "${common[@]}" --rank 0 2>&1 | tee "$out/rank0.log"
wait "$rank1" || { echo "rank 1 failed; its log:"; tail -5 "$out/rank1.log"; exit 1; }
trap - EXIT

step "4/5 evaluate and sample"
"$bin" eval --checkpoint "$out" --data "$data" --threads 2 --eval-tokens "$eval_tokens"
"$bin" sample --checkpoint "$out" --prompt "The kernel" --tokens 60 --threads 2

step "5/5 plot"
/usr/bin/python3 tools/plot/plot_metrics.py "$out/metrics.jsonl" --out "$out/curves.png" --title "ringtrain demo: d$depth, 2 ranks"

ckpt=$(ls -d "$out"/rank0/step_* | tail -1)
cat <<EOT

done in $((SECONDS / 60))m$(printf %02d $((SECONDS % 60)))s.
  metrics:     $out/metrics.jsonl   (one JSON line per step; rank 0)
  plot:        $out/curves.png
  checkpoint:  $ckpt   (rank 1's is in $out/rank1)
  logs:        $out/rank0.log, $out/rank1.log
  job key:     $key   (status/stop of a running job: $bin status 127.0.0.1:$port --key $key)
  sample more: $bin sample --checkpoint $out --prompt "Memory barriers" --tokens 100
EOT
