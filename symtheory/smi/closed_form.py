"""Analytically solvable SMI models used to check the generic machinery (smi.md Sec. 13).

Each is a plain declaration (link + reduction); nothing here computes.
"""
from __future__ import annotations

import sympy as sp

from ..glm.factors.multi_index import DeterministicReduction, MultiIndexModel
from ..core.validate import integer


def linear_tokens(seq_len: int = 2) -> MultiIndexModel:
    """``y_m = z_m`` (P = 1); with Gaussian output noise Delta this is smi.md 13.1:
    ``q = alpha M / (Delta + 1 - q + alpha M)``."""
    M = integer("seq_len", seq_len, low=1)
    Z = sp.Matrix(1, M, lambda _, m: sp.Symbol(f"z0_{m}", real=True))
    return MultiIndexModel(f"linear_tokens_M{M}", Z, Z, description=f"y = z, {M} tokens")


def outer_product(seq_len: int = 2) -> MultiIndexModel:
    """``y = z z^T`` (P = 1, single-layer linear attention output, smi.md 13.3):
    ``E[z | y, omega, V] = z tanh(z . omega / V)``, ``alpha_c = 1/(M(M+1))``."""
    M = integer("seq_len", seq_len, low=1)
    Z = sp.Matrix(1, M, lambda _, m: sp.Symbol(f"z0_{m}", real=True))
    E = sp.Matrix(M, 1, lambda m, _: sp.Symbol(f"e{m}", real=True))
    red = DeterministicReduction(solved_rows=(0,), mixing=sp.eye(M), E=E, head=E * E.T,
                                 observed=tuple((m, m) for m in range(M)))
    return MultiIndexModel(f"outer_product_M{M}", Z, Z.T * Z, reduction=red,
                    description=f"y = z z^T, {M} tokens")
