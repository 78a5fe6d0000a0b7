"""Expectations over projected means: ``E ||g_out||^2`` of channels that see their
indices through a one- or two-dimensional projection (tensor sinh-trapezoid rule that
resolves both the Gaussian of the means and the output's jumps).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


# ---------------------------------------------------------------------- quadrature channels
def projected_fisher(score: Callable, outcomes, C0, q: float, V: float, *,
                     step: float = 0.1, reach: float = 12.0) -> float:
    """``E ||g_out||^2`` of a channel that sees the indices only through a projection
    ``m = P u`` (dimension ``p`` = 1 or 2; arXiv:2506.01582, state evolution), with ``C0 = P P^T``,
    ``omega ~ N(0, q I_K)`` and ``g_out = P^T grad_m log Z_out``:

        sum_y int N(m; 0, q C0) Z(y, m, V) (grad_m log Z)^T C0 (grad_m log Z) dm,

    over the discrete outputs ``outcomes`` (rows).  ``score(y_rows, m_rows, V) ->
    (log Z, grad_m log Z)`` (outputs are distributed as ``Z``, so ``E_y`` is the sum
    weighted by ``Z``).  Quadrature: a tensor trapezoid rule in ``t`` with
    ``m_i = a_i sinh(t)`` (exponentially convergent for analytic integrands), ``a_i =
    sigma_i min(sqrt(V), sqrt(q))/2`` resolving the output's jumps smeared over
    ``sqrt(V)`` as well as the Gaussian of width ``sqrt(q)``, out to ``reach`` standard
    deviations of ``m``.  (Gauss-Hermite in ``m`` fails when ``q >> V``: the integrand
    then has fronts much narrower than its node spacing.)
    """
    C0 = np.atleast_2d(np.asarray(C0, dtype=float))
    p = C0.shape[0]
    outcomes = np.atleast_2d(outcomes)
    sig = np.sqrt(np.diag(C0))
    if q <= 0:
        m = np.zeros((1, p))
        weight = np.ones(1)
    else:
        axes, dms = [], []
        for i in range(p):
            a = 0.5 * sig[i] * min(math.sqrt(V), math.sqrt(q))
            t_max = math.asinh(reach * math.sqrt(q) * sig[i] / a)
            n = 2 * math.ceil(t_max / step) + 1
            t = np.linspace(-t_max, t_max, n)
            axes.append(a * np.sinh(t))
            dms.append(a * np.cosh(t) * (t[1] - t[0]))
        m = np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)
        dm = np.prod(np.stack([g.ravel() for g in np.meshgrid(*dms, indexing="ij")]), axis=0)
        cov = q * C0
        prec = np.linalg.inv(cov)
        dens = (np.exp(-0.5 * np.einsum("ni,ij,nj->n", m, prec, m))
                / math.sqrt((2 * math.pi) ** p * np.linalg.det(cov)))
        weight = dens * dm
    total = 0.0
    for y in outcomes:
        logZ, grad = score(np.broadcast_to(y, (len(m), len(y))), m, V)
        quad_form = np.einsum("ni,ij,nj->n", grad, C0, grad)
        total += float(np.sum(weight * np.exp(logZ) * quad_form))
    return total
