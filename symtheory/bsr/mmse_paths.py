"""``mmse_RIE(beta, rho, D)`` of BSR with an error estimate: which path, and its data.

Every evaluation carries an error estimate (a :class:`~symtheory.core.roots.Estimate`,
``MMSEEstimate``) and the path that produced it:

* Rigorous bounds, at any ``(beta, rho, D)``: the genie who reveals the column space
  of ``S*`` (the ``beta -> infinity`` closed form, bsr.md 9) is a lower bound, the
  linear estimator ``D/(1 + D)`` an upper bound (unit-variance uncorrelated entries).
  Every estimate is intersected with them (:func:`~symtheory.core.roots.within_bounds`).
* The float64 spectral path (bsr.md 3.2, :meth:`BSRTheory.spectral
  <symtheory.bsr.kernels.BSRTheory.spectral>`), up to :data:`BETA_SPECTRAL_MAX`.
* Where that path loses accuracy (``beta`` beyond ~1e6, ``rho`` -> 0, extreme ``D``)
  the value comes from the limit it approaches (``beta = inf``; the low-rank map of
  bsr.md 10; ``alpha_PR D`` as ``D -> 0``; ``D/(1 + D)`` as ``D -> inf``) plus the
  leading correction measured on three anchors where the spectral path holds; their
  disagreement bounds the neglected term.  The four extrapolations are declared here
  as data (:class:`~symtheory.core.extrapolation.Ladder`); the numerics are
  :mod:`symtheory.core.extrapolation`.
* The most accurate candidate wins (:func:`~symtheory.core.roots.best_estimate`).

Convention: ``rho = r/d`` for every ``beta = L/d`` (:func:`~symtheory.bsr.kernels.canonical`).
"""
from __future__ import annotations

import math

from ..core import validate
from ..core.extrapolation import Ladder
from ..core.roots import EPS, Estimate, best_estimate, bounds_estimate, within_bounds
from ..glm.se.spectral import exact_mpf
from .kernels import canonical, check_params, theory

#: an mmse_RIE value with its error estimate and the path used
MMSEEstimate = Estimate

# The float64 spectral path is used up to this beta; beyond it (coefficients of the
# quartic spanning > 20 decades) the 1/beta extrapolation takes over.
BETA_SPECTRAL_MAX = 1e7
# the beta extrapolation is at fixed canonical rho (r over the smaller side); beyond
# this rho the anchors would sit in the r >> min(d, L) regime, another expansion
RHO_MAX_BETA_EXTRAPOLATION = 10.0
# anchors agree on the leading correction C to this relative tolerance, or the
# expansion is not asymptotic there yet and the extrapolation is refused: over two
# decades a drift of 25% is a local exponent within 0.05 of the assumed one (seen:
# C = 54.6, 60.2, 61.6 at beta = 1e5, 1e6, 1e7, a beta^(-1/2) next term), while a
# crossover between regimes changes it by O(1)
ANCHOR_AGREEMENT = 0.25
# an anchor measures C when its error is below this fraction of the correction
ANCHOR_RESOLUTION = 0.1
# an evaluation this accurate (relative) needs no other path (an anchor: ANCHOR_...)
GOOD_RTOL = 1e-13
ANCHOR_GOOD_RTOL = 1e-9

# The extrapolations' ladders of anchors, nearest to the limit first: the nearest three
# consecutive ones that hold and agree are used (core.extrapolation).
_TOLERANCES = dict(agreement=ANCHOR_AGREEMENT, resolution=ANCHOR_RESOLUTION, good_rtol=GOOD_RTOL)
#: beta -> inf at fixed (rho, D): mmse_RIE = mmse_inf + C/beta
BETA_LADDER = Ladder("beta-extrapolation", "beta", tuple(10.0 ** k for k in range(7, 2, -1)),
                     exponent=1, inverse=True, **_TOLERANCES)
#: rho -> 0 at fixed rho D = beta/((1 + beta) h), the low-rank scaling (bsr.md 10):
#: mmse_RIE = low-rank error + C rho; its anchors are not extrapolated in beta either
RHO_LADDER = Ladder("low-rank-extrapolation", "rho", tuple(10.0 ** k for k in range(-6, -1)),
                    exponent=1, excludes=("beta",), **_TOLERANCES)
#: D -> 0: mmse_RIE ~ alpha_PR D (bsr.md 3.4), analytic in D: next term ~ D^2
D_SMALL_LADDER = Ladder("small-D-extrapolation", "D", tuple(10.0 ** k for k in range(-8, -1)),
                        exponent=2, **_TOLERANCES)
#: D -> inf: mmse_RIE = D/(1 + D) - C/D^3 + ... (high noise), in s = 1/D
D_LARGE_LADDER = Ladder("large-D-extrapolation", "D", tuple(10.0 ** k for k in range(9, 1, -1)),
                        exponent=3, inverse=True, **_TOLERANCES)

_ALL_MOVES = frozenset({"beta", "rho", "D"})


def _bounds(rho, D):
    """Rigorous bounds ``(genie, linear)`` on ``mmse_RIE`` (canonical ``rho``), each
    widened by its rounding."""
    lo = theory().mmse_beta_inf(rho, D)
    hi = D / (1.0 + D)
    return lo * (1 - 8 * EPS), hi * (1 + 8 * EPS)


def _estimate(beta, rho, D, moves=_ALL_MOVES) -> Estimate:
    """Best available ``mmse_RIE`` at canonical ``(beta >= 1, rho, D > 0)``.

    ``moves`` are the extrapolations still allowed (each is used at most once along
    a chain of anchors, so the recursion ends)."""
    th = theory()
    lo, hi = _bounds(rho, D)
    if math.isinf(beta):
        return Estimate(value=th.mmse_beta_inf(rho, D), error=4 * EPS * lo, method="beta=inf")
    if hi - lo <= GOOD_RTOL * hi:
        return bounds_estimate(lo, hi)
    candidates = []
    if beta <= BETA_SPECTRAL_MAX:
        est = th.spectral(math.sqrt(beta), rho, D)
        # an anchor's error enters an extrapolation scaled down by (s/s_i)^p
        good = GOOD_RTOL if moves == _ALL_MOVES else ANCHOR_GOOD_RTOL
        if est.error <= good * abs(est.value):
            return within_bounds(est, lo, hi)
        candidates.append(est)
    if "beta" in moves and rho <= RHO_MAX_BETA_EXTRAPOLATION:
        limit = th.mmse_beta_inf(rho, D)
        candidates.append(_along(BETA_LADDER, beta, lambda b: (b, rho, D), lambda s: limit, moves))
    if "rho" in moves and beta <= BETA_SPECTRAL_MAX:
        w = rho * D
        limit = th.low_rank_error(beta / ((1 + beta) * w), beta)
        candidates.append(_along(RHO_LADDER, rho, lambda r: (beta, r, w / r), lambda s: limit,
                                 moves))
    if "D" in moves:
        apr = 1.0 if rho >= 1 else float(th.alpha_pr_kernel(math.sqrt(beta), rho)[0])
        candidates.append(_along(D_SMALL_LADDER, D, lambda d: (beta, rho, d), lambda s: apr * s,
                                 moves))
        candidates.append(_along(D_LARGE_LADDER, D, lambda d: (beta, rho, d),
                                 lambda s: 1 / (1 + s), moves))
    return best_estimate(candidates, lo, hi)


def _along(ladder: Ladder, at, anchor, lead, moves) -> Estimate:
    """``ladder``'s extrapolation to its parameter's value ``at``; ``anchor(value)`` is
    ``(beta, rho, D)`` at an anchor (evaluated by :func:`_estimate` without this
    ladder's moves), ``lead(s)`` the limit."""
    rest = ladder.remaining(moves)
    return ladder.estimate(ladder.s_at(at),
                           lambda s: _estimate(*anchor(ladder.parameter_at(s)), rest), lead)


def mmse_rie_estimate(beta, rho, D) -> Estimate:
    """Return ``mmse_RIE(beta, rho, D)`` with an error estimate and the path used.

    The paths (float64 spectral, extrapolations, rigorous bounds) are those of the
    module docstring; the most accurate wins.  ``rho = r/d`` for every ``beta = L/d``.

    Parameters
    ----------
    beta : float
        Token ratio ``L/d`` (> 0).
    rho : float
        Rank ratio ``r/d`` (> 0).
    D : float
        Noise variance of the denoising problem (> 0).

    Returns
    -------
    Estimate
        ``value``, its ``error`` estimate and the ``method`` (path) used.

    Examples
    --------
    >>> from symtheory import bsr
    >>> est = bsr.mmse_rie_estimate(2.0, 0.5, 0.1)
    >>> round(est.value, 12), est.method, bool(est.error < 1e-13)
    (0.059598519461, 'spectral', True)
    """
    beta, rho, _ = check_params(beta, rho)
    D = validate.real("D", D, low=0, low_open=True)
    beta, rho = canonical(beta, rho)
    return _estimate(beta, rho, D)


def mmse_rie(beta, rho, D) -> float:
    """Return the per-entry MMSE of denoising ``S*`` from ``S* + sqrt(D) Z`` (bsr.md 3.2, 5.2).

    ``D - D^2 beta^(-3/2) [(beta-1)^2 int mu/x^2 + (4 pi^2/3) int mu^3]``, ``mu`` the
    symmetrized singular-value law of the observation at noise ``D``, ``rho = r/d``
    (:func:`mmse_rie_estimate` gives its error estimate).

    Parameters
    ----------
    beta : float
        Token ratio ``L/d`` (> 0).
    rho : float
        Rank ratio ``r/d`` (> 0).
    D : float
        Noise variance (> 0).

    Returns
    -------
    float
        The MMSE per entry of ``S*`` (entries of unit variance).

    Examples
    --------
    >>> from symtheory import bsr
    >>> round(bsr.mmse_rie(2.0, 0.5, 0.1), 12)
    0.059598519461
    """
    return mmse_rie_estimate(beta, rho, D).value


def mmse_rie_mp(beta, rho, D, dps=30, *, rule="edge"):
    """Return :func:`mmse_rie` computed with mpmath at ``dps`` digits: the independent path.

    Quadrature rules tailored to the square-root edges, roots by Newton from the float64
    root, polyroots fallback.
    Float parameters are read by their shortest repr (``0.3`` is 3/10,
    :func:`~symtheory.glm.se.spectral.exact_mpf`).

    Parameters
    ----------
    beta : float
        Token ratio ``L/d`` (> 0; ``inf`` allowed).
    rho : float
        Rank ratio ``r/d`` (> 0).
    D : float
        Noise variance (> 0).
    dps : int, optional
        Decimal digits of the mpmath working precision.
    rule : {"edge", "tanh-sinh"}, optional
        ``"edge"`` (default) the edge-tailored rule; ``"tanh-sinh"`` the earlier
        quadrature (:meth:`AlgebraicSpectralLaw.mp_integrate
        <symtheory.core.spectral.AlgebraicSpectralLaw.mp_integrate>`).

    Returns
    -------
    mpmath.mpf
        The MMSE at ``dps`` digits.

    Examples
    --------
    >>> from symtheory import bsr
    >>> v = bsr.mmse_rie_mp(2.0, 0.5, 0.1, dps=20)
    >>> abs(float(v) - bsr.mmse_rie(2.0, 0.5, 0.1)) < 1e-14
    True
    """
    import mpmath

    with mpmath.workdps(dps):
        beta_m, rho_m, D_m = exact_mpf(beta), exact_mpf(rho), exact_mpf(D)
        if mpmath.isinf(beta_m):
            return theory().mmse_inf.mp(rho_m, D_m)[0]
        if beta_m < 1:
            beta_m, rho_m = 1 / beta_m, rho_m / beta_m
        return theory().mmse_functional.evaluate_mp((mpmath.sqrt(beta_m), rho_m, D_m), dps=dps,
                                                    rule=rule)
