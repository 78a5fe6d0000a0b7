"""Attention-indexed models (AIM) and the quadratic network (QN): Bayes-optimal theory.

Boncoraglio, Troiani, Erba, Zdeborova, arXiv:2506.01582; Maillard et al.,
arXiv:2408.03733 (QN = one token, identity link, ``rho = kappa``).  Package notation
(``docs/theory/README.md``): ``seq_len`` = the paper's T, ``rho = r/d``,
``alpha = n/d^2``, ``inv_temp`` = softmax beta, ``delta`` output-noise variance.
``mmse`` is ``(1/d)||S_hat - S||_F^2``, 1 at ``alpha = 0``.

>>> from symtheory import aim
>>> table = aim.bo_curve([0.02, 0.05], rho=0.5, seq_len=2, link="softmax")

Imports are lazy (``lazy_loader``): nothing numeric loads until an attribute is used.
``aim.theory`` is the submodule :mod:`symtheory.aim.theory` (``from symtheory.aim import
theory``); its kernel holder is ``aim.theory.theory()``.  ``aim.denoising`` (the symmetric
RIE of ``S``) and ``aim.hardmax`` (the hardmax channel of two tokens) are submodules too.
"""
from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__, submodules=["denoising", "hardmax", "theory"],
    submod_attrs={"theory": ["AIMPoint", "alpha_pr", "alpha_tilde", "bo_curve", "bo_point",
                             "constraints_per_sample", "gen_error", "low_rank_point",
                             "qn_paper_units", "rho_infinity_mse", "thresholds"],
                  "denoising": ["mmse_denoising", "mmse_denoising_mp", "rie_denoise"]})
