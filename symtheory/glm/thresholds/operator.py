"""The linearized state evolution at the trivial point (Eq. 15 of Troiani et al.,
arXiv:2502.00901; Theorem 2.3) and its algebra.

* the output Jacobian at the trivial point, ``J_{am,bn}(y) = d g_out/d omega`` at
  ``omega = 0, V = rho = I``, which is ``E[z_am z_bn | y] - delta_ab delta_mn`` from the
  posterior second moments;
* the linear operator ``F(Gamma)_{ab} = E_y sum_{m,n,c,d} J_{am,cn} Gamma_{cd} J_{bm,dn}``
  as a tensor ``T[a, b, c, d]`` and its matrix on the orthonormal basis of symmetric
  matrices, composed with the prior's Jacobian at ``Q_hat = 0``;
* its top eigenvalue and a PSD eigenvector (power iteration on the cone), and the
  result type of every threshold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from ...core.result import Result, alias
from ...core.validate import ParameterError
from ..integrate.reduced_posterior import ReducedPosterior


# ---------------------------------------------------------------------- linear algebra
def sym_basis(P: int, *, exact: bool = False):
    """Orthonormal basis of symmetric ``P x P`` matrices (Frobenius): ``E_aa`` and
    ``(E_ab + E_ba)/sqrt(2)``, a < b (Eq. (16) of arXiv:2502.00901).  Returns ``(labels,
    matrices)``; ``exact``: SymPy numbers in an object array (for the symbolic operator
    that ``smi derive`` prints, through the same functions as the numbers)."""
    half = sp.sqrt(2) / 2 if exact else 1.0 / math.sqrt(2.0)
    zero, one = (sp.S.Zero, sp.S.One) if exact else (0.0, 1.0)
    labels, mats = [], []
    for a in range(P):
        for b in range(a, P):
            B = np.full((P, P), zero, dtype=object if exact else float)
            if a == b:
                B[a, a] = one
            else:
                B[a, b] = B[b, a] = half
            labels.append((a, b))
            mats.append(B)
    return labels, np.array(mats)


def operator_matrix(T: np.ndarray) -> np.ndarray:
    """Matrix of ``Gamma -> F(Gamma)_{ab} = sum_cd T[a,b,c,d] Gamma_cd`` on :func:`sym_basis`
    (an object array of SymPy entries gives the exact basis and a SymPy matrix)."""
    P = T.shape[0]
    _, B = sym_basis(P, exact=T.dtype == object)
    return np.einsum("iab,abcd,jcd->ij", B, T, B)


def prior_slope(prior, *, exact: bool = False):
    """``F'(0)``, the derivative of the prior's scalar overlap map at ``Q_hat = 0``: the
    kernel's derived expression at 0, evaluated (float) or as SymPy (``exact``)."""
    if exact:
        return sp.simplify(prior._kernel.outputs[1].subs(prior._kernel.args[0], 0))
    return float(prior._kernel.vec(np.zeros(1))[0, 1])


def prior_jacobian(prior, P: int, *, exact: bool = False) -> np.ndarray:
    """Jacobian of the prior map ``Q = F_prior(Q_hat)`` at ``Q_hat = 0`` on :func:`sym_basis`.

    Eq. (15) of arXiv:2502.00901: ``Q^{t+1} ~ rho (dF/dqhat(0)) Q_hat rho`` -- for a
    rotation-invariant prior the matrix function of its scalar overlap map has derivative
    ``F'(0) Gamma`` at 0 (Daleckii-Krein: all divided differences at the eigenvalue 0 equal
    ``F'(0)``). ``F'(0)`` is the derived derivative of the prior's scalar map (1 for N(0,
    1), i.e. ``d/dQ_hat [Q_hat (I + Q_hat)^{-1}] = I`` at 0).  ``exact``: SymPy entries
    (``rho`` taken as exact rationals)."""
    slope = prior_slope(prior, exact=exact)
    rho = prior.rho(P)
    if exact:
        rho = np.array([[sp.nsimplify(v, rational=True) for v in row] for row in rho],
                       dtype=object)
    _, B = sym_basis(P, exact=exact)
    return slope * np.einsum("iab,ac,jcd,db->ij", B, rho, B, rho)


def tensor_from_jacobians(J: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``T[a,b,c,d] = sum_i w_i sum_{m,n} J_i[a,m,c,n] J_i[b,m,d,n]`` (Eq. 15); object
    arrays of SymPy entries give the symbolic tensor."""
    return np.einsum("i,iamcn,ibmdn->abcd", w, J, J, optimize=True)


def top_eigen(A: np.ndarray, P: int, tol=None):
    """Largest eigenvalue of the operator matrix ``A`` and a PSD eigenvector.

    Power iteration with a shift from ``I`` keeps the iterate in the PSD cone (``F``
    maps the cone into itself, Eq. (16) of arXiv:2502.00901); with a degenerate top eigenvalue it
    converges to the projection of ``I`` on the top eigenspace.  ``tol`` (absolute;
    default ``1e-9 lambda_max``): eigenvalues within it of ``lambda_max`` count as that
    eigenspace (pass the eigenvalues' error bar)."""
    A = 0.5 * (A + A.T)
    lam, vecs = np.linalg.eigh(A)
    lmax = float(lam[-1])
    labels, B = sym_basis(P)
    shift = max(0.0, -float(lam[0])) + 1e-3 * max(abs(lmax), 1e-300)
    x = np.array([1.0 if a == b else 0.0 for a, b in labels])
    top = np.abs(lam - lmax) <= max(1e-9 * max(abs(lmax), 1e-300), tol or 0.0)
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
class ThresholdResult(Result):
    """A threshold with its error estimate and how it was computed.

    ``value`` (also ``alpha``: ``0`` for a trivial subspace, ``inf`` if nothing is
    learnable), ``error`` (estimated absolute error of ``alpha``), ``method``, ``kind``
    (``weak``, ``staircase``), ``subspace`` (PSD ``P x P`` matrix spanning the learnable
    directions, unit Frobenius norm), ``eigenvalue`` (``lambda_max`` of prior Jacobian o
    F), ``converged``, ``message``, ``digits_confirmed`` (precision runs), ``details``
    (resolutions, operator, ...)."""

    kind: str = ""
    subspace: np.ndarray | None = None
    eigenvalue: object = None
    digits_confirmed: float | None = None
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    error_kind: str = field(default="estimate", kw_only=True)

    alpha = alias("value", "The threshold.")

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


def _operator_from_nodes(w, post, P, M, symmetry=None):
    """Tensor ``T`` (Eq. 15), first-moment statistic ``E_y sum_m E[z_m|y] E[z_m|y]^T`` and
    the largest cross-group entry of ``J`` from weighted posterior moments at ``V = I``:
    ``J = Cov(Z|y) - I`` (Eq. (12) of arXiv:2502.00901 at omega = 0, V = I).

    ``symmetry`` (signed row permutations of the link, :func:`~symtheory.glm.integrate.
    link_structure.link_symmetries`, all elements): the exact identities are imposed on
    the quadrature -- ``E[z|y] = S E[z|y]`` and ``J(y) = S J(y) S^T`` for ``g(SZ) = g(Z)``
    at every node, then ``T`` averaged over the whole group (``F(S Gamma S^T) = S F(Gamma)
    S^T``); a projection onto the invariant subspace, so it only removes error."""
    _, mean, cov = post[:3]
    keep = w > 0
    mean, cov, w = mean[keep], cov[keep], w[keep]
    J = (cov - np.eye(P * M)[None]).reshape(-1, P, M, P, M)
    mean = mean.reshape(-1, P, M)
    if symmetry:
        inv = np.array([el.matrix() for el in symmetry if el.output_sign > 0])
        J = np.einsum("kai,simjn,kbj->sambn", inv, J, inv, optimize=True) / len(inv)
        mean = np.einsum("kai,sim->sam", inv, mean) / len(inv)
    T = tensor_from_jacobians(J, w)
    if symmetry:
        T = symmetrize_tensor(T, symmetry)
    return T, np.einsum("s,sam,sbm->ab", w, mean, mean), J


def symmetrize_tensor(T, symmetry):
    """Group average ``mean_S S_ai S_bj S_ck S_dl T_ijkl`` of the operator tensor (Eq. 15)
    over the link's signed row permutations (equivariance of ``F``)."""
    Ss = np.array([el.matrix() for el in symmetry])
    return np.einsum("kai,kbj,kcl,kdm,ijlm->abcd", Ss, Ss, Ss, Ss, T,
                     optimize=True) / len(Ss)


def _observation_grid(model, *, outer_nodes, width, rule, symmetry=None):
    """Eq. (15) over the observation grid (module docstring) at one resolution."""
    rp = ReducedPosterior(model)
    _, w, post, info = rp.prior_nodes(outer_nodes, width, rule)
    T, first, J = _operator_from_nodes(w, post, model.P, model.M, symmetry)
    cross = 0.0
    groups = model.row_groups
    for g1 in groups:
        for g2 in groups:
            if g1 != g2:
                cross = max(cross, float(np.max(np.abs(J[:, list(g1)][:, :, :, list(g2)]))))
    info = dict(info, cross_group_max=cross, rule=f"{rule.kind} {rule.n}")
    return T, first, info


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


def _dict_to_tensor(T, first, P):
    Tn = np.zeros((P, P, P, P))
    for k, v in T.items():
        Tn[k] = float(v)
    Fn = np.zeros((P, P))
    for k, v in first.items():
        Fn[k] = float(v)
    return Tn, Fn


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


