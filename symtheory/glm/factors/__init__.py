"""Factors: output channels ``P_out(y | Z)`` and weight priors.

=============================  ========================================================
module                         factor
=============================  ========================================================
:mod:`.scalar`                 scalar GLM channels from ``log Z_out`` or a likelihood
:mod:`.multi_index`            multi-index models ``y = g(Z)`` with tokens (declaration)
:mod:`.channel`                posterior moments -> ``g_out`` (shared by the channels)
:mod:`.gaussian_noise`         ``y = g(Z) + sqrt(Delta) xi``
:mod:`.reduced`                noiseless links by a deterministic reduction
:mod:`.discrete`               noiseless links constant on sign regions
:mod:`.deep`                   deep reduced links (e.g. softmax attention) by Laplace-RQMC
:mod:`.orthant`                signs of two linear images (hardmax of two tokens)
:mod:`.linear_rank`            links that reveal a linear image (softmax of an AIM)
:mod:`.prior`                  the prior interface: input functions, overlap map, free entropy
:mod:`.gaussian_prior`         the Gaussian prior, derived from its log-partition
:mod:`.separable_prior`        i.i.d. priors: point masses, Gaussians, SymPy densities
:mod:`.product_prior`          products of separable priors over the P rows
:mod:`.spectral_priors`        rotation-invariant matrix priors (RIE denoisers)
=============================  ========================================================
"""
