"""Scalar state evolution for matrix estimation with a rotation-invariant prior.

Generalized matrix sensing with a rotation-invariant prior on ``S`` and ``K``
isotropic linear measurements per sample (Boncoraglio et al., arXiv:2506.01582, Sec. 3;
Erba et al., arXiv:2410.18858, Sec. 3 has the same form):

    q_hat = c alpha E[ ||g_out(y, sqrt(q) eta, V)||^2 ],    V = Q0 - q,
    q     = Q0 - mmse(1/q_hat),

``mmse(D)`` the denoising MMSE of the prior (e.g.
:class:`symtheory.glm.factors.spectral_priors.SymmetricRIE`), ``c`` the number of
measurements per unit ``alpha`` and parameter (``c = 2`` for a symmetric ``d x d``
matrix sensed ``alpha d^2`` times: ``d^2/2`` parameters).  The engine is written in the
error ``v = Q0 - q`` (no cancellation near perfect recovery):

    v = mmse(1/q_hat(v)),

solved by a bracketed root (:func:`symtheory.core.solvers.positive_fixed_point`), by
damped iteration from the uninformative point, or to any number of digits with mpmath
(:func:`symtheory.core.solvers.refine_root_mp`, confirmed at twice the digits).  An
output channel enters only through ``E||g_out||^2`` as a function of ``(q, V)`` (its
method ``fisher``).
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from ...core import validate
from ...core.solvers import (
    ConvergenceWarning,
    NoBracketError,
    PrecisionRoot,
    SolverResult,
    fixed_point,
    positive_fixed_point,
    refine_root_mp,
)


# ---------------------------------------------------------------------- engine
class ScalarSpectralSE:
    """``v = mmse(1/q_hat(v))``: the scalar spectral state evolution (module docstring).

    Parameters
    ----------
    prior:
        A :class:`~symtheory.glm.factors.spectral_priors.SpectralPrior`: its denoising
        MMSE, ``Q0 = (1/d) Tr S^2`` and the error of the uninformative estimate
        ``v_max = Q0 - mean^2``; ``v`` lives in ``[0, v_max]`` and ``q = Q0 - v``.
    fisher:
        ``(q, V) -> E||g_out||^2`` of the output channel.
    alpha:
        Sample ratio; ``sample_factor * alpha * fisher`` is ``q_hat``.
    """

    def __init__(self, prior, fisher: Callable[[float, float], float], alpha: float, *,
                 sample_factor: float = 2.0, name: str = "spectral SE"):
        self.prior = prior
        self.fisher = fisher
        self.alpha = validate.real("alpha", alpha, low=0)
        self.Q0 = prior.Q0
        self.v_max = prior.v_max
        self.c = float(sample_factor)
        self.name = name

    def qhat(self, v: float) -> float:
        return self.c * self.alpha * self.fisher(self.Q0 - v, v)

    def error_map(self, v: float) -> float:
        """``v -> mmse(1/q_hat(v))`` (``v_max`` when nothing is learned)."""
        return self.prior.error(self.qhat(v))

    def solve(self, *, xtol: float = 1e-14) -> SolverResult:
        """Bracketed root of ``error_map(v) - v`` on ``(0, v_max]``.  Without a positive
        residual down to ``v = 1e-12`` the error is reported as that bound
        (``converged = False``, a :class:`ConvergenceWarning`)."""
        if self.qhat(self.v_max) <= 0:
            return SolverResult(self.v_max, True, 0, 0.0, "exact", "q_hat = 0: nothing learned")
        try:
            return positive_fixed_point(self.error_map, self.v_max, xtol=xtol, name=self.name)
        except NoBracketError as exc:
            floor = 1e-12
            warnings.warn(f"{exc}; reporting the bound v <= {floor}", ConvergenceWarning,
                          stacklevel=2)
            return SolverResult(floor, False, 4, abs(self.error_map(floor) - floor), "bracket",
                                str(exc))

    def iterate(self, *, damping: float = 0.4, tol: float = 1e-12, maxiter: int = 5000,
                start: float | None = None) -> SolverResult:
        """Damped iteration ``v <- error_map(v)`` from the uninformative ``v = v_max``
        (state evolution of arXiv:2506.01582).  Where several fixed points exist this
        reaches the one attracting the uninformative start (the bracketed root may differ)."""
        v0 = self.v_max if start is None else float(start)
        return fixed_point(self.error_map, v0, damping=damping, tol=tol, maxiter=maxiter,
                           project=lambda v: np.clip(v, 0.0, self.v_max), name=self.name)

    def solve_mp(self, mmse_mp: Callable, qhat_mp: Callable, v0: float, *, digits: int):
        """Refine ``v0`` to ``digits`` digits: root of ``mmse_mp(1/qhat_mp(v)) - v`` with
        mpmath functions supplied by the model (parameters converted exactly), confirmed
        by a second solve at ``2 digits`` (:func:`core.solvers.refine_root_mp`)."""
        return refine_root_mp(lambda v: mmse_mp(1 / qhat_mp(v)) - v, v0, digits=digits,
                              name=self.name)


# ---------------------------------------------------------------------- precision
def exact_mpf(value):
    """A parameter as an mpmath number: floats by their shortest repr (``0.3`` means 3/10
    at any precision, not the nearest binary double), ``mpf`` and strings as given."""
    import mpmath

    if isinstance(value, (mpmath.mpf, str)):
        return mpmath.mpf(value)
    return mpmath.mpf(repr(float(value)))


def precision_report(pr: PrecisionRoot, digits: int, *, also: Callable | None = None,
                     name: str = "root"):
    """``(value, also(value), digits_confirmed)``: the refined root (and a derived
    quantity) as strings of ``digits`` significant digits, and the number of digits on
    which the ``2 digits`` solve agrees; a :class:`ConvergenceWarning` when fewer than
    ``digits``."""
    import mpmath

    with mpmath.workdps(2 * digits + 10):
        text = mpmath.nstr(pr.value, digits)
        other = mpmath.nstr(also(pr.value), digits) if also is not None else None
    if not pr.confirmed:
        warnings.warn(f"{name}: {digits}-digit value agrees with the {2 * digits}-digit one "
                      f"to only {pr.agreement_digits:.1f} digits", ConvergenceWarning,
                      stacklevel=2)
    return text, other, round(pr.agreement_digits, 1)


