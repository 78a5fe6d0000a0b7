"""Rotation-invariant symmetric matrix priors: denoising law, symmetric RIE and its MMSE.

A family declares the spectral law of a symmetric matrix ``S`` (an
:class:`~symtheory.core.freeprob.AlgebraicStieltjes` relation for its eigenvalues) and
gets, derived symbolically and generated into kernels:

* the law of the eigenvalues of the observation ``Y = S + sqrt(D) Z``, ``Z`` a GOE
  matrix with semicircle on ``[-2, 2]`` (off-diagonal variance ``1/d``), as the free
  additive convolution with a semicircle (R-transforms add,
  :func:`freeprob.free_additive_convolution_semicircle`);
* its support (real roots of the factored discriminant: several bulks are possible),
  density ``mu = Im G(x - i0)/pi`` and Hilbert transform ``H = Re G(x - i0)``, with the
  physical branch ``G(x) = int mu(t)/(x - t) dt`` outside the support;
* the symmetric rotation-invariant estimator (Bun, Allez, Bouchaud & Potters, IEEE TIT
  62 (2016); arXiv:2506.01582): ``S_hat = sum_i xi(lambda_i) v_i v_i^T`` with
  ``xi(x) = x - 2 D H(x)``, the Bayes-optimal posterior mean for rotation-invariant
  priors;
* its MMSE per entry, ``mmse(D) = (1/d) E||S_hat - S||_F^2``, from the Nishimori form
  ``Q0 - int xi^2 mu`` (``Q0 = (1/d) Tr S^2``) reduced by the spectral identities of
  :mod:`symtheory.core.functionals` to ``D - (4 pi^2/3) D^2 int mu^3`` (arXiv:2506.01582;
  both forms are generated, the unreduced one is the test's independent path).

This mirrors :class:`symtheory.glm.factors.spectral_priors.RectangularRIE` for symmetric matrices.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

import numpy as np
import sympy as sp

from ...core import freeprob, functionals
from ...core.codegen import Kernel
from ...core.functionals import LinearSpectralFunctional
from ...core.spectral import AlgebraicSpectralLaw, SpectralAccuracyWarning
from .prior import Prior

#: tightest relative accuracy asked of a spectral integral (a few units of rounding)
_RTOL_FLOOR = 1e-15

#: symbols of the spectral integrands (x, density, Hilbert transform)
x, mu, H = sp.symbols("x mu H", real=True)


def derive_symmetric_rie(law: freeprob.AlgebraicStieltjes, D: sp.Symbol, params) -> dict:
    """Symbolic objects of denoising ``S`` (eigenvalue law ``law``) from ``S + sqrt(D) Z``.

    Returns a dict: ``P`` (polynomial ``P(G, z)`` of the observation's Cauchy transform),
    ``G``, ``z``, ``edges`` (polynomial in ``z`` whose real roots contain the edges),
    ``prior_moments`` / ``observation_moments`` (``E[t^k]``, ``k = 0..2``, from the
    large-``z`` expansions), ``xi`` (the RIE map in ``x``, ``H``, ``D``), ``mmse`` (the
    reduced Nishimori form) and ``integrals`` (its remaining integral symbols).
    """
    params = tuple(params)
    G, z = sp.symbols("G z")
    obs = freeprob.free_additive_convolution_semicircle(law, D, params=params + (D,))
    P = _cauchy_form(obs, G, z)
    P_prior = _cauchy_form(law, G, z)
    edges = freeprob.edge_polynomial(P, G, z)
    prior_moments = [sp.factor(m) for m in freeprob.large_z_moments(P_prior, G, z, 2)]
    obs_moments = [sp.factor(m) for m in freeprob.large_z_moments(P, G, z, 2)]
    xi = x - 2 * D * H
    reduced, remaining = functionals.reduce_integral(mu * xi**2, x, mu, H,
                                                     moments=obs_moments)
    mmse = sp.expand(prior_moments[2] - reduced)
    return {"P": P, "G": G, "z": z, "edges": edges, "prior_P": P_prior,
            "prior_moments": prior_moments, "observation_moments": obs_moments, "xi": xi,
            "mmse": sp.collect(mmse, list(remaining)), "integrals": remaining,
            "observation": obs}


def _cauchy_form(law: freeprob.AlgebraicStieltjes, G, z):
    """``law.poly`` in the Cauchy convention ``G = -s``, ``z = u``."""
    return sp.expand(law.poly.subs({law.s: -G, law.u: z}, simultaneous=True))


class SymmetricRIE:
    """Bayes-optimal denoising of a rotation-invariant symmetric matrix (arXiv:2506.01582).

    ``derived`` is the output of :func:`derive_symmetric_rie`; ``params`` the prior
    law's parameter symbols and ``D`` the noise variance symbol.  Numeric calls take
    ``law_params`` (values of ``params``) and ``D``.
    """

    def __init__(self, name: str, derived: dict, params, D: sp.Symbol):
        self.name = name
        self.params = tuple(params)
        self.D = D
        self.derived = derived
        self.law = AlgebraicSpectralLaw(derived["P"], derived["G"], derived["z"],
                                        self.params + (D,), derived["edges"], name=f"{name}_obs")
        self.mmse_functional = LinearSpectralFunctional(self.law, "rie_mmse", derived["mmse"],
                                                        derived["integrals"], x, mu, H)
        Q0 = derived["prior_moments"][2]
        I_direct = sp.Symbol("I[mu*xi^2]")
        self.nishimori_functional = LinearSpectralFunctional(
            self.law, "rie_mmse_nishimori", Q0 - I_direct, {I_direct: mu * derived["xi"]**2},
            x, mu, H)
        self.moment_kernel = Kernel(f"{name}_prior_moments", self.params,
                                    list(derived["prior_moments"][1:]),
                                    doc="mean and second moment of the prior eigenvalue law")
        xi = derived["xi"]
        self.xi_kernel = Kernel(f"{name}_rie_xi", (x, H, D), [xi, sp.diff(xi, x), sp.diff(xi, H)],
                                vector_args=(x, H),
                                doc="symmetric RIE map xi(x, H) and its partial derivatives")

    def kernels(self):
        """Every kernel this prior generates (for a :class:`KernelSet` report)."""
        f, n = self.mmse_functional, self.nishimori_functional
        return [self.law.coeff_kernel, self.law.edge_kernel, f.value_kernel, f.coeff_kernel,
                f.integrand_kernel, n.value_kernel, n.coeff_kernel, self.moment_kernel,
                self.xi_kernel]

    # ------------------------------------------------------------- moments
    def mean(self, *law_params) -> float:
        """``(1/d) Tr S`` (first moment of the prior law)."""
        return float(self.moment_kernel(*law_params)[0])

    def second_moment(self, *law_params) -> float:
        """``Q0 = (1/d) Tr S^2``."""
        return float(self.moment_kernel(*law_params)[1])

    # ------------------------------------------------------------- MMSE
    def _functional(self, law_params, D, form):
        if form == "auto":
            # the reduced form cancels ~D/mmse digits, the Nishimori form ~Q0/mmse: take
            # the better-conditioned one (both are exact; tests check they agree)
            form = "reduced" if D <= self.second_moment(*law_params) else "nishimori"
        if form == "reduced":
            return self.mmse_functional
        if form == "nishimori":
            return self.nishimori_functional
        raise ValueError(f"form must be 'auto', 'reduced' or 'nishimori', got {form!r}")

    def mmse_value(self, law_params, D, *, rtol=1e-11, form="auto"):
        """Denoising MMSE per entry at noise ``D`` with its propagated error estimate (a
        ``FunctionalValue``).  ``form``: ``reduced`` = ``D - (4 pi^2/3) D^2 int mu^3``,
        ``nishimori`` = ``Q0 - int xi^2 mu`` (arXiv:2506.01582), ``auto`` = the better
        conditioned of the two (reduced for ``D <= Q0``)."""
        fun = self._functional(law_params, D, form)
        params = tuple(law_params) + (D,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpectralAccuracyWarning)
            val = fun.evaluate(params, rtol=rtol)
        if val.converged:
            return val
        # both forms cancel when mmse << D and mmse << Q0 (small noise against a large
        # spread, or a few large spikes): refine the integrals by the missing factor
        # (tanh-sinh converges double exponentially: one or two more levels)
        tighter = max(rtol * rtol * abs(val.value) / max(val.error, 1e-300), _RTOL_FLOOR)
        return fun.evaluate(params, rtol=tighter)

    def mmse(self, law_params, D, *, rtol=1e-11, form="auto") -> float:
        """``mmse(D)`` (arXiv:2506.01582); see :meth:`mmse_value`."""
        return self.mmse_value(law_params, D, rtol=rtol, form=form).value

    def mmse_mp(self, law_params, D, *, dps=30, form="auto"):
        """:meth:`mmse` in mpmath at ``dps`` digits (tanh-sinh, polyroots): the
        independent high-precision path.  Parameters may be ``mpf``."""
        fun = self._functional([float(p) for p in law_params], float(D), form)
        return fun.evaluate_mp(tuple(law_params) + (D,), dps=dps)

    # ------------------------------------------------------------- the law of Y
    def support(self, law_params, D):
        return self.law.support(*law_params, D)

    def density(self, xs, law_params, D) -> np.ndarray:
        return self.law.density(xs, *law_params, D)

    def stieltjes(self, xs, law_params, D) -> np.ndarray:
        """``G(x - i0)``: density branch inside the support, the physical real branch
        ``int mu(t)/(x - t) dt`` outside it."""
        return self.law.stieltjes(xs, *law_params, D)

    def hilbert(self, xs, law_params, D) -> np.ndarray:
        return self.law.hilbert(xs, *law_params, D)

    # ------------------------------------------------------------- the denoiser
    def eigenvalue_map(self, lam, law_params, D, *, derivative: bool = False):
        """``xi(lambda) = lambda - 2 D H(lambda)`` on eigenvalues (any real values; outside
        the limiting support ``H`` is the physical branch), and optionally
        ``xi'(lambda) = d xi/dx + d xi/dH H'(lambda)`` (``H' = Re G'`` by implicit
        differentiation of the law's polynomial)."""
        lam = np.asarray(lam, dtype=float)
        params = tuple(law_params) + (D,)
        sup = self.law.support(*params)
        G = self.law.stieltjes(lam, *params, support=sup)
        out = self.xi_kernel.vec(lam, G.real, float(D))
        if not derivative:
            return out[:, 0]
        Hp = self.law.stieltjes_derivative(lam, *params, G=G).real
        return out[:, 0], out[:, 1] + out[:, 2] * Hp

    def divergence(self, R, law_params, D) -> float:
        """Symmetric-matrix divergence ``sum_{i <= j} d S_hat_ij/d R_ij`` of the RIE
        (derivatives along the free coordinates of a symmetric matrix, ``R_ij = R_ji``
        moved together), by the Daleckii-Krein formula:

            sum_i xi'(lambda_i) + sum_{i < j} (xi(lambda_i) - xi(lambda_j))/(lambda_i - lambda_j)

        (the GAMP-RIE Onsager coefficient of arXiv:2506.01582: ``V = 2 D div/d^2`` in units where
        ``R = S + sqrt(D) Z``).  Nearly equal eigenvalue pairs use ``xi'`` at their mean."""
        R = np.asarray(R, dtype=float)
        lam = np.linalg.eigvalsh(0.5 * (R + R.T))
        f, fp = self.eigenvalue_map(lam, law_params, D, derivative=True)
        dl = lam[:, None] - lam[None, :]
        df = f[:, None] - f[None, :]
        close = np.abs(dl) < 1e-9 * max(1.0, float(np.max(np.abs(lam))))
        mean_fp = 0.5 * (fp[:, None] + fp[None, :])
        ratio = np.where(close, mean_fp, df / np.where(close, 1.0, dl))
        iu = np.triu_indices(len(lam), 1)
        return float(np.sum(fp) + np.sum(ratio[iu]))

    def denoise(self, R, law_params, D) -> np.ndarray:
        """``S_hat = V diag(xi(lambda)) V^T`` for a symmetric observation ``R = S +
        sqrt(D) Z`` whose eigenvalues follow the observation law."""
        R = np.asarray(R, dtype=float)
        lam, V = np.linalg.eigh(0.5 * (R + R.T))
        return (V * self.eigenvalue_map(lam, law_params, D)) @ V.T


class SpectralPrior(Prior):
    """A rotation-invariant matrix prior seen through its denoising MMSE: ``mmse(D)`` per
    entry of ``S`` observed as ``S + sqrt(D) Z``, its second moment ``Q0 = (1/d) Tr S^2``
    and its known mean ``m`` (``E S = m I``).  The state evolution's prior map is

        q = Q0 - mmse(1/q_hat),       the error ``Q0 - q = mmse(1/q_hat)``,

    (the I-MMSE form of a Gaussian scalar channel of signal-to-noise ``q_hat`` on the
    matrix entries; Boncoraglio et al., arXiv:2506.01582; Erba et al., arXiv:2410.18858),
    with ``v_max = Q0 - m^2`` the error at ``q_hat = 0``.  ``mmse`` is e.g.
    :meth:`SymmetricRIE.mmse` at the prior's law parameters."""

    def __init__(self, mmse: Callable[[float], float], second_moment: float, mean: float = 0.0,
                 *, name: str = "spectral prior"):
        self.mmse, self.name = mmse, name
        self.Q0, self.mean = float(second_moment), float(mean)
        self.v_max = self.Q0 - self.mean ** 2
        if not (math.isfinite(self.v_max) and self.v_max > 0):
            raise ValueError(f"{name}: needs Q0 > mean^2 (a random matrix), got Q0 = {self.Q0}, "
                             f"mean = {self.mean}")

    def error(self, qhat: float) -> float:
        """``Q0 - q = mmse(1/q_hat)`` (``v_max`` when ``q_hat <= 0``: nothing learned)."""
        return self.v_max if qhat <= 0 else self.mmse(1.0 / qhat)

    def rho(self, P):
        if P != 1:
            raise ValueError(f"{self.name} is the prior of one matrix (P = 1), got P = {P}")
        return np.array([[self.Q0]])

    def overlap_map(self, Qhat):
        return np.array([[self.Q0 - self.error(float(np.asarray(Qhat).reshape(-1)[0]))]])


class LayerwiseMatrixPrior(Prior):
    """Independent rotation-invariant priors on ``L`` matrices ``S_1..S_L`` with known
    means ``m_l I``, as the prior channel of a multi-index state evolution
    (:class:`symtheory.glm.se.state_evolution.StateEvolution`; deep AIM of arXiv:2506.01582).

    The indices of layer ``l`` are ``u^(l)_k = Tr(G^k S_l)`` with unit sensing matrices
    ``G^k`` shared by the layers; ``S_l = m_l I + (S_l - m_l I)`` splits each into the
    known part ``m_l Tr G^k`` (the same standard Gaussian ``zeta_k`` for every layer) and
    independent fluctuations.  Hence, with ``Q0_l = (1/d) Tr S_l^2``, the index covariance
    and the overlap matrix of the state evolution are

        rho_ll = Q0_l,   rho_lm = m_l m_m,      Q_ll = q_l,   Q_lm = m_l m_m  (l != m),

    so ``V = rho - Q = diag(Q0_l - q_l)`` and ``omega = Q^{1/2} xi`` has the law of the deep
    AIM (``omega^(l) = m_l zeta + sqrt(q_l - m_l^2) eta^(l)``).  The prior map decouples
    (deep AIM of arXiv:2506.01582):

        q_l = Q0_l - mmse_l(1/q_hat_l),    q_hat_l = c Q_hat_ll,

    ``c`` = measurements per unit ``alpha`` and parameter (``c = 2`` for a symmetric ``d x
    d`` matrix sensed ``alpha d^2`` times, state evolution of arXiv:2506.01582), ``Q_hat =
    alpha E[g g^T]`` from the SE; the off-diagonal of ``Q_hat`` carries no information
    (independent priors).  Below ``q_hat_l = SMALL_SNR`` the small-signal expansion ``q_l -
    m_l^2 = var_l^2 q_hat_l + O(q_hat_l^2)`` (``var_l = Q0_l - m_l^2``, I-MMSE) replaces
    ``mmse_l`` (its spectral integral loses relative accuracy as ``D -> inf``).

    ``layers``: one :class:`SpectralPrior` per layer (its ``mmse``, ``Q0`` and mean).
    """

    #: below this q_hat the small-signal expansion of the prior map is used (error <= 1e-16)
    SMALL_SNR = 1e-8

    def __init__(self, layers, *, measurements: float = 2.0):
        self.layers = list(layers)
        L = len(self.layers)
        if L < 1:
            raise ValueError("the prior needs one SpectralPrior per layer (at least one layer)")
        if not all(isinstance(layer, SpectralPrior) for layer in self.layers):
            raise ValueError("layers must be SpectralPrior objects")
        self.mmse = [layer.mmse for layer in self.layers]
        self.Q0 = np.array([layer.Q0 for layer in self.layers])
        self.means = np.array([layer.mean for layer in self.layers])
        self.var = self.Q0 - self.means ** 2
        if not (np.isfinite(measurements) and measurements > 0):
            raise ValueError(f"measurements must be finite and > 0, got {measurements}")
        self.c = float(measurements)

    def rho(self, P):
        if P != len(self.mmse):
            raise ValueError(f"the prior has {len(self.mmse)} layers, the model {P} rows")
        out = np.outer(self.means, self.means)
        np.fill_diagonal(out, self.Q0)
        return out

    def uninformed(self) -> np.ndarray:
        """The overlap at zero information, ``Q = m m^T`` (the SE's uninformed start)."""
        return np.outer(self.means, self.means)

    def layer_overlap(self, l: int, qhat: float) -> float:
        """``q_l(q_hat_l)`` of one layer."""
        if not (np.isfinite(qhat) and qhat >= 0):
            raise ValueError(f"q_hat of layer {l} must be finite and >= 0, got {qhat}")
        if qhat < self.SMALL_SNR:
            return float(self.means[l] ** 2 + self.var[l] ** 2 * qhat)
        return float(self.Q0[l] - self.mmse[l](1.0 / qhat))

    def overlap_map(self, Qhat: np.ndarray) -> np.ndarray:
        Qhat = np.asarray(Qhat, dtype=float)
        out = np.outer(self.means, self.means)
        for l in range(len(self.mmse)):
            qh = float(Qhat[l, l])
            # a PSD Q_hat (the SE projects it) has a diagonal >= 0 up to rounding
            out[l, l] = self.layer_overlap(l, self.c * (0.0 if -1e-12 < qh < 0 else qh))
        return out



class RectangularRIE:
    """Rotation-invariant estimator (RIE) of a rectangular matrix from a noisy observation.

    The prior of ``S`` is bi-rotation invariant; the observation is ``R = S + sqrt(D) Z``.
    The Bayes-optimal spectral denoiser keeps the singular vectors of ``Y = R/scale``
    and maps each singular value by ``xi(x, H(x))``, ``H`` the Hilbert transform of the
    asymptotic symmetrized singular-value law of ``Y`` (Troiani et al., arXiv:2203.07752).
    The family declares ``law`` (an :class:`~symtheory.core.spectral.AlgebraicSpectralLaw`)
    and ``xi`` (SymPy, in ``x``, ``H`` and the law's parameters); this class generates
    ``xi`` and its partial derivatives, evaluates ``H`` on and off the support, and
    returns the exact divergence of the finite-size denoiser (Onsager term of GAMP).
    """

    def __init__(self, name, law, xi, x, H, params):
        self.law = law
        self.params = tuple(params)
        used = tuple(p for p in self.params if p in xi.free_symbols)
        self._xi_params = used
        self._index = [self.params.index(p) for p in used]
        self.kernel = Kernel(f"{name}_rie_xi", (x, H) + used,
                             [xi, sp.diff(xi, x), sp.diff(xi, H)], vector_args=(x, H),
                             doc="RIE singular-value map xi(x, H) and its partial derivatives")

    def singular_values(self, sigma, law_params, *, derivative: bool = False):
        """``xi(sigma)`` at the law's parameters, and optionally the total derivative
        ``xi'(sigma) = d xi/dx + d xi/dH H'(sigma)`` (``H' = Re G'`` by implicit
        differentiation of the law's polynomial)."""
        sigma = np.asarray(sigma, dtype=float)
        sup = self.law.support(*law_params)
        G = self.law.stieltjes(sigma, *law_params, support=sup)
        out = self.kernel.vec(sigma, G.real, *[law_params[i] for i in self._index])
        if not derivative:
            return out[:, 0]
        Hp = self.law.stieltjes_derivative(sigma, *law_params, G=G).real
        return out[:, 0], out[:, 1] + out[:, 2] * Hp

    def denoise(self, R, law_params, scale: float, *, divergence: bool = False):
        """Estimate of ``S`` from ``R`` (any orientation; the law is for the wide one).

        ``scale`` normalizes ``R`` to ``Y = R/scale`` whose singular values follow the
        law.  With ``divergence=True`` also returns ``sum_ij dS_hat_ij/dR_ij`` (exact,
        from the spectral-estimator formula and ``xi'``).
        """
        R = np.asarray(R, dtype=float)
        transposed = R.shape[0] > R.shape[1]
        X = R.T if transposed else R
        m, n = X.shape
        U, s, Vt = np.linalg.svd(X / scale, full_matrices=False)
        xi, dxi = self.singular_values(s, law_params, derivative=True)
        S = scale * (U * xi) @ Vt
        S = S.T if transposed else S
        if not divergence:
            return S
        # F(R) has singular map f(sigma_R) = scale xi(sigma_R/scale), f' = xi'
        return S, spectral_divergence(scale * s, scale * xi, dxi, m, n)


def spectral_divergence(sigma, f, fprime, m: int, n: int) -> float:
    """Divergence ``sum_ij dF_ij/dR_ij`` of ``R -> U diag(f(sigma)) V^T`` (``R`` m x n,
    m <= n) at a matrix with singular values ``sigma`` (Candes, Sing-Long & Trzasko, IEEE
    TSP 61 (2013), Thm. IV.3)::

        div F = sum_i f'(sigma_i) + (n - m) sum_i f(sigma_i)/sigma_i
                + 2 sum_{i != j} sigma_i f(sigma_i)/(sigma_i^2 - sigma_j^2)

    -- the Onsager term of message passing with a spectral denoiser."""
    sigma = np.asarray(sigma, dtype=float)
    f = np.asarray(f, dtype=float)
    if m > n:
        m, n = n, m
    s2 = sigma**2
    diff = s2[:, None] - s2[None, :]
    np.fill_diagonal(diff, np.inf)
    cross = 2.0 * np.sum((sigma * f)[:, None] / diff)
    return float(np.sum(fprime) + (n - m) * np.sum(f / sigma) + cross)
