"""symtheory: exact theory of learning from long sequences of high-dimensional tokens.

Symbolic model definitions (SymPy) are compiled into cached Numba kernels and
evaluated in float64, or with mpmath at any precision from the same expressions.

Submodules are imported lazily (``lazy_loader``) so that ``import symtheory`` stays fast:

* :mod:`symtheory.core` -- generic machinery (code generation, special functions,
  free probability, algebraic spectral laws, solvers, the task schema).
* :mod:`symtheory.glm` -- factors (channels, priors) and the engines written against them.
* :mod:`symtheory.bsr` -- bilinear sequence regression (Erba et al., arXiv:2410.18858).
* :mod:`symtheory.smi` -- sequence multi-index models and deep attention (Troiani et al.,
  arXiv:2502.00901).
* :mod:`symtheory.aim` -- attention-indexed models (Boncoraglio et al., arXiv:2506.01582)
  and the quadratic network.
* :mod:`symtheory.sweep` -- sweeps, their results store, ``symtheory reproduce``.
* :mod:`symtheory.thresholds` -- the weak-recovery and staircase thresholds (glm).
"""
from __future__ import annotations

import lazy_loader as _lazy

__version__ = "0.1.0"

__getattr__, __dir__, _submodules = _lazy.attach(
    __name__, submodules=["core", "glm", "bsr", "smi", "aim", "sweep", "thresholds", "cli"])
__all__ = _submodules + ["__version__"]
