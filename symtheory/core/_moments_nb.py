"""Numba helpers for generated posterior-moment drivers (weighted quadrature).

The drivers (:mod:`symtheory.glm.integrate.drivers`) are built per model around its
generated kernel; the model-independent pieces live here.

Helpers called once per quadrature point are compiled with ``_nrt=False`` (a Numba
target option, present in the pinned numba 0.68: no reference counting).  Otherwise
Numba increments and decrements the reference count of every array argument of a
call it does not inline, and these helpers take up to ~20 arrays: 100-400 ns per
call (measured), against ~50 ns for the arithmetic of a deep-attention likelihood.
They must not allocate or create array views; Numba refuses to compile them if they
do ("NRT required but not enabled").  The drivers that call them keep reference
counting.
"""
from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy", _nrt=False)
def lu_solve_logdet(T, E, X):
    """Solve ``T X = E`` (``T`` M x M, ``E`` M x r) by partial-pivot LU.

    Returns ``log|det T|`` (``-inf`` for a singular ``T``; ``X`` is then garbage).
    ``T`` and ``E`` are overwritten.
    """
    M = T.shape[0]
    r = E.shape[1]
    # |det T| as a running product of the pivots, one log at the end (a log per pivot was
    # a third of the reduced posterior rule's cost); a pivot outside [1e-150, 1e150] goes
    # to the log directly and the product is folded once it leaves that range, so it
    # never leaves [1e-300, 1e300]
    logdet = 0.0
    prod = 1.0
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
        if best > 1e150 or best < 1e-150:
            logdet += math.log(best)
        else:
            prod *= best
            if prod > 1e150 or prod < 1e-150:
                logdet += math.log(prod)
                prod = 1.0
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
    return logdet + math.log(prod)


@numba.njit(cache=True, error_model="numpy")
def weighted_moments(logw, zs, count, out_mean, out_cov):
    """From log-weights and points (first ``count`` rows): log of the total weight,
    the weighted mean and the *centred* weighted covariance (a pass for the largest
    log-weight, then West's one-pass update: no cancellation).  Returns ``-inf`` (and
    NaN moments) when no point has weight."""
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
    # one pass of West's weighted update (Commun. ACM 22, 532, 1979): the mean and the
    # centred scatter move together -- no cancellation, one exp per point (the two-pass
    # form took each exp twice)
    total = 0.0
    out_mean[:] = 0.0
    out_cov[:, :] = 0.0
    delta = np.empty(d)
    for j in range(count):
        w = math.exp(logw[j] - lmax)
        if w == 0.0:
            continue
        old = total
        total += w
        f = w / total
        for a in range(d):
            delta[a] = zs[j, a] - out_mean[a]
            out_mean[a] += f * delta[a]
        # scatter += w (x - mean_old)(x - mean_new)^T = w (1 - f) delta delta^T, with
        # 1 - f = old/total: no cancellation when a point outweighs all before it
        c = w * (old / total)
        for a in range(d):
            for b in range(a, d):
                out_cov[a, b] += c * delta[a] * delta[b]
    for a in range(d):
        for b in range(a, d):
            out_cov[a, b] /= total
            out_cov[b, a] = out_cov[a, b]
    return lmax + math.log(total)


@numba.njit(cache=True, _nrt=False)
def cholesky_logdet(S):
    """In-place lower Cholesky factor of the SPD ``S``; returns ``log det S`` (``-inf``
    if ``S`` is not numerically positive definite)."""
    n = S.shape[0]
    logdet = 0.0
    for j in range(n):
        acc = S[j, j]
        for k in range(j):
            acc -= S[j, k] * S[j, k]
        if not acc > 0.0:
            return -math.inf
        ljj = math.sqrt(acc)
        S[j, j] = ljj
        logdet += 2.0 * math.log(ljj)
        for i in range(j + 1, n):
            acc = S[i, j]
            for k in range(j):
                acc -= S[i, k] * S[j, k]
            S[i, j] = acc / ljj
        for i in range(j):
            S[i, j] = 0.0
    return logdet


@numba.njit(cache=True, _nrt=False)
def cholesky_solve(Lc, x):
    """Overwrite ``x`` with ``S^{-1} x`` given the Cholesky factor ``Lc`` of ``S``."""
    n = Lc.shape[0]
    for i in range(n):
        acc = x[i]
        for k in range(i):
            acc -= Lc[i, k] * x[k]
        x[i] = acc / Lc[i, i]
    for i in range(n - 1, -1, -1):
        acc = x[i]
        for k in range(i + 1, n):
            acc -= Lc[k, i] * x[k]
        x[i] = acc / Lc[i, i]


@numba.njit(cache=True, _nrt=False)
def gaussian_conjugate(A, b, y, m, C, delta, post_mean, post_cov, AC, S, vec):
    """``x ~ N(m, C)``, ``y | x ~ N(A x + b, delta I)``: returns ``log N(y; A m + b, S)``
    with ``S = A C A^T + delta I`` and writes the posterior mean
    ``m + C A^T S^{-1} r`` (``r = y - A m - b``) and covariance
    ``C - C A^T S^{-1} A C`` (Gaussian conditioning on the affine indices).
    Work space (no allocation per call): ``AC`` (n_out, nS), ``S`` (n_out, n_out),
    ``vec`` (3, n_out)."""
    n_out = A.shape[0]
    nS = A.shape[1]
    if nS == 0:
        # nothing affine: S = delta I, no factorization (the hot path of a link with no
        # affine index, e.g. deep attention, evaluated ~3000 times per sample)
        if not delta > 0.0:
            return -math.inf
        quad = 0.0
        for i in range(n_out):
            ri = y[i] - b[i]
            quad += ri * ri
        return -0.5 * quad / delta - 0.5 * n_out * math.log(2.0 * math.pi * delta)
    r = vec[0]
    alpha = vec[1]
    col = vec[2]
    for i in range(n_out):
        for j in range(nS):
            acc = 0.0
            for k in range(nS):
                acc += A[i, k] * C[k, j]
            AC[i, j] = acc
    for i in range(n_out):
        for j in range(i + 1):
            acc = 0.0
            for k in range(nS):
                acc += AC[i, k] * A[j, k]
            S[i, j] = acc
            S[j, i] = acc
        S[i, i] += delta
        acc = y[i] - b[i]
        for k in range(nS):
            acc -= A[i, k] * m[k]
        r[i] = acc
    logdet = cholesky_logdet(S)
    if logdet == -math.inf:
        return -math.inf
    for i in range(n_out):
        alpha[i] = r[i]
    cholesky_solve(S, alpha)
    quad = 0.0
    for i in range(n_out):
        quad += r[i] * alpha[i]
    for j in range(nS):
        acc = m[j]
        for i in range(n_out):
            acc += AC[i, j] * alpha[i]
        post_mean[j] = acc
    for j in range(nS):
        for i in range(n_out):
            col[i] = AC[i, j]
        cholesky_solve(S, col)          # S^{-1} (A C)_{., j}
        for k in range(j + 1):
            acc = C[k, j]
            for i in range(n_out):
                acc -= AC[i, k] * col[i]
            post_cov[k, j] = acc
            post_cov[j, k] = acc
    return -0.5 * quad - 0.5 * logdet - 0.5 * n_out * math.log(2.0 * math.pi)


@numba.njit(cache=True)
def mixture_moments(logw, zs, within, sub, count, out_mean, out_cov):
    """:func:`weighted_moments` of a mixture whose node ``j`` also carries the
    covariance ``within[j]`` on the coordinates ``sub`` (law of total covariance)."""
    logz = weighted_moments(logw, zs, count, out_mean, out_cov)
    if logz == -math.inf or sub.shape[0] == 0:
        return logz
    ns = sub.shape[0]
    for j in range(count):
        w = math.exp(logw[j] - logz)
        if w == 0.0:
            continue
        for a in range(ns):
            for b in range(ns):
                out_cov[sub[a], sub[b]] += w * within[j, a, b]
    return logz


@numba.njit(cache=True)
def moment_change(logz0, mean0, cov0, logz1, mean1, cov1, sd):
    """Largest change between two moment sets, each in its natural unit: ``log Z``,
    means over the prior standard deviations ``sd``, covariances over ``sd_i sd_j``."""
    d = mean0.shape[0]
    err = abs(logz1 - logz0)
    for a in range(d):
        err = max(err, abs(mean1[a] - mean0[a]) / sd[a])
        for b in range(d):
            err = max(err, abs(cov1[a, b] - cov0[a, b]) / (sd[a] * sd[b]))
    return err


@numba.njit(cache=True, parallel=True)
def moment_change_batch(logz0, mean0, cov0, logz1, mean1, cov1, sd):
    """:func:`moment_change` per sample (arrays ``(n,)``, ``(n, d)``, ``(n, d, d)``)."""
    n = logz0.shape[0]
    out = np.empty(n)
    for s in numba.prange(n):
        out[s] = moment_change(logz0[s], mean0[s], cov0[s], logz1[s], mean1[s], cov1[s], sd)
    return out
