"""Output channels of generalized linear models, symbolically.

A channel ``P_out(y | z)`` (``z`` the pre-activation) enters message passing and state
evolution only through ``Z_out(y; omega, V) = E_{z ~ N(omega, V)} P_out(y | z)``.
:class:`ScalarChannel` takes ``log Z_out`` as a SymPy expression and derives

    g_out  = d log Z_out / d omega,      dg_out = d g_out / d omega,

compiled into one vectorized kernel (over samples ``y, omega``).  For channels given by
their likelihood, :func:`gaussian_convolution_channel` derives ``Z_out`` itself by
integrating the likelihood against the Gaussian (SymPy ``integrate``).
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from ..core.codegen import Kernel


class ScalarChannel:
    """GLM output channel from ``log Z_out(y; omega, V, *params)``."""

    def __init__(self, name, log_Z, y, omega, V, params=()):
        self.name = name
        self.log_Z = sp.simplify(log_Z)
        self.y, self.omega, self.V = y, omega, V
        self.params = tuple(params)
        self.g_out = sp.simplify(sp.diff(self.log_Z, omega))
        self.dg_out = sp.simplify(sp.diff(self.g_out, omega))
        self.kernel = Kernel(f"channel_{name}", (y, omega, V) + self.params,
                             [self.g_out, self.dg_out], vector_args=(y, omega),
                             doc=f"g_out and d g_out/d omega of the {name} channel")

    def gout(self, y, omega, V, *params):
        """``(g_out, dg_out)`` arrays for samples ``y, omega`` at variance ``V``."""
        out = self.kernel.vec(np.asarray(y, float), np.asarray(omega, float), float(V),
                              *map(float, params))
        return out[:, 0], out[:, 1]


def gaussian_convolution_channel(name, likelihood, y, z, params=()):
    """Channel with ``Z_out = int N(z; omega, V) likelihood(y | z) dz`` integrated by SymPy."""
    omega = sp.Symbol("omega", real=True)
    V = sp.Symbol("V", positive=True)
    gauss = sp.exp(-(z - omega) ** 2 / (2 * V)) / sp.sqrt(2 * sp.pi * V)
    Z = sp.simplify(sp.integrate(gauss * likelihood, (z, -sp.oo, sp.oo), conds="none"))
    return ScalarChannel(name, sp.expand_log(sp.log(Z), force=True), y, omega, V, params)


def gaussian_noise_channel():
    """``y = z + sqrt(Delta) xi``: ``Z_out = N(y; omega, V + Delta)``, derived."""
    y, z = sp.symbols("y z", real=True)
    delta = sp.Symbol("delta", positive=True)
    lik = sp.exp(-(y - z) ** 2 / (2 * delta)) / sp.sqrt(2 * sp.pi * delta)
    return gaussian_convolution_channel("gaussian_noise", lik, y, z, params=(delta,))
