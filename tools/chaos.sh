#!/usr/bin/env bash
# The chaos soak: one elastic job on firewalled namespace hosts (tools/netns/hosts.sh: a
# bridge, 1 Gbit/s links, policy drop but TCP 29500-29510), with the job key, left alone
# while faults are dealt at random; then the invariants are checked. Root only.
#
#   sudo tools/chaos.sh [--minutes 60] [--hosts 3] [--faults kill,stop,partition,oneway,disk,flood]
#                       [--seed N] [--peer-timeout 5] [--depth 2] [--steps S] [--keep]
#
# Every rank runs under a supervisor that does what systemd's Restart=on-failure does for the
# unit (tools/dist/ringtrain@.service.in): a rank that exits non-zero is started again after
# 2 s with the same flags plus --resume, never after exit 2 (bad usage) or exit 0. Nobody
# else touches the job. Each host has its own --out on a 256 MB tmpfs, like a disk of its own.
#
# Faults, one per round, each on a rank picked at random:
#   kill       SIGKILL; the supervisor restarts it
#   stop       SIGSTOP for --peer-timeout + 4 s (it is dropped), then SIGCONT
#   partition  the host's traffic to and from the other hosts dropped for 2 x --peer-timeout
#              + 10 s, then healed (a minority checkpoints and exits; its restarts wait)
#   oneway     only what the host receives from the others dropped, as long, then healed
#   disk       the host's disk filled for 20 s (a periodic save fails, is retried), then freed
#   flood      a stranger without the key holds 2,000 connections to the rank's port and opens
#              100 more a second for 20 s (tools/bench/conn_flood.py, from another host)
# Between faults the job runs until every rank is live again and it has made 5 more steps.
#
# --steps: by default what the job does in --minutes without faults, measured first by a
# short run of the same job. When the time is up, or the job is within two minutes of its
# end, no more faults are dealt and the job is left to finish. Then, checked: every rank ended with exit 0 at the last step, on its own;
# the replicas' final weights are bit-identical; every checkpoint left on every host
# evaluates; and the final val bpb is within 1% of an uninterrupted run of the same tokens
# (one process with the whole batch, run beside the soak at nice 10). Printed: one table of
# the faults (count, recovery, time lost) and one of the invariants; exit 1 if one fails.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
minutes=60 n=3 faults=kill,stop,partition,oneway,disk,flood seed=$RANDOM peer_timeout=5 depth=2 steps="" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --hosts) n=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --peer-timeout) peer_timeout=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "chaos: needs root (network namespaces, tmpfs); run it with sudo" >&2; exit 2; }
[ "$n" -ge 3 ] || { echo "chaos: --hosts must be at least 3 (a majority must outlive any one fault)" >&2; exit 2; }
[ -x "$bin" ] || { echo "chaos: $bin is missing; run bash tools/setup.sh first" >&2; exit 2; }
read -r -a fault_kinds <<<"${faults//,/ }"
for f in "${fault_kinds[@]}"; do
  case "$f" in kill|stop|partition|oneway|disk|flood) ;; *) echo "chaos: unknown fault '$f'" >&2; exit 2 ;; esac
done
bash tools/setup.sh --no-build netns >/dev/null || exit 1
RANDOM=$seed
work=$(mktemp -d /tmp/rt-chaos.XXXXXX)
prefix=rtch$$
hosts() { bash tools/netns/hosts.sh "$@"; }
ns() { echo "${prefix}h$1"; }
cleanup() {
  touch "$work/stopping"
  pkill -9 -f "conn_flood.py .*:29500" 2>/dev/null
  for r in $(seq 0 $((n - 1))); do
    [ -f "$work/r$r.pid" ] && kill -9 "$(cat "$work/r$r.pid")" 2>/dev/null
    umount "$work/h$r" 2>/dev/null
  done
  [ -n "${ref_pid:-}" ] && kill -9 "$ref_pid" 2>/dev/null
  hosts down "$prefix" "$n" >/dev/null 2>&1
  [ "$keep" = 1 ] && echo "chaos: kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The whole kernel documentation (13.5 M tokens at vocab 512): an hour's steps are then a few
# epochs. On its "process" folder alone (0.29 M tokens, a val split of 2,931) a 30-minute soak
# trained about 100 epochs, and the 1% comparison of val bpb measured overfitting and noise.
corpus=$(ls -d /usr/share/doc/linux-doc*/html/_sources 2>/dev/null | head -1)
[ -n "$corpus" ] || { echo "chaos: no kernel documentation installed; run bash tools/setup.sh" >&2; exit 2; }
"$bin" data prepare --input "$corpus" --out "$work/data" --vocab 512 --quiet >/dev/null || exit 1
key=$work/job.key
"$bin" keygen --out "$key" >/dev/null || exit 1
hosts up "$prefix" "$n" --rate 1gbit --firewall 29500-29510 >/dev/null || exit 1
peers=""
for r in $(seq 0 $((n - 1))); do peers+="${peers:+,}$(hosts addr "$r"):29500"; done
cores=$(nproc)
# A small model, so that an hour holds thousands of steps and hundreds of checkpoints.
model=(--depth "$depth" --head-dim 32 --seq-len 256 --window-pattern SL --device-batch 2 --total-batch 0 --seed 7)
run_flags=(--data "$work/data" "${model[@]}" --threads 1 --eval-every 0 --save-every 20 --keep-checkpoints 3
           --no-progress --key "$key" --peer-timeout "$peer_timeout")

now() { date +%s.%N; }
elapsed() { "$py" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
# The job's newest step: the largest step of any host's metrics (the duty of writing them
# moves when rank 0 is lost).
job_step() {
  local s
  s=$(cat "$work"/h*/run/metrics.jsonl 2>/dev/null | grep '"loss"' | grep -o '"step":[0-9]*' | grep -o '[0-9]*' | sort -n | tail -1)
  echo "${s:-0}"
}
# Live ranks as any rank answers `status`, 0 when none does.
live_ranks() {
  local r out
  for r in $(seq 0 $((n - 1))); do
    out=$(ip netns exec "$(ns "$r")" timeout 10 "$bin" status "$(hosts addr "$r"):29500" --key "$key" --timeout 3 2>/dev/null) || continue
    echo "$out" | grep -c ': live'
    return
  done
  echo 0
}
# Polls `cond` every second until it holds (0) or `limit` seconds pass (1).
wait_for() {  # limit cond...
  local limit=$1 t0=$SECONDS
  shift
  until "$@"; do
    [ $((SECONDS - t0)) -ge "$limit" ] && return 1
    sleep 1
  done
}

# One rank under its supervisor (systemd's Restart=on-failure, RestartSec=2,
# RestartPreventExitStatus=2); its pid file names the running process.
supervise() {  # rank steps
  local r=$1 s=$2 resume=() rc
  while [ ! -f "$work/stopping" ]; do
    ip netns exec "$(ns "$r")" taskset -c $((r % cores)) "$bin" train "${run_flags[@]}" --steps "$s" "${resume[@]}" \
      --out "$work/h$r/run" --rank "$r" --peers "$peers" >>"$work/r$r.log" 2>&1 &
    echo $! >"$work/r$r.pid"
    wait $!
    rc=$?
    echo "$(date +%s) $rc" >>"$work/r$r.exits"
    { [ "$rc" = 0 ] || [ "$rc" = 2 ]; } && break
    sleep 2
    resume=(--resume)
  done
  touch "$work/r$r.ended"
}
start_job() {  # steps
  local r
  for r in $(seq 0 $((n - 1))); do
    mkdir -p "$work/h$r"
    supervise "$r" "$1" &
  done
}
job_dead() {  # every supervisor gave up (exit 2) or saw its rank finish: nothing will move again
  local r
  for r in $(seq 0 $((n - 1))); do [ -f "$work/r$r.ended" ] || return 1; done
}
job_done() {  # every supervisor saw its rank exit 0
  local r
  for r in $(seq 0 $((n - 1))); do tail -n 1 "$work/r$r.exits" 2>/dev/null | grep -q ' 0$' || return 1; done
}

# --steps: what the job does in --minutes, from a short run of the same job.
if [ -z "$steps" ]; then
  start_job 100000
  wait_for 300 sh -c "[ \"\$(cat $work/h*/run/metrics.jsonl 2>/dev/null | grep -c loss)\" -ge 20 ]" || {
    echo "chaos: the measuring run made no progress; its logs:" >&2; tail -n 5 "$work"/r*.log >&2; exit 1; }
  s0=$(job_step) t0=$(now)
  sleep 30
  s1=$(job_step) t1=$(now)
  step_s=$("$py" -c "import sys; print((float(sys.argv[2]) - float(sys.argv[1])) / max(1, int(sys.argv[4]) - int(sys.argv[3])))" "$t0" "$t1" "$s0" "$s1")
  ip netns exec "$(ns 0)" "$bin" stop "$(hosts addr 0):29500" --key "$key" --timeout 30 >/dev/null 2>&1
  wait_for 120 job_done
  touch "$work/stopping"; wait; rm -f "$work/stopping"
  for r in $(seq 0 $((n - 1))); do rm -rf "$work/h$r" "$work/r$r.log" "$work/r$r.exits" "$work/r$r.pid" "$work/r$r.ended"; done
  steps=$("$py" -c "import sys; print(max(200, int(float(sys.argv[1]) * 60 / float(sys.argv[2]))))" "$minutes" "$step_s")
else
  step_s=""
fi
for r in $(seq 0 $((n - 1))); do mkdir -p "$work/h$r" && mount -t tmpfs -o size=256m tmpfs "$work/h$r" || exit 1; done

echo "chaos: $n ranks, d$depth, $steps steps, faults $faults for $minutes min, seed $seed, --peer-timeout $peer_timeout; work dir $work" >&2
# The uninterrupted run of the same tokens: one process with the whole batch.
nice -n 10 "$bin" train --data "$work/data" "${model[@]}" --device-batch $((2 * n)) --threads 1 --eval-every 0 --no-progress \
  --steps "$steps" --out "$work/ref" >"$work/ref.log" 2>&1 &
ref_pid=$!
start_job "$steps"
wait_for 300 sh -c "[ \"\$(cat $work/h*/run/metrics.jsonl 2>/dev/null | grep -c loss)\" -ge 10 ]" || {
  echo "chaos: the job made no progress; its logs:" >&2; tail -n 5 "$work"/r*.log >&2; exit 1; }

# One fault of `kind` on rank `r`; returns when it is healed.
deal() {  # kind r
  local kind=$1 r=$2 pid held=$((2 * peer_timeout + 10))
  pid=$(cat "$work/r$r.pid")
  case "$kind" in
    kill) kill -9 "$pid" 2>/dev/null ;;
    stop) kill -STOP "$pid" 2>/dev/null; sleep $((peer_timeout + 4)); kill -CONT "$pid" 2>/dev/null ;;
    partition|oneway)
      {
        echo "table inet chaos {"
        echo "  chain drop_in { type filter hook input priority -10; policy accept; ip saddr 10.99.0.0/24 drop; }"
        [ "$kind" = partition ] &&
          echo "  chain drop_out { type filter hook output priority -10; policy accept; ip daddr 10.99.0.0/24 drop; }"
        echo "}"
      } | ip netns exec "$(ns "$r")" nft -f -
      sleep "$held"
      ip netns exec "$(ns "$r")" nft delete table inet chaos ;;
    disk)
      fallocate -l "$(df --output=avail -B1 "$work/h$r" | tail -1)" "$work/h$r/filler" 2>/dev/null ||
        dd if=/dev/zero of="$work/h$r/filler" bs=1M status=none 2>/dev/null
      sleep 20
      rm -f "$work/h$r/filler" ;;
    flood)
      ip netns exec "$(ns $(((r + 1) % n)))" "$py" tools/bench/conn_flood.py "$(hosts addr "$r"):29500" --hold 2000 --rate 100 \
        --seconds 20 >>"$work/flood.log" 2>&1 ;;
  esac
}

all_live_and_stepping() {  # since step $1; also true once the job is dead or done (checked after)
  job_dead && return 0
  [ "$(job_step)" -ge "$steps" ] && return 0
  [ "$(live_ranks)" = "$n" ] && [ "$(job_step)" -ge $(($1 + 5)) ]
}
deadline=$((SECONDS + minutes * 60))
rounds=0 samples=()
: >"$work/rounds"
# No fault in the job's last two minutes: a rank lost then may not be back before the others
# finish (a finished job takes nobody in), and a disk filled then fails the final save, which
# must fail loudly (exit 1). Neither is a fault the job could recover from.
far_from_end() {
  "$py" -c "import sys; left, s = int(sys.argv[1]) - int(sys.argv[2]), sys.argv[3]; sys.exit(0 if (left * float(s) > 120 if s else left > 2000) else 1)" \
    "$steps" "$(job_step)" "$step_s"
}
while [ $SECONDS -lt $deadline ] && far_from_end; do
  kind=${fault_kinds[$((RANDOM % ${#fault_kinds[@]}))]} r=$((RANDOM % n))
  t_start=$(now) s_start=$(job_step)
  deal "$kind" "$r"
  t_healed=$(now) s_healed=$(job_step)
  if wait_for 600 all_live_and_stepping "$s_healed" && ! job_dead; then back=$(now); ok=yes; else back=$(now); ok=no; fi
  s_back=$(job_step)
  rounds=$((rounds + 1))
  # Time lost: the round's wall time less what its steps take without faults (the step time
  # of the quiet stretches between rounds, the measuring run's before the first).
  lost=$("$py" -c "import sys; w=float(sys.argv[2])-float(sys.argv[1]); s=int(sys.argv[4])-int(sys.argv[3]); d=sys.argv[5]; print('%.1f' % (w - s * float(d)) if d else 'n/a')" \
    "$t_start" "$back" "$s_start" "$s_back" "$step_s")
  echo "$kind $r $(elapsed "$t_healed" "$back") $lost $ok" >>"$work/rounds"
  echo "chaos: round $rounds: $kind on rank $r, back $(elapsed "$t_healed" "$back") s after the heal, lost $lost s, step $s_back ($ok)" >&2
  [ "$ok" = yes ] || break
  # A stretch without faults: the job's step time now (the reference run shares the CPU).
  t0=$(now) s0=$(job_step)
  sleep 10
  sample=$("$py" -c "import sys; d=int(sys.argv[4])-int(sys.argv[3]); print((float(sys.argv[2])-float(sys.argv[1]))/d if d > 0 else '')" "$t0" "$(now)" "$s0" "$(job_step)")
  [ -n "$sample" ] && step_s=$(printf '%s\n' "$sample" "${samples[@]}" | sort -g | "$py" -c "import statistics,sys; print(statistics.median(float(l) for l in sys.stdin if l.strip()))") && samples+=("$sample")
done

# No more faults: the job finishes by itself.
remaining=$(( (steps - $(job_step)) ))
wait_for $((600 + remaining)) job_dead
job_done
finished=$?
wait "$ref_pid"
ref_rc=$?

# The invariants.
fail=0
check() {  # name ok detail
  printf '| %s | %s | %s |\n' "$1" "$2" "$3" >>"$work/invariants"
  [ "$2" = yes ] || fail=1
}
: >"$work/invariants"
last=$(printf 'step_%06d' "$steps")
check "every rank exited 0 by itself" "$([ $finished = 0 ] && echo yes || echo no)" \
  "$(for r in $(seq 0 $((n - 1))); do printf 'rank %d: %s exits; ' "$r" "$(wc -l <"$work/r$r.exits")"; done)"
at_last=yes
for r in $(seq 0 $((n - 1))); do [ -f "$work/h$r/run/rank$r/$last/model.safetensors" ] || at_last=no; done
check "every rank saved the last step ($steps)" "$at_last" ""
same=yes
for r in $(seq 1 $((n - 1))); do cmp -s "$work/h0/run/rank0/$last/model.safetensors" "$work/h$r/run/rank$r/$last/model.safetensors" || same=no; done
check "replicas bit-identical at the end" "$same" "$(sha256sum "$work/h0/run/rank0/$last/model.safetensors" 2>/dev/null | cut -c1-16)"
valid=0 invalid=0
for c in "$work"/h*/run/rank*/step_*; do
  if "$bin" eval --json --threads 1 --eval-tokens 2048 --checkpoint "$c" --data "$work/data" >/dev/null 2>&1; then
    valid=$((valid + 1)); else invalid=$((invalid + 1)); echo "chaos: checkpoint $c does not evaluate" >&2; fi
done
check "every checkpoint left evaluates" "$([ $invalid = 0 ] && [ $valid -gt 0 ] && echo yes || echo no)" "$valid valid, $invalid not"
bpb() { "$bin" eval --json --threads 1 --eval-tokens 65536 --checkpoint "$1" --data "$work/data" 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin)["val_bpb"])'; }
job_bpb=$(bpb "$work/h0/run/rank0/$last" || echo nan)
ref_bpb=$([ $ref_rc = 0 ] && bpb "$work/ref/rank0/$last" || echo nan)
within=$("$py" -c "import math,sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('yes' if math.isfinite(a) and math.isfinite(b) and abs(a-b) <= 0.01*b else 'no')" "$job_bpb" "$ref_bpb")
check "final val bpb within 1% of the uninterrupted run" "$within" "$job_bpb against $ref_bpb"

printf '\n%d rounds in %d min (seed %s), %d ranks, d%s, %s steps\n\n' "$rounds" "$minutes" "$seed" "$n" "$depth" "$steps"
printf '| fault | rounds | survived | median s back after the heal | median s lost |\n|---|---|---|---|---|\n'
"$py" - "$work/rounds" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for kind in ["kill", "stop", "partition", "oneway", "disk", "flood"]:
    mine = [r for r in rows if r[0] == kind]
    if not mine:
        continue
    back = [float(r[2]) for r in mine]
    lost = [float(r[3]) for r in mine if r[3] != "n/a"]
    print("| %s | %d | %d | %.1f | %s |" % (kind, len(mine), sum(r[4] == "yes" for r in mine), statistics.median(back),
                                           "%.1f" % statistics.median(lost) if lost else "n/a"))
EOF
printf '\n| invariant | holds | detail |\n|---|---|---|\n'
cat "$work/invariants"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $cores cores"
exit $fail
