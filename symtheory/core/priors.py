"""Priors, symbolically: log-partition -> input functions -> overlap (state-evolution) map.

For a prior ``P_W`` the scalar input channel observes ``b = A w0 + sqrt(A) xi``; the
log-partition is ``log Z(b, A) = log int dP_W(w) exp(b w - A w^2/2)``, the posterior
mean ``f_in = d log Z / d b`` and the overlap map ``F(A) = E[f_in(b, A)^2]`` (Bayes
optimal, Nishimori).  For the standard Gaussian prior everything is polynomial and
SymPy carries out the Gaussian expectations exactly.
"""
from __future__ import annotations

import sympy as sp


def gaussian_log_partition(b, A, variance=1):
    """``log int N(w; 0, variance) exp(b w - A w^2/2) dw``, computed by SymPy."""
    w = sp.Symbol("w_", real=True)
    s2 = sp.sympify(variance)
    integrand = sp.exp(-w**2 / (2 * s2) + b * w - A * w**2 / 2) / sp.sqrt(2 * sp.pi * s2)
    Z = sp.integrate(integrand, (w, -sp.oo, sp.oo), conds="none")
    return sp.simplify(sp.log(sp.simplify(Z)))


def gaussian_expectation(expr, *variables):
    """Exact ``E[expr]`` over independent N(0, 1) ``variables`` (polynomial expr)."""
    e = sp.expand(expr)
    for v in variables:
        poly = sp.Poly(e, v)
        out = sp.Integer(0)
        for (k,), c in poly.terms():
            if k % 2 == 0:
                out += c * sp.factorial2(k - 1) if k > 0 else c
        e = sp.expand(out)
    return e


def gaussian_overlap_map(qhat=None, variance=1):
    """Overlap map ``q = F(qhat)`` of a Gaussian prior N(0, variance), derived.

    ``F(qhat) = E[f_in(b, qhat)^2]`` with ``b = qhat w0 + sqrt(qhat) xi``, ``w0`` drawn
    from the prior.  For N(0, 1) this is ``qhat/(1 + qhat)``.
    """
    qhat = qhat if qhat is not None else sp.Symbol("qhat", nonnegative=True)
    b = sp.Symbol("b_", real=True)
    A = sp.Symbol("A_", nonnegative=True)
    f_in = sp.diff(gaussian_log_partition(b, A, variance), b)
    w0, xi = sp.symbols("w0_ xi_", real=True)
    sd = sp.sqrt(sp.sympify(variance))
    field = qhat * sd * w0 + sp.sqrt(qhat) * xi
    F = gaussian_expectation(sp.expand(f_in.subs({b: field, A: qhat})**2), w0, xi)
    return sp.simplify(sp.factor(F))
