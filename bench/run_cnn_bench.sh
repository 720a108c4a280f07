#!/usr/bin/env bash
# CNN training throughput, dnnlab vs PyTorch, 1 and 2 threads, side by side:
# each round runs bench/cnn_bench and bench/torch_cnn.py back to back for each
# (config, threads) (the order rotates every round), pinned to the same cores;
# then medians and per-round ratios as a markdown table. See bench/RESULTS.md.
#
#   BUILD=build-rel bench/run_cnn_bench.sh            # 3 rounds of 4 s each
#   ROUNDS=5 SECS=6 THREADS="1 2" bench/run_cnn_bench.sh
#   LOG=old.log bench/run_cnn_bench.sh report         # table from an earlier log only
#   BASE=/tmp/cnn_bench.main bench/run_cnn_bench.sh   # also a baseline cnn_bench in each
#                                                     # round (before/after: a second table)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/release}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-4}
THREADS=${THREADS:-"1 2"}
CONFIGS=${CONFIGS:-"fashion cifar"}
PY=/usr/bin/python3  # Debian's python3-torch
PARTS=${1:-all}
LOG=${LOG:-$(mktemp /tmp/cnn_bench.XXXXXX.log)}
if [ "$PARTS" != report ]; then
  cmake --build "$BUILD" --target cnn_bench -j2 >/dev/null
  DNN="$BUILD/bench/cnn_bench"
  # The peer at its best, settings given only here: OpenBLAS's AVX-512 kernels
  # where the CPU has AVX-512 (elsewhere OpenBLAS picks its own), no L2
  # override, glibc keeping freed buffers, N intra-op threads.
  coretype=()
  grep -qw avx512f /proc/cpuinfo && coretype=(OPENBLAS_CORETYPE=SkylakeX)
  torch_run() {
    env -u OPENBLAS_L2_SIZE "${coretype[@]}" OMP_NUM_THREADS="$1" \
      OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS="$1" \
      MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 \
      taskset -c "$2" "$PY" "$ROOT/bench/torch_cnn.py" --threads "$1" "${@:3}"
  }
  echo "log: $LOG" >&2
  echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p') $(git -C "$ROOT" describe --always --dirty)" >>"$LOG"
  for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
      cpus=$(seq -s, 0 $((t - 1)))
      for c in $CONFIGS; do
        d() { taskset -c "$cpus" "$DNN" --config "$c" --threads "$t" --seconds "$SECS" | tee -a "$LOG" >&2; }
        p() { torch_run "$t" "$cpus" --config "$c" --seconds "$SECS" | tee -a "$LOG" >&2; }
        b() {
          [ -z "${BASE:-}" ] && return 0
          taskset -c "$cpus" "$BASE" --config "$c" --threads "$t" --seconds "$SECS" |
            sed 's/impl=dnnlab/impl=base/' | tee -a "$LOG" >&2
        }
        case $((r % 3)) in 1) b; d; p ;; 2) p; d; b ;; *) d; p; b ;; esac
      done
    done
  done
fi
"$PY" - "$LOG" <<'PY'
import statistics as st, sys
NAME = {"fashion": "(a) examples/fashion-cnn.yaml net, [1,28,28]",
        "fashion2": "(a, before 2026-12-03 evening) 2-block fashion net",
        "cifar": "(b) CIFAR-10-quick, [3,32,32]"}
rows = [dict(kv.split("=", 1) for kv in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith("RESULT")]
for impl in [i for i in ("dnnlab", "base") if any(r["impl"] == i for r in rows)]:
  print(f"\n{impl}:\n")
  print("| net | threads | dnnlab samples/s (wall) | PyTorch samples/s (wall) | ratio (wall) | dnnlab samples/CPU-s | PyTorch samples/CPU-s | ratio (CPU) | target 1.3x | rounds |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|:-:|---:|")
  for c in NAME:
    for t in sorted({r["threads"] for r in rows}):
        sel = lambda impl, k: [float(r[k]) for r in rows if r["config"] == c and r["threads"] == t and r["impl"] == impl]
        d, p = sel(impl, "samples_per_s"), sel("pytorch", "samples_per_s")
        dc, pc = sel(impl, "cpu_samples_per_s"), sel("pytorch", "cpu_samples_per_s")
        if not d or len(d) != len(p):
            continue
        rr = sorted(x / y for x, y in zip(d, p)); cr = sorted(x / y for x, y in zip(dc, pc))
        met = "yes" if min(st.median(rr), st.median(cr)) >= 1.3 else "NO"
        print(f"| {NAME[c]} | {t} | {st.median(d):,.0f} | {st.median(p):,.0f} | {st.median(rr):.2f}x ({rr[0]:.2f}–{rr[-1]:.2f}) | "
              f"{st.median(dc):,.0f} | {st.median(pc):,.0f} | {st.median(cr):.2f}x ({cr[0]:.2f}–{cr[-1]:.2f}) | {met} | {len(d)} |")
print("\nratio = median over rounds of dnnlab/PyTorch measured back to back (range in brackets); "
      "samples/CPU-s = samples per second of the process's CPU time (all its threads).")
PY
