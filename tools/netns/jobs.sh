# Sourced by the tools/bench/ scripts that run one process per rank (bash only).
# The caller sets: bin (the ringtrain binary), ranks (number of ranks), out (scratch
# directory), prefix (namespace prefix of tools/netns/hosts.sh).

# require_netns_bench NAME: what a namespace benchmark needs (PyTorch for the Gloo baseline
# and the namespace tools, installed when missing; the binary $bin; root), or exit 2 saying which.
require_netns_bench() {
  bash tools/setup.sh --no-build reference netns || exit 1
  [ -x "$bin" ] || { echo "$1: no $bin; build first (meson compile -C build)" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "$1: needs root for network namespaces" >&2; exit 2; }
}

# run_job NAME TIMEOUT MAKE: runs `MAKE R` for every rank R at once (MAKE is a function of
# the rank), waits up to TIMEOUT seconds (then kills them all), keeps rank 0's stdout in
# $out/NAME and "ok" or "timeout" in $out/NAME.status; each rank's output is $out/NAME.R(.err).
run_job() {
  local name=$1 limit=$2 make=$3 pids=() r
  for r in $(seq 0 $((ranks - 1))); do
    $make "$r" >"$out/$name.$r" 2>"$out/$name.$r.err" &
    pids+=($!)
  done
  local deadline=$((SECONDS + limit)) status=ok
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then status=timeout; break; fi
      sleep 0.5
    done
  done
  if [ $status = timeout ]; then
    for p in "${pids[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  fi
  wait 2>/dev/null
  cp "$out/$name.0" "$out/$name"
  echo $status >"$out/$name.status"
}

# --peers of the namespace hosts: rank R at host R's address, port 29500 + R.
peers_ns() {
  local s="" r
  for r in $(seq 0 $((ranks - 1))); do s+="${s:+,}$(tools/netns/hosts.sh addr "$r"):$((29500 + r))"; done
  echo "$s"
}

# Line rate in MB/s (10^6 bytes) of a tc rate: 1gbit -> 125, 100mbit -> 12.5.
line_mbps() {
  case "$1" in
    *gbit) awk -v r="${1%gbit}" 'BEGIN{print r*1000/8}' ;;
    *mbit) awk -v r="${1%mbit}" 'BEGIN{print r/8}' ;;
    *) echo "a rate must end in gbit or mbit, e.g. 1gbit" >&2; return 2 ;;
  esac
}
