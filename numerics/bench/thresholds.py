"""Benchmark: the weak-recovery threshold alpha_1 of the two-layer softmax attention
(M = 2, r = 1, c = 1) to an error bar of 1e-4.

Ours: :func:`symtheory.glm.thresholds.weak_recovery.weak_recovery` (observation grid: the expectation
over ``y`` as a 2-D midpoint rule in ``E = A(z1) z2`` with the density and the posterior
moments from one Gauss-Hermite pass over ``z1``; error bar from coarser outer and inner
rules, which are part of the timed work).
Baseline, measured in the same run: plain Monte Carlo of the same operator --
``Z ~ N(0, I)``, ``y = g(Z)``, posterior moments through the model's channel
(Gauss-Hermite 30 over ``z1``, the package's standard channel), ``K_22`` averaged, error
bar ``sigma/sqrt(n)`` converted to ``alpha = 1/K_22``.  The baseline is run on
``--mc-samples`` samples; the time it needs for the target error bar is its measured
time per sample times the samples needed, ``(sigma_alpha / target)^2``, where
``sigma_alpha`` is the measured per-sample spread (heavy-tailed: reported as measured
from batch means).  ``--mc-full`` runs all of those samples instead (hours).
Both paths are warmed up first (kernel compilation/loading is not timed).
Ends with ``speedup <number>`` (baseline time / ours).  Target: >= 100.

Run: ``python numerics/bench/thresholds.py [--mc-samples N] [--mc-full]``
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from symtheory.core.quadrature import TensorRule
from symtheory.glm.thresholds.weak_recovery import weak_recovery
from symtheory.smi import deep_attention


def mc_k22(model, ch, n, rng, batch=2000):
    """Per-sample K_22 contributions ``||E[h2 h2^T|y] - I||_F^2`` for ``n`` samples."""
    out = []
    left = n
    while left > 0:
        b = min(batch, left)
        Z = rng.standard_normal((b, 2, 2))
        cov = ch.moments(model.g(Z).reshape(b, -1), np.zeros((b, 2, 2)), np.eye(2)).cov
        J = (cov - np.eye(4)).reshape(b, 2, 2, 2, 2)[:, 1, :, 1, :]
        out.append(np.sum(J * J, axis=(1, 2)))
        left -= b
    return np.concatenate(out)


def main(argv=None) -> float:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", type=float, default=1e-4, help="error bar on alpha_1")
    p.add_argument("--mc-samples", type=int, default=20000)
    p.add_argument("--mc-full", action="store_true", help="run the baseline to the target")
    p.add_argument("--outer-nodes", type=int, default=32)
    p.add_argument("--inner-nodes", type=int, default=24)
    args = p.parse_args(argv)
    model = deep_attention(2, 2, 1, 1.0)
    ch = model.channel(rule=TensorRule("gauss-hermite", 30))
    rng = np.random.default_rng(0)
    # warm-up (compile or load every kernel of both paths)
    weak_recovery(model, outer_nodes=8, rule=TensorRule("gauss-hermite", 8))
    mc_k22(model, ch, 16, rng)

    t0 = time.perf_counter()
    res = weak_recovery(model, outer_nodes=args.outer_nodes,
                        rule=TensorRule("gauss-hermite", args.inner_nodes))
    t_ours = time.perf_counter() - t0
    print(f"ours:     alpha_1 = {res.alpha:.8f} +- {res.error:.2g}  ({res.method})  "
          f"{t_ours:.2f} s")
    if res.error > args.target:
        raise SystemExit(f"our error bar {res.error:.3g} exceeds the target {args.target:g}: "
                         "raise --outer-nodes/--inner-nodes")

    n = args.mc_samples
    t0 = time.perf_counter()
    k = mc_k22(model, ch, n, rng)
    t_mc = time.perf_counter() - t0
    K = k.mean()
    batches = k[: (n // 20) * 20].reshape(20, -1).mean(axis=1)
    sigma_K_batch = batches.std(ddof=1) * math.sqrt(n / 20)     # per-sample spread from batch means
    sigma_alpha = sigma_K_batch / K ** 2
    need = (sigma_alpha / args.target) ** 2
    se = sigma_alpha / math.sqrt(n)
    print(f"baseline: alpha_1 = {1 / K:.5f} +- {se:.2g} from {n} samples in {t_mc:.2f} s "
          f"({1e3 * t_mc / n:.3f} ms/sample); per-sample sigma(alpha) {sigma_alpha:.3g} "
          f"-> {need:.3g} samples for +-{args.target:g}")
    if args.mc_full and need > n:
        t1 = time.perf_counter()
        k2 = np.concatenate([k, mc_k22(model, ch, int(math.ceil(need - n)), rng)])
        t_mc_target = t_mc + time.perf_counter() - t1
        print(f"baseline (full): alpha_1 = {1 / k2.mean():.6f} from {len(k2)} samples in "
              f"{t_mc_target:.1f} s")
    else:
        t_mc_target = t_mc / n * need
        print(f"baseline: time to +-{args.target:g} = {t_mc_target:.1f} s "
              f"(measured {1e3 * t_mc / n:.3f} ms/sample x {need:.3g} samples)")
    print(f"agreement: |ours - baseline| = {abs(res.alpha - 1 / K):.2g} "
          f"({abs(res.alpha - 1 / K) / se:.2f} baseline standard errors)")
    speedup = t_mc_target / t_ours
    print(f"speedup {speedup:.0f}")
    return speedup


if __name__ == "__main__":
    main()
