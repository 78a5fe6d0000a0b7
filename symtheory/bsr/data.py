"""Teacher-student data for BSR (bsr.md 1).

Sizes from ``(d, beta = L/d, rho = r/d, alpha = n/(dL))`` -- ``rho`` is relative to the
token dimension ``d`` for every ``beta``, the convention of the theory (``beta < 1``
is the transposed problem ``(1/beta, rho/beta)``, bsr.md 14.1).
``S* = U V^T / sqrt(r)`` (``U`` d x r, ``V`` L x r, i.i.d. N(0, 1)), tokens ``X_mu`` with
i.i.d. N(0, 1) entries and labels ``y_mu = <X_mu, S*>/sqrt(dL) + sqrt(Delta) xi_mu``.
``X_mu`` is stored as a ``d x L`` array aligned with ``S*`` (the transpose of the
paper's ``L x d`` token matrix; only the pairing matters).  ``Phi = X.reshape(n, dL)/sqrt(dL)``
is the design of the vectorized linear model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core import validate
from ..core.memory import check_allocation, human


@dataclass
class BSRData:
    Phi: np.ndarray       # (n, d L): vec(X_mu)/sqrt(dL), row-major vec of d x L
    y: np.ndarray         # (n,)
    S: np.ndarray         # (d, L) teacher, unit-variance entries
    U: np.ndarray
    V: np.ndarray
    d: int
    L: int
    r: int
    delta: float
    seed: int

    @property
    def n(self) -> int:
        return self.y.shape[0]

    @property
    def alpha(self) -> float:
        return self.n / (self.d * self.L)

    @property
    def beta(self) -> float:
        return self.L / self.d

    @property
    def rho(self) -> float:
        """``r/d`` (package convention, any ``beta``; docs/theory/README.md)."""
        return self.r / self.d

    def X(self, mu: int) -> np.ndarray:
        """Token matrix of sample ``mu`` (d x L)."""
        return self.Phi[mu].reshape(self.d, self.L) * math.sqrt(self.d * self.L)


def sizes(d, beta, rho, alpha):
    """Integer sizes ``(L, r, n)`` for ``L = round(beta d)``, ``r = round(rho d)``,
    ``n = round(alpha d L)`` (``rho = r/d`` for every ``beta``; ``r > min(d, L)`` is a
    full-rank teacher, allowed)."""
    d = validate.integer("d", d, low=1)
    beta = validate.real("beta", beta, low=0, low_open=True)
    rho = validate.real("rho", rho, low=0, low_open=True)
    alpha = validate.real("alpha", alpha, low=0)
    L = int(round(beta * d))
    if L < 1:
        raise validate.ParameterError(f"beta*d = {beta * d:g} gives no token (need L >= 1)")
    r = int(round(rho * d))
    if r < 1:
        raise validate.ParameterError(f"rho*d = {rho * d:g} gives rank 0 (need r = round(rho d) >= 1)")
    n = int(round(alpha * d * L))
    return L, r, n


def generate(d, beta, rho, alpha, delta=0.0, *, seed: int, dtype=np.float64) -> BSRData:
    """Draw a BSR instance; refuses (naming the size) one that would not fit in memory."""
    delta = validate.real("delta", delta, low=0)
    seed = validate.integer("seed", seed, low=0)
    L, r, n = sizes(d, beta, rho, alpha)
    itemsize = np.dtype(dtype).itemsize
    check_allocation(n * d * L * itemsize, f"the design of n={n} sequences of {d}x{L} tokens")
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((d, r))
    V = rng.standard_normal((L, r))
    S = U @ V.T / math.sqrt(r)
    Phi = rng.standard_normal((n, d * L), dtype=dtype if dtype in (np.float32, np.float64) else np.float64)
    Phi *= 1.0 / math.sqrt(d * L)
    y = Phi @ S.ravel() + math.sqrt(delta) * rng.standard_normal(n)
    return BSRData(Phi, y, S, U, V, d, L, r, delta, seed)


def design_bytes(d, beta, rho, alpha, dtype=np.float64) -> str:
    L, r, n = sizes(d, beta, rho, alpha)
    return human(n * d * L * np.dtype(dtype).itemsize)
