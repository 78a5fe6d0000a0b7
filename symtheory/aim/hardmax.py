"""The hardmax AIM of two tokens (aim.md 3.5, 4.4): its output channel, its state
evolution and its low-rank weak-recovery threshold.

The row hardmax is the ``inv_temp -> inf`` limit of the softmax; its outputs are discrete,
so the channel is the bivariate Gaussian orthant channel
(:class:`~symtheory.glm.factors.orthant.BivariateOrthantChannel`) and there is no perfect
recovery.  The state evolution is the tied prior's scalar spectral SE
(:func:`symtheory.aim.theory.spectral_engine`) with that channel's ``E||g_out||^2``.
"""
from __future__ import annotations

import functools
import math

from ..core import validate
from ..core.solvers import SolverResult
from ..glm.se.spectral import ScalarSpectralSE
from . import model as M
from .theory import spectral_engine


def hardmax_channel(variant: str = "bayes"):
    """The hardmax output channel of two tokens (aim.md 3.5): a bivariate Gaussian
    orthant channel on the projection :func:`model.hardmax_projection`.  ``variant``:
    ``bayes`` (the derivative of ``log Phi_2``, Bayes-optimal) or ``joint-density`` (the
    published code's surrogate: NOT Bayes-optimal, reproduction only)."""
    if variant not in M.HARDMAX_VARIANTS:
        raise validate.ParameterError(f"hardmax variant must be one of "
                                      f"{', '.join(M.HARDMAX_VARIANTS)}, got {variant!r}")
    return _hardmax_channel(variant)


@functools.cache
def _hardmax_channel(variant: str):
    # one channel per variant and process: its derived kernels are built once
    from ..glm.factors.orthant import BivariateOrthantChannel

    return BivariateOrthantChannel(M.hardmax_projection(2), variant)


def hardmax_engine(alpha, rho, variant: str = "bayes") -> ScalarSpectralSE:
    """Scalar spectral SE (aim.md 3.3) with the hardmax channel's ``E||g_out||^2`` by
    quadrature (:meth:`glm.factors.orthant.BivariateOrthantChannel.fisher`)."""
    alpha = validate.real("alpha", alpha, low=0)
    rho = validate.real("rho", rho, low=0, low_open=True)
    return spectral_engine(hardmax_channel(variant).fisher, alpha, rho, "hardmax ")


def hardmax_mse(alpha, rho, variant: str = "bayes", *, xtol: float = 1e-10) -> SolverResult:
    """MSE ``(1/d)||S_hat - S||_F^2`` of the hardmax (T = 2) state evolution at
    ``alpha = n/d^2`` (aim.md 3.5; no perfect recovery for discrete outputs)."""
    eng = hardmax_engine(alpha, rho, variant)
    if eng.alpha == 0:
        return SolverResult(eng.v_max, True, 0, 0.0, "exact", "alpha = 0: nothing learned")
    return eng.solve(xtol=xtol)


def hardmax_weak_recovery_closed_form(variant: str = "bayes", dps: int = 30):
    """aim.md 4.4 closed forms of the low-rank weak-recovery threshold ``alpha_bar_WR``:
    ``3/(8 [2/(pi + 2a) + 1/(pi - 2a)])``, ``a = arcsin(1/3)`` (bayes); for the
    joint-density variant the same sum with ``phi_2(0, 0; +-1/3)`` in place of
    ``phi(0) Phi(0)`` (mpmath at ``dps`` digits; checked against the quadrature path)."""
    import mpmath

    with mpmath.workdps(dps + 10):
        a = mpmath.asin(mpmath.mpf(1) / 3)
        if variant == "bayes":
            return +(3 / (8 * (2 / (mpmath.pi + 2 * a) + 1 / (mpmath.pi - 2 * a))))
        # Z(s) = (pi +- 2a)/(4 pi); dZ = phi_2(0, 0; r) = 1/(2 pi sqrt(8/9)); the quadratic
        # form (s^T C0 s)/3 = (6 +- 2)/3
        dz = 1 / (2 * mpmath.pi * mpmath.sqrt(mpmath.mpf(8) / 9))
        F = 2 * (dz**2 * 8 / 3) / ((mpmath.pi + 2 * a) / (4 * mpmath.pi)) \
            + 2 * (dz**2 * 4 / 3) / ((mpmath.pi - 2 * a) / (4 * mpmath.pi))
        return +(1 / (2 * F))


def hardmax_weak_recovery(variant: str = "bayes", *, digits: int = 30):
    """Weak-recovery threshold ``alpha_bar_WR = 1/(2 E||g_out||^2)`` at ``q = 0``, ``V = 1``
    (aim.md 4.4; ``alpha_bar = n/(d r)``) by the mpmath quadrature path
    (:meth:`glm.factors.orthant.BivariateOrthantChannel.fisher_at_zero_mp`) at ``digits`` and
    ``2 digits``.  Returns ``(value string, agreeing digits, |value - closed form|)``."""
    import mpmath

    digits = validate.integer("digits", digits, low=1)
    ch = hardmax_channel(variant)
    vals = []
    for dps in (digits + 5, 2 * digits + 5):
        with mpmath.workdps(dps):
            vals.append(1 / (2 * ch.fisher_at_zero_mp(1, dps=dps)))
    with mpmath.workdps(2 * digits + 10):
        diff = abs(vals[0] - vals[1])
        agree = float(-mpmath.log10(diff / abs(vals[1]))) if diff else math.inf
        closed = hardmax_weak_recovery_closed_form(variant, dps=2 * digits + 5)
        return (mpmath.nstr(vals[0], digits), round(min(agree, 2 * digits), 1),
                float(abs(vals[1] - closed)))
