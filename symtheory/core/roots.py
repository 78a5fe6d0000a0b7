"""Certified roots: a root with a bound on its error, from evaluations that carry error bars.

A model whose equation ``g(x) = 0`` is evaluated with an error bar (a quadrature, an
extrapolation, a closed form up to rounding) wants more than "Brent stopped": a bound
``|x - x*| <= w`` that holds as long as the evaluations' error bars hold.  The pieces:

* :class:`Estimate` -- a value with its error bar and the path that produced it;
  :func:`within_bounds` intersects it with rigorous bounds, :func:`best_estimate`
  picks the most accurate of several paths.
* :func:`quadratic_roots` -- the real roots of a quadratic without cancellation.
* :func:`first_positive` -- a lower bracket end by decades; :func:`bracketed_root` --
  Brent's method to the last ulp on the bracket it gives.
* :func:`certify_root` -- the smallest ``w`` (growing 8-fold) with ``g(x - w) > +err``
  and ``g(x + w) < -err``: the sign change, beyond the error bars, encloses the root.
* :func:`certified_lower_root` -- a rigorous lower bound on the root of a function
  known up to rounding (a closed-form limit whose root bounds the model's).
* :func:`tighter_bracket` -- the rigorous bracket itself where it is tighter than the
  certified root.

The functions are written for a residual that *decreases* through its root (positive
below, negative above), the form of a fixed point ``v = err(v)`` written as
``g(v) = err(v) - v`` with a contracting error map, and a positive root (the relative
tolerance is against it).  A high-precision root confirmed at twice the digits is
:func:`symtheory.core.roots_mp.refine_root_mp`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .result import Result, alias

EPS = float(np.finfo(float).eps)
SMALLEST_NORMAL = float(np.finfo(float).tiny)
#: absolute step tolerance of Brent: far below any normal root (the relative one decides)
TINY = 1e-320
#: Brent's relative step tolerance: 4 eps, the smallest SciPy's brentq accepts
BRENT_RTOL = 4 * EPS
BRENT_MAXITER = 500
#: certify_root widens its interval this many times at most, by CERTIFY_GROWTH each
#: time (8^40 spans any float64 ratio)
CERTIFY_STEPS = 40
CERTIFY_GROWTH = 8
#: certified_lower_root steps this far below the rounded root (relative), in turn, until
#: the sign beyond rounding confirms a lower bound (a root known to rounding / slope)
LOWER_ROOT_SHRINKS = (16 * EPS, 1e-13, 1e-11, 1e-9, 1e-7)


@dataclass
class Estimate(Result):
    """A value with an error bar and the path that produced it (``MMSEEstimate`` in BSR).

    ``error_kind`` is ``"estimate"`` unless the path is a rigorous bound; ``note`` (the
    ``message``) says why a path failed or was replaced.  ``converged`` is set from the
    value and error: both finite (a path that failed has an infinite error).  Every
    parameter is the attribute of the same name (:class:`~symtheory.core.result.Result`).

    Parameters
    ----------
    value : float
        The value.
    error : float
        Its error bar (``inf``: the path failed).
    error_kind : str
        ``"estimate"`` or ``"bound"`` (a certified bound on ``|value - exact|``).
    converged : bool
        Overwritten: both ``value`` and ``error`` finite.
    iterations : int
        Evaluations spent.
    residual : float
        The path's last residual.
    method : str
        The path (e.g. ``"spectral"``, ``"beta=inf"``, ``"bounds"``).
    message : str
        Why a path failed or was replaced.

    Examples
    --------
    >>> from symtheory.bsr import MMSEEstimate
    >>> est = MMSEEstimate(value=0.25, error=1e-12, method="spectral")
    >>> est.converged, est.error_kind
    (True, 'estimate')
    >>> MMSEEstimate(value=0.25).converged      # no error bar: not converged
    False
    """

    value: float = field(default=math.nan, kw_only=True)
    error: float = field(default=math.inf, kw_only=True)
    error_kind: str = field(default="estimate", kw_only=True)

    note = alias("message", "Why a path failed or was replaced (the message).")

    def __post_init__(self):
        super().__post_init__()
        self.converged = bool(math.isfinite(self.value) and math.isfinite(self.error))


def bounds_estimate(lower, upper, note: str = "") -> Estimate:
    """The midpoint of rigorous bounds, its error their half-width."""
    return Estimate(value=0.5 * (lower + upper), error=0.5 * (upper - lower),
                    error_kind="bound", method="bounds", message=note)


def within_bounds(est: Estimate, lower, upper) -> Estimate:
    """Intersect ``value +- error`` with the rigorous bounds ``[lower, upper]``; an
    estimate that contradicts them (also a nan) is replaced by the bounds, saying so."""
    a, b = max(est.value - est.error, lower), min(est.value + est.error, upper)
    if not (a <= b):
        return bounds_estimate(lower, upper,
                               f"{est.method} estimate outside the rigorous bounds; bounds used")
    if a == est.value - est.error and b == est.value + est.error:
        return est
    return Estimate(value=0.5 * (a + b), error=0.5 * (b - a), error_kind=est.error_kind,
                    method=est.method, message=est.message)


def best_estimate(candidates, lower, upper) -> Estimate:
    """The candidate with the smallest finite error, within the rigorous bounds
    (:func:`within_bounds`); the bounds themselves when no candidate has one."""
    best = min(candidates, key=lambda e: e.error if math.isfinite(e.error) else math.inf,
               default=None)
    if best is None or not math.isfinite(best.error):
        return bounds_estimate(lower, upper)
    return within_bounds(best, lower, upper)


def quadratic_roots(a, b, c):
    """Real roots ``(smaller, larger)`` of ``a x^2 + b x + c`` without cancellation.

    ``q = -(b + sign(b) sqrt(b^2 - 4ac))/2``, roots ``q/a`` and ``c/q`` (Numerical
    Recipes 5.6); the discriminant is formed as ``b^2 (1 - 4 (a/b)(c/b))`` so that it
    neither overflows nor underflows.  Raises ``ValueError`` for complex roots.
    """
    a, b, c = float(a), float(b), float(c)
    if a == 0.0:
        if b == 0.0:
            raise ValueError("degenerate quadratic")
        return (-c / b, -c / b)
    if b == 0.0:
        r = -c / a
        if r < 0:
            raise ValueError("complex roots")
        s = math.sqrt(r)
        return (-s, s)
    ratio = 1.0 - 4.0 * (a / b) * (c / b)
    if ratio < 0.0:
        if ratio > -64 * EPS:  # a double root, up to rounding
            ratio = 0.0
        else:
            raise ValueError("complex roots")
    q = -0.5 * b * (1.0 + math.sqrt(ratio))
    r1 = q / a
    r2 = c / q if q != 0.0 else r1
    return (min(r1, r2), max(r1, r2))


def first_positive(g: Callable[[float], float], upper: float, lower: float = 0.0):
    """Largest ``upper 10^-k`` (``k >= 1``, above ``lower`` and not below the smallest
    normal float) where ``g > 0``, or ``None``: the lower end of a bracket whose
    root may lie anywhere down to the float range."""
    v = upper
    for _ in range(330):
        v *= 0.1
        if v <= lower or v < SMALLEST_NORMAL:
            return None
        if g(v) > 0:
            return v
    return None


def brent(g: Callable[[float], float], lower: float, upper: float) -> float:
    """Brent's method (SciPy's ``brentq``) on ``[lower, upper]`` to the last ulps
    (:data:`TINY`, :data:`BRENT_RTOL`); SciPy's errors propagate."""
    from scipy.optimize import brentq

    return brentq(g, lower, upper, xtol=TINY, rtol=BRENT_RTOL, maxiter=BRENT_MAXITER)


def bracketed_root(g: Callable[[float], float], lower: float, upper: float) -> float:
    """Root of a decreasing ``g`` in the rigorous bracket ``[lower, upper]`` (``lower >= 0``).

    The lower end is ``lower`` where ``g(lower) > 0``; from ``lower = 0`` the first
    positive decade below ``upper`` (:func:`first_positive`).  Without a positive end
    the root is reported as ``lower``; with ``g(upper) >= 0`` as ``upper``; else
    :func:`brent`.  The point is then to be certified (:func:`certify_root`)."""
    start = lower if lower > 0 and g(lower) > 0 else None
    if start is None and lower == 0:
        start = first_positive(g, upper)
    if start is None:
        return lower
    if g(upper) >= 0:
        return upper
    return brent(g, start, upper)


@dataclass
class CertifiedRoot(Result):
    """A root with ``error`` a bound on ``|value - root|`` (``inf``: not certified), valid
    as long as the evaluations' error bars hold; ``converged``: ``error <= rtol value``;
    ``iterations`` (also ``evaluations``) the evaluations spent."""

    error: float = field(default=math.inf, kw_only=True)
    error_kind: str = field(default="bound", kw_only=True)

    evaluations = alias("iterations", "Evaluations of the function (the iterations).")


def certify_root(residual: Callable[[float], Estimate], x: float, lower: float, upper: float, *,
                 rtol: float, evaluations: int = 0, at_most: float = math.inf,
                 hint: str = "", no_root: str = "") -> CertifiedRoot:
    """Certify the point ``x`` as a root of a decreasing ``g`` inside the rigorous bracket
    ``[lower, upper]``; ``residual(x)`` is ``g(x)`` as an :class:`Estimate`.

    The smallest ``w`` (from ``max(err(x), |g(x)|, 4 eps x)``, times
    :data:`CERTIFY_GROWTH` up to :data:`CERTIFY_STEPS` times, while ``w <= x``) with
    ``g(x - w) - err > 0`` and ``g(x + w) + err < 0`` -- or that end beyond the bracket
    -- encloses the root: ``error = min(w, distance to the farther bracket end)``.
    Not certified, the error is that distance.  A point above ``at_most`` (the root is
    known to be at most that) by less than the error is reported as ``at_most``.
    ``evaluations`` counts those spent before; ``hint`` is appended to the message of a
    certified root above ``rtol``, ``no_root`` explains an ``x <= 0`` (no positive
    residual anywhere: error ``upper``).
    """
    count = evaluations

    def at(point):
        nonlocal count
        count += 1
        return residual(point)

    first = at(x)
    residual_at_x = abs(first.value) if math.isfinite(first.value) else math.inf
    if x <= 0:
        return CertifiedRoot(value=0.0, error=upper, converged=False, iterations=count,
                             residual=residual_at_x, method=first.method,
                             message="no positive root resolved" + (f": {no_root}" if no_root
                                                                    else ""))
    w = max(first.error, abs(first.value), 4 * EPS * x, TINY)
    certified = False
    for _ in range(CERTIFY_STEPS):
        below_ok = x - w <= lower
        above_ok = x + w >= upper
        if not below_ok:
            e = at(x - w)
            below_ok = e.value - e.error > 0
        if not above_ok:
            e = at(x + w)
            above_ok = e.value + e.error < 0
        if below_ok and above_ok:
            certified = True
            break
        if w > x:
            break
        w *= CERTIFY_GROWTH
    farther = max(x - lower, upper - x)
    error = min(w, farther) if certified else farther
    if x > at_most and x - at_most <= error:
        x = at_most
    error, x = float(error), float(x)
    converged = bool(certified and error <= rtol * x)
    msg = (f"certified to {error / x:.2g} (relative)" if certified else
           "could not certify the root: the evaluation error exceeds the residual near it")
    if certified and not converged:
        msg += f" > rtol = {rtol:g}" + (f"; {hint}" if hint else "")
    return CertifiedRoot(value=x, error=error, converged=converged, iterations=count,
                         residual=residual_at_x, method=first.method, message=msg)


def tighter_bracket(root: CertifiedRoot, lower: float, upper: float, *, rtol: float,
                    message: str) -> CertifiedRoot:
    """The rigorous bracket ``[lower > 0, upper]`` as the result (midpoint, half-width,
    method ``"bounds"``) where it is tighter than the certified ``root``; else ``root``."""
    half = 0.5 * (upper - lower)
    if lower > 0 and not half >= root.error:
        return CertifiedRoot(value=0.5 * (lower + upper), error=half, converged=half <= rtol * lower,
                             iterations=root.iterations, residual=root.residual,
                             method="bounds", message=message)
    return root


def certified_lower_root(g: Callable[[float], float], g_sure: Callable[[float], float],
                         upper: float) -> float:
    """A rigorous lower bound in ``[0, upper]`` on the root of a decreasing ``g`` known up
    to rounding: ``g_sure`` is ``g`` minus its rounding error (positive only where ``g``
    surely is).

    ``upper`` itself where ``g_sure(upper) >= 0`` (0 for ``upper <= 0``); 0 where the sign
    at ``upper`` is within rounding or no positive decade is found below it
    (:func:`first_positive`); else the Brent root (:func:`brent`) lowered by the first of
    :data:`LOWER_ROOT_SHRINKS` at which ``g_sure > 0`` (the root of a function exact up to
    rounding is exact up to rounding / slope), or the bracket's lower end.
    """
    if upper <= 0 or g_sure(upper) >= 0:
        return max(upper, 0.0)
    if g(upper) >= 0:
        return 0.0
    start = 0.0 if g(0.0) > 0 else first_positive(g_sure, upper)
    if start is None:
        return 0.0
    root = brent(g, start, upper)
    for shrink in LOWER_ROOT_SHRINKS:
        if g_sure(root * (1 - shrink)) > 0:
            return root * (1 - shrink)
    return start
