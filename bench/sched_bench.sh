#!/usr/bin/env bash
# Scheduling overhead: trivial trials (one training step each, on generated
# data) through `dnnlab run` with its SQLite queue and store, at several
# experiment sizes; and scaling of real Fashion-MNIST trials from 1 to 2
# workers. Prints markdown rows for bench/RESULTS.md.
#   bench/sched_bench.sh [BUILD_DIR]        (default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release}/src/cli/dnnlab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

trivial() {  # $1 = number of trials
  cat >"$tmp/trivial.yaml" <<YAML
name: trivial
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
  budget: $1
  parameters:
    lr: {loguniform: [1.0e-4, 1.0e-1]}
YAML
}

echo "| trials in the experiment | workers | wall s | trials/s |"
echo "|---:|---:|---:|---:|"
for n in ${SIZES:-1000 10000 100000}; do
  trivial "$n"
  rm -f "$tmp/t.db"*
  start=$(date +%s.%N)
  "$bin" run -q -w 2 --store "sqlite:$tmp/t.db" "$tmp/trivial.yaml" >/dev/null
  end=$(date +%s.%N)
  awk -v n="$n" -v s="$start" -v e="$end" 'BEGIN { printf "| %d | 2 | %.1f | %.0f |\n", n, e - s, n / (e - s) }'
done

if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  cat >"$tmp/real.yaml" <<'YAML'
name: scaling
template:
  data: {dataset: fashion-mnist, validation: 2000, limit_train: 30000}
  model:
    layers:
      - repeat: 2
        dense: 128
        activation: relu
      - dense: 10
  train:
    epochs: 3
    batch_size: 64
    optimizer: {type: adam, lr: ${lr}}
search:
  method: random
  budget: 16
  parameters:
    lr: {loguniform: [1.0e-4, 1.0e-2]}
YAML
  echo
  echo "| real Fashion-MNIST trials | workers | wall s | trials/hour |"
  echo "|---:|---:|---:|---:|"
  for w in 1 2; do
    rm -f "$tmp/r.db"*
    start=$(date +%s.%N)
    "$bin" run -q -w "$w" --store "sqlite:$tmp/r.db" "$tmp/real.yaml" >/dev/null
    end=$(date +%s.%N)
    awk -v w="$w" -v s="$start" -v e="$end" 'BEGIN { printf "| 16 | %d | %.1f | %.0f |\n", w, e - s, 16 * 3600 / (e - s) }'
  done
fi
