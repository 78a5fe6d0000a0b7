"""Benchmark: AIM softmax Bayes-optimal curve, symtheory vs a plain SciPy implementation.

Measured in one run:
* warm: a 100-point curve (softmax, T = 2, rho = 0.5, noiseless, alpha in
  [0.002, 0.185] below alpha_PR = 0.1875: every point needs a root solve; no test
  error) with kernels loaded from the cache, best of 3;
* cold: the same curve in a fresh process with an empty kernel/derivation cache
  (SymPy derivation + code generation + Numba compilation included);
* baseline: the same equations written plainly -- the cubic of aim.md 3.1 typed in,
  ``numpy.roots`` at every point, support edges by a grid scan refined with
  ``brentq``, ``int mu^3`` by ``scipy.integrate.quad`` on each bulk,
  ``mmse = D - (4 pi^2/3) D^2 int mu^3`` and ``brentq`` on
  ``v = mmse(v/alpha_tilde)``, ``alpha_tilde = alpha (T^2 + T - 2)`` -- timed on 10
  of the 100 points; the ratio uses the mean time per point.
The two implementations are also compared point by point (max |difference|).

Ends with ``speedup <number>`` (baseline time per point / symtheory warm time per
point).  Target: >= 20.

Run: ``python numerics/bench/aim_theory.py``
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
from scipy import integrate, optimize

RHO, SEQ_LEN = 0.5, 2
ALPHAS = np.linspace(0.002, 0.185, 100)


# ----------------------------------------------------------------- plain baseline
def _cubic(x, rho, D):
    """Coefficients (highest first) of the cubic in g of aim.md 3.1 at z = x."""
    a = math.sqrt(rho)
    return [D / a, -(D + x / a), x + 1 / a - a, -1.0]


def _density(x, rho, D):
    return max(np.roots(_cubic(x, rho, D)).imag.max(), 0.0) / math.pi


def _bulks(rho, D):
    """Support by a grid scan (density above 1e-7 of its scale), edges refined by brentq."""
    a = math.sqrt(rho)
    lo = -2.0 * math.sqrt(D) - 0.5
    hi = a * (1 + 1 / a) ** 2 + 2.0 * math.sqrt(D) + 0.5
    xs = np.linspace(lo, hi, 800)
    thr = 1e-7 / (hi - lo)
    inside = np.array([_density(x, rho, D) > thr for x in xs])
    edges = []

    def f(x):
        return _density(x, rho, D) - thr

    for i in np.flatnonzero(np.diff(inside.astype(int))):
        edges.append(optimize.brentq(f, xs[i], xs[i + 1], xtol=1e-14))
    return list(zip(edges[::2], edges[1::2]))


def baseline_mmse(rho, D):
    i3 = sum(integrate.quad(lambda x: _density(x, rho, D) ** 3, a, b, limit=200)[0]
             for a, b in _bulks(rho, D))
    return D - 4 * math.pi**2 / 3 * D**2 * i3


def baseline_point(alpha, rho, T):
    at = alpha * (T * T + T - 2)
    return optimize.brentq(lambda v: baseline_mmse(rho, v / at) - v, 1e-10, 1.0, xtol=1e-12)


# ----------------------------------------------------------------- runs
COLD_SCRIPT = textwrap.dedent(f"""
    import time, numpy as np
    t0 = time.perf_counter()
    from symtheory import aim
    aim.bo_curve(np.linspace(0.002, 0.185, 100), {RHO}, {SEQ_LEN}, gen_samples=None)
    print(time.perf_counter() - t0)
""")


def main() -> float:
    import warnings

    warnings.filterwarnings("ignore", module="scipy")  # the baseline's quad warnings
    from symtheory import aim
    from symtheory.core.codegen import loaded_kernels

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SYMTHEORY_CACHE_DIR=tmp)
        cold = float(subprocess.run([sys.executable, "-c", COLD_SCRIPT], env=env, check=True,
                                    capture_output=True, text=True).stdout.strip())

    aim.bo_curve(ALPHAS[:3], RHO, SEQ_LEN, gen_samples=None)  # warm-up: load kernels
    warm = []
    for _ in range(3):
        t0 = time.perf_counter()
        table = aim.bo_curve(ALPHAS, RHO, SEQ_LEN, gen_samples=None)
        warm.append(time.perf_counter() - t0)
    warm_best = min(warm)
    ours = table["mmse"]

    sub = np.arange(0, 100, 10)
    t0 = time.perf_counter()
    base_vals = [baseline_point(a, RHO, SEQ_LEN) for a in ALPHAS[sub]]
    base_per_point = (time.perf_counter() - t0) / len(sub)
    max_diff = float(np.max(np.abs(np.array(base_vals) - ours[sub])))

    statuses = sorted({k.status for k in loaded_kernels()})
    per_point = warm_best / len(ALPHAS)
    speedup = base_per_point / per_point
    print(f"curve: softmax, T={SEQ_LEN}, rho={RHO}, delta=0, {len(ALPHAS)} points in "
          f"[{ALPHAS[0]}, {ALPHAS[-1]}] (alpha_PR = {aim.alpha_pr(RHO, SEQ_LEN)})")
    print(f"symtheory warm (kernels {', '.join(statuses)}): {warm_best:.3f} s "
          f"({1e3 * per_point:.2f} ms/point; runs {', '.join(f'{w:.3f}' for w in warm)})")
    print(f"symtheory cold (empty cache, fresh process): {cold:.2f} s")
    print(f"baseline scipy quad: {base_per_point:.3f} s/point "
          f"(measured on {len(sub)} points, {100 * base_per_point:.1f} s for 100 extrapolated)")
    print(f"max |symtheory - baseline| on those points: {max_diff:.2e}")
    print(f"speedup {speedup:.1f}")
    return speedup


if __name__ == "__main__":
    main()
