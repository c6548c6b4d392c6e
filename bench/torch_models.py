#!/usr/bin/python3
"""PyTorch peer of bench_models: the three reference models of
shared/REFERENCE_MODELS.md (the zoo's models/mlp.yaml, cnn.yaml, gpt.yaml),
timed step by step as bench_models times Tessera.

One fixed random batch is reused every step (classifier inputs N(0, 1), labels
uniform in [0, 10); GPT tokens and targets uniform in [0, 256)). A training
step is zero-grad (set_to_none), forward, mean cross-entropy, backward and the
reference optimizer's step; inference is a forward pass under
torch.inference_mode(). After --warmup untimed steps, --steps steps are timed
one by one. The optimizer runs PyTorch's faster implementation on this machine
(for-loop or foreach, see --foreach).

Prints one JSON line per (model, mode, threads):
  {"model": "mlp", "mode": "train", "threads": 1, "params": 1863690, "foreach": true,
   "warmup": 10, "steps": 30, "min_ms": ..., "median_ms": ..., "max_ms": ...}
bench/torch_env.py checks the installation and times the peer's own GEMM.

Run it as bench_models does (shared/REFERENCE_MODELS.md): with Debian's
/usr/bin/python3, LD_LIBRARY_PATH at the openblas-openmp folder of
libopenblas0-openmp, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset, and glibc's
malloc keeping what PyTorch frees (bench/torch_peer.hpp, kKeepFreedMemory):

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
      LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \\
      GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736 \\
      /usr/bin/python3 bench/torch_models.py --models mlp --modes train --threads 1
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # bench_models reports the peer as unavailable
    print(f"cannot import torch: {e}", file=sys.stderr)
    sys.exit(3)

# Parameter counts of shared/REFERENCE_MODELS.md.
REFERENCE_PARAMS = {"mlp": 1_863_690, "cnn": 1_199_882, "gpt": 3_323_392}
BATCH = {"mlp": 128, "cnn": 64, "gpt": 8}


def mlp():
    # Dense(1024, relu) -> Dense(1024, relu) -> Dense(10) on 784 inputs.
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def cnn():
    # 28x28x1: Conv2D(32, 3) relu, Conv2D(64, 3) relu, MaxPool(2), Flatten (9216),
    # Dense(128, relu), Dense(10); stride 1, valid padding. NCHW as PyTorch prefers
    # (Tessera is NHWC): the flatten order differs, the work does not.
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
                         nn.Linear(128, 10))


class Block(nn.Module):
    """Pre-LayerNorm block: x + proj(attention(LN1(x))), x + fc2(gelu(fc(LN2(x))))."""

    def __init__(self, d_model=256, heads=4, ff=1024, context=128, sdpa=False):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa  # PyTorch's fused attention (flash on a GPU) instead of the same math
        self.ln1 = nn.LayerNorm(d_model, eps=1e-5)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-5)
        self.fc = nn.Linear(d_model, ff)
        self.fc2 = nn.Linear(ff, d_model)
        self.gelu = nn.GELU()  # exact (erf)
        mask = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)  # / 8
            scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
            y = scores.softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(self.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Pre-norm GPT: token and position embeddings, `layers` blocks of `heads`
    heads (feed-forward `ff` wide), final LayerNorm, untied head without bias.
    The defaults are the zoo GPT (models/gpt.yaml): byte vocabulary 256,
    context 128, d_model 256, 4 blocks of 4 heads of 64."""

    def __init__(self, vocab=256, context=128, d_model=256, layers=4, heads=4, ff=1024, sdpa=False):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, d_model)
        self.position_embedding = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads, ff, context, sdpa) for _ in range(layers)])
        self.final_norm = nn.LayerNorm(d_model, eps=1e-5)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        return self.head(self.final_norm(self.blocks(x)))


def build(name):
    """The model, a function making its reference optimizer (foreach=True or
    False: PyTorch's two implementations of the same update), and one fixed
    random batch."""
    torch.manual_seed(0)
    b = BATCH[name]
    if name == "mlp":
        model = mlp()
        make_opt = lambda foreach: torch.optim.Adam(  # noqa: E731
            model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=foreach)
        x, y = torch.randn(b, 784), torch.randint(0, 10, (b,))
    elif name == "cnn":
        model = cnn()
        make_opt = lambda foreach: torch.optim.SGD(  # noqa: E731
            model.parameters(), lr=0.01, momentum=0.9, foreach=foreach)
        x, y = torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,))
    elif name == "gpt":
        model = GPT()
        make_opt = lambda foreach: torch.optim.AdamW(  # noqa: E731
            model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
            foreach=foreach)
        x, y = torch.randint(0, 256, (b, 128)), torch.randint(0, 256, (b, 128))
    else:
        raise SystemExit(f"torch_models.py: unknown model '{name}' (known: mlp, cnn, gpt)")
    return model, make_opt, x, y


def train_step(model, opt, x, y):
    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
    return step


def stepper(name, mode, foreach):
    """(parameters, the step function, the foreach setting used or None)."""
    model, make_opt, x, y = build(name)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if mode == "train":
        model.train()
        if foreach == "auto":
            # Which implementation is faster depends on the optimizer and the
            # parameter shapes (on CPU PyTorch 1.13 defaults to the for-loop;
            # foreach is much faster for the MLP's Adam, slower for the GPT's
            # AdamW): time both briefly and keep the faster.
            best = None
            for candidate in (False, True):
                median = statistics.median(time_steps(train_step(model, make_opt(candidate), x, y), 3, 10))
                if best is None or median < best[0]:
                    best = (median, candidate)
            use = best[1]
        else:
            use = foreach == "on"
        return params, train_step(model, make_opt(use), x, y), use
    if mode == "infer":
        model.eval()

        def step():
            with torch.inference_mode():
                model(x)
        return params, step, None
    raise SystemExit(f"torch_models.py: unknown mode '{mode}' (known: train, infer)")


def time_steps(step, warmup, steps):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def csv_list(text):
    return [item for item in text.split(",") if item]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=csv_list, default=["mlp", "cnn", "gpt"])
    ap.add_argument("--modes", type=csv_list, default=["train", "infer"])
    ap.add_argument("--threads", type=lambda s: [int(t) for t in csv_list(s)], default=[1, 2])
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--foreach", choices=["auto", "on", "off"], default="auto",
                    help="optimizer implementation: foreach, the for-loop, or the faster of the two "
                         "timed briefly before the warm-up (auto)")
    args = ap.parse_args()

    for name in args.models:
        for mode in args.modes:
            for threads in args.threads:
                torch.set_num_threads(threads)
                params, step, foreach = stepper(name, mode, args.foreach)
                times = time_steps(step, args.warmup, args.steps)
                print(json.dumps({
                    "model": name, "mode": mode, "threads": threads, "params": params, "foreach": foreach,
                    "reference_params": REFERENCE_PARAMS[name], "warmup": args.warmup,
                    "steps": args.steps, "min_ms": min(times),
                    "median_ms": statistics.median(times), "max_ms": max(times),
                    "torch_threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
