#!/usr/bin/env bash
# Weights retention (issue 27): a 10,000-trial sweep of tiny nets through
# `dnnlab run` (SQLite queue and store) with search.keep_weights K = 10 and
# with K = 0, sampling the store every 0.2 s while it runs: how many weights
# rows exist (never more than K), and the database's size (main file + WAL).
# Prints markdown rows for bench/RESULTS.md.
#   bench/weights_bench.sh [BUILD_DIR]     (default build/release)
#   env: TRIALS=10000  WORKERS=2
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release}/src/cli/dnnlab
trials=${TRIALS:-10000}
workers=${WORKERS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sweep() {  # $1 = keep_weights
  cat >"$tmp/s.yaml" <<YAML
name: weights-bound
template:
  data: {dataset: synthetic, limit_train: 64, validation: 64}
  model:
    layers:
      - dense: 10
  train:
    epochs: 1
    batch_size: 64
    optimizer: {type: sgd, lr: \${lr}}
search:
  method: random
  budget: $trials
  keep_weights: $1
  parameters:
    lr: {loguniform: [1.0e-4, 1.0e-1]}
YAML
}

bytes() { stat -c %s "$tmp/t.db" "$tmp/t.db-wal" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

echo "| keep_weights | trials | wall s | max weights rows during the run | rows at the end | kept bytes | store bytes at 20% of the trials | store bytes at the end | freelist pages |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for k in 10 0; do
  sweep "$k"
  rm -f "$tmp/t.db"*
  start=$(date +%s.%N)
  "$bin" run -q -w "$workers" --store "sqlite:$tmp/t.db" "$tmp/s.yaml" >/dev/null &
  pid=$!
  max_rows=0 at20=0
  while kill -0 "$pid" 2>/dev/null; do
    if [[ -f $tmp/t.db ]]; then
      read -r rows ended < <(sqlite3 -separator ' ' "$tmp/t.db" \
        "SELECT (SELECT count(*) FROM trial_weights), (SELECT count(*) FROM trials WHERE status = 'finished')" 2>/dev/null || echo "0 0")
      ((rows > max_rows)) && max_rows=$rows
      ((at20 == 0 && ended >= trials / 5)) && at20=$(bytes)
    fi
    sleep 0.2
  done
  wait "$pid"
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  read -r rows kept ended free < <(sqlite3 -separator ' ' "$tmp/t.db" \
    "SELECT count(*), coalesce(sum(size), 0), (SELECT count(*) FROM trials WHERE status = 'finished'),
            (SELECT freelist_count FROM pragma_freelist_count) FROM trial_weights")
  [[ $ended -eq $trials ]] || { echo "expected $trials finished trials, got $ended" >&2; exit 1; }
  printf "| %s | %s | %.1f | %s | %s | %s | %s | %s | %s |\n" "$k" "$trials" "$wall" "$max_rows" \
    "$rows" "$kept" "$at20" "$(bytes)" "$free"
done
