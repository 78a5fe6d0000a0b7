"""Scalar state evolution for matrix estimation with a rotation-invariant prior.

Generalized matrix sensing with a rotation-invariant prior on ``S`` and ``K``
isotropic linear measurements per sample (aim.md 3.3; bsr.md 3.1 has the same form):

    q_hat = c alpha E[ ||g_out(y, sqrt(q) eta, V)||^2 ],    V = Q0 - q,
    q     = Q0 - mmse(1/q_hat),

``mmse(D)`` the denoising MMSE of the prior (e.g. :class:`.spectral_priors.SymmetricRIE`),
``c`` the number of measurements per unit ``alpha`` and parameter (``c = 2`` for a
symmetric ``d x d`` matrix sensed ``alpha d^2`` times: ``d^2/2`` parameters).  The
engine is written in the error ``v = Q0 - q`` (no cancellation near perfect
recovery):

    v = mmse(1/q_hat(v)),

solved by a bracketed root (:func:`core.solvers.positive_fixed_point`), by damped
iteration from the uninformative point (aim.md 3.3), or to any number of digits with
mpmath (:func:`core.solvers.refine_root_mp`, confirmed at twice the digits).

An output channel enters only through ``E||g_out||^2`` as a function of ``(q, V)``
(method ``fisher``).  :class:`LinearRankChannel` is the closed form of channels that
reveal a rank-``k`` linear image of the indices (aim.md 3.4): ``E||g_out||^2 =
k/(V + sigma^2)``; its rank is derived from the link by :func:`jacobian_rank`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy as sp

from ..core import validate
from ..core.solvers import (ConvergenceWarning, NoBracketError, PrecisionRoot, SolverResult,
                            fixed_point, positive_fixed_point, refine_root_mp)


# ---------------------------------------------------------------------- channels
@dataclass(frozen=True)
class LinkRank:
    """Rank of a link's Jacobian and its kernel (see :func:`jacobian_rank`)."""

    rank: int
    n_inputs: int
    kernel: np.ndarray         # orthonormal basis of the common kernel, shape (n_inputs, n - rank)
    singular_gap: float        # min over points of log10(smallest kept / largest dropped)
    kernel_constant: bool      # the kernel is the same subspace at every probe point


def jacobian_rank(outputs, inputs, *, points: int = 3, dps: int = 40, seed: int = 0,
                  scale: float = 1.0) -> LinkRank:
    """Rank of ``d outputs / d inputs`` at random points, in mpmath at ``dps`` digits.

    The Jacobian is differentiated by SymPy and evaluated at ``points`` Gaussian points
    (standard deviation ``scale``); singular values below ``10^(-dps/2)`` times the
    largest count as zero.  The rank is the generic rank (the same at every point is
    required), and ``kernel_constant`` reports whether the null space is one fixed
    subspace -- then the link factors through the projection onto its orthogonal
    complement, the condition of the linear-rank closed form (aim.md 3.4).
    """
    import mpmath

    inputs = list(inputs)
    J = sp.Matrix(outputs).jacobian(inputs)
    f = sp.lambdify(inputs, J, "mpmath")
    rng = np.random.default_rng(seed)
    ranks, gaps, kernels = [], [], []
    with mpmath.workdps(dps):
        cut = mpmath.mpf(10) ** (-dps // 2)
        for _ in range(points):
            vals = [mpmath.mpf(repr(float(v))) for v in scale * rng.standard_normal(len(inputs))]
            M = mpmath.matrix(f(*vals))
            _, s, Vt = mpmath.svd_r(M, full_matrices=True)
            n_sv = min(M.rows, M.cols)
            sv = [s[i] for i in range(n_sv)] + [mpmath.mpf(0)] * (M.cols - n_sv)
            top = max(sv) if sv else mpmath.mpf(0)
            keep = [x for x in sv if x > cut * top]
            drop = [x for x in sv if x <= cut * top]
            r = len(keep)
            ranks.append(r)
            if drop and keep:
                floor = max(max(drop), mpmath.mpf(10) ** (-dps))
                gaps.append(float(mpmath.log10(min(keep) / floor)))
            else:
                gaps.append(float(dps))
            order = sorted(range(len(sv)), key=lambda i: -sv[i])
            null = [order[i] for i in range(r, len(sv))]
            kernels.append(np.array([[float(Vt[i, j]) for i in null] for j in range(M.cols)])
                           .reshape(M.cols, len(null)))
    if len(set(ranks)) != 1:
        raise ValueError(f"Jacobian rank differs between random points: {ranks}")
    K0 = kernels[0]
    constant = True
    for Kp in kernels[1:]:
        # same subspace: projecting one basis on the other loses nothing
        if K0.shape[1] and np.max(np.abs(K0 @ (K0.T @ Kp) - Kp)) > 1e-10:
            constant = False
    return LinkRank(ranks[0], len(inputs), K0, min(gaps), constant)


class LinearRankChannel:
    """Output channel revealing ``P u`` (rank ``k``) of ``K`` isotropic indices ``u``,
    through isotropic Gaussian noise of variance ``noise`` per index (aim.md 3.4).

    ``g_out = P^T (P P^T)^{-1} (P u* - P omega)/(V + noise)`` (``u*`` any preimage of the
    observation), so ``E||g_out||^2 = k/(V + noise)`` in closed form.
    """

    def __init__(self, rank: int, n_indices: int, noise: float = 0.0,
                 kernel: np.ndarray | None = None):
        self.rank = validate.integer("rank", rank, low=0)
        self.n_indices = validate.integer("n_indices", n_indices, low=1)
        if self.rank > self.n_indices:
            raise validate.ParameterError(f"rank must be <= n_indices = {n_indices}, got {rank}")
        self.noise = validate.real("noise", noise, low=0)
        if kernel is None:
            kernel = np.zeros((n_indices, n_indices - self.rank))
        self.kernel = np.asarray(kernel, dtype=float)
        if self.kernel.shape != (self.n_indices, self.n_indices - self.rank):
            raise validate.ParameterError(f"kernel must have shape ({n_indices}, "
                                          f"{n_indices - self.rank}), got {self.kernel.shape}")

    @classmethod
    def from_link(cls, link: LinkRank, noise: float = 0.0) -> "LinearRankChannel":
        if not link.kernel_constant:
            raise ValueError("the link's Jacobian kernel varies: not a linear-rank channel")
        return cls(link.rank, link.n_inputs, noise, link.kernel)

    def fisher(self, q, V) -> float:
        """``E ||g_out||^2 = k/(V + noise)`` (independent of ``q``)."""
        den = V + self.noise
        if self.rank == 0:
            return 0.0
        return self.rank / den if den > 0 else math.inf

    def gout(self, u_star: np.ndarray, omega: np.ndarray, V) -> np.ndarray:
        """``g_out`` for rows of preimages ``u*`` and means ``omega`` (shape ``(n, K)``):
        the component orthogonal to the link's kernel, over ``V + noise``."""
        diff = np.asarray(u_star, dtype=float) - np.asarray(omega, dtype=float)
        proj = diff - (diff @ self.kernel) @ self.kernel.T
        return proj / (V + self.noise)


# ---------------------------------------------------------------------- engine
class ScalarSpectralSE:
    """``v = mmse(1/q_hat(v))``: the scalar spectral state evolution (module docstring).

    Parameters
    ----------
    mmse:
        The prior's denoising MMSE as a function of the noise variance ``D``.
    fisher:
        ``(q, V) -> E||g_out||^2`` of the output channel.
    alpha:
        Sample ratio; ``sample_factor * alpha * fisher`` is ``q_hat``.
    Q0, v_max:
        ``(1/d) Tr S^2`` and the error of the uninformative estimate (``Q0 - mean^2``);
        ``v`` lives in ``[0, v_max]`` and ``q = Q0 - v``.
    """

    def __init__(self, mmse: Callable[[float], float], fisher: Callable[[float, float], float],
                 alpha: float, *, Q0: float, v_max: float, sample_factor: float = 2.0,
                 name: str = "spectral SE"):
        self.mmse = mmse
        self.fisher = fisher
        self.alpha = validate.real("alpha", alpha, low=0)
        self.Q0 = float(Q0)
        self.v_max = float(v_max)
        self.c = float(sample_factor)
        self.name = name

    def qhat(self, v: float) -> float:
        return self.c * self.alpha * self.fisher(self.Q0 - v, v)

    def error_map(self, v: float) -> float:
        """``v -> mmse(1/q_hat(v))`` (``v_max`` when nothing is learned)."""
        qh = self.qhat(v)
        if qh <= 0:
            return self.v_max
        return self.mmse(1.0 / qh)

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
        (aim.md 3.3).  Where several fixed points exist this reaches the one attracting
        the uninformative start (the bracketed root may differ)."""
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


# ---------------------------------------------------------------------- quadrature channels
def projected_fisher(score: Callable, outcomes, C0, q: float, V: float, *,
                     step: float = 0.1, reach: float = 12.0) -> float:
    """``E ||g_out||^2`` of a channel that sees the indices only through a projection
    ``m = P u`` (dimension ``p`` = 1 or 2; aim.md 3.3, 3.6), with ``C0 = P P^T``,
    ``omega ~ N(0, q I_K)`` and ``g_out = P^T grad_m log Z_out``:

        sum_y int N(m; 0, q C0) Z(y, m, V) (grad_m log Z)^T C0 (grad_m log Z) dm,

    over the discrete outputs ``outcomes`` (rows).  ``score(y_rows, m_rows, V) ->
    (log Z, grad_m log Z)`` (outputs are distributed as ``Z``, so ``E_y`` is the sum
    weighted by ``Z``).  Quadrature: a tensor trapezoid rule in ``t`` with
    ``m_i = a_i sinh(t)`` (exponentially convergent for analytic integrands), ``a_i =
    sigma_i min(sqrt(V), sqrt(q))/2`` resolving the output's jumps smeared over
    ``sqrt(V)`` as well as the Gaussian of width ``sqrt(q)``, out to ``reach`` standard
    deviations of ``m``.  (Gauss-Hermite in ``m`` fails when ``q >> V``: the integrand
    then has fronts much narrower than its node spacing.)
    """
    C0 = np.atleast_2d(np.asarray(C0, dtype=float))
    p = C0.shape[0]
    outcomes = np.atleast_2d(outcomes)
    sig = np.sqrt(np.diag(C0))
    if q <= 0:
        m = np.zeros((1, p))
        weight = np.ones(1)
    else:
        axes, dms = [], []
        for i in range(p):
            a = 0.5 * sig[i] * min(math.sqrt(V), math.sqrt(q))
            t_max = math.asinh(reach * math.sqrt(q) * sig[i] / a)
            n = 2 * math.ceil(t_max / step) + 1
            t = np.linspace(-t_max, t_max, n)
            axes.append(a * np.sinh(t))
            dms.append(a * np.cosh(t) * (t[1] - t[0]))
        m = np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)
        dm = np.prod(np.stack([g.ravel() for g in np.meshgrid(*dms, indexing="ij")]), axis=0)
        cov = q * C0
        prec = np.linalg.inv(cov)
        dens = (np.exp(-0.5 * np.einsum("ni,ij,nj->n", m, prec, m))
                / math.sqrt((2 * math.pi) ** p * np.linalg.det(cov)))
        weight = dens * dm
    total = 0.0
    for y in outcomes:
        logZ, grad = score(np.broadcast_to(y, (len(m), len(y))), m, V)
        quad_form = np.einsum("ni,ij,nj->n", grad, C0, grad)
        total += float(np.sum(weight * np.exp(logZ) * quad_form))
    return total
