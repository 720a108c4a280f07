#!/usr/bin/env bash
# The main job: build dnnlab and its dashboard, then run the depth study
# (examples/depth-sweep.yaml) on this machine with the live dashboard, and
# print the best trial per depth, then write the study's report
# (`dnnlab report`). Extra arguments go to `dnnlab run`
# (e.g. --workers 4, --listen 127.0.0.1:9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset release -DDNNLAB_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$(nproc)"
mkdir -p runs
status=0
build/release/src/cli/dnnlab run examples/depth-sweep.yaml --store sqlite:runs/dnnlab.db "$@" ||
  status=$?
# The study's answer from what the store holds, also after failed trials
# (exit 6) or Ctrl-C: runs/depth-sweep-report.html (self-contained, inline
# SVG) and runs/depth-sweep-report.md.
build/release/src/cli/dnnlab report depth-sweep --store sqlite:runs/dnnlab.db --out runs || true
exit "$status"
