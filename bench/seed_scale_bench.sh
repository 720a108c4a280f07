#!/usr/bin/env bash
# The seed's scale on one machine (issue 27): bench/seed-scale.yaml (50,000
# random configurations of small MLPs on a 1,000-image Fashion-MNIST subset,
# ASHA) through `dnnlab run` with its dashboard, while
# bench/dashboard_poller.py asks what an open experiment page asks once a
# second and times every answer; then `dnnlab report`.
#
#   bench/seed_scale_bench.sh [BUILD_DIR]     # default build/release
#   BUDGET=2000 bench/seed_scale_bench.sh     # a smaller study, same spec
# Prints the wall time, trials/s, the poller's p50/p99/max per route and the
# report's time; leaves everything in $OUT (default: a new /tmp directory).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build/release}
DNNLAB=$BUILD/src/cli/dnnlab
[[ -x $DNNLAB ]] || { echo "missing $DNNLAB: ninja -C $BUILD dnnlab" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/seed-scale.XXXXXX)}
WORKERS=${WORKERS:-$(nproc)}
mkdir -p "$OUT"
spec=$OUT/seed-scale.yaml
sed "s/^  budget: .*/  budget: ${BUDGET:-50000}/" "$ROOT/bench/seed-scale.yaml" >"$spec"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

python3 "$ROOT/bench/dashboard_poller.py" --port "$PORT" --experiment seed-scale \
  --until-done --out "$OUT/latency.jsonl" 2>"$OUT/poller.err" &
poller=$!
start=$(date +%s.%N)
/usr/bin/time -v -o "$OUT/run.time" "$DNNLAB" run "$spec" -w "$WORKERS" --store "sqlite:$OUT/store.db" \
  --listen "127.0.0.1:$PORT" >"$OUT/run.log" 2>&1 || echo "dnnlab run exited $?" >&2
end=$(date +%s.%N)
kill -TERM "$poller" 2>/dev/null || true
wait "$poller" || true
rstart=$(date +%s.%N)
"$DNNLAB" report seed-scale --store "sqlite:$OUT/store.db" --out "$OUT" >"$OUT/report.log" 2>&1 \
  || echo "dnnlab report failed: $OUT/report.log" >&2
rend=$(date +%s.%N)

python3 - "$OUT" "$start" "$end" "$rstart" "$rend" <<'PY'
import json, sqlite3, sys
out, start, end, rstart, rend = sys.argv[1], *map(float, sys.argv[2:])
db = sqlite3.connect(f"{out}/store.db")
counts = dict(db.execute("SELECT status, count(*) FROM trials GROUP BY status").fetchall())
epochs, train_s = db.execute("SELECT sum(epochs_done), sum(seconds) FROM trials").fetchone()
n = sum(counts.values())
wall = end - start
print(f"trials {n} {counts}; epochs {epochs}; wall {wall:.0f} s; {n / wall:.1f} trials/s; "
      f"training seconds {train_s:.0f} ({train_s / wall:.2f} cores busy training)")
print(f"report: {rend - rstart:.1f} s")
for line in open(f"{out}/latency.jsonl"):
    print(line.rstrip()[:400])
PY
echo "kept in $OUT"
