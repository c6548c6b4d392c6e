#!/usr/bin/python3
"""PyTorch peer of bench_fit: a plain training loop over Fashion-MNIST with the
data, batch size, shuffling and optimizer of Tessera's configs/fashion_mlp.yaml
(the reference MLP, Adam 1e-3 with a cosine decay over the run) or
configs/fashion_cnn.yaml (the reference CNN, SGD 0.01 momentum 0.9).

The whole training set is loaded first (IDX files scaled by 1/255, as
Tessera's loader does), then each epoch draws a new permutation and walks it
in batches, the last one partial (Tessera's fit does the same). A step is
zero-grad (set_to_none), forward, mean cross-entropy on logits, backward,
optimizer step, and the batch's loss and correct count read back, as Tessera's
fit computes its loss and accuracy every step. No validation pass. Denormals
are flushed (torch.set_flush_denormal(True)), as Tessera flushes them, and the
optimizer runs the faster of PyTorch's for-loop and foreach implementations
(timed briefly on the first batch before the run).

Prints one JSON line per epoch, then one for the run:
  {"epoch": 1, "seconds": ..., "samples": 60000, "loss": ..., "accuracy": ...}
  {"fit_seconds": ..., "epochs": 10, "foreach": true, "params": 1863690}
fit_seconds is the sum of the epochs' seconds.

  bench/torch_fit.py --model mlp --epochs 10 --threads 2 --data /usr/share/datasets/fashion-mnist

With --paced it prints {"ready": true} once set up, then runs one epoch per
line read from standard input: bench_fit runs it that way, one PyTorch epoch
after each Tessera epoch, so that both sides see the same machine state.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # bench_fit reports the peer as failed
    print(f"cannot import torch or numpy: {e}", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  the reference models, defined once

BATCH = {"mlp": 128, "cnn": 64}


def read_idx(path, header_bytes):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header_bytes)


def load_fashion_mnist(folder, model):
    images = read_idx(os.path.join(folder, "train-images-idx3-ubyte.gz"), 16).astype(np.float32) / 255.0
    labels = read_idx(os.path.join(folder, "train-labels-idx1-ubyte.gz"), 8).astype(np.int64)
    x = torch.from_numpy(images.copy())
    x = x.view(-1, 784) if model == "mlp" else x.view(-1, 1, 28, 28)
    return x, torch.from_numpy(labels.copy())


def make_model_and_optimizer(name, total_steps, foreach):
    torch.manual_seed(0)
    if name == "mlp":
        model = torch_models.mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=foreach)
        # Tessera's cosine schedule: lr * 0.5 * (1 + cos(pi * step / steps)) over the run.
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda t: 0.5 * (1.0 + math.cos(math.pi * min(1.0, t / max(1, total_steps)))))
    else:
        model = torch_models.cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=foreach)
        sched = None
    return model, opt, sched


def step(model, opt, sched, xb, yb):
    opt.zero_grad(set_to_none=True)
    out = model(xb)
    loss = F.cross_entropy(out, yb)
    loss.backward()
    opt.step()
    if sched is not None:
        sched.step()
    return loss.item(), (out.argmax(dim=1) == yb).sum().item()


def faster_foreach(name, x, y, batch):
    """PyTorch's faster optimizer implementation here: a few steps of each."""
    best = None
    for foreach in (False, True):
        model, opt, sched = make_model_and_optimizer(name, 100, foreach)
        xb, yb = x[:batch], y[:batch]
        for _ in range(2):
            step(model, opt, sched, xb, yb)
        start = time.perf_counter()
        for _ in range(5):
            step(model, opt, sched, xb, yb)
        seconds = time.perf_counter() - start
        if best is None or seconds < best[0]:
            best = (seconds, foreach)
    return best[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paced", action="store_true", help="run an epoch per line of standard input")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    x, y = load_fashion_mnist(args.data, args.model)
    batch = BATCH[args.model]
    n = x.shape[0]
    steps_per_epoch = (n + batch - 1) // batch
    foreach = faster_foreach(args.model, x, y, batch)
    model, opt, sched = make_model_and_optimizer(args.model, steps_per_epoch * args.epochs, foreach)
    model.train()
    generator = torch.Generator().manual_seed(args.seed)

    fit_seconds = 0.0
    if args.paced:
        print(json.dumps({"ready": True}), flush=True)
    for epoch in range(1, args.epochs + 1):
        if args.paced and not sys.stdin.readline():
            return  # the caller went away
        start = time.perf_counter()
        order = torch.randperm(n, generator=generator)
        loss_sum, correct = 0.0, 0
        for first in range(0, n, batch):
            idx = order[first:first + batch]
            loss, hits = step(model, opt, sched, x[idx], y[idx])
            loss_sum += loss * idx.numel()
            correct += hits
        seconds = time.perf_counter() - start
        fit_seconds += seconds
        print(json.dumps({"epoch": epoch, "seconds": seconds, "samples": n, "loss": loss_sum / n,
                          "accuracy": correct / n}), flush=True)
    print(json.dumps({"fit_seconds": fit_seconds, "epochs": args.epochs, "foreach": foreach,
                      "params": sum(p.numel() for p in model.parameters())}), flush=True)


if __name__ == "__main__":
    main()
