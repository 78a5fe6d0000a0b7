"""Checks of a symbolic rewrite: two expression lists compared at random points in
mpmath (a rebuilt link against the declared one, a claimed symmetry)."""
from __future__ import annotations

import numpy as np
import sympy as sp


def random_point_discrepancy(lhs, rhs, symbols, *, trials=6, seed=0, scale=1.0):
    """Largest ``max|lhs - rhs| / max(1, max|rhs|)`` over ``trials`` standard-normal
    points (times ``scale``) of ``symbols``, evaluated in mpmath (no float cancellation
    hides a wrong rewrite)."""
    rng = np.random.default_rng(seed)
    f = sp.lambdify(list(symbols), [sp.Matrix(lhs) - sp.Matrix(rhs), sp.Matrix(rhs)], "mpmath")
    worst = 0.0
    for _ in range(trials):
        vals = list(scale * rng.standard_normal(len(symbols)))
        diff, ref = f(*vals)
        d = max(float(abs(v)) for v in diff) if len(diff) else 0.0
        s = max([float(abs(v)) for v in ref] + [1.0])
        worst = max(worst, d / s)
    return worst
