#!/usr/bin/env bash
# Scheduling overhead: trivial trials (one training step each, on generated
# data) through `dnnlab run` with its SQLite queue and store, at several
# experiment sizes; and scaling of real Fashion-MNIST trials from 1 to 2
# workers. Each configuration runs REPS times, alternating, and the medians
# are printed as markdown rows for bench/RESULTS.md.
#   bench/sched_bench.sh [BUILD_DIR]        (default build/release)
#   env: SIZES="1000 10000 100000"  REPS=3  TRIALS=32 (real trials)  SCALING=1
#
# Columns: "wall" is the whole command (start-up, dashboard, coordinator,
# workers, final table); "steady" is trials / (last trial end - first trial
# start) from the store, i.e. without start-up and exit; "CPU ms/trial" is the
# user+system time of all processes (workers included) per trial. On a shared
# machine the CPU figure is the stable one: wall time mostly measures the load.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release}/src/cli/dnnlab
reps=${REPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run_once YAML WORKERS -> "wall_s cpu_s steady_s" (and checks every trial ended once)
run_once() {
  rm -f "$tmp/t.db"*
  /usr/bin/time -f "%e %U %S" -o "$tmp/time" \
    "$bin" run -q -w "$2" --store "sqlite:$tmp/t.db" "$1" >/dev/null
  local ended attempts steady
  read -r ended attempts steady < <(sqlite3 -separator ' ' "$tmp/t.db" \
    "SELECT count(*), max(attempt), max(finished_at) - min(started_at) FROM trials
     WHERE status = 'finished'")
  [[ $ended -eq $3 && $attempts -eq 1 ]] || { echo "expected $3 trials once, got $ended (max attempt $attempts)" >&2; exit 1; }
  awk -v s="$steady" '{ printf "%s %s %s\n", $1, $2 + $3, s }' "$tmp/time"
}

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

echo "| trials in the experiment | workers | wall s | trials/s (wall) | trials/s (steady) | CPU ms/trial |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in ${SIZES:-1000 10000 100000}; do
  trivial "$n"
  : >"$tmp/runs"
  for ((r = 0; r < reps; r++)); do run_once "$tmp/trivial.yaml" 2 "$n" >>"$tmp/runs"; done
  wall=$(awk '{ print $1 }' "$tmp/runs" | median)
  cpu=$(awk '{ print $2 }' "$tmp/runs" | median)
  steady=$(awk '{ print $3 }' "$tmp/runs" | median)
  awk -v n="$n" -v w="$wall" -v c="$cpu" -v s="$steady" \
    'BEGIN { printf "| %d | 2 | %.2f | %.0f | %.0f | %.2f |\n", n, w, n / w, n / s, 1000 * c / n }'
done

if [[ ${SCALING:-1} == 1 && -d /usr/share/datasets/fashion-mnist ]]; then
  trials=${TRIALS:-32}
  cat >"$tmp/real.yaml" <<YAML
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
    optimizer: {type: adam, lr: \${lr}}
search:
  method: random
  budget: $trials
  parameters:
    lr: {loguniform: [1.0e-4, 1.0e-2]}
YAML
  : >"$tmp/w1"
  : >"$tmp/w2"
  for ((r = 0; r < reps; r++)); do  # alternating, so that both see the same load
    run_once "$tmp/real.yaml" 1 "$trials" >>"$tmp/w1"
    run_once "$tmp/real.yaml" 2 "$trials" >>"$tmp/w2"
  done
  echo
  echo "| real Fashion-MNIST trials | workers | wall s | trials/hour (wall) | trials/hour (steady) | CPU s/trial | runs (wall s) |"
  echo "|---:|---:|---:|---:|---:|---:|---|"
  for w in 1 2; do
    wall=$(awk '{ print $1 }' "$tmp/w$w" | median)
    steady=$(awk '{ print $3 }' "$tmp/w$w" | median)
    cpu=$(awk '{ print $2 }' "$tmp/w$w" | median)
    runs=$(awk '{ printf "%s%.1f", (NR > 1 ? ", " : ""), $1 }' "$tmp/w$w")
    awk -v n="$trials" -v w="$w" -v t="$wall" -v s="$steady" -v c="$cpu" -v runs="$runs" \
      'BEGIN { printf "| %d | %d | %.1f | %.0f | %.0f | %.2f | %s |\n", n, w, t, n * 3600 / t, n * 3600 / s, c / n, runs }'
  done
  w1=$(awk '{ print $1 }' "$tmp/w1" | median)
  w2=$(awk '{ print $1 }' "$tmp/w2" | median)
  s1=$(awk '{ print $3 }' "$tmp/w1" | median)
  s2=$(awk '{ print $3 }' "$tmp/w2" | median)
  awk -v a="$w1" -v b="$w2" -v c="$s1" -v d="$s2" \
    'BEGIN { printf "\n2 workers / 1 worker: %.2fx (wall medians), %.2fx (steady medians)\n", a / b, c / d }'
fi
