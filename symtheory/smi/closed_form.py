"""Analytically solvable SMI models used to check the generic machinery (smi.md Sec. 13).

Each is a plain declaration (link + reduction); nothing here computes.
"""
from __future__ import annotations

import sympy as sp

from ..glm.factors.multi_index import DeterministicReduction, MultiIndexModel
from ..core.validate import integer


def linear_tokens(seq_len: int = 2) -> MultiIndexModel:
    """Declare the linear-token model ``y_m = z_m`` (``P = 1``; smi.md 13.1).

    With Gaussian output noise ``Delta`` its state evolution is solved in closed form:
    ``q = alpha M / (Delta + 1 - q + alpha M)``.

    Parameters
    ----------
    seq_len : int, optional
        Number of tokens ``M`` (>= 1).

    Returns
    -------
    MultiIndexModel
        The declared model (no reduction: it needs output noise).

    Examples
    --------
    >>> from symtheory import smi
    >>> model = smi.linear_tokens(seq_len=3)
    >>> model.P, model.M, model.link
    (1, 3, Matrix([[z0_0, z0_1, z0_2]]))
    """
    M = integer("seq_len", seq_len, low=1)
    Z = sp.Matrix(1, M, lambda _, m: sp.Symbol(f"z0_{m}", real=True))
    return MultiIndexModel(f"linear_tokens_M{M}", Z, Z, description=f"y = z, {M} tokens")


def outer_product(seq_len: int = 2) -> MultiIndexModel:
    """Declare the outer-product model ``y = z z^T`` (single-layer linear attention, smi.md 13.3).

    ``P = 1``; its posterior mean is ``E[z | y, omega, V] = z tanh(z . omega / V)`` and its
    critical sample ratio ``alpha_c = 1/(M(M+1))``.

    Parameters
    ----------
    seq_len : int, optional
        Number of tokens ``M`` (>= 1).

    Returns
    -------
    MultiIndexModel
        The declared model with its deterministic reduction.

    Examples
    --------
    >>> import numpy as np
    >>> from symtheory import smi
    >>> model = smi.outer_product(seq_len=2)
    >>> model.link
    Matrix([
    [   z0_0**2, z0_0*z0_1],
    [z0_0*z0_1,    z0_1**2]])
    >>> model.g(np.array([[[1.0, 2.0]]]))[0]
    array([[1., 2.],
           [2., 4.]])
    """
    M = integer("seq_len", seq_len, low=1)
    Z = sp.Matrix(1, M, lambda _, m: sp.Symbol(f"z0_{m}", real=True))
    E = sp.Matrix(M, 1, lambda m, _: sp.Symbol(f"e{m}", real=True))
    red = DeterministicReduction(solved_rows=(0,), mixing=sp.eye(M), E=E, head=E * E.T,
                                 observed=tuple((m, m) for m in range(M)))
    return MultiIndexModel(f"outer_product_M{M}", Z, Z.T * Z, reduction=red,
                    description=f"y = z z^T, {M} tokens")
