#!/usr/bin/env bash
# Trivial trials/s in the cluster shape: `dnnlab run -w 2 --broker amqp://…
# --store postgres://…` against a private RabbitMQ (scripts/rabbitmq_test_server.sh)
# and a private PostgreSQL (initdb + pg_ctl, as tests/store/pg_server.hpp does),
# with the embedded mode (`--store sqlite:…`, the peer) run at each size in
# the same minutes. The sweep is sched_bench.sh's trivial one (one training
# step on 64 generated samples). Every run is checked: each trial finished
# once, at attempt 1. Prints one markdown table for bench/RESULTS.md; both
# servers are stopped and removed after.
#
#   bench/cluster_bench.sh [BUILD_DIR]          (default build/release)
#   env: SIZES="1000 10000 100000"  WORKERS=2  PREFETCH=  (empty: the worker's default)
#        PG_FSYNC=on  (off: the tests' throwaway setting; a store that acks
#                      results it may lose is not the cluster the issue measures)
#        PG_STATS=1   (pg_stat_statements: statements and calls per trial, after each cluster run)
#        PERF=FILE    (perf record -a -g of each cluster run, to FILE.N; PERF_FREQ=499 Hz)
#
# After each cluster run, stderr gets the CPU it cost per trial: dnnlab (the
# `run` process and its workers, user + system), the broker (the Erlang VM)
# and PostgreSQL (postmaster, backends, background writers), from /proc,
# and the broker's message counters per trial (published, confirmed, delivered, acked).
#
# Columns: "wall" is the whole `dnnlab run` (start-up, coordinator, workers,
# final table); "steady" is trials / (last trial end - first trial start)
# from the store; "ratio" is cluster / embedded wall trials/s; "load" is the
# 1-minute load average before and after the cluster run (the machine may be
# shared: compare the ratio, not the absolute figures).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$root/build/release}" && pwd)/src/cli/dnnlab
workers=${WORKERS:-2}
# shellcheck source=bench/cluster_servers.sh
source "$root/bench/cluster_servers.sh"
cluster_servers_start
[[ -n ${PREFETCH:-} ]] && amqp="$amqp?prefetch=$PREFETCH"

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

check() {  # $1 = expected trials, then "ended attempts steady" -> steady seconds
  local n=$1 ended=$2 attempts=$3 steady=$4
  [[ $ended -eq $n && $attempts -eq 1 ]] || { echo "expected $n trials once, got $ended (max attempt $attempts)" >&2; exit 1; }
  echo "$steady"
}

# run_cluster N -> "wall steady load_before load_after"
run_cluster() {
  local n=$1 db="b$1_$RANDOM" l0 wall steady user sys cpu0 cpu1 q0
  psql_ postgres "CREATE DATABASE $db"
  [[ ${PG_STATS:-0} == 1 ]] && psql_ "$db" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()" >/dev/null
  l0=$(loadavg)
  cpu0=$(cpu_snapshot)
  q0=$(amqp_counters)
  local perf=()
  [[ -n ${PERF:-} ]] && perf=(perf record -a -g -F "${PERF_FREQ:-499}" -o "$PERF.$n" --)
  (cd "$tmp" && "${perf[@]}" /usr/bin/time -f "%e %U %S" -o "$tmp/time" \
    "$bin" run -q -w "$workers" --broker "$amqp" --store "$pgurl/$db" "$tmp/trivial.yaml" >/dev/null)
  cpu1=$(cpu_snapshot)
  amqp_report "$n" "$q0" "$(amqp_counters)" | sed "s/^/  cluster $n trials: /" >&2
  read -r wall user sys <"$tmp/time"
  cpu_report "$n" "$cpu0" "$cpu1" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" "$wall" |
    sed "s/^/  cluster $n trials: /" >&2
  steady=$(check "$n" $(psql_ "$db" "SELECT count(*), max(attempt), max(finished_at) - min(started_at)
                                      FROM trials WHERE status = 'finished'" | tr '|' ' '))
  if [[ ${PG_STATS:-0} == 1 ]]; then
    psql_ "$db" "SELECT round(sum(calls)::numeric / $n, 1) || ' statements/trial, ' ||
                        round(sum(total_exec_time)::numeric / $n, 3) || ' ms exec/trial'
                 FROM pg_stat_statements" | sed "s/^/  pg $n trials: /" >&2
    psql_ "$db" "SELECT round(calls::numeric / $n, 2) || ' per trial, ' || round(mean_exec_time::numeric, 3) || ' ms each  '
                        || left(regexp_replace(query, '\s+', ' ', 'g'), 100)
                 FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 16" | sed 's/^/    /' >&2
    psql_ "$db" "SELECT 'commits/trial ' || round(xact_commit::numeric / $n, 2) FROM pg_stat_database
                 WHERE datname = current_database()" | sed 's/^/    /' >&2
  fi
  echo "$wall $steady $l0 $(loadavg)"
  psql_ postgres "DROP DATABASE $db"
}

# run_embedded N -> "wall steady"
run_embedded() {
  local n=$1 wall steady user sys
  rm -f "$tmp/t.db"*
  (cd "$tmp" && /usr/bin/time -f "%e %U %S" -o "$tmp/time" \
    "$bin" run -q -w "$workers" --store "sqlite:$tmp/t.db" "$tmp/trivial.yaml" >/dev/null)
  read -r wall user sys <"$tmp/time"
  awk -v n="$n" -v u="$user" -v s="$sys" -v w="$wall" 'BEGIN {
    printf "  embedded %d trials: CPU ms/trial: dnnlab %.3f (wall %.3f ms/trial)\n", n, (u + s) * 1000 / n, w * 1000 / n }' >&2
  steady=$(check "$n" $(sqlite3 -separator ' ' "$tmp/t.db" \
    "SELECT count(*), max(attempt), max(finished_at) - min(started_at) FROM trials WHERE status = 'finished'"))
  echo "$wall $steady"
}

echo "| trials | cluster wall s | cluster trials/s (wall) | cluster trials/s (steady) | embedded wall s | embedded trials/s (wall) | embedded trials/s (steady) | ratio (wall) | load avg (before–after) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for n in ${SIZES:-1000 10000 100000}; do
  trivial "$n"
  read -r cw cs l0 l1 < <(run_cluster "$n")
  read -r ew es < <(run_embedded "$n")
  awk -v n="$n" -v cw="$cw" -v cs="$cs" -v ew="$ew" -v es="$es" -v l0="$l0" -v l1="$l1" 'BEGIN {
    printf "| %d | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %s–%s |\n",
      n, cw, n / cw, n / cs, ew, n / ew, n / es, (n / cw) / (n / ew), l0, l1 }'
done
