from types import SimpleNamespace

import numpy as np

from . import helper


def build(kern, jit):
    """``total(xs, pars) = sum_i scale(out_0(xs[i])) + out_1(xs[i])`` with ``kern(x, pars,
    out)`` writing two outputs; ``one`` is an inner closure, ``scale`` a helper module."""
    @jit()
    def one(x, pars):
        out = np.empty(2)
        kern(x, pars, out)
        return helper.scale(out[0]) + out[1]

    @jit()
    def total(xs, pars):
        acc = 0.0
        x = np.empty(1)
        for i in range(xs.shape[0]):
            x[0] = xs[i]
            acc += one(x, pars)
        return acc
    return SimpleNamespace(total=total)
