#!/usr/bin/env bash
# Training throughput (dnnlab vs PyTorch, single thread) and seconds per epoch
# vs depth, measured side by side: each round runs dnnlab and PyTorch for each
# config back to back (the order flips every round), then medians and ratios
# over the rounds are printed as markdown tables. See bench/RESULTS.md.
#
#   bench/run_train_bench.sh                      # both parts, 5 rounds
#   ROUNDS=7 SECS=3 bench/run_train_bench.sh throughput
#   DEPTH_ROUNDS=3 bench/run_train_bench.sh depth
#   SNAPSHOT=1 bench/run_train_bench.sh           # build committed HEAD, not the working tree
#   LOG=old.log bench/run_train_bench.sh report   # tables from an earlier log only
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
ROUNDS=${ROUNDS:-5}                  # throughput rounds
SECS=${SECS:-3}                      # seconds per throughput measurement (after 0.5 s warm-up)
DEPTH_ROUNDS=${DEPTH_ROUNDS:-3}
DEPTHS=${DEPTHS:-"1 2 4 8 16 32 64 128 256 512 700"}
TORCH_DEPTHS=${TORCH_DEPTHS:-"1 4 16 64 128"}  # PyTorch is slow at depth: a few points, 1 timed epoch
SAMPLES=${SAMPLES:-10000}            # samples per "epoch" in the depth sweep
PY=/usr/bin/python3                  # Debian's python3-torch, not a pyenv python
PARTS=${1:-all}
LOG=${LOG:-$(mktemp /tmp/train_bench.XXXXXX.log)}

SRC=$ROOT
REV=$(git -C "$ROOT" describe --always --dirty)
if [ "${SNAPSHOT:-0}" = 1 ]; then
  # Results pinned to a commit: others' uncommitted edits (kernels in flux) stay out.
  REV=$(git -C "$ROOT" rev-parse --short=12 HEAD)
  SRC=${BUILD}-snapshot/src
  BUILD=${BUILD}-snapshot/build
  if [ "$(cat "$SRC/.rev" 2>/dev/null)" != "$REV" ]; then
    rm -rf "$SRC" && mkdir -p "$SRC"
    git -C "$ROOT" archive HEAD | tar -x -C "$SRC"
    echo "$REV" >"$SRC/.rev"
  fi
fi
mkdir -p "$(dirname "$BUILD")"
if [ "$PARTS" != report ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDNNLAB_BUILD_TESTS=OFF \
      -DDNNLAB_SKIP_MODULES="sweep;queue;store;worker;server" >"$BUILD.log" 2>&1 ||
      { cat "$BUILD.log" >&2; exit 1; }
  fi
  ninja -C "$BUILD" -j2 train_bench >"$BUILD.log" 2>&1 || { cat "$BUILD.log" >&2; exit 1; }
fi
DNN="$BUILD/bench/train_bench"
# dnnlab is single-threaded by construction. The peer at its best, settings
# given only here: one thread, no OpenBLAS L2 override, glibc keeping freed
# buffers instead of returning them to the OS every step.
torch_run() {
  env -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
    MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 \
    "$PY" "$ROOT/bench/torch_train.py" "$@"
}
echo "log: $LOG" >&2
[ "$PARTS" = report ] ||
  echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p') $REV" >>"$LOG"

if [ "$PARTS" = all ] || [ "$PARTS" = throughput ]; then
  for r in $(seq 1 "$ROUNDS"); do
    for c in a b c d; do
      if [ $((r % 2)) = 1 ]; then
        "$DNN" throughput --config $c --seconds "$SECS" | tee -a "$LOG" >&2
        torch_run throughput --config $c --seconds "$SECS" | tee -a "$LOG" >&2
      else
        torch_run throughput --config $c --seconds "$SECS" | tee -a "$LOG" >&2
        "$DNN" throughput --config $c --seconds "$SECS" | tee -a "$LOG" >&2
      fi
    done
  done
fi
if [ "$PARTS" = all ] || [ "$PARTS" = depth ]; then
  for r in $(seq 1 "$DEPTH_ROUNDS"); do
    for d in $DEPTHS; do
      "$DNN" depth --depth "$d" --samples "$SAMPLES" | tee -a "$LOG" >&2
      if [[ " $TORCH_DEPTHS " == *" $d "* ]]; then
        torch_run depth --depth "$d" --samples "$SAMPLES" --epochs 1 | tee -a "$LOG" >&2
      fi
    done
  done
fi
# Medians over rounds, ratios, % of peak, and the linear fit of time vs depth.
"$PY" - "$LOG" <<'PY'
import re, statistics as st, sys
PEAK = 220e9  # single-core FP32 peak: AVX-512, 2 FMA units x 16 lanes x 2 flops x ~3.4 GHz
TARGET = {"a": 1.1, "b": 1.5, "c": 1.3, "d": 5.0}
NAME = {"a": "MLP 784-256-256-10, SGD, batch 64", "b": "MLP 784-256-256-10, Adam, batch 64",
        "c": "16 hidden x 256, SGD, batch 64", "d": "784-32-10, SGD, batch 1 (steps/s)"}
rows = [dict(kv.split("=", 1) for kv in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith("RESULT")]
tp = [r for r in rows if "config" in r]
if tp:
    print("| config | dnnlab samples/s (wall) | PyTorch samples/s (wall) | ratio (wall) | dnnlab samples/CPU-s | PyTorch samples/CPU-s | ratio (CPU time) | target | met | dnnlab % of peak | PyTorch % of peak | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---:|---:|")
    for c in "abcd":
        sel = lambda impl, key: [float(r[key]) for r in tp if r["config"] == c and r["impl"] == impl and key in r]
        d, t = sel("dnnlab", "samples_per_s"), sel("torch", "samples_per_s")
        dc, tc = sel("dnnlab", "cpu_samples_per_s"), sel("torch", "cpu_samples_per_s")
        if not d or not t or len(dc) != len(d) or len(tc) != len(t):
            continue
        params = int(next(r["params"] for r in tp if r["config"] == c))
        # per-round ratios (each round measures both back to back), then their median
        rr = sorted(x / y for x, y in zip(d, t))
        cr = sorted(x / y for x, y in zip(dc, tc))
        ratio, cratio = st.median(rr), st.median(cr)
        pk = lambda s: 100 * s * 6 * params / PEAK
        met = "yes" if min(ratio, cratio) >= TARGET[c] else "NO"
        print(f"| {c}: {NAME[c]} | {st.median(d):,.0f} | {st.median(t):,.0f} | {ratio:.2f}x ({rr[0]:.2f}–{rr[-1]:.2f}) | "
              f"{st.median(dc):,.0f} | {st.median(tc):,.0f} | {cratio:.2f}x ({cr[0]:.2f}–{cr[-1]:.2f}) | "
              f"{TARGET[c]}x | {met} | {pk(st.median(dc)):.1f}% | {pk(st.median(tc)):.1f}% | {len(d)} |")
    print("\nratio = median over rounds of dnnlab/PyTorch measured back to back (range in brackets). "
          "samples/CPU-s = samples per second of the benchmark thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, "
          "time.thread_time()): what each gets while it actually runs, so much less sensitive to other jobs.")
    print("% of peak (on CPU time) = samples/CPU-s x 6 x params / 220 GFLOP/s (2 flops/param forward, 4 backward).\n")
dp = [r for r in rows if "depth" in r]
def fit(xs, ys):
    n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)); ss_tot = sum((y - my) ** 2 for y in ys)
    worst = max(abs(y - a - b * x) / y for x, y in zip(xs, ys))
    return a, b, 1 - ss_res / ss_tot, worst
if dp:
    depths = sorted({int(r["depth"]) for r in dp})
    med = lambda impl, d, key: [float(r[key]) for r in dp if r["impl"] == impl and int(r["depth"]) == d and key in r]
    xs = [d for d in depths if med("dnnlab", d, "seconds")]
    has_cpu = all(med("dnnlab", d, "cpu_seconds") for d in xs)
    keys = ["seconds"] + (["cpu_seconds"] if has_cpu else [])
    ys = {k: [st.median(med("dnnlab", d, k)) for d in xs] for k in keys}
    fits = {k: fit(xs, ys[k]) for k in keys}
    samples = dp[0]["samples"]
    print("| depth | params | dnnlab s/epoch (wall) | dnnlab s/epoch (CPU) | CPU ms per layer | CPU fit a+b·depth | residual | PyTorch s/epoch (wall) | PyTorch (CPU) | ratio (CPU) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    k = keys[-1]
    a, b, r2, worst = fits[k]
    for i, x in enumerate(xs):
        y = ys[k][i]; f = a + b * x
        params = next(r["params"] for r in dp if int(r["depth"]) == x)
        tw, tc = med("torch", x, "seconds"), med("torch", x, "cpu_seconds")
        tcol = f"{st.median(tw):.3f} | {st.median(tc):.3f} | {st.median(tc)/y:.1f}x" if tc else "– | – | –"
        cpu_col = f"{y:.4f}" if has_cpu else "–"
        print(f"| {x} | {params} | {ys['seconds'][i]:.4f} | {cpu_col} | {1e3*y/x:.2f} | {f:.4f} | {100*(y-f)/y:+.1f}% | {tcol} |")
    print(f"\n{samples} samples per epoch, batch 64, width 64, SGD; medians of {len(med('dnnlab', xs[0], 'seconds'))} rounds x 3 epochs.")
    big = [i for i, x in enumerate(xs) if x >= 32]
    if len(big) >= 3:
        fits[k + ">=32"] = fit([xs[i] for i in big], [ys[k][i] for i in big])
    for k in fits:
        a, b, r2, worst = fits[k]
        print(f"Fit ({'wall' if k == 'seconds' else 'CPU'} time{', depths >= 32 only' if k.endswith('>=32') else ''}) over {len(big) if k.endswith('>=32') else len(xs)} depths: t = a + b*depth, "
              f"a = {1e3*a:.2f} ms, b = {1e3*b:.3f} ms/layer, R^2 = {r2:.5f}, max relative residual = {100*worst:.1f}%")
PY
