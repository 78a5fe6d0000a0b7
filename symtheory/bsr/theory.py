"""Bayes-optimal theory of BSR: the self-consistent equation and its solutions.

Assembles the declarations of :mod:`symtheory.bsr.model` (compiled in
:mod:`symtheory.bsr.kernels`) and the evaluation of ``mmse_RIE`` with an error
estimate (:mod:`symtheory.bsr.mmse_paths`) with the generic certified root finder
(:mod:`symtheory.core.roots`).  The fixed point (bsr.md 3.1) is solved in the variable
``v = 1 - q`` (the MMSE itself, no cancellation near perfect recovery):

    v = mmse_RIE(beta, rho, (Delta + v)/alpha)

Convention (package notation, docs/theory/README.md): ``rho = r/d`` for every
``beta = L/d``; ``beta < 1`` is the transposed problem ``(1/beta, rho/beta)``
(bsr.md 14.1).

Every evaluation of ``mmse_RIE`` carries an error estimate (``MMSEEstimate``), and
every solution an error bound: ``converged`` means the root is *certified* to the
relative tolerance, not merely that an iteration stopped.

* Rigorous bounds: the fixed points of the genie (``beta = inf``, a lower bound on
  ``mmse_RIE``) and of the linear estimator (ridge, an upper bound) bracket the
  solution (:func:`~symtheory.core.roots.certified_lower_root` makes the genie's a
  rigorous bound through its rounding).
* The root of the float estimate (:func:`~symtheory.core.roots.bracketed_root`) is
  certified by the signs of ``err(v) - v`` at ``v -+ w`` beyond their error estimates
  (:func:`~symtheory.core.roots.certify_root`); ``converged`` iff ``w <= rtol v``.
  Otherwise the result says so (``converged=False``) and the mpmath path
  (``precision=``, confirmed at twice the digits by
  :func:`~symtheory.core.roots_mp.refine_root_mp`) is the way to more digits.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..core import validate
from ..core.codegen import Kernel
from ..core.result import Result, alias
from ..core.roots import (EPS, TINY, CertifiedRoot, Estimate, bracketed_root, certified_lower_root,
                          certify_root, quadratic_roots, tighter_bracket)
from ..core.roots_mp import refine_root_mp
from ..core.solvers import ConvergenceWarning, positive_fixed_point
from ..glm.se.spectral import exact_mpf, precision_report
from . import model as M
from .kernels import BSRTheory, canonical, check_params, theory
from .mmse_paths import MMSEEstimate, _estimate, mmse_rie, mmse_rie_estimate, mmse_rie_mp

# the family's API is this module's: what moved to kernels and mmse_paths stays importable here
__all__ = ["ALPHA_PR_RTOL", "BOPoint", "BSRTheory", "LowRankPoint", "MMSEEstimate", "MMSE_RTOL",
           "OverlapSolution", "alpha_pr", "bo_curve", "bo_point", "canonical", "check_params",
           "exact_mpf", "free_entropy", "low_rank_point", "mmse_rie", "mmse_rie_estimate",
           "mmse_rie_mp", "quadratic_roots", "rie_denoise", "rie_singular_values",
           "ridge_mse", "solve_overlap", "theory"]

#: default relative tolerance of a converged ``mmse`` (bound on |mmse - exact| / mmse)
MMSE_RTOL = 1e-8
#: alpha >= alpha_PR (1 - ALPHA_PR_RTOL) counts as perfect recovery: rounding only
#: (a computed alpha_PR can land ulps off the exact value: in float64 0.2 * 1.8 is one
#: ulp above 0.36; bsr.md 4.5)
ALPHA_PR_RTOL = 16 * EPS
#: the linear estimator's error is an upper bound on 1 - q, widened by its rounding
RIDGE_ROUNDING = 16 * EPS


# --------------------------------------------------------------------- parameters
def alpha_pr(beta, rho) -> float:
    """Return the perfect-recovery threshold ``alpha_PR`` of BSR (bsr.md 7).

    ``alpha_PR = min(1, rho (1 + beta - rho)/beta)`` in the package's normalization
    ``rho = r/d``, ``beta = L/d``; the formula is the same in both orientations
    (``beta < 1`` is the transposed problem, bsr.md 14.1).

    Parameters
    ----------
    beta : float
        Token ratio ``L/d`` (> 0; ``inf`` allowed).
    rho : float
        Rank ratio ``r/d`` (> 0).

    Returns
    -------
    float
        The sample ratio ``alpha = n/(d L)`` above which the noiseless Bayes-optimal
        error is zero.

    Examples
    --------
    >>> from symtheory import bsr
    >>> bsr.alpha_pr(2.0, 0.5)      # 0.5 (1 + 2 - 0.5)/2
    0.625
    >>> bsr.alpha_pr(2.0, 1.5)      # full rank: one sample per entry
    1.0
    """
    beta, rho, _ = check_params(beta, rho)
    beta, rho = canonical(beta, rho)
    if rho >= 1.0:
        return 1.0
    if math.isinf(beta):
        return rho
    return float(theory().alpha_pr_kernel(math.sqrt(beta), rho)[0])


def ridge_mse(alpha, delta) -> float:
    """Return the error of Bayes-optimal ridge regression on vectorized tokens (bsr.md 8).

    The linear estimator with penalty ``lambda = Delta``; an upper bound on the
    Bayes-optimal ``mmse`` at every ``alpha``.

    Parameters
    ----------
    alpha : float
        Sample ratio ``n/(d L)`` (>= 0).
    delta : float
        Label-noise variance ``Delta`` (>= 0).

    Returns
    -------
    float
        Per-entry error on ``S*`` (test error minus ``Delta``).

    Examples
    --------
    >>> from symtheory import bsr
    >>> bsr.ridge_mse(0.3, 0.0)     # noiseless: 1 - alpha below alpha = 1
    0.7
    """
    alpha = validate.real("alpha", alpha, low=0)
    delta = validate.real("delta", delta, low=0)
    return theory().ridge_error(alpha, delta)


# --------------------------------------------------------------------- fixed point
@dataclass
class BOPoint(Result):
    """Bayes-optimal solution of BSR at one ``alpha`` (the columns of :func:`bo_curve`).

    Returned by :func:`bo_point`; every field below is an attribute of the same name.
    ``value`` (also ``mmse``) is ``1 - q``, the per-entry MMSE on ``S*`` (= test error -
    ``Delta``, bsr.md 2), ``error`` (also ``mmse_error``) a certified bound on
    ``|mmse - exact|``.

    Parameters
    ----------
    alpha, beta, rho, delta : float
        The point: ``alpha = n/(d L)``, ``beta = L/d``, ``rho = r/d``, noise variance.
    q : float
        Overlap ``q = 1 - mmse``.
    alpha_pr : float
        Perfect-recovery threshold (:func:`alpha_pr`).
    ridge_mse : float
        Error of the linear estimator (:func:`ridge_mse`).
    alpha_lr : float
        The low-rank sample ratio ``n/(r(d + L))`` of this ``alpha``.
    mmse_str, q_str : str
        The high-precision values (with ``precision=``), else empty.
    digits_confirmed : float
        Digits on which the precision run and its twice-as-precise check agree.
    value : float
        ``1 - q``, the MMSE.
    error : float
        Certified bound on ``|mmse - exact|``.
    error_kind : str
        ``"bound"``.
    converged : bool
        ``mmse_error <= rtol * mmse`` (certified).
    iterations : int
        Evaluations of ``mmse_RIE``.
    residual : float
        ``|mmse_RIE((Delta + v)/alpha) - v|`` at the reported ``v``.
    method : str
        Path of the evaluations (exact, spectral, beta=inf, ...).
    message : str
        What happened, in words.

    Examples
    --------
    >>> from symtheory import bsr
    >>> pt = bsr.bo_point(0.3, beta=2.0, rho=0.5)
    >>> round(pt.mmse, 9), pt.converged, pt.mmse_error < 1e-8 * pt.mmse
    (0.590245391, True, True)
    """

    alpha: float = math.nan
    beta: float = math.nan
    rho: float = math.nan
    delta: float = 0.0
    q: float = math.nan
    alpha_pr: float = math.nan
    ridge_mse: float = math.nan
    alpha_lr: float = math.nan
    mmse_str: str = ""    # high-precision value (with --precision)
    q_str: str = ""
    digits_confirmed: float = float("nan")
    error: float = field(default=math.inf, kw_only=True)
    error_kind: str = field(default="bound", kw_only=True)

    mmse = alias("value", "1 - q, the per-entry MMSE on S*.")
    mmse_error = alias("error", "Certified bound on ``|mmse - exact|``.")


#: root v = 1 - q of the BSR fixed point with a certified error bound (``evaluations``)
OverlapSolution = CertifiedRoot


def _genie_solution(alpha, rho, delta, v_hi):
    """Fixed point of the ``beta = inf`` map: a rigorous lower bound on ``1 - q``."""
    th = theory()

    def g(v):
        return th.mmse_beta_inf(rho, (delta + v) / alpha) - v

    def g_sure(v):
        # g minus its rounding error: the value and v cancel (8 eps (v + mmse)), and D is
        # rounded (2 eps D; mmse is concave in D, E[D kappa/(kappa + D)], so its slope is
        # <= mmse/D: 4 eps mmse).  Delta below eps v is lost from D entirely.
        gv = g(v)
        return gv - 12 * EPS * (v + gv + v)

    return certified_lower_root(g, g_sure, v_hi)


def solve_overlap(alpha, beta, rho, delta=0.0, *, rtol=MMSE_RTOL) -> CertifiedRoot:
    """Solve the BSR fixed point for ``v = 1 - q`` with a certified error bound (bsr.md 3.1).

    Solves ``v = mmse_RIE(beta, rho, (Delta + v)/alpha)`` between the genie
    (``beta = inf``) and linear-estimator bounds and certifies the root to the relative
    tolerance ``rtol`` (module docstring).

    Parameters
    ----------
    alpha : float
        Sample ratio ``n/(d L)`` (>= 0).
    beta : float
        Token ratio ``L/d`` (> 0).
    rho : float
        Rank ratio ``r/d`` (> 0).
    delta : float, optional
        Label-noise variance (>= 0).
    rtol : float, optional
        Relative tolerance of the certificate (> 0).

    Returns
    -------
    CertifiedRoot
        ``value`` the root ``v``, ``error`` its certified bound, ``converged`` iff
        ``error <= rtol v``, ``iterations`` the evaluations of ``mmse_RIE``.

    Examples
    --------
    >>> from symtheory import bsr
    >>> sol = bsr.solve_overlap(0.3, beta=2.0, rho=0.5)
    >>> round(sol.value, 9), sol.converged
    (0.590245391, True)
    """
    beta, rho, delta = check_params(beta, rho, delta)
    alpha = validate.real("alpha", alpha, low=0)
    rtol = validate.real("rtol", rtol, low=0, low_open=True)
    if alpha == 0:
        return CertifiedRoot(value=1.0, error=0.0, converged=True, method="exact",
                             residual=0.0, message="alpha = 0: nothing learned")
    apr = alpha_pr(beta, rho)
    if delta == 0 and alpha >= apr * (1 - ALPHA_PR_RTOL):
        return CertifiedRoot(value=0.0, error=0.0, converged=True, method="exact",
                             residual=0.0, message="alpha >= alpha_PR: perfect recovery")
    beta_c, rho_c = canonical(beta, rho)
    cache: dict = {}

    def ev(v) -> Estimate:
        D = (delta + v) / alpha
        if D not in cache:
            if D == 0:
                cache[D] = Estimate(value=0.0, error=0.0, error_kind="bound", method="exact")
            else:
                # D itself is rounded (relative 2 eps: Delta + v, then / alpha; Delta below
                # eps v is lost entirely); mmse is increasing and concave in D (at beta = inf
                # a mean of D kappa/(kappa + D)), slope <= mmse/D: 4 eps mmse on the value
                e = _estimate(beta_c, rho_c, D)
                cache[D] = Estimate(value=e.value, error=e.error + 4 * EPS * abs(e.value),
                                    error_kind=e.error_kind, method=e.method, message=e.message)
        return cache[D]

    def residual(v) -> Estimate:
        e = ev(v)
        return Estimate(value=e.value - v, error=e.error, method=e.method)

    v_hi = theory().ridge_error(alpha, delta) * (1 + RIDGE_ROUNDING)  # linear estimator
    v_lo = _genie_solution(alpha, rho_c, delta, v_hi)  # beta = inf genie: lower bound
    # at beta = inf the genie is the model: its fixed point is the root
    v = v_lo if math.isinf(beta_c) else bracketed_root(lambda x: ev(x).value - x, v_lo, v_hi)
    # at_most: the root is < 1 for alpha > 0 (a v above 1 within its bound is 1)
    sol = certify_root(residual, v, v_lo, v_hi, rtol=rtol, evaluations=len(cache), at_most=1.0,
                       hint="precision= (mpmath) gives more digits",
                       no_root="alpha is within the evaluation accuracy of alpha_PR (Delta = 0)")
    if math.isinf(beta_c):
        return sol
    return tighter_bracket(sol, v_lo, v_hi, rtol=rtol,
                           message="genie (beta = inf) and linear-estimator bounds")


def _precision_solve(alpha, beta, rho, delta, v0, digits, reference=False):
    """The root to ``digits`` digits with mpmath, confirmed at ``2 digits``; ``reference``:
    the earlier path (tanh-sinh quadrature, ``mpmath.findroot``), for benchmarks."""
    import mpmath

    def f_mp(v):
        a, d = exact_mpf(alpha), exact_mpf(delta)
        return mmse_rie_mp(beta, rho, (d + v) / a, dps=mpmath.mp.dps,
                           rule="tanh-sinh" if reference else "edge") - v

    return refine_root_mp(f_mp, v0, digits=digits, name=f"BSR overlap at alpha={alpha}",
                          method="findroot" if reference else "secant")


def bo_point(alpha, beta, rho, delta=0.0, *, precision: int | None = None,
             rtol: float = MMSE_RTOL, _reference_mp: bool = False) -> BOPoint:
    """Return the Bayes-optimal error of BSR at one sample ratio (bsr.md 3).

    Package normalization: ``alpha = n/(d L)``, ``beta = L/d``, ``rho = r/d``; ``mmse``
    is ``1 - q``, the per-entry MMSE on ``S*``.  ``converged`` iff ``mmse`` is
    certified to ``rtol``; an uncertified point is returned with a
    ``ConvergenceWarning``.

    Parameters
    ----------
    alpha : float
        Sample ratio ``n/(d L)`` (>= 0).
    beta : float
        Token ratio ``L/d`` (> 0).
    rho : float
        Rank ratio ``r/d`` (> 0).
    delta : float, optional
        Label-noise variance ``Delta`` (>= 0).
    precision : int, optional
        Digits of an mpmath refinement, confirmed at twice the digits
        (``mmse_str``, ``q_str``, ``digits_confirmed``).
    rtol : float, optional
        Relative tolerance of the certified ``mmse``.
    _reference_mp : bool, optional
        The earlier, slower mpmath path (``numerics/bench/bsr_precision.py`` only).

    Returns
    -------
    BOPoint
        The solution and its report.

    Examples
    --------
    >>> from symtheory import bsr
    >>> pt = bsr.bo_point(0.3, beta=2.0, rho=0.5)
    >>> round(pt.mmse, 9), round(pt.q, 9), pt.alpha_pr
    (0.590245391, 0.409754609, 0.625)
    >>> bsr.bo_point(0.7, beta=2.0, rho=0.5).mmse    # above alpha_PR: perfect recovery
    0.0
    """
    beta, rho, delta = check_params(beta, rho, delta)
    alpha = validate.real("alpha", alpha, low=0)
    sol = solve_overlap(alpha, beta, rho, delta, rtol=rtol)
    v = float(sol.value)
    if not sol.converged:
        warnings.warn(f"BSR overlap at alpha={alpha}, beta={beta}, rho={rho}, delta={delta}: "
                      f"{sol.message}", ConvergenceWarning, stacklevel=2)
    beta_c, rho_c = canonical(beta, rho)
    with np.errstate(over="ignore"):  # alpha/rho beyond the float range is inf
        a_lr = alpha / rho_c if math.isinf(beta_c) else \
            (alpha / rho_c) * (beta_c / (1 + beta_c))
    pt = BOPoint(alpha=alpha, beta=beta, rho=rho, delta=delta, value=v, q=1.0 - v,
                 alpha_pr=alpha_pr(beta, rho), ridge_mse=ridge_mse(alpha, delta), alpha_lr=a_lr,
                 converged=bool(sol.converged), iterations=int(sol.evaluations),
                 residual=float(sol.residual), error=float(sol.error), method=sol.method,
                 message=sol.message)
    if precision is not None:
        digits = validate.integer("precision", precision, low=1)
        if sol.method == "exact":
            pt.mmse_str, pt.q_str = repr(v), repr(1.0 - v)
            pt.digits_confirmed = float("inf")
        else:
            try:
                pr = _precision_solve(alpha, beta, rho, delta, v, digits, _reference_mp)
            except (ArithmeticError, ValueError, ZeroDivisionError) as exc:
                warnings.warn(f"alpha={alpha}: the mpmath path failed ({exc})",
                              ConvergenceWarning, stacklevel=2)
                return pt
            pt.mmse_str, pt.q_str, pt.digits_confirmed = precision_report(
                pr, digits, also=lambda val: 1 - val, name=f"alpha={alpha}")
    return pt


def bo_curve(alpha, beta, rho, delta=0.0, *, precision: int | None = None,
             progress: bool = False, rtol: float = MMSE_RTOL):
    """Return the Bayes-optimal error of BSR along a sweep of ``alpha`` (bsr.md 3).

    Columns: ``alpha, beta, rho, delta, mmse, q, alpha_pr, ridge_mse, alpha_lr, converged,
    iterations, residual, mmse_error, method`` (+ ``mmse_str, q_str, digits_confirmed``
    with ``precision``).  ``mmse`` is ``1 - q``, the ``mmse`` column of the paper's CSVs
    (bsr.md 2); ``mmse_error`` bounds ``|mmse - exact|`` and ``converged`` means
    ``mmse_error <= rtol mmse``.

    Parameters
    ----------
    alpha : float or array_like
        Sample ratios ``n/(d L)`` (>= 0).
    beta : float
        Token ratio ``L/d`` (> 0).
    rho : float
        Rank ratio ``r/d`` (> 0).
    delta : float, optional
        Label-noise variance (>= 0).
    precision : int, optional
        Digits of an mpmath refinement of each point (see :func:`bo_point`).
    progress : bool, optional
        Show a progress bar.
    rtol : float, optional
        Relative tolerance of each certified ``mmse``.

    Returns
    -------
    Table
        One row per ``alpha`` (:class:`~symtheory.core.table.Table`, with the run's
        metadata).

    Examples
    --------
    >>> from symtheory import bsr
    >>> table = bsr.bo_curve([0.1, 0.3], beta=2.0, rho=0.5)
    >>> table["mmse"].round(9).tolist()
    [0.892900272, 0.590245391]
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
    data = {c: [getattr(p, c) for p in pts] for c in cols}
    import symtheory

    meta = {"model": "bsr", "quantity": "Bayes-optimal error 1-q (bsr.md 3)",
            "beta": beta, "rho": rho, "rho_definition": "r/d", "delta": delta,
            "precision": precision, "rtol": rtol,
            "n_points": len(pts), "seconds": round(time.perf_counter() - t0, 4),
            "symtheory": symtheory.__version__}
    return Table(data, meta)



# --------------------------------------------------------------------- low-rank limit
@dataclass
class LowRankPoint(Result):
    """Low-rank (r = O(1), rho -> 0) solution at ``alpha_lr = n/(r(d + L))`` (bsr.md 10):
    ``value`` (also ``mmse``) is ``1 - q``; ``alpha_weak`` the weak-recovery threshold."""

    alpha_lr: float = math.nan
    beta: float = math.nan
    delta: float = 0.0
    q: float = math.nan
    alpha_weak: float = math.nan

    mmse = alias("value", "1 - q of the low-rank solution.")


def low_rank_point(alpha_lr, beta, delta=0.0) -> LowRankPoint:
    """Low-rank limit: solve ``q = q_u q_v`` at ``h = alpha_lr/(Delta + 1 - q)``."""
    beta = validate.real("beta", beta, low=0, low_open=True, allow_inf=True)
    delta = validate.real("delta", delta, low=0)
    a = validate.real("alpha_lr", alpha_lr, low=0)
    if beta < 1:
        beta = 1.0 / beta  # the rank-r problem is symmetric under d <-> L
    th = theory()

    def point(v, alpha_weak, method, message, converged=True, iterations=0, residual=0.0):
        return LowRankPoint(alpha_lr=a, beta=beta, delta=delta, value=v, q=1 - v,
                            alpha_weak=alpha_weak, converged=converged, iterations=iterations,
                            residual=residual, method=method, message=message)

    if math.isinf(beta):
        q = float(th.low_rank_q_inf(a, delta)[0])
        return point(1 - q, delta + 1.0, "closed form", "beta = inf: closed form")
    t = math.sqrt(beta)
    a_weak = float(th.low_rank_weak(t, delta)[0])

    def err(v):  # 1 - q(h(v)), computed without cancellation
        return th.low_rank_error(a / (delta + v), beta)

    if a <= a_weak:
        return point(1.0, a_weak, "exact", "alpha_lr <= alpha_weak: nothing learned")
    if delta == 0 and a >= th.low_rank_strong * (1 - ALPHA_PR_RTOL):
        return point(0.0, a_weak, "exact", "alpha_lr >= its perfect-recovery value")
    # the root can be as small as ~ Delta/alpha_lr: lower bracket ends down to the
    # smallest normal float
    res = positive_fixed_point(err, 1.0, lows=tuple(10.0 ** -k for k in range(1, 308)),
                               xtol=TINY, name=f"low-rank overlap at alpha_lr={a}")
    return point(float(res.value), a_weak, res.method, res.message, res.converged,
                 res.iterations, res.residual)


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
