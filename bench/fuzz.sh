#!/usr/bin/env bash
# The long fuzz run behind bench/RESULTS.md's "Fuzzing" section: each target
# for SECONDS (default 600) on a scratch copy of its corpus, one after the
# other, printing per target the executions, executions per second and the
# coverage libFuzzer reached. Needs the asan preset built:
#   cmake --preset asan && cmake --build --preset asan
#   bench/fuzz.sh [SECONDS] [TARGET...]      # targets: run_spec sweep idx csv npy safetensors http_api gateway
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(run_spec sweep idx csv npy safetensors http_api gateway)
printf '%-12s %12s %10s %8s %8s  %s\n' target executions exec/s cov ft result
for t in "${targets[@]}"; do
  bin=build/asan/fuzz/fuzz_$t
  [[ -x $bin ]] || { echo "$t: $bin not built"; continue; }
  log=$(mktemp)
  if fuzz/run_fuzzer.sh "$bin" "fuzz/corpus/$t" "$seconds" >"$log" 2>&1; then result=clean; else result=FINDING; fi
  execs=$(grep -o 'number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' || true)
  rate=$(grep -o 'average_exec_per_sec: *[0-9]*' "$log" | awk '{print $2}' || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  printf '%-12s %12s %10s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$result"
  [[ $result == clean ]] || sed -n '/found a problem/,$p' "$log"
  rm -f "$log"
done
