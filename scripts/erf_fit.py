#!/usr/bin/env python3
"""Fits the constants of backends/cpu/gelu.cpp and prints them as C++.

erf(x) ~ x P(x^2) / Q(x^2) on 0 < x <= 4, P of degree 6, Q of degree 4 with
Q(0) = 1; e^r ~ 1 + r + r^2 C(r) on |r| <= ln2 / 2, C of degree 4. Both are
least-squares fits reweighted towards their largest relative error (Lawson's
iteration), which tends to the minimax fit. Each is then checked as the
kernel computes it, in f32, and its largest relative error printed.

Needs numpy and mpmath (Debian: python3-numpy, python3-mpmath). The build
does not run this: its output is committed in gelu.cpp.
"""
import math

import numpy as np
from mpmath import mp, erf as exact_erf

mp.dps = 30


def lawson(design, target, weight_of, error_of, rounds):
    """Coefficients c minimising max |error_of(c)|, by reweighted least squares."""
    lawson_weights = np.full(len(target), 1.0 / len(target))
    best = None
    for _ in range(rounds):
        w = np.sqrt(lawson_weights) * weight_of()
        c, *_ = np.linalg.lstsq(design * w[:, None], target * w, rcond=None)
        e = error_of(c)
        if best is None or e.max() < best[0]:
            best = (e.max(), c)
        lawson_weights = lawson_weights * e + 1e-300
        lawson_weights /= lawson_weights.sum()
    return best[1]


def fit_erf():
    x = np.linspace(0.0, 4.0, 8001)[1:]
    erf = np.array([float(exact_erf(mp.mpf(v))) for v in x])
    f, t = erf / x, x * x
    # Linearised: P(t) - f (Q(t) - 1) = f, unknowns p0..p6, q1..q4.
    design = np.stack([t**i for i in range(7)] + [-f * t**j for j in range(1, 5)], 1)
    q_now = [np.ones_like(t)]

    def split(c):
        return c[:7], np.concatenate([[1.0], c[7:]])

    def error_of(c):
        p, q = split(c)
        q_now[0] = sum(q[j] * t**j for j in range(5))
        return np.abs(x * sum(p[i] * t**i for i in range(7)) / q_now[0] - erf) / erf

    return split(lawson(design, f, lambda: 1.0 / (f * q_now[0]), error_of, 200))


def fit_exp():
    r = np.linspace(-math.log(2) / 2, math.log(2) / 2, 20001)
    r = r[np.abs(r) > 1e-9]
    target = (np.exp(r) - 1 - r) / (r * r)
    design = np.stack([r**i for i in range(5)], 1)

    def error_of(c):
        return np.abs(1 + r + r * r * (design @ c) - np.exp(r)) / np.exp(r)

    return lawson(design, target, lambda: r * r / np.exp(r), error_of, 300)


def f32_horner(coefficients, t):
    acc = np.full_like(t, np.float32(coefficients[-1]))
    for c in coefficients[-2::-1]:
        acc = (acc * t + np.float32(c)).astype(np.float32)
    return acc


def main():
    p, q = fit_erf()
    c = fit_exp()
    x = np.linspace(-4.0, 4.0, 400001).astype(np.float32)
    x = x[x != 0]
    t = (x * x).astype(np.float32)
    got = (x * f32_horner(p, t) / f32_horner(q, t)).astype(np.float64)
    want = np.array([math.erf(float(v)) for v in x])
    print(f"// erf: largest relative error in f32 {np.max(np.abs(got - want) / np.abs(want)):.2g}")
    a = np.linspace(-87.0, 0.0, 400001).astype(np.float32)
    n = np.round(a * np.float32(1.4426950408889634)).astype(np.float32)
    r = (a - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)).astype(np.float32)
    got = ((1 + r + r * r * f32_horner(c, r)) * 2.0**n).astype(np.float64)
    print(f"// exp: largest relative error in f32 {np.max(np.abs(got - np.exp(a.astype(np.float64))) / np.exp(a.astype(np.float64))):.2g}")
    def floats(name, values):
        print(f"constexpr float {name}[] = {{" + ", ".join(f"{np.float32(v)!r}f".replace("np.float32(", "").replace(")", "") for v in values) + "};")
    floats("kErfP", p)
    floats("kErfQ", q)
    floats("kExpC", c)


if __name__ == "__main__":
    main()
