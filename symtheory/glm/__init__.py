"""The extension point: factors (channels and priors) and the engines written against them.

After tramp's factor algebra, a model is a *prior* on the weights and an output
*channel*; state evolution, thresholds, GAMP and the errors are written once against
them.  A family (``symtheory.bsr``, ``smi``, ``aim``) only declares its factors; a
researcher's own model is declared the same way.

=========================  ============================================================
subpackage                 what it holds
=========================  ============================================================
:mod:`.factors`            channels (scalar, multi-index, reduced, discrete, noisy, deep,
                           orthant, linear-rank) and priors (Gaussian, separable mixtures
                           of point masses, Gaussians and densities, their products, spectral)
:mod:`.integrate`          integration rules that follow the integrand (link structure,
                           orthant mixtures, reduced posteriors, peak and Laplace-RQMC)
:mod:`.checks`             identity checks every declared channel must pass
:mod:`.se`                 state evolution (matrix and spectral), sample design, errors
:mod:`.thresholds`         linearized SE: weak recovery, staircase, grand staircase;
                           first-order transitions (alpha_alg, alpha_IT)
:mod:`.gamp`               generalized approximate message passing
=========================  ============================================================

Nothing in this layer names a model family.  The names below are imported lazily
(``import symtheory`` stays instant).
"""
from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submodules=["factors", "integrate", "checks", "se", "thresholds", "gamp"],
    submod_attrs={
        "factors.gaussian_prior": ["GaussianPrior"],
        "factors.separable_prior": ["SeparablePrior"],
        "factors.product_prior": ["ProductPrior"],
        "se.scalar_glm": ["ScalarGlmSE"],
        "thresholds.phases": ["phase_transitions"],
        "factors.scalar": ["ScalarChannel", "likelihood_channel", "threshold_channel",
                           "sign_channel", "gaussian_noise_channel"],
        "checks.scalar": ["ChannelCheckError"],
        "factors.multi_index": ["MultiIndexModel", "DeterministicReduction"],
        "se.state_evolution": ["StateEvolution"],
        "se.result": ["SEResult"],
        "se.errors": ["bayes_error", "plugin_error"],
        "thresholds.weak_recovery": ["weak_recovery"],
        "thresholds.staircase": ["staircase"],
        "thresholds.grand_staircase": ["grand_staircase"],
    })
