"""Fused Numba driver of the level-set integral at one fixed tanh-sinh level
(:func:`~symtheory.glm.integrate.level_set.fixed_level_set_moments`).

:func:`build` makes, from the packed kernel ``kern(v, pars, out)`` of ``v = (y, x,
delta)`` (:func:`~symtheory.glm.integrate.level_set.level_set_kernel`: the ``B`` branches
``h_k(y, x)`` and Jacobians ``|d_s g|`` in global form, then the same at ``x = c_j +
delta`` for each critical point ``c_j``), ``fixed``::

    Z_out(y) = sum_pieces sum_nodes w sum_k N((h_k, x); omega, Sigma) / |d_s g|_k

with ``E[z|y] - omega`` and ``Cov(z|y) - Sigma``, the same nodes and weights as the numpy
path (:func:`~symtheory.glm.integrate.level_set._piece_nodes`), accumulated with a
running maximum of the log terms (no overflow, no second pass).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numba
import numpy as np

LOG_2PI = math.log(2.0 * math.pi)


def build(kern, jit):
    """The driver of one level set (module docstring); ``jit`` compiles and caches it for
    this kernel (:meth:`symtheory.core.codegen.Kernel.drivers`)."""
    return SimpleNamespace(fixed=_fixed(kern, jit))


def _fixed(kern, jit):
    @jit(parallel=True, error_model="numpy")
    def fixed(y, omega, prec, logdet, bounds, ids, scale, side, gap, wunit, step,
              solved, free, nb, n_out, logZ, mean, cov):
        """Per point ``s``: pieces ``bounds[s]`` (ids: critical point at each bound, -1
        none), tanh-sinh unit table ``(side, gap, wunit)``, into logZ, mean, cov."""
        n = y.shape[0]
        K = bounds.shape[1] - 1
        N = side.shape[0]
        pars = np.empty(0)
        for s in numba.prange(n):
            v = np.empty(3)
            out = np.empty(n_out)
            z = np.empty(2)
            d = np.empty(2)
            top = -np.inf
            s0 = 0.0
            s1 = np.zeros(2)
            s2 = np.zeros((2, 2))
            sc = scale[s]
            for k in range(K):
                a = bounds[s, k]
                b = bounds[s, k + 1]
                if not b > a:
                    continue
                fin_a = math.isfinite(a)
                fin_b = math.isfinite(b)
                if not fin_a and not fin_b:
                    continue            # _pieces always cuts at omega_free: never happens
                for j in range(N):
                    q = 0.5 * gap[j]
                    near_lo = side[j] < 0
                    if fin_a and fin_b:
                        length = b - a
                        dist = length * q
                        x = a + dist if near_lo else b - dist
                        jac = length
                    elif fin_a:         # [a, inf): x = a + sc t, t = u/(1 - u)
                        t = q / (1 - q) if near_lo else (1 - q) / q
                        dist = sc * t
                        x = a + dist
                        jac = sc / (1 - q) ** 2 if near_lo else sc / q ** 2
                    else:               # (-inf, b]: mirrored
                        t = (1 - q) / q if near_lo else q / (1 - q)
                        dist = sc * t
                        x = b - dist
                        jac = sc / q ** 2 if near_lo else sc / (1 - q) ** 2
                    w = 0.5 * step * wunit[j] * jac
                    if not (math.isfinite(x) and math.isfinite(w) and w > 0):
                        continue
                    end = ids[s, k] if near_lo else ids[s, k + 1]
                    v[0] = y[s]
                    v[1] = x
                    v[2] = dist if near_lo else -dist
                    kern(v, pars, out)
                    base = 0 if end < 0 else 2 * nb * (1 + end)
                    for br in range(nb):
                        h = out[base + br]
                        jg = abs(out[base + nb + br])
                        if not (math.isfinite(h) and jg > 0 and math.isfinite(jg)):
                            continue
                        z[solved] = h
                        z[free] = x
                        d[0] = z[0] - omega[s, 0]
                        d[1] = z[1] - omega[s, 1]
                        quad = (prec[0, 0] * d[0] * d[0] + 2 * prec[0, 1] * d[0] * d[1]
                                + prec[1, 1] * d[1] * d[1])
                        lf = -0.5 * quad - LOG_2PI - 0.5 * logdet - math.log(jg) + math.log(w)
                        if not math.isfinite(lf):
                            continue
                        if lf > top:
                            r = math.exp(top - lf) if math.isfinite(top) else 0.0
                            s0 *= r
                            for i1 in range(2):
                                s1[i1] *= r
                                for i2 in range(2):
                                    s2[i1, i2] *= r
                            top = lf
                        e = math.exp(lf - top)
                        s0 += e
                        for i1 in range(2):
                            s1[i1] += e * d[i1]
                            for i2 in range(2):
                                s2[i1, i2] += e * d[i1] * d[i2]
            if s0 > 0:
                logZ[s] = math.log(s0) + top
                for i1 in range(2):
                    mean[s, i1] = s1[i1] / s0
                for i1 in range(2):
                    for i2 in range(2):
                        cov[s, i1, i2] = s2[i1, i2] / s0 - mean[s, i1] * mean[s, i2]
            else:
                logZ[s] = -np.inf
                for i1 in range(2):
                    mean[s, i1] = np.nan
                    for i2 in range(2):
                        cov[s, i1, i2] = np.nan
    return fixed
