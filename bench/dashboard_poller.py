#!/usr/bin/env python3
"""What one dashboard user asks of the server while a sweep runs, timed.

Polls, once a second, the requests the experiment page makes while it is
open (web/src/study.js, trial_table.js, pages/workers.js): the experiment,
the newest ended trials (sort=finished_at), the trial table's first page
sorted by the metric, /api/stats and /api/workers; every 30 s the page's
load: the trials by index, 1,000 a page, up to the plots' cap of 25,000
(study.js). One keep-alive connection, one request at a time, as a browser
tab does. On SIGTERM/SIGINT (or when the experiment has ended and --until-done
is given) prints one JSON line per route: count, p50, p99, max in ms, and
every request slower than 100 ms.

  dashboard_poller.py --port P --experiment NAME [--out FILE] [--until-done]
"""
import argparse, http.client, json, signal, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--experiment", required=True, help="name or id")
ap.add_argument("--out", default="-")
ap.add_argument("--until-done", action="store_true")
ap.add_argument("--page-every", type=float, default=30.0)
a = ap.parse_args()

lat = {}      # route label -> [ms]
slow = []     # (t, label, ms, status)
stop = False
def on_signal(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)

conn = None
def get(label, path):
    global conn
    for attempt in range(2):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Accept": "application/json"})
            r = conn.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t0) * 1000
            lat.setdefault(label, []).append(ms)
            if ms > 100 or r.status != 200:
                slow.append((round(time.time(), 1), label, round(ms, 1), r.status))
            return json.loads(body) if r.status == 200 else None
        except (OSError, http.client.HTTPException):
            conn = None
            if attempt: raise
            time.sleep(0.2)

exp_id = None
while not stop and exp_id is None:
    try:
        for e in (get("experiments", "/api/experiments") or {}).get("experiments", []):
            if str(e.get("id")) == a.experiment or e.get("name") == a.experiment:
                exp_id = e["id"]
    except OSError:
        pass
    if exp_id is None: time.sleep(0.5)

base = f"/api/experiments/{exp_id}"
last_page = 0.0
started = time.time()
while not stop:
    t0 = time.time()
    try:
        x = get("experiment", base)
        get("trials_newest", base + "/trials?sort=finished_at&order=desc&limit=100&offset=0")
        get("trials_table", base + "/trials?sort=val_acc&order=desc&limit=50&offset=0")
        get("stats", "/api/stats")
        get("workers", "/api/workers")
        if t0 - last_page >= a.page_every:
            last_page = t0
            for off in range(0, 25000, 1000):
                r = get("trials_page_load", base + f"/trials?sort=index&order=asc&limit=1000&offset={off}")
                if not r or len(r.get("trials", [])) < 1000: break
        if a.until_done and x and x.get("status") in ("finished", "failed", "cancelled"):
            break
    except OSError as e:
        print(f"poller: {e}", file=sys.stderr)
        break
    time.sleep(max(0.0, 1.0 - (time.time() - t0)))

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]
out = sys.stdout if a.out == "-" else open(a.out, "w")
allms = [m for v in lat.values() for m in v]
for label, v in sorted(lat.items()) + [("all", allms)]:
    if not v: continue
    print(json.dumps({"route": label, "n": len(v), "p50_ms": round(pct(v, .5), 2),
                      "p99_ms": round(pct(v, .99), 2), "max_ms": round(max(v), 2)}), file=out)
print(json.dumps({"seconds": round(time.time() - started, 1), "slow": slow[:200],
                  "slow_count": len(slow)}), file=out)
