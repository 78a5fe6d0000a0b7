"""Posterior moments of the indices given an observation, and what follows from them.

``g_out = V^{-1}(E[z_{.m}|y] - omega_{.m})`` and
``[dg_out]_{am,bn} = [V^{-1} Cov(z_{.m}, z_{.n}|y) V^{-1}]_{ab} - (V^{-1})_{ab} delta_mn``
(Eq. 12 of Troiani et al., arXiv:2502.00901): every channel's ``g_out`` is derived here,
from the first and second moments of one weighted quadrature (no finite differences).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChannelAccuracy:
    """What the last ``moments``/``gout`` call reached: the integration ``method``, the
    ``tolerance`` it aimed at and the per-sample estimated ``error`` of the posterior
    moments in natural units (``log Z``; means over prior standard deviations;
    covariances over their products)."""

    method: str
    tolerance: float
    error: np.ndarray

    @property
    def max_error(self) -> float:
        return float(np.max(self.error)) if self.error.size else 0.0

    @property
    def converged(self) -> bool:
        return bool(np.all(self.error <= self.tolerance))


def gout_from_moments(mean, cov, omega, V):
    """``g_out = V^{-1}(E[z_m|y] - omega_m)``, ``[dg_out]_{am,bn} = [V^{-1} Cov V^{-1}]_{ab}
    - (V^{-1})_{ab} delta_mn`` (smi.md Eq. 12); ``cov`` indexed ``a M + m``."""
    n, P, M = mean.shape
    Vinv = np.linalg.inv(V)
    g = np.einsum("ab,sbm->sam", Vinv, mean - np.asarray(omega, dtype=float).reshape(mean.shape))
    C = cov.reshape(n, P, M, P, M)
    dg = np.einsum("ac,scmek,eb->sambk", Vinv, C, Vinv)
    dg -= np.einsum("ab,mk->ambk", Vinv, np.eye(M))[None]
    return g, dg
