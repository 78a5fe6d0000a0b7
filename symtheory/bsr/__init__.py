"""Bilinear sequence regression (BSR): Bayes-optimal theory and baselines.

Erba, Troiani, Biggio, Maillard, Zdeborova, arXiv:2410.18858.  Package notation
(``docs/theory/README.md``): ``d`` token dimension, ``seq_len = L`` tokens,
``beta = L/d``, ``rho = r/d`` (for every ``beta``; ``beta < 1`` is the transposed
problem ``(1/beta, rho/beta)``), ``alpha = n/(d L)``, ``delta`` label-noise variance.
``mmse`` is ``1 - q``, the per-entry error on ``S*`` (= test error - delta); every
value carries an error bound ``mmse_error`` and ``converged`` means certified.

>>> from symtheory import bsr
>>> table = bsr.bo_curve([0.1, 0.2, 0.3], beta=2.0, rho=0.5, delta=0.0)
"""
import importlib
import sys
import types

# lazy (PEP 562): the command-line parser imports symtheory.bsr.cli without the numerics
_FROM_THEORY = ("BOPoint", "MMSEEstimate", "alpha_pr", "bo_curve", "bo_point", "canonical",
                "mmse_rie", "mmse_rie_estimate", "mmse_rie_mp", "ridge_mse", "solve_overlap",
                "theory")

__all__ = ["bo_curve", "bo_point", "alpha_pr", "ridge_mse", "mmse_rie", "mmse_rie_estimate",
           "mmse_rie_mp", "BOPoint", "MMSEEstimate", "solve_overlap", "theory"]


def __getattr__(name):
    if name in _FROM_THEORY:
        return getattr(importlib.import_module(f"{__name__}.theory"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """``bsr.theory`` stays the function ``theory()`` (as with an eager ``from .theory
    import theory``) when importing the submodule ``bsr.theory`` rebinds the attribute."""

    def __setattr__(self, name, value):
        if name == "theory" and isinstance(value, types.ModuleType):
            value = value.theory
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
