"""Bayes-optimal theory of BSR: the self-consistent equation and its solutions.

Assembles the symbolic declarations of :mod:`symtheory.bsr.model` with the generic
core (spectral law, linear spectral functional, kernels, solvers).  The fixed point
(bsr.md 3.1) is solved in the variable ``v = 1 - q`` (the MMSE itself, no
cancellation near perfect recovery):

    v = mmse_RIE(beta, rho, (Delta + v)/alpha)

Convention (package notation, docs/theory/README.md): ``rho = r/d`` for every
``beta = L/d``; ``beta < 1`` is the transposed problem ``(1/beta, rho/beta)``
(bsr.md 14.1).

Every evaluation of ``mmse_RIE`` carries an error estimate (:class:`MMSEEstimate`),
and every solution an error bound: ``converged`` means the root is *certified* to
the relative tolerance, not merely that an iteration stopped.

* Rigorous bounds, at any ``(beta, rho, D)``: the genie who reveals the column space
  of ``S*`` (the ``beta -> infinity`` closed form, bsr.md 9) is a lower bound, the
  linear estimator ``D/(1 + D)`` an upper bound (unit-variance uncorrelated entries).
  Their fixed points bracket the solution.
* The float64 spectral path (bsr.md 3.2): ``int mu/x^2 = -G'(0)`` in closed form,
  ``int mu^3`` by quadrature; error from the quadrature, from the drift of the
  computed mass and second moment off their exact values (a wrong support shows
  there), and from the rounding of the cancelling sum.
* Where that path loses accuracy (``beta`` beyond ~1e6, ``rho`` -> 0, extreme ``D``)
  the value comes from the limit it approaches (``beta = inf``; the low-rank map of
  bsr.md 10; ``alpha_PR D`` as ``D -> 0``; ``D/(1 + D)`` as ``D -> inf``) plus the
  leading correction measured on two anchor points where the spectral path holds;
  the disagreement of the two anchors bounds the neglected term.
* The root of the float estimate is certified by the signs of ``err(v) - v`` at
  ``v -+ w`` beyond their error estimates; ``converged`` iff ``w <= rtol v``.
  Otherwise the result says so (``converged=False``) and the mpmath path
  (``precision=``) is the way to more digits.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import sympy as sp

from ..core import validate
from ..core.codegen import Kernel, KernelSet
from ..core.functionals import LinearSpectralFunctional
from ..core.solvers import ConvergenceWarning, positive_fixed_point, refine_root_mp
from ..core.spectral import AlgebraicSpectralLaw
from ..glm.factors.spectral_priors import RectangularRIE
from . import model as M

_THEORY = None

EPS = float(np.finfo(float).eps)
SMALLEST_NORMAL = float(np.finfo(float).tiny)
TINY = 1e-320  # absolute step tolerance of Brent: far below any normal root
#: default relative tolerance of a converged ``mmse`` (bound on |mmse - exact| / mmse)
MMSE_RTOL = 1e-8
#: alpha >= alpha_PR (1 - ALPHA_PR_RTOL) counts as perfect recovery: rounding only
#: (a computed alpha_PR can land ulps off the exact value: in float64 0.2 * 1.8 is one
#: ulp above 0.36; bsr.md 4.5)
ALPHA_PR_RTOL = 16 * EPS

# The float64 spectral path is used up to this beta; beyond it (coefficients of the
# quartic spanning > 20 decades) the 1/beta extrapolation takes over.
BETA_SPECTRAL_MAX = 1e7
# Ladders of anchors for the extrapolations, nearest to the limit first: the nearest
# three consecutive ones that hold and agree are used (module docstring).
BETA_LADDER = tuple(10.0 ** k for k in range(7, 2, -1))
RHO_LADDER = tuple(10.0 ** k for k in range(-6, -1))
D_SMALL_LADDER = tuple(10.0 ** k for k in range(-8, -1))
D_LARGE_LADDER = tuple(10.0 ** k for k in range(9, 1, -1))
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
# safety factors of the spectral error estimate (validated against mpmath in
# tests/test_bsr_edges.py): drift of mass/moment -> relative error of int mu^3,
# and units of rounding of the cancelling sum D - c1 I1 - c2 I2
DRIFT_FACTOR = 8.0
ROUNDING_FACTOR = 64.0
# relative accuracy assumed of a quadrature value at best (its integrand comes from
# quartic roots): the change between tanh-sinh levels can fall below it
QUADRATURE_FLOOR = 256 * EPS
# beyond this drift of the mass or second moment the density is wrong, not inaccurate
DRIFT_MAX = 1e-7


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


@dataclass
class MMSEEstimate:
    """``mmse_RIE`` at one point with an estimate of its error and the path used."""

    value: float
    error: float
    method: str
    note: str = ""


class BSRTheory:
    """Kernels and solvers for the BSR Bayes-optimal theory (built once per process)."""

    def __init__(self):
        law = M.observation_law()
        self.law = AlgebraicSpectralLaw(law["P"], law["G"], law["z"], M.LAW_PARAMS,
                                        law["edges"], even=True, name="bsr_gram")
        expr, integrals = M.rie_mmse()
        self.mmse_functional = LinearSpectralFunctional(self.law, "rie_mmse", expr, integrals,
                                                        M.x, M.mu, M.H)
        binf = M.beta_infinity()
        lr = M.low_rank()
        self.kernels = KernelSet()
        k = self.kernels.add
        self.mmse_inf = k(Kernel("bsr_mmse_beta_inf", (M.rho, M.D), [binf["mmse"]],
                                 doc="beta -> infinity denoising MMSE E[D kappa/(kappa + D)]"))
        self.mmse_inf_quadratic = k(Kernel(
            "bsr_beta_inf_y_quadratic", (M.rho, M.D), list(binf["y_quadratic"]),
            doc="quadratic for y = E[kappa/(kappa + D)] (mmse_inf = D y, smaller root)"))
        self.mmse_inf_large_D = k(Kernel(
            "bsr_beta_inf_mmse_large_D", (M.rho, binf["eps"]), list(binf["mmse_quadratic_large_D"]),
            doc="quadratic for mmse_inf in eps = 1/D (smaller root; D > 1, no overflow)"))
        shifted = binf["y_shifted"]
        self.mmse_inf_shifted = {
            "one": k(Kernel("bsr_beta_inf_y_minus_one", (M.rho, M.D), list(shifted[sp.Integer(1)]),
                            doc="quadratic for y - 1 (smaller root; rho >= 1, small D)")),
            "rho": k(Kernel("bsr_beta_inf_y_minus_rho", (M.rho, M.D), list(shifted[M.rho]),
                            doc="quadratic for y - rho (smaller root; rho < 1, small D)"))}
        # the ridge error is the largest root of this quadratic, by the cancellation-free
        # root formula; the closed form M.ridge_mse() (checked against it in the tests)
        # is not compiled: at Delta = 0 it is 1 - alpha by a difference of O(1) terms,
        # which loses ~8 digits at alpha = 1 - 1e-5
        self.ridge_quadratic = k(Kernel("bsr_ridge_quadratic", (M.alpha, M.delta),
                                        list(M.ridge_quadratic()),
                                        doc="ridge fixed point as a quadratic (largest root)"))
        self.origin_quadratic = k(Kernel("bsr_origin_slope_quadratic", M.LAW_PARAMS,
                                         list(M.origin_slope()["quadratic"]),
                                         doc="quadratic for G'(0) = -int mu/x^2 (negative root)"))
        self.alpha_pr_kernel = k(Kernel("bsr_alpha_pr", (M.t, M.rho), [M.alpha_pr_formula()],
                                        doc="perfect-recovery threshold rho(1+beta-rho)/beta"))
        self.low_rank_v = k(Kernel("bsr_low_rank_v", (M.h, M.t), [lr["v_of_h_stable"]],
                                   doc="low-rank error 1 - q(h) on the nontrivial branch"))
        self.low_rank_weak = k(Kernel("bsr_low_rank_alpha_weak", (M.t, M.delta), [lr["alpha_weak"]],
                                      doc="low-rank weak-recovery threshold"))
        self.low_rank_strong = float(lr["alpha_strong"])
        self.low_rank_q_inf = k(Kernel("bsr_low_rank_q_beta_inf", (M.alpha_lr, M.delta),
                                       [lr["q_beta_inf"]],
                                       doc="low-rank beta -> infinity overlap (closed form)"))
        # the spectral path: int mu/x^2 in closed form, the other integrals by
        # quadrature together with the mass and second moment (exact values derived
        # from the large-z expansion of the law) as a check of the computed density
        fun = self.mmse_functional
        self.origin_index = fun.integrands.index(M.mu / M.x**2)
        self.quadrature_indices = [i for i in range(len(fun.integrands)) if i != self.origin_index]
        self.moments = k(Kernel("bsr_gram_mass_second_moment", M.LAW_PARAMS,
                                list(M.law_moments()),
                                doc="exact mass and second moment of the symmetrized law"))
        self.spectral_kernel = self.law.integrand_kernel(
            "rie_mmse_checked", [fun.integrands[i] for i in self.quadrature_indices]
            + [M.mu, M.mu * M.x**2], M.x, M.mu, M.H)
        self.kernels.add(self.law.coeff_kernel)
        self.kernels.add(self.law.edge_kernel)
        self.kernels.add(fun.value_kernel)
        self.kernels.add(fun.coeff_kernel)
        self.kernels.add(fun.integrand_kernel)
        self.kernels.add(self.spectral_kernel)
        self.rie = RectangularRIE("bsr", self.law, M.rie_denoiser(), M.x, M.H, M.LAW_PARAMS)
        self.kernels.add(self.rie.kernel)

    # ---------------------------------------------------------------- closed forms
    def mmse_beta_inf(self, rho, D) -> float:
        """``E[D kappa/(kappa + D)]`` (bsr.md 9) as ``D y``, ``y`` the smaller root of
        its quadratic; for ``rho D`` small, ``y = min(1, rho) + u`` from the shifted
        quadratic (``y -> min(1, rho)`` as ``D -> 0``); for ``D > 1`` the quadratic for
        ``D y`` itself in ``1/D``, whose coefficients stay O(1) where ``D rho`` overflows."""
        if D == 0:
            return 0.0
        if D > 1:
            return quadratic_roots(*self.mmse_inf_large_D(rho, 1.0 / D))[0]
        if rho * D >= 1e-2:
            return D * quadratic_roots(*self.mmse_inf_quadratic(rho, D))[0]
        y0, key = (1.0, "one") if rho >= 1 else (rho, "rho")
        return D * (y0 + quadratic_roots(*self.mmse_inf_shifted[key](rho, D))[0])

    def ridge_error(self, alpha, delta) -> float:
        """Largest root of the ridge quadratic (bsr.md 8).  It is ``1 - F`` with the
        overlap map ``F`` in ``[0, 1)``, so in ``[0, 1]``; the cancellation-free root
        can leave that interval by an ulp of rounding only, which is removed."""
        root = quadratic_roots(*self.ridge_quadratic(alpha, delta))[1]
        return min(max(root, 0.0), 1.0)

    def origin_integral(self, t, rho, D) -> float:
        """``int mu/x^2 = -G'(0)``: minus the negative root of the derived quadratic."""
        return -quadratic_roots(*self.origin_quadratic(t, rho, D))[0]

    def low_rank_error(self, h, beta) -> float:
        """Low-rank denoising error ``1 - q_u q_v`` at SNR ``h`` (bsr.md 10): 1 below
        the weak-recovery point ``h (1 + beta) = sqrt(beta)``; beyond ``h (1 + beta) =
        1e140`` (where ``h^2`` terms overflow) its leading term ``c/h``, ``c`` the
        derived ``lim h (1 - q)`` (relative error ~ 1/h)."""
        t = math.sqrt(beta)
        x = h * (1 + beta)
        if not x > t:
            return 1.0
        if x > 1e140:
            return self.low_rank_strong / h
        return float(self.low_rank_v(h, t)[0])

    # ---------------------------------------------------------------- spectral path
    def spectral(self, t, rho, D) -> MMSEEstimate:
        """``mmse_RIE`` by the float64 spectral path with its error estimate."""
        fun = self.mmse_functional
        params = (t, rho, D)
        try:
            with np.errstate(all="ignore"):
                coeffs = fun.coeff_kernel(*params)
                res = self.law.integrate(self.spectral_kernel, *params, rtol=1e-12, warn=False)
                exact_mass, exact_m2 = self.moments(*params)
                ints = np.zeros(len(coeffs))
                errs = np.zeros(len(coeffs))
                for j, i in enumerate(self.quadrature_indices):
                    ints[i], errs[i] = res.values[j], res.errors[j]
                if coeffs[self.origin_index] != 0:
                    ints[self.origin_index] = self.origin_integral(*params)
                value = float(fun.value_kernel(*params, *ints)[0])
        except (ValueError, ZeroDivisionError, ArithmeticError, np.linalg.LinAlgError) as exc:
            return MMSEEstimate(math.nan, math.inf, "spectral", f"spectral path failed: {exc}")
        n = len(self.quadrature_indices)
        mass, m2 = res.values[n], res.values[n + 1]
        drift = max(abs(mass / exact_mass - 1.0), abs(m2 / exact_m2 - 1.0), EPS)
        if not drift <= DRIFT_MAX:
            # a bulk lost or misplaced: its share of int mu^3 is not proportional to
            # what was computed (a narrow bulk has a large mu), no estimate holds
            return MMSEEstimate(math.nan, math.inf, "spectral",
                                f"spectral path lost mass: relative drift {drift:.2g}")
        terms = np.abs(coeffs * ints)
        error = sum(abs(coeffs[i]) * (errs[i] + (DRIFT_FACTOR * drift + QUADRATURE_FLOOR)
                                      * abs(ints[i]))
                    for i in self.quadrature_indices)
        error += ROUNDING_FACTOR * EPS * (abs(D) + float(terms.sum()) + abs(value))
        if not (math.isfinite(value) and math.isfinite(error)):
            return MMSEEstimate(math.nan, math.inf, "spectral", "spectral path not finite")
        return MMSEEstimate(value, error, "spectral")


def theory() -> BSRTheory:
    global _THEORY
    if _THEORY is None:
        _THEORY = BSRTheory()
    return _THEORY


# --------------------------------------------------------------------- parameters
def check_params(beta, rho, delta=0.0):
    """Validate (beta, rho, Delta); returns floats (beta may be inf)."""
    beta = validate.real("beta", beta, low=0, low_open=True, allow_inf=True)
    rho = validate.real("rho", rho, low=0, low_open=True)
    delta = validate.real("delta", delta, low=0)
    return beta, rho, delta


def canonical(beta: float, rho: float):
    """Map to ``beta >= 1`` by transposition (bsr.md 14.1).

    With ``rho = r/d``: swapping ``d <-> L`` gives ``beta' = d/L = 1/beta`` and
    ``rho' = r/L = rho/beta``; ``alpha = n/(dL)`` is unchanged.
    """
    if beta < 1.0:
        return 1.0 / beta, rho / beta
    return beta, rho


def alpha_pr(beta, rho) -> float:
    """Perfect-recovery threshold ``min(1, rho(1 + beta - rho)/beta)`` (bsr.md 7),
    ``rho = r/d``; the formula is the same in both orientations."""
    beta, rho, _ = check_params(beta, rho)
    beta, rho = canonical(beta, rho)
    if rho >= 1.0:
        return 1.0
    if math.isinf(beta):
        return rho
    return float(theory().alpha_pr_kernel(math.sqrt(beta), rho)[0])


def ridge_mse(alpha, delta) -> float:
    """Bayes-optimal ridge error (lambda = Delta) on vectorized tokens (bsr.md 8)."""
    alpha = validate.real("alpha", alpha, low=0)
    delta = validate.real("delta", delta, low=0)
    return theory().ridge_error(alpha, delta)


# --------------------------------------------------------------------- mmse_RIE
def _bounds(rho, D):
    """Rigorous bounds ``(genie, linear)`` on ``mmse_RIE`` (canonical ``rho``), each
    widened by its rounding."""
    lo = theory().mmse_beta_inf(rho, D)
    hi = D / (1.0 + D)
    return lo * (1 - 8 * EPS), hi * (1 + 8 * EPS)


def _within_bounds(est: MMSEEstimate, lo, hi) -> MMSEEstimate:
    """Intersect ``value +- error`` with the rigorous bounds ``[lo, hi]``."""
    a, b = max(est.value - est.error, lo), min(est.value + est.error, hi)
    if not (a <= b):  # also catches nan: the estimate contradicts the bounds
        note = f"{est.method} estimate outside the rigorous bounds; bounds used"
        return MMSEEstimate(0.5 * (lo + hi), 0.5 * (hi - lo), "bounds", note)
    if a == est.value - est.error and b == est.value + est.error:
        return est
    return MMSEEstimate(0.5 * (a + b), 0.5 * (b - a), est.method, est.note)


def _extrapolate(s, anchors, lead, p, method) -> MMSEEstimate:
    """``f(s) = lead(s) + C s^p + o(s^p)`` as ``s -> 0``, from anchor estimates.

    ``anchors`` are ``(s_i, estimate_i)`` ordered towards the limit (``s_0 > s_1 > ...
    > s``, a decade apart).  ``C`` is read off at each.  At least two anchors must
    resolve it (error below :data:`ANCHOR_RESOLUTION` of the correction: an anchor whose
    error hides the correction measures nothing), the resolved values must agree
    within :data:`ANCHOR_AGREEMENT`, and the others within their errors -- otherwise
    the expansion is not asymptotic there (a crossover can mimic the exponent ``p`` at
    one point, not over the anchors) and the extrapolation is refused (infinite
    error).  The nearest resolved ``C`` is used; twice the largest disagreement times
    ``s^p``, plus the anchors' errors scaled by ``(s/s_i)^p``, bounds the neglected terms.
    """
    cs, dcs = [], []
    for si, ei in anchors:
        if not math.isfinite(ei.error):
            return MMSEEstimate(math.nan, math.inf, method, f"anchor at {si:g} not accurate")
        cs.append((ei.value - lead(si)) / si**p)
        dcs.append(ei.error / si**p)
    resolved = [i for i, (ci, dc) in enumerate(zip(cs, dcs)) if dc <= ANCHOR_RESOLUTION * abs(ci)]
    if len(resolved) < 2:
        return MMSEEstimate(math.nan, math.inf, method, "anchors do not resolve the correction")
    c = cs[resolved[-1]]
    spread = max(abs(cs[i] - c) for i in resolved)
    noise = 2 * sum(dcs[i] for i in resolved)
    if spread > ANCHOR_AGREEMENT * abs(c) + noise or any(
            abs(ci - c) > spread + 2 * dc + noise for ci, dc in zip(cs, dcs)):
        return MMSEEstimate(math.nan, math.inf, method,
                            f"anchors disagree (C = {', '.join(f'{ci:.6g}' for ci in cs)}): "
                            f"not asymptotic")
    sp_ = s**p
    value = lead(s) + c * sp_
    error = sp_ * (2 * spread + noise) + 8 * EPS * abs(value)
    return MMSEEstimate(value, error, method)


def _ladder(s, ladder, evaluate, lead, p, method) -> MMSEEstimate:
    """Extrapolate to ``s`` from three consecutive anchors of ``ladder`` (values of
    ``s``, nearest to the limit first; those not beyond ``s`` are skipped) that hold
    and agree (:func:`_extrapolate`): the triple with the smallest error bound, from
    the nearest outwards until one is good; refused (infinite error) if none holds."""
    anchors = []
    best = MMSEEstimate(math.nan, math.inf, method, "fewer than three anchors")
    for si in ladder:
        if not si > s:
            continue
        anchors.append((si, evaluate(si)))
        if len(anchors) >= 3:
            est = _extrapolate(s, anchors[-1:-4:-1], lead, p, method)
            if est.error < best.error or not math.isfinite(best.error):
                best = est
            if best.error <= GOOD_RTOL * abs(best.value):
                break
    return best


_ALL_MOVES = frozenset({"beta", "rho", "D"})


def _estimate(beta, rho, D, moves=_ALL_MOVES) -> MMSEEstimate:
    """Best available ``mmse_RIE`` at canonical ``(beta >= 1, rho, D > 0)``.

    ``moves`` are the extrapolations still allowed (each is used at most once along
    a chain of anchors, so the recursion ends)."""
    th = theory()
    lo, hi = _bounds(rho, D)
    if math.isinf(beta):
        return MMSEEstimate(th.mmse_beta_inf(rho, D), 4 * EPS * lo, "beta=inf")
    if hi - lo <= GOOD_RTOL * hi:
        return MMSEEstimate(0.5 * (lo + hi), 0.5 * (hi - lo), "bounds")
    candidates = []
    if beta <= BETA_SPECTRAL_MAX:
        est = th.spectral(math.sqrt(beta), rho, D)
        # an anchor's error enters an extrapolation scaled down by (s/s_i)^p
        good = GOOD_RTOL if moves == _ALL_MOVES else ANCHOR_GOOD_RTOL
        if est.error <= good * abs(est.value):
            return _within_bounds(est, lo, hi)
        candidates.append(est)
    if "beta" in moves and rho <= RHO_MAX_BETA_EXTRAPOLATION:
        limit = th.mmse_beta_inf(rho, D)
        candidates.append(_ladder(
            1 / beta, [1 / b for b in BETA_LADDER],
            lambda s: _estimate(1 / s, rho, D, moves - {"beta"}),
            lambda s: limit, 1, "beta-extrapolation"))
    if "rho" in moves and beta <= BETA_SPECTRAL_MAX:
        # low-rank scaling: rho D = beta/((1 + beta) h) fixed (bsr.md 10)
        w = rho * D
        limit = th.low_rank_error(beta / ((1 + beta) * w), beta)
        candidates.append(_ladder(
            rho, RHO_LADDER, lambda r: _estimate(beta, r, w / r, moves - {"rho", "beta"}),
            lambda s: limit, 1, "low-rank-extrapolation"))
    if "D" in moves:
        # mmse_RIE ~ alpha_PR D (bsr.md 3.4), analytic in D: next term ~ D^2
        apr = 1.0 if rho >= 1 else float(th.alpha_pr_kernel(math.sqrt(beta), rho)[0])
        candidates.append(_ladder(
            D, D_SMALL_LADDER, lambda d: _estimate(beta, rho, d, moves - {"D"}),
            lambda s: apr * s, 2, "small-D-extrapolation"))
        # mmse_RIE = D/(1 + D) - C/D^3 + ... (high noise), in s = 1/D
        candidates.append(_ladder(
            1 / D, [1 / d for d in D_LARGE_LADDER],
            lambda s: _estimate(beta, rho, 1 / s, moves - {"D"}),
            lambda s: 1 / (1 + s), 3, "large-D-extrapolation"))
    best = min(candidates, key=lambda e: e.error if math.isfinite(e.error) else math.inf,
               default=None)
    if best is None or not math.isfinite(best.error):
        return MMSEEstimate(0.5 * (lo + hi), 0.5 * (hi - lo), "bounds")
    return _within_bounds(best, lo, hi)


def mmse_rie_estimate(beta, rho, D) -> MMSEEstimate:
    """``mmse_RIE(beta, rho, D)`` (``rho = r/d``) with an error estimate and the path
    used (see the module docstring)."""
    beta, rho, _ = check_params(beta, rho)
    D = validate.real("D", D, low=0, low_open=True)
    beta, rho = canonical(beta, rho)
    return _estimate(beta, rho, D)


def mmse_rie(beta, rho, D) -> float:
    """Per-entry MMSE of denoising ``S*`` from ``S* + sqrt(D) Z`` (bsr.md 3.2, 5.2),
    ``rho = r/d``.

    ``D - D^2 beta^(-3/2) [(beta-1)^2 int mu/x^2 + (4 pi^2/3) int mu^3]``, ``mu`` the
    symmetrized singular-value law of the observation at noise ``D``
    (:func:`mmse_rie_estimate` gives its error estimate).
    """
    return mmse_rie_estimate(beta, rho, D).value


def exact_mpf(value):
    """A parameter as an mpmath number: floats by their shortest decimal repr.

    ``0.3`` means 3/10 at any precision, not the binary double nearest to it; mpf
    inputs are taken as they are.
    """
    import mpmath

    if isinstance(value, (mpmath.mpf, str)):
        return mpmath.mpf(value)
    return mpmath.mpf(repr(float(value)))


def mmse_rie_mp(beta, rho, D, dps=30):
    """:func:`mmse_rie` with mpmath at ``dps`` digits (tanh-sinh quadrature, roots by
    Newton from the float64 root, polyroots fallback): the independent path."""
    import mpmath

    with mpmath.workdps(dps):
        beta_m, rho_m, D_m = exact_mpf(beta), exact_mpf(rho), exact_mpf(D)
        if mpmath.isinf(beta_m):
            return theory().mmse_inf.mp(rho_m, D_m)[0]
        if beta_m < 1:
            beta_m, rho_m = 1 / beta_m, rho_m / beta_m
        return theory().mmse_functional.evaluate_mp((mpmath.sqrt(beta_m), rho_m, D_m), dps=dps)


# --------------------------------------------------------------------- fixed point
@dataclass
class BOPoint:
    """Bayes-optimal solution at one alpha (columns of :func:`bo_curve`)."""

    alpha: float
    beta: float
    rho: float
    delta: float
    mmse: float           # 1 - q = per-entry MMSE on S* = test error - Delta
    q: float
    alpha_pr: float
    ridge_mse: float
    alpha_lr: float
    converged: bool       # mmse_error <= rtol * mmse (certified)
    iterations: int       # evaluations of mmse_RIE
    residual: float       # |mmse_RIE((Delta + v)/alpha) - v| at the reported v
    mmse_error: float = math.inf   # certified bound on |mmse - exact|
    method: str = ""      # path of the evaluations (exact, spectral, beta=inf, ...)
    mmse_str: str = ""    # high-precision value (with --precision)
    q_str: str = ""
    digits_confirmed: float = float("nan")


@dataclass
class OverlapSolution:
    """Root ``v = 1 - q`` of the BSR fixed point with a certified error bound."""

    value: float
    error: float          # |value - exact root| <= error (inf: not certified)
    converged: bool       # error <= rtol * value
    evaluations: int
    residual: float
    method: str
    message: str = ""


def _first_positive(g, hi, lo=0.0):
    """Largest ``hi 10^-k`` (``k >= 1``, above ``lo``) where ``g > 0``, or None."""
    v = hi
    for _ in range(330):
        v *= 0.1
        if v <= lo or v < SMALLEST_NORMAL:
            return None
        if g(v) > 0:
            return v
    return None


def _genie_solution(alpha, rho, delta, v_hi):
    """Fixed point of the ``beta = inf`` map: a rigorous lower bound on ``1 - q``."""
    from scipy.optimize import brentq

    th = theory()

    def g(v):
        return th.mmse_beta_inf(rho, (delta + v) / alpha) - v

    def g_sure(v):
        # g minus its rounding error: the value and v cancel (8 eps (v + mmse)), and D is
        # rounded (2 eps D; mmse is concave in D, E[D kappa/(kappa + D)], so its slope is
        # <= mmse/D: 4 eps mmse).  Delta below eps v is lost from D entirely.
        gv = g(v)
        return gv - 12 * EPS * (v + gv + v)

    if v_hi <= 0 or g_sure(v_hi) >= 0:
        return max(v_hi, 0.0)
    if g(v_hi) >= 0:       # the sign at v_hi is within rounding: no certified bracket
        return 0.0
    lo = 0.0 if g(0.0) > 0 else _first_positive(g_sure, v_hi)
    if lo is None:
        return 0.0
    root = brentq(g, lo, v_hi, xtol=TINY, rtol=4 * EPS, maxiter=500)
    # the closed-form map is exact up to rounding, its root up to rounding / slope:
    # step below it until the sign, beyond its rounding error, confirms a lower bound
    for shrink in (16 * EPS, 1e-13, 1e-11, 1e-9, 1e-7):
        if g_sure(root * (1 - shrink)) > 0:
            return root * (1 - shrink)
    return lo


def solve_overlap(alpha, beta, rho, delta=0.0, *, rtol=MMSE_RTOL) -> OverlapSolution:
    """Solve ``v = mmse_RIE(beta, rho, (Delta + v)/alpha)`` for ``v = 1 - q`` (bsr.md 3.1)
    and certify it to the relative tolerance ``rtol`` (module docstring)."""

    beta, rho, delta = check_params(beta, rho, delta)
    alpha = validate.real("alpha", alpha, low=0)
    rtol = validate.real("rtol", rtol, low=0, low_open=True)
    if alpha == 0:
        return OverlapSolution(1.0, 0.0, True, 0, 0.0, "exact", "alpha = 0: nothing learned")
    apr = alpha_pr(beta, rho)
    if delta == 0 and alpha >= apr * (1 - ALPHA_PR_RTOL):
        return OverlapSolution(0.0, 0.0, True, 0, 0.0, "exact",
                               "alpha >= alpha_PR: perfect recovery")
    beta_c, rho_c = canonical(beta, rho)
    cache: dict = {}

    def ev(v) -> MMSEEstimate:
        D = (delta + v) / alpha
        if D not in cache:
            if D == 0:
                cache[D] = MMSEEstimate(0.0, 0.0, "exact")
            else:
                # D itself is rounded (relative 2 eps: Delta + v, then / alpha; Delta below
                # eps v is lost entirely); mmse is increasing and concave in D (at beta = inf
                # a mean of D kappa/(kappa + D)), slope <= mmse/D: 4 eps mmse on the value
                e = _estimate(beta_c, rho_c, D)
                cache[D] = MMSEEstimate(e.value, e.error + 4 * EPS * abs(e.value), e.method,
                                        e.note)
        return cache[D]

    def f(v):
        return ev(v).value - v

    v_hi = theory().ridge_error(alpha, delta) * (1 + 16 * EPS)  # linear estimator: upper bound
    v_lo = _genie_solution(alpha, rho_c, delta, v_hi)  # beta = inf genie: lower bound
    sol = _solve_between(v_lo, v_hi, beta_c, ev, f, rtol, cache)
    half = 0.5 * (v_hi - v_lo)
    if v_lo > 0 and not math.isinf(beta_c) and not half >= sol.error:
        # the rigorous bracket is the tighter statement
        return OverlapSolution(0.5 * (v_lo + v_hi), half, half <= rtol * v_lo,
                               sol.evaluations, sol.residual, "bounds",
                               "genie (beta = inf) and linear-estimator bounds")
    return sol


def _solve_between(v_lo, v_hi, beta_c, ev, f, rtol, cache) -> OverlapSolution:
    """Root of the float estimate ``f`` in ``[v_lo, v_hi]``, certified by :func:`_certify`."""
    from scipy.optimize import brentq

    if math.isinf(beta_c):
        v = v_lo
    else:
        a = v_lo if v_lo > 0 and f(v_lo) > 0 else None
        if a is None and v_lo == 0:
            a = _first_positive(f, v_hi)
        if a is None:
            v = v_lo
        elif f(v_hi) >= 0:
            v = v_hi
        else:
            v = brentq(f, a, v_hi, xtol=TINY, rtol=4 * EPS, maxiter=500)
    return _certify(v, v_lo, v_hi, ev, rtol, len(cache))


def _certify(v, v_lo, v_hi, ev, rtol, n0) -> OverlapSolution:
    """Smallest ``w`` with ``err(v - w) - (v - w) > +error`` and ``err(v + w) - (v + w) <
    -error`` (or beyond the rigorous bounds): the root lies within ``w`` of ``v``."""
    count = [n0]

    def f_with_error(x):
        count[0] += 1
        e = ev(x)
        return e.value - x, e.error, e.method

    f0, e0, method = f_with_error(v)
    residual = abs(f0) if math.isfinite(f0) else math.inf
    if v <= 0:
        # only reached without a positive residual anywhere: alpha just below
        # alpha_PR (Delta = 0) within the accuracy of the evaluations
        return OverlapSolution(0.0, v_hi, False, count[0], residual, method,
                               "no positive root resolved: alpha is within the evaluation "
                               "accuracy of alpha_PR (Delta = 0)")
    w = max(e0, abs(f0), 4 * EPS * v, TINY)
    certified = False
    for _ in range(40):
        lo_ok = v - w <= v_lo
        hi_ok = v + w >= v_hi
        if not lo_ok:
            fl, el, _ = f_with_error(v - w)
            lo_ok = fl - el > 0
        if not hi_ok:
            fh, eh, _ = f_with_error(v + w)
            hi_ok = fh + eh < 0
        if lo_ok and hi_ok:
            certified = True
            break
        if w > v:
            break
        w *= 8
    error = min(w, max(v - v_lo, v_hi - v)) if certified else max(v - v_lo, v_hi - v)
    if v > 1.0 and v - 1.0 <= error:  # the root is < 1 for alpha > 0: within the bound
        v = 1.0
    error, v = float(error), float(v)
    converged = bool(certified and error <= rtol * v)
    msg = (f"certified to {error / v:.2g} (relative)" if certified else
           "could not certify the root: the evaluation error exceeds the residual near it")
    if certified and not converged:
        msg += f" > rtol = {rtol:g}; precision= (mpmath) gives more digits"
    return OverlapSolution(v, error, converged, count[0], residual, method, msg)


def _precision_solve(alpha, beta, rho, delta, v0, digits):
    import mpmath

    def f_mp(v):
        a, d = exact_mpf(alpha), exact_mpf(delta)
        return mmse_rie_mp(beta, rho, (d + v) / a, dps=mpmath.mp.dps) - v

    return refine_root_mp(f_mp, v0, digits=digits, name=f"BSR overlap at alpha={alpha}")


def bo_point(alpha, beta, rho, delta=0.0, *, precision: int | None = None,
             rtol: float = MMSE_RTOL) -> BOPoint:
    """Bayes-optimal error at one sample ratio ``alpha = n/(d L)`` (bsr.md 3),
    ``beta = L/d``, ``rho = r/d``; ``converged`` iff ``mmse`` is certified to ``rtol``."""
    beta, rho, delta = check_params(beta, rho, delta)
    alpha = validate.real("alpha", alpha, low=0)
    sol = solve_overlap(alpha, beta, rho, delta, rtol=rtol)
    v = float(sol.value)
    if not sol.converged:
        warnings.warn(f"BSR overlap at alpha={alpha}, beta={beta}, rho={rho}, delta={delta}: "
                      f"{sol.message}", ConvergenceWarning, stacklevel=2)
    apr = alpha_pr(beta, rho)
    beta_c, rho_c = canonical(beta, rho)
    with np.errstate(over="ignore"):  # alpha/rho beyond the float range is inf
        a_lr = alpha / rho_c if math.isinf(beta_c) else \
            (alpha / rho_c) * (beta_c / (1 + beta_c))
    pt = BOPoint(alpha, beta, rho, delta, v, 1.0 - v, apr, ridge_mse(alpha, delta), a_lr,
                 bool(sol.converged), int(sol.evaluations), float(sol.residual),
                 float(sol.error), sol.method)
    if precision is not None:
        import mpmath

        digits = validate.integer("precision", precision, low=1)
        if sol.method == "exact":
            pt.mmse_str, pt.q_str = repr(v), repr(1.0 - v)
            pt.digits_confirmed = float("inf")
        else:
            try:
                pr = _precision_solve(alpha, beta, rho, delta, v, digits)
            except (ArithmeticError, ValueError, ZeroDivisionError) as exc:
                warnings.warn(f"alpha={alpha}: the mpmath path failed ({exc})",
                              ConvergenceWarning, stacklevel=2)
                return pt
            with mpmath.workdps(2 * digits + 10):
                pt.mmse_str = mpmath.nstr(pr.value, digits)
                pt.q_str = mpmath.nstr(1 - pr.value, digits)
            pt.digits_confirmed = round(pr.agreement_digits, 1)
            if not pr.confirmed:
                warnings.warn(f"alpha={alpha}: {digits}-digit value agrees with the "
                              f"{2 * digits}-digit one to only {pr.agreement_digits:.1f} digits",
                              ConvergenceWarning, stacklevel=2)
    return pt


def bo_curve(alpha, beta, rho, delta=0.0, *, precision: int | None = None,
             progress: bool = False, rtol: float = MMSE_RTOL):
    """Bayes-optimal error along a sweep of ``alpha`` (returns a :class:`Table`).

    Columns: ``alpha, mmse, q, alpha_pr, ridge_mse, alpha_lr, converged, iterations,
    residual, mmse_error, method`` (+ ``mmse_str, q_str, digits_confirmed`` with
    ``precision``).  ``mmse`` is ``1 - q``, the ``mmse`` column of the paper's CSVs
    (bsr.md 2); ``mmse_error`` bounds ``|mmse - exact|`` and ``converged`` means
    ``mmse_error <= rtol mmse``.
    """
    from ..core.progress import progress_bar
    from ..core.table import Table

    beta, rho, delta = check_params(beta, rho, delta)
    alphas = np.atleast_1d(np.asarray(alpha, dtype=float))
    for a in alphas:
        validate.real("alpha", a, low=0)
    t0 = time.perf_counter()
    pts = [bo_point(a, beta, rho, delta, precision=precision, rtol=rtol)
           for a in progress_bar(alphas, desc="BSR BO curve", enabled=progress)]
    cols = ["alpha", "beta", "rho", "delta", "mmse", "q", "alpha_pr", "ridge_mse", "alpha_lr",
            "converged", "iterations", "residual", "mmse_error", "method"]
    if precision is not None:
        cols += ["mmse_str", "q_str", "digits_confirmed"]
    data = {c: [asdict(p)[c] for p in pts] for c in cols}
    import symtheory

    meta = {"model": "bsr", "quantity": "Bayes-optimal error 1-q (bsr.md 3)",
            "beta": beta, "rho": rho, "rho_definition": "r/d", "delta": delta,
            "precision": precision, "rtol": rtol,
            "n_points": len(pts), "seconds": round(time.perf_counter() - t0, 4),
            "symtheory": symtheory.__version__}
    return Table(data, meta)


# --------------------------------------------------------------------- low-rank limit
@dataclass
class LowRankPoint:
    """Low-rank (r = O(1), rho -> 0) solution at ``alpha_lr = n/(r(d + L))`` (bsr.md 10)."""

    alpha_lr: float
    beta: float
    delta: float
    mmse: float
    q: float
    alpha_weak: float
    converged: bool
    iterations: int
    residual: float


def low_rank_point(alpha_lr, beta, delta=0.0) -> LowRankPoint:
    """Low-rank limit: solve ``q = q_u q_v`` at ``h = alpha_lr/(Delta + 1 - q)``."""
    beta = validate.real("beta", beta, low=0, low_open=True, allow_inf=True)
    delta = validate.real("delta", delta, low=0)
    a = validate.real("alpha_lr", alpha_lr, low=0)
    if beta < 1:
        beta = 1.0 / beta  # the rank-r problem is symmetric under d <-> L
    th = theory()
    if math.isinf(beta):
        q = float(th.low_rank_q_inf(a, delta)[0])
        return LowRankPoint(a, beta, delta, 1 - q, q, delta + 1.0, True, 0, 0.0)
    t = math.sqrt(beta)
    a_weak = float(th.low_rank_weak(t, delta)[0])

    def err(v):  # 1 - q(h(v)), computed without cancellation
        return th.low_rank_error(a / (delta + v), beta)

    if a <= a_weak:
        return LowRankPoint(a, beta, delta, 1.0, 0.0, a_weak, True, 0, 0.0)
    if delta == 0 and a >= th.low_rank_strong * (1 - ALPHA_PR_RTOL):
        return LowRankPoint(a, beta, delta, 0.0, 1.0, a_weak, True, 0, 0.0)
    # the root can be as small as ~ Delta/alpha_lr: lower bracket ends down to the
    # smallest normal float
    res = positive_fixed_point(err, 1.0, lows=tuple(10.0 ** -k for k in range(1, 308)),
                               xtol=TINY, name=f"low-rank overlap at alpha_lr={a}")
    v = float(res.value)
    return LowRankPoint(a, beta, delta, v, 1 - v, a_weak, res.converged, res.iterations,
                        res.residual)


# --------------------------------------------------------------------- free entropy
def free_entropy(q, alpha, beta, rho, delta=0.0, *, level=5) -> tuple[float, float]:
    """Free entropy ``f(q)`` of bsr.md 12 and an error estimate.

    Stationary points of ``f`` are the fixed points of the overlap equation; its
    maximum over ``q`` is at the Bayes-optimal overlap (no hard phase).
    """
    beta, rho, delta = check_params(beta, rho, delta)
    alpha = validate.real("alpha", alpha, low=0, low_open=True)
    q = validate.real("q", q, low=0, high=1, high_open=True)
    beta, rho = canonical(beta, rho)
    if math.isinf(beta):
        raise validate.ParameterError("free_entropy needs a finite beta (got inf)")
    th = theory()
    if not hasattr(th, "free_entropy_kernel"):
        f, (Sigma, Lg, qhat) = M.free_entropy_expr()
        th.free_entropy_kernel = th.kernels.add(
            Kernel("bsr_free_entropy", (M.alpha, M.delta, M.t, qhat, Sigma, Lg), [f],
                   doc="free entropy from log-energies (bsr.md 12)"))
    qhat = alpha / (delta + 1.0 - q)
    t = math.sqrt(beta)
    (sigma, e1), (logx, e2) = th.law.log_energy(t, rho, 1.0 / qhat, level=level)
    val = float(th.free_entropy_kernel(alpha, delta, t, qhat, sigma, logx)[0])
    return val, (e1 + (beta - 1) * e2) / beta


# --------------------------------------------------------------------- RIE denoiser
def rie_denoise(R, D, rho, *, divergence: bool = False):
    """Rectangular RIE estimate of ``S*`` from ``R = S* + sqrt(D) Z`` (bsr.md 5.1).

    ``R`` is ``d x L`` and ``rho = r/d`` refers to its *rows* (the package convention,
    any ``beta = L/d``); a tall ``R`` (``beta < 1``) is the transposed problem with
    ``rho/beta = r/L`` (bsr.md 14.1).  Singular values ``sigma`` of
    ``Y = R/(dL)^(1/4)`` are mapped by the generated kernel of
    ``xi(x) = x - (2D/sqrt(beta)) [(beta-1)/(2x) + H(x)]`` (``beta = max(d, L)/min(d, L)``),
    with ``H`` the Hilbert transform of the asymptotic law at noise ``D`` (also
    outside its support).
    With ``divergence=True`` also returns ``sum_ij d Shat_ij / d R_ij`` (exact, from
    the spectral-estimator formula and ``xi'``; ``D div/(dL) -> mmse_RIE``).
    """
    R = np.asarray(R, dtype=float)
    if R.ndim != 2:
        raise validate.ParameterError(f"R must be a matrix, got shape {R.shape}")
    if not np.all(np.isfinite(R)):
        raise validate.ParameterError("R contains non-finite entries")
    D = validate.real("D", D, low=0, low_open=True)
    rho = validate.real("rho", rho, low=0, low_open=True)
    d, L = R.shape
    beta, rho = canonical(L / d, rho)
    return theory().rie.denoise(R, (math.sqrt(beta), rho, D), (d * L) ** 0.25,
                                divergence=divergence)


def rie_singular_values(sigma, beta, rho, D, *, derivative: bool = False):
    """The RIE map ``xi(sigma)`` on singular values of ``Y`` (canonical ``beta >= 1``,
    ``rho = r/min(d, L)`` there), and
    optionally ``xi'(sigma) = d xi/dx + d xi/dH H'(sigma)`` (derived symbolically;
    ``H' = Re G'`` by implicit differentiation of the law's polynomial)."""
    return theory().rie.singular_values(sigma, (math.sqrt(beta), rho, D), derivative=derivative)
