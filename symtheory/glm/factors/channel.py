"""The one channel interface: an output channel is its posterior moments.

A channel ``P_out(y | Z)`` enters message passing, state evolution and the thresholds
only through ``Z_out(y; omega, V) = E_{Z ~ N(omega, V)} P_out(y | Z)``, and through it
only by the posterior moments of ``Z`` given ``y`` (Rangan, ISIT 2011; Eq. 12 of Troiani
et al., arXiv:2502.00901).  So every channel implements one method,
:meth:`Channel.moments`, returning :class:`~symtheory.glm.integrate.moments.Moments`
(``log Z_out`` and the centred mean and covariance), and ``g_out = d log Z_out / d omega``
and ``dg_out`` are derived from them in one place
(:meth:`~symtheory.glm.integrate.moments.Moments.output_functions`).

Layouts: a multi-index channel takes ``omega (n, P, M)`` and ``V (P, P)`` (tokens
``m`` independent given ``omega``); a scalar channel (``P = M = 1``) also takes arrays
of any shape with a scalar ``V``, elementwise.
"""
from __future__ import annotations

import warnings
from abc import ABC, abstractmethod

import numpy as np

from ...core.quadrature import AdaptiveRule, TensorRule
from ...core.validate import ParameterError, real
from ..integrate.moments import ChannelAccuracy, Moments


class Channel(ABC):
    """An output channel seen through its posterior moments (module docstring).

    Subclasses implement :meth:`moments`; ``g_out`` and ``dg_out`` (:meth:`gout`) and
    ``log Z_out`` (:meth:`log_partition`) follow from it.  ``params`` are the channel's
    numeric parameters where it takes them per call (scalar channels, e.g. the noise
    variance); a configured multi-index channel takes none."""

    @abstractmethod
    def moments(self, y, omega, V, *params) -> Moments:
        """Posterior moments of the indices given ``y`` at prior mean ``omega`` and
        covariance ``V``."""

    def gout(self, y, omega, V, *params):
        """Return ``(g_out, dg_out)``, derived from :meth:`moments`.

        ``g_out = d log Z_out / d omega`` and its derivative (Eq. 12 of arXiv:2502.00901).

        Parameters
        ----------
        y : array_like
            Observations.
        omega : array_like
            Prior means of the indices.
        V : float or array_like
            Their prior covariance.
        *params : float
            The channel's parameters (scalar channels), in declaration order.

        Returns
        -------
        tuple of numpy.ndarray
            ``(g_out, dg_out)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import sign_channel
        >>> channel = sign_channel()                  # y = sign(z + sqrt(delta) xi)
        >>> g, dg = channel.gout(np.array([1.0]), np.array([0.0]), 0.5, 0.5)
        >>> round(float(g[0]), 12) == round(float(np.sqrt(2 / np.pi)), 12)   # phi(0)/Phi(0)/sqrt(V + delta)
        True
        """
        return self.moments(y, omega, V, *params).output_functions()

    def log_partition(self, y, omega, V, *params) -> np.ndarray:
        """Return ``log Z_out(y; omega, V)``.

        Parameters
        ----------
        y : array_like
            Observations.
        omega : array_like
            Prior means of the indices.
        V : float or array_like
            Their prior covariance.
        *params : float
            The channel's parameters (scalar channels), in declaration order.

        Returns
        -------
        numpy.ndarray
            ``log Z_out``, one value per observation.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import sign_channel
        >>> channel = sign_channel()                  # y = sign(z + sqrt(delta) xi)
        >>> logz = channel.log_partition(np.array([1.0, -1.0]), np.array([0.0, 0.0]), 0.5, 0.1)
        >>> bool(np.allclose(logz, np.log(0.5), rtol=0, atol=1e-14))   # P(y = +-1) = 1/2 at omega = 0
        True
        """
        return self.moments(y, omega, V, *params).log_partition


class MultiIndexChannel(Channel):
    """A channel of a :class:`~symtheory.glm.factors.multi_index.MultiIndexModel`: its
    integration rule, accuracy record and declaration check (matrix layout)."""

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


def isotropic_layout(omega, V, K):
    """``omega (n, 1, K)``, ``V (1, 1)`` and ``V`` as a number for a channel of ``K``
    isotropic indices (``omega (n, K)`` and a number ``V`` are accepted too)."""
    omega = np.asarray(omega, dtype=float)
    if omega.ndim == 2:
        omega = omega[:, None, :]
    if omega.ndim != 3 or omega.shape[1:] != (1, K):
        raise ParameterError(f"omega must have shape (n, 1, {K}), got {omega.shape}")
    V = np.asarray(V, dtype=float).reshape(-1)
    if V.size != 1:
        raise ParameterError(f"V must be a number or a 1 x 1 matrix, got {V.size} values")
    v = real("V", float(V[0]), low=0.0, low_open=True)
    return omega, np.array([[v]]), v


