#!/usr/bin/env bash
# CPU per ticket of the hybrid trainer's two processes, apart from their
# start-up and evaluation: one `train --distributed --listen` server (CPU 0)
# and one `dnnlab join` client (CPU 1), synchronous, on the example CNN
# (examples/fashion-cnn-distributed.yaml, validation 256), each under
# `perf stat -e task-clock,page-faults`, `perf record` or valgrind's
# callgrind (instructions). The test split is cut to 256 images (a copy of
# the data set's directory), so that the server's end-of-run evaluation
# stays small; per ticket is the difference between a long and a short run,
# divided by their difference in tickets. bench/RESULTS.md, "Per-ticket
# overhead cut".
#
#   bench/hybrid_overhead.sh [BUILD_DIR] > OUT.jsonl    # one line per run
#   env: SAMPLES="256 2048"  REPEAT=3  WIRE=fp32
#        PERF=stat|record|callgrind  SIDES="server client" (which run under it)
#        CALLGRAPH=dwarf,16384 (record)  PERF_OUT=DIR (record, callgrind: where
#        server-SAMPLES-I.data and client-SAMPLES-I.data are kept)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/hybrid_join_line.sh
. "$root/bench/hybrid_join_line.sh"
bin=$(cd "${1:-$root/build/release}" && pwd)/src/cli/dnnlab
mode=${PERF:-stat}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
for tool in taskset perf python3; do
  command -v "$tool" >/dev/null || { echo "hybrid_overhead: $tool is missing" >&2; exit 1; }
done
src=${DNNLAB_DATA_DIR:-/usr/share/datasets}/fashion-mnist
mkdir -p "$tmp/data/fashion-mnist"
ln -s "$src"/train-*-ubyte.gz "$tmp/data/fashion-mnist/"
python3 - "$src" "$tmp/data/fashion-mnist" <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], 256
for name, head in (("t10k-images-idx3-ubyte.gz", 16), ("t10k-labels-idx1-ubyte.gz", 8)):
    b = gzip.open(f"{src}/{name}").read()
    dims = list(struct.unpack(">" + "I" * (head // 4), b[:head]))
    per = 1
    for d in dims[2:]: per *= d
    dims[1] = n
    gzip.open(f"{dst}/{name}", "wb").write(struct.pack(">" + "I" * len(dims), *dims) + b[head:head + n * per])
PY
sed 's/validation: 5000/validation: 256/' "$root/examples/fashion-cnn-distributed.yaml" >"$tmp/cnn.yaml"

perf_cmd() {  # $1 = output file
  case $mode in
    record) echo perf record -q -e cpu-clock --call-graph "${CALLGRAPH:-dwarf,16384}" -o "$1" ;;
    callgrind) echo valgrind -q --tool=callgrind --callgrind-out-file="$1" ;;
    *) echo perf stat -x, -e task-clock,page-faults -o "$1" ;;
  esac
}

run() {  # $1 = samples, $2 = repeat index
  local out=$tmp/r-$1-$2 url="" token=""
  mkdir -p "$out"
  local sp cp
  sp="" cp=""
  [[ " ${SIDES:-server client} " == *" server "* ]] && sp=$(perf_cmd "$out/server.perf")
  [[ " ${SIDES:-server client} " == *" client "* ]] && cp=$(perf_cmd "$out/client.perf")
  taskset -c 0 $sp "$bin" train "$tmp/cnn.yaml" --data "$tmp/data/fashion-mnist" \
    --distributed --listen 127.0.0.1:0 --clients 1 --client-wait 60 --wire "${WIRE:-fp32}" \
    --epochs 1 --limit-train "$1" --threads 1 --out "$out" >"$out/server.log" 2>&1 &
  local server=$!
  pids+=("$server")
  wait_join_line "$out/server.log" hybrid_overhead
  taskset -c 1 $cp "$bin" join "$url" --token "$token" --data "$tmp/data/fashion-mnist" \
    >"$out/client.log" 2>&1 &
  local client=$!
  pids+=("$client")
  wait "$server" || { cat "$out/server.log" >&2; exit 1; }
  wait "$client" || { cat "$out/client.log" >&2; exit 1; }
  if [[ $mode != stat && -n ${PERF_OUT:-} ]]; then
    mkdir -p "$PERF_OUT"
    for side in server client; do
      [[ -f $out/$side.perf ]] && cp "$out/$side.perf" "$PERF_OUT/$side-$1-$2.data"
    done
  fi
  python3 - "$1" "$mode" "$out" <<'PY'
import glob, json, os, re, sys
samples, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def stat(f, event):
    for line in open(f):
        p = line.split(",")
        if len(p) > 2 and p[2].startswith(event): return float(p[0])
m = json.load(open(glob.glob(out + "/*.metrics.json")[0]))
log = open(out + "/client.log").read()
g = re.search(r"(\d+) tickets answered, (\d+) samples; features forward ([0-9.e-]+) s, "
              r"backward ([0-9.e-]+) s, waiting for the server ([0-9.e-]+) s", log)
d = m["distributed"]
row = {"samples": samples, "tickets": d["tickets"], "epoch_seconds": m["epochs"][0]["seconds"],
       "train_loss": m["epochs"][0]["train_loss"], "client_forward": float(g[3]),
       "client_backward": float(g[4]), "client_wait": float(g[5]),
       "server_seconds": d["server_seconds"], "server_wait": d["wait_seconds"]}
if mode == "callgrind":  # instructions executed (Ir), the whole process
    for side in ("server", "client"):
        if not os.path.exists(f"{out}/{side}.perf"): continue
        for line in open(f"{out}/{side}.perf"):
            if line.startswith("totals:") or line.startswith("summary:"):
                row[side + "_instructions"] = int(line.split()[1])
if mode == "stat":
    for side in ("server", "client"):
        if not os.path.exists(f"{out}/{side}.perf"): continue
        row[side + "_cpu_ms"] = stat(f"{out}/{side}.perf", "task-clock")
        row[side + "_page_faults"] = int(stat(f"{out}/{side}.perf", "page-faults"))
print(json.dumps(row))
PY
}

for i in $(seq "${REPEAT:-3}"); do
  for s in ${SAMPLES:-256 2048}; do run "$s" "$i"; done
done
