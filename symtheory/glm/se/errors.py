"""Generalization errors at an overlap: Bayes-optimal (Eq. 11 of arXiv:2502.00901,
the convention of the reference code of arXiv:2502.00901) and plug-in, by Monte Carlo with
standard errors."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.linalg import psd_sqrt


@dataclass
class ErrorEstimate:
    error: float
    stderr: float
    kind: str
    samples: int


def _overlap_factors(Q, rho):
    """Square roots of ``Q`` and ``rho - Q`` after checking ``0 <= Q <= rho``."""
    Q = np.asarray(Q, dtype=float)
    P = rho.shape[0]
    if Q.shape != (P, P):
        raise ValueError(f"overlap Q must be {P} x {P}, got shape {Q.shape}")
    if not np.all(np.isfinite(Q)) or not np.allclose(Q, Q.T, atol=1e-12):
        raise ValueError("overlap Q must be finite and symmetric")
    lq = np.linalg.eigvalsh(Q)
    lv = np.linalg.eigvalsh(rho - Q)
    if lq[0] < -1e-12 or lv[0] < -1e-12:
        raise ValueError(f"overlap Q must satisfy 0 <= Q <= rho (eigenvalues of Q in "
                         f"[{lq[0]:.3g}, {lq[-1]:.3g}])")
    Q = 0.5 * (Q + Q.T)
    return psd_sqrt(Q), psd_sqrt(rho - Q)


def _batched_error(model, Q, per_sample, kind, samples, seed, batch) -> ErrorEstimate:
    """Monte Carlo over batches: ``per_sample(omega, sv, rng) -> values``."""
    if int(samples) < 2 or int(batch) < 1:
        raise ValueError(f"samples must be >= 2 and batch >= 1, got {samples}, {batch}")
    P, M = model.P, model.M
    sq, sv = _overlap_factors(Q, np.eye(P))
    rng = np.random.default_rng(seed)
    vals = []
    left = int(samples)
    while left > 0:
        b = min(batch, left)
        omega = np.einsum("ab,sbm->sam", sq, rng.standard_normal((b, P, M)))
        vals.append(per_sample(omega, sv, rng))
        left -= b
    v = np.concatenate(vals)
    return ErrorEstimate(float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))), kind, len(v))


def plugin_error(model, Q, *, samples=100000, seed=0, batch=50000) -> ErrorEstimate:
    """Return the plug-in error ``E || g(Z) - g(omega) ||_F^2`` by Monte Carlo.

    The convention of the paper's reference code (``gen_error`` csv, arXiv:2502.00901):
    prediction with the mean weights, ``omega = Q^(1/2) xi``, ``Z = omega + (rho -
    Q)^(1/2) eta``.  ``stderr`` = spread/sqrt(samples).

    Parameters
    ----------
    model : MultiIndexModel
        The model (its link ``g``).
    Q : numpy.ndarray
        Overlap, ``P x P``, ``0 <= Q <= rho`` (``rho = I``).
    samples : int, optional
        Monte-Carlo draws (>= 2).
    seed : int, optional
        Seed of the draws.
    batch : int, optional
        Draws per batch (memory).

    Returns
    -------
    ErrorEstimate
        ``error``, ``stderr``, ``kind = "plugin"``, ``samples``.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from symtheory.glm import MultiIndexModel
    >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
    >>> model = MultiIndexModel("identity", z, z)          # y = z
    >>> from symtheory.glm import plugin_error
    >>> est = plugin_error(model, np.array([[0.3]]), samples=20000)     # exact: 1 - Q
    >>> bool(abs(est.error - 0.7) < 4 * est.stderr)
    True
    """
    def per_sample(omega, sv, rng):
        Z = omega + np.einsum("ab,sbm->sam", sv, rng.standard_normal(omega.shape))
        d = (model.g(Z) - model.g(omega)).reshape(len(omega), -1)
        return np.sum(d * d, axis=1)

    return _batched_error(model, Q, per_sample, "plugin", samples, seed, batch)


def bayes_error(model, Q, *, samples=200000, inner=4, seed=0, batch=50000) -> ErrorEstimate:
    """Return the Bayes-optimal generalization error at the overlap ``Q`` (Eq. (11) of arXiv:2502.00901).

    ``E_gen = E || g(Z) ||^2 - E_xi || E_eta g(omega + (rho - Q)^(1/2) eta) ||^2``.  The
    squared inner mean is estimated without bias by the U-statistic ``(||sum_k g_k||^2 -
    sum_k ||g_k||^2) / (K (K - 1))`` over ``K = inner`` independent draws ``g_k = g(omega +
    (rho - Q)^(1/2) eta_k)`` (no quadrature bias; a Gauss-Hermite rule converges slowly
    here because ``g`` saturates).  Monte Carlo over ``xi``; ``stderr`` from the
    per-sample spread.

    Parameters
    ----------
    model : MultiIndexModel
        The model (its link ``g``).
    Q : numpy.ndarray
        Overlap, ``P x P``, ``0 <= Q <= rho`` (``rho = I``).
    samples : int, optional
        Outer Monte-Carlo draws (>= 2).
    inner : int, optional
        Inner draws ``K`` (>= 2).
    seed : int, optional
        Seed of the draws.
    batch : int, optional
        Draws per batch (memory).

    Returns
    -------
    ErrorEstimate
        ``error``, ``stderr``, ``kind = "bayes"``, ``samples``.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from symtheory.glm import MultiIndexModel
    >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
    >>> model = MultiIndexModel("identity", z, z)          # y = z
    >>> from symtheory.glm import bayes_error
    >>> est = bayes_error(model, np.array([[0.3]]), samples=20000)      # exact: 1 - Q
    >>> bool(abs(est.error - 0.7) < 4 * est.stderr)
    True
    """
    P, M = model.P, model.M
    K = int(inner)
    if K < 2:
        raise ValueError(f"inner must be >= 2 (unbiased pair estimate), got {inner}")

    def per_sample(omega, sv, rng):
        b = len(omega)
        gZ = model.g(omega + np.einsum("ab,sbm->sam", sv, rng.standard_normal(omega.shape)))
        gZ = gZ.reshape(b, -1)
        pts = omega[:, None] + np.einsum("ab,skbm->skam", sv, rng.standard_normal((b, K, P, M)))
        gk = model.g(pts.reshape(-1, P, M)).reshape(b, K, -1)
        tot = gk.sum(axis=1)
        sq_mean = (np.sum(tot * tot, axis=1) - np.sum(gk * gk, axis=(1, 2))) / (K * (K - 1))
        return np.sum(gZ * gZ, axis=1) - sq_mean

    return _batched_error(model, Q, per_sample, "bayes", samples, seed, batch)
