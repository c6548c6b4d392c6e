#!/usr/bin/python3
"""The PyTorch peer's installation and its own GEMM speed, for the benchmarks
that compare Tessera with PyTorch (bench_models, bench_fit).

  torch_env.py                  # {"torch": "1.13.1", "blas": [...], "max_threads": 2}
  torch_env.py --sgemm 1,2      # + {"threads": 1, "sgemm_gflops": ...} per thread count

--sgemm times torch.mm of two 1024x1024 f32 matrices: the best of 3 medians of
at least 10 calls each (after 3 warm-up calls), since what is asked is what the
peer's BLAS can do on this machine, on a VM whose speed moves from second to
second: the figure a benchmark sets against the measured
FMA peak, so that a peer whose BLAS runs far below the machine's speed is seen
as a failed measurement, not as a win. OpenBLAS prints the core type it picked
to stderr when OPENBLAS_VERBOSE=2 is set; the caller reads it there.
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
except ImportError as e:
    print(f"cannot import torch: {e}", file=sys.stderr)
    sys.exit(3)


def loaded_blas():
    """The BLAS shared objects this process mapped (libblas, libopenblas)."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            path = fields[-1] if len(fields) >= 6 else ""
            if "blas" in path.rsplit("/", 1)[-1]:
                found.add(path)
    return sorted(found)


def sgemm_gflops(threads, n=1024):
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(3):
        times = []
        start_all = time.perf_counter()
        while len(times) < 10 or time.perf_counter() - start_all < 0.3:
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        best = min(best, statistics.median(times))
    return 2.0 * n ** 3 / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sgemm", type=lambda s: [int(t) for t in s.split(",") if t], default=[],
                    help="thread counts to time torch.mm 1024^3 at")
    args = ap.parse_args()
    torch.randn(64, 64) @ torch.randn(64, 64)  # make sure the BLAS is loaded
    print(json.dumps({"torch": torch.__version__, "blas": loaded_blas(),
                      "max_threads": torch.get_num_threads()}), flush=True)
    for threads in args.sgemm:
        print(json.dumps({"threads": threads, "sgemm_gflops": sgemm_gflops(threads)}), flush=True)


if __name__ == "__main__":
    main()
