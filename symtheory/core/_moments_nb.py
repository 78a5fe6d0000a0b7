"""Numba helpers for generated posterior-moment drivers (weighted quadrature).

The drivers themselves are generated (e.g. by :mod:`symtheory.glm.multi_index`)
because they call a model's generated kernels; the model-independent pieces live here.
"""
from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def lu_solve_logdet(T, E, X):
    """Solve ``T X = E`` (``T`` M x M, ``E`` M x r) by partial-pivot LU.

    Returns ``log|det T|`` (``-inf`` for a singular ``T``; ``X`` is then garbage).
    ``T`` and ``E`` are overwritten.
    """
    M = T.shape[0]
    r = E.shape[1]
    logdet = 0.0
    for k in range(M):
        p = k
        best = abs(T[k, k])
        for i in range(k + 1, M):
            if abs(T[i, k]) > best:
                best = abs(T[i, k])
                p = i
        if best == 0.0:
            return -math.inf
        if p != k:
            for j in range(M):
                tmp = T[k, j]
                T[k, j] = T[p, j]
                T[p, j] = tmp
            for j in range(r):
                tmp = E[k, j]
                E[k, j] = E[p, j]
                E[p, j] = tmp
        logdet += math.log(abs(T[k, k]))
        for i in range(k + 1, M):
            f = T[i, k] / T[k, k]
            for j in range(k, M):
                T[i, j] -= f * T[k, j]
            for j in range(r):
                E[i, j] -= f * E[k, j]
    for j in range(r):
        for i in range(M - 1, -1, -1):
            acc = E[i, j]
            for k in range(i + 1, M):
                acc -= T[i, k] * X[k, j]
            X[i, j] = acc / T[i, i]
    return logdet


@numba.njit(cache=True)
def weighted_moments(logw, zs, count, out_mean, out_cov):
    """From log-weights and points (first ``count`` rows): log of the total weight,
    the weighted mean and the *centred* weighted covariance (two passes, no
    cancellation).  Returns ``-inf`` (and NaN moments) when no point has weight."""
    d = zs.shape[1]
    if count == 0:
        out_mean[:] = np.nan
        out_cov[:, :] = np.nan
        return -math.inf
    lmax = -math.inf
    for j in range(count):
        if logw[j] > lmax:
            lmax = logw[j]
    if lmax == -math.inf:
        out_mean[:] = np.nan
        out_cov[:, :] = np.nan
        return -math.inf
    total = 0.0
    out_mean[:] = 0.0
    for j in range(count):
        w = math.exp(logw[j] - lmax)
        total += w
        for a in range(d):
            out_mean[a] += w * zs[j, a]
    for a in range(d):
        out_mean[a] /= total
    out_cov[:, :] = 0.0
    for j in range(count):
        w = math.exp(logw[j] - lmax) / total
        for a in range(d):
            da = zs[j, a] - out_mean[a]
            for b in range(a, d):
                out_cov[a, b] += w * da * (zs[j, b] - out_mean[b])
    for a in range(d):
        for b in range(a):
            out_cov[a, b] = out_cov[b, a]
    return lmax + math.log(total)
