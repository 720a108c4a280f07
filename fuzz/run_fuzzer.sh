#!/usr/bin/env bash
# Runs one libFuzzer target for SECONDS on a scratch copy of its seed corpus.
# Exit 0 only when it ran that long without a finding; prints the figures that
# bench/RESULTS.md records (executions, exec/s, coverage).
#   fuzz/run_fuzzer.sh build/asan/fuzz/fuzz_run_spec fuzz/corpus/run_spec 20
set -euo pipefail
bin=$(realpath "$1") seeds=$(realpath "$2") seconds=${3:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cp -r "$seeds"/. "$work/corpus/"
cd "$work"   # crash-* files land here; a failure prints their path
# detect_leaks=0: a parse that throws may leave yaml-cpp's memory to exit.
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$bin" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 >"$work/log" 2>&1
status=$?
set -e
if ((status != 0)); then
  tail -n 80 "$work/log"
  echo "fuzz: $(basename "$bin") found a problem; inputs:"
  for f in "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*; do
    [[ -e $f ]] && { echo "  $f"; xxd "$f" | head -20; }
  done
  exit 1
fi
grep -E 'DONE|^stat::' "$work/log"
