#!/usr/bin/python3
"""PyTorch peer of bench_generate: the zoo GPT (models/gpt.yaml) with
Tessera's weights, read from a safetensors file (no safetensors package
needed), generating greedily with its own KV cache.

A prefill pass runs the prompts [B, P] once, keeping each layer's keys and
values; each decode step then runs one token per sequence against the cache.
Prints one JSON line per --threads value:
  {"batch": 1, "threads": 1, "prompt_tokens": 64, "new_tokens": 32,
   "prefill_ms": [...], "decode_ms_per_token": [...], "tokens": [[...], ...]}
with the time of each repetition (prefill: the prompt pass and its first
token; decode: per later token), and the generated tokens of the last one.

Run it as bench_generate does (bench/torch_peer.hpp sets the environment):
  /usr/bin/python3 bench/torch_generate.py --weights gpt.safetensors --prompts prompts.json --threads 1
"""
import argparse
import json
import struct
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # bench_generate reports the peer as unavailable
    print(f"cannot import torch: {e}", file=sys.stderr)
    sys.exit(3)

DTYPES = {"F32": torch.float32}


def read_safetensors(path):
    """name -> tensor, from the format's 8-byte header length and JSON header."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"])
    return tensors


class Gpt:
    """Tessera's GPT: token + position embeddings; pre-LayerNorm blocks of
    multi-head causal attention (query, key, value [D, H, K] with biases,
    scores / sqrt(K), output [H, K, D] + bias) and GELU (erf) feed-forward;
    final LayerNorm; head [D, V] without bias. Weights by Tessera's paths."""

    def __init__(self, w, layers=4, heads=4):
        self.w, self.layers, self.heads = w, layers, heads
        d = w["token_embedding/embeddings"].shape[1]
        self.key_dim = d // heads
        # Per block: q, k, v as one [D, 3D] matmul (the same products as three).
        self.qkv = []
        for i in range(layers):
            p = f"block_{i}/attention/"
            kernel = torch.cat([w[p + n + "/kernel"].reshape(d, -1) for n in ("query", "key", "value")], dim=1)
            bias = torch.cat([w[p + n + "/bias"].reshape(-1) for n in ("query", "key", "value")])
            self.qkv.append((kernel.contiguous(), bias))

    def block(self, i, x, cache, positions):
        w, p, d = self.w, f"block_{i}/", x.shape[-1]
        b, t = x.shape[0], x.shape[1]
        h = F.layer_norm(x, (d,), w[p + "norm_1/gamma"], w[p + "norm_1/beta"], 1e-5)
        kernel, bias = self.qkv[i]
        q, k, v = torch.addmm(bias, h.reshape(b * t, d), kernel).reshape(b, t, 3, self.heads, self.key_dim).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [B, H, T, K]
        k_cache, v_cache = cache[i]
        k_cache[:, :, positions] = k
        v_cache[:, :, positions] = v
        end = positions[-1] + 1
        keys, values = k_cache[:, :, :end], v_cache[:, :, :end]
        scores = (q @ keys.transpose(-2, -1)) * (1.0 / self.key_dim ** 0.5)
        if t > 1:  # the prompt: causal within it
            mask = torch.triu(torch.ones(t, end, dtype=torch.bool), diagonal=1 + end - t)
            scores = scores.masked_fill(mask, float("-inf"))
        y = (scores.softmax(dim=-1) @ values).transpose(1, 2).reshape(b, t, d)
        x = x + y @ w[p + "attention/attention_output/kernel"].reshape(d, d) + w[p + "attention/attention_output/bias"]
        h = F.layer_norm(x, (d,), w[p + "norm_2/gamma"], w[p + "norm_2/beta"], 1e-5)
        h = F.gelu(h @ w[p + "ffn_in/kernel"] + w[p + "ffn_in/bias"])
        return x + h @ w[p + "ffn_out/kernel"] + w[p + "ffn_out/bias"]

    def step(self, tokens, cache, start):
        """Scores of the last position after tokens [B, T] at positions start.."""
        w = self.w
        positions = torch.arange(start, start + tokens.shape[1])
        x = w["token_embedding/embeddings"][tokens] + w["position_embedding/embeddings"][positions]
        for i in range(self.layers):
            x = self.block(i, x, cache, positions)
        x = F.layer_norm(x[:, -1], (x.shape[-1],), w["final_norm/gamma"], w["final_norm/beta"], 1e-5)
        return x @ w["head/kernel"]

    def generate(self, prompts, new_tokens):
        """Greedy tokens after each prompt; (prefill s, decode s per token, tokens)."""
        b, p = prompts.shape
        context = self.w["position_embedding/embeddings"].shape[0]
        if p + new_tokens - 1 > context:
            raise SystemExit(f"torch_generate.py: {p} prompt + {new_tokens} new tokens pass the context of {context}")
        shape = (b, self.heads, context, self.key_dim)
        cache = [(torch.empty(shape), torch.empty(shape)) for _ in range(self.layers)]
        out = []
        start = time.perf_counter()
        token = self.step(prompts, cache, 0).argmax(-1)
        prefill = time.perf_counter() - start
        out.append(token)
        start = time.perf_counter()
        for n in range(1, new_tokens):
            token = self.step(token[:, None], cache, p + n - 1).argmax(-1)
            out.append(token)
        decode = (time.perf_counter() - start) / max(1, new_tokens - 1)
        return prefill, decode, torch.stack(out, dim=1).tolist()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", required=True, help="safetensors file of Tessera's GPT variables")
    parser.add_argument("--prompts", required=True, help="JSON file: a list of equally long lists of tokens")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", default="1", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = Gpt(read_safetensors(args.weights))
    prompts = torch.tensor(json.load(open(args.prompts)), dtype=torch.long)
    with torch.inference_mode():
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            model.generate(prompts, min(4, args.new_tokens))  # warm-up
            runs = [model.generate(prompts, args.new_tokens) for _ in range(args.repeats)]
            print(json.dumps({"batch": prompts.shape[0], "threads": threads, "prompt_tokens": prompts.shape[1],
                              "new_tokens": args.new_tokens, "prefill_ms": [r[0] * 1e3 for r in runs],
                              "decode_ms_per_token": [r[1] * 1e3 for r in runs], "tokens": runs[-1][2]}),
                  flush=True)


if __name__ == "__main__":
    main()
