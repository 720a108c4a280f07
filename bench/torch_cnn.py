#!/usr/bin/python3
"""PyTorch peer of bench/cnn_bench.cpp: same nets, same RESULT lines.

Run it at its best (bench/run_cnn_bench.sh does this), N pinned threads:
  env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=1 \
      OPENBLAS_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=1073741824 \
      MALLOC_TRIM_THRESHOLD_=1073741824 taskset -c 0 \
      /usr/bin/python3 bench/torch_cnn.py --config cifar --threads 1 --seconds 4
"""
import argparse
import statistics
import time

import torch
import torch.nn as tnn
import torch.nn.functional as F

CLASSES, BATCH = 10, 64


def net(config):
    if config == "fashion":  # the net of examples/fashion-cnn.yaml (87,434 parameters)
        def block(c_in, f):
            return [tnn.Conv2d(c_in, f, 3, padding=1), tnn.BatchNorm2d(f), tnn.ReLU()]
        layers = (block(1, 32) + [tnn.MaxPool2d(2), tnn.Dropout(0.1)] + block(32, 64) +
                  [tnn.MaxPool2d(2)] + block(64, 64) +
                  [tnn.Dropout(0.4), tnn.Flatten(), tnn.Linear(64 * 7 * 7, CLASSES)])
        return tnn.Sequential(*layers), (1, 28, 28)
    if config == "fashion2":  # the 2-block net examples/fashion-cnn.yaml had until 2026-12-03
        layers, c_in = [], 1
        for f in (32, 64):
            layers += [tnn.Conv2d(c_in, f, 3, padding=1), tnn.BatchNorm2d(f), tnn.ReLU(),
                       tnn.MaxPool2d(2)]
            c_in = f
        layers += [tnn.Dropout(0.3), tnn.Flatten(), tnn.Linear(64 * 7 * 7, CLASSES)]
        return tnn.Sequential(*layers), (1, 28, 28)
    if config == "cifar":  # CIFAR-10-quick
        layers, c_in = [], 3
        for f in (32, 32, 64):
            layers += [tnn.Conv2d(c_in, f, 5, padding=2), tnn.ReLU(), tnn.MaxPool2d(2)]
            c_in = f
        layers += [tnn.Flatten(), tnn.Linear(64 * 4 * 4, 64), tnn.ReLU(),
                   tnn.Linear(64, CLASSES)]
        return tnn.Sequential(*layers), (3, 32, 32)
    raise SystemExit(f"unknown --config {config!r} (fashion, fashion2, cifar)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="fashion")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=4)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--windows", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model, shape = net(a.config)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    pool = 8
    xs = [torch.randn(BATCH, *shape) for _ in range(pool)]
    ys = [torch.randint(0, CLASSES, (BATCH,)) for _ in range(pool)]
    step = 0

    def run_for(secs):
        nonlocal step
        t0, c0 = time.perf_counter(), time.process_time()
        steps = 0
        while True:
            i = step % pool
            loss = F.cross_entropy(model(xs[i]), ys[i])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            step += 1
            el = time.perf_counter() - t0
            if el >= secs:
                return steps / el, steps / (time.process_time() - c0)

    run_for(a.warmup)
    rates = [run_for(a.seconds / a.windows) for _ in range(a.windows)]
    params = sum(p.numel() for p in model.parameters())
    print(f"RESULT impl=pytorch config={a.config} threads={a.threads} torch={torch.__version__} "
          f"params={params} batch={BATCH} "
          f"samples_per_s={statistics.median(r[0] for r in rates) * BATCH:.1f} "
          f"cpu_samples_per_s={statistics.median(r[1] for r in rates) * BATCH:.1f}")


if __name__ == "__main__":
    main()
