#!/bin/sh
# The accuracy cost of the hybrid trainer's wire dtypes (bench/RESULTS.md,
# "int8 frames on the hybrid wire"): the example CNN shortened (10,000
# training images, 3 epochs, 2 in-process clients) in fp32, fp16 and int8
# with each error-feedback setting, for each seed; then one table of
# per-epoch validation accuracy and loss, test accuracy and bytes per ticket.
#   bench/hybrid_wire_bench.sh [SEEDS...]        (default: 1 2 3)
#   DNNLAB=build/release/src/cli/dnnlab OUT=/tmp/hybrid-wire
set -e
dnnlab=${DNNLAB:-build/release/src/cli/dnnlab}
out=${OUT:-/tmp/hybrid-wire}
spec=${SPEC:-examples/fashion-cnn-distributed.yaml}
[ $# -gt 0 ] || set -- 1 2 3
mkdir -p "$out"
for seed in "$@"; do
  for cfg in "fp32 off" "fp16 off" "int8 off" "int8 grads" "int8 acts" "int8 both"; do
    set -- $cfg
    name="$1-$2-s$seed"
    { date -u +%T; uptime; } > "$out/$name.log"
    nice -n 10 "$dnnlab" train "$spec" --distributed --clients 2 --wire "$1" \
      --error-feedback "$2" --limit-train 10000 --epochs 3 --seed "$seed" \
      --out "$out/$name" >> "$out/$name.log" 2>&1
    { date -u +%T; uptime; } >> "$out/$name.log"
  done
done
python3 - "$out" <<'PY'
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], '*-s*', '*.metrics.json'))):
    m = json.load(open(f))
    d = m['distributed']
    name = os.path.basename(os.path.dirname(f))
    cfg, seed = name.rsplit('-s', 1)
    rows.setdefault(cfg, []).append((int(seed), m, d))
print('| wire, feedback | seed | val acc e1 / e2 / e3 | val loss e1 / e2 / e3 | test acc | kB/ticket to / from |')
print('|---|---:|---|---|---:|---|')
for cfg in ['fp32-off', 'fp16-off', 'int8-off', 'int8-grads', 'int8-acts', 'int8-both']:
    for seed, m, d in sorted(rows.get(cfg, []), key=lambda r: r[0]):
        e = m['epochs']
        print(f"| {cfg.replace('-', ', ')} | {seed} | " +
              ' / '.join(f"{x['val_acc']:.4f}" for x in e) + ' | ' +
              ' / '.join(f"{x['val_loss']:.4f}" for x in e) +
              f" | {m['test_acc']:.4f} | {d['bytes_to_clients'] / d['tickets'] / 1000:.0f} / "
              f"{d['bytes_from_clients'] / d['tickets'] / 1000:.0f} |")
print()
print('| wire, feedback | mean test acc | mean val acc e3 | mean val loss e3 |')
print('|---|---:|---:|---:|')
for cfg in ['fp32-off', 'fp16-off', 'int8-off', 'int8-grads', 'int8-acts', 'int8-both']:
    r = rows.get(cfg, [])
    if not r: continue
    n = len(r)
    print(f"| {cfg.replace('-', ', ')} | {sum(x[1]['test_acc'] for x in r) / n:.4f} | "
          f"{sum(x[1]['epochs'][-1]['val_acc'] for x in r) / n:.4f} | "
          f"{sum(x[1]['epochs'][-1]['val_loss'] for x in r) / n:.4f} |")
PY
