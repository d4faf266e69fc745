# shellcheck shell=bash disable=SC2154  # $py and $bin: set by the script that sources this
# Shell helpers the benchmark scripts share (sourced, not run). Needs $py (a python3) and $bin (ringtrain).

# The machine's CPU model and its vector flags, printed beside every table.
cpu_line() {
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); flags: $(grep -m1 -o 'avx512[a-z_0-9]*\|avx2\|fma\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
}

# tok/s over a run's step records after WARMUP, COUNT of them (metrics_rate.py): "TOK_PER_S COMM_S".
throughput_of() { "$py" "$(dirname "${BASH_SOURCE[0]}")/metrics_rate.py" "$@"; }

# A / B of two tok/s results ("tok/s comm_s"), as 1.23x; "-" when either has none.
ratio() {
  "$py" -c "import sys; a=sys.argv[1].split()[0]; b=sys.argv[2].split()[0]; print('%.2fx' % (float(a)/float(b)) if a not in '-' and b not in '-' else '-')" "$1" "$2" 2>/dev/null || echo -
}

# The median of some numbers, printed with a printf format; "-" (a run without a result) is skipped.
median() {
  local fmt=$1; shift
  [ $# -gt 0 ] || { printf -; return; }
  printf '%s\n' "$@" | grep -v '^-\|^$' | sort -n | awk -v f="$fmt" '{a[NR]=$1} END {if (NR) printf f, (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else printf "-"}'
}

# The data of the d8 benchmarks as an absolute path: DIR when given, else the kernel
# documentation at vocab 32768, prepared on first use. Needs $bin.
bench_data() {
  local dir=${1:-}
  if [ -z "$dir" ]; then
    dir=data/kdoc-32768
    [ -f "$dir/meta.json" ] || "$bin" data prepare --out "$dir" --vocab 32768 --threads 2 --quiet || return 1
  fi
  (cd "$dir" && pwd)
}

# --key's file: with "new", a job key made in WORK; else KEY as given (empty: none).
bench_key() {
  local key=$1 work=$2
  if [ "$key" = new ]; then
    "$bin" keygen --out "$work/job.key" >/dev/null || return 1
    key=$work/job.key
  fi
  echo "$key"
}
