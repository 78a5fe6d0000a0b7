"""Attention-indexed models (AIM) and the quadratic network (QN): Bayes-optimal theory.

Boncoraglio, Troiani, Erba, Zdeborova, arXiv:2506.01582; Maillard et al.,
arXiv:2408.03733 (QN = one token, identity link, ``rho = kappa``).  Package notation
(``docs/theory/README.md``): ``seq_len`` = the paper's T, ``rho = r/d``,
``alpha = n/d^2``, ``inv_temp`` = softmax beta, ``delta`` output-noise variance.
``mmse`` is ``(1/d)||S_hat - S||_F^2``, 1 at ``alpha = 0``.

>>> from symtheory import aim
>>> table = aim.bo_curve([0.02, 0.05], rho=0.5, seq_len=2, link="softmax")

Imports are lazy: nothing numeric loads until an attribute is used.
"""
from __future__ import annotations

import importlib

_EXPORTS = {name: "theory" for name in (
    "AIMPoint", "alpha_pr", "alpha_tilde", "bo_curve", "bo_point", "constraints_per_sample",
    "gen_error", "low_rank_point", "mmse_denoising", "mmse_denoising_mp", "qn_paper_units",
    "rho_infinity_mse", "rie_denoise", "theory", "thresholds")}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
