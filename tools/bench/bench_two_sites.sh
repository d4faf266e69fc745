#!/usr/bin/env bash
# Two sites of two hosts in one ring: does streaming averaging over the slow link between the
# sites give 4 ranks nearly 4 times one rank? d8, batch 2 x 1024 per rank, one thread per rank.
#
#   sudo tools/bench/bench_two_sites.sh [--steps 16] [--warmup 8] [--depth 8] [--data DIR]
#        [--runs "diloco int4 1 4"] [--key FILE|new] [--repeat N] [--dilate D] [--unordered]
#
# Hosts (network namespaces, tools/netns/hosts.sh sites): two at site a, two at site b, every
# host link 1 Gbit/s, the sites joined by one slow, far link (the link emulator: 100 Mbit/s,
# 40 ms round trip, 0.1% loss each way), each host's firewall open to TCP 29500-29510 only.
# --peers lists the hosts a, b, a, b, the worst order for a ring, and --sites a,b,a,b tells
# ringtrain which host is where: the ring then crosses the slow link twice, not four times.
# --unordered adds the same run without --sites (the ring a -> b -> a -> b -> a crosses it
# four times), for comparison.
#
# Runs, per round: 4 one-rank jobs at once, pinned as the ranks are (the baseline: one host's
# rate while the machine is as busy as during the 4-rank run, no network); then each 4-rank
# run of --runs ("SYNC WIRE OVERLAP-STEPS FRAGMENTS", comma-separated; H = 8). tok/s is
# tokens over time on rank 0's clock over the steps after the warm-up (first syncs included),
# 8 more steps are trained so that the final wait for the last average stays out; the ratio
# is the 4-rank rate over the mean of the 4 one-rank jobs' rates of the same round; --repeat
# N rounds, interleaved, and the median of each row's ratios.
#
# Fewer than 4 cores (time dilation): each core runs ceil(4 / cores) ranks, so every rank
# computes that many (D) times slower; to keep the ratio of network time to compute time
# that of one core per rank, every link rate is divided by D and every delay multiplied by D
# (--dilate D sets it; 1 on 4 or more cores). The baseline runs just as many jobs per core,
# so the ratio compares like with like. This is an emulation of 4 one-core hosts, and says
# so in its output: what it cannot show is a real host's own NIC and interrupts.
# Memory: a d8 rank of this job holds about 10 GB (streaming diloco's anchor, momentum and
# error feedback, what is in flight, the elastic snapshot), so 4 of them need 40 GB; on a
# 24 GB machine use --depth 6 (74 M parameters, 4.5 GB a rank; its bytes per FLOP are
# d8's within 5%, so the network's share of a step is alike).
# Nothing else should run on the machine meanwhile.
set -uo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.." || exit 2
bin=${RINGTRAIN_BIN:-$PWD/build/ringtrain}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
# shellcheck source=tools/bench/bench_lib.sh
. tools/bench/bench_lib.sh
steps=16 warmup=8 depth=8 data="" runs_list="diloco int4 1 4" key="" repeat=1 dilate="" unordered=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --runs) runs_list=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --dilate) dilate=$2; shift 2 ;;
    --unordered) unordered=1; shift ;;
    *) echo "bench_two_sites: unknown option $1; see --help" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a runs <<<"$runs_list"
for run in "${runs[@]}"; do
  read -r -a w <<<"$run"
  [ ${#w[@]} = 4 ] || { echo "bench_two_sites: --runs wants 'SYNC WIRE OVERLAP-STEPS FRAGMENTS', got '$run'" >&2; exit 2; }
done
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "bench_two_sites: --repeat '$repeat': give a count, e.g. 2" >&2; exit 2; }
bash tools/setup.sh --no-build netns || exit 1
[ "$(id -u)" = 0 ] || { echo "bench_two_sites: needs root (network namespaces)" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_two_sites: no ringtrain at $bin; build it (meson compile -C build) or set RINGTRAIN_BIN" >&2; exit 2; }
cores=$(nproc)
[ -n "$dilate" ] || dilate=$(( (4 + cores - 1) / cores ))
[[ $dilate =~ ^[1-9]$ ]] || { echo "bench_two_sites: --dilate '$dilate': give 1 to 9" >&2; exit 2; }
lan_rate=$((1000 / dilate))mbit wan_rate=$((100 / dilate))mbit wan_delay=$((10 * dilate))ms
tail=8
work=$(mktemp -d /tmp/rt-sites.XXXXXX)
prefix=rtst$$
hosts() { bash tools/netns/hosts.sh "$@"; }
cleanup() { hosts down "$prefix" 4 >/dev/null 2>&1; [ "${RINGTRAIN_KEEP_BENCH:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
data=$(bench_data "$data") || exit 1
key=$(bench_key "$key" "$work") || exit 1
hosts sites "$prefix" 4 --rate "$lan_rate" --wan-rate "$wan_rate" --wan-netem "delay $wan_delay loss 0.05%" \
  --cpus "$cores" --firewall 29500-29510 || exit 1
# Ranks in --peers order: hosts 0 and 1 are site a, 2 and 3 site b; listed a, b, a, b.
rank_host=(0 2 1 3)
rank_site=(a b a b)
peers="" sites=""
for r in 0 1 2 3; do
  peers+="${peers:+,}$(hosts addr "${rank_host[$r]}"):29500"
  sites+="${sites:+,}${rank_site[$r]}"
done
core_of() { echo $(( $1 % cores )); }  # host i's core: with 2 cores, each core has a rank of each site

common=(train --data "$data" --depth "$depth" --seq-len 1024 --device-batch 2 --total-batch 0 --steps 1000
        --stop-after "$((steps + warmup + tail))" --eval-every 0 --eval-tokens 1024 --threads 1 --no-progress)
rate_of() { throughput_of "$1/metrics.jsonl" "$warmup" "$steps"; }

# 4 one-rank jobs at once, each pinned to its host's core; prints the mean of their rates.
run_alone() {
  local name=$1 i pids=() rates=()
  for i in 0 1 2 3; do
    taskset -c "$(core_of "$i")" "$bin" "${common[@]}" --out "$work/$name-$i" > "$work/$name-$i.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for i in 0 1 2 3; do rates+=("$(rate_of "$work/$name-$i" | cut -d' ' -f1)"); done
  "$py" -c 'import sys, statistics; v=[float(x) for x in sys.argv[1:] if x != "-"]; print("%.1f 0" % statistics.mean(v) if len(v) == 4 else "-")' "${rates[@]}"
}

# One 4-rank job on the site hosts, with the flags given; prints rank 0's rate.
run_ring() {
  local name=$1 r; shift
  local out=$work/$name
  for r in 3 2 1; do
    local h=${rank_host[$r]}
    ip netns exec "${prefix}h$h" taskset -c "$(core_of "$h")" "$bin" "${common[@]}" --out "$out" --rank "$r" --peers "$peers" "$@" \
      > "$work/$name.r$r.log" 2>&1 &
  done
  ip netns exec "${prefix}h0" taskset -c "$(core_of 0)" "$bin" "${common[@]}" --out "$out" --rank 0 --peers "$peers" "$@" \
    > "$work/$name.log" 2>&1
  wait
  rate_of "$out"
}

access=(--insecure); [ -n "$key" ] && access=(--key "$key")
echo "bench_two_sites: d$depth, 4 ranks on $cores cores (dilation $dilate); links: $lan_rate in a site, $wan_rate and $wan_delay per queue between; work dir $work" >&2
declare -A vals  # row -> its rounds' ratios
table="" step_costs=()
rows=()
for round in $(seq 1 "$repeat"); do
  alone=$(run_alone "alone-$round")
  row="1 rank (4 jobs at once, no network)"
  table+="| $row | $round | ${alone% *} | - | 1.00x |"$'\n'
  [ "$round" = 1 ] && rows+=("$row")
  for run in "${runs[@]}"; do
    read -r sync wire overlap fragments <<<"$run"
    flags=(--sync "$sync" --sync-every 8 --sync-overlap --overlap-steps "$overlap" --wire "$wire" --sync-fragments "$fragments" "${access[@]}")
    for order in sites unordered; do
      [ "$order" = unordered ] && [ "$unordered" = 0 ] && continue
      extra=(); [ "$order" = sites ] && extra=(--sites "$sites")
      name="ring-$sync-$wire-$overlap-$fragments-$order-$round"
      res=$(run_ring "$name" "${flags[@]}" "${extra[@]}")
      row="4 ranks, --sync $sync --sync-every 8 --sync-overlap --overlap-steps $overlap --wire $wire --sync-fragments $fragments${key:+ --key}"
      if [ "$order" = sites ]; then row+=" --sites $sites (the slow link crossed twice)"; else row+=" (no --sites: crossed four times)"; fi
      r=$(ratio "$res" "$alone")
      table+="| $row | $round | ${res% *} | ${res#* } | $r |"$'\n'
      vals[$row]+="${r%x} "
      [ "$round" = 1 ] && rows+=("$row")
      step_costs+=("$("$py" tools/bench/sync_step_costs.py "$work/$name" 8 "$overlap" "$fragments" "$warmup" "$((steps + warmup))")")
      grep -h "ring order" "$work/$name.log" | head -1 | sed 's/^/  rank 0: /' >&2
    done
  done
done
cpu_line
echo "two sites of two hosts: $lan_rate inside a site, $wan_rate with 'delay $wan_delay loss 0.05%' per queue between the sites (link emulator); $cores cores, dilation $dilate (1 = one core per rank); d$depth; steps $steps after $warmup warm-up"
printf '\n| run | round | tok/s (tokens / time) | network s/step not hidden (mean) | vs 1 rank |\n|---|---|---|---|---|\n'
printf '%s' "$table"
printf '\nWhat the syncs cost rank 0: its steps by what they did, mean seconds each:\n\n'
printf '%s\n' "${step_costs[@]}"
if [ "$repeat" != 1 ]; then
  printf '\nMedians over %s rounds (each ratio taken within its round):\n\n| run | vs 1 rank |\n|---|---|\n' "$repeat"
  # shellcheck disable=SC2086  # a row's ratios are words
  for row in "${rows[@]:1}"; do printf '| %s | %sx |\n' "$row" "$(median %.2f ${vals[$row]})"; done
fi
for pid in $(ip netns pids "${prefix}sw" 2>/dev/null); do
  awk -v t="$(getconf CLK_TCK)" '{printf "link emulator: %.1f s of CPU over the whole benchmark\n", ($14 + $15) / t}' "/proc/$pid/stat"
done
