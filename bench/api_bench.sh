#!/usr/bin/env bash
# REST API under load: GET /api/experiments/ID/trials?limit=100 on an
# experiment of 100,000 trials, 64 concurrent clients (wrk, loopback, 10 s),
# by index (the default) and sorted by val_acc descending.
#
#   bench/api_bench.sh [BUILD_DIR]      # default build/server
# Needs: wrk (apt-get install wrk), a build with `dnnlab` and server_bench_populate.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build/server}
TRIALS=${TRIALS:-100000}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
DNNLAB=$BUILD/src/cli/dnnlab
POPULATE=$BUILD/tests/server/server_bench_populate
for tool in "$DNNLAB" "$POPULATE"; do
  [[ -x $tool ]] || { echo "missing $tool: ninja -C $BUILD dnnlab server_bench_populate" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }

WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# BENCH_DB=FILE keeps the populated store between runs (made on the first).
DB=${BENCH_DB:-$WORK/bench.db}
if [[ -f $DB ]]; then
  EXP=1
else
  echo "populating $TRIALS trials ..."
  EXP=$("$POPULATE" "sqlite:$DB" "$TRIALS")
fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$DNNLAB" serve --listen "127.0.0.1:$PORT" --store "sqlite:$DB" --token-file "$WORK/token" --no-coordinators \
  >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$PORT/api/stats" >/dev/null && break
  sleep 0.1
done
BASE="http://127.0.0.1:$PORT/api/experiments/$EXP/trials"
curl -sf "$BASE?limit=1" | head -c 200; echo

run() {
  local name=$1 url=$2
  echo "== $name: $url"
  curl -sf -o /dev/null -w "single request: %{time_total}s, %{size_download} bytes\n" "$url"
  wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --timeout 10s --latency "$url" | tee "$WORK/$name.txt"
}
run by_index "$BASE?limit=100"
run by_val_acc "$BASE?limit=100&sort=val_acc&order=desc"
run by_val_acc_page_500 "$BASE?limit=100&sort=val_acc&order=desc&offset=50000"

echo
echo "| query | requests/s | p50 | p99 |"
echo "|---|---:|---:|---:|"
for name in by_index by_val_acc by_val_acc_page_500; do
  rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/$name.txt")
  p50=$(awk '$1=="50%" {print $2}' "$WORK/$name.txt")
  p99=$(awk '$1=="99%" {print $2}' "$WORK/$name.txt")
  echo "| $name | $rps | $p50 | $p99 |"
done
