#!/usr/bin/env python3
"""The hybrid trainer's speed-up, modelled from measured costs.

Reads the JSON lines bench/hybrid_bench.sh writes and, per model:
  * takes the measured costs: the clients' features forward and backward
    seconds per sample (the one-client run, that client alone on its core),
    the server's seconds per round as a + b * rows (least squares over the
    synchronous 1, 2 and 4 client runs), the bytes per ticket each way, and
    standalone training's seconds per sample;
  * checks the model against what was measured: it predicts each measured
    run's epoch time (clients sharing one core: their compute times N);
  * predicts the speed-up over standalone training at 1 to 64 clients on
    100 Mbit/s and 1 Gbit/s links, synchronous (s = 0) and pipelined (s >= 1),
    and for pure data-parallel training of the whole net (every client runs
    the whole model, the server averages all gradients);
  * with data-parallel runs in RUNS.jsonl (the same machinery with every
    layer in `features`: bench/specs/dp-*.yaml), tabulates every measured
    scheme side by side and checks the data-parallel curve against them;
  * writes a Markdown table to stdout and, with --svg FILE, the plot (the
    measured hybrid runs as circles, the data-parallel ones as squares).

Assumptions (stated in bench/RESULTS.md): each client has its own link of
the given rate; the server has one link of the same rate, full duplex, so a
round's frames to and from all clients queue on it; 0.25 ms one-way latency
per message; the server's compute does not slow with more clients beyond
its measured a + b * rows; clients are as fast as this machine's core.

    bench/hybrid_model.py RUNS.jsonl [--svg FILE] [--ticket-kb KB] [--frame-ms SERVER,CLIENT]

--ticket-kb KB: model a ticket of KB kilobytes each way instead of the
measured float32 bytes (`--wire int8` measured 432 kB against 1,025 kB on
the example CNN: bench/RESULTS.md, "int8 frames on the hybrid wire"); the
fitted per-ticket frame work is kept as measured in float32.

--frame-ms SERVER,CLIENT: the per-ticket work beyond compute on each side,
in ms, instead of the fitted wall-clock value split in halves: e.g. the
CPU per ticket a profile measures (bench/hybrid_overhead.sh; RESULTS.md,
"Per-ticket overhead cut"). The fit mixes CPU with waiting on the VM it
ran on; the override models machines where only the CPU work remains.
"""
import json
import sys

LAT = 0.25e-3  # one-way latency per message, seconds
LINKS = {"100 Mbit/s": 100e6 / 8, "1 Gbit/s": 1e9 / 8}  # bytes/s
CLIENTS = [1, 2, 4, 8, 16, 32, 64]
BATCH = 64
ACT_FLOATS = 64 * 7 * 7  # the features part's output per sample ([64, 7, 7])


def fit_line(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def costs(runs, model):
    stand = [r for r in runs if r["run"] == "standalone" and r["model"] == model]
    hyb = [r for r in runs if r["run"] == "hybrid" and r["model"] == model]
    one = [r for r in hyb if r["clients"] == 1 and r["staleness"] == 0][0]
    c = one["client_runs"][0]
    sync = [r for r in hyb if r["staleness"] == 0]
    xs = [r["distributed"]["tickets"] * BATCH / r["distributed"]["rounds"] for r in sync]
    ys = [r["distributed"]["server_seconds"] / r["distributed"]["rounds"] for r in sync]
    a, b = fit_line(xs, ys)
    d = one["distributed"]
    act = BATCH * ACT_FLOATS * 4
    down = d["bytes_to_clients"] / d["tickets"]  # weights + activation gradients + ticket
    up = d["bytes_from_clients"] / d["tickets"]  # activations + weight gradients + state
    per_sample = [r["epoch_seconds"] / (r["epoch_seconds"] * r["samples_per_second"]) for r in stand]
    k = {
        "fwd": c["forward"] / c["rows"],
        "bwd": c["backward"] / c["rows"],
        "srv_a": a,
        "srv_b": b,
        "down": down,
        "up": up,
        "ticket_bytes": down + up,  # measured, kept when --ticket-kb replaces down and up
        "act": act,
        "params_bytes": one["num_params"] * 4,
        "standalone": sorted(per_sample)[len(per_sample) // 2],
        "standalone_all": per_sample,
        "ticket": 0.0,
        "ticket_srv": None,  # --frame-ms: each side's own (else half of "ticket")
        "ticket_cli": None,
    }
    # What compute alone does not explain: encoding, framing, copying and
    # decoding a ticket's frames (about 2 MB each way here), and the
    # server's checks. Fitted on the one-client synchronous run as seconds
    # per ticket, half on the client's side and half on the server's, and
    # checked against every other measured run below.
    pred = d["rounds"] * round_time(k, 1, float("inf"), 0)
    k["ticket"] = max(0.0, (one["epoch_seconds"] - pred) / d["tickets"])
    # The same for data-parallel where it was measured on the same machinery
    # (bench/specs/dp-*.yaml; its frames carry the whole model's weights
    # and gradients): fitted on its one-client synchronous run, checked
    # against the others in dp_check.
    k["dp_ticket"] = None
    dp1 = [r for r in runs if r["run"] == "data-parallel" and r["model"] == model
           and r["clients"] == 1 and r["staleness"] == 0]
    if dp1:
        r, dd = dp1[0], dp1[0]["distributed"]
        pred = dd["rounds"] * dp_round_time(k, 1, float("inf"))
        k["dp_ticket"] = max(0.0, (r["epoch_seconds"] - pred) / dd["tickets"])
    return k


def round_time(k, n, bw, staleness, share=1.0):
    """Seconds per round of n clients, one batch each. `share`: how many
    clients share a core (the measured runs: all of them)."""
    rows = n * BATCH
    fwd, bwd = BATCH * k["fwd"] * share, BATCH * k["bwd"] * share
    t_cli = k["ticket"] / 2 if k["ticket_cli"] is None else k["ticket_cli"]
    t_srv = k["ticket"] / 2 if k["ticket_srv"] is None else k["ticket_srv"]
    fwd += t_cli * share  # the client's share of the per-ticket overhead
    srv = k["srv_a"] + k["srv_b"] * rows + n * t_srv
    down_each, up_each = k["down"] / bw, k["up"] / bw
    down_all, up_all = n * k["down"] / bw, n * k["up"] / bw
    if staleness == 0:
        # weights+ticket out, forward, activations in, classifier, gradients
        # out, backward, weight gradients in, features step: in sequence,
        # each transfer as long as the server link takes for all clients.
        if bw == float("inf"):
            return fwd + bwd + srv
        return 4 * LAT + fwd + bwd + srv + max(down_each, down_all) + max(up_each, up_all)
    # Pipelined: clients work on the next batch while the server trains the
    # classifier; the round is as long as the slowest of the three resources.
    client = fwd + bwd + down_each + up_each + 4 * LAT
    link = max(down_all, up_all)
    return max(client, srv, link)


def dp_round_time(k, n, bw, share=1.0, frames=False):
    """Pure data-parallel, synchronous: each client runs the whole model on
    its batch, sends all gradients, gets the averaged weights back. `share`
    as in round_time. frames=False: compute and link time only (the curve
    as first modelled); frames=True: plus the per-ticket frame work measured
    on the hybrid machinery (k["dp_ticket"]), half on the client and half on
    the server, which does its halves one client after another, and the
    machinery's two round trips per ticket."""
    compute = BATCH * k["standalone"] * share
    lat = 2 * LAT
    if frames:
        compute += k["dp_ticket"] / 2 * share + n * k["dp_ticket"] / 2
        lat = 4 * LAT
    grads = k["params_bytes"]
    if bw == float("inf"):
        return compute
    return compute + lat + max(grads / bw, n * grads / bw) * 2


def measured_table(runs, m):
    """What this invocation measured for model m: every scheme side by side."""
    print("Measured in this invocation (loopback; the server on CPU 0, the clients sharing CPU 1):\n")
    print("| run | clients | s | samples/s | CPU ms per sample | kB per ticket to / from clients "
          "| server idle | clients waiting |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for r in runs:
        if r["model"] != m:
            continue
        samples = r["epoch_seconds"] * r["samples_per_second"]
        if r["run"] == "standalone":
            print(f"| standalone | | | {r['samples_per_second']:.0f} | "
                  f"{r['cpu'] / samples * 1e3:.2f} | | | |")
            continue
        d, cs = r["distributed"], r["client_runs"]
        cpu = r["cpu"] + sum(c["cpu"] for c in cs)
        wait = sum(c["wait"] for c in cs) / sum(c["forward"] + c["backward"] + c["wait"] for c in cs)
        print(f"| {r['run']} | {r['clients']} | {r['staleness']} | {r['samples_per_second']:.0f} | "
              f"{cpu / samples * 1e3:.2f} | {d['bytes_to_clients'] / d['tickets'] / 1e3:.0f} / "
              f"{d['bytes_from_clients'] / d['tickets'] / 1e3:.0f} | "
              f"{d['wait_seconds'] / r['epoch_seconds']:.0%} | {wait:.0%} |")
    print()


def dp_check(runs, m, k):
    """The model's data-parallel curve against the measured data-parallel
    runs (synchronous ones: the model's data-parallel is synchronous)."""
    dp = [r for r in runs if r["run"] == "data-parallel" and r["model"] == m and r["staleness"] == 0]
    if not dp:
        return
    print("The model's data-parallel curve against the measured data-parallel runs "
          "(s = 0, loopback, clients sharing one core):\n")
    print("| clients | measured epoch s | model s (compute and links) | model / measured "
          "| measured beyond compute, per ticket | the hybrid's per-ticket frame work scaled to "
          "these bytes | model s with frame work | with frame work / measured |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in dp:
        n, d = r["clients"], r["distributed"]
        pred = d["rounds"] * dp_round_time(k, n, float("inf"), share=n)
        pred_f = d["rounds"] * dp_round_time(k, n, float("inf"), share=n, frames=True)
        extra = (r["epoch_seconds"] - pred) / d["tickets"]
        scaled = (k["ticket"] * (d["bytes_to_clients"] + d["bytes_from_clients"]) / d["tickets"]
                  / k["ticket_bytes"])
        print(f"| {n} | {r['epoch_seconds']:.2f} | {pred:.2f} | {pred / r['epoch_seconds']:.2f} | "
              f"{extra * 1e3:.1f} ms | {scaled * 1e3:.1f} ms | {pred_f:.2f} | "
              f"{pred_f / r['epoch_seconds']:.2f} |")
    print(f"\nData-parallel frame work per ticket (fitted on the 1-client s=0 run, as the "
          f"hybrid's): {k['dp_ticket'] * 1e3:.1f} ms\n")


def speedup(k, n, t):
    return (n * BATCH / t) / (1 / k["standalone"])


def main():
    args = sys.argv[1:]
    svg = None
    if "--svg" in args:
        i = args.index("--svg")
        svg = args[i + 1]
        del args[i : i + 2]
    ticket_kb = None
    if "--ticket-kb" in args:
        i = args.index("--ticket-kb")
        ticket_kb = float(args[i + 1])
        if not 1 <= ticket_kb <= 1e6:
            sys.exit(f"--ticket-kb: {args[i + 1]} is not in 1 .. 1000000")
        del args[i : i + 2]
    frame_ms = None
    if "--frame-ms" in args:
        i = args.index("--frame-ms")
        try:
            frame_ms = [float(x) for x in args[i + 1].split(",")]
        except ValueError:
            frame_ms = []
        if len(frame_ms) != 2 or not all(0 <= x <= 1e4 for x in frame_ms):
            sys.exit(f"--frame-ms: {args[i + 1]} is not SERVER,CLIENT in ms (0 .. 10000)")
        del args[i : i + 2]
    runs = [json.loads(l) for l in open(args[0]) if l.strip()]
    models = sorted({r["model"] for r in runs}, key=lambda m: (m != "cnn", m))
    plot = {}
    for m in models:
        k = costs(runs, m)
        if ticket_kb is not None:
            # The fit above used the measured bytes (loopback: they cost
            # no link time), so only the modelled links see the change.
            k["down"] = k["up"] = ticket_kb * 1e3
        if frame_ms is not None:
            k["ticket_srv"], k["ticket_cli"] = frame_ms[0] / 1e3, frame_ms[1] / 1e3
        print(f"### {m}: measured costs\n")
        print(f"- clients, per sample: features forward {k['fwd']*1e3:.3f} ms, backward "
              f"{k['bwd']*1e3:.3f} ms")
        print(f"- server, per round: {k['srv_a']*1e3:.2f} ms + {k['srv_b']*1e6:.1f} µs x rows "
              f"(classifier forward/backward/step, averaging, features step)")
        print(f"- standalone training: {k['standalone']*1e3:.3f} ms per sample "
              f"(runs: {', '.join(f'{x*1e3:.3f}' for x in k['standalone_all'])})")
        print(f"- per ticket beyond compute (fitted on the 1-client s=0 run): {k['ticket']*1e3:.1f} ms")
        if frame_ms is not None:
            print(f"- modelled instead (--frame-ms): {frame_ms[0]:.1f} ms a ticket on the server, "
                  f"{frame_ms[1]:.1f} ms on the client")
        print(f"- bytes per ticket: {k['down']/1e3:.0f} kB to the client, {k['up']/1e3:.0f} kB "
              f"back (activations {k['act']/1e3:.0f} kB each way); whole model "
              f"{k['params_bytes']/1e6:.2f} MB of parameters\n")
        measured_table(runs, m)
        print("Model against the measured runs (loopback, clients sharing one core):\n")
        print("| clients | s | measured epoch s | model s | model / measured |")
        print("|---:|---:|---:|---:|---:|")
        for r in runs:
            if r["run"] != "hybrid" or r["model"] != m:
                continue
            n, s = r["clients"], r["staleness"]
            rounds = r["distributed"]["rounds"]
            pred = rounds * round_time(k, n, float("inf"), s, share=n)
            print(f"| {n} | {s} | {r['epoch_seconds']:.2f} | {pred:.2f} | "
                  f"{pred / r['epoch_seconds']:.2f} |")
        print()
        dp_check(runs, m, k)
        print("Modelled speed-up over standalone training (samples/s ratio):\n")
        kinds = ("s=0", "s=1", "dp") + (("dpf",) if k["dp_ticket"] is not None else ())
        names = {"s=0": "s=0", "s=1": "s=1", "dp": "data-parallel",
                 "dpf": "data-parallel with frame work"}
        head = "| clients | " + " | ".join(
            f"{name} {names[kind]}" for name in LINKS for kind in kinds) + " |"
        print(head)
        print("|---:|" + "---:|" * (len(kinds) * len(LINKS)))
        for n in CLIENTS:
            cells = []
            for name, bw in LINKS.items():
                for kind in kinds:
                    if kind in ("dp", "dpf"):
                        t = dp_round_time(k, n, bw, frames=kind == "dpf")
                    else:
                        t = round_time(k, n, bw, 0 if kind == "s=0" else 1)
                    x = speedup(k, n, t)
                    cells.append(f"{x:.2f}")
                    plot.setdefault(m, {}).setdefault((name, kind), []).append((n, x))
            print(f"| {n} | " + " | ".join(cells) + " |")
        measured = []
        for r in runs:
            if r["run"] == "hybrid" and r["model"] == m:
                measured.append((r["clients"], r["staleness"],
                                 r["samples_per_second"] * k["standalone"]))
        plot.setdefault(m, {})[("measured", "2 vCPUs")] = measured
        dp = [(r["clients"], r["staleness"], r["samples_per_second"] * k["standalone"])
              for r in runs if r["run"] == "data-parallel" and r["model"] == m]
        if dp:
            plot[m][("measured-dp", "2 vCPUs")] = dp
        print()
    if svg:
        write_svg(svg, plot)


def write_svg(path, plot):
    import math
    w, h, pad = 560, 360, 50
    legend = 240  # to the right of each panel's plot
    panels = list(plot.items())
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{(w + legend) * len(panels)}" height="{h}" '
           f'font-family="sans-serif" font-size="11">']
    colors = {("100 Mbit/s", "s=1"): "#1f77b4", ("1 Gbit/s", "s=1"): "#2ca02c",
              ("100 Mbit/s", "dp"): "#ff7f0e", ("1 Gbit/s", "dp"): "#d62728",
              ("100 Mbit/s", "s=0"): "#9ecae1", ("1 Gbit/s", "s=0"): "#a1d99b",
              ("100 Mbit/s", "dpf"): "#ff7f0e", ("1 Gbit/s", "dpf"): "#d62728"}
    ymax = 1
    for _, series in panels:
        for key, pts in series.items():
            if not key[0].startswith("measured"):
                ymax = max(ymax, max(y for _, y in pts))
    ymax = min(ymax * 1.1, 70)
    x0, x1 = math.log2(1), math.log2(64)
    for p, (model, series) in enumerate(panels):
        ox = p * (w + legend)
        lx = ox + w - pad + 16  # the legend's left edge
        X = lambda n: ox + pad + (math.log2(n) - x0) / (x1 - x0) * (w - 2 * pad)
        Y = lambda v: h - pad - min(v, ymax) / ymax * (h - 2 * pad)
        out.append(f'<text x="{ox + w / 2}" y="16" text-anchor="middle" font-size="13">'
                   f'{model}: speed-up over standalone vs clients</text>')
        out.append(f'<line x1="{ox + pad}" y1="{h - pad}" x2="{ox + w - pad}" y2="{h - pad}" stroke="#333"/>')
        out.append(f'<line x1="{ox + pad}" y1="{pad}" x2="{ox + pad}" y2="{h - pad}" stroke="#333"/>')
        for n in CLIENTS:
            out.append(f'<text x="{X(n)}" y="{h - pad + 14}" text-anchor="middle">{n}</text>')
        step = 1 if ymax <= 10 else 5 if ymax <= 40 else 10
        v = 0
        while v <= ymax:
            out.append(f'<text x="{ox + pad - 6}" y="{Y(v) + 4}" text-anchor="end">{v}x</text>')
            out.append(f'<line x1="{ox + pad}" y1="{Y(v)}" x2="{ox + w - pad}" y2="{Y(v)}" stroke="#eee"/>')
            v += step
        ly = pad
        for key, pts in series.items():
            if key[0] == "measured":
                for n, s, y in pts:
                    out.append(f'<circle cx="{X(n)}" cy="{Y(y)}" r="3.5" fill="none" stroke="#000"/>')
                out.append(f'<circle cx="{lx + 8}" cy="{ly - 3}" r="3.5" fill="none" stroke="#000"/>')
                out.append(f'<text x="{lx + 18}" y="{ly}">hybrid measured here (2 shared vCPUs)</text>')
                ly += 14
                continue
            if key[0] == "measured-dp":
                c = colors[("1 Gbit/s", "dp")]
                for n, s, y in pts:
                    out.append(f'<rect x="{X(n) - 3.5}" y="{Y(y) - 3.5}" width="7" height="7" '
                               f'fill="none" stroke="{c}"/>')
                out.append(f'<rect x="{lx + 4.5}" y="{ly - 6.5}" width="7" height="7" '
                           f'fill="none" stroke="{c}"/>')
                out.append(f'<text x="{lx + 18}" y="{ly}">data-parallel measured here</text>')
                ly += 14
                continue
            d = " ".join(f"{X(n):.1f},{Y(y):.1f}" for n, y in pts)
            c = colors[key]
            dash = ' stroke-dasharray="5,3"' if key[1] == "dpf" else ""
            out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
            label = f"{key[0]} " + {"dp": "data-parallel",
                                    "dpf": "data-parallel + frame work"}.get(key[1], f"hybrid {key[1]}")
            out.append(f'<line x1="{lx}" y1="{ly - 3}" x2="{lx + 15}" '
                       f'y2="{ly - 3}" stroke="{c}" stroke-width="2"{dash}/>')
            out.append(f'<text x="{lx + 18}" y="{ly}">{label}</text>')
            ly += 14
        # The references: the seed's 2x at 4 clients, Krizhevsky's 6.2x on 8 GPUs.
        for n, y, label in ((4, 2.0, "seed: 2x (4)"), (8, 6.2, "Krizhevsky: 6.2x (8)")):
            out.append(f'<rect x="{X(n) - 4}" y="{Y(y) - 4}" width="8" height="8" fill="#777"/>')
            out.append(f'<text x="{X(n) + 7}" y="{Y(y) + 4}" fill="#555">{label}</text>')
        out.append(f'<text x="{ox + w / 2}" y="{h - 12}" text-anchor="middle">clients (log scale)</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
