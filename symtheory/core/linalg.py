"""Small dense linear-algebra helpers on symmetric matrices."""
from __future__ import annotations

import numpy as np


def psd_sqrt(A: np.ndarray) -> np.ndarray:
    """Symmetric PSD square root by ``eigh`` (negative round-off eigenvalues -> error)."""
    A = 0.5 * (A + A.T)
    lam, O = np.linalg.eigh(A)
    if lam[0] < -1e-12 * max(1.0, abs(lam[-1])):
        raise ValueError(f"matrix is not positive semidefinite (eigenvalue {lam[0]:.3g})")
    return (O * np.sqrt(np.clip(lam, 0.0, None))) @ O.T
