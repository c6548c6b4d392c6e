#!/usr/bin/env python3
"""PyTorch peer of bench_gpu, on one CUDA GPU: matmul speed, and training and
inference steps of the zoo GPT and of gpt_125m (models/gpt.yaml,
models/gpt_125m.yaml), timed as bench_gpu times Tessera.

Matmuls: torch.matmul of two N x N matrices, f32 (TF32 off, PyTorch's default),
tf32 (TF32 on) and bf16; the best of several timed repeats, in TFLOP/s. The
largest size gives the "measured peak" that bench_gpu sets the model FLOP
utilisation against.

Steps: one fixed random batch (tokens and targets uniform in [0, 256)) on the
GPU, reused every step. Training: zero-grad (set_to_none), forward, mean
cross-entropy, backward, AdamW (lr 3e-4, weight decay 0.01, PyTorch's fused
CUDA implementation, its fastest); inference: a forward pass under
torch.inference_mode(). bf16 is torch.autocast (bf16 matmuls, f32 weights and
optimizer state), as Tessera's training.precision: bf16. Attention runs two
ways: "sdpa" (F.scaled_dot_product_attention: flash attention, PyTorch eager
at its best) and "explicit" (the same matmul-softmax-matmul math as Tessera).
Each step ends with torch.cuda.synchronize(); --warmup untimed steps, then
--steps timed ones.

Attention alone (--attention-shapes B x T x H x K): F.scaled_dot_product_attention,
causal, bf16, on q, k, v made [B, T, H, K] and viewed [B, H, T, K] (as the
model's projections give them): the forward pass, and forward with backward;
medians of --steps, in ms.

Prints one JSON line per measurement:
  {"kind": "matmul", "n": 8192, "dtype": "bf16", "tflops": ...}
  {"kind": "step", "model": "gpt", "precision": "bf16", "mode": "train",
   "attention": "sdpa", "params": ..., "min_ms": ..., "median_ms": ..., "max_ms": ...}
  {"kind": "attention", "shape": "8x1024x12x64", "forward_ms": ..., "train_ms": ...}
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # bench_gpu reports the peer as unavailable
    print(f"cannot import torch: {e}", file=sys.stderr)
    sys.exit(3)

from torch_models import GPT, csv_list, time_steps

# models/<name>.yaml's shapes.
MODELS = {
    "gpt": dict(vocab=256, context=128, d_model=256, layers=4, heads=4, ff=1024, batch=8),
    "gpt_125m": dict(vocab=256, context=1024, d_model=768, layers=18, heads=12, ff=3072, batch=8),
}


def time_matmul(n, dtype, repeats):
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    a = torch.randn(n, n, device="cuda", dtype=torch_dtype)
    b = torch.randn(n, n, device="cuda", dtype=torch_dtype)
    iters = max(1, int(2e12 / (2 * n ** 3)))  # about 2 TFLOP a repeat
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / iters)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n ** 3 / best / 1e12


def time_attention(shape, warmup, steps):
    b, t, h, k = shape
    torch.manual_seed(0)

    def operand():
        return torch.randn(b, t, h, k, device="cuda", dtype=torch.bfloat16).requires_grad_()

    q, key, v = operand(), operand(), operand()
    dout = torch.randn(b, h, t, k, device="cuda", dtype=torch.bfloat16)

    def attend():
        return F.scaled_dot_product_attention(q.transpose(1, 2), key.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True)

    def forward():
        with torch.no_grad():
            attend()
        torch.cuda.synchronize()

    def forward_backward():
        q.grad = key.grad = v.grad = None
        attend().backward(dout)
        torch.cuda.synchronize()

    return (statistics.median(time_steps(forward, warmup, steps)),
            statistics.median(time_steps(forward_backward, warmup, steps)))


def stepper(name, precision, mode, attention):
    shape = dict(MODELS[name])
    batch = shape.pop("batch")
    torch.manual_seed(0)
    model = GPT(sdpa=attention == "sdpa", **shape).cuda()
    params = sum(p.numel() for p in model.parameters())
    x = torch.randint(0, shape["vocab"], (batch, shape["context"]), device="cuda")
    y = torch.randint(0, shape["vocab"], (batch, shape["context"]), device="cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16")
    if mode == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01, fused=True)

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast:
                out = model(x)
            loss = F.cross_entropy(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
    else:
        model.eval()

        def step():
            with torch.inference_mode(), autocast:
                model(x)
            torch.cuda.synchronize()
    return params, step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matmul", type=lambda s: [int(n) for n in csv_list(s)], default=[],
                    help="matrix sizes N to time (N x N @ N x N)")
    ap.add_argument("--dtypes", type=csv_list, default=["f32", "tf32", "bf16"])
    ap.add_argument("--models", type=csv_list, default=[])
    ap.add_argument("--precisions", type=csv_list, default=["f32", "bf16"])
    ap.add_argument("--modes", type=csv_list, default=["train", "infer"])
    ap.add_argument("--attention", type=csv_list, default=["sdpa", "explicit"])
    ap.add_argument("--attention-shapes", type=csv_list, default=[],
                    help="B x T x H x K of attention alone (e.g. 8x1024x12x64)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu.py: PyTorch sees no CUDA GPU", file=sys.stderr)
        sys.exit(3)
    print(json.dumps({"kind": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}),
          flush=True)
    for n in args.matmul:
        for dtype in args.dtypes:
            print(json.dumps({"kind": "matmul", "n": n, "dtype": dtype, "tflops": time_matmul(n, dtype, 5)}),
                  flush=True)
    for text in args.attention_shapes:
        forward_ms, train_ms = time_attention([int(d) for d in text.split("x")], args.warmup, args.steps)
        print(json.dumps({"kind": "attention", "shape": text, "forward_ms": forward_ms, "train_ms": train_ms}),
              flush=True)
        torch.cuda.empty_cache()
    for name in args.models:
        if name not in MODELS:
            raise SystemExit(f"torch_gpu.py: unknown model '{name}' (known: {', '.join(MODELS)})")
        for precision in args.precisions:
            for mode in args.modes:
                for attention in args.attention:
                    params, step = stepper(name, precision, mode, attention)
                    times = time_steps(step, args.warmup, args.steps)
                    print(json.dumps({"kind": "step", "model": name, "precision": precision, "mode": mode,
                                      "attention": attention, "params": params, "min_ms": min(times),
                                      "median_ms": statistics.median(times), "max_ms": max(times)}),
                          flush=True)
                    del step
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
