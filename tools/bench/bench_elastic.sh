#!/usr/bin/env bash
# The timeline of elastic training: a rank killed and restarted in a d8 job on simulated hosts
# (network namespaces on a bridge, every link shaped to --rate, the user's firewall: policy
# drop, only TCP 29500-29510 open), with the job key.
#
#   sudo tools/bench/bench_elastic.sh [--hosts 3] [--depth 8] [--rate 1gbit] [--peer-timeout 10] [--data DIR]
#                               [--warmup 3] [--gap 3] [--device-batch 1] [--seq-len 512]
#
# Each rank is pinned to a core (rank % cores) with one thread. A step in flight when the
# rank dies is trained again by the survivors, so "next step" includes a whole step of
# the smaller ring: --device-batch and --seq-len set how long that is.
#
# After --warmup steps, rank N-1 is killed (SIGKILL); --gap steps after the survivors went on
# it is started again with the same command. Printed, in seconds from the kill (or from the
# restart), each read by polling the ranks' logs and rank 0's metrics every 0.1 s:
#   noticed     rank 0 says the rank is lost and the live ranks re-form the ring
#   re-formed   rank 0 runs in the new ring (the ring of epoch 1 is up, the state is shared)
#   next step   the survivors' first completed step after the kill: due within
#               --peer-timeout + 5 s
#   joined      the restarted rank received the job's state (parameters, optimizer, loader)
#   in step     the first step completed with it (its start-up, the end of the step the
#               live ranks were in, the state, and one whole step of the bigger ring)
#   paused      what the rejoin costs the job: the live ranks' pause between two steps, the
#               ring's forming plus sending the state (rank 0's log): due within the time to
#               send the state at line rate (its size is printed) + 5 s
# Nothing else should run on the machine meanwhile.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
n=3 depth=8 rate=1gbit peer_timeout=10 data="" warmup=3 gap=3 batch=1 seq=512
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) n=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --peer-timeout) peer_timeout=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --gap) gap=$2; shift 2 ;;
    --device-batch) batch=$2; shift 2 ;;
    --seq-len) seq=$2; shift 2 ;;
    *) echo "bench_elastic: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$n" -ge 2 ] || { echo "bench_elastic: --hosts must be at least 2" >&2; exit 2; }
bash tools/setup.sh --no-build netns || exit 1
[ "$(id -u)" = 0 ] || { echo "bench_elastic: needs root (network namespaces)" >&2; exit 2; }
work=$(mktemp -d /tmp/rt-elastic.XXXXXX)
prefix=rtel$$
hosts() { bash tools/netns/hosts.sh "$@"; }
# The runs' checkpoints are GBs at d8: removed at the end (RINGTRAIN_KEEP_BENCH=1 keeps them).
cleanup() { hosts down "$prefix" "$n" >/dev/null 2>&1; [ "${RINGTRAIN_KEEP_BENCH:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
if [ -z "$data" ]; then
  data=data/kdoc-32768
  [ -f "$data/meta.json" ] || "$bin" data prepare --out "$data" --vocab 32768 --threads 2 --quiet
fi
data=$(cd "$data" && pwd)
key=$work/job.key
"$bin" keygen --out "$key" >/dev/null || exit 1
hosts up "$prefix" "$n" --rate "$rate" --firewall 29500-29510
peers=""
for i in $(seq 0 $((n - 1))); do peers+="${peers:+,}$(hosts addr "$i"):29500"; done
cores=$(nproc)
last=$((n - 1))
start_rank() {  # rank, log file
  ip netns exec "${prefix}h$1" taskset -c "$(($1 % cores))" "$bin" train --data "$data" --depth "$depth" --seq-len "$seq" \
    --device-batch "$batch" --total-batch 0 --steps 100000 --eval-every 0 --threads 1 --no-progress --out "$work/run" --rank "$1" \
    --peers "$peers" --key "$key" --peer-timeout "$peer_timeout" > "$2" 2>&1 &
  echo $!
}
now() { date +%s.%N; }
since() { "$py" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
metrics=$work/run/metrics.jsonl
count() { local c; c=$(grep -c "$1" "$metrics" 2>/dev/null); echo "${c:-0}"; }
steps_done() { count '"loss"'; }
events() { count '"event"'; }
# Polls every 0.1 s until the command succeeds (then prints the time) or 30 minutes pass.
when() {
  local t0
  t0=$(date +%s)
  while ! eval "$1" >/dev/null 2>&1; do
    [ $(($(date +%s) - t0)) -gt 1800 ] && { echo "never"; return; }
    sleep 0.1
  done
  now
}

echo "bench_elastic: d$depth, $n ranks, batch $batch x $seq per rank, 1 thread each, $rate links, --peer-timeout $peer_timeout; work dir $work" >&2
pids=()
for r in $(seq 0 "$last"); do pids+=("$(start_rank "$r" "$work/r$r.log")"); done
when "[ \$(steps_done) -ge $warmup ]" >/dev/null
kill -9 "${pids[$last]}"
t_kill=$(now)
at_kill=$(steps_done)
t_noticed=$(when "grep -q 'the live ranks re-form the ring' $work/r0.log")
t_formed=$(when "grep -q 'ring of epoch 1' $work/r0.log")
t_step=$(when "[ \$(events) -ge 1 ] && [ \$(steps_done) -gt $at_kill ]")
when "[ \$(steps_done) -ge $((at_kill + gap)) ]" >/dev/null
pids[$last]=$(start_rank "$last" "$work/r$last.again.log")
t_restart=$(now)
t_joined=$(when "grep -q 'joined the running job' $work/r$last.again.log")
at_join=$(steps_done)
t_in_step=$(when "[ \$(events) -ge 2 ] && [ \$(steps_done) -gt $at_join ]")
ip netns exec "${prefix}h0" "$bin" stop "$(hosts addr 0):29500" --key "$key" --timeout 30 >/dev/null
# The ranks were started in command substitutions (not children of this shell): poll them.
for p in "${pids[@]}"; do
  for _ in $(seq 1200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
done

# The state a joining rank receives: the weights and the optimizer state of a checkpoint.
ckpt=$(ls -d "$work"/run/rank0/step_* | tail -1)
state_bytes=$(( $(stat -c %s "$ckpt/model.safetensors") + $(stat -c %s "$ckpt/state.safetensors") ))
line_s=$("$py" -c "import re,sys; r=sys.argv[2]; m=re.match(r'([0-9.]+)([kmg]?)bit', r); f={'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)]; print('%.1f' % (int(sys.argv[1]) * 8 / (float(m.group(1)) * f)))" "$state_bytes" "$rate")
next_s=$(since "$t_kill" "$t_step") in_s=$(since "$t_restart" "$t_in_step")
verdict() { "$py" -c "import sys; print('yes' if float(sys.argv[1]) <= float(sys.argv[2]) else 'NO')" "$1" "$2"; }
grep -m1 'ring of epoch 1' "$work/r0.log" >&2
grep -m1 'joined the running job' "$work/r$last.again.log" >&2
printf '\n| event | seconds | bound | within |\n|---|---|---|---|\n'
printf '| kill -> loss noticed (rank 0) | %s | | |\n' "$(since "$t_kill" "$t_noticed")"
printf '| kill -> ring re-formed, state shared | %s | | |\n' "$(since "$t_kill" "$t_formed")"
printf '| kill -> survivors complete a step | %s | %s (peer timeout + 5) | %s |\n' "$next_s" "$((peer_timeout + 5))" \
  "$(verdict "$next_s" "$((peer_timeout + 5))")"
printf '| restart -> state received | %s | | |\n' "$(since "$t_restart" "$t_joined")"
# What the rejoin costs the job: the live ranks stop training from the end of their step
# until the ring with the new rank has formed and the state is sent (rank 0's log says both).
stall=$(grep -m1 'ring of epoch 2' "$work/r0.log" | "$py" -c "import re,sys; m=re.search(r'formed in ([0-9.]+) s, state shared in ([0-9.]+) s', sys.stdin.read()); print('%.1f' % (float(m.group(1)) + float(m.group(2))) if m else 'never')")
printf '| restart -> step with it complete | %s | | |\n' "$in_s"
printf '| rejoin: live ranks paused (ring formed + state sent) | %s | %s (%.0f MB at %s + 5) | %s |\n' "$stall" \
  "$("$py" -c "print('%.1f' % ($line_s + 5))")" "$("$py" -c "print($state_bytes / 1e6)")" "$rate" \
  "$(verdict "$stall" "$("$py" -c "print($line_s + 5)")")"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $cores cores"
