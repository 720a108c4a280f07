#!/usr/bin/env bash
# Real Fashion-MNIST trials/hour, cluster mode against the embedded mode on
# the same machine in the same minutes (issue 15: within 10%). One small real
# sweep (MLPs on Fashion-MNIST, a few seconds per trial) run by `dnnlab run
# -w 2` both ways, alternating, ROUNDS times each:
#   embedded: --store sqlite:FILE (the queue in the same file)
#   cluster:  --broker amqp://… --store postgres://… against a private RabbitMQ
#             (scripts/rabbitmq_test_server.sh) and a private PostgreSQL
#             (initdb + pg_ctl, fsync on, as bench/cluster_bench.sh does)
# The order flips every round (cluster first in odd rounds). Every run is
# checked: each trial finished once, at attempt 1, each config once. Prints
# one markdown row per run and a summary (medians, ratio range) for
# bench/RESULTS.md; both servers are stopped and removed after.
#
#   flock /tmp/bench.lock bench/cluster_fashion_bench.sh [BUILD_DIR]   (default build/release)
#   env: ROUNDS=3  WORKERS=2  EPOCHS=2  LIMIT_TRAIN=30000
#        PG_FSYNC=on  (off: the tests' throwaway setting)
#
# trials/hour = trials * 3600 / wall seconds of the whole `dnnlab run`
# (start-up, coordinator, workers, final table). "load" is the 1-minute load
# average before and after each run (the machine may be shared: compare the
# ratio within a round, not absolute figures across days).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$root/build/release}" && pwd)/src/cli/dnnlab
workers=${WORKERS:-2}
rounds=${ROUNDS:-3}
data=${DNNLAB_DATA_DIR:-/usr/share/datasets}/fashion-mnist
# shellcheck source=bench/cluster_servers.sh
source "$root/bench/cluster_servers.sh"
[[ -d $data ]] || { echo "no Fashion-MNIST in $data" >&2; exit 1; }

cluster_servers_start

# 32 trials: depth x width x lr, 2 epochs on 30,000 images (about 2 s each).
cat >"$tmp/fashion.yaml" <<YAML
name: fashion-bench
template:
  data: {dataset: fashion-mnist, validation: 2000, limit_train: ${LIMIT_TRAIN:-30000}}
  model:
    layers:
      - repeat: \${depth}
        dense: \${width}
        activation: relu
      - dense: 10
  train:
    epochs: ${EPOCHS:-2}
    batch_size: 64
    optimizer: {type: adam, lr: \${lr}}
search:
  method: grid
  seed: 1
  metric: val_acc
  mode: max
  parameters:
    depth: [1, 2, 3, 4]
    width: [64, 128]
    lr: [3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2]
scheduler:
  type: fifo
YAML
n=32

# "finished max_attempt distinct_configs steady_seconds" must say every trial once.
check() {  # MODE FINISHED ATTEMPTS CONFIGS
  [[ $2 -eq $n && $3 -eq 1 && $4 -eq $n ]] ||
    { echo "$1: expected $n trials once, got $2 finished, max attempt $3, $4 distinct configs" >&2; exit 1; }
}

run_cluster() {  # -> "wall load_before load_after"
  local db="f$1_$RANDOM" l0 wall
  psql_ postgres "CREATE DATABASE $db"
  l0=$(loadavg)
  (cd "$tmp" && /usr/bin/time -f "%e" -o "$tmp/time" \
    "$bin" run -q -w "$workers" --broker "$amqp" --store "$pgurl/$db" "$tmp/fashion.yaml" >"$tmp/run.log" 2>&1) ||
    { cat "$tmp/run.log" >&2; exit 1; }
  wall=$(cat "$tmp/time")
  check cluster $(psql_ "$db" "SELECT count(*) FILTER (WHERE status = 'finished'), max(attempt), count(DISTINCT config)
                               FROM trials" | tr '|' ' ')
  echo "$wall $l0 $(loadavg)"
  psql_ postgres "DROP DATABASE $db"
}

run_embedded() {  # -> "wall load_before load_after"
  local l0 wall
  rm -f "$tmp/t.db"*
  l0=$(loadavg)
  (cd "$tmp" && /usr/bin/time -f "%e" -o "$tmp/time" \
    "$bin" run -q -w "$workers" --store "sqlite:$tmp/t.db" "$tmp/fashion.yaml" >"$tmp/run.log" 2>&1) ||
    { cat "$tmp/run.log" >&2; exit 1; }
  wall=$(cat "$tmp/time")
  check embedded $(sqlite3 -separator ' ' "$tmp/t.db" \
    "SELECT count(*) FILTER (WHERE status = 'finished'), max(attempt), count(DISTINCT config) FROM trials")
  echo "$wall $l0 $(loadavg)"
}

row() {  # ROUND MODE WALL L0 L1
  awk -v r="$1" -v m="$2" -v w="$3" -v n="$n" -v l0="$4" -v l1="$5" 'BEGIN {
    printf "| %d | %s | %d | %.1f | %.0f | %s–%s |\n", r, m, n, w, n * 3600 / w, l0, l1 }'
}

echo "| round | mode | trials | wall s | trials/hour | load avg (before–after) |"
echo "|---:|---|---:|---:|---:|---|"
: >"$tmp/walls"
for r in $(seq 1 "$rounds"); do
  if ((r % 2)); then order="cluster embedded"; else order="embedded cluster"; fi
  for mode in $order; do
    read -r w l0 l1 < <(run_"$mode" "$r")
    row "$r" "$mode" "$w" "$l0" "$l1"
    echo "$r $mode $w" >>"$tmp/walls"
  done
done

# Per round: ratio = cluster trials/hour / embedded trials/hour = embedded wall / cluster wall.
python3 - "$tmp/walls" "$n" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
n = int(sys.argv[2])
walls = {}
for r, mode, w in rows:
    walls.setdefault(int(r), {})[mode] = float(w)
c = [n * 3600 / walls[r]["cluster"] for r in sorted(walls)]
e = [n * 3600 / walls[r]["embedded"] for r in sorted(walls)]
ratio = [x / y for x, y in zip(c, e)]
print()
print(f"cluster trials/hour: median {statistics.median(c):.0f} (range {min(c):.0f}–{max(c):.0f}); "
      f"embedded: median {statistics.median(e):.0f} (range {min(e):.0f}–{max(e):.0f}); "
      f"ratio cluster/embedded per round: median {statistics.median(ratio):.3f} "
      f"(range {min(ratio):.3f}–{max(ratio):.3f}; {', '.join(f'{x:.3f}' for x in ratio)})")
PY
