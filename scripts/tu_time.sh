#!/usr/bin/env bash
# Compiler launcher that records the CPU time of every compile and link, for
# finding where a build's time goes on a shared machine (where the wall times
# in .ninja_log swell with everyone else's load, CPU seconds do not).
#
#   cmake --preset release -B build-t -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/tu_time.sh \
#         -DCMAKE_CXX_LINKER_LAUNCHER=$PWD/scripts/tu_time.sh
#   DNNLAB_TU_TIME_LOG=/tmp/tu.log cmake --build build-t -j2
#   scripts/tu_time.sh --report /tmp/tu.log     # slowest first, and the sum
#
# Each line of the log: user+sys seconds, wall seconds, max RSS (KiB), output.
set -euo pipefail

if [[ ${1:-} == --report ]]; then
  log=${2:?usage: tu_time.sh --report LOG}
  sort -rn "$log" | head -${3:-40}
  awk '{cpu += $1; wall += $2; n++} END {printf "%d steps, %.1f CPU s, %.1f wall s (summed)\n", n, cpu, wall}' "$log"
  exit 0
fi

log=${DNNLAB_TU_TIME_LOG:-/tmp/dnnlab-tu-time.log}
out=?
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ ${args[i]} == -o ]]; then out=${args[i + 1]}; fi
done
tmp=$(mktemp)
rc=0
/usr/bin/time -f "%U %S %e %M" -o "$tmp" "$@" || rc=$?
read -r user sys wall rss <"$tmp" || true
rm -f "$tmp"
awk -v u="${user:-0}" -v s="${sys:-0}" -v w="${wall:-0}" -v m="${rss:-0}" -v o="$out" \
  'BEGIN {printf "%.2f %.2f %d %s\n", u + s, w, m, o}' >>"$log"
exit $rc
