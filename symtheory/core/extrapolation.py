"""Extrapolation to a limit from anchors on a ladder of parameter values, with an error bar.

Where a direct evaluation loses accuracy near a limit (a parameter -> 0 or -> inf), the
value is the limit's plus its leading correction,

    f(s) = lead(s) + C s^p + o(s^p),    s -> 0,

with ``C`` measured at anchors ``s_i`` further from the limit, where the direct path
holds (Richardson's idea with the exponent ``p`` known from the expansion).  The
anchors sit on a ladder of decades; three consecutive ones are used, and the
extrapolation is *refused* (infinite error) unless they show the expansion is
asymptotic there: at least two resolve ``C`` (their error below ``resolution`` of the
correction) and those agree within ``agreement`` -- a crossover between regimes can
mimic the exponent at one anchor, not over three.  The neglected terms are bounded by
twice the anchors' disagreement times ``s^p`` plus their errors scaled by ``(s/s_i)^p``.

A model declares each extrapolation as data, a :class:`Ladder` (which parameter, its
values, the exponent, the tolerances), and supplies the limit ``lead`` and the
evaluation at an anchor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .roots import EPS, Estimate
from .validate import ParameterError

#: consecutive anchors per extrapolation: two to measure C and see it agree, a third to
#: check the others against it
ANCHORS_USED = 3


@dataclass(frozen=True)
class Ladder:
    """An extrapolation declared as data (module docstring).

    ``parameter`` is extrapolated to 0 (``s = parameter``) or, with ``inverse``, to
    infinity (``s = 1/parameter``) from anchors at ``values`` (of the parameter, nearest
    to the limit first, decades apart); ``exponent`` is ``p``; ``agreement`` and
    ``resolution`` are the tolerances of :func:`extrapolate`; a triple of anchors whose
    result is accurate to ``good_rtol`` (relative) ends the search.  ``excludes`` names
    other parameters not extrapolated along at its anchors (a model evaluating an anchor
    may extrapolate along other ladders; each is taken at most once along a chain, so the
    recursion ends).
    """

    method: str
    parameter: str
    values: tuple
    exponent: float
    agreement: float
    resolution: float
    good_rtol: float
    inverse: bool = False
    excludes: tuple = ()

    def __post_init__(self):
        s = self.s_values
        if len(s) < ANCHORS_USED or not all(0 < a < b for a, b in zip(s, s[1:])):
            raise ParameterError(
                f"{self.method}: values must be >= {ANCHORS_USED} positive parameter values, "
                f"nearest to the limit ({'inf' if self.inverse else '0'}) first, got {self.values}")
        for name in ("exponent", "agreement", "resolution", "good_rtol"):
            if not getattr(self, name) > 0:
                raise ParameterError(f"{self.method}: {name} must be > 0, "
                                     f"got {getattr(self, name)}")

    @property
    def s_values(self) -> tuple:
        """The anchors in the variable ``s`` (``-> 0`` at the limit)."""
        return tuple(1 / v for v in self.values) if self.inverse else tuple(self.values)

    def parameter_at(self, s):
        """The parameter at ``s`` (``1/s`` for an ``inverse`` ladder)."""
        return 1 / s if self.inverse else s

    def s_at(self, parameter):
        """``s`` at a value of the parameter."""
        return 1 / parameter if self.inverse else parameter

    def remaining(self, moves: frozenset) -> frozenset:
        """The parameters still extrapolated along at its anchors: ``moves`` less this
        ladder's parameter and its ``excludes``."""
        return moves - {self.parameter, *self.excludes}

    def estimate(self, s, evaluate: Callable[[float], Estimate],
                 lead: Callable[[float], float]) -> Estimate:
        """The extrapolation to ``s`` from three consecutive anchors beyond it that hold and
        agree (:func:`extrapolate`; ``evaluate(s_i)`` is the model at an anchor): the
        triple with the smallest error bound, from the nearest outwards until one is
        accurate to ``good_rtol``; refused (infinite error) if none holds."""
        anchors = []
        best = Estimate(value=math.nan, error=math.inf, method=self.method,
                        message="fewer than three anchors")
        for si in self.s_values:
            if not si > s:
                continue
            anchors.append((si, evaluate(si)))
            if len(anchors) >= ANCHORS_USED:
                est = extrapolate(self, s, anchors[-1:-ANCHORS_USED - 1:-1], lead)
                if est.error < best.error or not math.isfinite(best.error):
                    best = est
                if best.error <= self.good_rtol * abs(best.value):
                    break
        return best


def extrapolate(ladder: Ladder, s, anchors, lead: Callable[[float], float]) -> Estimate:
    """``f(s) = lead(s) + C s^p + o(s^p)`` as ``s -> 0``, from anchor estimates.

    ``anchors`` are ``(s_i, estimate_i)`` ordered towards the limit (``s_0 > s_1 > ...
    > s``, a decade apart).  ``C`` is read off at each.  At least two anchors must
    resolve it (error below ``ladder.resolution`` of the correction: an anchor whose
    error hides the correction measures nothing), the resolved values must agree
    within ``ladder.agreement``, and the others within their errors -- otherwise the
    expansion is not asymptotic there (a crossover can mimic the exponent ``p`` at one
    point, not over the anchors) and the extrapolation is refused (infinite error).
    The nearest resolved ``C`` is used; twice the largest disagreement times ``s^p``,
    plus the anchors' errors scaled by ``(s/s_i)^p``, bounds the neglected terms.
    """
    p, method = ladder.exponent, ladder.method
    cs, dcs = [], []
    for si, ei in anchors:
        if not math.isfinite(ei.error):
            return Estimate(value=math.nan, error=math.inf, method=method,
                            message=f"anchor at {si:g} not accurate")
        cs.append((ei.value - lead(si)) / si**p)
        dcs.append(ei.error / si**p)
    resolved = [i for i, (ci, dc) in enumerate(zip(cs, dcs))
                if dc <= ladder.resolution * abs(ci)]
    if len(resolved) < 2:
        return Estimate(value=math.nan, error=math.inf, method=method,
                        message="anchors do not resolve the correction")
    c = cs[resolved[-1]]
    spread = max(abs(cs[i] - c) for i in resolved)
    noise = 2 * sum(dcs[i] for i in resolved)
    if spread > ladder.agreement * abs(c) + noise or any(
            abs(ci - c) > spread + 2 * dc + noise for ci, dc in zip(cs, dcs)):
        return Estimate(value=math.nan, error=math.inf, method=method,
                        message=f"anchors disagree (C = {', '.join(f'{ci:.6g}' for ci in cs)}): "
                                f"not asymptotic")
    sp_ = s**p
    value = lead(s) + c * sp_
    error = sp_ * (2 * spread + noise) + 8 * EPS * abs(value)
    return Estimate(value=value, error=error, method=method)
