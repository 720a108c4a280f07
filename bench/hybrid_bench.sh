#!/usr/bin/env bash
# The hybrid trainer (docs/distributed.md) against standalone training, on
# one epoch of a Fashion-MNIST subset, for two models: the example CNN
# (examples/fashion-cnn-distributed.yaml: a 10-way dense read-out on the
# server) and the same features under a large classifier (dense 1024, relu,
# dense 10: 3.2M parameters on the server, the case the scheme was made for).
#
# Each run: `dnnlab train --distributed --listen 127.0.0.1:0` pinned to CPU 0
# (taskset), N `dnnlab join` clients sharing CPU 1; standalone `dnnlab train`
# (--threads 1) on CPU 0. The two vCPUs here cannot show a speed-up: the
# figures this gives are the costs a speed-up model needs (bench/hybrid_model.py):
# per-sample compute of each part, bytes per ticket each way, idle time.
# Clients of one run share a core, so their wall times are not their costs;
# the per-sample costs come from the N = 1 runs (one client alone on its core).
#
# Pure data-parallel training runs on the same machinery and the same pinning
# (records "run": "data-parallel"): bench/specs/dp-MODEL.yaml, the same model
# with every layer in `features` and `classifier: []`, so the clients train
# the whole net and the server computes only the loss, averages their
# gradients and steps. Each such run's model summary is checked against the
# hybrid run's: the same layers, parameters and names.
#
#   bench/hybrid_bench.sh [BUILD_DIR] > OUT.jsonl      # then: bench/hybrid_model.py OUT.jsonl
#   env: SAMPLES=6144  CLIENTS="1 2 4"  STALENESS="0 1"  MODELS="cnn bigfc"
#        SCHEMES="hybrid data-parallel"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/hybrid_join_line.sh
. "$root/bench/hybrid_join_line.sh"
bin=$(cd "${1:-$root/build/release}" && pwd)/src/cli/dnnlab
samples=${SAMPLES:-6144}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
for tool in taskset /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "hybrid_bench: $tool is missing" >&2; exit 1; }
done

# The example with a 1,000-sample validation split (evaluation is not what
# is measured); bigfc swaps the classifier.
sed 's/validation: 5000/validation: 1000/' "$root/examples/fashion-cnn-distributed.yaml" \
  >"$tmp/cnn.yaml"
python3 - "$tmp/cnn.yaml" "$tmp/bigfc.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
head, tail = text.split("    classifier:\n")
rest = tail[tail.index("train:"):]
open(sys.argv[2], "w").write(head + "    classifier:\n      - dense: 1024\n      - relu\n"
                             "      - dropout: 0.4\n      - dense: 10\n" + rest)
PY

# `time -f` writes "wall user sys" as the last line of FILE.
cpu_of() { tail -n 1 "$1"; }

standalone() {  # $1 = model
  local out=$tmp/s-$1
  mkdir -p "$out"
  taskset -c 0 /usr/bin/time -f '%e %U %S' -o "$out/time" "$bin" train "$tmp/$1.yaml" --epochs 1 \
    --limit-train "$samples" --threads 1 --out "$out" -q >/dev/null
  python3 - "$1" "$out" "$(cpu_of "$out/time")" <<'PY'
import glob, json, sys
model, out, t = sys.argv[1], sys.argv[2], sys.argv[3].split()
m = json.load(open(glob.glob(out + "/*.metrics.json")[0]))
e = m["epochs"][0]
print(json.dumps({"run": "standalone", "model": model, "samples_per_second": e["samples_per_second"],
                  "epoch_seconds": e["seconds"], "train_loss": e["train_loss"],
                  "wall": float(t[0]), "cpu": float(t[1]) + float(t[2]),
                  "num_params": m["num_params"]}))
PY
}

# The whole model's summary as `train` prints it (its layer lines and the
# parameter count).
summary_of() { sed -n '/^  [0-9a-z_-]*: /p' "$1"; }

hybrid() {  # $1 = model, $2 = clients, $3 = staleness, $4 = hybrid (default) or data-parallel
  local scheme=${4:-hybrid} spec=$tmp/$1.yaml
  [[ $scheme == data-parallel ]] && spec=$root/bench/specs/dp-$1.yaml
  local out=$tmp/$scheme-$1-$2-$3 url="" token=""
  mkdir -p "$out"
  taskset -c 0 /usr/bin/time -f '%e %U %S' -o "$out/time" "$bin" train "$spec" \
    --distributed --listen 127.0.0.1:0 --clients "$2" --staleness "$3" --client-wait 60 \
    --epochs 1 --limit-train "$samples" --threads 1 --out "$out" >"$out/server.log" 2>&1 &
  local server=$!
  pids+=("$server")
  wait_join_line "$out/server.log" hybrid_bench
  local cs=()
  for c in $(seq "$2"); do
    taskset -c 1 /usr/bin/time -f '%e %U %S' -o "$out/c$c.time" "$bin" join "$url" --token "$token" \
      >"$out/c$c.log" 2>&1 &
    cs+=($!)
    pids+=($!)
  done
  wait "$server" || { cat "$out/server.log" >&2; exit 1; }
  for p in "${cs[@]}"; do wait "$p" || { cat "$out"/c*.log >&2; exit 1; }; done
  if [[ $scheme == data-parallel && -f $tmp/hybrid-$1.summary ]] &&
    ! diff <(summary_of "$out/server.log") "$tmp/hybrid-$1.summary" >&2; then
    echo "hybrid_bench: bench/specs/dp-$1.yaml is not the hybrid run's model (summaries above)" >&2
    exit 1
  fi
  [[ $scheme == hybrid ]] && summary_of "$out/server.log" >"$tmp/hybrid-$1.summary"
  python3 - "$1" "$2" "$3" "$out" "$scheme" <<'PY'
import glob, json, re, sys
model, n, s, out, scheme = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
m = json.load(open(glob.glob(out + "/*.metrics.json")[0]))
e, d = m["epochs"][0], m["distributed"]
t = open(out + "/time").read().split("\n")[-2].split()
clients = []
for c in range(1, n + 1):
    log = open(f"{out}/c{c}.log").read()
    g = re.search(r"(\d+) tickets answered, (\d+) samples; features forward ([0-9.e-]+) s, "
                  r"backward ([0-9.e-]+) s, waiting for the server ([0-9.e-]+) s", log)
    ct = open(f"{out}/c{c}.time").read().split("\n")[-2].split()
    clients.append({"tickets": int(g[1]), "rows": int(g[2]), "forward": float(g[3]),
                    "backward": float(g[4]), "wait": float(g[5]), "wall": float(ct[0]),
                    "cpu": float(ct[1]) + float(ct[2])})
print(json.dumps({"run": scheme, "model": model, "clients": n, "staleness": s,
                  "samples_per_second": e["samples_per_second"],
                  "epoch_seconds": e["seconds"], "train_loss": e["train_loss"],
                  "wall": float(t[0]), "cpu": float(t[1]) + float(t[2]),
                  "num_params": m["num_params"], "distributed": d, "client_runs": clients}))
PY
}

for model in ${MODELS:-cnn bigfc}; do
  standalone "$model"
  for scheme in ${SCHEMES:-hybrid data-parallel}; do
    for s in ${STALENESS:-0 1}; do
      for n in ${CLIENTS:-1 2 4}; do hybrid "$model" "$n" "$s" "$scheme"; done
    done
  done
  standalone "$model"
done
