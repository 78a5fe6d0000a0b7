"""Linearized state evolution: weak-recovery and grand-staircase thresholds.

Implements smi.md Sec. 7-8 (Theorem 2.3, Eqs. 15-18 of arXiv:2502.00901; the staircase
of Troiani et al., arXiv:2405.15480) for any declared multi-index model with tokens and
the Gaussian prior:

* the output Jacobian at the trivial point, ``J_{am,bn}(y) = d g_out/d omega`` at
  ``omega = 0, V = rho = I``, which is ``E[z_am z_bn | y] - delta_ab delta_mn`` from the
  posterior second moments (smi.md 8.1);
* the linear operator (Eq. 15) ``F(Gamma)_{ab} = E_y sum_{m,n,c,d} J_{am,cn} Gamma_{cd}
  J_{bm,dn}`` as a tensor ``T[a, b, c, d]`` and its matrix on the orthonormal basis of
  symmetric matrices (smi.md 8.2), composed with the prior's Jacobian at ``Q_hat = 0``;
* the trivial-subspace test (``E[Z|y] != 0`` on a set of positive measure -> the span of
  ``E_y sum_m E[z_m|y] E[z_m|y]^T`` is learnable at any ``alpha > 0``, ``alpha_c = 0``);
* ``alpha_c = 1 / lambda_max`` (Eq. 16) and the learnable subspace (a PSD eigenvector,
  by power iteration from ``I`` on the cone, smi.md 8.2);
* the staircase (Eqs. 17-18, smi.md 8.4): the fixed point ``Q*(alpha)`` on the learned
  rows, the operator at that point restricted to the remaining rows and the ``alpha``
  at which it becomes unstable.

The expectation over ``y`` is computed deterministically where the dimension allows:

``observation grid`` (deterministic links with a :class:`DeterministicReduction`)
    ``y`` depends on ``Z`` only through ``E = T(u) h^T`` (smi.md 9), so
    ``E_y f(y) = int dE p(E) f(y(E))`` over the ``M r`` coordinates of ``E`` (2-D for the
    two-layer attention instead of the 4-D ``Z``).  The density of ``E`` is the
    channel's own normalizer, ``p(E) = |det dphi/dE| Z_phi(phi(E)) / K`` with ``phi`` the
    inversion features and ``K`` the number of branches, so one quadrature pass over the
    free rows gives both ``p`` and the posterior moments.  The outer rule is the
    (offset) midpoint rule on a box of ``width`` times the largest singular value of
    ``T(u)`` -- spectrally accurate for this smooth, Gaussian-tailed integrand; when
    ``T`` is constant ``E`` is Gaussian and a Gauss-Hermite rule in ``h`` is used.
    Everything is computed from ``E`` (features, branches, Jacobians), never from ``y``,
    so saturated outputs (softmax entries rounding to 0 or 1) cost no accuracy.
``cells`` (links that are functions of the signs of products of indices, e.g.
    ``sign(z1 z2)``): ``g`` is constant on the boxes cut by the zeros of the factors; the
    Gaussian moments of each box are products of 1-D interval moments (mpmath
    quadrature); noiseless outputs give a finite sum, Gaussian output noise a 1-D
    integral over ``y`` (mpmath, split at the cell values).
``scalar quadrature`` (one index, one output, Gaussian output noise): nested adaptive
    mpmath quadrature, the inner integral split at the SymPy preimages of ``y`` and the
    outer one at the critical values of the link.
``monte carlo`` (anything else): frozen Gaussian samples through the model's channel;
    error bar by batch means (heavy tails: the spread of batch means, not of samples).

Precision (``precision=P``): the same computation at ``P + 10`` digits and again at
``2 P + 10``; ``digits_confirmed`` is their number of agreeing digits.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import sympy as sp

from ..core.codegen import Kernel
from ..core.quadrature import TensorRule
from ..core.solvers import ConvergenceWarning, find_root
from ..core.validate import ParameterError
from ._posterior_rules import TEMPLATE as _POSTERIOR_TEMPLATE
from .priors import GaussianPrior

#: golden-section ratio (sqrt(5) - 1)/2 for the bracketing search
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


# ---------------------------------------------------------------------- linear algebra
def sym_basis(P: int):
    """Orthonormal basis of symmetric ``P x P`` matrices (Frobenius): ``E_aa`` and
    ``(E_ab + E_ba)/sqrt(2)``, a < b (smi.md 8.2).  Returns ``(labels, matrices)``."""
    labels, mats = [], []
    for a in range(P):
        for b in range(a, P):
            B = np.zeros((P, P))
            if a == b:
                B[a, a] = 1.0
            else:
                B[a, b] = B[b, a] = 1.0 / math.sqrt(2.0)
            labels.append((a, b))
            mats.append(B)
    return labels, np.array(mats)


def operator_matrix(T: np.ndarray) -> np.ndarray:
    """Matrix of ``Gamma -> F(Gamma)_{ab} = sum_cd T[a,b,c,d] Gamma_cd`` on :func:`sym_basis`."""
    P = T.shape[0]
    _, B = sym_basis(P)
    return np.einsum("iab,abcd,jcd->ij", B, T, B)


def prior_jacobian(prior, P: int) -> np.ndarray:
    """Jacobian of the prior map ``Q = F_prior(Q_hat)`` at ``Q_hat = 0`` on :func:`sym_basis`.

    smi.md 8.1: ``Q^{t+1} ~ rho (dF/dqhat(0)) Q_hat rho`` -- for a rotation-invariant
    prior the matrix function of its scalar overlap map has derivative ``F'(0) Gamma``
    at 0 (Daleckii-Krein: all divided differences at the eigenvalue 0 equal ``F'(0)``).
    ``F'(0)`` is the derived derivative of the prior's scalar map (1 for N(0, 1), i.e.
    ``d/dQ_hat [Q_hat (I + Q_hat)^{-1}] = I`` at 0)."""
    slope = float(prior._kernel.vec(np.zeros(1))[0, 1])
    rho = prior.rho(P)
    _, B = sym_basis(P)
    return slope * np.einsum("iab,ac,jcd,db->ij", B, rho, B, rho)


def tensor_from_jacobians(J: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``T[a,b,c,d] = sum_i w_i sum_{m,n} J_i[a,m,c,n] J_i[b,m,d,n]`` (Eq. 15)."""
    return np.einsum("i,iamcn,ibmdn->abcd", w, J, J, optimize=True)


def top_eigen(A: np.ndarray, P: int):
    """Largest eigenvalue of the operator matrix ``A`` and a PSD eigenvector.

    Power iteration with a shift from ``I`` keeps the iterate in the PSD cone (``F``
    maps the cone into itself, smi.md 8.2); with a degenerate top eigenvalue it
    converges to the projection of ``I`` on the top eigenspace."""
    A = 0.5 * (A + A.T)
    lam, vecs = np.linalg.eigh(A)
    lmax = float(lam[-1])
    labels, B = sym_basis(P)
    shift = max(0.0, -float(lam[0])) + 1e-3 * max(abs(lmax), 1e-300)
    x = np.array([1.0 if a == b else 0.0 for a, b in labels])
    top = np.abs(lam - lmax) <= 1e-9 * max(abs(lmax), 1e-300)
    proj = vecs[:, top] @ (vecs[:, top].T @ x)
    if np.linalg.norm(proj) > 1e-8:
        v = proj
    else:
        v = x
        for _ in range(2000):
            v = A @ v + shift * v
            v /= np.linalg.norm(v)
    G = np.einsum("i,iab->ab", v, B)
    if np.trace(G) < 0:
        G = -G
    G /= np.linalg.norm(G)
    return lmax, G, lam


# ---------------------------------------------------------------------- result types
@dataclass
class ThresholdResult:
    """A threshold with its error estimate and how it was computed.

    ``alpha`` (``0`` for a trivial subspace, ``inf`` if nothing is learnable),
    ``error`` (estimated absolute error of ``alpha``), ``method``, ``subspace`` (PSD
    ``P x P`` matrix spanning the learnable directions, unit Frobenius norm),
    ``eigenvalue`` (``lambda_max`` of prior Jacobian o F), ``converged``, ``message``,
    ``digits_confirmed`` (precision runs), ``details`` (resolutions, operator, ...)."""

    kind: str
    alpha: object
    error: float
    method: str
    subspace: np.ndarray
    eigenvalue: object
    converged: bool
    message: str
    digits_confirmed: float | None = None
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def row(self):
        return {"kind": self.kind, "alpha": float(self.alpha), "error": float(self.error),
                "method": self.method,
                "digits_confirmed": (float("nan") if self.digits_confirmed is None
                                     else float(self.digits_confirmed))}


@dataclass
class LinearizedOperator:
    """Eq. (15) at the trivial point: tensor ``T``, its matrix ``F`` on the symmetric
    basis, the trivial-subspace statistic ``first = E_y sum_m E[z_m|y] E[z_m|y]^T`` and
    quadrature diagnostics."""

    T: np.ndarray
    matrix: np.ndarray
    first: np.ndarray
    method: str
    mass: float
    details: dict = field(default_factory=dict)


# ---------------------------------------------------------------------- reduced channels
@dataclass(frozen=True)
class PeakTensorRule:
    """The peak-following mixture rule of :mod:`._posterior_rules` for a reduced link: the
    Gaussian marginal of the free rows (weight ``prior_weight``) plus Gaussians at up to
    ``max_peaks`` maxima of the integrand (Newton from given starts and the best prior
    nodes; covariance ``inflate^2 (-H + prior precision)^{-1}``), each integrated by
    ``tensor`` over its share ``h_c = (pi_c N_c)^power / sum_c' (pi_c' N_c')^power`` of the
    integrand (the power heuristic of multiple importance sampling; ``power = 1`` is the
    balance heuristic ``pi_c N_c / q``).  Exact for any mixture, since the shares sum to 1
    (the peaks make the integrand smooth where the free rows' posterior is far narrower
    than their prior, e.g. both layers nearly known).  ``power = 2`` keeps the prior
    component away from the peaks it would otherwise sample at its own scale: at a peak
    its share is ``pi_0 N_0 / (pi_p N_p)`` under the balance heuristic and the square of
    that under ``power = 2``, so the chance hits of its nodes, which made the per-sample
    error scale with ``prior_weight`` (skip 100, alpha = 1: 0.037-0.057 at weight 0.1),
    now scale with its square (measured 0.0035 / 4.8e-4 / 6.8e-5 at weight 0.1 / 0.03 /
    0.01).  Far from the peaks the prior's share is ~1 at any weight, so modes the peak
    search misses are covered as before.  ``refined`` / ``coarsened`` change the nodes per
    component, so the a-posteriori error estimates of
    :class:`~symtheory.core.quadrature.TensorRule` carry over.  Not for a posterior that
    concentrates on a curve rather than at points: at skip 1 with row 1 nearly known
    (q = 0.995) 15-80 nodes per component stay 1-8% off a brute-force grid per sample
    (measured; the SE does not switch where an even row sits at 0, and its change against
    1.5x the nodes shows it)."""

    tensor: TensorRule = field(default_factory=lambda: TensorRule("gauss-hermite", 15))
    max_peaks: int = 2
    inflate: float = 1.5
    prior_weight: float = 0.01
    power: float = 2.0

    def __post_init__(self):
        if not isinstance(self.tensor, TensorRule):
            raise ParameterError(f"tensor must be a TensorRule, got {self.tensor!r}")
        if isinstance(self.max_peaks, bool) or int(self.max_peaks) != self.max_peaks or \
                self.max_peaks < 1:
            raise ParameterError(f"max_peaks must be an integer >= 1, got {self.max_peaks!r}")
        if not self.inflate >= 1:
            raise ParameterError(f"inflate must be >= 1, got {self.inflate}")
        if not 0 < self.prior_weight < 1:
            raise ParameterError(f"prior_weight must be in (0, 1), got {self.prior_weight}")
        # above 4 the shares turn steep between components and the change against 1.5x
        # the nodes understates the error up to 3.6x (max over samples, brute-force grid,
        # 300 random settings; <= 1.8x for powers in [1, 4])
        if not 1 <= self.power <= 4:
            raise ParameterError(f"power must be in [1, 4], got {self.power}")

    @property
    def n(self) -> int:
        return self.tensor.n

    def refined(self, factor: float = 2.0):
        return replace(self, tensor=self.tensor.refined(factor))

    def coarsened(self):
        return replace(self, tensor=self.tensor.coarsened())

    def describe(self) -> str:
        return (f"peak-following mixture (prior + up to {self.max_peaks} Newton peaks, "
                f"{self.tensor.describe()} each, power-{self.power:g} shares)")


class ReducedPosterior:
    """Posterior moments of a reduced deterministic link in inversion-feature coordinates.

    From the model's :class:`DeterministicReduction`: features ``phi(E)`` (the declared
    inversion features, else the observed head entries), their Jacobian
    ``det dphi/dE``, the branches ``E^(k)(phi)`` solved by SymPy, and the mixing ``T(u)``
    with a generated Numba driver (:mod:`._posterior_rules`) that integrates over the
    free rows with a prior rule or a peak-following mixture rule.  A branch is valid when
    it reproduces all features (or the whole head) to 1e-9 relative and its Jacobian is
    finite and non-zero.
    """

    _cache: dict = {}

    def __new__(cls, model):
        key = id(model)
        if key not in cls._cache:
            cls._cache[key] = super().__new__(cls)
            cls._cache[key]._init(model)
        return cls._cache[key]

    def _init(self, model):
        red = model.reduction
        if red is None:
            raise ParameterError(f"model {model.name!r} has no DeterministicReduction")
        self.model = model
        self.P, self.M = model.P, model.M
        self.free_rows = tuple(model.free_rows)
        self.solved_rows = tuple(model.solved_rows)
        self.r = len(self.solved_rows)
        E = list(red.E)
        if red.features:
            feats = [fe for _, fe in red.features]
            check = list(feats)
        else:
            feats = [red.head[i, j] for i, j in red.observed]
            check = list(red.head)
        phis = sp.symbols(f"phi0:{len(feats)}", real=True)
        sols = sp.solve([f - p for f, p in zip(feats, phis)], E, dict=True)
        if not sols:
            raise ValueError(f"SymPy found no inversion branch for {model.name!r}")
        branches = []
        for sol in sols:
            Ek = [sp.sympify(sol.get(e, e)) for e in E]
            if any(set(x.free_symbols) & set(E) for x in Ek):
                raise ValueError("inversion left the system underdetermined")
            branches.append(Ek)
        self.n_branches = len(branches)
        det = sp.Matrix(feats).jacobian(sp.Matrix(E)).det()
        pars = list(model.param_symbols)
        self.pars = np.array([float(v) for v in model.params.values()], dtype=float)
        self.n_feat, self.n_check = len(feats), len(check)
        self.feature_kernel = Kernel(
            f"lin_{model.name}_features", E + pars, feats + [det] + check, vector_args=E,
            doc=f"inversion features phi(E), det dphi/dE and check values of {model.name}")
        self.branch_kernel = Kernel(
            f"lin_{model.name}_fbranches", list(phis) + pars, [e for Ek in branches for e in Ek],
            vector_args=list(phis), doc=f"branches E^(k)(phi) of {model.name}")
        M = self.M
        u_syms = [model.indices[a, m] for a in self.free_rows for m in range(M)]
        self.u_syms = u_syms
        call = ", ".join([f"u[{a}, {m}]" for a in range(len(self.free_rows)) for m in range(M)]
                         + [f"pars[{i}]" for i in range(len(pars))] + ["tout"])
        self.mixing_kernel = Kernel(
            f"lin_{model.name}_mixing", u_syms + pars, list(red.mixing), vector_args=u_syms,
            doc=f"mixing T(u) of {model.name} and its posterior-rule driver",
            extra_imports=("symtheory.core._moments_nb",),
            extra_source=_POSTERIOR_TEMPLATE.replace("CALL_ARGS", call))
        self.constant_mixing = not (red.mixing.free_symbols & set(u_syms))

    # ------------------------------------------------------------------ pieces
    def mixing(self, u):
        """``T(u)`` for ``u`` of shape ``(n, p_free, M)`` -> ``(n, M, M)``."""
        n = u.shape[0]
        M = self.M
        if not self.u_syms:
            T = np.array(self.model.reduction.mixing.subs(self.model.params), dtype=float)
            return np.broadcast_to(T, (n, M, M)).copy()
        cols = [u[:, a, m] for a in range(len(self.free_rows)) for m in range(M)]
        return self.mixing_kernel.vec(*cols, *self.pars).reshape(n, M, M)

    def E_of_Z(self, Z):
        """``E = T(u) h^T`` (``(n, M r)``, row-major) for index samples ``Z (n, P, M)``."""
        u = Z[:, list(self.free_rows), :]
        h = Z[:, list(self.solved_rows), :]
        T = self.mixing(u)
        return np.einsum("smk,sqk->smq", T, h).reshape(len(Z), -1)

    def branches(self, E):
        """For ``E (n, M r)``: all branches ``(n, K, M r)``, their log-weights
        ``-log|det dphi/dE(E^k)|``, validity, and ``log|det dphi/dE(E)|``."""
        E = np.ascontiguousarray(E, dtype=float)
        n, Mr = E.shape
        cols = [E[:, i] for i in range(Mr)]
        fe = self.feature_kernel.vec(*cols, *self.pars)
        phi = fe[:, :self.n_feat]
        logdet0 = np.log(np.abs(fe[:, self.n_feat]))
        ref = fe[:, self.n_feat + 1:]
        with np.errstate(all="ignore"):
            Eb = self.branch_kernel.vec(*[phi[:, i] for i in range(self.n_feat)], *self.pars)
        Eb = Eb.reshape(n, self.n_branches, Mr)
        valid = np.zeros((n, self.n_branches), dtype=np.int64)
        lw = np.zeros((n, self.n_branches))
        scale = 1.0 + np.abs(ref)
        for k in range(self.n_branches):
            Ek = Eb[:, k, :]
            ok = np.all(np.isfinite(Ek), axis=1)
            Es = np.where(ok[:, None], Ek, 0.0)
            fk = self.feature_kernel.vec(*[Es[:, i] for i in range(Mr)], *self.pars)
            detk = np.abs(fk[:, self.n_feat])
            resid = np.max(np.abs(fk[:, self.n_feat + 1:] - ref) / scale, axis=1)
            ok &= (resid <= 1e-9) & np.isfinite(detk) & (detk > 0)
            valid[:, k] = ok
            lw[:, k] = np.where(ok, -np.log(np.where(ok, detk, 1.0)), 0.0)
        Eb = np.where(np.isfinite(Eb), Eb, 0.0)
        return np.ascontiguousarray(Eb), lw, valid, logdet0

    def posterior(self, Ebr, lw, valid, omega, V, rule: TensorRule, *, starts=None,
                  max_peaks=0, inflate=1.5, prior_weight=0.01, power=2.0):
        """``(log Z_phi (n,), E[Z] (n, P, M), Cov (n, PM, PM), peaks (n,))``.

        ``omega (n, P, M)``, ``V`` (P x P, positive definite).  ``max_peaks > 0`` turns
        on the peak-following mixture rule (``starts (n, k, p_free M)``: points in
        ``u``, e.g. the true free rows of a generated sample); a :class:`PeakTensorRule`
        as ``rule`` gives it its tensor rule and settings."""
        if not isinstance(rule, PeakTensorRule) and max_peaks:
            # the settings given one by one are checked as the rule's (by name)
            rule = PeakTensorRule(rule, max_peaks, inflate, prior_weight, power)
        if isinstance(rule, PeakTensorRule):
            max_peaks, inflate, prior_weight = rule.max_peaks, rule.inflate, rule.prior_weight
            power = rule.power
            rule = rule.tensor
        P, M = self.P, self.M
        free, solved = list(self.free_rows), list(self.solved_rows)
        omega = np.ascontiguousarray(omega, dtype=float)
        n = omega.shape[0]
        V = 0.5 * (np.asarray(V, dtype=float) + np.asarray(V, dtype=float).T)
        Vhh = V[np.ix_(solved, solved)]
        if free:
            Vuu = V[np.ix_(free, free)]
            Vhu = V[np.ix_(solved, free)]
            Luu = np.linalg.cholesky(Vuu)
            Vuu_inv = np.linalg.inv(Vuu)
            logdet_Vuu = float(np.linalg.slogdet(Vuu)[1])
            B = Vhu @ Vuu_inv
            C = Vhh - B @ Vhu.T
        else:
            Luu = np.zeros((0, 0))
            Vuu_inv = np.zeros((0, 0))
            logdet_Vuu = 0.0
            B = np.zeros((self.r, 0))
            C = Vhh
        C = 0.5 * (C + C.T)
        Cinv = np.linalg.inv(C)
        logdetC = float(np.linalg.slogdet(C)[1])
        dfree = len(free) * M
        tn, tw = rule.nodes(dfree)
        if starts is None:
            starts = np.zeros((n, 0, max(dfree, 1)))
        logZ = np.empty(n)
        mean = np.empty((n, P * M))
        cov = np.empty((n, P * M, P * M))
        peaks = np.zeros(n, dtype=np.int64)
        common = (Ebr, lw, valid, omega, self.pars, np.array(free, dtype=np.int64),
                  np.array(solved, dtype=np.int64), np.ascontiguousarray(Luu),
                  np.ascontiguousarray(Vuu_inv), logdet_Vuu, np.ascontiguousarray(B),
                  np.ascontiguousarray(Cinv), logdetC)
        if max_peaks and dfree:
            # separate driver: Numba compiles the Newton search only when it is used
            drive = self.mixing_kernel.extra("{name}_posterior")
            drive(*common, np.ascontiguousarray(starts, dtype=float), tn, tw, int(max_peaks),
                  float(inflate), float(prior_weight), float(power), 1e-4, logZ, mean, cov,
                  peaks)
        else:
            drive = self.mixing_kernel.extra("{name}_posterior_prior")
            drive(*common, tn, tw, logZ, mean, cov)
        return logZ, mean.reshape(n, P, M), cov, peaks

    # ------------------------------------------------------------------ prior grid
    def sigma_max(self, rule: TensorRule) -> float:
        """Largest singular value of ``T(u)`` over the rule's nodes for ``u ~ N(0, I)``."""
        if self.constant_mixing:
            T = self.mixing(np.zeros((1, len(self.free_rows), self.M)))[0]
            return float(np.linalg.norm(T, 2))
        tn, tw = rule.nodes(len(self.free_rows) * self.M)
        keep = tw > 1e-14 * tw.max()
        u = tn[keep].reshape(-1, len(self.free_rows), self.M)
        T = self.mixing(u)
        return float(np.max(np.linalg.norm(T, 2, axis=(1, 2))))

    def prior_nodes(self, n_outer: int, width: float, rule: TensorRule):
        """Outer nodes ``E`` and weights for ``E_y`` at the prior (module docstring).
        Returns ``(E, weights, posterior tuple, info)``."""
        M, r, P = self.M, self.r, self.P
        Mr = M * r
        if self.constant_mixing:
            # E = T h^T with h ~ N(0, I): Gauss-Hermite in h is exact for polynomials
            x, wx = TensorRule("gauss-hermite", n_outer).one_dim()
            grids = np.meshgrid(*([x] * Mr), indexing="ij")
            wgrids = np.meshgrid(*([wx] * Mr), indexing="ij")
            H = np.stack([g.ravel() for g in grids], axis=1)      # rows: h^T entries (m, q)
            w = np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)
            T = self.mixing(np.zeros((1, len(self.free_rows), M)))[0]
            E = np.einsum("mk,skq->smq", T, H.reshape(-1, M, r)).reshape(-1, Mr)
            Ebr, lw, valid, _ = self.branches(E)
            omega = np.zeros((len(E), P, M))
            post = self.posterior(Ebr, lw, valid, omega, np.eye(P), rule)
            ok = np.isfinite(post[0]) & (valid.sum(axis=1) > 0)
            return E, np.where(ok, w, 0.0), post, {"outer": f"gauss-hermite {n_outer}^{Mr} in h",
                                                   "failed": int((~ok).sum()), "mass": float(w[ok].sum())}
        smax = self.sigma_max(rule)
        half = width * smax
        step = 2 * half / n_outer
        base = -half + (np.arange(n_outer) + 0.5) * step
        # a different irrational offset per axis keeps nodes off the hyperplanes E_i = E_j
        # and E_i = 0, where the inversion degenerates (measure zero, ill-conditioned)
        axes = [base + (((k + 1) * GOLDEN) % 1.0 - 0.5) * 0.5 * step for k in range(Mr)]
        grids = np.meshgrid(*axes, indexing="ij")
        E = np.stack([g.ravel() for g in grids], axis=1)
        Ebr, lw, valid, logdet0 = self.branches(E)
        omega = np.zeros((len(E), P, M))
        post = self.posterior(Ebr, lw, valid, omega, np.eye(P), rule)
        K = valid.sum(axis=1)
        with np.errstate(all="ignore"):
            w = np.exp(logdet0 + post[0]) / K * step ** Mr
        ok = np.isfinite(w) & (K > 0)
        w = np.where(ok, w, 0.0)
        return E, w, post, {"outer": f"midpoint {n_outer}^{Mr} on |E| <= {half:.4g}",
                            "failed": int((~ok).sum()), "mass": float(w.sum()),
                            "sigma_max": smax}


def _operator_from_nodes(w, post, P, M):
    """Tensor ``T`` (Eq. 15), first-moment statistic ``E_y sum_m E[z_m|y] E[z_m|y]^T`` and
    the largest cross-group entry of ``J`` from weighted posterior moments at ``V = I``:
    ``J = Cov(Z|y) - I`` (smi.md 3 at omega = 0, V = I)."""
    _, mean, cov = post[:3]
    keep = w > 0
    mean, cov, w = mean[keep], cov[keep], w[keep]
    J = (cov - np.eye(P * M)[None]).reshape(-1, P, M, P, M)
    return tensor_from_jacobians(J, w), np.einsum("s,sam,sbm->ab", w, mean, mean), J


def _observation_grid(model, *, outer_nodes, width, rule):
    """Eq. (15) over the observation grid (module docstring) at one resolution."""
    rp = ReducedPosterior(model)
    _, w, post, info = rp.prior_nodes(outer_nodes, width, rule)
    T, first, J = _operator_from_nodes(w, post, model.P, model.M)
    cross = 0.0
    groups = model.row_groups
    for g1 in groups:
        for g2 in groups:
            if g1 != g2:
                cross = max(cross, float(np.max(np.abs(J[:, list(g1)][:, :, :, list(g2)]))))
    info = dict(info, cross_group_max=cross, rule=f"{rule.kind} {rule.n}")
    return T, first, info


# ---------------------------------------------------------------------- sign-type links
def sign_cells(model):
    """Cells of a link that is a function of signs (``sign``/``Heaviside`` of products of
    univariate factors of the indices), or ``None``.

    Returns ``(cuts, boxes)``: ``cuts[i]`` the sorted real zeros (SymPy numbers) of the
    factors in index ``i`` (flattened ``a M + m``), ``boxes`` a list of ``(intervals,
    y)`` with one interval per index and the (constant) output on the box."""
    import itertools

    link = model.link.xreplace(model.params)
    idx = list(model.indices)
    atoms = set()
    for e in link:
        atoms |= e.atoms(sp.sign) | e.atoms(sp.Heaviside)
    if not atoms:
        return None
    reps = {a: sp.Dummy() for a in atoms}
    if any(e.xreplace(reps).free_symbols & set(idx) for e in link):
        return None
    cuts = {z: set() for z in idx}
    for a in atoms:
        _, factors = sp.factor_list(a.args[0])
        for f, _mult in factors:
            fs = f.free_symbols
            if len(fs) != 1 or not fs <= set(idx):
                return None
            z = next(iter(fs))
            poly = sp.Poly(f, z)
            cuts[z].update(poly.real_roots())
    intervals = []
    for z in idx:
        c = sorted(cuts[z], key=lambda v: float(v))
        ends = [-sp.oo] + c + [sp.oo]
        intervals.append(list(zip(ends[:-1], ends[1:])))
    boxes = []
    for box in itertools.product(*intervals):
        rep = {}
        for z, (lo, hi) in zip(idx, box):
            if lo == -sp.oo and hi == sp.oo:
                rep[z] = sp.Integer(0)
            elif lo == -sp.oo:
                rep[z] = hi - 1
            elif hi == sp.oo:
                rep[z] = lo + 1
            else:
                rep[z] = (lo + hi) / 2
        y = tuple(sp.nsimplify(e.xreplace(rep)) for e in link)
        if any(v.free_symbols for v in y):
            return None
        boxes.append((box, y))
    return [sorted(cuts[z], key=lambda v: float(v)) for z in idx], boxes


def _interval_moments(lo, hi, dps):
    """``(E[1_I], E[z 1_I], E[z^2 1_I])`` for ``z ~ N(0, 1)`` by mpmath quadrature."""
    import mpmath

    with mpmath.workdps(dps):
        a = -mpmath.inf if lo == -sp.oo else mpmath.mpf(sp.N(lo, dps + 5))
        b = mpmath.inf if hi == sp.oo else mpmath.mpf(sp.N(hi, dps + 5))
        c = 1 / mpmath.sqrt(2 * mpmath.pi)
        return [mpmath.quad(lambda t, k=k: t ** k * c * mpmath.exp(-t * t / 2), [a, b])
                for k in range(3)]


def _cell_moments(boxes, d, dps):
    """Per distinct output value: ``(P(y), E[Z 1_y], E[Z Z^T 1_y])`` (mpmath)."""
    import mpmath

    cache = {}
    cells = {}
    with mpmath.workdps(dps):
        for box, y in boxes:
            ms = []
            for lo, hi in box:
                if (lo, hi) not in cache:
                    cache[(lo, hi)] = _interval_moments(lo, hi, dps)
                ms.append(cache[(lo, hi)])
            m0 = [m[0] for m in ms]
            p = mpmath.fprod(m0)
            mean = mpmath.matrix(d, 1)
            sec = mpmath.matrix(d, d)
            for i in range(d):
                others = mpmath.fprod(m0[k] for k in range(d) if k != i)
                mean[i] = ms[i][1] * others
                sec[i, i] = ms[i][2] * others
                for j in range(i):
                    rest = mpmath.fprod(m0[k] for k in range(d) if k not in (i, j))
                    sec[i, j] = sec[j, i] = ms[i][1] * ms[j][1] * rest
            if y in cells:
                P0, m1, m2 = cells[y]
                cells[y] = (P0 + p, m1 + mean, m2 + sec)
            else:
                cells[y] = (p, mean, sec)
    return cells


def _mp_tensor_from_cov(cov, P, M, weight):
    """``weight * sum_{m,n} J[a,m,c,n] J[b,m,d,n]`` with ``J = cov - I`` (mpmath)."""
    import mpmath

    d = P * M
    J = cov - mpmath.eye(d)
    T = {}
    for a in range(P):
        for b in range(P):
            for c in range(P):
                for e in range(P):
                    T[a, b, c, e] = weight * mpmath.fsum(
                        J[a * M + m, c * M + n] * J[b * M + m, e * M + n]
                        for m in range(M) for n in range(M))
    return T


def _mp_first(mean, P, M, weight):
    import mpmath

    return {(a, b): weight * mpmath.fsum(mean[a * M + m] * mean[b * M + m] for m in range(M))
            for a in range(P) for b in range(P)}


def _cells_operator_mp(model, cells_spec, noise_variance, dps):
    """Eq. (15) for a sign-type link (mpmath at ``dps`` digits).  Returns ``(T, first)``
    as dicts of mpf; noiseless: a finite sum over output values; with Gaussian noise on
    a single output: ``int dy Z_out(y) f(y)`` by mpmath quadrature split at the values."""
    import mpmath

    P, M = model.P, model.M
    d = P * M
    _, boxes = cells_spec
    with mpmath.workdps(dps):
        cells = _cell_moments(boxes, d, dps)
        keys = [(a, b, c, e) for a in range(P) for b in range(P) for c in range(P) for e in range(P)]
        if not noise_variance:
            T = {k: mpmath.mpf(0) for k in keys}
            first = {(a, b): mpmath.mpf(0) for a in range(P) for b in range(P)}
            for p, m1, m2 in cells.values():
                mean = m1 / p
                cov = m2 / p - mean * mean.T
                for k, v in _mp_tensor_from_cov(cov, P, M, p).items():
                    T[k] += v
                for k, v in _mp_first(mean, P, M, p).items():
                    first[k] += v
            return T, first
        if len(model.link) != 1:
            raise ParameterError("noisy sign-type links are supported for a single output")
        Delta = mpmath.mpf(noise_variance)
        values = sorted(cells)
        ys = [mpmath.mpf(sp.N(v[0], dps + 5)) for v in values]
        memo = {}

        def at(yv):
            if yv not in memo:
                lik = [mpmath.exp(-(yv - yk) ** 2 / (2 * Delta)) / mpmath.sqrt(2 * mpmath.pi * Delta)
                       for yk in ys]
                Z = mpmath.fsum(l * cells[v][0] for l, v in zip(lik, values))
                m1 = sum((cells[v][1] * l for l, v in zip(lik, values)), mpmath.matrix(d, 1))
                m2 = sum((cells[v][2] * l for l, v in zip(lik, values)), mpmath.matrix(d, d))
                mean = m1 / Z
                cov = m2 / Z - mean * mean.T
                memo[yv] = (_mp_tensor_from_cov(cov, P, M, Z), _mp_first(mean, P, M, Z))
            return memo[yv]

        pts = [-mpmath.inf] + sorted(set(ys)) + [mpmath.inf]
        T = {k: mpmath.quad(lambda yv, k=k: at(yv)[0][k], pts) for k in keys}
        first = {k: mpmath.quad(lambda yv, k=k: at(yv)[1][k], pts)
                 for k in [(a, b) for a in range(P) for b in range(P)]}
        return T, first


# ---------------------------------------------------------------------- scalar noisy links
def _scalar_breakpoints(model):
    """SymPy pieces of a one-index link ``g``: preimage branches ``z(y)``, kinks and
    critical points (inner splits) and their images (outer splits)."""
    z = model.indices[0, 0]
    g = model.link[0].xreplace(model.params)
    ysym = sp.Symbol("y_obs", real=True)
    try:
        pre = [sp.lambdify(ysym, s, "mpmath") for s in sp.solve(sp.Eq(g, ysym), z)]
    except (NotImplementedError, ValueError, TypeError):
        pre = []
    points = set()
    for a in g.atoms(sp.Abs, sp.Heaviside, sp.sign, sp.Max, sp.Min):
        for arg in a.args:
            if arg.free_symbols == {z}:
                try:
                    points.update(sp.Poly(arg, z).real_roots())
                except sp.PolynomialError:
                    pass
    try:
        crit = sp.solve(sp.diff(g, z), z)
        points.update(c for c in crit if c.is_real)
    except (NotImplementedError, ValueError, TypeError):
        pass
    points = sorted(points, key=lambda v: float(v))
    gl = sp.lambdify(z, g, "mpmath")
    return z, g, gl, pre, points


def _scalar_operator_mp(model, noise_variance, dps):
    """Eq. (15) for ``y = g(z) + sqrt(Delta) xi`` with one index and one output, by
    nested mpmath quadrature: inner over ``z`` split at the real preimages of ``y`` and
    the kinks, outer over ``y`` split at the images of kinks and critical points."""
    import mpmath

    _, g, gl, pre, points = _scalar_breakpoints(model)
    with mpmath.workdps(dps):
        Delta = mpmath.mpf(noise_variance)
        c = 1 / mpmath.sqrt(2 * mpmath.pi * Delta) / mpmath.sqrt(2 * mpmath.pi)
        kinks = [mpmath.mpf(sp.N(p, dps + 5)) for p in points]
        outer = sorted(set(gl(k) for k in kinks))

        def inner(yv):
            cuts = set(kinks)
            for f in pre:
                try:
                    v = f(yv)
                except (ValueError, ZeroDivisionError):
                    continue
                if isinstance(v, mpmath.mpc):
                    if abs(v.imag) > mpmath.mpf(10) ** (-dps) * (1 + abs(v)):
                        continue
                    v = v.real
                cuts.add(v)
            pts = [-mpmath.inf] + sorted(cuts) + [mpmath.inf]

            def dens(t):
                return c * mpmath.exp(-t * t / 2 - (yv - gl(t)) ** 2 / (2 * Delta))
            return [mpmath.quad(lambda t, k=k: t ** k * dens(t), pts) for k in range(3)]

        memo = {}

        def at(yv):
            if yv not in memo:
                N0, N1, N2 = inner(yv)
                mean = N1 / N0
                J = N2 / N0 - mean * mean - 1
                memo[yv] = (N0 * J * J, N0 * mean * mean)
            return memo[yv]

        pts = [-mpmath.inf] + outer + [mpmath.inf]
        T = mpmath.quad(lambda yv: at(yv)[0], pts)
        first = mpmath.quad(lambda yv: at(yv)[1], pts)
    return {(0, 0, 0, 0): T}, {(0, 0): first}


def _tanh_sinh_unit(level):
    """Tanh-sinh rule on ``[0, 1]`` as distances to the nearer end (accurate near both
    ends), a left/right flag and weights (Takahasi-Mori; cf. core.quadrature)."""
    from ..core.quadrature import T_MAX

    h = 2.0 ** (-level)
    kmax = int(np.floor(T_MAX / h))
    t = np.arange(-kmax, kmax + 1) * h
    u = 0.5 * np.pi * np.sinh(t)
    e = np.exp(-2.0 * np.abs(u))
    gap = e / (1.0 + e)
    w = h * 0.5 * np.pi * np.cosh(t) / (2.0 * np.cosh(u) ** 2)
    return gap, u < 0, w


def _split_nodes(cuts, level):
    """Nodes and weights of the tanh-sinh rule on every interval between consecutive
    ``cuts (n, k)`` (rows sorted; zero-length intervals contribute nothing)."""
    gap, left, w = _tanh_sinh_unit(level)
    a, b = cuts[:, :-1, None], cuts[:, 1:, None]
    L = b - a
    x = np.where(left, a + L * gap, b - L * gap)
    return x.reshape(len(cuts), -1), (L * w).reshape(len(cuts), -1)


def _scalar_operator_float(model, noise_variance, level, z_max=12.0):
    """Eq. (15) for ``y = g(z) + sqrt(Delta) xi`` (one index, one output) in float64:
    nested tanh-sinh, inner over ``|z| <= z_max`` (Gaussian mass outside ~1e-32) split at
    the kinks and the real preimages of ``y`` (SymPy), outer over ``y`` split at the
    images of kinks, critical points and ``z = +-(0.5, 1, 2, 3, 4, 6, 8)``.  Returns
    ``(T, first, mass)``."""
    z, g, _, pre, points = _scalar_breakpoints(model)
    gnum = sp.lambdify(z, g, "numpy")
    ysym = sp.Symbol("y_obs", real=True)
    pre_np = []
    try:
        pre_np = [sp.lambdify(ysym, s, "numpy") for s in sp.solve(sp.Eq(g, ysym), z)]
    except (NotImplementedError, ValueError, TypeError):
        pass
    Delta = float(noise_variance)
    sd = math.sqrt(Delta)
    kinks = np.array([float(p) for p in points if abs(float(p)) < z_max])
    zgrid = np.linspace(-z_max, z_max, 4001)
    gz = np.asarray(gnum(zgrid), dtype=float) * np.ones_like(zgrid)
    marks = np.concatenate([kinks, [0.5, 1, 2, 3, 4, 6, 8], [-0.5, -1, -2, -3, -4, -6, -8]])
    ymarks = np.asarray(gnum(marks), dtype=float) * np.ones_like(marks)
    y_lo, y_hi = gz.min() - 12 * sd, gz.max() + 12 * sd
    ycuts = np.unique(np.concatenate([[y_lo, y_hi], ymarks[(ymarks > y_lo) & (ymarks < y_hi)]]))
    Y, WY = _split_nodes(ycuts[None, :], level)
    Y, WY = Y[0], WY[0]
    # inner cuts per y: -z_max, kinks, real preimages, z_max (missing ones -> z_max)
    cols = [np.full_like(Y, -z_max), np.full_like(Y, z_max)] + [np.full_like(Y, k) for k in kinks]
    with np.errstate(all="ignore"):
        for f in pre_np:
            v = np.asarray(f(Y + 0j), dtype=complex) * np.ones_like(Y)
            real = np.abs(v.imag) <= 1e-12 * (1 + np.abs(v.real))
            vr = np.where(real & (np.abs(v.real) < z_max), v.real, z_max)
            cols.append(vr)
    cuts = np.sort(np.stack(cols, axis=1), axis=1)
    Zn, Wz = _split_nodes(cuts, level)
    gZ = np.asarray(gnum(Zn), dtype=float) * np.ones_like(Zn)
    logf = -0.5 * Zn ** 2 - (Y[:, None] - gZ) ** 2 / (2 * Delta)
    top = np.max(logf, axis=1, keepdims=True)
    f = np.exp(logf - top) * Wz
    N0 = f.sum(axis=1)
    mean = (f * Zn).sum(axis=1) / N0
    second = (f * Zn ** 2).sum(axis=1) / N0
    J = second - mean ** 2 - 1.0
    dens = N0 * np.exp(top[:, 0]) / (2 * math.pi * sd)
    T = float(np.sum(WY * dens * J * J))
    first = float(np.sum(WY * dens * mean * mean))
    mass = float(np.sum(WY * dens))
    return np.array(T).reshape(1, 1, 1, 1), np.array(first).reshape(1, 1), mass


# ---------------------------------------------------------------------- constant mixing, mpmath
def gauss_hermite_mp(n, dps):
    """Probabilists' Gauss-Hermite nodes and weights (``sum w f(x) ~ E f(N(0,1))``) at
    ``dps`` digits by Golub-Welsch: eigenvalues of the Jacobi matrix of the Hermite
    recurrence (off-diagonal ``sqrt(k)``) and squared first eigenvector components."""
    import mpmath

    with mpmath.workdps(dps):
        A = mpmath.matrix(n, n)
        for k in range(1, n):
            A[k, k - 1] = A[k - 1, k] = mpmath.sqrt(k)
        x, Q = mpmath.eigsy(A)
        return [x[i] for i in range(n)], [Q[0, i] ** 2 for i in range(n)]


def _constant_mixing_operator_mp(model, n, dps):
    """Eq. (15) for a reduced link without free rows, mpmath Gauss-Hermite ``n^{Mr}`` in
    ``h`` (exact for polynomial integrands); branches and Jacobians by the same SymPy
    expressions evaluated in mpmath (:meth:`Kernel.mp`)."""
    import itertools

    import mpmath

    rp = ReducedPosterior(model)
    P, M, r = model.P, model.M, rp.r
    d = P * M
    Mr = M * r
    with mpmath.workdps(dps):
        x, w = gauss_hermite_mp(n, dps)
        Tmix = mpmath.matrix(model.reduction.mixing.xreplace(model.params).evalf(dps + 5).tolist())
        Tinv = Tmix ** -1
        ldT = mpmath.log(abs(mpmath.det(Tmix)))
        pars = [mpmath.mpf(v) for v in rp.pars]
        tol = mpmath.mpf(10) ** (-(dps // 2))
        keys = [(a, b, c, e) for a in range(P) for b in range(P) for c in range(P) for e in range(P)]
        T = {k: mpmath.mpf(0) for k in keys}
        first = {(a, b): mpmath.mpf(0) for a in range(P) for b in range(P)}
        for combo in itertools.product(range(n), repeat=Mr):
            weight = mpmath.fprod(w[i] for i in combo)
            H = mpmath.matrix(M, r)
            for j, i in enumerate(combo):
                H[j // r, j % r] = x[i]
            E = Tmix * H
            Ef = [E[i // r, i % r] for i in range(Mr)]
            fe = rp.feature_kernel.mp(*Ef, *pars, dps=dps)
            phi, ref = fe[:rp.n_feat], fe[rp.n_feat + 1:]
            Eb = rp.branch_kernel.mp(*phi, *pars, dps=dps)
            pts, lws = [], []
            for k in range(rp.n_branches):
                Ek = Eb[k * Mr:(k + 1) * Mr]
                if any(isinstance(v, mpmath.mpc) and abs(v.imag) > tol for v in Ek):
                    continue
                Ek = [v.real if isinstance(v, mpmath.mpc) else v for v in Ek]
                fk = rp.feature_kernel.mp(*Ek, *pars, dps=dps)
                if any(abs(a - b) > tol * (1 + abs(b)) for a, b in zip(fk[rp.n_feat + 1:], ref)):
                    continue
                detk = abs(fk[rp.n_feat])
                if detk == 0:
                    continue
                X = Tinv * mpmath.matrix([[Ek[i * r + q] for q in range(r)] for i in range(M)])
                zvec = mpmath.matrix(d, 1)
                for q, a in enumerate(rp.solved_rows):
                    for m in range(M):
                        zvec[a * M + m] = X[m, q]
                sq = mpmath.fsum(X[m, q] ** 2 for m in range(M) for q in range(r))
                lws.append(-sq / 2 - r * ldT - mpmath.log(detk))
                pts.append(zvec)
            if not pts:
                raise ArithmeticError("no valid inversion branch at a quadrature node")
            top = max(lws)
            ws = [mpmath.exp(l - top) for l in lws]
            tot = mpmath.fsum(ws)
            mean = sum((p * (wk / tot) for p, wk in zip(pts, ws)), mpmath.matrix(d, 1))
            cov = sum(((p - mean) * (p - mean).T * (wk / tot) for p, wk in zip(pts, ws)),
                      mpmath.matrix(d, d))
            for k2, v in _mp_tensor_from_cov(cov, P, M, weight).items():
                T[k2] += v
            for k2, v in _mp_first(mean, P, M, weight).items():
                first[k2] += v
    return T, first


# ---------------------------------------------------------------------- Monte Carlo
def _monte_carlo_operator(model, noise_variance, samples, seed, rule, batches=20):
    """Eq. (15) by Monte Carlo over ``Z ~ N(0, I)`` (+ output noise) through the model's
    channel.  Returns per-batch tensors (heavy tails: the error bar is the spread of
    batch means, smi.md 11.8)."""
    P, M = model.P, model.M
    rng = np.random.default_rng(seed)
    ch = model.channel(noise_variance if noise_variance else None, rule)
    per_batch = max(2, int(samples) // batches)
    Ts, firsts = [], []
    for _ in range(batches):
        Z = rng.standard_normal((per_batch, P, M))
        y = model.g(Z).reshape(per_batch, -1)
        if noise_variance:
            y = y + math.sqrt(noise_variance) * rng.standard_normal(y.shape)
        _, mean, cov = ch.moments(y, np.zeros((per_batch, P, M)), np.eye(P))
        bad = ~(np.all(np.isfinite(cov.reshape(per_batch, -1)), axis=1))
        if bad.any():
            raise FloatingPointError(f"posterior moments not finite on {bad.sum()} samples "
                                     "(channel quadrature failed)")
        w = np.full(per_batch, 1.0 / per_batch)
        T, first, _ = _operator_from_nodes(w, (None, mean, cov), P, M)
        Ts.append(T)
        firsts.append(first)
    return np.array(Ts), np.array(firsts), per_batch * batches


# ---------------------------------------------------------------------- assembly
def choose_method(model, noise_variance=None) -> str:
    """``observation-grid`` | ``cells`` | ``scalar-quadrature`` | ``monte-carlo``."""
    if not noise_variance and model.reduction is not None:
        return "observation-grid"
    if sign_cells(model) is not None:
        return "cells"
    if noise_variance and model.P * model.M == 1 and len(model.link) == 1:
        return "scalar-quadrature"
    return "monte-carlo"


def _dict_to_tensor(T, first, P):
    Tn = np.zeros((P, P, P, P))
    for k, v in T.items():
        Tn[k] = float(v)
    Fn = np.zeros((P, P))
    for k, v in first.items():
        Fn[k] = float(v)
    return Tn, Fn


def _mp_operator(model, method, noise_variance, dps, gh_nodes):
    if method == "cells":
        return _cells_operator_mp(model, sign_cells(model), noise_variance, dps)
    if method == "scalar-quadrature":
        return _scalar_operator_mp(model, noise_variance, dps)
    if method == "observation-grid" and ReducedPosterior(model).constant_mixing \
            and not model.free_rows:
        return _constant_mixing_operator_mp(model, gh_nodes, dps)
    raise ParameterError(
        "precision is available for sign-type links, one-index links with Gaussian output "
        "noise and reduced links without free rows (e.g. y = z z^T); this model's "
        f"expectation ({method}) is computed in float64 only")


def _mp_lambda_max(T, P, prior, dps):
    """``lambda_max`` of prior Jacobian o F in mpmath (symmetric basis, ``eigsy``)."""
    import mpmath

    labels, _ = sym_basis(P)
    n = len(labels)
    with mpmath.workdps(dps):
        slope = prior._kernel.mp(0, dps=dps)[1]
        rho = prior.rho(P)
        if not np.array_equal(rho, np.eye(P)):
            raise ParameterError("precision runs support priors with rho = I")

        def basis(i):
            a, b = labels[i]
            B = {}
            if a == b:
                B[a, a] = mpmath.mpf(1)
            else:
                B[a, b] = B[b, a] = 1 / mpmath.sqrt(2)
            return B

        Bs = [basis(i) for i in range(n)]
        A = mpmath.matrix(n, n)
        for i in range(n):
            for j in range(n):
                A[i, j] = slope * mpmath.fsum(
                    bi * T[a, b, c, e] * bj for (a, b), bi in Bs[i].items()
                    for (c, e), bj in Bs[j].items())
        A = (A + A.T) / 2
        ev, _ = mpmath.eigsy(A)
        return max(ev[i] for i in range(n))


def linearized_operator(model, *, noise_variance=None, method="auto", outer_nodes=48,
                        width=8.0, rule=None, samples=200000, seed=0, dps=None):
    """The operator (15) at the trivial point with the expectation computed by ``method``
    (see the module docstring; ``auto`` picks by :func:`choose_method`).

    ``outer_nodes``/``width``: observation grid (nodes per axis, box in units of the
    largest singular value of the mixing; Gauss-Hermite nodes per axis when the mixing
    is constant); ``rule``: quadrature over the free rows; ``samples``/``seed``: Monte
    Carlo; ``dps``: mpmath digits for the cells and scalar-quadrature methods (default
    20).  Returns a :class:`LinearizedOperator` (no error estimate: compare resolutions,
    as :func:`weak_recovery` does)."""
    if noise_variance is not None and not (np.isfinite(noise_variance) and noise_variance >= 0):
        raise ParameterError(f"noise_variance must be finite and >= 0, got {noise_variance}")
    method = choose_method(model, noise_variance) if method == "auto" else method
    P, M = model.P, model.M
    rule = rule or TensorRule("gauss-hermite", 30)
    if method == "observation-grid":
        if noise_variance:
            raise ParameterError("the observation grid is for noiseless links (noise_variance 0)")
        T, first, info = _observation_grid(model, outer_nodes=outer_nodes, width=width, rule=rule)
        return LinearizedOperator(T, operator_matrix(T), first, method, info["mass"], info)
    if method in ("cells", "scalar-quadrature"):
        if method == "cells" and sign_cells(model) is None:
            raise ParameterError("method 'cells' needs a link made of signs of index factors")
        if method == "scalar-quadrature" and not (noise_variance and P * M == 1):
            raise ParameterError("method 'scalar-quadrature' needs one index, one output and "
                                 "noise_variance > 0")
        Td, Fd = _mp_operator(model, method, noise_variance, dps or 20, None)
        T, first = _dict_to_tensor(Td, Fd, P)
        return LinearizedOperator(T, operator_matrix(T), first, method, 1.0,
                                  {"dps": dps or 20})
    if method == "monte-carlo":
        Ts, Fs, n = _monte_carlo_operator(model, noise_variance, samples, seed, rule)
        T = Ts.mean(axis=0)
        return LinearizedOperator(T, operator_matrix(T), Fs.mean(axis=0), method, 1.0,
                                  {"samples": n, "batch_tensors": Ts, "batch_first": Fs})
    raise ParameterError(f"method must be auto, observation-grid, cells, scalar-quadrature or "
                         f"monte-carlo, got {method!r}")


def _trivial_result(first, first_err, P, method, t0, details):
    lam, vec = np.linalg.eigh(0.5 * (first + first.T))
    keep = lam > max(first_err, 1e-12 * max(1.0, lam[-1]))
    G = (vec[:, keep] * lam[keep]) @ vec[:, keep].T
    G /= np.linalg.norm(G)
    return ThresholdResult(
        "weak", 0.0, 0.0, method, G, math.inf, True,
        f"trivial subspace: E_y sum_m E[z_m|y] E[z_m|y]^T has eigenvalue {lam[-1]:.6g} "
        f"(numerical floor {first_err:.2g}), so E[Z|y] != 0 on a set of positive measure "
        "and its range is learnable at any alpha > 0 (smi.md 8.2 item 4)",
        seconds=time.perf_counter() - t0, details=details)


#: largest observation grid per axis :func:`weak_recovery` doubles to for ``target_error``
MAX_OUTER_NODES = 400


def weak_recovery(model, *, noise_variance=None, method="auto", precision=None, prior=None,
                  outer_nodes=48, width=8.0, rule=None, samples=200000, seed=0,
                  target_error=None):
    """Weak-recovery threshold ``alpha_c = 1/lambda_max(F_prior' o F)`` (smi.md 8.1-8.2).

    ``target_error`` (observation grid only): while the error estimate exceeds it, the
    grid is redone with twice the nodes per axis, up to :data:`MAX_OUTER_NODES` (the
    integrand's scale varies with the model, e.g. the attention skip c: 48 nodes give
    7e-3 at c = 0.1 and 4e-7 at c = 1); ``converged`` is False and the message says so
    when the largest grid misses it.
    Deterministic methods report ``error`` from two resolutions: observation grid --
    ``|alpha(n_out, n_in) - alpha(0.75 n_out, n_in)| + |alpha(n_out, n_in) -
    alpha(n_out, 0.75 n_in)|`` (the error of the coarser runs, an upper estimate for
    the converged finer one) plus the truncated mass times ``alpha``; mpmath methods --
    ``|alpha(dps) - alpha(dps + 10)|``.  Monte Carlo: the standard error of batch means
    of ``v^T F_b v`` (``v`` the top eigenvector).  ``precision=P`` (mpmath methods):
    ``alpha`` at ``P + 10`` digits confirmed by a run at ``2 P + 10`` digits."""
    t0 = time.perf_counter()
    prior = prior or GaussianPrior()
    if noise_variance is not None and not (np.isfinite(noise_variance) and noise_variance >= 0):
        raise ParameterError(f"noise_variance must be finite and >= 0, got {noise_variance}")
    method = choose_method(model, noise_variance) if method == "auto" else method
    if target_error is not None:
        if not (np.isfinite(target_error) and target_error > 0):
            raise ParameterError(f"target_error must be finite and > 0, got {target_error}")
        if method != "observation-grid" or precision is not None:
            raise ParameterError("target_error applies to the observation-grid method without "
                                 f"precision (method here: {method!r})")
        n, tried = int(outer_nodes), []
        while True:
            res = weak_recovery(model, noise_variance=noise_variance, method=method,
                                prior=prior, outer_nodes=n, width=width, rule=rule)
            tried.append(f"{n}: {res.error:.1e}")
            if res.error <= target_error or 2 * n > MAX_OUTER_NODES:
                break
            n *= 2
        res.details["outer_nodes_tried"] = tried
        res.seconds = time.perf_counter() - t0
        if res.error > target_error:
            res.converged = False
            res.message += (f"; error {res.error:.1e} above target_error {target_error:g} at "
                             f"the largest observation grid ({n} per axis)")
        return res
    P, M = model.P, model.M
    Jp = prior_jacobian(prior, P)
    rule = rule or TensorRule("gauss-hermite", 40)
    if precision is not None:
        return _weak_recovery_precision(model, method, noise_variance, int(precision), prior, t0)
    details = {"method": method}
    if method == "observation-grid":
        runs = {}
        n_in = int(rule.n)
        coarse_out = max(4, int(round(0.75 * outer_nodes)))
        coarse_in = TensorRule(rule.kind, max(4, int(round(0.75 * n_in))), rule.width)
        for key, (no, ru) in {"fine": (outer_nodes, rule), "outer": (coarse_out, rule),
                              "inner": (outer_nodes, coarse_in)}.items():
            if key == "inner" and not model.free_rows:
                continue
            op = linearized_operator(model, method=method, outer_nodes=no, width=width, rule=ru)
            runs[key] = op
        op = runs["fine"]
        lam, G, spectrum = top_eigen(Jp @ op.matrix, P)
        first = op.first
        mass_defect = abs(1.0 - op.mass)
        first_floor = 1e-9 * max(1.0, float(np.max(np.abs(op.T))))
        details.update({k: v.details for k, v in runs.items()})
        lam_runs = {k: top_eigen(Jp @ v.matrix, P)[0] for k, v in runs.items()}
        details["lambda_runs"] = lam_runs
        if not model.is_even and np.max(np.linalg.eigvalsh(first)) > first_floor:
            return _trivial_result(first, first_floor, P, method, t0, details)
        alphas = {k: 1.0 / v for k, v in lam_runs.items()}
        err = sum(abs(alphas[k] - alphas["fine"]) for k in alphas if k != "fine")
        err += mass_defect / lam
        # even with exactly agreeing resolutions the rounding floor remains
        err = max(err, 1e-13 / lam)
        details.update({"operator": op.matrix, "spectrum": spectrum, "mass": op.mass,
                        "alpha_runs": alphas})
        if model.is_even:
            details["blocks"] = _block_constants(op.T, model)
        return ThresholdResult("weak", 1.0 / lam, err, f"observation-grid ({op.details['outer']}, "
                               f"inner {op.details['rule']})", G, lam, True,
                               _subspace_message(G, model), seconds=time.perf_counter() - t0,
                               details=details)
    if method == "cells":
        res = _weak_recovery_precision(model, method, noise_variance, 10, prior, t0)
        res.digits_confirmed = None
        return res
    if method == "scalar-quadrature":
        return _scalar_weak_recovery(model, noise_variance, prior, t0)
    if method == "monte-carlo":
        op = linearized_operator(model, noise_variance=noise_variance, method=method,
                                 samples=samples, seed=seed, rule=rule)
        Ts, Fs = op.details["batch_tensors"], op.details["batch_first"]
        B = len(Ts)
        Fmean = Fs.mean(axis=0)
        Ferr = float(np.max(Fs.std(axis=0, ddof=1))) / math.sqrt(B)
        if not model.is_even and np.max(np.linalg.eigvalsh(Fmean)) > 4 * Ferr:
            return _trivial_result(Fmean, 4 * Ferr, P, method, t0, {"samples": op.details["samples"]})
        lam, G, spectrum = top_eigen(Jp @ op.matrix, P)
        _, B_ = sym_basis(P)
        v = np.einsum("iab,ab->i", B_, G)
        per = np.array([v @ (Jp @ operator_matrix(T)) @ v for T in Ts])
        lam_err = float(per.std(ddof=1)) / math.sqrt(B)
        details.update({"operator": op.matrix, "spectrum": spectrum, "samples": op.details["samples"],
                        "batches": B, "lambda_stderr": lam_err})
        return ThresholdResult("weak", 1.0 / lam, lam_err / lam ** 2,
                               f"monte-carlo ({op.details['samples']} samples, {B} batch means)",
                               G, lam, True, _subspace_message(G, model),
                               seconds=time.perf_counter() - t0, details=details)
    raise ParameterError(f"unknown method {method!r}")


def _scalar_weak_recovery(model, noise_variance, prior, t0, level=6):
    """Float64 nested tanh-sinh (:func:`_scalar_operator_float`) at ``level`` with the
    error estimate ``|alpha(level) - alpha(level - 1)|`` (the coarser run's error)."""
    if not (noise_variance and model.P * model.M == 1 and len(model.link) == 1):
        raise ParameterError("scalar quadrature needs one index, one output and noise_variance > 0")
    Jp = prior_jacobian(prior, 1)
    runs = {lv: _scalar_operator_float(model, noise_variance, lv) for lv in (level - 1, level)}
    T, first, mass = runs[level]
    details = {"levels": {lv: {"T": float(r[0][0, 0, 0, 0]), "first": float(r[1][0, 0]),
                               "mass": r[2]} for lv, r in runs.items()}}
    floor = 1e-9 * max(1.0, abs(float(T[0, 0, 0, 0])))
    if not model.is_even and first[0, 0] > floor:
        return _trivial_result(first, floor, 1, "scalar-quadrature", t0, details)
    lams = {lv: top_eigen(Jp @ operator_matrix(r[0]), 1)[0] for lv, r in runs.items()}
    lam, G, spectrum = top_eigen(Jp @ operator_matrix(T), 1)
    err = abs(1 / lams[level] - 1 / lams[level - 1]) + abs(1 - mass) / lam
    return ThresholdResult("weak", 1.0 / lam, max(err, 1e-15 / lam),
                           f"scalar-quadrature (float64 nested tanh-sinh, level {level})", G, lam,
                           True, _subspace_message(G, model), seconds=time.perf_counter() - t0,
                           details=details)


def _block_constants(T, model):
    """``K_{ll'}`` of the block-Hadamard structure of even models (smi.md 8.3) for
    one-row groups: ``F(Gamma)_{ll'} = K_{ll'} Gamma_{ll'}``."""
    P = model.P
    return np.array([[T[a, b, a, b] for b in range(P)] for a in range(P)])


def _subspace_message(G, model):
    lam, vec = np.linalg.eigh(G)
    v = vec[:, -1]
    rows = [a for a in range(model.P) if abs(v[a]) > 1e-6]
    return (f"learnable subspace: leading direction {np.round(v, 6).tolist()} "
            f"(rows {rows}, rank {int(np.sum(lam > 1e-8 * lam[-1]))})")


def _weak_recovery_precision(model, method, noise_variance, digits, prior, t0):
    """``alpha_c`` at ``digits + 10`` digits confirmed at ``2 digits + 10`` (module docstring)."""
    import mpmath

    if digits < 1:
        raise ParameterError(f"precision must be an integer >= 1, got {digits}")
    P, M = model.P, model.M
    guard = 10
    out = {}
    for tag, dps in (("value", digits + guard), ("check", 2 * digits + guard)):
        # Gauss-Hermite nodes per axis (constant mixing): different in the two runs, so
        # their agreement also confirms the outer rule (exact for polynomial integrands)
        n_gh = 4 + digits // 6 + (4 if tag == "check" else 0)
        Td, Fd = _mp_operator(model, method, noise_variance, dps, n_gh)
        with mpmath.workdps(dps):
            first_max = max(abs(v) for v in Fd.values())
            lam = _mp_lambda_max(Td, P, prior, dps)
        out[tag] = (lam, first_max, Td, Fd)
    lam, first_max, Td, Fd = out["value"]
    lam2 = out["check"][0]
    T, first = _dict_to_tensor(Td, Fd, P)
    details = {"dps": digits + guard, "check_dps": 2 * digits + guard}
    floor = 10.0 ** (-(digits + guard // 2))
    if not model.is_even and first_max > floor * max(1.0, float(np.max(np.abs(T)))):
        res = _trivial_result(first, floor, P, method, t0, details)
        res.digits_confirmed = float(digits)
        return res
    Jp = prior_jacobian(prior, P)
    _, G, spectrum = top_eigen(Jp @ operator_matrix(T), P)
    with mpmath.workdps(2 * digits + guard):
        a1, a2 = 1 / lam, 1 / lam2
        diff = abs(a1 - a2)
        agree = float(-mpmath.log10(diff / abs(a2))) if diff != 0 else float(2 * digits + guard)
        err = float(diff)
    details.update({"alpha_check": a2, "operator": operator_matrix(T), "spectrum": spectrum})
    res = ThresholdResult("weak", a1, err, f"{method} (mpmath {digits + guard} digits)", G, lam,
                          agree >= digits, _subspace_message(G, model),
                          digits_confirmed=min(agree, float(digits + guard)),
                          seconds=time.perf_counter() - t0, details=details)
    if model.is_even:
        res.details["blocks"] = _block_constants(T, model)
    return res


# ---------------------------------------------------------------------- staircase
class StaircaseMap:
    """The two ingredients of the staircase (smi.md 8.4, Eqs. 17-18) at ``Q = q e_s e_s^T``
    (row ``s`` learned, the others not), on frozen samples:

    * ``alpha(q)``: the sample ratio at which ``q`` is a fixed point of the one-parameter
      reduced SE, ``alpha(q) = [F_prior^{-1}(Q)]_ss / E[sum_m g_sm^2]`` (smi.md 6.1 item 6);
    * the operator at that fixed point restricted to the other rows ``U``:
      ``F_Q(Gamma)_{ab} = E sum J*_{am,cn} Gamma_cd J*_{bm,dn}``, ``J* = dg_out/domega``
      at ``(y, omega*, rho - Q)``, ``omega* = Q^{1/2} xi`` (Eq. 17), composed with the
      prior Jacobian on the ``U`` block (``F'(0)``: that block of ``Q_hat*`` is 0).

    The instability condition is ``G(q) = alpha(q) lambda_max(q) - 1 = 0``; on the stable
    branch ``q -> alpha(q)`` is increasing, so the root in ``q`` gives the threshold
    ``alpha_c(U) = alpha(q*)`` (checked by the caller).

    Samples: ``xi_s`` (M) and ``eta`` (P M) from ``batches`` independent scrambled Sobol
    sequences (randomized quasi-Monte Carlo, ``scipy.stats.qmc``) -- the spread of the
    batch means is an honest error bar even for the heavy-tailed per-sample values.

    Posterior moments (the free rows ``u`` integrated, smi.md 9): when row ``s`` is nearly
    known (``v = 1 - q -> 0``) the integrand over ``u`` concentrates on the discrete
    preimages of ``u -> T(u)^{-1} E`` with widths ``~ sqrt(v)`` (smi.md 10.2), and the
    30-node Gauss-Hermite rule over the prior of ``u`` is off by ~10% in ``E||g_s||^2``
    at ``q = 0.995``.  The default rule follows that width: the trapezoid rule on
    ``|u| <= width`` with spacing ``sqrt(v) / nodes_per_sd``, i.e.
    ``n = max(41, ceil(2 width nodes_per_sd / sqrt(v)))`` (odd) nodes per axis; the
    trapezoid error of a Gaussian peak of standard deviation ``s`` at spacing ``h`` is
    ``~ exp(-2 pi^2 s^2 / h^2)``.  Measured per sample against a brute-force 601^2 grid
    on ``[-7, 7]^2`` (agreeing with 301^2 to 2e-8), 16 samples, c = 1, largest relative
    error of ``K_11`` / ``||g_2||^2``: spacing ``1.86 sqrt(v)`` (n = 41 at q = 0.95,
    99 at 0.995): 2e-3 / 4e-3 at 0.95, 3e-3 / 2e-2 at 0.995; spacing
    ``sqrt(v) / 1.5`` (the default; n = 89, 161, 277): <= 6e-7 at q = 0.95, 0.985,
    0.995.  Gauss-Hermite 30^2 over the prior: 6e-2 / 0.14 (q = 0.95), 0.23 / 5.7
    (0.985), 0.23 / 330 (0.995).
    ``max_peaks > 0`` selects the peak-following mixture of :mod:`._posterior_rules` with
    this trapezoid rule on each component instead (around Newton-located maxima, power-2
    shares, prior weight 0.01; at q = 0.95 / 0.985 / 0.995, learned row 1,
    4096 samples: alpha(q) and lambda_max within 1.6e-7 relative of the default rule, where
    the balance-heuristic shares with prior weight 0.1 it had until 2026-11-27 were 0.3-0.9%
    off; kept as an option).
    """

    def __init__(self, model, learned_row, *, samples=4096, batches=8, seed=0, rule=None,
                 max_peaks=0, prior=None, nodes_per_sd=1.5, width=6.5):
        from scipy.stats import norm, qmc

        self.model = model
        self.rp = ReducedPosterior(model)
        self.prior = prior or GaussianPrior()
        P, M = model.P, model.M
        self.s = int(learned_row)
        if not 0 <= self.s < P:
            raise ParameterError(f"learned_row must be in [0, {P - 1}], got {learned_row}")
        self.U = [a for a in range(P) if a != self.s]
        self.fixed_rule = rule
        self.nodes_per_sd, self.width = float(nodes_per_sd), float(width)
        self.max_peaks = int(max_peaks)
        if int(batches) < 2:
            raise ParameterError(f"batches must be >= 2, got {batches}")
        per = max(16, int(samples) // int(batches))
        m = int(math.ceil(math.log2(per)))
        rng = np.random.default_rng(seed)
        blocks = []
        for _ in range(int(batches)):
            sob = qmc.Sobol(d=M + P * M, scramble=True, seed=rng)
            u = sob.random_base2(m)
            blocks.append(norm.ppf(np.clip(u, 1e-16, 1 - 1e-16)))
        x = np.concatenate(blocks)
        self.batches, self.per_batch = int(batches), 2 ** m
        self.n = len(x)
        self.xi = x[:, :M]
        self.eta = x[:, M:].reshape(self.n, P, M)
        self.Jp_U = prior_jacobian(self.prior, len(self.U))
        self.evaluations = 0
        # starting points for the peak search: the true free rows and their flips for the
        # even free groups that carry no side field (unlearned), a symmetry of the posterior
        self.flip_groups = [g for g, even in model.even_groups.items()
                            if even and self.s not in g and set(g) <= set(model.free_rows)]

    def sample(self, q, batches=None):
        """``(omega, Z, V)`` of the frozen samples (the first ``batches`` batches)."""
        P, M = self.model.P, self.model.M
        n = self.n if batches is None else int(batches) * self.per_batch
        omega = np.zeros((n, P, M))
        omega[:, self.s] = math.sqrt(q) * self.xi[:n]
        Z = self.eta[:n].copy()
        Z[:, self.s] = omega[:, self.s] + math.sqrt(1.0 - q) * self.eta[:n, self.s]
        V = np.eye(P)
        V[self.s, self.s] = 1.0 - q
        return omega, Z, V

    def rule(self, q, scale=1.0):
        """The inner rule at overlap ``q`` (class docstring); ``scale`` < 1 coarsens it."""
        if self.fixed_rule is not None:
            r = self.fixed_rule
            return TensorRule(r.kind, max(4, int(round(scale * r.n))), r.width)
        n = max(41, int(math.ceil(2.0 * self.width * self.nodes_per_sd / math.sqrt(1.0 - q))))
        n = int(round(scale * n)) | 1
        return TensorRule("uniform", n, self.width)

    def evaluate(self, q, rule=None, max_peaks=None, batches=None):
        """``dict``: ``alpha``, ``lam``, ``G`` (all samples, or the first ``batches``
        batches) and per batch ``alpha_b``, ``lam_b`` (``v^T F_b v`` at the top
        eigenvector ``v``, control variates applied), ``G_b``, plus the Nishimori gap of
        the learned entry and the mean number of peaks found."""
        if not 0 < q < 1:
            raise ParameterError(f"q must be in (0, 1), got {q}")
        rule = rule or self.rule(q)
        max_peaks = self.max_peaks if max_peaks is None else max_peaks
        P, M = self.model.P, self.model.M
        B = self.batches if batches is None else min(int(batches), self.batches)
        omega, Z, V = self.sample(q, B)
        n = len(Z)
        rp = self.rp
        E = rp.E_of_Z(Z)
        Ebr, lw, valid, _ = rp.branches(E)
        free = list(rp.free_rows)
        u_true = Z[:, free, :]
        starts = [u_true]
        for g in self.flip_groups:
            flipped = u_true.copy()
            for a in g:
                flipped[:, free.index(a)] *= -1
            starts.append(flipped)
        starts = np.stack([s.reshape(n, -1) for s in starts], axis=1)
        logZ, mean, cov, peaks = rp.posterior(Ebr, lw, valid, omega, V, rule, starts=starts,
                                              max_peaks=max_peaks)
        bad = ~np.isfinite(logZ)
        if bad.any():
            raise FloatingPointError(f"posterior normalizer not finite on {bad.sum()} samples at q={q}")
        Vinv = np.linalg.inv(V)
        g = np.einsum("ab,sbm->sam", Vinv, mean - omega)
        C = cov.reshape(n, P, M, P, M)
        J = np.einsum("ac,scmdn,db->sambn", Vinv, C, Vinv) \
            - np.einsum("ab,mn->ambn", Vinv, np.eye(M))[None]
        sq = np.sum(g[:, self.s] ** 2, axis=1)
        # Nishimori twin of E[sum_m g_sm^2] (smi.md 3): same mean, bounded above by M/v,
        # 2.8x smaller relative spread than the square at q = 0.97 (c = 1)
        twin = -np.einsum("smm->s", J[:, self.s, :, self.s, :])
        U = self.U
        JU = J[:, U][:, :, :, U]
        target = float(self.prior.inverse_overlap_map(np.diag(
            [q if a == self.s else 0.0 for a in range(P)]))[self.s, self.s])
        n_b = self.per_batch
        A_b = twin.reshape(B, n_b).mean(axis=1)
        T = tensor_from_jacobians(JU, np.full(n, 1.0 / n))
        lam, G_U, _ = top_eigen(self.Jp_U @ operator_matrix(T), len(U))
        # per-sample v^T (Jp F_i) v along the top eigenvector, with the entries of J_UU as
        # control variates: E[J_UU] = Cov(z_U) - E[E[z_U|y] E[z_U|y]^T] - I = 0 because the
        # unlearned even rows have E[z_U | y, omega] = 0 (variance / 3.8 at q = 0.97, c = 1)
        _, Bs = sym_basis(len(U))
        v = np.einsum("iab,ab->i", Bs, G_U)
        Gam = np.einsum("i,iab->ab", self.Jp_U @ v, Bs)
        per = np.einsum("ab,samcn,cd,sbmdn->s", G_U, JU, Gam, JU)
        X = JU.reshape(n, -1)
        Xc = X - 0.0
        beta = np.linalg.lstsq(Xc, per - per.mean(), rcond=None)[0]
        per_cv = per - Xc @ beta
        lam_b = per_cv.reshape(B, n_b).mean(axis=1)
        lam_cv = lam - float(np.mean(Xc @ beta))
        alpha = target / A_b.mean()
        alpha_b = target / A_b
        self.evaluations += 1
        return {"q": q, "alpha": alpha, "lam": lam_cv, "lam_plain": lam,
                "G": alpha * lam_cv - 1.0, "alpha_b": alpha_b,
                "lam_b": lam_b, "G_b": alpha_b * lam_b - 1.0, "subspace": G_U,
                "nishimori_gap": float(abs(sq.mean() - twin.mean()) / twin.mean()),
                "nishimori_gap_stderr": float((sq - twin).std(ddof=1) / math.sqrt(n) / twin.mean()),
                "peaks": float(peaks.mean())}


def staircase(model, *, learned_row=None, samples=4096, batches=8, seed=0, rule=None,
              max_peaks=0, prior=None, q_grid=(0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995,
                                               0.998),
              xtol=1e-3, nodes_per_sd=1.0):
    """Grand-staircase threshold (smi.md 8.4, Eqs. 17-18) of the rows not learned first.

    ``learned_row``: the row learned at the weak-recovery threshold (default: from
    :func:`weak_recovery`, the row carrying its PSD eigenvector; needs an even model
    whose eigenvector is one row, e.g. ``e_2 e_2^T`` for the two-layer attention).  The
    root ``q*`` of ``G(q) = alpha(q) lambda_max(q) - 1`` (:class:`StaircaseMap`) is
    bracketed on ``q_grid`` and solved by Brent on the frozen samples with the inner
    rule fixed at the bracket's upper end (``G`` is then smooth in ``q``); ``alpha_c =
    alpha(q*)``.  Error bar: standard error over the ``batches`` independent randomized
    QMC sequences of the linearized per-batch threshold ``alpha_b + alpha'(q*) (-G_b /
    G'(q*))`` (batch means: robust to the heavy-tailed per-sample values) plus the
    change when the inner rule is coarsened to 3/4 of its nodes per axis (an upper
    estimate of the quadrature error).  The SE stability of the branch is checked:
    ``alpha(q)`` must increase over the scanned grid and at ``q*``.

    ``nodes_per_sd = 1`` (spacing ``sqrt(1 - q*)``, 2.25x fewer nodes than the accuracy
    default of :class:`StaircaseMap`): its quadrature error, ~1e-4 per sample at worst and
    measured by the coarsened rule as part of the error bar, stays far below the
    statistical error that sets the cost (1.5e-6 vs 1.2e-2 at c = 1 with 1024 samples)."""
    t0 = time.perf_counter()
    if model.reduction is None:
        raise ParameterError("the staircase needs a noiseless link with a DeterministicReduction")
    if not model.is_even:
        raise ParameterError("the staircase needs an even model (block structure of smi.md 8.3)")
    if learned_row is None:
        wr = weak_recovery(model, outer_nodes=32, rule=TensorRule("gauss-hermite", 24))
        lam_G, vec = np.linalg.eigh(wr.subspace)
        rows = [a for a in range(model.P) if abs(vec[a, -1]) > 1e-6]
        if len(rows) != 1 or np.sum(lam_G > 1e-8) != 1:
            raise ParameterError("the first learnable subspace is not a single row; give learned_row")
        learned_row = rows[0]
    smap = StaircaseMap(model, learned_row, samples=samples, batches=batches, seed=seed,
                        rule=rule, max_peaks=max_peaks, prior=prior, nodes_per_sd=nodes_per_sd)
    scan = []
    lo = hi = None
    scan_batches = max(2, smap.batches // 4)
    for q in q_grid:
        ev = smap.evaluate(q, batches=scan_batches)       # bracketing: a quarter of the samples
        scan.append(ev)
        if ev["G"] < 0:
            lo = ev
        else:
            hi = ev
            break
    if lo is None or hi is None:
        raise ParameterError(
            f"no sign change of alpha(q) lambda(q) - 1 on q in {list(q_grid)}: values "
            f"{[round(e['G'], 4) for e in scan]}")
    alphas = [e["alpha"] for e in scan]
    monotone = all(b > a for a, b in zip(alphas, alphas[1:]))
    solve_rule = smap.rule(hi["q"])
    cache = {}

    def ev_at(q, r=solve_rule):
        key = (q, r.n)
        if key not in cache:
            cache[key] = smap.evaluate(q, rule=r)
        return cache[key]

    lo_f, hi_f = ev_at(lo["q"]), ev_at(hi["q"])
    k = q_grid.index(hi["q"])
    while not (lo_f["G"] < 0 < hi_f["G"]):
        # all samples can move the sign change by one grid point
        if lo_f["G"] >= 0 and q_grid.index(lo["q"]) > 0:
            hi, hi_f = lo, lo_f
            lo = {"q": q_grid[q_grid.index(lo["q"]) - 1]}
            lo_f = ev_at(lo["q"])
        elif hi_f["G"] <= 0 and k + 1 < len(q_grid):
            k += 1
            lo, lo_f = hi, hi_f
            hi = {"q": q_grid[k]}
            hi_f = ev_at(hi["q"])
        else:
            raise ParameterError("no sign change of alpha(q) lambda(q) - 1 with all samples; "
                                 "refine q_grid")
    root = find_root(lambda q: ev_at(q)["G"], lo["q"], hi["q"], f_lo=lo_f["G"], f_hi=hi_f["G"],
                     xtol=xtol, rtol=1e-12, name="staircase instability")
    qs = float(root.value)
    at = ev_at(qs)
    # Brent may return the bracket's end itself (its best iterate when G(hi) is the
    # smallest value seen): the difference step may reach past it (G is smooth in q on
    # the frozen samples with the rule fixed), never past the lower end or q = 1
    h = min(2e-3, 0.5 * (qs - lo["q"]), 0.5 * (1.0 - qs))
    plus, minus = ev_at(qs + h), ev_at(qs - h)
    dG = (plus["G"] - minus["G"]) / (2 * h)
    dalpha = (plus["alpha"] - minus["alpha"]) / (2 * h)
    alpha_b = at["alpha_b"] + dalpha * (-at["G_b"] / dG)
    stat = float(alpha_b.std(ddof=1)) / math.sqrt(len(alpha_b))
    alpha_c = at["alpha"] + dalpha * (-at["G"] / dG)
    coarse_rule = smap.rule(hi["q"], scale=0.75) if rule is None else \
        TensorRule(rule.kind, max(4, int(round(0.75 * rule.n))), rule.width)
    coarse = smap.evaluate(qs, rule=coarse_rule)
    quad = abs(coarse["alpha"] - at["alpha"] + dalpha * (-(coarse["G"] - at["G"]) / dG))
    err = stat + quad
    stable = monotone and dalpha > 0
    msg = (f"row {learned_row} learned first (fixed point q* = {qs:.6f}); rows {smap.U} "
           f"become unstable at alpha = {alpha_c:.6g} +- {err:.2g} (statistical {stat:.2g}, "
           f"quadrature {quad:.2g}); G'(q*) = {dG:.4g}, alpha'(q*) = {dalpha:.4g}; "
           f"{smap.evaluations} map evaluations on {smap.n} samples ({smap.batches} RQMC batches)")
    if not stable:
        msg += "; WARNING: alpha(q) is not increasing on the scanned grid (unstable branch?)"
    details = {"q_star": qs, "scan": [{k: v for k, v in e.items() if not k.endswith("_b")}
                                      for e in scan],
               "dG_dq": dG, "dalpha_dq": dalpha, "stat_error": stat, "quadrature_error": quad,
               "alpha_batches": alpha_b.tolist(), "nishimori_gap": at["nishimori_gap"],
               "rule": f"{solve_rule.kind} {solve_rule.n}",
               "coarse_rule": f"{coarse_rule.kind} {coarse_rule.n}", "learned_row": learned_row,
               "K_next": at["lam"], "alpha_at_q": at["alpha"]}
    G_full = np.zeros((model.P, model.P))
    G_full[np.ix_(smap.U, smap.U)] = at["subspace"]
    return ThresholdResult("staircase", alpha_c, err,
                           f"staircase (RQMC {smap.n} samples, {solve_rule.kind} "
                           f"{solve_rule.n}^{len(model.free_rows) * model.M} inner rule, "
                           "Brent in q)", G_full, at["lam"], bool(root.converged and stable),
                           msg, seconds=time.perf_counter() - t0, details=details)
