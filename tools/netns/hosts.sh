#!/usr/bin/env bash
# Simulated hosts for multi-host runs on one machine (root only). Each "host" is a network
# namespace PREFIXhI with one interface eth0 at 10.99.0.(I+1)/24; all hang off a bridge in
# the namespace PREFIXsw, like machines on a switch. Traffic never leaves these namespaces.
#
#   hosts.sh up PREFIX N [--rate 1gbit] [--netem ARGS] [--firewall A-B]   create N hosts
#   hosts.sh firewall PREFIX N A-B | off                    policy-drop firewall, only TCP A-B open
#   hosts.sh down PREFIX N                                  delete them (safe to repeat)
#   hosts.sh addr I                                         address of host I
#
# --rate shapes every link (both directions, tbf) like a real NIC of that speed.
# --netem ARGS makes every link a slow, far one instead (tc netem on both ends, with --rate
# as its rate), e.g. --rate 100mbit --netem "delay 10ms loss 0.05%": a packet between two
# hosts passes two such queues (its host's and the switch port's), so that is 100 Mbit/s,
# 40 ms round trip and about 0.1% loss each way.
# The firewall is the user's: nftables inet table, input chain, policy drop, accepting
# lo, established/related and TCP ports A-B.
set -euo pipefail

cmd=${1:?usage: hosts.sh up|down|firewall|addr ...}

addr() { echo "10.99.0.$(( $1 + 1 ))"; }

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

case "$cmd" in
  addr) addr "${2:?host index}" ;;
  up)
    prefix=${2:?prefix} n=${3:?number of hosts}; shift 3
    rate="" range="" netem=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --netem) netem=$2; shift 2 ;;
        --firewall) range=$2; shift 2 ;;
        *) echo "hosts.sh: unknown option $1" >&2; exit 2 ;;
      esac
    done
    sw="${prefix}sw"
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    for i in $(seq 0 $((n - 1))); do
      ns="${prefix}h$i"
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
      if [ -n "$netem" ]; then
        # shellcheck disable=SC2086  # ARGS are tc words
        ip netns exec "$ns" tc qdisc add dev eth0 root netem ${rate:+rate $rate} $netem limit 10000 2>/dev/null || {
          echo "hosts.sh: tc refused 'netem ${rate:+rate $rate} $netem': this kernel may lack sch_netem (delay and loss need it); run on a kernel with it, or without --netem" >&2
          exit 2
        }
        # shellcheck disable=SC2086
        ip netns exec "$sw" tc qdisc add dev "${prefix}p$i" root netem ${rate:+rate $rate} $netem limit 10000
      elif [ -n "$rate" ]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
        ip netns exec "$sw" tc qdisc add dev "${prefix}p$i" root tbf rate "$rate" burst 256kb latency 50ms
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
    for i in $(seq 0 $((n - 1))); do
      ns="${prefix}h$i"
      # Processes left in a namespace would keep it alive: end them first.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    done
    ip netns del "${prefix}sw" 2>/dev/null || true
    ;;
  *) echo "hosts.sh: unknown command $cmd" >&2; exit 2 ;;
esac
