"""Design of the frozen samples of a state evolution: its defaults, and how a stated
standard error converts to a tail probability.

Kept free of numerical imports so that command-line help can name the defaults without
loading numpy (``symtheory ... --help`` stays fast).  The design itself -- interleaved,
independently scrambled Sobol sequences -- is built by :class:`~symtheory.glm.se.state_evolution.
StateEvolution` from :func:`~symtheory.core.quadrature.scrambled_sobol_normals`.
"""
from __future__ import annotations

import math

from ...core.validate import ParameterError

#: independent scramblings of the default RQMC design: 15 degrees of freedom for the
#: standard error (its own relative error ~ 1/sqrt(30) = 18%), while each scrambling keeps
#: samples/16 points (the QMC gain grows with the points per scrambling)
DEFAULT_SCRAMBLES = 16

#: default number of frozen samples: 16 x 2^10, a power of 2 per scrambling (a Sobol
#: sequence's first 2^m points are a net; a count between two powers of 2 loses that
#: balance: 20000 = 16 x 1250 measured a variance 1.12x that of 16384 over 300 seeds)
DEFAULT_SAMPLES = DEFAULT_SCRAMBLES * 2 ** 10


def tail_multiple(sigmas: float, scrambles: int | None) -> float:
    """The multiple of a stated standard error with the two-sided tail probability of
    ``sigmas`` normal standard deviations.  ``scrambles=None`` (plain Monte Carlo: the
    per-sample spread, thousands of degrees of freedom): ``sigmas`` itself.  RQMC with
    ``scrambles`` randomizations: the error is estimated from that many means, so the
    Student-t quantile with ``scrambles - 1`` degrees of freedom (16: 4 -> 5.48,
    3 -> 3.59, 2 -> 2.18)."""
    if isinstance(sigmas, bool) or not (isinstance(sigmas, (int, float))
                                        and math.isfinite(sigmas) and sigmas > 0):
        raise ParameterError(f"sigmas must be a finite number > 0, got {sigmas!r}")
    if scrambles is None:
        return float(sigmas)
    if isinstance(scrambles, bool) or int(scrambles) != scrambles or scrambles < 2:
        raise ParameterError(f"scrambles must be an integer >= 2 or None, got {scrambles!r}")
    from scipy.stats import norm, t

    return float(t.isf(norm.sf(sigmas), int(scrambles) - 1))


def design_record(sampling: str) -> dict:
    """What an output's parameters record about the design: ``sampling`` and
    ``scrambles`` (None for plain Monte Carlo)."""
    if sampling not in ("rqmc", "monte-carlo"):
        raise ParameterError(f"sampling must be 'rqmc' or 'monte-carlo', got {sampling!r}")
    return {"sampling": sampling,
            "scrambles": DEFAULT_SCRAMBLES if sampling == "rqmc" else None}


def min_variance_weights(sq, tw):
    """Per-entry weight ``w`` minimizing the variance of ``w sq + (1 - w) tw`` (two
    estimators of the same mean, Nishimori), from the samples themselves:
    ``w = (C_tt - C_st)/(C_ss + C_tt - 2 C_st)`` (1 where the difference has no variance).
    A function of the samples at the current ``Q`` only, hence smooth in ``Q`` on frozen
    samples and independent of the order in which overlaps are evaluated; estimating
    ``w`` on the same samples biases the mean by O(1/samples), far below its standard
    error O(1/sqrt(samples)).  With RQMC the weights still minimize the per-sample
    variance, not that of the per-scrambling means (which 16 replicates estimate too
    poorly to set a weight on); the stated error is that of the combined values either
    way, so the choice affects efficiency, never honesty."""
    import numpy as np      # here: the module stays free of numerical imports (see above)

    C_ss = sq.var(axis=0)
    C_tt = tw.var(axis=0)
    C_st = ((sq - sq.mean(0)) * (tw - tw.mean(0))).mean(axis=0)
    den = C_ss + C_tt - 2 * C_st
    # y integrated given omega makes the two equal per sample up to the rule's error
    # (~1e-8): a ratio of two such residues is noise (measured: w ~ 1e3 turned 1e-8 into
    # Q_hat_11 - Q_hat_22 = 0.012 on y = z1^2 - z2^2), so the weight is 1 there
    den = np.where(den > 1e-6 * (C_ss + C_tt), den, 0.0)
    return np.where(den > 0, (C_tt - C_st) / np.where(den > 0, den, 1.0), 1.0)
