"""Benchmark: g_out + dg_out of the two-layer softmax attention (M = 2, r = 1, c = 1).

Ours: the generated reduced-channel kernel (SymPy inversion and Jacobians, one
parallel Numba pass returning log Z, E[Z], Cov[Z]) on a batch of samples, Gauss-Hermite
rule with 80 nodes per axis (agrees with a 401^2 uniform grid to < 1e-7 relative).
Baseline, measured in the same run: the reference code's method -- ``scipy.integrate
.dblquad`` of the Corollary E.1 integrals with a plain Python integrand, one adaptive
2-D integral per moment (normalizer, 4 means, 10 second moments) on one common domain
(|t| <= 8 standard deviations around omega_1; the reference mixed [-5,5]^2 and [-3,3]^2)
and dblquad's default tolerance (1.5e-8).  Both give g_out and dg_out; their maximal
relative difference is printed.  Ends with ``speedup <number>`` (baseline time per
sample / ours).  Target: >= 1000.

Run: ``python numerics/bench/smi_channel.py [--baseline-samples K]``
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.integrate import dblquad

from symtheory.core.quadrature import TensorRule
from symtheory.smi import deep_attention


def baseline_gout(y, omega, V, c=1.0, width=8.0):
    """g_out, dg_out by 15 dblquad calls (plain Python integrand, spec closed forms)."""
    a = math.log(y[0, 0] / y[0, 1])
    b = math.log(y[1, 1] / y[1, 0])
    s = math.sqrt(a + b)
    h0 = (a / s, -b / s)
    Vi = np.linalg.inv(V)
    sd = math.sqrt(V[0, 0])

    def branches(t0, t1):
        z10 = omega[0, 0] + sd * t0
        z11 = omega[0, 1] + sd * t1
        S11 = 1 / (1 + math.exp(z10 * z11 - z10 * z10))
        S22 = 1 / (1 + math.exp(z10 * z11 - z11 * z11))
        A00, A01, A10, A11 = c + S11, 1 - S11, 1 - S22, c + S22
        det = A00 * A11 - A01 * A10
        out = []
        for sgn in (1, -1):
            h = (sgn * h0[0], sgn * h0[1])
            z20 = (A11 * h[0] - A01 * h[1]) / det
            z21 = (-A10 * h[0] + A00 * h[1]) / det
            q = 0.0
            for z1m, z2m, m in ((z10, z20, 0), (z11, z21, 1)):
                d0, d1 = z1m - omega[0, m], z2m - omega[1, m]
                q += Vi[0, 0] * d0 * d0 + 2 * Vi[0, 1] * d0 * d1 + Vi[1, 1] * d1 * d1
            out.append((math.exp(-0.5 * q) / abs(det), (z10, z11, z20, z21)))
        return out

    def integral(f):
        return dblquad(lambda t1, t0: sum(w * f(z) for w, z in branches(t0, t1)),
                       -width, width, -width, width)[0]

    Z0 = integral(lambda z: 1.0)
    mean = np.array([integral(lambda z, i=i: z[i]) for i in range(4)]) / Z0
    second = np.zeros((4, 4))
    for i in range(4):
        for j in range(i, 4):
            second[i, j] = second[j, i] = integral(lambda z, i=i, j=j: z[i] * z[j]) / Z0
    cov = second - np.outer(mean, mean)
    g = Vi @ (mean.reshape(2, 2) - omega)
    C = cov.reshape(2, 2, 2, 2)
    dg = np.einsum("ac,cmek,eb->ambk", Vi, C, Vi) - np.einsum("ab,mk->ambk", Vi, np.eye(2))
    return g, dg


def main(argv=None) -> float:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline-samples", type=int, default=2)
    p.add_argument("--samples", type=int, default=4000)
    args = p.parse_args(argv)
    model = deep_attention(2, 2, 1, 1.0)
    rng = np.random.default_rng(0)
    n = args.samples
    Z = rng.standard_normal((n, 2, 2))
    y = model.g(Z).reshape(n, -1)
    V = np.array([[0.7, 0.1], [0.1, 0.5]])
    omega = 0.5 * rng.standard_normal((n, 2, 2))
    ch = model.channel(rule=TensorRule("gauss-hermite", 80))
    ch.gout(y[:8], omega[:8], V)                                 # warm-up (load kernels)
    t0 = time.perf_counter()
    g, dg = ch.gout(y, omega, V)
    ours = (time.perf_counter() - t0) / n
    k = args.baseline_samples
    t0 = time.perf_counter()
    worst = 0.0
    for s in range(k):
        gb, dgb = baseline_gout(y[s].reshape(2, 2), omega[s], V)
        worst = max(worst, np.max(np.abs(gb - g[s])) / np.max(np.abs(gb)),
                    np.max(np.abs(dgb - dg[s])) / np.max(np.abs(dgb)))
    base = (time.perf_counter() - t0) / k
    speedup = base / ours
    print(f"ours (generated kernel, GH 80x80, 2 branches, {n} samples): {1e6 * ours:.1f} us/sample")
    print(f"baseline (scipy dblquad x 15 integrals, {k} samples): {base:.2f} s/sample")
    print(f"max relative difference of g_out, dg_out: {worst:.2e}")
    print(f"speedup {speedup:.0f}")
    return speedup


if __name__ == "__main__":
    main()
