# Sourced by the entry-point scripts that run under `set -e`, right after it: a command that
# fails where the script did not expect it ends the script with one line on stderr naming the
# script, the line and the command, never with a silent exit. (A failed `x=$(...)` under
# `set -e` used to end tools/demo.sh with exit 2 and no word at all.)
#   set -euo pipefail
#   . "$(dirname "${BASH_SOURCE[0]}")/lib/fail_loudly.sh"
# Commands tested by `if`, `||` or `&&` are expected to fail sometimes and say nothing here.
rt_script=${rt_script:-$(basename "$0")}
rt_failed() {
  # Inside $(...) or ( ... ) the subshell's own failure is reported by the command around it.
  [ "${BASH_SUBSHELL:-0}" = 0 ] || return 0
  echo "$rt_script: stopped at line $2: this command failed (exit $1): $3" >&2
}
set -E
trap 'rt_failed $? $LINENO "$BASH_COMMAND"' ERR
