#!/usr/bin/env python3
"""Two builds of bench_models compared in alternating pairs.

The VMs these benchmarks run on change speed between minutes: by 5-30% for a
whole step, by 2-4x for a memory-bound pass (bench/README.md, 2026-12-02). Two
builds timed one after the other then compare the minutes as much as the
code. This runs the base and the candidate in pairs, the first of each pair
alternating (base first, then candidate first, ...), reads each run's
`--json`, and prints per row (and per op, with `--profile`) each side's
median over the pairs, the median of the pairs' ratios candidate / base with
their range, and in how many pairs the candidate was faster. A change that
wins in every pair is a change; one that wins in half is the noise.

  cp build/bench/bench_models /tmp/base    # before the change; rebuild, then
  bench/ab_compare.py --pairs 4 /tmp/base build/bench/bench_models \\
      --models gpt --modes train --rounds 1 --steps 15 --profile --python /nonexistent

--pairs and --ops come before the two binaries; the options after them go to
both unchanged (`--python /nonexistent` leaves PyTorch out, which halves the
time).
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, options):
    done = subprocess.run([binary, *options, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ab_compare: {binary} exited with {done.returncode}: {done.stderr.strip()}")
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as e:
        sys.exit(f"ab_compare: {binary} printed no JSON report ({e})")
    rows = {}
    for r in report["rows"]:
        key = f"{r['model']} {r['mode']} {r['threads']}t"
        rows[key] = (r["tessera"]["median_ms"], r.get("tessera_ops_ms", {}))
    return rows


def compare(base, candidate):
    """(base median, candidate median, median ratio, lowest, highest, candidate faster) over the pairs."""
    ratios = [c / b for b, c in zip(base, candidate) if b > 0]
    faster = sum(c < b for b, c in zip(base, candidate))
    if not ratios:
        return None
    return (statistics.median(base), statistics.median(candidate), statistics.median(ratios), min(ratios),
            max(ratios), faster)


def line(name, width, stats, pairs):
    b, c, ratio, low, high, faster = stats
    return f"{name:<{width}} {b:10.3f} {c:10.3f} {ratio:7.3f} ({low:.3f}-{high:.3f}) {faster:3d} of {pairs}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument("--ops", type=int, default=12, help="ops listed per row with --profile, the base's heaviest")
    parser.add_argument("base", help="the bench_models binary before the change")
    parser.add_argument("candidate", help="the bench_models binary after it")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="bench_models options, given to both")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    if args.ops < 0:
        parser.error(f"--ops must be 0 (no ops) or more, got {args.ops}")

    runs = {"base": [], "candidate": []}
    for pair in range(args.pairs):
        order = ["base", "candidate"] if pair % 2 == 0 else ["candidate", "base"]
        for side in order:
            runs[side].append(run(getattr(args, side), args.options))
        print(f"pair {pair + 1} of {args.pairs}: {' then '.join(order)}", file=sys.stderr)

    print(f"base: {args.base}\ncandidate: {args.candidate}\n{args.pairs} pairs, alternating which runs first; "
          "ms are medians over the pairs of each run's median, ratio = candidate / base per pair")
    width = 52
    print(f"{'row / op':<{width}} {'base ms':>10} {'cand ms':>10} {'ratio':>7} {'(range)':<13} faster")
    for key in runs["base"][0]:
        if not all(key in r for r in runs["base"] + runs["candidate"]):
            print(f"{key}: not in every run, left out")
            continue
        stats = compare([r[key][0] for r in runs["base"]], [r[key][0] for r in runs["candidate"]])
        if stats is None:
            continue
        print(line(key, width, stats, args.pairs))
        ops = runs["base"][0][key][1]
        heaviest = sorted(ops, key=ops.get, reverse=True)[: args.ops]
        for op in heaviest:
            base_ms = [r[key][1].get(op, 0.0) for r in runs["base"]]
            candidate_ms = [r[key][1].get(op, 0.0) for r in runs["candidate"]]
            op_stats = compare(base_ms, candidate_ms)
            if op_stats is not None:
                print(line("  " + op[: width - 2], width, op_stats, args.pairs))
        # Ops the base never ran (a fusion's new call): the candidate's median alone.
        if args.ops > 0:
            new_ops = {op for r in runs["candidate"] for op in r[key][1]} - {op for r in runs["base"] for op in r[key][1]}
            for op in sorted(new_ops, key=lambda o: -statistics.median(r[key][1].get(o, 0.0) for r in runs["candidate"])):
                candidate_ms = statistics.median(r[key][1].get(op, 0.0) for r in runs["candidate"])
                print(f"{'  ' + op[: width - 2]:<{width}} {'-':>10} {candidate_ms:>10.3f}   only in the candidate")


if __name__ == "__main__":
    main()
