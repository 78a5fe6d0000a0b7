"""Identity checks every scalar channel and prior must pass (after tramp's ``checks``).

Each check compares a generated quantity with an *independent* numerical path and
returns a :class:`CheckResult` (identity, worst discrepancy, tolerance, pass/fail,
where).  Channels run them when declared (:func:`declaration_checks`; a failure
raises :class:`ChannelCheckError` naming the identity); tests run them at more points.

=============  =============================================================  ==========
identity       what is compared                                               scale
=============  =============================================================  ==========
``Z_out``      derived ``log Z_out`` vs ``log`` of adaptive quadrature of      absolute
               ``int N(u; omega, V + Delta) P(y | u) du``                     (in log)
``g_out``      ``g_out, dg_out`` vs the omega-derivatives of the quadrature:  ``|ref| +
               ``(E[u|y] - omega)/s2`` and ``(Var[u|y] - s2)/s2^2``,          1/sqrt(s2)``,
               ``s2 = V + Delta`` (differentiation under the integral, no     ``|ref| +
               ``sp.diff``); without a likelihood ``mpmath.diff`` of          1/s2``
               ``log Z_out`` at 30 digits
``normalization``  ``sum_y Z_out`` or ``int Z_out dy`` (quadrature) vs 1       absolute
``Nishimori``  ``E_y[g_out^2 + dg_out | omega] = 0`` (Eq. (12) of arXiv:2502.00901; it holds
at  ``E g^2 +
               every omega because ``int Z_out dy = 1``), omega ~ N(0, rho-V)  E |dg|``
``tower``      ``E_omega E_y E[z^2 | y, omega] = rho`` with                    ``rho``
               ``E[z^2|y] = (omega + V g)^2 + V + V^2 dg``, omega ~ N(0,
               rho - V) by Gauss-Hermite (the inner mean is ``omega^2 + V``,
               a polynomial: the rule is exact for a correct channel)
``prior overlap``  ``F(qhat)`` of a prior vs ``int db N(b; 0, qhat)            ``F``
               Z(b, qhat) f_in(b)^2`` with ``Z``, ``f_in = d log Z/db`` by
               quadrature of the prior density; and ``F^{-1}(F(qhat)) = qhat``
=============  =============================================================  ==========

Tolerances.  The quadratures are adaptive (``scipy.integrate.quad``, QUADPACK) at
relative accuracy ``QUAD_RTOL = 1e-11`` on pieces split at the integrand's peak and at
the likelihood's discontinuities, with the integrand scaled by its maximum (no
underflow in the tails); each result's own error estimate must stay below
``tolerance / 10`` or the check fails as inconclusive.  The generated kernels are
accurate to ~1e-13 (measured, ``accuracy``).  ``DECLARATION_TOLERANCE = 1e-7`` thus
leaves a margin of >= 100 over both, while a wrong closed form -- the whole-line
Heaviside integral is off by O(1), a wrong factor or sign by O(1), a dropped
exponentially small tail term at 1e-7 of the value -- fails.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import time
import warnings
from dataclasses import asdict, dataclass

import mpmath
import numpy as np
import sympy as sp
from scipy import integrate

from ...core.quadrature import gauss_hermite

DECLARATION_TOLERANCE = 1e-7
QUAD_RTOL = 1e-11
#: an accuracy (float64 vs mpmath) worse than this is reported by an AccuracyWarning
ACCURACY_WARNING = 1e-6
#: points per identity at declaration (tests ask for more)
DECLARATION_POINTS = 3
#: Gauss-Hermite nodes of the tower identity (exact for the polynomial omega^2 + V)
TOWER_NODES = 6
#: the grid scan that locates an integrand spans center +- width sinh(7) (~ +-548 widths)
_SCAN = np.sinh(np.linspace(-7.0, 7.0, 1401))
#: the integration range keeps the region where the integrand exceeds e^-80 of its peak
_LOG_RANGE = 80.0
#: the integrands are scaled to peak 1, so their integrals are ~ the peak's width; an
#: absolute error of 1e-30 is negligible and stops subdivision where they vanish
_EPSABS = 1e-30


class ChannelCheckError(ValueError):
    """A declared channel (or prior) fails one of the identities of this module.

    Raised at declaration, naming the identity and its discrepancy (a ``ValueError``).

    Examples
    --------
    >>> from symtheory.glm import ChannelCheckError
    >>> issubclass(ChannelCheckError, ValueError)
    True
    """


class AccuracyWarning(UserWarning):
    """A generated kernel's float64 evaluation is less accurate than ``ACCURACY_WARNING``."""


@dataclass(frozen=True)
class CheckResult:
    identity: str
    discrepancy: float
    tolerance: float
    passed: bool
    where: str = ""
    what: str = ""

    def message(self) -> str:
        state = "passed" if self.passed else "failed"
        return (f"{self.identity} check {state}: {self.what} by {self.discrepancy:.3g} at "
                f"{self.where} (tolerance {self.tolerance:g})")


def _result(identity, what, tol, worst):
    """``worst = (discrepancy, where)``; nan (inconclusive) fails."""
    d, where = worst
    return CheckResult(identity, float(d), tol, bool(d <= tol), where, what)


# ---------------------------------------------------------------------- quadrature
class _Inconclusive(Exception):
    pass


def _moments(logf_vec, logf, center, width, breaks=(), powers=(0, 1, 2), stats=None,
             tol=DECLARATION_TOLERANCE, scan=_SCAN):
    """``(L, [int e^{logf - L} (x - m)^k dx for k in powers], m)`` by adaptive quadrature.

    ``L`` is the maximum of ``logf`` on a scan grid and ``m`` its position; the range is
    cut where ``logf < L - 80`` (the remainder, below e^-80 of the peak, is still
    integrated over the infinite tails).  ``stats(x) -> (logf(x), vector)``, if given,
    replaces the powers: the vector's components are integrated against ``e^{logf - L}``.
    """
    breaks = np.asarray([b for b in breaks if np.isfinite(b)], dtype=float)
    grid = np.union1d(center + width * scan, breaks)
    with np.errstate(all="ignore"):
        lg = np.asarray(logf_vec(grid), dtype=float)
    lg = np.where(np.isnan(lg), -np.inf, lg)
    i = int(np.argmax(lg))
    L, m = float(lg[i]), float(grid[i])
    if not math.isfinite(L):
        raise _Inconclusive(f"integrand has no finite value near {center:g}")
    inside = np.nonzero(lg > L - _LOG_RANGE)[0]
    lo, hi = grid[max(inside[0] - 1, 0)], grid[min(inside[-1] + 1, len(grid) - 1)]
    cuts = sorted({lo, m, hi} | {float(b) for b in breaks if lo < b < hi})
    pieces = [(-np.inf, lo)] + list(zip(cuts[:-1], cuts[1:])) + [(hi, np.inf)]

    def weight(x):
        v = math.exp(logf(x) - L)  # <= ~1: no overflow; -inf -> 0
        return 0.0 if math.isnan(v) else v

    if stats is None:
        def integrand(x):
            return weight(x) * (x - m) ** powers_arr
    else:  # stats(x) -> (logf(x), vector): one evaluation of the kernel per node
        def integrand(x):
            lf, vec = stats(x)
            w = math.exp(lf - L)
            return w * vec if w > 0 else zero

    powers_arr = np.asarray(powers, dtype=float)
    zero = np.zeros(len(powers) if stats is None else len(stats(m)[1]))
    totals, err, scale = zero.copy(), zero.copy(), zero.copy()
    for a, b in pieces:
        if a == b:
            continue
        if stats is None and len(powers) <= 2:
            # few components: QUADPACK's compiled qags per component beats quad_vec's loop
            for j, k in enumerate(powers):
                v, e = integrate.quad(lambda x: weight(x) * (x - m) ** k, a, b, epsabs=_EPSABS,
                                      epsrel=QUAD_RTOL, limit=200)
                totals[j] += v
                err[j] += e
                scale[j] += abs(v)
            continue
        # one adaptive pass for every component (QUADPACK's GK21 rule, vector-valued)
        v, e = integrate.quad_vec(integrand, a, b, epsabs=_EPSABS, epsrel=QUAD_RTOL, norm="max",
                                  limit=400)
        totals += v
        err += e
        scale += np.abs(v)
    if np.max(err) > tol / 10 * max(np.max(scale), 1e-300):
        raise _Inconclusive(f"quadrature error estimate {np.max(err):.2g} of {np.max(scale):.2g}")
    return L, totals, m


# ---------------------------------------------------------------------- points
def _param_values(channel, rng):
    return [float(rng.uniform(*channel.check_ranges[p])) for p in channel.params]


def _effective_variance(channel, V, params):
    if channel.likelihood is None:
        return V
    noise = channel.likelihood.noise_variance.subs(dict(zip(channel.params, params)))
    return V + float(noise)


def _draw_y(channel, omega, V, params, rng):
    if channel.levels is not None:
        return list(channel.levels)
    z = omega + math.sqrt(V) * rng.standard_normal()
    try:
        return [float(channel.sample(np.array([z]), rng, *params)[0])]
    except NotImplementedError:
        return [omega + math.sqrt(V + 1.0) * rng.standard_normal()]


def sample_points(channel, n, rng, omega_scale=2.0):
    """``n`` random ``(y, omega, V, params)`` (every level of a discrete ``y``)."""
    pts = []
    for _ in range(n):
        V = float(np.exp(rng.uniform(np.log(0.05), np.log(2.0))))
        omega = float(omega_scale * rng.standard_normal())
        params = _param_values(channel, rng)
        for y in _draw_y(channel, omega, V, params, rng):
            pts.append((float(y), omega, V, params))
    return pts


def _where(channel, params, **coords):
    """``"y=1, omega=-0.3, V=0.7, delta=0.2"``: the coordinates, then the parameters."""
    items = [f"{k}={v:.6g}" for k, v in coords.items()]
    items += [f"{p}={v:.6g}" for p, v in zip(channel.params, params)]
    return ", ".join(items)


def _pointwise(channel, V, params):
    """Scalar ``(log Z, g, dg)`` of the generated kernel at fixed ``V, params``."""
    func = channel.kernel.func
    out = np.empty(3)

    def f(y, omega):
        func(float(y), float(omega), V, *params, out)
        return out.copy()

    return f


# ---------------------------------------------------------------------- identities
@functools.lru_cache(maxsize=512)
def _likelihood_quadrature(channel, y, omega, V, params, tol):
    """``(log Z_out, g_out, dg_out, s2)`` by quadrature of the declared likelihood
    (memoized: the Z_out and g_out checks share the integrals)."""
    lik = channel.likelihood
    discrete = channel.levels is not None
    loglik = _log_likelihood(channel, y if discrete else None)
    s2 = _effective_variance(channel, V, params)
    norm = 0.5 * math.log(2 * math.pi * s2)
    if discrete:
        def logf(u):
            return -(u - omega) ** 2 / (2 * s2) - norm + loglik(u, *params)
    else:
        def logf(u):
            return -(u - omega) ** 2 / (2 * s2) - norm + loglik(y, u, *params)

    breaks = [float(sp.sympify(b).subs(dict(zip(channel.params, params)))) for b in lik.breakpoints]
    L, (m0, m1, m2), m = _moments(np.vectorize(logf), logf, omega, math.sqrt(s2), breaks, tol=tol)
    mean = m + m1 / m0
    var = m2 / m0 - (m1 / m0) ** 2
    return L + math.log(m0), (mean - omega) / s2, (var - s2) / s2**2, s2


@functools.lru_cache(maxsize=64)
def _log_likelihood(channel, level):
    return channel.likelihood.log_likelihood(channel.params, level)


def check_log_partition(channel, points, tol=DECLARATION_TOLERANCE) -> CheckResult:
    """Derived ``log Z_out`` vs the log of adaptive quadrature of the likelihood."""
    worst = (-1.0, "")
    for y, omega, V, params in points:
        logz = _pointwise(channel, V, params)(y, omega)[0]
        try:
            ref = _likelihood_quadrature(channel, y, omega, V, tuple(params), tol)[0]
        except _Inconclusive as exc:
            return _result("Z_out", f"quadrature inconclusive ({exc})", tol,
                           (math.nan, _where(channel, params, y=y, omega=omega, V=V)))
        d = abs(logz - ref) if math.isfinite(logz) else math.inf
        if not d <= worst[0]:
            worst = (d, _where(channel, params, y=y, omega=omega, V=V))
    return _result("Z_out", "SymPy's integral differs from quadrature of the likelihood "
                   "(|log Z_out difference|)", tol, worst)


def check_gout_derivative(channel, points, tol=DECLARATION_TOLERANCE) -> CheckResult:
    """(a) ``g_out, dg_out`` vs omega-derivatives of ``log Z_out`` by an independent path."""
    worst = (-1.0, "")
    for y, omega, V, params in points:
        _, g, dg = _pointwise(channel, V, params)(y, omega)
        try:
            if channel.likelihood is not None:
                _, g_ref, dg_ref, s2 = _likelihood_quadrature(channel, y, omega, V, tuple(params),
                                                                  tol)
            else:
                g_ref, dg_ref = _mp_derivatives(channel, y, omega, V, params)
                s2 = V
        except _Inconclusive as exc:
            return _result("g_out", f"quadrature inconclusive ({exc})", tol,
                           (math.nan, _where(channel, params, y=y, omega=omega, V=V)))
        d = max(abs(g - g_ref) / (abs(g_ref) + 1 / math.sqrt(s2)),
                abs(dg - dg_ref) / (abs(dg_ref) + 1 / s2))
        if not d <= worst[0]:
            worst = (d, _where(channel, params, y=y, omega=omega, V=V))
    what = ("g_out/dg_out differ from the derivatives of the quadrature (posterior moments)"
            if channel.likelihood is not None else
            "g_out/dg_out differ from mpmath.diff of log Z_out")
    return _result("g_out", what, tol, worst)


def _mp_log_partition(channel):
    from ...core import special

    if getattr(channel, "_mp_log_Z", None) is None:
        from sympy.printing.pycode import MpmathPrinter

        args = (channel.y, channel.omega, channel.V) + channel.params
        channel._mp_log_Z = sp.lambdify(args, channel.log_Z,
                                        modules=[special.MPMATH_NAMESPACE, "mpmath"],
                                        printer=MpmathPrinter({"fully_qualified_modules": False}))
    return channel._mp_log_Z


def _mp_derivatives(channel, y, omega, V, params, dps=30):
    f = _mp_log_partition(channel)
    with mpmath.workdps(dps):
        h = lambda w: f(mpmath.mpf(y), w, mpmath.mpf(V), *map(mpmath.mpf, params))  # noqa: E731
        return float(mpmath.diff(h, mpmath.mpf(omega), 1)), float(mpmath.diff(h, mpmath.mpf(omega), 2))


@functools.lru_cache(maxsize=1024)
def _expect_y(channel, omega, V, params, tol):
    """``int Z_out(y; omega, V) s(y) dy`` (or the sum over levels) for the statistics
    ``s = (1, g^2, dg, |dg|, E[z^2 | y, omega])``, ``E[z^2|y] = (omega + V g)^2 + V +
    V^2 dg``.  Memoized: normalization, Nishimori and tower share the integrals."""
    f = _pointwise(channel, V, params)

    def stats(y):
        logz, g, dg = f(y, omega)
        return logz, np.array([1.0, g * g, dg, abs(dg), (omega + V * g) ** 2 + V + V * V * dg])

    if channel.levels is not None:
        acc = 0.0
        for y in channel.levels:
            logz, vec = stats(y)
            acc = acc + math.exp(logz) * vec
        return acc

    def logz_vec(ys):
        return channel.log_partition(ys, np.full_like(ys, omega), V, *params)

    L, totals, _ = _moments(logz_vec, lambda y: f(y, omega)[0], omega,
                            math.sqrt(_effective_variance(channel, V, params)), stats=stats, tol=tol)
    return np.asarray(totals) * math.exp(L)


def check_normalization(channel, points, tol=DECLARATION_TOLERANCE) -> CheckResult:
    """(b) ``sum_y Z_out = 1`` (discrete) or ``int Z_out dy = 1`` (quadrature)."""
    worst = (-1.0, "")
    for y, omega, V, params in points:
        try:
            total = _expect_y(channel, omega, V, tuple(params), tol)[0]
        except _Inconclusive as exc:
            return _result("normalization", f"quadrature inconclusive ({exc})", tol,
                           (math.nan, _where(channel, params, omega=omega, V=V)))
        d = abs(total - 1.0)
        if not d <= worst[0]:
            worst = (d, _where(channel, params, omega=omega, V=V))
    what = "sum over y of Z_out differs from 1" if channel.levels is not None else \
        "int Z_out dy differs from 1"
    return _result("normalization", what, tol, worst)


def check_nishimori(channel, points, tol=DECLARATION_TOLERANCE) -> CheckResult:
    """(c) ``E_y[g_out^2] = -E_y[dg_out]`` at ``omega`` drawn from the prior."""
    worst = (-1.0, "")
    for _, omega, V, params in points:
        try:
            _, g2, dg, adg, _ = _expect_y(channel, omega, V, tuple(params), tol)
        except _Inconclusive as exc:
            return _result("Nishimori", f"quadrature inconclusive ({exc})", tol,
                           (math.nan, f"omega={omega:.6g}, V={V:.6g}"))
        d = abs(g2 + dg) / max(g2 + adg, 1e-300)
        if not d <= worst[0]:
            worst = (d, _where(channel, params, omega=omega, V=V))
    return _result("Nishimori", "E[g_out^2] + E[dg_out] differs from 0 (relative)", tol, worst)


def check_tower(channel, points, tol=DECLARATION_TOLERANCE, omega_variance=1.0,
                nodes=None) -> CheckResult:
    """(d) ``E_y E[z^2 | y] = rho``: ``z = omega + sqrt(V) x`` with ``omega ~ N(0, rho - V)``,
    ``rho = V + omega_variance``; the posterior second moment comes from ``g, dg``."""
    x, w = gauss_hermite(nodes or TOWER_NODES)
    worst = (-1.0, "")
    for _, _, V, params in points:
        rho = V + omega_variance
        total = 0.0
        try:
            for xi, wi in zip(x, w):
                omega = math.sqrt(omega_variance) * xi
                m2 = _expect_y(channel, omega, V, tuple(params), tol)[4]
                total += wi * m2
        except _Inconclusive as exc:
            return _result("tower", f"quadrature inconclusive ({exc})", tol,
                           (math.nan, f"V={V:.6g}"))
        d = abs(total - rho) / rho
        if not d <= worst[0]:
            worst = (d, _where(channel, params, V=V, rho=rho))
    return _result("tower", "E_y E[z^2|y] differs from rho (relative)", tol, worst)


def check_prior_overlap(prior, qhats=(0.1, 1.0, 5.0), tol=DECLARATION_TOLERANCE,
                        log_density=None) -> CheckResult:
    """(e) A prior's overlap map ``F(qhat) = E[f_in^2]`` against its log-partition.

    ``Z(b, A) = int P(w) e^{b w - A w^2/2} dw`` and ``f_in = d log Z/db = E[w|b]`` by
    quadrature of ``log_density`` (NumPy-vectorized; default: the Gaussian prior's
    ``N(0, rho)``); the
    field ``b = qhat w0 + sqrt(qhat) xi`` has density ``N(b; 0, qhat) Z(b, qhat)``, so
    ``F(qhat) = int db N(b; 0, qhat) Z(b, qhat) f_in(b)^2`` (one more quadrature).  Also
    checks the derived inverse: ``F^{-1}(F(qhat)) = qhat``.
    """
    if log_density is None:
        var = float(prior.rho(1)[0, 0])

        def log_density(w):
            return -w * w / (2 * var) - 0.5 * math.log(2 * math.pi * var)

    coarse = np.sinh(np.linspace(-4.0, 4.0, 61))  # nested quadratures: a cheaper scan (+-27 widths)
    worst = (-1.0, "")
    for q in qhats:
        def posterior(b):  # (log Z(b, q), f_in(b) = E[w | b])
            lf = lambda w: log_density(w) + b * w - q * w * w / 2  # noqa: E731
            L, (m0, m1), m = _moments(lf, lambda w: float(lf(w)), b / (1 + q), 1 / math.sqrt(1 + q),
                                      powers=(0, 1), tol=tol, scan=coarse)
            return L + math.log(m0), m + m1 / m0

        def log_integrand(b):  # log of N(b; 0, q) Z(b, q) f_in(b)^2
            logz, f = posterior(b)
            return (-b * b / (2 * q) - 0.5 * math.log(2 * math.pi * q) + logz
                    + 2 * math.log(abs(f)) if f != 0 else -math.inf)

        try:
            L, (m0,), _ = _moments(np.vectorize(log_integrand), log_integrand, 0.0,
                                   math.sqrt(q * q + q), powers=(0,), tol=tol, scan=coarse)
        except _Inconclusive as exc:
            return _result("prior overlap", f"quadrature inconclusive ({exc})", tol,
                           (math.nan, f"qhat={q:g}"))
        F_ref = math.exp(L) * m0
        F = float(prior.overlap_map(np.array([[q]]))[0, 0])
        q_back = float(prior.inverse_overlap_map(np.array([[F]]))[0, 0])
        d = max(abs(F - F_ref) / F_ref, abs(q_back - q) / q)
        if not d <= worst[0]:
            worst = (d, f"qhat={q:g} (derived F={F:.12g}, quadrature {F_ref:.12g})")
    return _result("prior overlap", "F(qhat) differs from E[f_in^2] by quadrature of the prior "
                   "(or F^-1(F(qhat)) from qhat), relative", tol, worst)


# ---------------------------------------------------------------------- accuracy
_ACCURACY_OMEGAS = (-40.0, -10.0, -3.0, -0.3, 0.0, 0.3, 3.0, 10.0, 40.0)


def measure_accuracy(channel, dps=30):
    """Worst float64 error of the kernel against the same expressions in mpmath.

    Probes ``omega`` in +-{0, 0.3, 3, 10, 40}, ``V`` in {1e-8, 0.05, 1}, parameters at the
    middle and the low end of their check ranges, every level (or ``y - omega`` in
    ``{-3, 0, 2.5} sqrt(V + 1)``).  Error: relative for ``g_out``, ``dg_out`` and
    ``log Z_out`` (the latter with floor 1: absolute, i.e. relative in ``Z_out``, while
    ``|log Z_out| <= 1``; beyond, ``Z_out`` itself is ill-conditioned -- its condition
    number grows like ``|log Z_out|`` -- or not representable); values whose mpmath reference
    lies below 1e-290 in magnitude only need to underflow (|float| < 1e-280).  A reference
    that moves between ``dps`` and ``2 dps`` digits is a cancellation: the float error is then
    relative to the cancelling terms, whose size the ``dps``-digit rounding reveals.
    Returns ``(worst, where)``.
    """
    worst, where = 0.0, ""
    param_sets = [[0.5 * (lo + hi) for lo, hi in (channel.check_ranges[p] for p in channel.params)],
                  [lo for lo, _ in (channel.check_ranges[p] for p in channel.params)]]
    for params in param_sets:
        for V in (1e-8, 0.05, 1.0):  # small V: GAMP near perfect recovery
            f = _pointwise(channel, V, params)
            for omega in _ACCURACY_OMEGAS:
                ys = channel.levels if channel.levels is not None else \
                    [omega + k * math.sqrt(V + 1.0) for k in (-3.0, 0.0, 2.5)]
                for y in ys:
                    got = f(y, omega)
                    ref = channel.kernel.mp(y, omega, V, *params, dps=dps)
                    for i, (a, r) in enumerate(zip(got, ref)):
                        e = _float_error(a, r, i == 0,
                                         lambda: channel.kernel.mp(y, omega, V, *params,
                                                                   dps=2 * dps)[i], dps)
                        if not e <= worst:
                            worst = e
                            where = (["log Z_out", "g_out", "dg_out"][i] + " at "
                                     + _where(channel, params, y=y, omega=omega, V=V))
    return worst, where


def _float_error(a, r, floor_one, reference_at_twice, dps):
    """Error of the float ``a`` against the ``dps``-digit reference ``r`` (see
    ``measure_accuracy``); ``reference_at_twice()`` gives the reference at ``2 dps``."""
    if not mpmath.isfinite(r):
        return 0.0 if (not math.isfinite(a) and math.copysign(1, a) == float(mpmath.sign(r))) \
            else math.inf
    if abs(r) < mpmath.mpf("1e-290"):
        return 0.0 if abs(a) < 1e-280 else math.inf
    scale = max(1, abs(r)) if floor_one else abs(r)
    if abs(a - r) > 1e-12 * scale:
        # confirm at twice the digits: a reference that moves is a cancellation (g_out = 0
        # at a symmetric point), and its dps-digit rounding measures the cancelling terms
        r2 = reference_at_twice()
        moved = abs(r - r2)
        if mpmath.isfinite(r2) and moved > mpmath.mpf(10) ** (4 - dps) * abs(r2):
            return float(abs(a - r2) / (abs(r2) + moved * mpmath.mpf(10) ** dps))
    return float(abs(a - r) / scale)


# ---------------------------------------------------------------------- declaration
def _source_digest(channel):
    """Hash of the channel's defining module and of this one: a cached verdict is the
    one the current code reaches."""
    import sys

    h = hashlib.sha256()
    for mod in (sys.modules[type(channel).__module__], sys.modules[__name__]):
        h.update(inspect.getsource(mod).encode())
    return h.hexdigest()


def _declaration_parts(channel) -> list:
    """What the user declared: name, log-partition, levels, check ranges, likelihood."""
    parts = [channel.name, sp.srepr(channel.log_Z), repr(channel.levels),
             repr(sorted((str(p), v) for p, v in channel.check_ranges.items())),
             str(DECLARATION_POINTS), repr(channel._sampler is None)]
    if channel.likelihood is not None:
        lik = channel.likelihood
        parts += [sp.srepr(lik.expr), sp.srepr(lik.noise_variance), sp.srepr(lik.u)]
    return parts


def _declaration_seed(channel) -> int:
    """Seed of the declaration checks' random points: a function of the declaration
    only, so an edit of the package's source does not move the points (a verdict that
    flips with an unrelated edit is a flaky check, not a finding)."""
    return int(hashlib.sha256("\n".join(_declaration_parts(channel)).encode()).hexdigest()[:8], 16)


def _declaration_key(channel) -> str:
    """Cache key of a verdict: the declaration, its kernel and the code that checks it."""
    parts = [channel.kernel.digest, _source_digest(channel), *_declaration_parts(channel)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def run_checks(channel, n_points=DECLARATION_POINTS, seed=0, tol=DECLARATION_TOLERANCE):
    """Every identity that applies to ``channel`` at ``n_points`` random points."""
    rng = np.random.default_rng(seed)
    pts = sample_points(channel, n_points, rng)
    # one point in the tail of omega (the stable forms matter there)
    pts += sample_points(channel, 1, rng, omega_scale=8.0)
    results = []
    if channel.likelihood is not None:
        results.append(check_log_partition(channel, pts, tol))
    results.append(check_gout_derivative(channel, pts, tol))
    # the output identities at the tower's Gauss-Hermite omegas: the y-integrals are shared
    draws = pts[:2]
    x, _ = gauss_hermite(TOWER_NODES)
    at_nodes = [(y, float(xi), V, params) for y, _, V, params in draws for xi in x]
    results.append(check_normalization(channel, at_nodes, tol))
    results.append(check_nishimori(channel, at_nodes, tol))
    results.append(check_tower(channel, draws, tol))
    return results


def raise_on_failure(results, name):
    failed = [r for r in results if not r.passed]
    if failed:
        others = "; ".join(r.identity for r in failed[1:])
        raise ChannelCheckError(f"{name}: {failed[0].message()}"
                                + (f" (also failed: {others})" if others else ""))


def declaration_checks(channel):
    """Run (or load from the cache) the declaration checks; sets ``channel.checks``,
    ``channel.accuracy``, ``channel.check_seconds`` (wall) and ``check_cpu_seconds``;
    raises on a failed identity.

    The cache key hashes the kernel (its source, library versions, helper modules),
    the likelihood, the check settings and the source of this module and of
    :mod:`symtheory.glm.factors.scalar`: a cached verdict is the one the current code reaches.
    """
    from ...core.cache import derivation_dir

    channel.kernel.func  # load or compile the kernel first: that is not the checks' cost
    t0, c0 = time.perf_counter(), time.process_time()
    # with the derivations: writable for this process (a read-only cache gets a temporary
    # copy) and removed by `symtheory cache clear`
    folder = derivation_dir() / "channel_checks"
    folder.mkdir(parents=True, exist_ok=True)
    key = _declaration_key(channel)
    path = folder / f"{channel.name}_{key}.json"
    record = None
    if path.exists():
        try:
            record = json.loads(path.read_text())
            results = [CheckResult(**r) for r in record["results"]]
            accuracy, acc_where = record["accuracy"], record["accuracy_where"]
        except (ValueError, KeyError, TypeError):
            record = None
    if record is None:
        results = run_checks(channel, seed=_declaration_seed(channel))
        accuracy, acc_where = measure_accuracy(channel)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"results": [asdict(r) for r in results],
                                   "accuracy": accuracy, "accuracy_where": acc_where}))
        tmp.replace(path)
    channel.checks = results
    channel.accuracy = float(accuracy)
    channel.accuracy_where = acc_where
    channel.check_seconds = time.perf_counter() - t0
    channel.check_cpu_seconds = time.process_time() - c0
    channel.checks_cached = record is not None
    raise_on_failure(results, f"channel {channel.name!r}")
    if not channel.accuracy <= ACCURACY_WARNING:
        warnings.warn(f"channel {channel.name!r}: float64 kernel error {channel.accuracy:.2g} "
                      f"against mpmath ({acc_where})", AccuracyWarning, stacklevel=3)
    return results
