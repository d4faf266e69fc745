#!/usr/bin/env bash
# Does a second host add throughput? d8 (batch 2 x 1024 per rank) trained by ringtrain and
# by the PyTorch DDP + Gloo baseline, on simulated hosts: network namespaces on a bridge,
# every link shaped to 1 Gbit/s, each rank pinned to its own core with one thread.
#
#   sudo tools/bench_scaling.sh [--steps 16] [--warmup 2] [--depth 8] [--rate 1gbit] [--data DIR] [--key FILE|new]
#                               [--baseline-bin PATH] [--compare-only [--repeat N]]
#                               [--slow-link [--netem ARGS] [--link-emulator] [--slow-runs LIST] [--repeat N]]
#
# --key adds a row of --sync grad with the job key (CURVE), next to the plaintext one.
# --baseline-bin runs the --sync grad row a second time with another ringtrain binary (e.g.
# the previous version), right before the current one, and prints both with their ratio
# and the bytes each rank 0 sent per step: a before/after comparison measured in one run.
# --compare-only runs just one pair of --sync grad rows, alternating them --repeat times
# (default 3), and prints each pair and the median ratio: the baseline binary against this
# one (with --baseline-bin), or plaintext against --key (CURVE) with this binary.
#
# Runs, one after another. Throughput is tokens / time over all the steps after the warm-up
# (not a median: with --sync avg the averaging steps are the slow ones and must count), so
# --steps should be a multiple of --sync-every (8).
#   ringtrain, 1 rank                      (the baseline: one host, one core)
#   ringtrain, 2 ranks, --sync grad        (firewall: policy drop, only TCP 29500-29510 open)
#   ringtrain, 2 ranks, --sync grad with --key (CurveZMQ: encrypted, authenticated), with --key
#     only, right after the plaintext one; plaintext runs between the hosts use --insecure
#   ringtrain, 2 ranks, --sync avg --sync-every 8                      (same firewall)
#   ringtrain, 2 ranks, --sync avg --sync-every 8 --sync-overlap       (same firewall)
#   PyTorch DDP + Gloo, 2 ranks            (same firewall: it cannot connect; killed after --gloo-timeout)
#   PyTorch, 1 rank; PyTorch DDP + Gloo, 2 ranks   (firewall off)
# and prints one table. Nothing else should run on the machine meanwhile.
#
# --slow-link instead joins the two hosts through a slow, far link (tc netem: --rate
# 100mbit by default and --netem "delay 10ms loss 0.05%" on both ends of each link, i.e.
# 40 ms round trip and about 0.1% loss each way; tools/netns/hosts.sh) and runs
#   ringtrain, 1 rank; the same while the other core trains an identical 1-rank job (the
#     simulated hosts share one machine's memory bus: this is a host's rate under that);
#   2 ranks, --sync diloco --sync-every 8 --sync-overlap --overlap-steps 8 (the average may
#     take all 8 steps to travel) with --wire f32, bf16 and int8, and int8 with 1 step;
#   2 ranks, --sync avg --sync-every 8 --sync-overlap --overlap-steps 8 --wire int8;
# and prints tok/s against 1 rank and the bytes rank 0 sends per sync. Every run trains 8
# steps more than it measures, so that its final wait for the last average (once per run)
# stays out of the rate. --slow-runs picks the 2-rank runs instead, as "SYNC WIRE
# OVERLAP-STEPS" separated by commas, e.g. --slow-runs "diloco int8 8,avg int4 8" (any
# --wire; a fourth number adds --sync-fragments, e.g. "diloco int4 2 4"; with --key the
# 2-rank runs use the job key instead of --insecure). --repeat N (default 1) measures the lot N times, in turn (1 rank, the loaded
# rank, each 2-rank run; then again), and adds the median of each row and of each row's
# ratios to the two 1-rank rows of its own round: on a shared machine whose speed drifts by
# a few percent over minutes, a ratio between runs minutes apart is only as good as that
# drift, and the median of ratios taken side by side is the figure to quote. On a kernel without
# sch_netem (or with --link-emulator), hosts.sh joins the two hosts through its userspace
# link emulator instead, with the same rate, round trip and loss (build it first: `meson
# compile -C build` makes build/tools/netns/link-emulator). --netem none keeps only the rate
# (tbf, no delay, no loss).
set -uo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.." || exit 2
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
# shellcheck source=tools/bench/bench_lib.sh
. tools/bench/bench_lib.sh  # cpu_line, throughput_of, ratio, median
steps=16 warmup=2 depth=8 rate="" data="" gloo_timeout=60 key="" baseline_bin="" compare_only=0 repeat="" slow=0 netem="" emulate="" slow_runs="diloco f32 8,diloco bf16 8,diloco int8 1,diloco int8 8,avg int8 8"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --gloo-timeout) gloo_timeout=$2; shift 2 ;;
    --baseline-bin) baseline_bin=$(readlink -f "$2"); shift 2 ;;
    --compare-only) compare_only=1; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --slow-link) slow=1; shift ;;
    --netem) netem=$2; shift 2 ;;
    --link-emulator) emulate=--link-emulator; shift ;;
    --slow-runs) slow_runs=$2; shift 2 ;;
    *) echo "bench_scaling: unknown option $1" >&2; exit 2 ;;
  esac
done
tail=0
if [ "$slow" = 1 ]; then
  # 8 more steps after the measured ones: a run ends by waiting for its last average, a
  # one-off that a long run pays once; this keeps it out of the steady-state rate.
  tail=8
  rate=${rate:-100mbit} netem=${netem:-delay 10ms loss 0.05%}
  [ "$netem" = none ] && netem=""  # the rate only (tbf)
else
  rate=${rate:-1gbit}
fi
# Install what is missing (PyTorch for the baseline, namespace and firewall tools); the binary is built separately.
bash tools/setup.sh --no-build reference netns || exit 1
[ "$(id -u)" = 0 ] || { echo "bench_scaling: needs root (network namespaces)" >&2; exit 2; }
work=$(mktemp -d /tmp/rt-scaling.XXXXXX)
prefix=rtsc$$
hosts() { bash tools/netns/hosts.sh "$@"; }
# The runs' checkpoints are GBs at d8: removed at the end (RINGTRAIN_KEEP_BENCH=1 keeps them).
cleanup() { hosts down "$prefix" 2 >/dev/null 2>&1; [ "${RINGTRAIN_KEEP_BENCH:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
data=$(bench_data "$data") || exit 1
key=$(bench_key "$key" "$work") || exit 1
hosts up "$prefix" 2 --rate "$rate" ${netem:+--netem "$netem"} ${emulate:+"$emulate"} --link-cpus 0,1 --firewall 29500-29510 || exit 1
# A process in the switch namespace is the link emulator (hosts.sh's choice where sch_netem is missing).
link="tc netem on both ends of each link"
[ -n "$(ip netns pids "${prefix}sw" 2>/dev/null)" ] && link="the userspace link emulator, the same path"
a0=$(hosts addr 0) a1=$(hosts addr 1)
in_host() { local i=$1; shift; ip netns exec "${prefix}h$i" taskset -c "$i" "$@"; }

# tok/s over the step records after the warm-up and the mean network time per step, from a
# metrics file (ringtrain) or a JSON-lines stdout (PyTorch). Tokens / time: from rank 0's
# clock, between the moments every rank had finished the window's first and last steps
# (synced_s) or rank 0's own ends of them (elapsed_s; with avg the ranks run free between
# syncs, so per-step times say little), else the harmonic mean of the per-step rates.
throughput() { throughput_of "$1" "$warmup" "$steps"; }

# Mean bytes_sent per step of rank 0 after the warm-up, in MB (10^6 bytes).
bytes_per_step() {
  "$py" - "$1" "$warmup" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
recs = [r for r in recs if "bytes_sent" in r][int(sys.argv[2]):]
print("%.1f" % (sum(r["bytes_sent"] for r in recs) / len(recs) / 1e6) if recs else "-")
PY
}

common=(train --data "$data" --depth "$depth" --seq-len 1024 --device-batch 2 --total-batch 0 --steps 1000 --stop-after "$((steps + warmup + tail))"
        --eval-every 0 --eval-tokens 1024 --threads 1 --no-progress)
run_rt() {  # name, then extra flags; 0 ranks means one process without --peers
  local name=$1 world=$2; shift 2
  local out=$work/$name bin=${rt_bin:-$bin}
  if [ "$world" = 1 ]; then
    in_host 0 "$bin" "${common[@]}" --out "$out" > "$work/$name.log" 2>&1
  else
    local peers="$a0:29500,$a1:29500"
    in_host 1 "$bin" "${common[@]}" --out "$out" --rank 1 --peers "$peers" "$@" > "$work/$name.r1.log" 2>&1 &
    in_host 0 "$bin" "${common[@]}" --out "$out" --rank 0 --peers "$peers" "$@" > "$work/$name.log" 2>&1
    wait
  fi
  throughput "$out/metrics.jsonl"
}

run_torch() {  # name, world, seconds before the run is killed
  local name=$1 world=$2 limit=$3
  local args=(tools/reference/nanochat_ref.py train-ddp --world-size "$world" --master-addr "$a0" --master-port 29500
              --ifname eth0 --depth "$depth" --device-batch 2 --total-batch 0 --seq-len 1024 --steps "$((steps + warmup))" --threads 1
              --data "$data/train.bin" --timeout "$gloo_timeout")
  for r in $(seq $((world - 1)) -1 1); do
    in_host "$r" timeout "$limit" "$py" "${args[@]}" --rank "$r" > "$work/$name.r$r.log" 2>&1 &
  done
  in_host 0 timeout "$limit" "$py" "${args[@]}" --rank 0 > "$work/$name.log" 2>&1
  local rc=$?
  wait
  if [ $rc != 0 ]; then echo "fails (exit $rc)"; else throughput "$work/$name.log"; fi
}

echo "bench_scaling: d$depth, batch 2 x 1024 per rank, 1 thread per rank, $rate links; work dir $work" >&2
if [ "$compare_only" = 1 ]; then
  # A and B: the baseline binary against this one (both plaintext between the namespace
  # hosts, so both with --insecure, which every build since the job key has), or plaintext
  # against the job key with this binary.
  if [ -n "$baseline_bin" ]; then
    a_name=baseline a_bin=$baseline_bin a_flags=(--insecure) b_name="this build" b_flags=(--insecure)
  elif [ -n "$key" ]; then
    a_name=plaintext a_bin=$bin a_flags=(--insecure) b_name="--key (CURVE)" b_flags=(--key "$key")
  else
    echo "bench_scaling: --compare-only needs --baseline-bin or --key" >&2; exit 2
  fi
  printf '\n| pair | %s tok/s | %s tok/s | ratio | bytes_sent MB/step, rank 0 (A -> B) |\n|---|---|---|---|---|\n' "$a_name" "$b_name"
  ratios=()
  for i in $(seq 1 "${repeat:-3}"); do
    a=$(rt_bin=$a_bin run_rt rt-a-$i 2 --sync grad "${a_flags[@]}")
    b=$(run_rt rt-b-$i 2 --sync grad "${b_flags[@]}")
    r=$("$py" -c "import sys; print('%.3f' % (float(sys.argv[2].split()[0]) / float(sys.argv[1].split()[0])))" "$a" "$b")
    ratios+=("$r")
    printf '| %d | %s | %s | %s | %s -> %s |\n' "$i" "${a% *}" "${b% *}" "$r" \
      "$(bytes_per_step "$work/rt-a-$i/metrics.jsonl")" "$(bytes_per_step "$work/rt-b-$i/metrics.jsonl")"
  done
  echo "median ratio ($b_name / $a_name): $(median %.3f "${ratios[@]}")"
  cpu_line
  exit 0
fi
if [ "$slow" = 1 ]; then
  # Rank 0's payload bytes per average (MB = 10^6 bytes): all of its bytes over the syncs.
  bytes_per_sync() {
    "$py" - "$1" 8 <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
recs = [r for r in recs if "bytes_sent" in r]
syncs = sum(1 for r in recs if r["step"] % int(sys.argv[2]) == 0)
print("%.2f" % (sum(r["bytes_sent"] for r in recs) / syncs / 1e6) if syncs else "-")
PY
  }
  IFS=, read -r -a runs <<<"$slow_runs"
  for run in "${runs[@]}"; do
    set -- $run
    [ $# = 3 ] || [ $# = 4 ] || { echo "bench_scaling: --slow-runs wants 'SYNC WIRE OVERLAP-STEPS [FRAGMENTS]', got '$run'" >&2; exit 2; }
  done
  rounds=${repeat:-1}
  declare -A rate_of vs1_of vsn_of  # per row: the rounds' tok/s and ratios, space-separated
  table=""
  for i in $(seq 1 "$rounds"); do
    sfx=""; [ "$rounds" = 1 ] || sfx="-$i"
    rt1=$(run_rt "rt-1rank$sfx" 1)
    # The same, while the other core runs an identical 1-rank job (it outlasts the measured
    # steps: those end $tail steps before the run): the two simulated hosts share one
    # machine's memory bus and caches, which two real hosts do not; this row is one host's
    # rate under that sharing, without any network.
    in_host 1 "$bin" "${common[@]}" --out "$work/rt-neighbour$sfx" > "$work/rt-neighbour$sfx.log" 2>&1 &
    neighbour=$!
    rt1n=$(run_rt "rt-1rank-loaded$sfx" 1)
    kill "$neighbour" 2>/dev/null; wait "$neighbour" 2>/dev/null
    rows=("ringtrain, 1 rank" "ringtrain, 1 rank, the other core training the same (no network)")
    results=("$rt1" "$rt1n")
    bytes=("-" "-") step_costs=()
    for run in "${runs[@]}"; do
      set -- $run
      fragments=${4:-1}
      name="slow-$1-$2-$3-$fragments$sfx"
      row="2 ranks, --sync $1 --sync-every 8 --sync-overlap --overlap-steps $3 --wire $2"
      [ "$fragments" = 1 ] || row+=" --sync-fragments $fragments"
      [ -n "$key" ] && row+=" --key"
      rows+=("$row")
      # With --key every 2-rank run speaks CurveZMQ, as a user's job across hosts does.
      access=(--insecure); [ -n "$key" ] && access=(--key "$key")
      results+=("$(run_rt "$name" 2 --sync "$1" --sync-every 8 --sync-overlap --overlap-steps "$3" --wire "$2" \
                   --sync-fragments "$fragments" "${access[@]}")")
      bytes+=("$(bytes_per_sync "$work/$name/metrics.jsonl")")
      step_costs+=("$("$py" tools/bench/sync_step_costs.py "$work/$name" 8 "$3" "$fragments" "$warmup" "$((steps + warmup))")")
    done
    for k in "${!rows[@]}"; do
      res=${results[$k]} row=${rows[$k]}
      hidden=${res#* }; [ "$k" -lt 2 ] && hidden=-
      r1=$(ratio "$res" "$rt1") rn=$(ratio "$res" "$rt1n")
      table+=$(printf '| %s | %s | %s | %s | %s | %s | %s |' "$row" "$i" "${res% *}" "$hidden" "$r1" "$rn" "${bytes[$k]}")$'\n'
      rate_of[$row]+="${res% *} " vs1_of[$row]+="${r1%x} " vsn_of[$row]+="${rn%x} "
    done
  done
  cpu_line
  echo "slow link: $rate, netem '$netem' ($link); d$depth; steps $steps after $warmup warm-up"
  printf '\n| run | round | tok/s (tokens / time) | network s/step not hidden (mean) | vs 1 rank | vs 1 rank with a busy neighbour core | MB sent per sync (rank 0) |\n|---|---|---|---|---|---|---|\n'
  printf '%s' "$table"
  printf '\nWhat the syncs cost rank 0 (last round): its steps by what they did, mean seconds each:\n\n'
  printf '%s\n' "${step_costs[@]}"
  if [ "$rounds" != 1 ]; then
    printf '\nMedians over %s rounds (each ratio taken within its round):\n\n| run | tok/s | vs 1 rank | vs 1 rank with a busy neighbour core |\n|---|---|---|---|\n' "$rounds"
    for row in "${rows[@]}"; do
      printf '| %s | %s | %sx | %sx |\n' "$row" "$(median %.1f ${rate_of[$row]})" "$(median %.2f ${vs1_of[$row]})" "$(median %.2f ${vsn_of[$row]})"
    done
  fi
  # The emulator runs on the same two cores as the ranks: what it took from them.
  for pid in $(ip netns pids "${prefix}sw" 2>/dev/null); do
    awk -v t="$(getconf CLK_TCK)" '{printf "link emulator: %.1f s of CPU over the whole benchmark\n", ($14 + $15) / t}' "/proc/$pid/stat"
  done
  exit 0
fi
rt1=$(run_rt rt-1rank 1)
[ -z "$baseline_bin" ] || rtg0=$(rt_bin=$baseline_bin run_rt rt-grad-baseline 2 --sync grad)
rtg=$(run_rt rt-grad 2 --sync grad --insecure)
[ -n "$key" ] && rtc=$(run_rt rt-grad-curve 2 --sync grad --key "$key")
rta=$(run_rt rt-avg8 2 --sync avg --sync-every 8 --insecure)
rto=$(run_rt rt-avg8-overlap 2 --sync avg --sync-every 8 --sync-overlap --insecure)
pt_fw=$(run_torch pt-ddp-firewall 2 "$gloo_timeout")
[[ "$pt_fw" == fails* || "$pt_fw" == "-" ]] && pt_fw="cannot start: blocked by the firewall (killed after ${gloo_timeout}s)"
hosts firewall "$prefix" 2 off
pt1=$(run_torch pt-1rank 1 3600)
pt2=$(run_torch pt-ddp 2 3600)

cpu_line
printf '\n| run | firewall (29500-29510 only) | tok/s (tokens / time) | network s/step not hidden (mean) | vs 1 rank |\n|---|---|---|---|---|\n'
printf '| ringtrain, 1 rank | - | %s | - | 1.00x |\n' "${rt1% *}"
printf '| ringtrain, 2 ranks, --sync grad | on | %s | %s | %s |\n' "${rtg% *}" "${rtg#* }" "$(ratio "$rtg" "$rt1")"
[ -n "$key" ] && printf '| ringtrain, 2 ranks, --sync grad, --key (CURVE) | on | %s | %s | %s (%s of plaintext) |\n' \
  "${rtc% *}" "${rtc#* }" "$(ratio "$rtc" "$rt1")" "$(ratio "$rtc" "$rtg")"
printf '| ringtrain, 2 ranks, --sync avg --sync-every 8 | on | %s | %s | %s |\n' "${rta% *}" "${rta#* }" "$(ratio "$rta" "$rt1")"
printf '| ringtrain, 2 ranks, --sync avg --sync-every 8 --sync-overlap | on | %s | %s | %s |\n' "${rto% *}" "${rto#* }" "$(ratio "$rto" "$rt1")"
printf '| PyTorch DDP + Gloo, 2 ranks | on | %s | - | - |\n' "$pt_fw"
printf '| PyTorch, 1 rank | off | %s | - | 1.00x |\n' "${pt1% *}"
printf '| PyTorch DDP + Gloo, 2 ranks | off | %s | - | %s |\n' "${pt2% *}" "$(ratio "$pt2" "$pt1")"
printf '| ringtrain 2 ranks grad vs PyTorch DDP 2 ranks | | | | %s |\n' "$(ratio "$rtg" "$pt2")"
if [ -n "$baseline_bin" ]; then
  printf '\n| --sync grad, 2 ranks | binary | tok/s | network s/step not hidden | bytes_sent MB/step (rank 0) |\n|---|---|---|---|---|\n'
  printf '| baseline | %s | %s | %s | %s |\n' "$baseline_bin" "${rtg0% *}" "${rtg0#* }" "$(bytes_per_step "$work/rt-grad-baseline/metrics.jsonl")"
  printf '| this build | %s | %s | %s | %s |\n' "$bin" "${rtg% *}" "${rtg#* }" "$(bytes_per_step "$work/rt-grad/metrics.jsonl")"
  printf '| this build vs baseline | | %s | | |\n' "$(ratio "$rtg" "$rtg0")"
fi
