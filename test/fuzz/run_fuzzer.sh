#!/usr/bin/env bash
# One fuzz target as a test: usage run_fuzzer.sh BINARY CORPUS_DIR FOUND_DIR
# Runs every input of CORPUS_DIR (the seeds and the regression cases), then fuzzes for
# RINGTRAIN_FUZZ_SECONDS seconds; new inputs go to FOUND_DIR, never into the source tree.
# A crash leaves its input as FOUND_DIR/crash-* and fails the test: copy it into CORPUS_DIR
# (the regression case) when fixing it.
set -euo pipefail
bin=$1 corpus=$2 found=$3
mkdir -p "$found"
seconds=${RINGTRAIN_FUZZ_SECONDS:-12}
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# 1 GiB of RSS and 256 MiB per allocation: a parser that sizes a buffer from a claim fails here.
exec "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=256 -max_len=65536 \
  -artifact_prefix="$found/" -print_final_stats=1 "$found" "$corpus"
