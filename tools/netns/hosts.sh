#!/usr/bin/env bash
# Simulated hosts for multi-host runs on one machine (root only). Each "host" is a network
# namespace PREFIXhI with one interface eth0 at 10.99.0.(I+1)/24; all hang off a bridge in
# the namespace PREFIXsw, like machines on a switch. Traffic never leaves these namespaces.
#
#   hosts.sh up PREFIX N [--rate 1gbit] [--netem ARGS] [--link-emulator [--link-cpus A,B]] [--firewall A-B]
#                                                           create N hosts
#   hosts.sh firewall PREFIX N A-B | off                    policy-drop firewall, only TCP A-B open
#   hosts.sh down PREFIX N                                  delete them (safe to repeat)
#   hosts.sh addr I                                         address of host I
#   hosts.sh sites PREFIX N [--rate 1gbit] [--wan-rate 100mbit] [--wan-netem ARGS] [--cpus C] [--firewall A-B]
#                                                           N hosts at two sites
#
# `sites` makes two sites of N/2 hosts each (N even): hosts 0 .. N/2-1 on the bridge of the
# switch namespace PREFIXsa, the others on PREFIXsb, every host link shaped to --rate (tbf),
# and the two switches joined by one slow, far link: the link emulator (below) between a tap
# wan0 on each bridge, with --wan-rate and the path of two netem queues --wan-netem (default
# "delay 10ms loss 0.05%": 40 ms round trip, about 0.1% loss each way), run in PREFIXsw. All
# hosts share one subnet (10.99.0.0/24), as two offices bridged over a VPN would. --cpus C:
# the emulator's two delivery threads run on cores 0..C-1 (default: where the scheduler puts
# them).
#
# --rate shapes every link (both directions, tbf) like a real NIC of that speed.
# --netem ARGS makes every link a slow, far one instead (tc netem on both ends, with --rate
# as its rate), e.g. --rate 100mbit --netem "delay 10ms loss 0.05%": a packet between two
# hosts passes two such queues (its host's and the switch port's), so that is 100 Mbit/s,
# 40 ms round trip and about 0.1% loss each way.
#
# Kernels without sch_netem (tc refuses netem; tried on the switch namespace's lo first), or
# --link-emulator: the two hosts (N must be 2) are joined by the userspace link emulator
# (tools/netns/link_emulator.cpp, build/tools/netns/link-emulator, or $RINGTRAIN_LINK_EMULATOR)
# instead of the bridge: each eth0 is a tap, and the emulator, running in PREFIXsw, carries
# frames between them. It is given the whole path of the two netem queues, one queue per
# direction: --rate as is, twice the netem delay one way, and loss 1-(1-p)^2 (p the netem
# loss), limit 10000 frames. "--rate 100mbit --netem 'delay 10ms loss 0.05%'" thus gives the
# same 100 Mbit/s, 40 ms round trip and 0.1% loss each way. Only "delay T" and "loss P%" are
# understood there. --link-cpus A,B: the cores the processes of host 0 and host 1 run on;
# the emulator delivers into each host from that host's core (the receiving network stack
# runs in that delivery: a real host does that work on its own CPU), else where the
# scheduler puts it. `down` stops it (SIGTERM) with the namespaces; its log is
# ${TMPDIR:-/tmp}/PREFIX-link-emulator.log while it runs.
# The firewall is the user's: nftables inet table, input chain, policy drop, accepting
# lo, established/related and TCP ports A-B.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/fail_loudly.sh"

cmd=${1:?usage: hosts.sh up|sites|down|firewall|addr ...}

addr() { echo "10.99.0.$(( $1 + 1 ))"; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
emulator_log() { echo "${TMPDIR:-/tmp}/$1-link-emulator.log"; }

# The link emulator's binary: $RINGTRAIN_LINK_EMULATOR, else beside $RINGTRAIN_BIN's build,
# else the source tree's build/.
emulator_bin() {
  local c
  if [ -n "${RINGTRAIN_LINK_EMULATOR:-}" ]; then c=$RINGTRAIN_LINK_EMULATOR
  elif [ -n "${RINGTRAIN_BIN:-}" ] && [ -x "$(dirname "$RINGTRAIN_BIN")/tools/netns/link-emulator" ]; then
    c=$(dirname "$RINGTRAIN_BIN")/tools/netns/link-emulator
  else c=$here/../../build/tools/netns/link-emulator
  fi
  [ -x "$c" ] || { echo "hosts.sh: the link emulator $c is not built; run 'meson compile -C build' (or set RINGTRAIN_LINK_EMULATOR)" >&2; return 1; }
  echo "$c"
}

# The emulator's flags for the path of two netem queues with ARGS (see the header).
emulator_flags() {
  local words delay="" loss=""
  read -r -a words <<< "$1"
  while [ ${#words[@]} -gt 0 ]; do
    case "${words[0]}" in
      delay) delay=${words[1]:-}; words=("${words[@]:2}") ;;
      loss) if [ "${words[1]:-}" = random ]; then words=("${words[@]:1}"); fi
            loss=${words[1]:-}; words=("${words[@]:2}") ;;
      *) echo "hosts.sh: the link emulator (no sch_netem here, or --link-emulator) takes only 'delay T' (no jitter) and 'loss P%' from --netem, not '${words[0]}'" >&2; return 2 ;;
    esac
  done
  if [ -n "$delay" ]; then
    [[ $delay =~ ^([0-9]+(\.[0-9]+)?)(s|ms|us)$ ]] || { echo "hosts.sh: netem delay '$delay': give it as e.g. 10ms, 500us or 1s" >&2; return 2; }
    echo "--delay $(awk -v v="${BASH_REMATCH[1]}" 'BEGIN { printf "%.9g", 2 * v }')${BASH_REMATCH[3]}"
  fi
  if [ -n "$loss" ]; then
    [[ $loss =~ ^([0-9]+(\.[0-9]+)?)%$ ]] || { echo "hosts.sh: netem loss '$loss': give it as a percentage, e.g. 0.05%" >&2; return 2; }
    echo "--loss $(awk -v p="${BASH_REMATCH[1]}" 'BEGIN { printf "%.9g", 100 * (1 - (1 - p / 100) ^ 2) }')%"
  fi
}

# Ends the processes in namespace $1: SIGTERM, then SIGKILL after 2 s.
stop_pids() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null) || return 0
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for _ in $(seq 20); do
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    [ -n "$pids" ] || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
}

firewall() {
  local ns=$1 range=$2
  ip netns exec "$ns" nft delete table inet rtfw 2>/dev/null || true
  [ "$range" = off ] && return 0
  ip netns exec "$ns" nft -f - <<NFT
table inet rtfw {
  chain input {
    type filter hook input priority 0; policy drop;
    iif lo accept
    ct state established,related accept
    tcp dport $range accept
  }
}
NFT
}

# Host I: namespace PREFIXhI with eth0 (a veth) at addr I on the bridge br0 of switch
# namespace SW, the link shaped to RATE (tbf, both directions) when one is given.
host_on_bridge() {
  local prefix=$1 i=$2 sw=$3 rate=$4
  local ns="${prefix}h$i"
  ip netns add "$ns"
  ip link add "${prefix}v$i" type veth peer name "${prefix}p$i"
  ip link set "${prefix}v$i" netns "$ns"
  ip link set "${prefix}p$i" netns "$sw"
  ip -n "$ns" link set "${prefix}v$i" name eth0
  ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$sw" link set "${prefix}p$i" master br0
  ip -n "$sw" link set "${prefix}p$i" up
  if [ -n "$rate" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
    ip netns exec "$sw" tc qdisc add dev "${prefix}p$i" root tbf rate "$rate" burst 256kb latency 50ms
  fi
}

# Starts the link emulator in namespace $1 with the rest as its arguments; waits for "ready".
start_emulator() {
  local sw=$1 prefix=$2; shift 2
  local emulator log pid
  emulator=$(emulator_bin) || return 1
  log=$(emulator_log "$prefix")
  ip netns exec "$sw" "$emulator" "$@" --limit 10000 < /dev/null > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    grep -q '^ready$' "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "hosts.sh: the link emulator did not start: $(tr '\n' ' ' < "$log")" >&2
  return 1
}

case "$cmd" in
  addr) addr "${2:?host index}" ;;
  sites)
    prefix=${2:?prefix} n=${3:?number of hosts}; shift 3
    if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ] || [ $((n % 2)) != 0 ]; then
      echo "hosts.sh: sites needs an even number of hosts (2 or more), not '$n'" >&2
      exit 2
    fi
    rate=1gbit wan_rate=100mbit wan_netem="delay 10ms loss 0.05%" range="" cpus=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --wan-rate) wan_rate=$2; shift 2 ;;
        --wan-netem) wan_netem=$2; shift 2 ;;
        --cpus)
          [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "hosts.sh: --cpus '${2:-}': give a number of cores, e.g. 2" >&2; exit 2; }
          cpus=$2; shift 2 ;;
        --firewall) range=$2; shift 2 ;;
        *) echo "hosts.sh: unknown option $1" >&2; exit 2 ;;
      esac
    done
    flags=$(emulator_flags "$wan_netem") || exit 2
    ip netns add "${prefix}sw"
    for site in a b; do
      sw="${prefix}s$site"
      ip netns add "$sw"
      ip -n "$sw" link add br0 type bridge
      ip -n "$sw" link set br0 up
      # The site's end of the slow link; as long a queue as the emulator's limit (see `up`).
      ip -n "$sw" tuntap add dev wan0 mode tap
      ip -n "$sw" link set wan0 txqueuelen 10000 master br0
      ip -n "$sw" link set wan0 up
    done
    for i in $(seq 0 $((n - 1))); do
      site=a; [ "$i" -lt $((n / 2)) ] || site=b
      host_on_bridge "$prefix" "$i" "${prefix}s$site" "$rate"
      if [ -n "$range" ]; then firewall "${prefix}h$i" "$range"; fi
    done
    pin=""; [ -n "$cpus" ] && pin="--cpu-a 0 --cpu-b $(( cpus > 1 ? 1 : 0 ))"
    # shellcheck disable=SC2086  # flags are words
    start_emulator "${prefix}sw" "$prefix" --ns-a "${prefix}sa" --ns-b "${prefix}sb" --tap wan0 --rate "$wan_rate" $flags $pin || exit 1
    ;;
  up)
    prefix=${2:?prefix} n=${3:?number of hosts}; shift 3
    rate="" range="" netem="" emulate=0 link_cpus=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --netem) netem=$2; shift 2 ;;
        --link-emulator) emulate=1; shift ;;
        --link-cpus)
          [[ ${2:-} =~ ^([0-9]+),([0-9]+)$ ]] || { echo "hosts.sh: --link-cpus '${2:-}': give the cores of host 0 and host 1, e.g. 0,1" >&2; exit 2; }
          link_cpus="--cpu-a ${BASH_REMATCH[1]} --cpu-b ${BASH_REMATCH[2]}"; shift 2 ;;
        --firewall) range=$2; shift 2 ;;
        *) echo "hosts.sh: unknown option $1" >&2; exit 2 ;;
      esac
    done
    sw="${prefix}sw"
    ip netns add "$sw"
    if [ -n "$netem" ] && [ "$emulate" = 0 ]; then
      # Does this kernel have sch_netem? Tried on the switch namespace's own lo.
      if ip netns exec "$sw" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
        ip netns exec "$sw" tc qdisc del dev lo root
      else
        emulate=1
      fi
    fi
    if [ "$emulate" = 1 ]; then
      [ "$n" = 2 ] || { echo "hosts.sh: the link emulator (no sch_netem here, or --link-emulator) joins exactly 2 hosts, not $n" >&2; exit 2; }
      flags=$(emulator_flags "$netem") || exit 2
      emulator=$(emulator_bin) || exit 1
      for i in 0 1; do
        ns="${prefix}h$i"
        ip netns add "$ns"
        ip -n "$ns" tuntap add dev eth0 mode tap
        ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
        # A tap drops what its reader has not taken yet beyond txqueuelen frames: as long as
        # netem's limit, so that a burst while the emulator waits for a core is not lost.
        ip -n "$ns" link set eth0 txqueuelen 10000 up
        ip -n "$ns" link set lo up
        if [ -n "$range" ]; then firewall "$ns" "$range"; fi
      done
      # shellcheck disable=SC2086  # flags are words
      start_emulator "$sw" "$prefix" --ns-a "${prefix}h0" --ns-b "${prefix}h1" ${rate:+--rate "$rate"} $flags $link_cpus || exit 1
      exit 0
    fi
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    for i in $(seq 0 $((n - 1))); do
      ns="${prefix}h$i"
      tbf=""; [ -z "$netem" ] && tbf=$rate
      host_on_bridge "$prefix" "$i" "$sw" "$tbf"
      if [ -n "$netem" ]; then
        # shellcheck disable=SC2086  # ARGS are tc words
        ip netns exec "$ns" tc qdisc add dev eth0 root netem ${rate:+rate $rate} $netem limit 10000 2>/dev/null || {
          echo "hosts.sh: tc refused 'netem ${rate:+rate $rate} $netem'; check the words of --netem (see tc-netem(8))" >&2
          exit 2
        }
        # shellcheck disable=SC2086
        ip netns exec "$sw" tc qdisc add dev "${prefix}p$i" root netem ${rate:+rate $rate} $netem limit 10000
      fi
      if [ -n "$range" ]; then firewall "$ns" "$range"; fi
    done
    ;;
  firewall)
    prefix=${2:?prefix} n=${3:?number of hosts} range=${4:?A-B or off}
    for i in $(seq 0 $((n - 1))); do firewall "${prefix}h$i" "$range"; done
    ;;
  down)
    prefix=${2:?prefix} n=${3:?number of hosts}
    stop_pids "${prefix}sw"  # the link emulator, if any: before its taps go
    rm -f "$(emulator_log "$prefix")"
    for i in $(seq 0 $((n - 1))); do
      ns="${prefix}h$i"
      # Processes left in a namespace would keep it alive: end them first.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    done
    # `sites` made two site switches besides the one the emulator runs in.
    for sw in "${prefix}sw" "${prefix}sa" "${prefix}sb"; do ip netns del "$sw" 2>/dev/null || true; done
    ;;
  *) echo "hosts.sh: unknown command $cmd" >&2; exit 2 ;;
esac
