"""Noiseless multi-index channels of any smooth scalar link: the Gaussian on the level
set ``{Z : g(Z) = y}`` (co-area formula; :mod:`symtheory.glm.integrate.level_set`).

``Z_out(y; omega, V)`` is the *density* of ``y = g(Z)`` at ``Z ~ N(omega, V)`` (Eq. (9) of
Troiani et al., arXiv:2502.00901 with ``P_out(y|Z) = delta(y - g(Z))``), its posterior
moments those of the Gaussian restricted to the level set with the co-area weight
``1/|grad g|`` in the solved coordinate.  Declared with no noise and no reduction, e.g.
``y = z1^2 - z2^2``, ``y = z1 z2`` or, split into sign orthants, ``y = |z1| - |z2|``.
"""
from __future__ import annotations

import logging

import numpy as np

from ...core.quadrature import AdaptiveRule
from ...core.validate import ParameterError
from ..integrate.level_set import (
    LevelSetStructure,
    _driver,
    fixed_level_set_moments,
    level_set_moments,
    link_critical_points,
)
from ..integrate.moments import Moments
from ..integrate.nested_level_set import link_level_set
from .channel import MultiIndexChannel

log = logging.getLogger(__name__)

#: tanh-sinh level of the fast path (the Numba fixed-level rule, untrimmed to |t| <= 4):
#: its error is estimated by the change to ``FAST_LEVEL - 1``.  Measured at 1000 GAMP-like
#: points (``omega ~ N(0, 0.22 I)``, ``V = 0.78 I``) against the adaptive rule at 1e-10:
#: ``z1^2 - z2^2`` level 6 errs by <= 3e-14 (estimate <= 3e-14, none above 1e-10),
#: ``z1 z2`` by <= 1e-11 (estimate up to 6e-6 at 4% of the points: the adaptive rule
#: takes those); ~55 + 30 us per sample for both levels, the adaptive rule ~1-2 ms
FAST_LEVEL = 6


class LevelSetChannel(MultiIndexChannel):
    """Deterministic scalar link of ``P M <= 2`` indices solved by SymPy for one index.

    ``moments(y, omega, V)``: ``log Z_out`` (a density in ``y``), ``E[Z|y] - omega`` and
    ``Cov(Z|y) - V (x) I`` by tanh-sinh on the level set (co-area formula, Eq. (9) of
    arXiv:2502.00901 with ``P_out = delta(y - g(Z))``), to the rule's ``rtol`` (an
    :class:`~symtheory.core.quadrature.AdaptiveRule`; ``last_accuracy`` holds the reached
    error per sample).

    Two paths, the same tolerance: first the Numba fixed-level rule of the state evolution
    (:func:`~symtheory.glm.integrate.level_set.fixed_level_set_moments` at
    :data:`FAST_LEVEL`, every node kept), its error the change to one level lower; the
    samples where that exceeds ``rtol`` go to the adaptive rule, split at the level set's
    folds and modes (:func:`~symtheory.glm.integrate.level_set.level_set_moments`), and
    ``last_fallback`` counts them (logged at INFO).  Orthant links and Cardano branches have
    no Numba path: adaptive only."""

    last_fallback: int = 0

    def __init__(self, model):
        super().__init__(model)
        self.structure = link_level_set(model.link, model.indices, model.params)
        self.method = "noiseless link, " + self.structure.describe()
        st = self.structure
        self.fast = (isinstance(st, LevelSetStructure) and st.signs is None
                     and not st.complex_branches and st.x is not None
                     and not st.unresolved_folds)
        # the free coordinates of the link's critical points: cuts where level sets pinch
        self.fast_cuts = (sorted({float(p[st.free]) for p in
                                  link_critical_points(model.link, model.indices, model.params)})
                          if self.fast else [])

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
            # and the channel's own moments at one fixed point, to 10 digits, by its fast
            # path and by the adaptive rule the check's tower uses: a structure changed at
            # run time (not through the sources) is checked, never looked up
            z0 = np.linspace(-0.8, 0.9, m.P * m.M).reshape(1, m.P, m.M)
            y0, V0 = m.g(z0).reshape(1, -1), 0.7 * np.eye(m.P)
            mom = self.moments(y0, 0.3 * z0, V0)
            adaptive = level_set_moments(self.structure, y0[:, 0], 0.3 * z0.reshape(1, -1),
                                         np.kron(V0, np.eye(m.M)), rtol=1e-10)
            fingerprint = np.round(np.concatenate(
                [mom.log_partition.ravel(), np.ravel(mom.output_functions()[0]),
                 np.ravel(adaptive[0]), np.ravel(adaptive[1])]), 10)
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
        logZ, mean, cov, err = self._fast(y[:, 0], omega.reshape(n, -1), Sigma, rule.rtol)
        slow = ~(err <= rule.rtol)
        self.last_fallback = int(slow.sum())
        if slow.any():
            part = level_set_moments(self.structure, y[slow, 0], omega.reshape(n, -1)[slow],
                                     Sigma, rtol=rule.rtol, max_level=rule.tanh_sinh_max_level)
            for full, new in zip((logZ, mean, cov, err), part):
                full[slow] = new
            if self.fast:
                log.info("%s: %d of %d samples missed rtol %g on the fixed level %d (largest "
                         "change %.2e): integrated adaptively", self.model.name, slow.sum(), n,
                         rule.rtol, FAST_LEVEL, float(np.nanmax(np.where(slow, err, 0.0))))
        if not np.all(np.isfinite(logZ)):
            bad = np.nonzero(~np.isfinite(logZ))[0]
            raise ParameterError(f"y = {y[bad[0], 0]!r} (sample {bad[0]}, {bad.size} in all) is "
                                 f"not a value of the link {self.model.link[0, 0]} near omega: "
                                 "its density is 0")
        method = self.method
        if self.fast:
            method += (f"; fixed tanh-sinh level {FAST_LEVEL} (error: change to level "
                       f"{FAST_LEVEL - 1}), adaptive at {self.last_fallback} of {n} samples")
        self._record(method, rule.rtol, err)
        return Moments(logZ, mean.reshape(omega.shape), cov, omega, V)

    def _fast(self, y, omega, Sigma, rtol):
        """``(log Z, mean shift, cov shift, error)`` by the fixed rule at :data:`FAST_LEVEL`,
        ``error`` the change to ``FAST_LEVEL - 1`` in the adaptive rule's units (``log Z``;
        means over prior standard deviations, covariances over their products); ``inf``
        (all to the adaptive rule) where there is no Numba path."""
        n, d = y.size, Sigma.shape[0]
        if not self.fast or _driver(self.structure) is None:
            return (np.full(n, -np.inf), np.full((n, d), np.nan), np.full((n, d, d), np.nan),
                    np.full(n, np.inf))
        fine = fixed_level_set_moments(self.structure, y, omega, Sigma, FAST_LEVEL,
                                       self.fast_cuts, t_max=None)
        coarse = fixed_level_set_moments(self.structure, y, omega, Sigma, FAST_LEVEL - 1,
                                         self.fast_cuts, t_max=None)
        sd = np.sqrt(np.diag(Sigma))
        with np.errstate(invalid="ignore"):
            err = np.maximum.reduce([
                np.abs(fine[0] - coarse[0]),
                np.max(np.abs(fine[1] - coarse[1]) / sd, axis=1),
                np.max(np.abs(fine[2] - coarse[2]) / np.outer(sd, sd), axis=(1, 2))])
        # nan (off the image, or both levels -inf): let the adaptive rule decide
        err = np.where(np.isfinite(fine[0]) & np.isfinite(err), err, np.inf)
        return fine[0].copy(), fine[1].copy(), fine[2].copy(), err
