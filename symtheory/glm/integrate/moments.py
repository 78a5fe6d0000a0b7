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


@dataclass(frozen=True)
class Moments:
    """Posterior moments of the indices ``Z`` given an observation ``y``, centred on the
    prior (the output of every channel's :meth:`~symtheory.glm.factors.channel.Channel.moments`).

    Two layouts:

    * **matrix** (multi-index channels): ``omega (n, P, M)``, ``V (P, P)`` shared by the
      ``M`` tokens (``z_{.m} ~ N(omega_{.m}, V)`` independent over ``m``); ``mean_shift``
      ``(n, P, M)`` and ``cov_shift`` ``(n, P M, P M)``, index ``a M + m``;
    * **scalar** (``P = M = 1``, elementwise): ``omega`` of any shape and a scalar ``V``;
      both shifts have ``omega``'s shape.

    The moments are stored centred, ``mean_shift = E[z|y] - omega`` and
    ``cov_shift = Cov(z|y) - V (x) I``: a channel that knows ``g_out`` in closed form
    (``mean_shift = V g_out``) keeps all its digits where ``V g_out << |omega|``, and a
    quadrature channel loses nothing by subtracting once.  ``log_partition`` is
    ``log Z_out(y; omega, V)`` (in the observed coordinates of ``y``).
    """

    log_partition: np.ndarray
    mean_shift: np.ndarray
    cov_shift: np.ndarray
    omega: np.ndarray
    V: object

    @classmethod
    def from_posterior(cls, log_partition, mean, cov, omega, V) -> "Moments":
        """From the raw posterior mean ``E[z|y]`` and covariance ``Cov(z|y)`` (matrix
        layout)."""
        omega = np.asarray(omega, dtype=float)
        mean = np.asarray(mean, dtype=float).reshape(omega.shape)
        M = omega.shape[-1]
        prior_cov = np.kron(np.asarray(V, dtype=float), np.eye(M))
        return cls(np.asarray(log_partition, dtype=float), mean - omega,
                   np.asarray(cov, dtype=float) - prior_cov[None], omega, V)

    @property
    def scalar(self) -> bool:
        return np.ndim(self.V) == 0

    @property
    def mean(self) -> np.ndarray:
        """``E[z|y]``."""
        return self.omega + self.mean_shift

    @property
    def cov(self) -> np.ndarray:
        """``Cov(z|y)`` (matrix layout: ``(n, P M, P M)``)."""
        if self.scalar:
            return self.V + self.cov_shift
        M = self.omega.shape[-1]
        return self.cov_shift + np.kron(np.asarray(self.V, dtype=float), np.eye(M))[None]

    def posterior(self):
        """``(log Z_out, E[z|y], Cov(z|y))``: the uncentred moments."""
        return self.log_partition, self.mean, self.cov

    def output_functions(self):
        """``(g_out, dg_out)``: ``g_out = V^{-1}(E[z_{.m}|y] - omega_{.m})`` and
        ``[dg_out]_{am,bn} = [V^{-1} (Cov(z_{.m}, z_{.n}|y) - V delta_mn) V^{-1}]_{ab}``
        (Eq. 12 of Troiani et al., arXiv:2502.00901; Eqs. (3)-(4) of Rangan, ISIT 2011 for
        ``P = M = 1``).  Matrix layout: ``g (n, P, M)``, ``dg (n, P, M, P, M)``; scalar
        layout: both of ``omega``'s shape.  The one place the package derives ``g_out``."""
        if self.scalar:
            V = float(self.V)
            # divided twice, not by V^2: no overflow or underflow of V^2
            return self.mean_shift / V, self.cov_shift / V / V
        n, P, M = self.mean_shift.shape
        Vinv = np.linalg.inv(self.V)
        g = np.einsum("ab,sbm->sam", Vinv, self.mean_shift)
        C = self.cov_shift.reshape(n, P, M, P, M)
        dg = np.einsum("ac,scmek,eb->sambk", Vinv, C, Vinv)
        return g, dg

    def select(self, index) -> "Moments":
        """The moments of the samples ``index`` (matrix layout)."""
        return Moments(self.log_partition[index], self.mean_shift[index], self.cov_shift[index],
                       self.omega[index], self.V)
