#!/usr/bin/env bash
# tools/reference/tokenizer_check.py (the prepared files read back from Python, and by tiktoken when it
# is installed) on a fresh `ringtrain data prepare` of this repository's README and docs/,
# cut into 10-line documents. tokenizer_check.py exits 77 (skipped) when numpy is missing.
set -euo pipefail
root=${RINGTRAIN_SOURCE_ROOT:?meson test sets it}
bin=${RINGTRAIN_BIN:?meson test sets it}
py=${RINGTRAIN_PYTHON:-/usr/bin/python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/in"
cat "$root/README.md" "$root"/docs/*.md | split -l 10 -d -a 4 --additional-suffix=.txt - "$dir/in/doc_"
"$bin" data prepare --input "$dir/in" --out "$dir/data" --vocab 600 --val-fraction 0.2 --quiet
exec "$py" "$root/tools/reference/tokenizer_check.py" "$dir/data"
