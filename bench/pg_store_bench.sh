#!/usr/bin/env bash
# Trivial trials through the PostgreSQL store: `dnnlab run -w 2 --broker
# sqlite:… --store postgres://…` against a private server (initdb + pg_ctl in
# a temp dir, statements logged), for two dnnlab binaries in the same run,
# alternated, each on a fresh database: trials/s, statements and commits per
# trial (the server's log and pg_stat_database), and a check that each trial
# finished once with all its epochs.
#   bench/pg_store_bench.sh BEFORE_BIN AFTER_BIN
#   env: N=300 EPOCHS=3 REPS=3 WORKERS=2 PG_BINDIR=/usr/lib/postgresql/15/bin
set -euo pipefail
before=$1 after=$2
n=${N:-300} epochs=${EPOCHS:-3} reps=${REPS:-3} workers=${WORKERS:-2}
bindir=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
tmp=$(mktemp -d)
as=""
if [[ $(id -u) -eq 0 ]]; then chown postgres "$tmp"; as="runuser -u postgres --"; fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$as "$bindir/initdb" -D "$tmp/data" -U postgres -A trust --no-sync -E UTF8 >/dev/null
$as "$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -o "-F -h 127.0.0.1 -p $port -k $tmp -c log_statement=all" start >/dev/null
trap '$as "$bindir/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1; rm -rf "$tmp"' EXIT
psql_() { psql -X -q -At -h 127.0.0.1 -p "$port" -U postgres "$@"; }

cat >"$tmp/trivial.yaml" <<YAML
name: trivial
template:
  data: {dataset: synthetic, limit_train: 64, validation: 64}
  model:
    layers:
      - dense: 10
  train:
    epochs: $epochs
    batch_size: 64
    optimizer: {type: sgd, lr: \${lr}}
search:
  method: random
  budget: $n
  parameters:
    lr: {loguniform: [1.0e-4, 1.0e-1]}
YAML

# run_once BIN NAME DB -> "wall_s statements commits"
run_once() {
  local db=$3
  psql_ -d postgres -c "CREATE DATABASE $db"
  rm -f "$tmp/q.db"*
  local lines0 t0 t1 commits ok
  lines0=$(grep -c 'LOG:  \(execute\|statement\)' "$tmp/server.log" || true)
  t0=$(date +%s.%N)
  (cd "$tmp" && "$1" run -q -w "$workers" --broker "sqlite:$tmp/q.db" \
     --store "postgres://postgres@127.0.0.1:$port/$db" "$tmp/trivial.yaml" >/dev/null 2>"$tmp/err") ||
    { cat "$tmp/err" >&2; exit 1; }
  t1=$(date +%s.%N)
  ok=$(psql_ -d "$db" -c "SELECT count(*) FROM trials t WHERE status = 'finished' AND attempt = 1
        AND (SELECT count(*) FROM epochs e WHERE e.trial_id = t.id) = $epochs")
  [[ $ok -eq $n ]] || { echo "$2: expected $n trials once with $epochs epochs, got $ok" >&2; exit 1; }
  sleep 1  # backends flush their statistics as they exit
  commits=$(psql_ -d postgres -c "SELECT xact_commit FROM pg_stat_database WHERE datname = '$db'")
  local lines1
  lines1=$(grep -c 'LOG:  \(execute\|statement\)' "$tmp/server.log" || true)
  echo "$(echo "$t1 - $t0" | bc) $((lines1 - lines0)) $commits"
}

echo "| binary | run | wall s | trials/s | statements/trial | commits/trial |"
echo "|---|---:|---:|---:|---:|---:|"
for ((r = 1; r <= reps; r++)); do
  for which in before after; do
    bin=$before; [[ $which == after ]] && bin=$after
    read -r wall stmts commits < <(run_once "$bin" "$which" "${which}_$r")
    awk -v w="$which" -v r="$r" -v t="$wall" -v s="$stmts" -v c="$commits" -v n="$n" \
      'BEGIN { printf "| %s | %d | %.2f | %.0f | %.1f | %.1f |\n", w, r, t, n / t, s / n, c / n }'
  done
done
