"""Bivariate Gaussian orthant channel: the signs of two linear images of the indices.

The output reveals ``s_i = sign((P u)_i)``, ``i = 1, 2``, of a ``2 x K`` projection ``P``
of ``K`` isotropic indices ``u ~ N(omega, V I_K)`` (e.g. the hardmax of two tokens,
arXiv:2506.01582).  With ``m = P omega`` and the noise ``P(u - omega) ~ N(0, V P P^T)``
(standard deviations ``sigma_i sqrt(V)``, correlation ``c``):

    Z_out(s, omega, V) = Phi_2(k_1, k_2; s_1 s_2 c),     k_i = s_i m_i/(sigma_i sqrt(V)),

and by Plackett's identity (Plackett, Biometrika 41 (1954); ``d Phi_2/d rho = phi_2``
integrated, and Leibniz's rule for the limits)

    d Phi_2/d h (h, k; r) = phi(h) Phi((k - r h)/sqrt(1 - r^2)),

so ``g_out = P^T grad_m log Z_out``.  ``log Phi_2`` is computed as the log of the
one-dimensional integral ``int_{-inf}^{min(h,k)} phi(x) Phi((max - r x)/sqrt(1 - r^2)) dx``
on a logarithmic grid summed in log space: no cancellation in any tail (Plackett's
``Phi(h) Phi(k) + int_0^r phi_2`` cancels for ``r < 0`` in the lower tail).

``variant="joint-density"`` replaces ``d Phi_2/d h`` by the joint density
``phi_2(h, k; r)``: the published code of arXiv:2506.01582.  It is NOT the
derivative of ``log Z_out`` and not Bayes-optimal; it exists only to reproduce that
paper's hardmax curves.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, logsumexp, ndtr

from ...core import validate
from ..integrate.moments import Moments
from .channel import Channel, isotropic_layout

VARIANTS = ("bayes", "joint-density")

#: log-grid of ``t = min(h, k) - x``: ``t`` from e^-35 to e^6 (mass of phi below
#: ``x = 38 - e^6`` and above ``t = e^-35`` is below double precision); step 0.05 resolves
#: integrands whose log varies on scale >~ 0.15 in ``log t`` (exponential convergence of
#: the trapezoid rule for analytic integrands; step 0.1 left 5e-9 relative at h = 0,
#: k = -8, r = -0.75; checked against mpmath in the tests)
_LOG_T = np.linspace(-35.0, 6.0, 821)
_STEP = _LOG_T[1] - _LOG_T[0]
#: above this both limits are in the far upper tail: Phi_2 = 1 - O(phi(38))
_H_CAP = 38.0
_LOG_PHI0 = -0.5 * math.log(2 * math.pi)


def log_bvn_cdf(h, k, r) -> np.ndarray:
    """``log Phi_2(h, k; r)`` (standard bivariate normal, correlation ``|r| < 1``),
    vectorised, accurate in every tail (module docstring).

    When both limits are positive the mass sits near the origin, far from the lower
    limit the integral below starts from, and the log-spaced rule loses digits (log
    Phi_2 came out positive at h = k = 11); there the complement is used,
    ``Phi_2(h, k) = 1 - Phi(-h) - Phi(-k) + Phi_2(-h, -k; r)``, whose small terms are
    lower-tail values computed accurately."""
    h, k = np.broadcast_arrays(np.asarray(h, float), np.asarray(k, float))
    r = np.broadcast_to(np.asarray(r, float), h.shape)
    out = _log_bvn_cdf_lower(h, k, r)
    upper = np.minimum(h, k) > 0
    if np.any(upper):
        hu, ku, ru = h[upper], k[upper], r[upper]
        tail = (ndtr(-hu) + ndtr(-ku)
                - np.exp(_log_bvn_cdf_lower(-hu, -ku, ru)))
        out = np.array(out, dtype=float)
        out[upper] = np.log1p(-tail)
    return out


def _log_bvn_cdf_lower(h, k, r) -> np.ndarray:
    """``log Phi_2`` by the log-spaced rule below ``min(h, k)`` (accurate unless both
    limits are large and positive)."""
    lo = np.minimum(np.minimum(h, k), _H_CAP)
    hi = np.maximum(h, k)
    s = np.sqrt(1.0 - r * r)
    t = np.exp(_LOG_T)
    x = lo[..., None] - t
    log_f = (_LOG_PHI0 - 0.5 * x * x + log_ndtr((hi[..., None] - r[..., None] * x) / s[..., None])
             + _LOG_T)
    return logsumexp(log_f, axis=-1) + math.log(_STEP)


def log_bvn_density(h, k, r) -> np.ndarray:
    """``log phi_2(h, k; r)``."""
    s2 = 1.0 - r * r
    return -(h * h - 2 * r * h * k + k * k) / (2 * s2) - math.log(2 * math.pi) - 0.5 * np.log(s2)


class BivariateOrthantChannel(Channel):
    """``y = (sign (P u)_1, sign (P u)_2)`` for a ``2 x K`` projection ``P`` (module
    docstring).  Outputs are sign pairs ``s`` of shape ``(n, 2)`` with entries +-1;
    layout: ``P = 1`` index row and ``M = K`` tokens, ``omega (n, 1, K)`` (or ``(n, K)``)
    and ``V`` a ``1 x 1`` matrix (or a number)."""

    def __init__(self, P, variant: str = "bayes"):
        #: exact entries (e.g. a SymPy matrix) kept for the mpmath path
        self.P_exact = P
        self.P = np.asarray(P, dtype=float)
        if self.P.ndim != 2 or self.P.shape[0] != 2:
            raise validate.ParameterError(f"P must have shape (2, K), got {self.P.shape}")
        if variant not in VARIANTS:
            raise validate.ParameterError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant
        self.C0 = self.P @ self.P.T
        self.sigma = np.sqrt(np.diag(self.C0))
        self.corr = self.C0[0, 1] / (self.sigma[0] * self.sigma[1])
        if not abs(self.corr) < 1:
            raise validate.ParameterError("the two rows of P must be linearly independent")
        self.outcomes = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]], dtype=float)

    def score(self, s, m, V):
        """``(log Z_out, grad_m Z_out / Z_out)`` for signs ``s`` and projected means
        ``m = P omega`` (shape ``(n, 2)``); the variant's surrogate gradient with
        ``variant="joint-density"``."""
        s = np.asarray(s, float)
        m = np.asarray(m, float)
        sd = self.sigma * math.sqrt(V)
        k = s * m / sd
        r = s[:, 0] * s[:, 1] * self.corr
        logZ = log_bvn_cdf(k[:, 0], k[:, 1], r)
        if self.variant == "bayes":
            sr = np.sqrt(1 - r * r)
            d1 = (_LOG_PHI0 - 0.5 * k[:, 0] ** 2 + log_ndtr((k[:, 1] - r * k[:, 0]) / sr))
            d2 = (_LOG_PHI0 - 0.5 * k[:, 1] ** 2 + log_ndtr((k[:, 0] - r * k[:, 1]) / sr))
        else:
            d1 = d2 = log_bvn_density(k[:, 0], k[:, 1], r)
        grad = np.stack([np.exp(d1 - logZ), np.exp(d2 - logZ)], axis=1) * s / sd
        return logZ, grad

    def hessian(self, s, m, V) -> np.ndarray:
        """``d^2 log Z_out / dm^2`` (shape ``(n, 2, 2)``) at projected means ``m``.

        With ``h, k`` the standardized limits, ``e_1 = (d Phi_2/dh)/Phi_2``,
        ``e_2 = (d Phi_2/dk)/Phi_2`` and ``rho = phi_2(h, k; r)/Phi_2``, differentiating
        Plackett's ``d Phi_2/dh = phi(h) Phi((k - r h)/sqrt(1 - r^2))`` once more gives

            d^2 log Z/dh^2 = -h e_1 - r rho - e_1^2,   d^2 log Z/dh dk = rho - e_1 e_2,

        (and ``h <-> k``), scaled by ``dk_i/dm_i = s_i/(sigma_i sqrt(V))``.  The
        joint-density variant is not a posterior: its Hessian is undefined (NaN)."""
        s = np.asarray(s, float)
        m = np.asarray(m, float)
        n = len(m)
        if self.variant != "bayes":
            return np.full((n, 2, 2), np.nan)
        sd = self.sigma * math.sqrt(V)
        k = s * m / sd
        r = s[:, 0] * s[:, 1] * self.corr
        logZ = log_bvn_cdf(k[:, 0], k[:, 1], r)
        sr = np.sqrt(1 - r * r)
        e1 = np.exp(_LOG_PHI0 - 0.5 * k[:, 0] ** 2 + log_ndtr((k[:, 1] - r * k[:, 0]) / sr) - logZ)
        e2 = np.exp(_LOG_PHI0 - 0.5 * k[:, 1] ** 2 + log_ndtr((k[:, 0] - r * k[:, 1]) / sr) - logZ)
        rho = np.exp(log_bvn_density(k[:, 0], k[:, 1], r) - logZ)
        H = np.empty((n, 2, 2))
        H[:, 0, 0] = -k[:, 0] * e1 - r * rho - e1 * e1
        H[:, 1, 1] = -k[:, 1] * e2 - r * rho - e2 * e2
        H[:, 0, 1] = H[:, 1, 0] = rho - e1 * e2
        c = s / sd
        return H * c[:, :, None] * c[:, None, :]

    def moments(self, y, omega, V) -> Moments:
        """``g_out = P^T grad_m log Z_out`` and ``dg_out = P^T (d^2 log Z/dm^2) P`` as the
        centred moments ``V g_out`` and ``V^2 dg_out`` (``y`` the sign pairs)."""
        omega, Vm, v = isotropic_layout(omega, V, self.P.shape[1])
        m = omega[:, 0, :] @ self.P.T
        logZ, grad = self.score(y, m, v)
        dg = np.einsum("ia,nij,jb->nab", self.P, self.hessian(y, m, v), self.P)
        return Moments(logZ, v * (grad @ self.P)[:, None, :], v * (v * dg), omega, Vm)

    def fisher(self, q, V, *, step: float = 0.25) -> float:
        """``E ||g_out||^2`` with ``omega ~ N(0, q I_K)`` (state evolution of
        arXiv:2506.01582): a sum over the four
        sign pairs of ``int N(m; 0, q P P^T) Z (grad log Z)^T P P^T (grad log Z)``
        (:func:`symtheory.glm.integrate.projected.projected_fisher`)."""
        from ..integrate.projected import projected_fisher

        return projected_fisher(self.score, self.outcomes, self.C0, q, V, step=step)

    def fisher_at_zero_mp(self, V=1, *, dps: int = 30):
        """:meth:`fisher` at ``q = 0`` in mpmath: ``m = 0``, ``Z = Phi(0)^2 + int_0^r
        phi_2(0, 0; t) dt`` (Plackett) by ``mpmath.quad``, ``dZ/dh = phi(0) Phi(0)``
        (``phi_2(0, 0; r)`` for the variant).  The independent high-precision path of
        the weak-recovery threshold (arXiv:2506.01582)."""
        import mpmath

        with mpmath.workdps(dps + 10):
            P = mpmath.matrix([[_mp_number(self.P_exact[i, j], mpmath.mp.dps)
                                for j in range(self.P.shape[1])] for i in range(2)])
            C0 = P * P.T
            sd = [mpmath.sqrt(C0[i, i] * V) for i in range(2)]
            c = C0[0, 1] / mpmath.sqrt(C0[0, 0] * C0[1, 1])

            def phi2(t):
                return 1 / (2 * mpmath.pi * mpmath.sqrt(1 - t * t))

            total = mpmath.mpf(0)
            for s1 in (1, -1):
                for s2 in (1, -1):
                    r = s1 * s2 * c
                    Z = mpmath.mpf(1) / 4 + mpmath.quad(phi2, [0, r])
                    dZ = (mpmath.npdf(0) * mpmath.ncdf(0) if self.variant == "bayes"
                          else phi2(r))
                    w = [s1 * dZ / sd[0], s2 * dZ / sd[1]]
                    quad_form = sum(C0[i, j] * w[i] * w[j] for i in range(2) for j in range(2))
                    total += quad_form / Z
            return +total


def _mp_number(value, dps):
    """An exact entry (SymPy number, string or float by its repr) as an mpmath number."""
    import mpmath

    if hasattr(value, "evalf"):
        return mpmath.mpf(str(value.evalf(dps + 5)))
    return mpmath.mpf(repr(float(value)))
