"""Phase transitions of a scalar GLM: weak recovery, the algorithmic (spinodal) and the
information-theoretic thresholds, from the curve of its state-evolution fixed points.

Every fixed point of ``V = mmse_P(alpha Psi(V))`` lies on ``alpha(V) =
mmse_P^{-1}(V) / Psi(V)`` (:class:`~symtheory.glm.se.scalar_glm.ScalarGlmSE`).  Along it
``d alpha/d V`` has the sign of ``T'(V) - 1`` (``T`` the SE map at fixed ``alpha``), so the
pieces where ``alpha`` decreases with ``V`` are the stable branches and the local
extrema of ``alpha(V)`` are the spinodals (Krzakala, Mezard, Sausset, Sun & Zdeborova, J.
Stat. Mech. (2012) P08009 for the picture):

``alpha_c``
    when the channel learns nothing at ``q = mean^2`` (``Psi(v_max) = 0``), the trivial
    fixed point loses stability at ``alpha_c = lim_{V -> v_max} alpha(V)``
    (Richardson-extrapolated from three points next to ``v_max``);
``alpha_alg``
    the end of the uninformed branch, where AMP from an uninformed start leaves it: the
    first local maximum of ``alpha(V)`` coming from ``v_max``, or ``alpha_c`` when the
    branch born there is unstable (a subcritical transition);
``alpha_IT``
    where the free entropies of the uninformed and the informed branch cross (the
    informed branch is the stable piece next to ``V = 0``, or perfect recovery ``V = 0``
    itself when the curve reaches it unstably, with ``phi = psi_c(inf) + alpha
    psi_out(0+)``).

Each threshold carries an error bar: the change of its value when the quadrature
tolerance is tightened from ``1e-10`` to ``1e-12`` (a bound on the looser value's error,
reported for the tighter one) plus the root and extremum tolerances.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...core.result import Result, alias
from ..se.scalar_glm import CHANNEL_RTOL_FLOOR, ScalarGlmSE

#: the solvers' relative tolerances in alpha (far below the quadrature's effect)
ROOT_RTOL = 1e-13


@dataclass
class PhaseTransition(Result):
    """A threshold: ``value`` (also ``alpha``), its ``error`` bar, ``kind`` (``alpha_c``,
    ``alpha_alg``, ``alpha_IT``), the error ``V`` of the fixed point where it occurs,
    ``digits_confirmed`` (``None``: float64 only), ``mp_values`` (the mpmath values at
    ``precision`` and twice it, when confirmed) and, at a spinodal, ``map_slope``: the SE
    map's derivative ``T'(V)`` there, 1 where the Jacobian's eigenvalue crosses 1 (a check
    of the extremum of ``alpha(V)``, computed independently of it)."""

    kind: str = ""
    V: float = math.nan
    map_slope: float = math.nan
    digits_confirmed: float | None = None
    mp_values: tuple | None = None
    extrapolation_error: float = 0.0
    error_kind: str = field(default="estimate", kw_only=True)

    alpha = alias("value", "The threshold.")

    def row(self):
        return {"kind": self.kind, "alpha": self.value, "error": self.error,
                "method": self.method, "map_slope": self.map_slope,
                "digits_confirmed": math.nan if self.digits_confirmed is None
                else self.digits_confirmed}


@dataclass
class PhaseReport(Result):
    """All transitions found and the fixed-point curve they come from: ``value`` the list
    of :class:`PhaseTransition`, ``curve`` the sampled points (``V``, ``q``, ``alpha``,
    ``phi``, ``psi_out``, ``stable``), ``perfect_recovery`` whether the informed branch
    is ``V = 0``."""

    curve: list = field(default_factory=list)
    perfect_recovery: bool = False
    trivial: bool = False

    transitions = alias("value", "The thresholds found.")


class _Curve:
    """``alpha(V)`` and the free entropy along it, each point computed once."""

    def __init__(self, se: ScalarGlmSE):
        self.se, self.cache = se, {}

    def at(self, V):
        if V not in self.cache:
            # the nearest point computed so far brackets the inverse prior map
            near = min(self.cache, key=lambda v: abs(math.log(v / V)), default=None)
            guess = self.cache[near]["qhat"] if near is not None else None
            self.cache[V] = self.se.point(V, guess or None)
        return self.cache[V]

    def alpha(self, V):
        return self.at(V)["alpha"]

    def extremum(self, lo, hi, sign):
        """The extremum of ``alpha`` (max: ``sign = 1``) for ``V`` in ``[lo, hi]``, by
        bounded Brent in ``log V``."""
        from scipy.optimize import minimize_scalar

        res = minimize_scalar(lambda t: -sign * self.alpha(math.exp(t)),
                              bounds=(math.log(lo), math.log(hi)), method="bounded",
                              options={"xatol": 1e-10})
        V = math.exp(res.x)
        return self.alpha(V), V

    def solve_V(self, alpha, lo, hi):
        """``V`` in ``[lo, hi]`` with ``alpha(V) = alpha`` on a monotone piece."""
        from scipy.optimize import brentq

        t = brentq(lambda t: self.alpha(math.exp(t)) - alpha, math.log(lo), math.log(hi),
                   xtol=1e-14, rtol=ROOT_RTOL)
        return math.exp(t)


def _grid(v_max, V_min, n):
    near = v_max * (1 - np.logspace(-4, math.log10(0.5), n // 3))
    far = v_max * np.logspace(math.log10(0.5), math.log10(V_min / v_max), n - n // 3)[1:]
    return np.concatenate([near, far])


def phase_transitions(se: ScalarGlmSE, *, V_min: float = 1e-30, points: int = 90,
                      check_rtol: float = 1e-10, precision: int | None = None) -> PhaseReport:
    """Return the phase transitions of a scalar GLM: ``alpha_c``, ``alpha_alg`` and ``alpha_IT``.

    The transitions of the module docstring for ``se``, each with its error bar (the
    same computation at ``check_rtol``); with ``precision`` (digits) each is confirmed in
    mpmath at that many and twice as many digits
    (:func:`~symtheory.glm.thresholds.phases_mp.confirm_digits`).

    Parameters
    ----------
    se : ScalarGlmSE
        The state evolution.
    V_min : float, optional
        Smallest error sampled on the fixed-point curve.
    points : int, optional
        Points of the curve ``alpha(V)`` scanned for extrema and crossings.
    check_rtol : float, optional
        Quadrature tolerance of the check run that sets the error bars.
    precision : int, optional
        Digits of an mpmath confirmation of each transition.

    Returns
    -------
    PhaseReport
        ``transitions`` (a list of ``PhaseTransition``: ``kind``, ``alpha``, ``error``),
        the sampled ``curve`` and ``perfect_recovery``.

    Examples
    --------
    >>> from symtheory.glm import ScalarGlmSE, sign_channel
    >>> from symtheory.glm.factors.separable_prior import rademacher
    >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
    >>> from symtheory.glm import phase_transitions
    >>> report = phase_transitions(se, points=30)
    >>> [(t.kind, round(t.alpha, 4)) for t in report.transitions]
    [('alpha_alg', 1.4926), ('alpha_IT', 1.2447)]
    """
    if not (0 < V_min < 1e-3 * se.v_max):
        raise ValueError(f"V_min must be in (0, 1e-3 v_max), got {V_min}")
    main = _transitions(_Curve(se), V_min, points)
    loose = _transitions(_Curve(ScalarGlmSE(se.channel, se.prior, se.params, rtol=check_rtol)),
                         V_min, points)
    found = {t.kind: t for t in main["transitions"]}
    # the relative accuracy of every alpha(V) and phi the thresholds come from: the
    # quadrature's tolerance (the channel's is floored at CHANNEL_RTOL_FLOOR)
    quad = max(se.rtol, CHANNEL_RTOL_FLOOR)
    for t in loose["transitions"]:
        if t.kind in found:
            ref = found[t.kind]
            ref.error = (abs(ref.value - t.value) + max(quad, ROOT_RTOL) * abs(ref.value)
                         + ref.extrapolation_error)
            ref.message += (f"; error: the quadrature's relative accuracy {quad:g}, plus the "
                            f"change against rtol {check_rtol:g} ({t.value!r})"
                            + (f" and the extrapolation to V = 0 ({ref.extrapolation_error:.2g})"
                               if ref.extrapolation_error else ""))
    for t in main["transitions"]:
        if t.error is None:
            t.message += "; not found at the looser quadrature tolerance: no error bar"
            t.error = math.inf
    report = PhaseReport(value=main["transitions"], curve=main["curve"], converged=all(
        math.isfinite(t.error) for t in main["transitions"]),
        perfect_recovery=main["perfect_recovery"], trivial=main["trivial"],
        method=f"fixed-point curve alpha(V), {points} points from v_max to {V_min:g}",
        message=main["message"])
    if precision is not None:
        from .phases_mp import confirm_digits
        confirm_digits(se, report, precision)
    return report


def _transitions(curve: _Curve, V_min, n) -> dict:
    se = curve.se
    Vs, pts, msgs = _grid(se.v_max, V_min, n), [], []
    for V in Vs:
        try:
            pts.append(curve.at(float(V)))
        except ArithmeticError as exc:
            # next to perfect recovery a channel's front may be sharper than float64
            # resolves: the curve ends at the last point computed to its tolerance
            msgs.append(f"the curve stops at V = {pts[-1]['V']:.3g} ({exc})")
            break
    Vs = Vs[:len(pts)]
    alphas = np.array([p["alpha"] for p in pts])
    trivial = se.channel_terms(se.v_max)[0][0] <= 1e-14
    out = []
    # extrema along decreasing V (the grid's order): sign changes of the increments
    inc = np.diff(alphas)
    extrema = []
    for k in range(1, len(inc)):
        if inc[k - 1] > 0 >= inc[k] or inc[k - 1] < 0 <= inc[k]:
            sign = 1 if inc[k - 1] > 0 else -1
            a, V = curve.extremum(float(Vs[k + 1]), float(Vs[k - 1]), sign)
            extrema.append((sign, a, V))
    # stable where alpha grows as V falls (the grid runs towards small V)
    stable = [bool(inc[min(k, len(inc) - 1)] > 0) for k in range(len(pts))]
    for p, st in zip(pts, stable):
        p["stable"] = st
    alpha_c, alpha_c_err = _alpha_c(curve) if trivial else (None, 0.0)
    if alpha_c is not None:
        out.append(PhaseTransition(kind="alpha_c", value=alpha_c, V=se.v_max, converged=True,
                                   extrapolation_error=alpha_c_err,
                                   method="alpha(V) at V -> v_max, Richardson-extrapolated",
                                   message="the trivial fixed point loses stability"))
    subcritical = trivial and inc[0] < 0
    first_max = next(((a, V) for sign, a, V in extrema if sign > 0), None)
    if subcritical:
        alpha_alg, V_alg = alpha_c, se.v_max
        msgs.append("the branch born at alpha_c is unstable: a first-order transition")
    elif first_max is not None:
        alpha_alg, V_alg = first_max
    else:
        msgs.append("alpha(V) has no spinodal: the uninformed branch reaches the informed "
                    "one continuously (no first-order transition)")
        return {"transitions": out, "curve": pts, "perfect_recovery": False,
                "trivial": trivial, "message": "; ".join(msgs)}
    out.append(PhaseTransition(kind="alpha_alg", value=alpha_alg, V=V_alg, converged=True,
                               map_slope=se.map_slope(alpha_alg, V_alg),
                               method="spinodal: end of the uninformed branch (extremum of "
                                      "alpha(V), bounded Brent in log V)",
                               message="AMP from an uninformed start leaves its branch here"))
    it = _alpha_it(curve, extrema, alpha_alg, V_alg, alpha_c, subcritical, inc, pts, msgs)
    if it is not None:
        out.append(it[0])
    return {"transitions": out, "curve": pts, "perfect_recovery": bool(it and it[1]),
            "trivial": trivial, "message": "; ".join(msgs)}


def _alpha_c(curve: _Curve):
    """``(lim_{V -> v_max} alpha(V), error)``: the quadratic in ``u = 1 - V/v_max``
    through ``u = h, 2h, 4h`` evaluated at 0, for ``h = 1e-5`` and ``2e-5``; the error is
    their difference plus the noise it amplifies (``5 x`` the quadrature's accuracy).
    (At ``h = 1e-3`` the truncation, O(h^3), was 8e-8 relative on a symmetric door.)"""
    v_max = curve.se.v_max

    def extrapolate(h):
        a = [curve.alpha(v_max * (1 - k * h)) for k in (1, 2, 4)]
        return (8 * a[0] - 6 * a[1] + a[2]) / 3

    a1, a2 = extrapolate(1e-5), extrapolate(2e-5)
    quad = max(curve.se.rtol, CHANNEL_RTOL_FLOOR)
    return a1, abs(a1 - a2) + 5 * quad * abs(a1)


def _alpha_it(curve, extrema, alpha_alg, V_alg, alpha_c, subcritical, inc, pts, msgs):
    from scipy.optimize import brentq

    se = curve.se
    informed_pr = inc[-1] < 0     # alpha(V) -> small as V -> 0: the curve there is unstable
    last_min = next(((a, V) for sign, a, V in reversed(extrema) if sign < 0), None)
    if informed_pr:
        # V = 0: q_hat = inf, where psi_c has its limit (reached at 1e8 to rounding for a
        # discrete prior), and psi_out its limit at V -> 0, extrapolated from the curve's
        # two smallest V as psi_out(V) = psi_0 + c sqrt(V) (a front smoothed over sqrt(V))
        psi_c_inf = se.prior.error_terms(1e8)[0][1]
        (V1, p1), (V2, p2) = [(p["V"], p["psi_out"]) for p in pts[-2:]]
        r1, r2 = math.sqrt(V1), math.sqrt(V2)
        # exactly 0 for a deterministic channel (Z_out -> 0 or 1); else extrapolated
        psi0 = 0.0 if se.deterministic else (p2 * r1 - p1 * r2) / (r1 - r2)

        def phi_informed(alpha):
            return psi_c_inf + alpha * psi0
        alpha_lo = 0.0
        desc = ("perfect recovery V = 0 (psi_out(0) = 0: y a function of z)" if
                se.deterministic else "perfect recovery V = 0 (psi_out(0) extrapolated)")
    elif last_min is not None:
        alpha_lo, V_lo = last_min

        V_min = pts[-1]["V"]

        def phi_informed(alpha):
            return curve.at(curve.solve_V(alpha, V_min, V_lo))["phi"]
        desc = f"the informed branch (spinodal at alpha {alpha_lo:.6g})"
    else:
        msgs.append("no informed branch found")
        return None

    def phi_uninformed(alpha):
        # the trivial point up to alpha_c (and up to alpha_alg = alpha_c when the branch
        # born there is unstable), then the branch born at alpha_c up to its spinodal
        if alpha_c is not None and (subcritical or alpha <= alpha_c):
            return se.trivial_point(alpha)["phi"]
        return curve.at(curve.solve_V(alpha, V_alg, se.v_max * (1 - 1e-12)))["phi"]

    lo = max(alpha_lo, 1e-9)
    hi = alpha_alg * (1 - 1e-12)
    d_lo, d_hi = phi_informed(lo) - phi_uninformed(lo), phi_informed(hi) - phi_uninformed(hi)
    if not d_lo < 0 < d_hi:
        msgs.append(f"the free entropies do not cross on [{lo:.6g}, {hi:.6g}] "
                    f"(differences {d_lo:.3g}, {d_hi:.3g})")
        return None
    a_it = brentq(lambda a: phi_informed(a) - phi_uninformed(a), lo, hi, xtol=1e-15,
                  rtol=ROOT_RTOL)
    extrapolation = 0.0
    if informed_pr and not se.deterministic:
        # the same crossing with psi_out(V -> 0) taken at the curve's last point instead
        # of extrapolated: the extrapolation's own uncertainty
        def phi_last(alpha):
            return psi_c_inf + alpha * p2
        extrapolation = abs(brentq(lambda a: phi_last(a) - phi_uninformed(a), lo, hi,
                                   xtol=1e-15, rtol=ROOT_RTOL) - a_it)
    return PhaseTransition(kind="alpha_IT", value=a_it, converged=True,
                           extrapolation_error=extrapolation,
                           method="crossing of the free entropies of the uninformed branch and "
                                  f"{desc} (Brent in alpha)",
                           message="above it the informed fixed point is the Bayes-optimal "
                                   "one"), informed_pr
