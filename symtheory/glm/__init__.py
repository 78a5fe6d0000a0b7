"""Statistical-physics building blocks shared by every model family.

After tramp's factor algebra: a model is a *prior* on the weights and an output
*channel*; state evolution, GAMP and the errors are written once against them.

* :mod:`.priors` -- Gaussian prior: log-partition -> input functions, overlap map, psi.
* :mod:`.channels` -- scalar output channels from ``log Z_out`` (or a likelihood), checked
  at declaration by :mod:`.checks` (g_out vs an independent derivative, normalization,
  Nishimori, tower).
* :mod:`.multi_index` -- multi-index channels with tokens ``y = g(Z)``: declaration,
  deterministic reduction, Gaussian output noise; ``g_out`` / ``dg_out`` from moments.
* :mod:`.se` -- matrix state evolution; :mod:`.errors` -- Bayes / plug-in errors.
* :mod:`.gamp`, :mod:`.gamp_tokens` -- GAMP engines.

Nothing in this layer names a model family; families (``symtheory.bsr``,
``symtheory.smi``) only declare.  Imports are lazy (``import symtheory`` stays fast).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "GaussianPrior": "priors",
    "ScalarChannel": "channels",
    "likelihood_channel": "channels",
    "threshold_channel": "channels",
    "sign_channel": "channels",
    "gaussian_noise_channel": "channels",
    "ChannelCheckError": "checks",
    "MultiIndexModel": "multi_index",
    "DeterministicReduction": "multi_index",
    "StateEvolution": "se",
    "SEResult": "se",
    "bayes_error": "errors",
    "plugin_error": "errors",
}
# The GAMP engines are imported from their modules (``from symtheory.glm.gamp_tokens import
# gamp_tokens``): a lazy attribute with the name of a submodule would be shadowed by it.

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
