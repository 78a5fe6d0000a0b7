"""Gaussian probabilities and truncated moments over half-lines and quadrants.

The building blocks of channels whose likelihood is constant on regions bounded by
sign conditions (the output channel of a GLM, Barbier et al., PNAS 116 (2019), with ``P_out(y|Z)`` piecewise constant): for
``u ~ N(mu, C)`` and the orthant ``{u > 0}`` (one or two coordinates) they return
``log P(u > 0)``, ``E[u | u > 0]`` and ``Cov[u | u > 0]``.

* one coordinate, :func:`halfline_moments`: closed form through ``log Phi`` and the
  inverse Mills ratio ``phi/Phi = sqrt(2/pi)/erfcx(-a/sqrt 2)``; in the lower tail
  (``a = mu/sigma < -3``) the mean and variance come from the continued fraction of
  the Mills ratio written so that nothing cancels (``1 - lam (lam + a)`` would lose
  ``a^2`` ulps, ``mu + sigma lam`` all of them);
* two coordinates, :func:`quadrant_moments`: a 1-D integral over ``t = (u1 - mu1)/s1``
  of ``phi(t) Phi(beta(t))`` times the closed-form half-line moments of ``u2 | u1``.
  ``log phi + log Phi`` is concave with curvature ``<= -1``, so its mode ``t*`` (safeguarded
  Newton) bounds the support: mass beyond ``|t - t*| > 10`` is below ``e^{-50}``
  relative.  The pieces ``[lo, t*]``, ``[t*, t_k]``, ``[t_k, hi]`` (``t_k``: where
  ``Phi(beta)`` switches, steep when ``|rho| -> 1``) are integrated by nested tanh-sinh
  levels (boundary layers cost a few nodes) until the moments change by less than
  ``rtol`` (relative to their own scale) between levels; the change is returned as
  the error estimate.  Weights are ``exp(h(t) - h(t*)) <= 1``: no overflow, and
  ``log P`` is exact in the tails (no ``Phi_2`` difference of nearly equal numbers).

Checked against mpmath in ``tests/glm/test_multi_index.py``.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .special_numba import erfcx, log_ndtr

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
#: below this standardized mean the tail forms are used (direct forms lose <= 9 ulps above)
_TAIL_SWITCH = -3.0
#: depth of the Mills-ratio continued fraction: 80 terms reach 1e-16 at x = 3 (mpmath)
_CF_DEPTH = 80
#: half-width of the quadrant integral around the mode (curvature <= -1: e^{-50} mass)
_MODE_WINDOW = 10.0


@numba.njit(cache=True)
def inverse_mills(a):
    """``phi(a)/Phi(a)`` without overflow or cancellation (0 for large ``a``)."""
    return _SQRT_2_OVER_PI / erfcx(-a * _INV_SQRT2)


@numba.njit(cache=True)
def _mills_tail(x):
    """For ``x >= 3``, ``a = -x``: ``lam = phi(a)/Phi(a) = x + r1`` with
    ``r_k = k/(x + r_{k+1})`` (Mills-ratio continued fraction); returns ``r1`` (the
    truncated mean ``a + lam``) and the truncated variance ``1 - lam (lam + a)``
    rewritten without cancellation as ``(x + 2 r2 - r3) / ((x + r3)(x + r2)^2)``."""
    r3 = 0.0
    r2 = 0.0
    r1 = 0.0
    nxt = 0.0
    for k in range(_CF_DEPTH, 0, -1):
        cur = k / (x + nxt)
        if k == 3:
            r3 = cur
        elif k == 2:
            r2 = cur
        elif k == 1:
            r1 = cur
        nxt = cur
    var = (x + 2.0 * r2 - r3) / ((x + r3) * (x + r2) * (x + r2))
    return r1, var


@numba.njit(cache=True)
def truncated_std_moments(a):
    """``N(a, 1)`` conditioned on ``> 0``: ``(log P, mean, variance, lam)`` with
    ``P = Phi(a)`` and ``lam = phi(a)/Phi(a)`` (the mean is ``a + lam``)."""
    logp = log_ndtr(a)
    if a < _TAIL_SWITCH:
        r1, var = _mills_tail(-a)
        return logp, r1, var, r1 - a
    lam = inverse_mills(a)
    return logp, a + lam, 1.0 - lam * (lam + a), lam


@numba.njit(cache=True)
def halfline_moments(mu, var):
    """``u ~ N(mu, var)`` conditioned on ``u > 0``: ``(log P(u > 0), E, Var)``."""
    s = math.sqrt(var)
    logp, m, v, _ = truncated_std_moments(mu / s)
    return logp, s * m, var * v


# ---------------------------------------------------------------------- quadrant
@numba.njit(cache=True)
def _log_integrand(t, a, b):
    """``h(t) = -t^2/2 + log Phi(a + b t)`` and ``h'(t)``, ``h''(t)``."""
    x = a + b * t
    logp, _, v, lam = truncated_std_moments(x)
    return -0.5 * t * t + logp, -t + b * lam, -1.0 - b * b * (1.0 - v)


@numba.njit(cache=True)
def _mode(t0, a, b):
    """Maximizer of the strictly concave ``h`` on ``[t0, inf)`` (safeguarded Newton)."""
    _, g0, _ = _log_integrand(t0, a, b)
    if g0 <= 0.0:
        return t0
    lo = t0
    hi = t0 + 1.0
    while True:
        _, g, _ = _log_integrand(hi, a, b)
        if g < 0.0:
            break
        lo = hi
        hi = t0 + 2.0 * (hi - t0)
    t = 0.5 * (lo + hi)
    for _ in range(100):
        _, g, hpp = _log_integrand(t, a, b)
        if g > 0.0:
            lo = t
        else:
            hi = t
        step = -g / hpp
        tn = t + step
        if not (lo < tn < hi):
            tn = 0.5 * (lo + hi)
        if abs(tn - t) <= 1e-14 * (1.0 + abs(t)) or hi - lo <= 1e-14 * (1.0 + abs(t)):
            return tn
        t = tn
    return t


@numba.njit(cache=True)
def _quadrant_pass(pieces, npieces, level, ts_gap, ts_side, ts_w, ts_off, a, b, hstar, tstar,
                   mu2, c, tau2, m2star, sums):
    """Add the level-``level`` tanh-sinh nodes of every piece to ``sums`` (6 moments)."""
    for p in range(npieces):
        lo = pieces[p]
        hi = pieces[p + 1]
        half = 0.5 * (hi - lo)
        for j in range(ts_off[level], ts_off[level + 1]):
            gap = ts_gap[j] * half
            t = lo + gap if ts_side[j] < 0 else hi - gap
            h, _, _ = _log_integrand(t, a, b)
            w = ts_w[j] * half * math.exp(h - hstar)
            _, m2, v2 = halfline_moments(mu2 + c * t, tau2)
            s = t - tstar
            d2 = m2 - m2star
            sums[p, 0] += w
            sums[p, 1] += w * s
            sums[p, 2] += w * s * s
            sums[p, 3] += w * d2
            sums[p, 4] += w * (d2 * d2 + v2)
            sums[p, 5] += w * s * d2


@numba.njit(cache=True)
def _moments_from_sums(tot, out):
    """Normalized ``(Z, E s, Var s, E d2, Var u2, Cov)`` from raw sums."""
    Z = tot[0]
    es = tot[1] / Z
    ed = tot[3] / Z
    out[0] = Z
    out[1] = es
    out[2] = tot[2] / Z - es * es
    out[3] = ed
    out[4] = tot[4] / Z - ed * ed
    out[5] = tot[5] / Z - es * ed


@numba.njit(cache=True)
def quadrant_moments(mu1, mu2, c11, c12, c22, ts_gap, ts_side, ts_w, ts_off, rtol, out):
    """``u ~ N(mu, C)`` conditioned on ``u1 > 0, u2 > 0``.

    ``out`` (8,): ``log P``, ``E u1``, ``E u2``, ``Var u1``, ``Cov``, ``Var u2``, the
    estimated relative error and the tanh-sinh level used.  Nodes: see
    :func:`symtheory.core.quadrature.tanh_sinh_unit_levels`.
    """
    s1 = math.sqrt(c11)
    c = c12 / s1                        # u2 | t ~ N(mu2 + c t, tau2)
    tau2 = c22 - c * c
    tau = math.sqrt(tau2)
    a = mu2 / tau
    b = c / tau
    t0 = -mu1 / s1
    tstar = _mode(t0, a, b)
    hstar, _, _ = _log_integrand(tstar, a, b)
    _, m2star, _ = halfline_moments(mu2 + c * tstar, tau2)
    pieces = np.empty(4)
    pieces[0] = max(t0, tstar - _MODE_WINDOW)
    n = 1
    if tstar > pieces[0]:
        pieces[n] = tstar
        n += 1
    if b != 0.0:
        tk = -a / b
        if pieces[n - 1] < tk < tstar + _MODE_WINDOW:
            pieces[n] = tk
            n += 1
    pieces[n] = tstar + _MODE_WINDOW
    npieces = n
    sums = np.zeros((3, 6))
    tot = np.zeros(6)
    cur = np.zeros(6)
    prev = np.zeros(6)
    max_level = ts_off.shape[0] - 2
    err = math.inf
    level = 0
    for level in range(max_level + 1):
        _quadrant_pass(pieces, npieces, level, ts_gap, ts_side, ts_w, ts_off, a, b, hstar,
                       tstar, mu2, c, tau2, m2star, sums)
        scale = 2.0 ** (-level)
        for k in range(6):
            tot[k] = 0.0
            for p in range(npieces):
                tot[k] += sums[p, k] * scale
        _moments_from_sums(tot, cur)
        if level >= 3:
            sd_s = math.sqrt(max(cur[2], 1e-300))
            sd_2 = math.sqrt(max(cur[4], 1e-300))
            err = max(abs(cur[0] - prev[0]) / cur[0],
                      abs(cur[1] - prev[1]) / sd_s,
                      abs(cur[2] - prev[2]) / cur[2],
                      abs(cur[3] - prev[3]) / sd_2,
                      abs(cur[4] - prev[4]) / cur[4],
                      abs(cur[5] - prev[5]) / (sd_s * sd_2))
            if err <= rtol:
                break
        for k in range(6):
            prev[k] = cur[k]
    out[0] = hstar - _LOG_SQRT_2PI + math.log(cur[0])
    out[1] = mu1 + s1 * (tstar + cur[1])
    out[2] = m2star + cur[3]
    out[3] = c11 * cur[2]
    out[4] = s1 * cur[5]
    out[5] = cur[4]
    out[6] = err
    out[7] = level


@numba.njit(cache=True, parallel=True)
def orthant_moments_batch(mu, C, ts_gap, ts_side, ts_w, ts_off, rtol, out_logp, out_mean,
                          out_cov, out_err):
    """Per sample ``s``: ``u ~ N(mu[s], C)`` (``k = 1`` or ``2`` coordinates, ``C`` shared)
    conditioned on ``u > 0``; fills ``log P``, ``E[u]`` (n, k), ``Cov[u]`` (n, k, k) and
    the estimated relative error (0 for the closed-form ``k = 1``)."""
    n = mu.shape[0]
    k = mu.shape[1]
    for s in numba.prange(n):
        if k == 1:
            lp, m, v = halfline_moments(mu[s, 0], C[0, 0])
            out_logp[s] = lp
            out_mean[s, 0] = m
            out_cov[s, 0, 0] = v
            out_err[s] = 0.0
        else:
            res = np.empty(8)
            quadrant_moments(mu[s, 0], mu[s, 1], C[0, 0], C[0, 1], C[1, 1], ts_gap, ts_side,
                             ts_w, ts_off, rtol, res)
            out_logp[s] = res[0]
            out_mean[s, 0] = res[1]
            out_mean[s, 1] = res[2]
            out_cov[s, 0, 0] = res[3]
            out_cov[s, 0, 1] = res[4]
            out_cov[s, 1, 0] = res[4]
            out_cov[s, 1, 1] = res[5]
            out_err[s] = res[6]


def orthant_moments(mu, C, *, rtol: float = 1e-11, max_level: int = 9):
    """Vectorized over samples: ``u ~ N(mu[s], C)`` on ``{u > 0}``, ``k = mu.shape[1]``
    in (1, 2).  Returns ``(log P (n,), E[u] (n, k), Cov[u] (n, k, k), error (n,))``."""
    from .quadrature import tanh_sinh_unit_levels

    mu = np.ascontiguousarray(mu, dtype=float)
    C = np.ascontiguousarray(C, dtype=float)
    n, k = mu.shape
    if k not in (1, 2) or C.shape != (k, k):
        raise ValueError(f"orthant moments need k in (1, 2) and C of shape (k, k); got "
                         f"mu {mu.shape}, C {C.shape}")
    gap, side, w, off = tanh_sinh_unit_levels(max_level)
    logp = np.empty(n)
    mean = np.empty((n, k))
    cov = np.empty((n, k, k))
    err = np.empty(n)
    orthant_moments_batch(mu, C, gap, side, w, off, float(rtol), logp, mean, cov, err)
    return logp, mean, cov, err
