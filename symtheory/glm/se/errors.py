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
    """Plug-in error ``E || g(Z) - g(omega) ||_F^2`` (the convention of the paper's reference code,
    ``gen_error`` csv): prediction with the mean weights, ``omega = Q^{1/2} xi``,
    ``Z = omega + (rho - Q)^{1/2} eta``.  Monte Carlo; ``stderr`` = spread/sqrt(samples)."""
    def per_sample(omega, sv, rng):
        Z = omega + np.einsum("ab,sbm->sam", sv, rng.standard_normal(omega.shape))
        d = (model.g(Z) - model.g(omega)).reshape(len(omega), -1)
        return np.sum(d * d, axis=1)

    return _batched_error(model, Q, per_sample, "plugin", samples, seed, batch)


def bayes_error(model, Q, *, samples=200000, inner=4, seed=0, batch=50000) -> ErrorEstimate:
    """Bayes-optimal generalization error (Eq. (11) of arXiv:2502.00901)

        E_gen = E || g(Z) ||^2 - E_xi || E_eta g(omega + (rho - Q)^{1/2} eta) ||^2 .

    The squared inner mean is estimated without bias by the U-statistic
    ``(||sum_k g_k||^2 - sum_k ||g_k||^2) / (K (K - 1))`` over ``K = inner`` independent
    draws ``g_k = g(omega + (rho - Q)^{1/2} eta_k)`` (no quadrature bias; a Gauss-Hermite
    rule converges slowly here because ``g`` saturates).  Monte Carlo over ``xi``;
    ``stderr`` from the per-sample spread."""
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
