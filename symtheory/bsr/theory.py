"""Bayes-optimal theory of BSR: the self-consistent equation and its solutions.

Assembles the symbolic declarations of :mod:`symtheory.bsr.model` with the generic
core (spectral law, linear spectral functional, kernels, solvers).  The fixed point
(bsr.md 3.1) is solved in the variable ``v = 1 - q`` (the MMSE itself, no
cancellation near perfect recovery):

    v = mmse_RIE(beta, rho, (Delta + v)/alpha)

by a bracketed Brent root (unique root, no hard phase: bsr.md 12), or to any number
of digits with mpmath (confirmed at twice the digits).
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
from ..core.solvers import (ConvergenceWarning, NoBracketError, SolverResult, positive_fixed_point,
                            refine_root_mp)
from ..core.spectral import AlgebraicSpectralLaw
from ..glm.priors import RectangularRIE
from . import model as M

_THEORY = None

#: alpha >= alpha_PR - this tolerance counts as above the perfect-recovery threshold
ALPHA_PR_TOL = 1e-12


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
        self.ridge = k(Kernel("bsr_ridge_mse", (M.alpha, M.delta), [M.ridge_mse()],
                              doc="Bayes-optimal ridge error on vectorized tokens"))
        self.alpha_pr_kernel = k(Kernel("bsr_alpha_pr", (M.t, M.rho), [M.alpha_pr_formula()],
                                        doc="perfect-recovery threshold rho(1+beta-rho)/beta"))
        self.low_rank_v = k(Kernel("bsr_low_rank_v", (M.h, M.t), [lr["v_of_h"]],
                                   doc="low-rank error 1 - q(h) on the nontrivial branch"))
        self.low_rank_weak = k(Kernel("bsr_low_rank_alpha_weak", (M.t, M.delta), [lr["alpha_weak"]],
                                      doc="low-rank weak-recovery threshold"))
        self.low_rank_strong = float(lr["alpha_strong"])
        self.low_rank_q_inf = k(Kernel("bsr_low_rank_q_beta_inf", (M.alpha_lr, M.delta),
                                       [lr["q_beta_inf"]],
                                       doc="low-rank beta -> infinity overlap (closed form)"))
        self.kernels.add(self.law.coeff_kernel)
        self.kernels.add(self.law.edge_kernel)
        self.kernels.add(self.mmse_functional.value_kernel)
        self.kernels.add(self.mmse_functional.coeff_kernel)
        self.kernels.add(self.mmse_functional.integrand_kernel)
        self.rie = RectangularRIE("bsr", self.law, M.rie_denoiser(), M.x, M.H, M.LAW_PARAMS)
        self.kernels.add(self.rie.kernel)


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
    """Map to beta >= 1 by transposition: (beta, rho) -> (1/beta, rho/beta) (bsr.md 14.1)."""
    if beta < 1.0:
        return 1.0 / beta, rho / beta
    return beta, rho


def alpha_pr(beta, rho) -> float:
    """Perfect-recovery threshold ``min(1, rho(1 + beta - rho)/beta)`` (bsr.md 7)."""
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
    return float(theory().ridge(alpha, delta)[0])


def mmse_rie(beta, rho, D, *, rtol=1e-11) -> float:
    """Per-entry MMSE of denoising ``S*`` from ``S* + sqrt(D) Z`` (bsr.md 3.2, 5.2).

    ``D - D^2 beta^(-3/2) [(beta-1)^2 int mu/x^2 + (4 pi^2/3) int mu^3]``, ``mu`` the
    symmetrized singular-value law of the observation at noise ``D``.
    """
    beta, rho, _ = check_params(beta, rho)
    D = validate.real("D", D, low=0, low_open=True)
    beta, rho = canonical(beta, rho)
    th = theory()
    if math.isinf(beta):
        return float(th.mmse_inf(rho, D)[0])
    return th.mmse_functional.evaluate((math.sqrt(beta), rho, D), rtol=rtol).value


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
    converged: bool
    iterations: int
    residual: float
    mmse_str: str = ""    # high-precision value (with --precision)
    q_str: str = ""
    digits_confirmed: float = float("nan")


def _error_map(alpha, beta, rho, delta):
    """``v -> mmse_RIE(beta, rho, (Delta + v)/alpha)`` (the SE map in ``v = 1 - q``)."""
    th = theory()
    if math.isinf(beta):
        def err(v):
            return float(th.mmse_inf(rho, (delta + v) / alpha)[0])
    else:
        t = math.sqrt(beta)
        fun = th.mmse_functional

        def err(v):
            return fun.evaluate((t, rho, (delta + v) / alpha)).value
    return err


def solve_overlap(alpha, beta, rho, delta, *, xtol=1e-14) -> SolverResult:
    """Solve ``v = mmse_RIE((Delta + v)/alpha)``; ``value`` is ``v = 1 - q``."""
    apr = alpha_pr(beta, rho)
    beta_c, rho_c = canonical(beta, rho)
    if alpha == 0:
        return SolverResult(1.0, True, 0, 0.0, "exact", "alpha = 0: nothing learned")
    if delta == 0 and alpha >= apr - ALPHA_PR_TOL:
        return SolverResult(0.0, True, 0, 0.0, "exact", "alpha >= alpha_PR: perfect recovery")
    err = _error_map(alpha, beta_c, rho_c, delta)
    try:
        return positive_fixed_point(err, 1.0, xtol=xtol, name=f"BSR overlap at alpha={alpha}")
    except NoBracketError as exc:
        warnings.warn(f"{exc}; alpha={alpha}, beta={beta}, rho={rho}, delta={delta} "
                      f"(alpha_PR={apr}); reporting the bound 1 - q <= 1e-12",
                      ConvergenceWarning, stacklevel=3)
        return SolverResult(1e-12, False, 4, abs(err(1e-12) - 1e-12), "bracket", str(exc))


def _precision_solve(alpha, beta, rho, delta, v0, digits):
    import mpmath

    def f_mp(v):
        a, d = exact_mpf(alpha), exact_mpf(delta)
        return mmse_rie_mp(beta, rho, (d + v) / a, dps=mpmath.mp.dps) - v

    return refine_root_mp(f_mp, v0, digits=digits, name=f"BSR overlap at alpha={alpha}")


def bo_point(alpha, beta, rho, delta=0.0, *, precision: int | None = None) -> BOPoint:
    """Bayes-optimal error at one sample ratio ``alpha = n/(d L)`` (bsr.md 3)."""
    beta, rho, delta = check_params(beta, rho, delta)
    alpha = validate.real("alpha", alpha, low=0)
    res = solve_overlap(alpha, beta, rho, delta)
    v = float(res.value)
    apr = alpha_pr(beta, rho)
    beta_c, rho_c = canonical(beta, rho)
    a_lr = alpha / rho if math.isinf(beta_c) else alpha * beta_c / ((1 + beta_c) * rho_c)
    pt = BOPoint(alpha, beta, rho, delta, v, 1.0 - v, apr, ridge_mse(alpha, delta), a_lr,
                 bool(res.converged), int(res.iterations), float(res.residual))
    if precision is not None:
        import mpmath

        digits = validate.integer("precision", precision, low=1)
        if res.method == "exact":
            pt.mmse_str, pt.q_str = repr(v), repr(1.0 - v)
            pt.digits_confirmed = float("inf")
        else:
            pr = _precision_solve(alpha, beta, rho, delta, v, digits)
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
             progress: bool = False):
    """Bayes-optimal error along a sweep of ``alpha`` (returns a :class:`Table`).

    Columns: ``alpha, mmse, q, alpha_pr, ridge_mse, alpha_lr, converged, iterations,
    residual`` (+ ``mmse_str, q_str, digits_confirmed`` with ``precision``).
    ``mmse`` is ``1 - q``, the ``mmse`` column of the paper's CSVs (bsr.md 2).
    """
    from ..core.progress import progress_bar
    from ..core.table import Table

    beta, rho, delta = check_params(beta, rho, delta)
    alphas = np.atleast_1d(np.asarray(alpha, dtype=float))
    for a in alphas:
        validate.real("alpha", a, low=0)
    t0 = time.perf_counter()
    pts = [bo_point(a, beta, rho, delta, precision=precision)
           for a in progress_bar(alphas, desc="BSR BO curve", enabled=progress)]
    cols = ["alpha", "beta", "rho", "delta", "mmse", "q", "alpha_pr", "ridge_mse", "alpha_lr",
            "converged", "iterations", "residual"]
    if precision is not None:
        cols += ["mmse_str", "q_str", "digits_confirmed"]
    data = {c: [asdict(p)[c] for p in pts] for c in cols}
    import symtheory

    meta = {"model": "bsr", "quantity": "Bayes-optimal error 1-q (bsr.md 3)",
            "beta": beta, "rho": rho, "delta": delta, "precision": precision,
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
        hh = a / (delta + v)
        return float(th.low_rank_v(hh, t)[0]) if hh * (1 + beta) > t else 1.0

    if a <= a_weak:
        return LowRankPoint(a, beta, delta, 1.0, 0.0, a_weak, True, 0, 0.0)
    if delta == 0 and a >= th.low_rank_strong - ALPHA_PR_TOL:
        return LowRankPoint(a, beta, delta, 0.0, 1.0, a_weak, True, 0, 0.0)
    res = positive_fixed_point(err, 1.0, xtol=1e-15, name=f"low-rank overlap at alpha_lr={a}")
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

    ``R`` is ``d x L`` (either orientation; ``rho = r/min(d, L)``).  Singular values
    ``sigma`` of ``Y = R/(dL)^(1/4)`` are mapped by the generated kernel of
    ``xi(x) = x - (2D/sqrt(beta)) [(beta-1)/(2x) + H(x)]``, with ``H`` the Hilbert
    transform of the asymptotic law at noise ``D`` (also outside its support).
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
    d, L = sorted(R.shape)
    beta = L / d
    return theory().rie.denoise(R, (math.sqrt(beta), rho, D), (d * L) ** 0.25,
                                divergence=divergence)


def rie_singular_values(sigma, beta, rho, D, *, derivative: bool = False):
    """The RIE map ``xi(sigma)`` on singular values of ``Y`` (``beta >= 1``), and
    optionally ``xi'(sigma) = d xi/dx + d xi/dH H'(sigma)`` (derived symbolically;
    ``H' = Re G'`` by implicit differentiation of the law's polynomial)."""
    return theory().rie.singular_values(sigma, (math.sqrt(beta), rho, D), derivative=derivative)
