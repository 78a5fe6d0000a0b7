"""BSR's compiled kernels, closed forms and the float64 spectral path of ``mmse_RIE``.

The symbolic declarations of :mod:`symtheory.bsr.model` compiled once per process
(:func:`theory`), the closed forms that need a cancellation-free quadratic root
(:func:`symtheory.core.roots.quadratic_roots`), and the spectral path of bsr.md 3.2:
``int mu/x^2 = -G'(0)`` in closed form, ``int mu^3`` by quadrature; its error from the
quadrature, from the drift of the computed mass and second moment off their exact
values (a wrong support shows there), and from the rounding of the cancelling sum.

Convention (package notation, docs/theory/README.md): ``rho = r/d`` for every
``beta = L/d``; ``beta < 1`` is the transposed problem ``(1/beta, rho/beta)``
(bsr.md 14.1, :func:`canonical`).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from ..core import validate
from ..core.codegen import Kernel, KernelSet
from ..core.functionals import LinearSpectralFunctional
from ..core.roots import EPS, Estimate, quadratic_roots
from ..core.spectral import AlgebraicSpectralLaw
from ..glm.factors.spectral_priors import RectangularRIE
from . import model as M

_THEORY = None

# safety factors of the spectral error estimate (validated against mpmath in
# tests/bsr/test_bsr_edges.py): drift of mass/moment -> relative error of int mu^3,
# and units of rounding of the cancelling sum D - c1 I1 - c2 I2
DRIFT_FACTOR = 8.0
ROUNDING_FACTOR = 64.0
# relative accuracy assumed of a quadrature value at best (its integrand comes from
# quartic roots): the change between tanh-sinh levels can fall below it
QUADRATURE_FLOOR = 256 * EPS
# beyond this drift of the mass or second moment the density is wrong, not inaccurate
DRIFT_MAX = 1e-7


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
    def spectral(self, t, rho, D) -> Estimate:
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
            return Estimate(value=math.nan, method="spectral", message=f"spectral path failed: {exc}")
        n = len(self.quadrature_indices)
        mass, m2 = res.values[n], res.values[n + 1]
        drift = max(abs(mass / exact_mass - 1.0), abs(m2 / exact_m2 - 1.0), EPS)
        if not drift <= DRIFT_MAX:
            # a bulk lost or misplaced: its share of int mu^3 is not proportional to
            # what was computed (a narrow bulk has a large mu), no estimate holds
            return Estimate(value=math.nan, method="spectral",
                            message=f"spectral path lost mass: relative drift {drift:.2g}")
        terms = np.abs(coeffs * ints)
        error = sum(abs(coeffs[i]) * (errs[i] + (DRIFT_FACTOR * drift + QUADRATURE_FLOOR)
                                      * abs(ints[i]))
                    for i in self.quadrature_indices)
        error += ROUNDING_FACTOR * EPS * (abs(D) + float(terms.sum()) + abs(value))
        if not (math.isfinite(value) and math.isfinite(error)):
            return Estimate(value=math.nan, method="spectral", message="spectral path not finite")
        return Estimate(value=value, error=error, method="spectral")



def theory() -> BSRTheory:
    """Return the BSR kernels and solvers, built once per process.

    The symbolic declarations of :mod:`symtheory.bsr.model` compiled to kernels (cached
    on disk after the first build); the functions of :mod:`symtheory.bsr` call it.

    Returns
    -------
    BSRTheory
        The process's kernel holder.

    Examples
    --------
    >>> from symtheory import bsr
    >>> bsr.theory() is bsr.theory()
    True
    """
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
    """Return the canonical orientation ``(beta >= 1, rho)`` of a BSR problem (bsr.md 14.1).

    With ``rho = r/d``: swapping ``d <-> L`` gives ``beta' = d/L = 1/beta`` and
    ``rho' = r/L = rho/beta``; ``alpha = n/(dL)`` is unchanged.

    Parameters
    ----------
    beta : float
        Token ratio ``L/d`` (> 0).
    rho : float
        Rank ratio ``r/d`` (> 0).

    Returns
    -------
    tuple of float
        ``(beta, rho)`` with ``beta >= 1``.

    Examples
    --------
    >>> from symtheory import bsr
    >>> bsr.canonical(0.5, 0.25)
    (2.0, 0.5)
    >>> bsr.canonical(2.0, 0.5)
    (2.0, 0.5)
    """
    if beta < 1.0:
        return 1.0 / beta, rho / beta
    return beta, rho


