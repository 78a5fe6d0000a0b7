"""Posterior moments of ``Z`` for links constant on the sign regions of linear forms.

With ``u = L Z + c`` (the ``K`` forms of a :class:`~symtheory.glm.integrate.link_structure.DiscreteStructure`)
and ``Z ~ N(omega, Sigma)``, ``Sigma = V (x) I_M`` (Eq. (9) of arXiv:2502.00901), every region
``R_k = {s_k * u > 0}`` is an orthant in ``u``.  Given ``u``, ``Z`` is Gaussian:

    E[Z | u] = omega + B (u - u_bar),   Cov[Z | u] = Sigma - B L Sigma,
    B = Sigma L^T (L Sigma L^T)^{-1},   u_bar = L omega + c,

so the posterior ``prop. to sum_k 1{u in R_k} N(u; u_bar, C_u) lik_k(y)`` has

    E[Z | y]   = omega + B (E[u | y] - u_bar),
    Cov[Z | y] = Sigma - B L Sigma + B Cov[u | y] B^T,

and ``u | y`` is a mixture over ``k`` (weights ``P(R_k) lik_k(y)``) of truncated
Gaussians.  ``C_u`` is block diagonal over groups of forms sharing a token, so each
region's probability and truncated moments are products / concatenations of those of
one- or two-dimensional orthants (:mod:`symtheory.core.gaussian_integrals`).
"""
from __future__ import annotations

import itertools

import numpy as np
from scipy.special import logsumexp

from ...core.gaussian_integrals import orthant_moments


class OrthantMixture:
    """Moments of ``Z | y`` for a :class:`~symtheory.glm.integrate.link_structure.DiscreteStructure`."""

    def __init__(self, structure, P: int, M: int):
        self.structure = structure
        self.P, self.M = P, M
        self.L = np.asarray(structure.forms, dtype=float)
        self.c = np.asarray(structure.offsets, dtype=float)
        self.blocks = [list(b) for b in structure.blocks]
        patterns = structure.patterns
        self.sub_patterns = []
        self.pattern_sub = np.zeros((len(patterns), len(self.blocks)), dtype=np.int64)
        for bi, b in enumerate(self.blocks):
            subs = np.array(list(itertools.product((1.0, -1.0), repeat=len(b))))
            self.sub_patterns.append(subs)
            for k, p in enumerate(patterns):
                self.pattern_sub[k, bi] = int(np.nonzero(np.all(subs == p[b], axis=1))[0][0])

    def moments(self, omega, V, loglik, *, rtol=1e-11, max_level=9):
        """``omega`` (n, d) flat, ``V`` (P, P), ``loglik`` (n, n_patterns) = log P_out(y|c_k).

        Returns ``(log Z_out (n,), mean (n, d), cov (n, d, d), error (n,))``; the error
        is the posterior-weighted estimate of the orthant integrals (0 for one form)."""
        n = omega.shape[0]
        K = self.L.shape[0]
        Sigma = np.kron(V, np.eye(self.M))
        L = self.L
        ubar = omega @ L.T + self.c
        Cu = L @ Sigma @ L.T
        Cu = 0.5 * (Cu + Cu.T)
        B = np.linalg.solve(Cu, L @ Sigma).T
        cond = Sigma - B @ L @ Sigma
        logw = np.array(loglik, dtype=float, copy=True)
        n_pat = logw.shape[1]
        Ek = np.zeros((n, n_pat, K))
        cov_blocks, err = [], np.zeros((n, n_pat))
        for bi, b in enumerate(self.blocks):
            subs = self.sub_patterns[bi]
            lp = np.empty((n, len(subs)))
            mean = np.empty((n, len(subs), len(b)))
            cov = np.empty((n, len(subs), len(b), len(b)))
            er = np.empty((n, len(subs)))
            for si, sg in enumerate(subs):
                flip = np.outer(sg, sg)
                lp[:, si], m, cv, er[:, si] = orthant_moments(
                    ubar[:, b] * sg, Cu[np.ix_(b, b)] * flip, rtol=rtol, max_level=max_level)
                mean[:, si] = m * sg
                cov[:, si] = cv * flip
            idx = self.pattern_sub[:, bi]
            logw += lp[:, idx]
            Ek[:, :, b] = mean[:, idx]
            cov_blocks.append(cov[:, idx])
            err = np.maximum(err, er[:, idx])
        logZ = logsumexp(logw, axis=1)
        impossible = ~np.isfinite(logZ)
        if impossible.any():
            return logZ, None, None, impossible
        pi = np.exp(logw - logZ[:, None])
        Ebar = np.einsum("nk,nki->ni", pi, Ek)
        D = Ek - Ebar[:, None, :]
        Cmix = np.einsum("nk,nki,nkj->nij", pi, D, D)
        for bi, b in enumerate(self.blocks):
            Cmix[:, np.array(b)[:, None], np.array(b)[None, :]] += np.einsum(
                "nk,nkij->nij", pi, cov_blocks[bi])
        mean = omega + (Ebar - ubar) @ B.T
        cov = cond[None] + np.einsum("ik,nkl,jl->nij", B, Cmix, B)
        return logZ, mean, cov, np.einsum("nk,nk->n", pi, err)
