"""Channels that reveal a linear image of their indices, and the rank of a link.

:class:`LinearRankChannel` observes ``P u`` (rank ``k``) of ``K`` isotropic indices
through isotropic Gaussian noise: ``E||g_out||^2 = k/(V + noise)`` in closed form
(Boncoraglio et al., arXiv:2506.01582, Sec. 3).  :func:`jacobian_rank` derives the rank
and kernel of a link's Jacobian (SymPy, evaluated in mpmath), the condition of that
closed form.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

from ...core import validate
from ..integrate.moments import Moments
from .channel import Channel, isotropic_layout


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
    complement, the condition of the linear-rank closed form (arXiv:2506.01582).
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


class LinearRankChannel(Channel):
    """Output channel revealing ``P u`` (rank ``k``) of ``K`` isotropic indices ``u``,
    through isotropic Gaussian noise of variance ``noise`` per index (Boncoraglio et al.,
    arXiv:2506.01582, Sec. 3).

    The observation is given as any preimage ``u*`` (rows of ``y``, shape ``(n, K)``);
    with ``Pi`` the projector orthogonal to the link's kernel, the posterior of ``u`` is
    Gaussian: ``E[u|y] - omega = V/(V + noise) Pi (u* - omega)`` and
    ``Cov(u|y) - V I = -V^2/(V + noise) Pi``, hence ``g_out = Pi (u* - omega)/(V + noise)``,
    ``dg_out = -Pi/(V + noise)`` and ``E||g_out||^2 = k/(V + noise)`` in closed form.
    Layout: ``P = 1`` index row and ``M = K`` tokens, ``omega (n, 1, K)`` (or ``(n, K)``)
    and ``V`` a ``1 x 1`` matrix (or a number).
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

    def moments(self, y, omega, V) -> Moments:
        """Gaussian posterior moments (class docstring); ``y`` the preimages ``u*``."""
        omega, V, v = isotropic_layout(omega, V, self.n_indices)
        diff = np.asarray(y, dtype=float).reshape(omega.shape[0], -1) - omega[:, 0, :]
        proj = diff - (diff @ self.kernel) @ self.kernel.T
        den = v + self.noise
        shrink = v / den
        Pi = np.eye(self.n_indices) - self.kernel @ self.kernel.T
        log_partition = (-0.5 * np.sum(proj * proj, axis=1) / den
                         - 0.5 * self.rank * math.log(2 * math.pi * den))
        return Moments(log_partition, (shrink * proj)[:, None, :],
                       np.broadcast_to(-(v * shrink) * Pi, (omega.shape[0],) + Pi.shape),
                       omega, V)

