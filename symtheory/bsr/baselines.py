"""Baselines for BSR: ridge on vectorized tokens and minimal nuclear-norm estimation.

* :func:`ridge_theory` / :func:`ridge_fit` -- bsr.md 8 (theory derived in
  :func:`model.ridge_general`; the fit solves the normal equations in whichever of
  the primal (p x p) or dual (n x n) forms is smaller).
* :func:`mnne_threshold` -- Donoho-Gavish-Montanari exact-recovery threshold of
  nuclear-norm minimization (bsr.md 11.2), from :func:`model.mnne_threshold_definition`.
* :func:`mnne_fit` -- the convex program ``min |S|_*  s.t.  <X_mu, S> = y_mu`` (cvxpy,
  optional extra ``symtheory[convex]``).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..core import validate
from ..core.codegen import Kernel
from ..core.quadrature import integrate_tanh_sinh
from ..core.solvers import find_root
from . import model as M
from .data import BSRData


@lru_cache(maxsize=None)
def _ridge_kernel():
    return Kernel("bsr_ridge_general", (M.alpha, M.delta, M.lam), [M.ridge_general()],
                  doc="ridge error at any penalty on vectorized tokens")


def ridge_theory(alpha, delta, lam) -> float:
    """Asymptotic per-entry error of ridge with penalty ``lam`` (bsr.md 8)."""
    alpha = validate.real("alpha", alpha, low=0, low_open=True)
    delta = validate.real("delta", delta, low=0)
    lam = validate.real("lam", lam, low=0, low_open=True)
    return float(_ridge_kernel()(alpha, delta, lam)[0])


def ridge_fit(data: BSRData, lam: float) -> np.ndarray:
    """Ridge estimate of ``S*`` (d x L) from the vectorized data, penalty ``lam > 0``."""
    lam = validate.real("lam", lam, low=0, low_open=True)
    Phi, y = data.Phi, data.y
    n, p = Phi.shape
    if n < p:
        w = Phi.T @ np.linalg.solve(Phi @ Phi.T + lam * np.eye(n), y)
    else:
        w = np.linalg.solve(Phi.T @ Phi + lam * np.eye(p), Phi.T @ y)
    return w.reshape(data.d, data.L)


# ----------------------------------------------------------------- MNNE threshold
class _MNNE:
    def __init__(self):
        defs = M.mnne_threshold_definition()
        self.defs = defs
        args = (M.t, M.rho, M.lam)
        self.outer = Kernel("bsr_mnne_outer", args + (defs["I"], defs["dI"]),
                            [defs["M"], defs["dM"]], doc="DGM minimax risk and its derivative")
        self.inner = Kernel("bsr_mnne_integrand", (defs["t"],) + args,
                            [defs["integrand"], defs["d_integrand"]], vector_args=(defs["t"],),
                            doc="(sqrt t - lam)^2 p_gamma(t) and its lam-derivative")
        self.ends = Kernel("bsr_mnne_support", (M.t, M.rho), [defs["lo"], defs["hi"]],
                           doc="Marchenko-Pastur support of p_gamma")

    def integrals(self, t, rho, lam):
        lo, hi = self.ends(t, rho)
        a = max(lam * lam, lo)
        if a >= hi:
            return 0.0, 0.0
        val, err, ok = integrate_tanh_sinh(lambda s: self.inner.vec(s, t, rho, lam), a, hi,
                                           rtol=1e-14)
        return float(val[0]), float(val[1])

    def risk(self, t, rho, lam):
        I, dI = self.integrals(t, rho, lam)
        return self.outer(t, rho, lam, I, dI)


@lru_cache(maxsize=None)
def _mnne():
    return _MNNE()


def mnne_threshold(beta, rho) -> float:
    """alpha_MNNE(rho, beta): minimal sample ratio for exact recovery by nuclear-norm
    minimization (Donoho, Gavish & Montanari, PNAS 2013; bsr.md 11.2)."""
    beta = validate.real("beta", beta, low=0, low_open=True)
    rho = validate.real("rho", rho, low=0)
    if beta < 1:
        beta, rho = 1 / beta, rho / beta
    if rho == 0:
        return 0.0
    if rho >= 1:
        return 1.0
    mn = _mnne()
    t = math.sqrt(beta)
    lo, hi = mn.ends(t, rho)
    res = find_root(lambda lam: mn.risk(t, rho, lam)[1], 1e-12, math.sqrt(hi), xtol=1e-15,
                    rtol=1e-15, name=f"MNNE stationarity at beta={beta}, rho={rho}")
    return float(mn.risk(t, rho, res.value)[0])


# ----------------------------------------------------------------- convex program
def mnne_fit(data: BSRData, *, solver: str | None = None, eps: float = 1e-9) -> np.ndarray:
    """``argmin |S|_*  s.t.  <Phi_mu, S> = y_mu`` by cvxpy (noiseless measurements)."""
    try:
        import cvxpy as cp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("mnne_fit needs cvxpy: pip install 'symtheory[convex]'") from exc
    if data.d * data.L > 10_000:
        raise validate.ParameterError(
            f"mnne_fit: d*L = {data.d * data.L} is too large for the generic conic solver "
            f"(keep max(d, L) <= 50)")
    S = cp.Variable((data.d, data.L))
    A = data.Phi * math.sqrt(data.d * data.L)  # unscaled X_mu: better conditioning
    b = data.y * math.sqrt(data.d * data.L)
    prob = cp.Problem(cp.Minimize(cp.normNuc(S)), [A @ cp.vec(S, order="C") == b])
    kw = {"solver": solver} if solver else {}
    prob.solve(**kw)
    if S.value is None or prob.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"nuclear-norm program ended with status {prob.status!r}")
    return np.asarray(S.value)
