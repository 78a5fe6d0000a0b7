"""Fused Numba driver of :class:`~symtheory.glm.factors.reduced.ReducedChannel` (Troiani
et al., arXiv:2502.00901, Corollary E.1), and the pieces of the reduced integral over the free rows ``u``
that the posterior rules (:mod:`.posterior`, :mod:`.deep`) share with it.

:func:`build` makes, from the packed mixing kernel ``kern(u, pars, tout)`` (the M x M
mixing matrix ``T(u)`` into ``tout``), ``reduced``::

    Z_out = sum_k E_u[N(T(u)^{-1} E^(k); mean_{h|u}, C_{h|u}) / (|det T(u)|^r |det dy/dE|)]

over the tensor nodes ``(tn, tw)`` of ``u``, with the posterior mean and covariance of Z.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numba
import numpy as np

from ....core import _moments_nb as mnb


def build(kern, jit):
    """The driver of one channel (module docstring); ``jit`` compiles and caches it for
    this kernel (:meth:`symtheory.core.codegen.Kernel.drivers`)."""
    return SimpleNamespace(reduced=_reduced(kern, jit))


@numba.njit(cache=True)
def workspace(K, M, r, pf):
    """The work arrays of a branch evaluation: lk, Xall, tout, Tw, Ew, X, dv, u (one set
    per sample: each thread of the parallel loops owns its own)."""
    return (np.empty(K), np.zeros((K, M, r)), np.empty(M * M), np.empty((M, M)),
            np.empty((M, r)), np.empty((M, r)), np.empty(r), np.zeros((max(pf, 1), M)))


@numba.njit(cache=True, error_model="numpy", _nrt=False)
def place_u(u, s, omega, free_rows, Luu, tn, j):
    """u = omega_u + Luu t at the node t = tn[j] (layout t[b M + m])."""
    M = omega.shape[2]
    pf = free_rows.shape[0]
    for m in range(M):
        for a in range(pf):
            acc = omega[s, free_rows[a], m]
            for b in range(a + 1):
                acc += Luu[a, b] * tn[j, b * M + m]
            u[a, m] = acc


@numba.njit(cache=True, error_model="numpy", _nrt=False)
def branch_terms(s, k, u, tout, Ebr, omega, free_rows, solved_rows, Bm, Cinv, Tw, Ew, X, dv):
    """Branch k of sample s at u, T(u) in tout: X = T^{-1} E^(k) (the solved rows, X[m, q])
    and (log N(X; mean_{h|u}, C_{h|u}) + its constant, log|det T|); the latter is -inf
    for a singular T."""
    M = omega.shape[2]
    pf = free_rows.shape[0]
    r = solved_rows.shape[0]
    for i in range(M):
        for j in range(M):
            Tw[i, j] = tout[i * M + j]
        for q in range(r):
            Ew[i, q] = Ebr[s, k, i * r + q]
    ldT = mnb.lu_solve_logdet(Tw, Ew, X)
    if ldT == -math.inf:
        return 0.0, ldT
    lp = 0.0
    for m in range(M):
        for q in range(r):
            mu = omega[s, solved_rows[q], m]
            for a in range(pf):
                mu += Bm[q, a] * (u[a, m] - omega[s, free_rows[a], m])
            dv[q] = X[m, q] - mu
        for q in range(r):
            for q2 in range(r):
                lp -= 0.5 * dv[q] * Cinv[q, q2] * dv[q2]
    return lp, ldT


def _reduced(kern, jit):
    @jit(parallel=True)
    def reduced(Ebr, logjac, valid, omega, pars, free_rows, solved_rows, Luu, Bm, Cinv,
                logdetC, tn, tw, out_logZ, out_mean, out_cov):
        n = omega.shape[0]
        P = omega.shape[1]
        M = omega.shape[2]
        pf = free_rows.shape[0]
        r = solved_rows.shape[0]
        K = Ebr.shape[1]
        Kn = tn.shape[0]
        d = P * M
        const = -0.5 * M * logdetC - 0.5 * M * r * math.log(2.0 * math.pi)
        for s in numba.prange(n):
            logw = np.empty(Kn * K)
            zs = np.empty((Kn * K, d))
            lk, Xall, tout, Tw, Ew, X, dv, u = workspace(K, M, r, pf)
            cnt = 0
            for j in range(Kn):
                place_u(u, s, omega, free_rows, Luu, tn, j)
                kern(u, pars, tout)
                for k in range(K):
                    if valid[s, k] == 0:
                        continue
                    lp, ldT = branch_terms(s, k, u, tout, Ebr, omega, free_rows, solved_rows,
                                           Bm, Cinv, Tw, Ew, X, dv)
                    if ldT == -math.inf:
                        continue
                    logw[cnt] = math.log(tw[j]) + lp + const - r * ldT - logjac[s, k]
                    for m in range(M):
                        for a in range(pf):
                            zs[cnt, free_rows[a] * M + m] = u[a, m]
                        for q in range(r):
                            zs[cnt, solved_rows[q] * M + m] = X[m, q]
                    cnt += 1
            out_logZ[s] = mnb.weighted_moments(logw, zs, cnt, out_mean[s], out_cov[s])
    return reduced
