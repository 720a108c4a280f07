#!/usr/bin/env bash
# The main job: build dnnlab, then train the Fashion-MNIST MLP example and
# print its test accuracy. Extra arguments go to `dnnlab train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset release -DDNNLAB_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release --target dnnlab
mkdir -p runs
exec build/release/src/cli/dnnlab train examples/fashion-mlp.yaml --out runs "$@"
