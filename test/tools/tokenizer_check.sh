#!/usr/bin/env bash
# tools/tokenizer_check.py (the prepared files read back from Python, and by tiktoken when it
# is installed) on a fresh `ringtrain data prepare` of this repository's README, cut into
# 10-line documents. tokenizer_check.py exits 77 (skipped) when numpy is missing.
set -euo pipefail
root=${RINGTRAIN_SOURCE_ROOT:?meson test sets it}
bin=${RINGTRAIN_BIN:?meson test sets it}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/in"
split -l 10 -d -a 3 --additional-suffix=.txt "$root/README.md" "$dir/in/readme_"
"$bin" data prepare --input "$dir/in" --out "$dir/data" --vocab 600 --val-fraction 0.2 --quiet
exec "$py" "$root/tools/tokenizer_check.py" "$dir/data"
