#!/usr/bin/env bash
# The main job: build dnnlab and its dashboard, then run the depth study on
# this machine with the live dashboard - plain, residual and normalised MLPs
# x relu/tanh/sigmoid x depths 1..700 on Fashion-MNIST
# (examples/depth-sweep.yaml, ~2,000 CPU-s) and on the digits table
# (examples/depth-sweep-digits.yaml, ~430 CPU-s), +10% for the pipeline:
# about 23 minutes on 2 idle cores, an estimate from timed trials (the YAML
# headers), not a measured run. Each prints its best trials per depth, then
# `dnnlab report` writes its report.
#
#   scripts/main.sh            # the study; run again when it has finished: its
#                              # results and report, nothing trained again
#   scripts/main.sh --quick    # examples/depth-sweep-quick.yaml, a few seconds
#   scripts/main.sh --new      # train the study again as new experiments
#
# Other arguments go to `dnnlab run` (e.g. --workers 4, --listen 127.0.0.1:9000).
set -euo pipefail
cd "$(dirname "$0")/.."
sweeps=(examples/depth-sweep.yaml examples/depth-sweep-digits.yaml)
args=()
for a in "$@"; do
  if [[ $a == --quick ]]; then sweeps=(examples/depth-sweep-quick.yaml); else args+=("$a"); fi
done
scripts/bootstrap.sh
cmake --preset release -DDNNLAB_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$(nproc)"
mkdir -p runs
status=0
for sweep in "${sweeps[@]}"; do
  name=$(sed -n 's/^name: *//p' "$sweep" | head -n 1)
  code=0
  build/release/src/cli/dnnlab run "$sweep" --store sqlite:runs/dnnlab.db "${args[@]}" || code=$?
  if [[ $status == 0 ]]; then status=$code; fi
  # The study's answer from what the store holds, also after failed trials
  # (exit 6) or Ctrl-C: runs/NAME-report.html (self-contained, inline SVG)
  # and runs/NAME-report.md.
  build/release/src/cli/dnnlab report "$name" --store sqlite:runs/dnnlab.db --out runs || true
  if [[ $code == 130 ]]; then break; fi  # Ctrl-C: the next data set waits for the next run
done
exit "$status"
