"""Benchmark: BSR Bayes-optimal curve, symtheory vs a plain SciPy implementation.

Measured in one run:
* warm: a 100-point curve (alpha in [0.01, 1], beta=2, rho=0.5, Delta=0.1: every
  point needs a root solve) with kernels loaded from the cache, best of 3;
* cold: the same curve in a fresh process with an empty kernel/derivation cache
  (SymPy derivation + code generation + Numba compilation included);
* baseline: the same fixed-point equation written plainly -- quartic coefficients
  typed in from bsr.md 4.2, ``numpy.roots`` at every point, support edges by a
  grid scan refined with ``brentq``, the two integrals by ``scipy.integrate.quad``,
  and ``brentq`` on q -- timed on 10 of the 100 points (it takes ~1 s a point);
  the ratio uses the mean time per point.
The two implementations are also compared point by point (max |difference|).

Ends with ``speedup <number>`` (baseline time per point / symtheory warm time per
point).  Target: >= 20, and < 2 s for the 100 points warm.

Run: ``python numerics/bench/bsr_theory.py``
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

BETA, RHO, DELTA = 2.0, 0.5, 0.1
ALPHAS = np.linspace(0.01, 1.0, 100)


# ----------------------------------------------------------------- plain baseline
def _quartic(w, beta, rho, D):
    """Coefficients (highest first) of the quartic in m of bsr.md 4.2 at w = x^2."""
    t = math.sqrt(beta)
    return [-D * w**2,
            2 * D * (beta - 1) * w - t * w**2,
            t * (beta - 2 + rho * (1 + D)) * w - D * (beta - 1) ** 2,
            rho * beta * w + t * (beta - 1) * (1 - rho * (1 + D)),
            rho * beta]


def _density(x, beta, rho, D):
    roots = np.roots(_quartic(x * x, beta, rho, D))
    G = -x * roots
    return max(G.imag.max(), 0.0) / math.pi


def _bulks(beta, rho, D):
    """Support by a grid scan (density above 1e-7 of its scale), edges refined by brentq."""
    top = 3.0 * math.sqrt(math.sqrt(beta) * (1 + D)) + 1.0
    xs = np.linspace(1e-4 * top, top, 800)
    thr = 1e-7 / top
    dens = np.array([_density(x, beta, rho, D) for x in xs])
    inside = dens > thr
    edges = []
    if inside[0]:
        edges.append(0.0)
    for i in np.flatnonzero(np.diff(inside.astype(int))):
        f = lambda x: _density(x, beta, rho, D) - thr  # noqa: E731
        edges.append(optimize.brentq(f, xs[i], xs[i + 1], xtol=1e-14))
    return list(zip(edges[::2], edges[1::2]))


def baseline_mmse_rie(beta, rho, D):
    i1 = i2 = 0.0
    for a, b in _bulks(beta, rho, D):
        if beta != 1:
            i1 += 2 * integrate.quad(lambda x: _density(x, beta, rho, D) / x**2, a, b, limit=200)[0]
        i2 += 2 * integrate.quad(lambda x: _density(x, beta, rho, D) ** 3, a, b, limit=200)[0]
    return D - D**2 / beta**1.5 * ((beta - 1) ** 2 * i1 + 4 * math.pi**2 / 3 * i2)


def baseline_point(alpha, beta, rho, delta):
    f = lambda q: 1 - baseline_mmse_rie(beta, rho, (delta + 1 - q) / alpha) - q  # noqa: E731
    q = optimize.brentq(f, 0.0, 1 - 1e-3, xtol=1e-12)
    return 1 - q


# ----------------------------------------------------------------- runs
COLD_SCRIPT = textwrap.dedent(f"""
    import time, numpy as np
    t0 = time.perf_counter()
    from symtheory import bsr
    bsr.bo_curve(np.linspace(0.01, 1.0, 100), {BETA}, {RHO}, {DELTA})
    print(time.perf_counter() - t0)
""")


def main() -> float:
    import warnings

    warnings.filterwarnings("ignore", module="scipy")  # the baseline's quad warnings
    from symtheory import bsr
    from symtheory.core.codegen import loaded_kernels

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SYMTHEORY_CACHE_DIR=tmp)
        cold = float(subprocess.run([sys.executable, "-c", COLD_SCRIPT], env=env, check=True,
                                    capture_output=True, text=True).stdout.strip())

    bsr.bo_curve(ALPHAS[:3], BETA, RHO, DELTA)  # warm-up: load kernels
    warm = []
    for _ in range(3):
        t0 = time.perf_counter()
        table = bsr.bo_curve(ALPHAS, BETA, RHO, DELTA)
        warm.append(time.perf_counter() - t0)
    warm_best = min(warm)
    ours = table["mmse"]

    sub = np.arange(0, 100, 10)
    t0 = time.perf_counter()
    base_vals = [baseline_point(a, BETA, RHO, DELTA) for a in ALPHAS[sub]]
    base_per_point = (time.perf_counter() - t0) / len(sub)
    max_diff = float(np.max(np.abs(np.array(base_vals) - ours[sub])))

    statuses = sorted({k.status for k in loaded_kernels()})
    per_point = warm_best / len(ALPHAS)
    speedup = base_per_point / per_point
    print(f"curve: beta={BETA}, rho={RHO}, delta={DELTA}, {len(ALPHAS)} points in [0.01, 1]")
    print(f"symtheory warm (kernels {', '.join(statuses)}): {warm_best:.3f} s "
          f"({1e3 * per_point:.2f} ms/point; runs {', '.join(f'{w:.3f}' for w in warm)})")
    print(f"symtheory cold (empty cache, fresh process): {cold:.2f} s")
    print(f"baseline scipy quad: {base_per_point:.3f} s/point "
          f"(measured on {len(sub)} points, {100 * base_per_point:.1f} s for 100 extrapolated)")
    print(f"max |symtheory - baseline| on those points: {max_diff:.2e}")
    print(f"warm 100-point target < 2 s: {'met' if warm_best < 2 else 'NOT met'}")
    print(f"speedup {speedup:.1f}")
    return speedup


if __name__ == "__main__":
    main()
