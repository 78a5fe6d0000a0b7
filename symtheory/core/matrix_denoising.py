"""Rotation-invariant (spectral) estimators of rectangular matrices.

For ``F(R) = U diag(f(sigma)) V^T`` (``R = U diag(sigma) V^T``, ``R`` m x n, m <= n) the
divergence ``sum_ij dF_ij/dR_ij`` is (Candes, Sing-Long & Trzasko, IEEE TSP 61 (2013),
Thm. IV.3)

    div F = sum_i f'(sigma_i) + (n - m) sum_i f(sigma_i)/sigma_i
            + 2 sum_{i != j} sigma_i f(sigma_i)/(sigma_i^2 - sigma_j^2).

Used for the Onsager term of message passing with a spectral denoiser (the
empirical counterpart of the predicted variance ``D div/(mn)``).
"""
from __future__ import annotations

import numpy as np


def spectral_divergence(sigma, f, fprime, m: int, n: int) -> float:
    """Divergence of ``R -> U diag(f(sigma)) V^T`` at a matrix with singular values ``sigma``."""
    sigma = np.asarray(sigma, dtype=float)
    f = np.asarray(f, dtype=float)
    if m > n:
        m, n = n, m
    s2 = sigma**2
    diff = s2[:, None] - s2[None, :]
    np.fill_diagonal(diff, np.inf)
    cross = 2.0 * np.sum((sigma * f)[:, None] / diff)
    return float(np.sum(fprime) + (n - m) * np.sum(f / sigma) + cross)
