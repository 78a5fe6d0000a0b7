"""Roots to many digits with mpmath, each confirmed by a second solve.

* :func:`refine_root_mp` -- refine a float64 root with mpmath at ``digits``
  significant digits and confirm it by a second solve at ``2*digits``
  (:class:`PrecisionRoot`).
* :func:`polynomial_roots_mp` -- every root of a polynomial, each to ``digits``
  significant digits relative to itself (``numpy.roots`` refined by Newton, or
  ``mpmath.polyroots`` at escalating precision).

The float64 solvers (Brent, the fixed-point engine) are :mod:`symtheory.core.solvers`,
which re-exports these names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .result import Result, alias


@dataclass
class PrecisionRoot(Result):
    """A root computed at ``digits`` significant digits and confirmed at ``2*digits``:
    ``value`` the mpf at ``digits`` (+ guard) precision, ``value_check`` the one of the
    ``2*digits`` solve; ``error`` their difference (``"estimate"``: the second is far
    more accurate); ``converged`` (also ``confirmed``) when they agree to ``digits``
    (``agreement_digits``); ``iterations`` the evaluations of the function; ``residual``
    ``|f(value)|``."""

    value_check: object = None
    digits: int = 0
    agreement_digits: float = math.nan
    seconds: float = math.nan
    error_kind: str = field(default="estimate", kw_only=True)
    method: str = field(default="secant (mpmath)", kw_only=True)

    confirmed = alias("converged", "The two solves agree to ``digits``.")


def refine_root_mp(f_mp: Callable, x0, *, digits: int, guard: int = 10, x_scale=None,
                   name: str = "root", method: str = "secant") -> PrecisionRoot:
    """Refine a root of ``f_mp`` (an mpmath function of one ``mpf``) from ``x0``.

    Solves at ``digits + guard`` decimal digits (secant from ``x0``), then again at
    ``2*digits + guard`` starting from that value, and reports the number of
    agreeing significant digits.  ``confirmed`` when they agree to ``digits``.

    ``method="secant"``: :func:`_secant_mp`; the second solve starts with the first
    one's last slope, so it needs no second start point, and an iterate is accepted on
    its estimated error (the step times the slope's last relative change), without
    evaluating ``f`` there.  ``residual`` is ``|f|`` at the last point evaluated (one
    step before ``value``).  ``method="findroot"``: ``mpmath.findroot``'s secant from two
    points at each precision and ``f`` evaluated at each root (the earlier path, kept
    as a reference).
    """
    import time

    import mpmath

    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    if method not in ("secant", "findroot"):
        raise ValueError(f"method must be 'secant' or 'findroot', got {method!r}")
    t0 = time.perf_counter()
    calls = 0

    def f_counted(v):
        nonlocal calls
        calls += 1
        return f_mp(v)

    def solve(start, dps):
        """The root at ``dps`` digits and ``|f|`` there."""
        with mpmath.workdps(dps):
            s = mpmath.mpf(start)
            # second secant point at the accuracy of the start (float64: ~1e-13)
            h = abs(s) * mpmath.mpf(10) ** (-13) if s != 0 else mpmath.mpf(10) ** (-20)
            # relative step tolerance a few digits above the working precision
            tol = mpmath.mpf(10) ** (-(dps - guard // 2))
            root = mpmath.findroot(f_counted, (s, s + h), solver="secant", tol=tol,
                                   maxsteps=60, verify=False)
            fval = abs(f_counted(root))
            scale = abs(root) if root != 0 else mpmath.mpf(1)
            if fval > mpmath.mpf(10) ** (-(dps - guard)) * max(scale, 1):
                raise ArithmeticError(f"{name}: secant did not reach |f| small at {dps} digits "
                                      f"(|f|={mpmath.nstr(fval, 5)})")
            return root, fval

    if method == "findroot":
        v1, f1 = solve(x0, digits + guard)
        v2, _ = solve(v1, 2 * digits + guard)
    else:
        v1, f1, slope, change = _secant_mp(f_counted, x0, digits + guard, guard, name=name)
        v2, _, _, _ = _secant_mp(f_counted, v1, 2 * digits + guard, guard, slope=slope,
                                 change=change, name=name)
    with mpmath.workdps(2 * digits + guard):
        diff = abs(v1 - v2)
        scale = abs(v2) if v2 != 0 else mpmath.mpf(1)
        agree = float(-mpmath.log10(diff / scale)) if diff != 0 else float(2 * digits + guard)
    return PrecisionRoot(value=v1, value_check=v2, digits=digits, converged=agree >= digits,
                         agreement_digits=agree, seconds=time.perf_counter() - t0, error=diff,
                         iterations=calls, residual=float(f1),
                         message=f"agrees with the {2 * digits}-digit solve to {agree:.1f} digits")


#: an iterate's error estimate is the secant step times this many times the slope's
#: last relative change (the slope's own error is about the change before it)
SECANT_SAFETY = 10


def _secant_mp(f, start, dps, guard, *, slope=None, change=None, name="root",
               maxsteps=60):
    """Secant iteration at ``dps`` digits from ``start``: ``(root, |f| at the last point
    evaluated, last slope, its last relative change)``.

    Without ``slope`` the second point is ``start (1 + 1e-13)`` (a float64 start).  The
    iterate ``x - f(x)/s`` has error ``~ |step| |1 - f'/s|``; ``|1 - f'/s|`` is estimated by
    the slope's last relative change (unknown: 1) times :data:`SECANT_SAFETY`, and the
    iterate is the root once that is below ``10^-(dps - guard/2)`` relative (the tolerance
    of the earlier ``findroot`` path, which required the step itself below it).
    """
    import mpmath

    with mpmath.workdps(dps):
        tol = mpmath.mpf(10) ** (-(dps - guard // 2))
        x = mpmath.mpf(start)
        fx = f(x)
        if slope is None:
            h = abs(x) * mpmath.mpf(10) ** (-13) if x != 0 else mpmath.mpf(10) ** (-20)
            x1 = x + h
            f1 = f(x1)
            slope, change = (f1 - fx) / (x1 - x), None
            x, fx = x1, f1
        for _ in range(maxsteps):
            if fx == 0:
                return x, abs(fx), slope, change
            if slope == 0 or not mpmath.isfinite(slope):
                raise ArithmeticError(f"{name}: secant slope {slope} at {dps} digits")
            step = fx / slope
            xn = x - step
            scale = abs(xn) if xn != 0 else mpmath.mpf(1)
            factor = 1 if change is None else min(1, SECANT_SAFETY * change)
            if abs(step) * factor <= tol * scale:
                return xn, abs(fx), slope, change
            fn = f(xn)
            sn = (fn - fx) / (xn - x)
            change = abs(sn - slope) / abs(sn) if sn != 0 else mpmath.mpf(1)
            x, fx, slope = xn, fn, sn
        raise ArithmeticError(f"{name}: secant did not converge in {maxsteps} steps at {dps} "
                              f"digits (|f|={mpmath.nstr(abs(fx), 5)})")


def _ldexp_mp(x, e):
    """``x 2^e`` exactly for an mpf or an mpc."""
    import mpmath

    if isinstance(x, mpmath.mpc):
        return mpmath.mpc(mpmath.ldexp(x.real, e), mpmath.ldexp(x.imag, e))
    return mpmath.ldexp(x, e)


#: Newton-refined float64 roots are used when every pair is separated by more than
#: this relative distance (a near-double root goes to polyroots' escalation)
NEWTON_ROOTS_SEPARATION = 1e-6


def _newton_roots_mp(c, digits: int):
    """All ``n`` roots of the (scaled) polynomial ``c`` from ``numpy.roots``, each refined by
    Newton at ``digits + 10`` digits to a last step below ``10^-(digits + 3)`` relative to
    itself; ``None`` unless all ``n`` converge to roots separated by more than
    :data:`NEWTON_ROOTS_SEPARATION` relative (then they are ``n`` distinct simple roots of
    a degree-``n`` polynomial: all of them, each accurate to about the working
    precision).  The polyroots escalation costs ~100x more per call."""
    import mpmath

    n = len(c) - 1
    try:
        cf = np.array([complex(ck) for ck in c])
    except (OverflowError, ValueError):
        return None
    if not np.all(np.isfinite(cf)) or cf[0] == 0:
        return None
    starts = np.roots(cf)
    if len(starts) != n or not np.all(np.isfinite(starts)):
        return None
    real = all(mpmath.im(ck) == 0 for ck in c)
    out = []
    with mpmath.workdps(digits + 10):
        tol = mpmath.mpf(10) ** (-(digits + 3))
        cc = [+ck for ck in c]
        for z0 in starts:
            # a real polynomial's real root stays on the axis
            z = mpmath.mpf(z0.real) if real and z0.imag == 0 else mpmath.mpc(z0.real, z0.imag)
            for _ in range(60):
                p = dp = 0
                for ck in cc:
                    dp = dp * z + p
                    p = p * z + ck
                if p == 0:
                    break
                if dp == 0:
                    return None
                step = p / dp
                z -= step
                if abs(step) <= tol * abs(z):
                    break
            else:
                return None
            out.append(z)
        for i in range(n):
            for j in range(i):
                if abs(out[i] - out[j]) <= NEWTON_ROOTS_SEPARATION * max(abs(out[i]), abs(out[j])):
                    return None
    return out


def polynomial_roots_mp(coeffs, *, digits: int, max_digits: int | None = None) -> list:
    """All roots of ``sum_k coeffs[k] x^(n-k)`` (leading coefficient first, mpmath
    convention), each simple root to ``digits`` significant digits *relative to itself*
    (a double root is conditioned to about half of them).

    ``mpmath.polyroots`` stops on an absolute step below ``eps`` and its cleanup sets
    any root below ``eps`` to 0, so a root far below the largest one (an inner spectral
    edge at 2.5e-16 next to edges of order 1: 6e-32 in the squared variable) comes back
    as 0 or as noise.  Exact zero roots are split off first (trailing zero
    coefficients); the rest are recomputed at doubled working precision until
    polyroots' error bound is ``10^-digits`` times the smallest root's modulus.
    Raises :class:`ArithmeticError` when ``max_digits`` (default ``8 * digits``) is
    reached first.  Simple, well-separated roots come first from ``numpy.roots`` refined
    by Newton (:func:`_newton_roots_mp`).
    """
    import mpmath

    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    max_digits = 8 * digits if max_digits is None else max_digits
    c = list(coeffs)
    while c and c[0] == 0:
        c = c[1:]
    if not c:
        raise ValueError("the zero polynomial has no isolated roots")
    zeros = 0
    while c and c[-1] == 0:
        c.pop()
        zeros += 1
    if len(c) <= 1:
        return [mpmath.mpf(0)] * zeros
    # x = 2^e t with 2^e ~ the geometric mean of the root moduli (|c_n / c_0|^(1/n)): the
    # stop test is absolute near |t| ~ 1, so roots all of one tiny or huge scale (a linear
    # polynomial with root 1e-250) would otherwise escalate to max_digits; a power of 2
    # scales the coefficients exactly, so escalated precisions still see them unrounded
    n = len(c) - 1
    c = [mpmath.mpmathify(ck) for ck in c]        # real or complex coefficients
    with mpmath.workdps(30):
        e = int(mpmath.nint(mpmath.log(abs(c[-1] / c[0]), 2) / n))
    c = [_ldexp_mp(ck, e * (n - k)) for k, ck in enumerate(c)]
    roots = _newton_roots_mp(c, digits)
    if roots is not None:
        with mpmath.workdps(digits):
            return [mpmath.mpf(0)] * zeros + [+_ldexp_mp(r, e) for r in roots]
    work = digits
    while True:
        with mpmath.workdps(work):
            try:
                roots, err = mpmath.polyroots([+ck for ck in c], maxsteps=400 + 10 * work,
                                              extraprec=4 * work, cleanup=False, error=True)
                smallest = min(abs(r) for r in roots)
                if err <= mpmath.mpf(10) ** (-digits) * smallest:
                    return [mpmath.mpf(0)] * zeros + [+_ldexp_mp(r, e) for r in roots]
                why = (f"error bound {mpmath.nstr(_ldexp_mp(err, e), 3)}, smallest root "
                       f"{mpmath.nstr(_ldexp_mp(smallest, e), 3)}")
            except mpmath.libmp.NoConvergence:
                # (BSR's edges at Delta = 1e12: no convergence at 20 digits, fine at 40)
                why = "polyroots did not converge"
        if work >= max_digits:
            raise ArithmeticError(
                f"polynomial roots not resolved to {digits} digits at {work} digits ({why})")
        work = min(2 * work, max_digits)
