#!/usr/bin/env bash
# Several hosts on one machine: the server host (coordinator, RabbitMQ,
# PostgreSQL) in one network namespace, two worker hosts in two others,
# joined by veth pairs on private 10.x addresses this script creates and
# removes (also on failure or Ctrl-C).
#
#   sudo tests/cluster/netns_test.sh [BUILD_DIR|DNNLAB_BINARY]   # default build-rel
#   ctest --test-dir build/release -R cluster.netns   # registered as cluster.netns
#
#        dlc-w1-PID 10.231.1.2 ──veth── 10.231.1.1 ┐
#                                                  dlc-srv-PID: rabbitmq and postgres
#        dlc-w2-PID 10.231.2.2 ──veth── 10.231.2.1 ┘   (0.0.0.0), dnnlab run -w 1
#
# 1. A sweep completes with every trial once, trained on both worker hosts.
# 2. A second sweep with long trials: once a trial of a worker host has an
#    epoch in the store, that host's link is cut (ip link set down), nothing
#    else: its processes keep running, cut off from the broker and the store.
#    RabbitMQ notices by AMQP heartbeats and redelivers; the trial completes
#    on another host, once (attempt 2), and the sweep completes.
#
# Workers reach both the broker and the store (postgres://, over TCP) only
# through their veth. PostgreSQL runs with short TCP keepalives, so a
# transaction the cut host left open (a row lock) ends within seconds.
#
# It needs root and `ip netns` (CAP_SYS_ADMIN), which some containers
# refuse. Exit 0 on success, 1 on failure, 77 when it cannot run (not root,
# no `ip`, no rabbitmq-server, no PostgreSQL server or psql); under CI (env
# CI set) 1.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build-rel}
if [[ -f $build && -x $build ]]; then
  bin=$build
else
  bin=$(find "$build" -name dnnlab -type f -perm -u+x -path '*cli*' | head -1)
fi

cannot_run() {
  echo "netns_test: cannot run: $1" >&2
  [[ -n ${CI:-} ]] && exit 1
  exit 77
}
[[ $(id -u) == 0 ]] || cannot_run "needs root (ip netns)"
command -v ip >/dev/null || cannot_run "no ip (iproute2)"
command -v psql >/dev/null || cannot_run "no psql"
[[ -x ${DNNLAB_PG_BINDIR:-/usr/lib/postgresql/15/bin}/initdb ]] || cannot_run "no PostgreSQL server"
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || cannot_run "no rabbitmq-server"
[[ -n $bin ]] || cannot_run "no dnnlab binary under $build"

tag=$$
srv=dlc-srv-$tag w1=dlc-w1-$tag w2=dlc-w2-$tag
tmp=$(mktemp -d /tmp/dnnlab-netns.XXXXXX)
pids=()

cleanup() {
  local rc=$?
  set +e
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # Anything left in the worker hosts (slots, cut-off ones too) is ours.
  for ns in "$w1" "$w2"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  if [[ -f $tmp/broker/ports ]]; then
    ip netns exec "$srv" "$src/scripts/rabbitmq_test_server.sh" stop "$tmp/broker" --rm \
      >/dev/null 2>&1
  fi
  if [[ -f $tmp/pg/data_dir ]]; then
    ip netns exec "$srv" "$src/scripts/postgres_test_server.sh" stop "$tmp/pg" >/dev/null 2>&1
  fi
  # Deleting a namespace deletes the veth ends in it, and so their peers.
  for ns in "$srv" "$w1" "$w2"; do ip netns del "$ns" 2>/dev/null; done
  if ((rc != 0)); then
    echo "netns_test: FAILED (exit $rc); logs:" >&2
    tail -n 20 "$tmp"/*.log >&2 2>/dev/null
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "netns_test: FAIL: $*" >&2
  exit 1
}

# --- the three hosts -------------------------------------------------------
ip netns add "$srv" || cannot_run "ip netns add refused"
ip netns add "$w1"
ip netns add "$w2"
for ns in "$srv" "$w1" "$w2"; do ip -n "$ns" link set lo up; done
for i in 1 2; do
  w=dlc-w$i-$tag
  # Created inside the namespaces: nothing appears in the host's namespace.
  ip -n "$srv" link add "s$i" type veth peer name "eth0" netns "$w"
  ip -n "$srv" addr add "10.231.$i.1/24" dev "s$i"
  ip -n "$srv" link set "s$i" up
  ip -n "$w" addr add "10.231.$i.2/24" dev eth0
  ip -n "$w" link set eth0 up
done

# --- the server host: broker and store -------------------------------------
url=$(DNNLAB_TEST_RABBITMQ_ADDRESS=0.0.0.0 ip netns exec "$srv" \
  "$src/scripts/rabbitmq_test_server.sh" start "$tmp/broker")
port=${url##*:}
port=${port%%/*}
# The store, also on all of the server host's addresses; workers reach it
# at 10.231.{1,2}.1.
pg=$(DNNLAB_TEST_POSTGRES_ADDRESS=0.0.0.0 \
  DNNLAB_TEST_POSTGRES_OPTIONS="-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3" \
  ip netns exec "$srv" "$src/scripts/postgres_test_server.sh" start "$tmp/pg")
pgport=${pg##*:}
pgport=${pgport%%/*}
store_at() { echo "postgres://postgres@$1:$pgport/postgres"; }
db=$(store_at 127.0.0.1)
# heartbeat=4: the broker drops a connection silent for ~8 s; a worker's
# own connection answers every 250 ms while it trains (keep_alive), its
# lease keeper's every lease/4 = 1 s (src/queue/README.md).
# prefetch=1&prefetch_max=1: one trial per slot, fixed. The worker's adaptive
# prefetch would hold two trials of seconds per slot (one training, one
# waiting), so the first slots to consume would take all six trials and a
# later host none.
broker_at() { echo "amqp://guest:guest@$1:$port/%2f?heartbeat=4&prefetch=1&prefetch_max=1"; }
echo "netns_test: broker $url, store $pg in $srv; workers reach them at 10.231.{1,2}.1:$port, :$pgport"

sweep() { # NAME LIMIT_TRAIN EPOCHS
  cat <<YAML
name: $1
template:
  data: {dataset: synthetic, limit_train: $2, validation: 64}
  model:
    layers:
      - repeat: \${depth}
        dense: 64
        activation: \${activation}
      - dense: 10
  train:
    epochs: $3
    batch_size: 32
    optimizer: {type: sgd, lr: 0.05}
search:
  method: grid
  parameters:
    depth: [1, 2, 3]
    activation: [relu, tanh]
YAML
}

q() { ip netns exec "$srv" psql -X -q -At -v ON_ERROR_STOP=1 "$db" -c "$1"; }

# A 2-slot worker on each worker host, serving any running experiment; up
# before the first sweep is published, so both hosts get trials.
ip netns exec "$srv" "$bin" status --store "$db" >/dev/null # the store's schema, made once
for i in 1 2; do
  ip netns exec "dlc-w$i-$tag" "$bin" worker --slots 2 --id "w$i" --lease 4 \
    --broker "$(broker_at "10.231.$i.1")" --store "$(store_at "10.231.$i.1")" >"$tmp/w$i.log" 2>&1 &
  pids+=($!)
done
# Up means registered in the store (each slot does so before it looks for
# work, and then lists the running experiments every second): trials of
# ~2 s on a quiet machine would otherwise all be taken before a host that
# was still connecting asks.
slots_up() {
  [[ $(q "SELECT count(*) FROM workers WHERE id IN ('w1-0', 'w1-1', 'w2-0', 'w2-1') AND NOT gone" \
    2>/dev/null) == 4 ]]
}
for _ in $(seq 1 600); do
  slots_up && break
  sleep 0.1
done
slots_up || fail "the worker hosts' four slots did not register within 60 s"

# Runs a sweep on the server host (coordinator + one local worker) to its end.
run_sweep() { # NAME LIMIT_TRAIN EPOCHS
  sweep "$1" "$2" "$3" >"$tmp/$1.yaml"
  ip netns exec "$srv" "$bin" run -q -w 1 --lease 4 --broker "$(broker_at 127.0.0.1)" \
    --store "$db" "$tmp/$1.yaml" >"$tmp/$1-run.log" 2>&1 &
  coord=$!
  pids+=("$coord")
}

expect_each_trial_once() { # EXPERIMENT_ID
  local n
  echo "netns_test: experiment $1's trials (id|status|attempt|worker|error):" >&2
  q "SELECT id, status, attempt, worker, left(error, 160) FROM trials WHERE experiment_id = $1 ORDER BY id" >&2
  n=$(q "SELECT count(*) FROM trials WHERE experiment_id = $1")
  [[ $n == 6 ]] || fail "experiment $1 has $n trials, not 6"
  n=$(q "SELECT count(*) FROM trials WHERE experiment_id = $1 AND status = 'finished'")
  [[ $n == 6 ]] || fail "experiment $1: $n of 6 trials finished"
  n=$(q "SELECT count(DISTINCT config) FROM trials WHERE experiment_id = $1")
  [[ $n == 6 ]] || fail "experiment $1: $n distinct configs"
}

# --- 1. a sweep across the hosts -------------------------------------------
run_sweep across 4000 40 # trials of 3-4 s on a quiet machine
wait "$coord" || fail "dnnlab run (sweep 1) exited $?"
expect_each_trial_once 1
for i in 1 2; do
  n=$(q "SELECT count(*) FROM trials WHERE experiment_id = 1 AND worker LIKE 'w$i-%'")
  ((n > 0)) || fail "sweep 1: no trial trained on host w$i"
  echo "netns_test: sweep 1: host w$i trained $n trials"
done
[[ $(q "SELECT max(attempt) FROM trials WHERE experiment_id = 1") == 1 ]] ||
  fail "sweep 1: a trial ran twice"

# --- 2. a worker host cut off mid-trial ------------------------------------
# Trials of ~10 s; the first worker host seen training one past its first
# epoch is cut off.
run_sweep cutoff 4000 80
victim= host=
for _ in $(seq 1 1200); do
  row=$(q "SELECT t.id, substr(w.id, 1, 2) FROM trials t JOIN workers w ON w.current_trial = t.id
           WHERE t.experiment_id = 2 AND t.status = 'running' AND w.id ~ '^w[12]-'
             AND EXISTS (SELECT 1 FROM epochs e WHERE e.trial_id = t.id) LIMIT 1" \
    2>/dev/null || true)
  if [[ -n $row ]]; then
    victim=${row%%|*} host=${row#*|}
    break
  fi
  sleep 0.1
done
[[ -n $victim ]] || fail "no trial on a worker host reached an epoch"
# The link down cuts the host off from the broker and the store; its
# processes run on.
ip -n "dlc-$host-$tag" link set eth0 down
echo "netns_test: host $host cut off (link down) while training trial $victim"
wait "$coord" || fail "dnnlab run (sweep 2) exited $?"
expect_each_trial_once 2
row=$(q "SELECT attempt, worker FROM trials WHERE id = $victim")
[[ ${row%%|*} == 2 ]] || fail "trial $victim: attempt ${row%%|*}, not 2 (once more, elsewhere)"
[[ ${row#*|} != "$host"-* ]] || fail "trial $victim finished on the cut-off host ${row#*|}"
echo "netns_test: trial $victim completed once more on ${row#*|} (attempt 2)"
echo "netns_test: PASS"
