"""Shared machinery of the multi-index channels: posterior moments -> ``g_out``.

``g_out = V^{-1}(E[z_{.m}|y] - omega_{.m})`` and
``[dg_out]_{am,bn} = [V^{-1} Cov(z_{.m}, z_{.n}|y) V^{-1}]_{ab} - (V^{-1})_{ab} delta_mn``
(Eq. 12 of Troiani et al., arXiv:2502.00901), from the first and second moments of one
weighted quadrature (no finite differences).
"""
from __future__ import annotations

import warnings

import numpy as np

from ...core.quadrature import AdaptiveRule, TensorRule
from ...core.validate import ParameterError
from ..integrate.moments import ChannelAccuracy, gout_from_moments


class BlockGampChannel:
    """A multi-index channel in the flat layout of :func:`symtheory.glm.gamp.engine.gamp` with
    ``blocks``: outputs ordered ``(sample, row, token)``, one block per row (layer), the
    ``P`` row variances ``V`` (the engine's per-block variances; ``V = diag(V)``, rows
    independent given the data).  ``gout`` returns ``g_out`` and the diagonal of
    ``d g_out/d omega`` (smi.md Eq. 12) from the channel's posterior moments;
    ``last_error`` keeps the channel's largest estimated error of the last call."""

    def __init__(self, channel, P: int, M: int, n_out: int):
        self.channel, self.P, self.M, self.n_out = channel, P, M, n_out
        self.last_error = None

    def gout(self, y, omega, V):
        n = len(omega) // (self.P * self.M)
        V = np.diag(np.broadcast_to(np.asarray(V, dtype=float), (self.P,)))
        om = np.asarray(omega, dtype=float).reshape(n, self.P, self.M)
        _, mean, cov = self.channel.moments(np.asarray(y).reshape(n, self.n_out), om, V)
        self.last_error = getattr(self.channel, "last_error", None)
        g, dg = gout_from_moments(mean, cov, om, V)
        diag = np.einsum("sambm->sam", dg)
        return g.ravel(), diag.ravel()


class _ChannelBase:
    """Shared post-processing: moments -> ``g_out``, ``dg_out``."""

    rule = None
    noise_variance: float | None = None
    last_accuracy: ChannelAccuracy | None = None
    check_report = None

    def __init__(self, model):
        self.model = model
        self.P, self.M = model.P, model.M
        self._check_cache = {}

    def configured(self, noise_variance=None, rule=None):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.noise_variance = noise_variance
        new.rule = self._default_rule() if rule is None else rule
        if not isinstance(new.rule, (TensorRule, AdaptiveRule)):
            raise ParameterError(f"rule must be a TensorRule or an AdaptiveRule, got {rule!r}")
        new.last_accuracy = None
        return new

    def _default_rule(self):
        return AdaptiveRule()

    @property
    def last_error(self) -> float | None:
        """Largest estimated error of the last call (see :class:`ChannelAccuracy`)."""
        return None if self.last_accuracy is None else self.last_accuracy.max_error

    def _record(self, method, tolerance, error):
        error = np.asarray(error, dtype=float)
        self.last_accuracy = ChannelAccuracy(method, float(tolerance), error)
        bad = ~(error <= tolerance)
        if bad.any():
            warnings.warn(f"{type(self).__name__} of {self.model.name!r}: {int(bad.sum())} of "
                          f"{error.size} samples missed the tolerance {tolerance:g} (largest "
                          f"estimated error {np.nanmax(error):.2e}; method: {method})",
                          RuntimeWarning, stacklevel=3)

    def declaration_check(self):
        """Brute-force comparison at random points (once per configuration)."""
        from ..checks.multi_index import check_channel

        key = (self.noise_variance, self.rule)
        if key not in self._check_cache:
            self._check_cache[key] = check_channel(self)
        self.check_report = self._check_cache[key]
        return self.check_report

    @staticmethod
    def _check_V(V, P):
        V = np.asarray(V, dtype=float)
        if V.shape != (P, P):
            raise ParameterError(f"V must be {P} x {P}, got shape {V.shape}")
        if not np.all(np.isfinite(V)):
            raise ParameterError("V must be finite")
        V = 0.5 * (V + V.T)
        lam = np.linalg.eigvalsh(V)
        if lam[0] <= 0:
            raise ParameterError(f"V must be positive definite (smallest eigenvalue {lam[0]:.3g})")
        return V

    def _prep(self, y, omega, V):
        omega = np.asarray(omega, dtype=float)
        if omega.ndim == 2:
            omega = omega[None]
        if omega.shape[1:] != (self.P, self.M):
            raise ParameterError(f"omega must have shape (n, {self.P}, {self.M}), got {omega.shape}")
        if not np.all(np.isfinite(omega)):
            raise ParameterError("omega must be finite")
        y = np.asarray(y, dtype=float).reshape(omega.shape[0], -1)
        if not np.all(np.isfinite(y)):
            raise ParameterError("y must be finite")
        return np.ascontiguousarray(y), np.ascontiguousarray(omega), self._check_V(V, self.P)

    def gout(self, y, omega, V):
        """``(g_out (n, P, M), dg_out (n, P, M, P, M))`` from the posterior moments."""
        logZ, mean, cov = self.moments(y, omega, V)
        return gout_from_moments(mean, cov, omega, self._check_V(V, self.P))


