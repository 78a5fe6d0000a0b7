"""Numba routines behind :mod:`symtheory.core.spectral` (generic: any polynomial ``P(G, x)``).

Coefficient convention: ``A[k, j]`` multiplies ``G**k * x**j``.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import register_jitable

from . import quadrature
from .quadrature import tanh_sinh_unit

#: float64 machine epsilon (a global: Numba freezes it into the compiled code)
EPS = float(np.finfo(np.float64).eps)


@numba.njit(cache=True)
def coeffs_at(A, x):
    """c[k] = sum_j A[k, j] x^j (Horner), real x."""
    K, J = A.shape
    c = np.zeros(K)
    for k in range(K):
        acc = 0.0
        for j in range(J - 1, -1, -1):
            acc = acc * x + A[k, j]
        c[k] = acc
    return c


@numba.njit(cache=True)
def poly_roots(c):
    """All complex roots of sum_k c[k] g^k (leading zeros stripped)."""
    n = c.shape[0] - 1
    scale = 0.0
    for k in range(c.shape[0]):
        scale = max(scale, abs(c[k]))
    while n > 0 and abs(c[n]) <= 1e-14 * scale:
        n -= 1
    if n <= 0:
        return np.empty(0, dtype=np.complex128)
    M = np.zeros((n, n), dtype=np.complex128)
    for i in range(n):
        M[0, i] = -c[n - 1 - i] / c[n]
    for i in range(1, n):
        M[i, i - 1] = 1.0
    return np.linalg.eigvals(M)


@numba.njit(cache=True)
def poly_eval(c, g):
    """(p(g), p'(g)) for complex g."""
    n = c.shape[0] - 1
    p = c[n] + 0j
    dp = 0j
    for k in range(n - 1, -1, -1):
        dp = dp * g + p
        p = p * g + c[k]
    return p, dp


@numba.njit(cache=True)
def newton(c, g0, maxit):
    """Newton on sum_k c[k] g^k from g0.

    Converged when the step is at rounding level or the residual is within rounding
    of the polynomial's evaluation (backward-stable stop; near a double root -- a
    spectral edge -- steps stall at ~sqrt(eps) while the residual is already exact).
    """
    g = g0
    n = c.shape[0] - 1
    for _ in range(maxit):
        p, dp = poly_eval(c, g)
        ag = abs(g)
        bound = 0.0
        for k in range(n, -1, -1):
            bound = bound * ag + abs(c[k])
        if abs(p) <= 16 * EPS * bound:
            return g, True
        if dp == 0:
            return g, False
        step = p / dp
        g = g - step
        if abs(step) <= 1e-15 * abs(g) + 1e-300:
            return g, True
    return g, False


@numba.njit(cache=True)
def upper_root(A, x):
    """Root of P(., x) with the largest imaginary part (the density branch, G(x - i0))."""
    r = poly_roots(coeffs_at(A, x))
    best = 0
    for i in range(1, r.shape[0]):
        if r[i].imag > r[best].imag:
            best = i
    return r[best]


@numba.njit(cache=True)
def upper_roots_continued(A, xs, out):
    """G(x - i0) on an ordered grid inside one bulk, by Newton continuation.

    Eigenvalue solve at the middle node, then Newton from the neighbour's root; a
    node whose Newton result is not in the upper half-plane (or not converged) is
    solved by eigenvalues.  Returns the number of fallbacks.
    """
    n = xs.shape[0]
    if n == 0:
        return 0
    mid = n // 2
    out[mid] = upper_root(A, xs[mid])
    fallbacks = 1
    for direction in (1, -1):
        i = mid + direction
        prev = out[mid]
        while 0 <= i < n:
            c = coeffs_at(A, xs[i])
            g, ok = newton(c, prev, 40)
            # a real root is another branch (or an edge node, rare): decide by eigenvalues
            if not ok or g.imag <= 1e-12 * abs(g):
                g = upper_root(A, xs[i])
                fallbacks += 1
            out[i] = g
            prev = g
            i += direction
    return fallbacks


@numba.njit(cache=True)
def edge_value(A, e):
    """Real value of G at a branch point e (mean of the closest pair of roots)."""
    r = poly_roots(coeffs_at(A, e))
    best = np.inf
    val = 0.0
    for i in range(r.shape[0]):
        for j in range(i + 1, r.shape[0]):
            d = abs(r[i] - r[j])
            if d < best:
                best = d
                val = 0.5 * (r[i].real + r[j].real)
    return val


@numba.njit(cache=True)
def real_root_between(A, x, lo, hi):
    """The real root of P(., x) in [lo, hi] (G is monotone between support edges).

    Returns NaN when no root or several roots qualify.
    """
    r = poly_roots(coeffs_at(A, x))
    width = abs(hi - lo)
    tol = 1e-9 * (width + abs(lo) + abs(hi)) + 1e-300
    found = 0
    val = np.nan
    for i in range(r.shape[0]):
        g = r[i]
        if abs(g.imag) <= 1e-7 * (abs(g.real) + width) + 1e-300:
            if lo - tol <= g.real <= hi + tol:
                found += 1
                val = g.real
    if found == 1:
        # polish on the real axis
        c = coeffs_at(A, x)
        g, ok = newton(c, val + 0j, 40)
        if ok and abs(g.imag) <= 1e-9 * (abs(g.real) + 1.0):
            return g.real
        return val
    return np.nan


# the one tanh-sinh rule, compiled for the drivers below: core.quadrature's own
# tanh_sinh_nodes, with the unit rule it calls made callable from compiled code
register_jitable(tanh_sinh_unit)
tanh_sinh_nodes = numba.njit(cache=True)(quadrature.tanh_sinh_nodes)


def build_integrate(kern, jit):
    """The fused integration driver of one integrand kernel (a
    :meth:`~symtheory.core.codegen.Kernel.drivers` factory): ``integrate(A, pieces, pars,
    rtol, max_level, total, err)`` adds ``int f_j(x, mu(x), H(x); pars) dx`` over every
    piece ``(a, b)`` of ``pieces`` into ``total`` (nested tanh-sinh, refined until two
    levels agree to ``rtol``; their difference into ``err``) and returns ``(nodes used,
    every piece converged)``.  ``kern(xin, pars, out)`` is the integrands' packed kernel,
    ``xin = (x, mu, H)``."""
    from types import SimpleNamespace

    @jit(error_model="numpy")
    def integrate(A, pieces, pars, rtol, max_level, total, err):
        n_out = total.shape[0]
        used = 0
        all_ok = True
        cur = np.zeros(n_out)
        prev = np.zeros(n_out)
        acc = np.zeros(n_out)
        xin = np.empty(3)
        for p in range(pieces.shape[0]):
            a = pieces[p, 0]
            b = pieces[p, 1]
            acc[:] = 0.0
            ok = False
            for level in range(max_level + 1):
                x, w = tanh_sinh_nodes(a, b, level, level > 0)
                g = np.empty(x.shape[0], dtype=np.complex128)
                upper_roots_continued(A, x, g)
                vals = np.empty((x.shape[0], n_out))
                for i in range(x.shape[0]):
                    xin[0] = x[i]
                    xin[1] = max(g[i].imag, 0.0) / math.pi
                    xin[2] = g[i].real
                    kern(xin, pars, vals[i])
                used += x.shape[0]
                for j in range(n_out):
                    s = 0.0
                    for i in range(x.shape[0]):
                        s += w[i] * vals[i, j]
                    acc[j] += s
                    cur[j] = acc[j] * 2.0 ** (-level)
                if level >= 3:
                    ok = True
                    for j in range(n_out):
                        if not abs(cur[j] - prev[j]) <= rtol * max(abs(cur[j]), 1e-300):
                            ok = False
                    if ok or level == max_level:
                        break
                prev[:] = cur
            for j in range(n_out):
                total[j] += cur[j]
                err[j] += abs(cur[j] - prev[j])
            all_ok = all_ok and ok
        return used, all_ok

    return SimpleNamespace(integrate=integrate)


@numba.njit(cache=True)
def _density_on(A, x):
    g = np.empty(x.shape[0], dtype=np.complex128)
    upper_roots_continued(A, x, g)
    return np.maximum(g.imag, 0.0) / np.pi


@numba.njit(cache=True)
def _log_integral(A, a, b, x0, level):
    """int_a^b mu(y) log|x0 - y| dy (x0 outside (a, b) or at an end)."""
    y, w = tanh_sinh_nodes(a, b, level, False)
    mu = _density_on(A, y)
    s = 0.0
    for i in range(y.shape[0]):
        d = abs(x0 - y[i])
        if d > 0.0:
            s += w[i] * mu[i] * np.log(d)
    return s * 2.0 ** (-level)


@numba.njit(cache=True)
def log_energy(A, bulks, level):
    """(Sigma, int mu log|x|) for a law supported on the pieces (rows (a, b), on R;
    the caller cuts them at 0 and at near-singular points).

    Sigma = int int mu(x) mu(y) log|x - y| dx dy: outer tanh-sinh over x; the inner
    potential U(x) = int mu(y) log|x - y| dy is split at y = x inside x's own bulk,
    so every log singularity sits at an end of a tanh-sinh interval.
    """
    sigma = 0.0
    logx = 0.0
    for p in range(bulks.shape[0]):
        a, b = bulks[p, 0], bulks[p, 1]
        x, w = tanh_sinh_nodes(a, b, level, False)
        mu = _density_on(A, x)
        for k in range(x.shape[0]):
            if mu[k] == 0.0:
                continue
            U = 0.0
            for q in range(bulks.shape[0]):
                c, d = bulks[q, 0], bulks[q, 1]
                if q == p:  # split at the log singularity y = x
                    U += _log_integral(A, c, x[k], x[k], level)
                    U += _log_integral(A, x[k], d, x[k], level)
                else:
                    U += _log_integral(A, c, d, x[k], level)
            sigma += w[k] * mu[k] * U
        # int mu log|x| over this piece (pieces are cut at 0 by the caller)
        logx += _log_integral(A, a, b, 0.0, level)
    return sigma * 2.0 ** (-level), logx
