"""Bilinear sequence regression (BSR): Bayes-optimal theory and baselines.

Erba, Troiani, Biggio, Maillard, Zdeborova, arXiv:2410.18858.  Package notation
(``docs/theory/README.md``): ``d`` token dimension, ``seq_len = L`` tokens,
``beta = L/d``, ``rho = r/min(d, L)``, ``alpha = n/(d L)``, ``delta`` label-noise
variance.  ``mmse`` is ``1 - q``, the per-entry error on ``S*`` (= test error - delta).

>>> from symtheory import bsr
>>> table = bsr.bo_curve([0.1, 0.2, 0.3], beta=2.0, rho=0.5, delta=0.0)
"""
from .theory import (BOPoint, alpha_pr, bo_curve, bo_point, canonical, mmse_rie,  # noqa: F401
                     mmse_rie_mp, ridge_mse, solve_overlap, theory)

__all__ = ["bo_curve", "bo_point", "alpha_pr", "ridge_mse", "mmse_rie", "mmse_rie_mp",
           "BOPoint", "theory"]
