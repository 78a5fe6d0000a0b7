"""Root and fixed-point solvers shared by every model.

* :func:`find_root` -- bracketed scalar root (Brent, via SciPy) with a result object.
* :func:`positive_fixed_point` -- ``v = err(v)`` on ``(0, hi]`` bracketed from below.
* :func:`fixed_point` -- damped fixed-point iteration ``x <- F(x)`` for scalars or
  arrays, with adaptive damping, iteration history and a convergence report.
* :func:`fixed_points_from_starts` -- the same from several starts (uninformed,
  informed), flagging distinct fixed points.
* :func:`refine_root_mp` -- refine a float64 root with mpmath at ``digits``
  significant digits and confirm it by a second solve at ``2*digits``.

Nothing here swallows an exception raised by the user's function; non-convergence
is reported in the result and by a :class:`ConvergenceWarning`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class ConvergenceWarning(UserWarning):
    """A solver stopped before reaching its tolerance."""


class NoBracketError(ValueError):
    """The function has the same sign at both ends of the requested bracket."""


@dataclass
class SolverResult:
    """Outcome of a root or fixed-point solve."""

    value: object
    converged: bool
    iterations: int
    residual: float
    method: str
    message: str = ""
    history: list = field(default_factory=list)

    def __repr__(self):
        v = self.value if np.ndim(self.value) == 0 else np.asarray(self.value).tolist()
        return (f"SolverResult(value={v}, converged={self.converged}, iterations={self.iterations}, "
                f"residual={self.residual:.3g}, method={self.method!r})")


def find_root(f: Callable[[float], float], lo: float, hi: float, *, xtol=1e-14, rtol=1e-12,
              maxiter=200, f_lo=None, f_hi=None, name="root") -> SolverResult:
    """Root of ``f`` in ``[lo, hi]`` by Brent's method.

    Raises :class:`NoBracketError` (with the two values) if ``f(lo)`` and ``f(hi)``
    have the same sign.
    """
    from scipy.optimize import brentq

    f_lo = f(lo) if f_lo is None else f_lo
    f_hi = f(hi) if f_hi is None else f_hi
    if not (np.isfinite(f_lo) and np.isfinite(f_hi)):
        raise ValueError(f"{name}: function not finite at the bracket ends "
                         f"f({lo})={f_lo}, f({hi})={f_hi}")
    if f_lo == 0:
        return SolverResult(lo, True, 0, 0.0, "brent", "root at lower end")
    if f_hi == 0:
        return SolverResult(hi, True, 0, 0.0, "brent", "root at upper end")
    if np.sign(f_lo) == np.sign(f_hi):
        raise NoBracketError(f"{name}: no sign change on [{lo}, {hi}]: "
                             f"f(lo)={f_lo:.6g}, f(hi)={f_hi:.6g}")
    x, r = brentq(f, lo, hi, xtol=xtol, rtol=rtol, maxiter=maxiter, full_output=True,
                  disp=False)
    residual = abs(f(x))
    if not r.converged:
        warnings.warn(f"{name}: Brent did not converge in {maxiter} iterations "
                      f"({r.flag}); residual {residual:.3g}", ConvergenceWarning, stacklevel=2)
    return SolverResult(x, bool(r.converged), int(r.function_calls), residual, "brent", r.flag)


def positive_fixed_point(err: Callable[[float], float], hi: float = 1.0, *,
                         lows=(1e-3, 1e-6, 1e-9, 1e-12), xtol=1e-14, rtol=1e-15,
                         name: str = "fixed point") -> SolverResult:
    """Root ``v* in (0, hi]`` of ``v = err(v)`` for an error map with ``err(v) > v`` as
    ``v -> 0`` and ``err(hi) <= hi`` (state evolutions written in the error ``v = 1 - q``,
    where ``err(v)/v`` tends to a ratio > 1 below a perfect-recovery threshold).

    The positive side of ``f(v) = err(v) - v`` is found by moving the lower end down
    through ``lows``; Brent's method then solves on the bracket.  Raises
    :class:`NoBracketError` if ``f`` stays non-positive down to ``lows[-1]``.
    """
    def f(v):
        return err(v) - v

    upper, f_upper = hi, None
    for cand in lows:
        if cand >= upper:
            continue
        val = f(cand)
        if val > 0:
            return find_root(f, cand, upper, f_lo=val, f_hi=f_upper, xtol=xtol, rtol=rtol,
                             name=name)
        upper, f_upper = cand, val
    raise NoBracketError(f"{name}: no positive residual err(v) - v down to v = {lows[-1]}")


def fixed_point(F: Callable, x0, *, damping: float = 0.0, adaptive: bool = True,
                tol: float = 1e-10, maxiter: int = 1000, project: Callable | None = None,
                name: str = "fixed point", keep_history: bool = False,
                warn: bool = True) -> SolverResult:
    """Iterate ``x <- (1 - theta) F(x) + theta x`` until ``|F(x) - x| <= tol (1 + |x|)``.

    ``damping`` is the initial ``theta`` in [0, 1).  With ``adaptive``, ``theta``
    moves towards 1 when the residual grows (oscillation) and back towards its
    initial value while it shrinks.  ``project`` (e.g. symmetrization, clipping to
    a domain) is applied after each step.  Works for scalars and arrays.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    x = np.asarray(x0, dtype=float).copy()
    theta = damping
    prev_res = np.inf
    history = []
    res = np.inf
    for it in range(1, maxiter + 1):
        fx = np.asarray(F(x), dtype=float)
        if not np.all(np.isfinite(fx)):
            msg = f"{name}: map returned non-finite values at iteration {it}"
            if warn:
                warnings.warn(msg, ConvergenceWarning, stacklevel=2)
            return SolverResult(_out(x), False, it, np.inf, "fixed-point", msg, history)
        diff = fx - x
        res = float(np.max(np.abs(diff)))
        if keep_history:
            history.append(_out(x))
        if res <= tol * (1.0 + float(np.max(np.abs(x)))):
            return SolverResult(_out(fx), True, it, res, "fixed-point", "converged", history)
        if adaptive:
            if res > prev_res:
                theta = min(0.5 * (1.0 + theta), 0.95)
            else:
                theta = max(damping, 0.9 * theta)
        prev_res = res
        x = (1.0 - theta) * fx + theta * x
        if project is not None:
            x = np.asarray(project(x), dtype=float)
    msg = f"{name}: not converged after {maxiter} iterations (residual {res:.3g})"
    if warn:
        warnings.warn(msg, ConvergenceWarning, stacklevel=2)
    return SolverResult(_out(x), False, maxiter, res, "fixed-point", msg, history)


def _out(x):
    return float(x) if np.ndim(x) == 0 else x.copy()


def fixed_points_from_starts(F: Callable, starts: dict, *, distinct_tol=1e-6, **kw) -> dict:
    """Run :func:`fixed_point` from each named start.

    Returns ``{name: SolverResult}`` plus the key ``'distinct'`` (bool): whether the
    converged fixed points differ by more than ``distinct_tol``.
    """
    out = {k: fixed_point(F, x0, name=f"fixed point from {k} start", **kw)
           for k, x0 in starts.items()}
    vals = [np.asarray(r.value) for r in out.values() if r.converged]
    distinct = any(np.max(np.abs(v - vals[0])) > distinct_tol for v in vals[1:])
    out["distinct"] = distinct
    return out


@dataclass
class PrecisionRoot:
    """A root computed at ``digits`` significant digits and confirmed at ``2*digits``."""

    value: object          # mpf at `digits` (+ guard) precision
    value_check: object    # mpf from the 2*digits solve
    digits: int
    confirmed: bool
    agreement_digits: float
    seconds: float


def refine_root_mp(f_mp: Callable, x0, *, digits: int, guard: int = 10, x_scale=None,
                   name: str = "root") -> PrecisionRoot:
    """Refine a root of ``f_mp`` (an mpmath function of one ``mpf``) from ``x0``.

    Solves at ``digits + guard`` decimal digits (secant from ``x0``), then again at
    ``2*digits + guard`` starting from that value, and reports the number of
    agreeing significant digits.  ``confirmed`` when they agree to ``digits``.
    """
    import time

    import mpmath

    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    t0 = time.perf_counter()

    def solve(start, dps):
        with mpmath.workdps(dps):
            s = mpmath.mpf(start)
            # second secant point at the accuracy of the start (float64: ~1e-13)
            h = abs(s) * mpmath.mpf(10) ** (-13) if s != 0 else mpmath.mpf(10) ** (-20)
            # relative step tolerance a few digits above the working precision
            tol = mpmath.mpf(10) ** (-(dps - guard // 2))
            root = mpmath.findroot(f_mp, (s, s + h), solver="secant", tol=tol, maxsteps=60,
                                   verify=False)
            fval = abs(f_mp(root))
            scale = abs(root) if root != 0 else mpmath.mpf(1)
            if fval > mpmath.mpf(10) ** (-(dps - guard)) * max(scale, 1):
                raise ArithmeticError(f"{name}: secant did not reach |f| small at {dps} digits "
                                      f"(|f|={mpmath.nstr(fval, 5)})")
            return root

    v1 = solve(x0, digits + guard)
    v2 = solve(v1, 2 * digits + guard)
    with mpmath.workdps(2 * digits + guard):
        diff = abs(v1 - v2)
        scale = abs(v2) if v2 != 0 else mpmath.mpf(1)
        agree = float(-mpmath.log10(diff / scale)) if diff != 0 else float(2 * digits + guard)
    return PrecisionRoot(v1, v2, digits, agree >= digits, agree, time.perf_counter() - t0)
