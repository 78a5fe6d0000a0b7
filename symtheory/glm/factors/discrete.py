"""Noiseless multi-index channels whose link is constant on sign regions of linear forms
(``sign(z1 z2)``, hardmax ``1{e1 > e2}``): ``Z_out(y) = P(Z in g^{-1}(y))``, a sum of
Gaussian orthant probabilities, and the posterior moments of the truncated Gaussians
(:mod:`symtheory.glm.integrate.orthant_mixture`).
"""
from __future__ import annotations

import numpy as np

from ...core.quadrature import AdaptiveRule
from ...core.validate import ParameterError
from ..integrate.link_structure import discrete_structure
from ..integrate.moments import Moments
from ..integrate.orthant_mixture import OrthantMixture
from .channel import MultiIndexChannel


class _OrthantChannel(MultiIndexChannel):
    """Links constant on sign regions: exact region probabilities and truncated moments
    (:mod:`symtheory.glm.integrate.orthant_mixture`); only the 1-D conditional integrals of two-form orthants are
    numerical (nested tanh-sinh to the rule's ``rtol``)."""

    def _setup_orthants(self, structure):
        self.discrete = structure
        self.mixture = OrthantMixture(structure, self.P, self.M)
        self.n_out = self.model.link.rows * self.model.link.cols

    def _orthant_moments(self, y, omega, V, loglik, method):
        n = omega.shape[0]
        rule = self.rule if isinstance(self.rule, AdaptiveRule) else AdaptiveRule()
        logZ, mean, cov, err = self.mixture.moments(
            omega.reshape(n, -1), V, loglik, rtol=rule.rtol, max_level=rule.tanh_sinh_max_level)
        if mean is None:
            bad = np.nonzero(err)[0]
            raise ParameterError(
                f"y = {y[bad[0]].tolist()} (sample {bad[0]}, {bad.size} in all) has probability 0 "
                f"under the link's values {np.unique(self.discrete.values, axis=0).tolist()}")
        self._record(method, rule.rtol, err)
        return Moments.from_posterior(logZ, mean, cov, omega, V)

    def _check_outputs(self, y):
        if y.shape[1] != self.n_out:
            raise ParameterError(f"y must have {self.n_out} entries per sample, got {y.shape[1]}")


class DiscreteOutputChannel(_OrthantChannel):
    """Noiseless link with finitely many values on sign regions of linear forms
    (``sign(z1 z2)``, hardmax ``1{e1 > e2}``): ``Z_out(y) = P(Z in g^{-1}(y))``, a sum of
    Gaussian orthant probabilities (a probability mass: ``log Z_out <= 0``), posterior
    moments of the truncated Gaussians (Eq. (12) of arXiv:2502.00901)."""

    def __init__(self, model):
        super().__init__(model)
        self._setup_orthants(discrete_structure(model.link, model.indices, model.params))
        self.method = "discrete output, orthant mixture: " + self.discrete.describe()

    def moments(self, y, omega, V):
        """``(log P(y) (n,), E[Z|y] (n, P, M), Cov (n, P M, P M))``."""
        y, omega, V = self._prep(y, omega, V)
        self._check_outputs(y)
        vals = self.discrete.values
        # y must be one of the link's values (they are exact numbers from SymPy)
        match = np.all(np.abs(y[:, None, :] - vals[None]) <= 1e-9 * (1 + np.abs(vals[None])),
                       axis=2)
        loglik = np.where(match, 0.0, -np.inf)
        return self._orthant_moments(y, omega, V, loglik, self.method)


