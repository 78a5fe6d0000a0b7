"""symtheory: exact theory of learning from long sequences of high-dimensional tokens.

Symbolic model definitions (SymPy) are compiled into cached Numba kernels and
evaluated in float64, or with mpmath at any precision from the same expressions.

Submodules are imported lazily so that ``import symtheory`` stays fast:

* :mod:`symtheory.core` -- generic machinery (code generation, special functions,
  free probability, algebraic spectral laws, solvers).
* :mod:`symtheory.bsr` -- bilinear sequence regression (Erba et al., arXiv:2410.18858).
* :mod:`symtheory.smi` -- sequence multi-index models and deep attention (Troiani et al.,
  arXiv:2502.00901).
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = ["core", "bsr", "smi", "__version__"]


def __getattr__(name: str):
    if name in ("core", "bsr", "smi", "cli"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'symtheory' has no attribute {name!r}")
