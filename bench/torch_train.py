#!/usr/bin/python3
"""PyTorch peer of bench/train_bench.cpp: same configs, same RESULT lines.

Run it at its best (bench/run_train_bench.sh does this), single thread:
  env -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
      MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 \
      /usr/bin/python3 bench/torch_train.py throughput --config a --seconds 3
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

FEATURES, CLASSES = 784, 10
CONFIGS = {
    "a": ([256, 256], "sgd", 64),
    "b": ([256, 256], "adam", 64),
    "c": ([256] * 16, "sgd", 64),
    "d": ([32], "sgd", 1),
}


def mlp(hidden):
    layers, w_in = [], FEATURES
    for w in hidden:
        layers += [torch.nn.Linear(w_in, w), torch.nn.ReLU()]
        w_in = w
    layers.append(torch.nn.Linear(w_in, CLASSES))
    return torch.nn.Sequential(*layers)


def optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    return torch.optim.Adam(params, lr=1e-3)


def step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def throughput(a):
    hidden, kind, batch = CONFIGS[a.config]
    model = mlp(hidden)
    opt = optimizer(kind, model.parameters())
    g = torch.Generator().manual_seed(42)
    pool = 16  # distinct pre-generated batches, cycled
    xs = [torch.randn(batch, FEATURES, generator=g) for _ in range(pool)]
    ys = [torch.randint(0, CLASSES, (batch,), generator=g) for _ in range(pool)]
    it, rates, cpu_rates = [0], [], []

    def run_for(secs):  # wall and thread-CPU rates, like train_bench
        t0, c0 = time.perf_counter(), time.thread_time()
        steps = 0
        while True:
            for _ in range(16):
                i = it[0] % pool
                step(model, opt, xs[i], ys[i])
                it[0] += 1
                steps += 1
            el = time.perf_counter() - t0
            if el >= secs:
                rates.append(steps / el)
                cpu_rates.append(steps / (time.thread_time() - c0))
                return

    run_for(a.warmup)
    rates.clear()
    cpu_rates.clear()
    for _ in range(a.windows):
        run_for(a.seconds / a.windows)
    rate, cpu_rate = statistics.median(rates), statistics.median(cpu_rates)
    params = sum(p.numel() for p in model.parameters())
    print(f"RESULT impl=torch config={a.config} threads={torch.get_num_threads()} "
          f"params={params} batch={batch} steps_per_s={rate:.2f} samples_per_s={rate * batch:.1f} "
          f"cpu_samples_per_s={cpu_rate * batch:.1f}",
          flush=True)


def depth(a):
    model = mlp([a.width] * a.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(a.samples, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (a.samples,), generator=g)

    def epoch():  # like nn::Trainer::run_epoch: shuffle, gather each batch, step
        t0, c0 = time.perf_counter(), time.thread_time()
        order = torch.randperm(a.samples, generator=g)
        for b in range(0, a.samples, 64):
            idx = order[b:b + 64]
            step(model, opt, x[idx], y[idx])
        return time.perf_counter() - t0, time.thread_time() - c0

    epoch()  # warm-up
    runs = [epoch() for _ in range(a.epochs)]
    secs = statistics.median(r[0] for r in runs)
    cpu_secs = statistics.median(r[1] for r in runs)
    params = sum(p.numel() for p in model.parameters())
    print(f"RESULT impl=torch depth={a.depth} width={a.width} samples={a.samples} "
          f"params={params} seconds={secs:.5f} cpu_seconds={cpu_secs:.5f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--config", choices=sorted(CONFIGS), default="a")
    t.add_argument("--seconds", type=float, default=3.0)
    t.add_argument("--warmup", type=float, default=0.5)
    t.add_argument("--windows", type=int, default=5)
    d = sub.add_parser("depth")
    d.add_argument("--depth", type=int, default=1)
    d.add_argument("--width", type=int, default=64)
    d.add_argument("--samples", type=int, default=10000)
    d.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    throughput(a) if a.mode == "throughput" else depth(a)


if __name__ == "__main__":
    main()
