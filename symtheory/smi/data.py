"""Teacher-student data for SMI models (smi.md Sec. 1): ``y_mu = g(W* x_mu / sqrt(D))``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.memory import check_allocation
from ..core.validate import integer, real


@dataclass
class TeacherData:
    X: np.ndarray        # (n, D, M) inputs, i.i.d. N(0, 1)
    y: np.ndarray        # (n, n_out) outputs (flattened link)
    W: np.ndarray        # (P, D) teacher weights, i.i.d. N(0, 1)
    seed: int
    noise_variance: float

    @property
    def alpha(self) -> float:
        return self.X.shape[0] / self.X.shape[1]


def generate(model, d: int, alpha: float, *, seed: int = 0, noise_variance: float = 0.0) -> TeacherData:
    """Draw ``W*``, ``n = round(alpha d)`` sequences and their outputs (explicit seed)."""
    d = integer("d", d, low=1)
    alpha = real("alpha", alpha, low=0.0, low_open=True)
    noise_variance = real("noise_variance", noise_variance, low=0.0)
    n = max(1, int(round(alpha * d)))
    check_allocation(n * d * model.M * 8 * 2, what=f"SMI data (n={n}, d={d}, M={model.M})")
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((model.P, d))
    X = rng.standard_normal((n, d, model.M))
    Z = np.einsum("pd,sdm->spm", W, X) / np.sqrt(d)
    y = model.g(Z).reshape(n, -1)
    if noise_variance > 0:
        y = y + np.sqrt(noise_variance) * rng.standard_normal(y.shape)
    return TeacherData(X, y, W, seed, noise_variance)
