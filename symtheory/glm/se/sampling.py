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

#: the designs of ``omega = Q^{1/2} xi``: randomized QMC, plain Monte Carlo, or (nothing
#: sampled, y integrated given omega) a Gauss-Hermite tensor rule
SAMPLING_DESIGNS = ("rqmc", "monte-carlo", "gauss-hermite")

#: Gauss-Hermite nodes per axis of ``xi`` (``sampling='gauss-hermite'``).  Measured on
#: y = z1^2 - z2^2 at Q = 0.22 I: E g g^T changes by 1.3e-3, 2.1e-4 from 10 -> 16 -> 24
#: nodes per axis (E g g^T is smooth in omega but varies on the scale ~0.3 of
#: sqrt(Q) near omega = 0, where it vanishes)
DEFAULT_OMEGA_NODES = 24

#: Gauss-Hermite nodes per axis of the tensor design's warm-up stage (the way to the
#: fixed point; the requested rule then polishes it by chord Newton steps)
WARMUP_OMEGA_NODES = 8

#: most coordinates ``P M`` of ``xi`` a tensor rule covers (nodes^(P M) per map evaluation)
TENSOR_MAX_DIM = 2


def coarse_omega_nodes(n: int) -> int:
    """Nodes per axis of the coarser Gauss-Hermite rule whose change bounds the error of
    ``n`` nodes (2/3 of them: comparing with half overstates a geometric rate's error
    by its square root)."""
    return max(4, (2 * int(n)) // 3)


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


def gauss_hermite_tensor(nodes: int, dim: int):
    """``(points (nodes^dim, dim), weights (nodes^dim,))``: the product Gauss-Hermite rule
    for ``E f(xi)``, ``xi ~ N(0, I_dim)`` (weights sum to 1).  Invariant under permutations
    and sign flips of the coordinates, so a map averaged on it is exactly equivariant under
    the link's signed row permutations."""
    import numpy as np      # here: the module stays free of numerical imports (see above)

    from ...core.quadrature import gauss_hermite

    x, w = gauss_hermite(int(nodes))
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    weights = np.ones(1)
    for _ in range(dim):
        weights = np.multiply.outer(weights, w).ravel()
    return np.stack([g.ravel() for g in grids], axis=1), weights / weights.sum()


def fold_tensor_rule(xi, weights, groups):
    """The tensor rule ``(xi (n, P, M), weights)`` folded by the sign flips of ``groups``
    (row tuples): of each pair ``xi``, ``xi`` with the group's coordinates negated, the one
    whose first non-zero group coordinate is positive is kept at twice the weight (a node
    fixed by the flip keeps its weight).  Exact for an integrand ``h`` with ``h(F xi) =
    F h(xi) F`` when only entries inside the groups' blocks are kept (they are invariant;
    the cross-block ones cancel): the map of an even model on its block structure."""
    import numpy as np      # here: the module stays free of numerical imports (see above)

    for g in groups:
        coords = xi[:, list(g), :].reshape(len(xi), -1)
        nonzero = coords != 0
        first = np.where(nonzero.any(axis=1), np.argmax(nonzero, axis=1), 0)
        key = np.sign(coords[np.arange(len(xi)), first])
        keep = key >= 0
        xi, weights = xi[keep], np.where(key[keep] > 0, 2.0, 1.0) * weights[keep]
    return xi, weights


def check_sampling(sampling, *, allow_auto=True) -> str:
    """``sampling`` if it names a design of :data:`SAMPLING_DESIGNS` (or ``'auto'``), else
    ParameterError."""
    valid = SAMPLING_DESIGNS + (("auto",) if allow_auto else ())
    if sampling not in valid:
        raise ParameterError(f"sampling must be one of {', '.join(map(repr, valid))}, "
                             f"got {sampling!r}")
    return sampling


def design_record(sampling: str, omega_nodes: int | None = None) -> dict:
    """What an output's parameters record about the design: ``sampling``, ``scrambles``
    (None unless RQMC) and, for a Gauss-Hermite rule, ``omega_nodes`` per axis (the
    design used: ``'auto'`` is resolved by the state evolution first)."""
    check_sampling(sampling, allow_auto=False)
    out = {"sampling": sampling, "scrambles": DEFAULT_SCRAMBLES if sampling == "rqmc" else None}
    if sampling == "gauss-hermite":
        out["omega_nodes"] = DEFAULT_OMEGA_NODES if omega_nodes is None else int(omega_nodes)
    return out


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
