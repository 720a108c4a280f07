#!/usr/bin/env python3
"""Where a sweep's worker time went, from the store alone (issue 27).

For one experiment: W workers x the wall time from the first trial's start
to the last trial's end is the capacity. It splits into
  training     the epochs' own seconds (forward, backward, optimizer steps;
               what each trial records as `seconds`);
  in trial     the rest of each trial's span, started_at to finished_at:
               building the model, the validation and test evaluations,
               and the wait until the worker's next write carries the end;
  between      a worker's time between one trial's end and its next start
               (leasing, starting, the store);
  tail         a worker with nothing left to lease while others finish.
Usage: outside_training.py STORE.db [EXPERIMENT_NAME]
"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
name = sys.argv[2] if len(sys.argv) > 2 else None
q = "SELECT id FROM experiments" + (" WHERE name = ? ORDER BY id DESC LIMIT 1" if name else " ORDER BY id DESC LIMIT 1")
exp = db.execute(q, (name,) if name else ()).fetchone()[0]
rows = db.execute("SELECT worker, started_at, finished_at, seconds FROM trials "
                  "WHERE experiment_id = ? AND started_at IS NOT NULL AND finished_at IS NOT NULL",
                  (exp,)).fetchall()
t0 = min(r[1] for r in rows)
t1 = max(r[2] for r in rows)
wall = t1 - t0
workers = {}
for w, s, f, sec in rows:
    workers.setdefault(w, []).append((s, f, sec))
W = len(workers)
cap = W * wall
train = sum(r[3] for r in rows)
in_trial = sum((f - s) - sec for _, s, f, sec in rows)
between = tail = 0.0
for w, ts in workers.items():
    ts.sort()
    life = ts[-1][1] - ts[0][0]
    between += life - sum(f - s for s, f, _ in ts)
    tail += wall - life
pct = lambda x: f"{100 * x / cap:.2f}%"
print(f"experiment {exp}: {len(rows)} trials on {W} workers, wall {wall:.1f} s, capacity {cap:.1f} worker-s")
print(f"  training {train:.1f} s ({pct(train)})")
print(f"  in trial, not training (build, evaluation, end write) {in_trial:.1f} s ({pct(in_trial)})")
print(f"  between trials (lease, start, store) {between:.1f} s ({pct(between)})")
print(f"  tail (nothing left to lease) {tail:.1f} s ({pct(tail)})")
print(f"  outside training, all: {pct(cap - train)}; the lab's own (between + tail): {pct(between + tail)}")
