"""Root and fixed-point solvers shared by every model.

* :func:`find_root` -- bracketed scalar root (Brent, via SciPy) with a result object.
* :func:`positive_fixed_point` -- ``v = err(v)`` on ``(0, hi]`` bracketed from below (the
  scalar monotone strategy: Brent's method, no iteration).
* :func:`check_damping` -- the one meaning of ``damping``: weight of the previous
  iterate, in [0, 1).
* :func:`fixed_point` -- the fixed-point engine for scalars or arrays: damped (optionally
  adaptive) iteration, domain check, Newton polish with a difference Jacobian
  (:func:`difference_jacobian`), stability check and escape along an unstable
  direction; the state evolutions are thin clients of it.
* :func:`fixed_points_from_starts` -- the same from several starts (uninformed,
  informed), flagging distinct fixed points.
* :func:`refine_root_mp`, :func:`polynomial_roots_mp` -- roots to many digits
  (:mod:`symtheory.core.roots_mp`, re-exported here).

Nothing here swallows an exception raised by the user's function; non-convergence
is reported in the result and by a :class:`ConvergenceWarning`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .result import Result
from .roots_mp import PrecisionRoot, polynomial_roots_mp, refine_root_mp  # noqa: F401 (re-exported)
from .validate import ParameterError, real


def check_damping(damping, name: str = "damping") -> float:
    """The one meaning of damping in the package: the weight ``theta`` of the *previous*
    iterate, ``x <- theta x_old + (1 - theta) x_new``, in [0, 1) (0 = undamped).
    Anything else raises :class:`~symtheory.core.validate.ParameterError`."""
    return real(name, damping, low=0, high=1, high_open=True)


class ConvergenceWarning(UserWarning):
    """A solver stopped before reaching its tolerance."""


class NoBracketError(ValueError):
    """The function has the same sign at both ends of the requested bracket."""


@dataclass
class SolverResult(Result):
    """Outcome of a root or fixed-point solve (:class:`~symtheory.core.result.Result`).

    Constructed positionally as ``SolverResult(value, converged, iterations, residual,
    method, message, history)`` (the base's fields are redeclared positional for that).
    ``error``: for :func:`fixed_point` with a Jacobian at the end, the ``truncation``
    (``error_kind="estimate"``), else ``None``.
    """

    value: object = None
    converged: bool = False
    iterations: int = 0
    residual: float = math.nan
    method: str = ""
    message: str = ""
    history: list = field(default_factory=list)
    evaluations: int = 0          # calls of the user's function
    stable: bool | None = None    # fixed_point(stability=True): no Jacobian eigenvalue > 1
    escapes: int = 0              # unstable fixed points left along their unstable direction
    jacobian: np.ndarray | None = field(default=None, repr=False)
    jacobian_reuses: int = 0      # difference Jacobians reused within their probe radius
    # fixed_point with a Jacobian at the end: |x + (I - J)^{-1} (F(x) - x) - value| per
    # coordinate, the distance from the value to the fixed point one Newton step predicts
    truncation: np.ndarray | None = field(default=None, repr=False)
    jacobian_point: np.ndarray | None = field(default=None, repr=False)
    jacobian_radius: float | None = None
    jacobian_seeded: bool = False     # the reported Jacobian is jacobian_start's

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


# Largest real part of a Jacobian eigenvalue still called stable: the Jacobian is a
# forward difference with step ~1e-6, accurate to ~1e-6 relative.
STABILITY_MARGIN = 1e-6
#: a Jacobian handed over from another map (fixed_point's jacobian_start) decides stability
#: only while its largest real eigenvalue is at most this: a verdict near 1 needs the map's
#: own Jacobian (a seed ~1% off moves an eigenvalue by ~0.01)
MARGINAL_EIGENVALUE = 0.9

#: a chord step (Newton with a seeded Jacobian) is kept when it shrinks the residual at
#: least this much; a seed within a few percent of the map's Jacobian contracts by ~0.05
#: per step, so a seed that does worse than halving it is off and is dropped
CHORD_CONTRACTION = 0.5


def difference_jacobian(F: Callable, x, fx=None, *, step: float = 1e-6,
                        domain: Callable | None = None, directions=None,
                        boundary_fraction: float = 0.125, probes: list | None = None):
    """Jacobian ``dF/dx`` of a map of a flat vector by one-sided differences.

    Column ``j`` is the difference quotient along the direction ``d_j`` (columns of
    ``directions``, default the unit vectors): forward ``x + h d_j``, or backward
    ``x - h d_j`` where the forward point is outside ``domain`` (a point on or near the
    boundary of the domain gets one-sided differences into it).

    Next to the boundary the step follows the distance to it: where the boundary lies
    within ``step / boundary_fraction`` along ``+d_j``, its distance ``t`` is found by
    bisection on ``domain`` and ``h = boundary_fraction * t`` (not below rounding, 1e-13
    ``|x|``).  A map singular at its boundary -- an overlap map at perfect recovery,
    a function of ``log(rho - Q)`` -- varies on the scale ``t`` there, so a fixed step
    comparable to ``t`` reads a secant, not the slope (skip-100 SE at ``1 - Q22 =
    1.5e-6``: the 1e-6 forward step read ``dF22/dQ22 = 0.935`` against the local 0.8085,
    and the Jacobian eigenvalue 1.07 against 0.96).  A smooth map should pass a small
    ``boundary_fraction`` (1e-3: ~1e-3 relative truncation); a noisy one (a randomized
    rule) needs steps well above its noise and a larger one.  On the boundary (``t``
    below rounding) the backward step ``step`` is used.  With ``D`` the matrix of
    directions, ``J = [dF(d_1) ... dF(d_k)] D^{-1}``; directions other than the unit
    vectors let every difference stay inside a domain (e.g. positive semidefinite
    matrices at 0, where no off-diagonal unit step is allowed).  Returns ``None`` if a
    direction leaves the domain both ways.  ``probes``: a list that receives the max-norm
    of each difference taken, ``max|x_probe - x|``.
    """
    if not (0 < boundary_fraction <= 0.5):
        raise ParameterError(f"boundary_fraction must be in (0, 0.5], got {boundary_fraction}")
    x = np.asarray(x, dtype=float).ravel()
    k = x.size
    D = np.eye(k) if directions is None else np.asarray(directions, dtype=float)
    if D.shape != (k, k):
        raise ParameterError(f"directions must be a {k} x {k} matrix, got shape {D.shape}")
    fx = np.asarray(F(x) if fx is None else fx, dtype=float).ravel()
    # rounding: below ~1e-13 |x| a difference of F is mostly rounding error
    floor = 1e-13 * max(1.0, float(np.max(np.abs(x))))
    cols = []
    for j in range(k):
        steps = (step, -step)
        reach = step / boundary_fraction
        if domain is not None and not domain(x + reach * D[:, j]):
            lo, hi = 0.0, reach         # distance to the boundary along +d_j, by bisection
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if domain(x + mid * D[:, j]) else (lo, mid)
            if lo > floor:
                h = max(boundary_fraction * lo, floor)
                steps = (h, -h)
        for h in steps:
            xp = x + h * D[:, j]
            if domain is None or domain(xp):
                # divided by the step actually taken (x + h d is rounded)
                taken = float((xp - x) @ D[:, j]) / float(D[:, j] @ D[:, j])
                if taken == 0.0:
                    continue
                cols.append((np.asarray(F(xp), dtype=float).ravel() - fx) / taken)
                if probes is not None:
                    probes.append(float(np.max(np.abs(xp - x))))
                break
        else:
            return None
    return np.linalg.solve(D.T, np.column_stack(cols).T).T


def _largest_real_eigenvalue(J):
    lam, vecs = np.linalg.eig(J)
    k = int(np.argmax(lam.real))
    return float(lam[k].real), vecs[:, k].real


def fixed_point(F: Callable, x0, *, damping: float = 0.0, adaptive: bool = True,
                tol: float = 1e-10, maxiter: int = 1000, domain: Callable | None = None,
                project: Callable | None = None, newton_below: float = 0.0,
                jacobian_step: float = 1e-6, jacobian_directions=None,
                jacobian_boundary_fraction: float = 0.125, stability: bool = False,
                kick: float = 0.05, max_kicks: int = 3, orientation: Callable | None = None,
                callback: Callable | None = None, name: str = "fixed point",
                keep_history: bool = False, warn: bool = True,
                jacobian_start: tuple | None = None) -> SolverResult:
    """Fixed point of ``x = F(x)`` (scalar or array ``x``): the package's one engine.

    **Damped iteration** ``x <- theta x + (1 - theta) F(x)`` (``damping`` = ``theta``, the
    weight of the previous iterate, in [0, 1)) until ``max|F(x) - x| <= tol (1 + max|x|)``.
    With ``adaptive``, ``theta`` moves towards 1 when the residual grows (oscillation)
    and back towards ``damping`` while it shrinks.  ``project`` (e.g. symmetrization) is
    applied after each step.

    **Domain**: ``domain(x) -> bool`` says where ``F`` is defined.  The start must lie
    in it; a step that leaves it is halved towards the current iterate until it is
    inside; at convergence ``F(x)`` is returned if inside, else ``x`` (``F`` can round
    onto the boundary, e.g. an overlap onto perfect recovery).

    **Newton polish** (``newton_below > 0``; ``inf``: from the start): once the residual is below it, Newton steps
    on ``F(x) - x = 0`` with the Jacobian of :func:`difference_jacobian` (step
    ``jacobian_step``; next to the boundary ``jacobian_boundary_fraction`` of the distance
    to it) (``F`` must be smooth: e.g. a Monte-Carlo map on frozen samples) remove the critical slowing down
    near thresholds.  A step is taken only when the Jacobian has no eigenvalue with real
    part > 1 (Newton would otherwise accelerate towards an *unstable* fixed point, which
    the damped iteration leaves by itself) and when it lowers the residual; a step
    that would leave the domain goes ``NEWTON_BOUNDARY_FRACTION`` (0.99) of the way to
    its boundary instead, so a fixed point *on* the boundary (perfect recovery) is
    approached 100-fold per step rather than geometrically; after a refusal the next
    attempt waits 1, 2, 4, ... iterations.

    **Stability** (``stability=True``): at convergence the Jacobian is computed (one-sided
    differences into the domain, also on its boundary).  An eigenvalue with real part
    > 1 (+ ``STABILITY_MARGIN``) makes the fixed point unstable for every damping (damping
    maps an eigenvalue ``l`` to ``theta + (1 - theta) l``): the iteration restarts from
    ``x + s v`` with ``v`` the eigenvector (max-norm 1), ``s`` in ``kick, kick/4,
    kick/16`` with the sign making ``orientation(v) >= 0`` (default ``sum(v)``), then the
    opposite sign -- the first point inside the domain -- at most ``max_kicks`` times; a
    point within ``kick/16`` of the boundary is kicked away from it by ``sqrt(t kick)``
    (``t`` its distance to the boundary along ``v``), a share of the way on the scale
    the map varies on there, and half the remaining way in ``log t`` to a full kick at
    each further escape.
    ``maxiter`` bounds each run between kicks.

    **Jacobian reuse**: a Jacobian asked for within the smallest difference probe of the
    last one (``max|x' - x| <= h``) is that one (its change is within its own truncation
    error); ``jacobian_reuses`` counts them.  ``jacobian_start = (point, J, radius)`` seeds
    this with a Jacobian known at ``point`` and trusted within ``radius`` (``J`` is 1 x 1 for
    a scalar map): the last one of a map that differs from ``F`` by less than ``F``'s own
    difference Jacobian is accurate, e.g. a state evolution with a randomized quadrature
    on a subset of its samples.  Newton steps then run as a chord method (the fixed point
    is still ``F``'s: the residual test is unchanged); a seed trusted everywhere
    (``radius = inf``: a chord Jacobian) is kept while each step shrinks the residual at
    least :data:`CHORD_CONTRACTION`-fold, and one step that does not drops it (the next
    differences ``F``).  The stability verdict takes the
    seed too unless its largest eigenvalue exceeds :data:`MARGINAL_EIGENVALUE` (then
    ``F`` is differenced), and an escape drops it.  The result says where its
    ``jacobian`` was computed (``jacobian_point``, ``jacobian_radius``) and whether it is
    the seed (``jacobian_seeded``).

    The result reports ``value, converged, iterations, residual, message``,
    ``evaluations`` of ``F``, ``stable`` (``None`` when not checked), ``escapes``, the
    Jacobian at the returned point (flattened coordinates) when computed, and with it
    ``truncation``: the distance from ``value`` to the fixed point predicted by one Newton
    step from the last iterate (the residual tolerance bounds ``|F(x) - x|``, which is
    ``(1 - lambda)`` times that distance along an eigenvalue ``lambda`` of the Jacobian).  ``callback(
    iteration, x, residual)`` sees every iterate.  Non-convergence and an unstable
    result warn (:class:`ConvergenceWarning`) unless ``warn=False``.
    """
    theta0 = check_damping(damping)
    tol = real("tol", tol, low=0.0, low_open=True)
    newton_below = real("newton_below", newton_below, low=0.0, allow_inf=True)
    kick = real("kick", kick, low=0.0, low_open=True)
    # checked here, not at the first Jacobian deep inside the iteration
    jacobian_boundary_fraction = real("jacobian_boundary_fraction", jacobian_boundary_fraction,
                                      low=0.0, low_open=True, high=0.5)
    if int(maxiter) < 1 or int(max_kicks) < 0:
        raise ParameterError(f"maxiter must be >= 1 and max_kicks >= 0, got {maxiter}, {max_kicks}")
    solve = _FixedPointSolve(
        F, x0, domain=domain, project=project, theta0=theta0, adaptive=adaptive, tol=tol,
        maxiter=int(maxiter), newton_below=newton_below, callback=callback,
        keep_history=keep_history, jacobian_step=jacobian_step,
        jacobian_directions=jacobian_directions,
        jacobian_boundary_fraction=jacobian_boundary_fraction,
        jacobian_start=_jacobian_seed(jacobian_start, int(np.size(x0)), name))
    x = np.asarray(x0, dtype=float).ravel().copy()
    if not solve.inside(x):
        raise ParameterError(f"{name}: the start {solve.shaped(x)} is outside the domain of the map")
    solve.iterate_and_escape(x, stability=stability, kick=kick, max_kicks=max_kicks,
                             orientation=orientation)
    result = solve.result()
    if warn and (not result.converged or result.stable is False):
        warnings.warn(f"{name}: {result.message}", ConvergenceWarning, stacklevel=2)
    return result


def _jacobian_seed(jacobian_start, n: int, name: str):
    """``fixed_point``'s ``jacobian_start`` checked and copied: ``(point, J, radius, True)``
    (the last element: it is a seed, not the map's own), or ``None``."""
    if jacobian_start is None:
        return None
    try:
        point, J0, radius = jacobian_start
        point = np.array(point, dtype=float).ravel()
        J0 = np.array(J0, dtype=float).reshape(n, n)     # a copy: never the caller's
        radius = float(radius)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"{name}: jacobian_start must be (point, J, radius) with a "
                             f"{n} x {n} J (1 x 1 for a scalar map): {exc}") from None
    if point.size != n or not (np.all(np.isfinite(point)) and np.all(np.isfinite(J0))
                               and radius >= 0):
        raise ParameterError(f"{name}: jacobian_start must be a finite point of {n} "
                             f"coordinates, a finite {n} x {n} J and a radius in [0, inf] "
                             "(inf: a chord Jacobian)")
    return (point, J0, radius, True)


class _FixedPointSolve:
    """One call of :func:`fixed_point`: the map on flat float vectors (its evaluations
    counted, its domain, its difference Jacobian and the reuse of it), the damped
    (+ Newton) runs, the escapes from unstable fixed points, and the result."""

    def __init__(self, F, x0, *, domain, project, theta0, adaptive, tol, maxiter, newton_below,
                 callback, keep_history, jacobian_step, jacobian_directions,
                 jacobian_boundary_fraction, jacobian_start):
        self.F, self.domain, self.project = F, domain, project
        self.shape = np.shape(x0)
        self.theta0, self.adaptive, self.tol, self.maxiter = theta0, adaptive, tol, maxiter
        self.newton_below, self.callback, self.keep_history = newton_below, callback, keep_history
        self.jacobian_step, self.jacobian_directions = jacobian_step, jacobian_directions
        self.jacobian_boundary_fraction = jacobian_boundary_fraction
        self.last_jacobian = jacobian_start   # (point, J, reuse radius, seeded)
        self.evaluations, self.reuses = 0, 0
        self.history = []

    # ------------------------------------------------------------------ the map
    def shaped(self, v):
        return float(v[0]) if self.shape == () else v.reshape(self.shape)

    def Fv(self, v):
        self.evaluations += 1
        return np.asarray(self.F(self.shaped(v)), dtype=float).ravel()

    def inside(self, v):
        return self.domain is None or bool(self.domain(self.shaped(v)))

    def jacobian(self, v, fv, verdict=False):
        # A difference Jacobian is exact only to its truncation error, O(h F''); at a point
        # closer to the last one than its smallest probe (|x' - x| <= h) the change of the
        # Jacobian, O(|x' - x| F''), is within that error, so the last one is reused: the
        # stability check right after a Newton step (a step of ~ the residual) costs no
        # map evaluations (each is a full pass over the frozen samples of an SE).  A seeded
        # one (jacobian_start: another map's) also decides stability, unless its largest
        # eigenvalue is above MARGINAL_EIGENVALUE: then the verdict is this map's own
        last = self.last_jacobian
        if last is not None and float(np.max(np.abs(v - last[0]))) <= last[2] and not (
                verdict and last[3] and _largest_real_eigenvalue(last[1])[0] > MARGINAL_EIGENVALUE):
            self.reuses += 1
            return last[1]
        probes = []
        J = difference_jacobian(self.Fv, v, fv, step=self.jacobian_step,
                                domain=None if self.domain is None else self.inside,
                                directions=self.jacobian_directions,
                                boundary_fraction=self.jacobian_boundary_fraction, probes=probes)
        self.last_jacobian = None if J is None else (v.copy(), J, min(probes, default=0.0), False)
        return J

    # ------------------------------------------------------------------ the iteration
    def run(self, x):
        """One damped (+ Newton) run; returns (status, x, F(x), residual, iterations)."""
        theta, prev_res, wait, skip = self.theta0, np.inf, 0, 1
        fx = self.Fv(x)
        res = np.inf
        for it in range(1, self.maxiter + 1):
            if not np.all(np.isfinite(fx)):
                return "non-finite", x, fx, np.inf, it
            res = float(np.max(np.abs(fx - x)))
            if self.keep_history:
                self.history.append(_out(self.shaped(x)))
            if self.callback is not None:
                self.callback(it, self.shaped(x), res)
            if res <= self.tol * (1.0 + float(np.max(np.abs(x)))):
                return "converged", x, fx, res, it
            step = None
            if 0 < res < self.newton_below:
                if wait > 0:
                    wait -= 1
                else:
                    last = self.last_jacobian
                    chord = last is not None and last[3] and math.isinf(last[2])
                    # a seed trusted everywhere (another map's Jacobian, radius inf) makes
                    # this a chord step: it must contract by CHORD_CONTRACTION, else the
                    # seed is dropped and the next attempt differences F itself
                    step = _newton_step(self.Fv, x, fx, res, self.jacobian, self.inside,
                                        self.project, self.shaped,
                                        accept=CHORD_CONTRACTION if chord else 1.0)
                    if step is None and chord:
                        self.last_jacobian, wait, skip = None, 0, 1
                    else:
                        wait, skip = (0, 1) if step is not None else (skip, 2 * skip)
            if step is None:
                if self.adaptive:
                    theta = (min(0.5 * (1.0 + theta), 0.95) if res > prev_res
                             else max(self.theta0, 0.9 * theta))
                step = self.damped_step(x, fx, theta)
                if step is None:
                    return "left the domain", x, fx, res, it
            prev_res = res
            x, fx = step
        return "not converged", x, fx, res, self.maxiter

    def damped_step(self, x, fx, theta):
        """``(x_new, F(x_new))`` of the damped step, halved towards ``x`` until it is
        inside the domain; ``None`` if 60 halvings do not get it there."""
        xn = theta * x + (1.0 - theta) * fx
        if self.project is not None:
            xn = np.asarray(self.project(self.shaped(xn)), dtype=float).ravel()
        for _ in range(60):
            if self.inside(xn):
                return xn, self.Fv(xn)
            xn = x + 0.5 * (xn - x)
        return None

    def iterate_and_escape(self, x, *, stability, kick, max_kicks, orientation):
        """Runs until a run ends without convergence, or converges to a fixed point whose
        stability is not asked, not checkable, stable, or cannot (or may no more) be left
        along its unstable direction (:func:`_escape`)."""
        self.total, self.escapes, self.left = 0, 0, []
        self.stable, self.note = None, ""
        while True:
            self.status, x, fx, self.res, its = self.run(x)
            self.total += its
            self.J = None         # the Jacobian reported is the one at the returned point
            if self.status != "converged" or not stability:
                break
            self.J = self.jacobian(x, fx, verdict=True)
            if self.J is None:
                self.note = "; stability not checked (a difference step leaves the domain both ways)"
                break
            lam, v = _largest_real_eigenvalue(self.J)
            self.stable = lam <= 1.0 + STABILITY_MARGIN
            if self.stable:
                break
            xk = None if self.escapes >= max_kicks else _escape(x, v, kick, self.inside,
                                                                orientation, self.escapes)
            if xk is None:
                self.note = (f"; UNSTABLE fixed point (Jacobian eigenvalue {lam:.6g} > 1): "
                             + (f"still unstable after {self.escapes} escapes"
                                if self.escapes >= max_kicks
                                else "no escape direction inside the domain"))
                break
            self.escapes += 1
            self.left.append(lam)
            x = xk
            if self.last_jacobian is not None and self.last_jacobian[3]:
                self.last_jacobian = None     # an escape differences the map itself again
        self.x, self.fx = x, fx

    def message(self) -> str:
        total, res = self.total, self.res
        if self.status == "converged":
            msg = f"converged in {total} iterations (residual {res:.2e})"
        elif self.status == "not converged":
            msg = f"not converged after {total} iterations (residual {res:.2e})"
        else:
            msg = f"stopped after {total} iterations: map {self.status} (residual {res:.2e})"
        if self.escapes:
            msg += (f"; left {self.escapes} unstable fixed point(s) along their unstable "
                    f"direction (largest Jacobian eigenvalue "
                    f"{', '.join(f'{v:.4g}' for v in self.left)})")
        return msg + self.note

    def result(self) -> SolverResult:
        x, fx, J = self.x, self.fx, self.J
        converged = self.status == "converged"
        value = fx if converged and self.inside(fx) else x
        truncation = None
        if J is not None:
            # the residual tolerance bounds |F(x) - x|, not the distance to the fixed point:
            # that is (I - J)^{-1} (F(x) - x), large where J has an eigenvalue near 1 (next to
            # a fixed point on the domain's boundary the iterate approaches it geometrically)
            try:
                truncation = np.abs(x + np.linalg.solve(np.eye(x.size) - J, fx - x) - value)
            except np.linalg.LinAlgError:
                truncation = np.full(x.size, np.inf)
        result = SolverResult(
            _out(self.shaped(value)), converged, self.total, self.res, "fixed-point",
            self.message(), self.history, evaluations=self.evaluations, stable=self.stable,
            escapes=self.escapes, jacobian=J, jacobian_reuses=self.reuses, truncation=truncation,
            error=None if truncation is None else _out(self.shaped(truncation)),
            error_kind="" if truncation is None else "estimate")
        last = self.last_jacobian
        if J is not None and last is not None and last[1] is J:
            # where the reported Jacobian was computed and how far it holds: what a later
            # solve may take as its jacobian_start (a seed keeps its own point, so it does
            # not drift from stage to stage); seeded: it is the seed, not this map's
            result.jacobian_point, result.jacobian_radius = last[0], last[2]
            result.jacobian_seeded = last[3]
        return result


#: share of the way to the domain's boundary taken by a Newton step that would leave it
NEWTON_BOUNDARY_FRACTION = 0.99


def _newton_step(Fv, x, fx, res, jacobian, inside, project, shaped, accept=1.0):
    """``(x_new, F(x_new))`` of a Newton step on ``F(x) - x``, or ``None`` (see
    :func:`fixed_point`: refused towards an unstable point, outside the domain, or
    when it does not lower the residual below ``accept`` times ``res``)."""
    J = jacobian(x, fx)
    if J is None or _largest_real_eigenvalue(J)[0] > 1.0 + STABILITY_MARGIN:
        return None
    try:
        xn = x + np.linalg.solve(J - np.eye(x.size), x - fx)
    except np.linalg.LinAlgError:
        return None
    if project is not None:
        xn = np.asarray(project(shaped(xn)), dtype=float).ravel()
    if not inside(xn):
        # a fixed point on the domain's boundary (perfect recovery Q -> rho) is approached
        # geometrically, often with a ratio near 1; Newton aims at it or just beyond it:
        # go NEWTON_BOUNDARY_FRACTION of the way to the boundary instead (the
        # fraction-to-the-boundary rule of interior-point methods, Nocedal & Wright
        # Eq. 19.9), shrinking the distance 1/(1 - fraction)-fold per step
        inner, outer = 0.0, 1.0
        for _ in range(50):           # bisection on the cheap domain test, no F call
            mid = 0.5 * (inner + outer)
            inner, outer = (mid, outer) if inside(x + mid * (xn - x)) else (inner, mid)
        if inner == 0.0:
            return None
        xn = x + NEWTON_BOUNDARY_FRACTION * inner * (xn - x)
        if project is not None:
            xn = np.asarray(project(shaped(xn)), dtype=float).ravel()
        if not inside(xn):
            return None
    fn = Fv(xn)
    if np.all(np.isfinite(fn)) and float(np.max(np.abs(fn - xn))) < accept * res:
        return xn, fn
    return None


def _escape(x, v, kick, inside, orientation, level=0):
    """First of ``x + s v`` inside the domain (``fixed_point``'s escape rule), or ``None``.

    When not even ``kick/16`` fits along the preferred sign, the point lies next to the
    boundary, where a map such as an overlap map near perfect recovery varies on the
    scale of the distance ``t`` to it (a function of ``log t``).  The kick the other way
    is then measured on that scale: ``t^(1/2^(level+1)) kick^(1 - 1/2^(level+1))`` --
    ``sqrt(t kick)``, half-way in ``log t`` to a full kick, at the first escape, and half
    of the remaining way at each further one (``level`` = escapes so far: a kick too
    small to leave the tolerance re-converges at once).  A full kick threw the SE at
    skip 100, alpha = 1 from ``t = 5e-8`` back to ``0.05``, and 25 map evaluations back
    to ``5e-6``."""
    v = v / np.max(np.abs(v))
    sign = 1.0 if (np.sum(v) if orientation is None else orientation(v)) >= 0 else -1.0
    for scale in (kick, kick / 4, kick / 16):
        xk = x + sign * scale * v
        if inside(xk):
            return xk
    # distance to the boundary along sign * v, bisected in log t from 1e-300 to kick/16
    lo, hi = math.log(1e-300), math.log(kick / 16)
    if inside(x + sign * 1e-300 * v):
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if inside(x + sign * math.exp(mid) * v) else (lo, mid)
        share = 0.5 ** (level + 1)
        scales = (math.exp(share * lo + (1 - share) * math.log(kick)), kick, kick / 4, kick / 16)
    else:
        scales = (kick, kick / 4, kick / 16)
    for scale in scales:
        xk = x - sign * scale * v
        if inside(xk) and not np.array_equal(xk, x):
            return xk
    return None


def _out(x):
    return float(x) if np.ndim(x) == 0 else np.array(x, dtype=float)


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
