"""Bilinear sequence regression (BSR): Bayes-optimal theory and baselines.

Erba, Troiani, Biggio, Maillard, Zdeborova, arXiv:2410.18858.  Package notation
(``docs/theory/README.md``): ``d`` token dimension, ``seq_len = L`` tokens,
``beta = L/d``, ``rho = r/d`` (for every ``beta``; ``beta < 1`` is the transposed
problem ``(1/beta, rho/beta)``), ``alpha = n/(d L)``, ``delta`` label-noise variance.
``mmse`` is ``1 - q``, the per-entry error on ``S*`` (= test error - delta); every
value carries an error bound ``mmse_error`` and ``converged`` means certified.

>>> from symtheory import bsr
>>> table = bsr.bo_curve([0.1, 0.2, 0.3], beta=2.0, rho=0.5, delta=0.0)

Imports are lazy (``lazy_loader``): the command-line parser imports
:mod:`symtheory.bsr.cli` without the numerics.  ``bsr.theory`` is the function
:func:`~symtheory.bsr.theory.theory` (the kernels), also after the submodule of the same
name has been imported (``lazy_loader`` guards the name).
"""
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={"theory": ["BOPoint", "MMSEEstimate", "alpha_pr", "bo_curve", "bo_point",
                             "canonical", "mmse_rie", "mmse_rie_estimate", "mmse_rie_mp",
                             "ridge_mse", "solve_overlap", "theory"]})
