#!/usr/bin/env bash
# Trivial trials/s with the tasks carried by RabbitMQ: `dnnlab run -w 2
# --broker amqp://…` against a private broker (scripts/rabbitmq_test_server.sh)
# and the embedded SQLite store, the same trivial sweep as sched_bench.sh.
# Each size runs REPS times; medians are printed as markdown rows for
# bench/RESULTS.md, and every run is checked: each trial finished once.
#   bench/amqp_bench.sh [BUILD_DIR]      (default build/release)
#   env: SIZES="1000 10000"  REPS=3  PREFETCH=4  WORKERS=2
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release}/src/cli/dnnlab
reps=${REPS:-3}
workers=${WORKERS:-2}
tmp=$(mktemp -d)
broker="$tmp/broker"
trap '"$root/scripts/rabbitmq_test_server.sh" stop "$broker" --rm; rm -rf "$tmp"' EXIT
url=$("$root/scripts/rabbitmq_test_server.sh" start "$broker")
url="$url?prefetch=${PREFETCH:-4}"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run_once YAML N -> "wall_s cpu_s steady_s" (dnnlab's processes; the
# broker's CPU is read from its Erlang VM by beam_cpu)
run_once() {
  rm -f "$tmp/t.db"*
  /usr/bin/time -f "%e %U %S" -o "$tmp/time" \
    "$bin" run -q -w "$workers" --broker "$url" --store "sqlite:$tmp/t.db" "$1" >/dev/null
  local ended attempts steady
  read -r ended attempts steady < <(sqlite3 -separator ' ' "$tmp/t.db" \
    "SELECT count(*), max(attempt), max(finished_at) - min(started_at) FROM trials
     WHERE status = 'finished'")
  [[ $ended -eq $2 && $attempts -eq 1 ]] || { echo "expected $2 trials once, got $ended (max attempt $attempts)" >&2; exit 1; }
  awk -v s="$steady" '{ printf "%s %s %s\n", $1, $2 + $3, s }' "$tmp/time"
}

beam_cpu() {  # user+system seconds of the broker's Erlang VM so far
  local pid
  pid=$(pgrep -f "beam.smp.*-home $broker " | head -1)
  awk '{ print ($14 + $15) / 100 }' "/proc/$pid/stat"
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

echo "| trials in the experiment | workers | wall s | trials/s (wall) | trials/s (steady) | CPU ms/trial (dnnlab) | CPU ms/trial (broker) |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in ${SIZES:-1000 10000}; do
  trivial "$n"
  : >"$tmp/runs"
  for ((r = 0; r < reps; r++)); do
    b0=$(beam_cpu)
    line=$(run_once "$tmp/trivial.yaml" "$n")
    b1=$(beam_cpu)
    echo "$line $(awk -v a="$b0" -v b="$b1" 'BEGIN { print b - a }')" >>"$tmp/runs"
  done
  wall=$(awk '{ print $1 }' "$tmp/runs" | median)
  cpu=$(awk '{ print $2 }' "$tmp/runs" | median)
  steady=$(awk '{ print $3 }' "$tmp/runs" | median)
  bcpu=$(awk '{ print $4 }' "$tmp/runs" | median)
  awk -v n="$n" -v w="$wall" -v c="$cpu" -v s="$steady" -v b="$bcpu" -v k="$workers" \
    'BEGIN { printf "| %d | %d | %.2f | %.0f | %.0f | %.2f | %.2f |\n", n, k, w, n / w, n / s, 1000 * c / n, 1000 * b / n }'
done
