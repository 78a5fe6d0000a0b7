"""Noiseless multi-index channels of any smooth scalar link: the Gaussian on the level
set ``{Z : g(Z) = y}`` (co-area formula; :mod:`symtheory.glm.integrate.level_set`).

``Z_out(y; omega, V)`` is the *density* of ``y = g(Z)`` at ``Z ~ N(omega, V)`` (Eq. (9) of
Troiani et al., arXiv:2502.00901 with ``P_out(y|Z) = delta(y - g(Z))``), its posterior
moments those of the Gaussian restricted to the level set with the co-area weight
``1/|grad g|`` in the solved coordinate.  Declared with no noise and no reduction, e.g.
``y = z1^2 - z2^2``, ``y = z1 z2`` or, split into sign orthants, ``y = |z1| - |z2|``.
"""
from __future__ import annotations

import numpy as np

from ...core.quadrature import AdaptiveRule
from ...core.validate import ParameterError
from ..integrate.level_set import level_set_moments, level_set_structure
from ..integrate.moments import Moments
from .channel import MultiIndexChannel


class LevelSetChannel(MultiIndexChannel):
    """Deterministic scalar link of ``P M <= 2`` indices solved by SymPy for one index.

    ``moments(y, omega, V)``: ``log Z_out`` (a density in ``y``), ``E[Z|y] - omega`` and
    ``Cov(Z|y) - V (x) I`` by tanh-sinh on the level set split at its folds and modes,
    to the rule's ``rtol`` (an :class:`~symtheory.core.quadrature.AdaptiveRule`;
    ``last_accuracy`` holds the reached error per sample)."""

    def __init__(self, model):
        super().__init__(model)
        self.structure = level_set_structure(model.link, model.indices, model.params)
        self.method = "noiseless link, " + self.structure.describe()

    def configured(self, noise_variance=None, rule=None):
        if rule is not None and not isinstance(rule, AdaptiveRule):
            raise ParameterError(f"the level-set channel integrates adaptively: rule must be an "
                                 f"AdaptiveRule, got {rule!r}")
        return super().configured(noise_variance, rule)

    def declaration_check(self):
        """Tower and derivative identities (:mod:`symtheory.glm.checks.level_set`).

        The check is deterministic (fixed points, fixed seed), so its report is kept on
        disk for the identical declaration -- link, indices and parameters as SymPy
        source, the rule -- and package sources
        (:func:`~symtheory.core.derive.cached_result`; the load is logged): ~20 s of
        adaptive quadrature once, not in every process."""
        import sympy as sp

        from ...core.derive import cached_result
        from ..checks.level_set import check_level_set_channel

        key = self.rule
        if key not in self._check_cache:
            m = self.model
            # and the channel's own moments at one fixed point, to 10 digits: a structure
            # changed at run time (not through the sources) is checked, never looked up
            z0 = np.linspace(-0.8, 0.9, m.P * m.M).reshape(1, m.P, m.M)
            mom = self.moments(m.g(z0).reshape(1, -1), 0.3 * z0, 0.7 * np.eye(m.P))
            fingerprint = np.round(np.concatenate([mom.log_partition.ravel(),
                                                   np.ravel(mom.output_functions()[0])]), 10)
            declaration = " ".join([sp.srepr(m.link), sp.srepr(m.indices),
                                    sp.srepr(sorted(m.params.items(), key=str)), repr(key),
                                    repr(fingerprint.tolist())])
            self._check_cache[key] = cached_result("level_set_check", declaration,
                                                   lambda: check_level_set_channel(self))
        self.check_report = self._check_cache[key]
        return self.check_report

    def moments(self, y, omega, V):
        """``Moments`` of ``Z`` given ``y``: ``y (n, 1)``, ``omega (n, P, M)``, ``V (P, P)``."""
        y, omega, V = self._prep(y, omega, V)
        if y.shape[1] != 1:
            raise ParameterError(f"y must have 1 entry per sample, got {y.shape[1]}")
        n = omega.shape[0]
        Sigma = np.kron(V, np.eye(self.M))
        rule = self.rule if isinstance(self.rule, AdaptiveRule) else AdaptiveRule()
        logZ, mean, cov, err = level_set_moments(
            self.structure, y[:, 0], omega.reshape(n, -1), Sigma, rtol=rule.rtol,
            max_level=rule.tanh_sinh_max_level)
        if not np.all(np.isfinite(logZ)):
            bad = np.nonzero(~np.isfinite(logZ))[0]
            raise ParameterError(f"y = {y[bad[0], 0]!r} (sample {bad[0]}, {bad.size} in all) is "
                                 f"not a value of the link {self.model.link[0, 0]} near omega: "
                                 "its density is 0")
        self._record(self.method, rule.rtol, err)
        return Moments(logZ, mean.reshape(omega.shape), cov, omega, V)
