"""Two-level Monte Carlo of the SE map for a reduced link's tensor rule (Giles 2008, Oper.
Res. 56:607, Eq. (7) with two levels).

The SE averages per-sample values ``f`` (``sum_m g_out g_out^T``, its Nishimori twin, ``log
Z_out``) whose posterior integral is done by a tensor rule of ``n_f`` nodes per axis.  The
same integral by a rule of ``n_c << n_f`` nodes is biased, but sample by sample it differs
from the fine one by little: the telescoping estimator

    E f_fine ~= (1/N) sum_{s < N} f_coarse(s) + (1/n) sum_{s < n} [f_fine(s) - f_coarse(s)]

is unbiased for the fine rule's mean and costs ``N c_coarse + n c_fine``.  For a variance
``V_0 / N + V_1 / n`` (``V_0 = Var f_coarse``, ``V_1 = Var(f_fine - f_coarse)``) the cost is
least at ``n / N = sqrt(V_1 c_coarse / (V_0 c_fine))`` (Giles, Eq. (8)).  Measured on depth-2
attention (skip 1): ``V_1 / V_0`` = 2e-3 (alpha 0.3) and 2e-2 (alpha 0.5) for Gauss-Hermite 4
against 15 per axis.

Both levels run on the frozen samples (the fine one on their first ``n``, which hold every
RQMC scrambling equally), so the estimator is a smooth function of ``Q`` like the plain one:
per sample it is ``f_coarse(s) + [s < n] (N / n) (f_fine(s) - f_coarse(s))``, and the standard
error comes from those values as for the plain map (per-scrambling means under RQMC).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.quadrature import TensorRule
from .sampling import min_variance_weights

#: nodes per axis of the coarse level (depth-2 attention: the fine-coarse difference has
#: 0.2-2% of the per-sample variance at 4 against 15 nodes, measured; a coarse level that
#: is too poor for a model shows as a large V_1 and the allocation below gives it up)
COARSE_NODES = 4

#: fewest samples of the fine level (a multiple of the scramblings is taken above it): its
#: mean difference must itself be estimated, and 2 points per scrambling are the least
MIN_FINE_SAMPLES = 512

#: the two-level map is used only when the fine level's share of the samples is at most
#: this (above it the saving is under ~2x and a plain pass is simpler to reason about)
MAX_FINE_SHARE = 0.25


@dataclass(frozen=True)
class MultilevelPlan:
    """The two levels: ``coarse`` rule on all samples, the requested rule on the first
    ``fine_samples``; the measured ``variance_ratio`` (``V_1 / V_0``, ``V_0`` per sample of
    the design, i.e. over the RQMC gain; largest over the free entries) and ``cost_ratio``
    (``c_fine / c_coarse`` per sample) they were sized from."""

    coarse: TensorRule
    fine_samples: int
    samples: int
    variance_ratio: float
    cost_ratio: float

    def describe(self, fine_rule) -> str:
        return (f"two-level Monte Carlo: {self.coarse.describe()} on all {self.samples} samples + "
                f"({fine_rule.describe()} - it) on the first {self.fine_samples} (Giles' "
                f"allocation from Var(fine - coarse)/Var(coarse) = {self.variance_ratio:.2g} "
                f"and nodes per sample {self.cost_ratio:.3g}x, at the warm-up's fixed point)")


def coarse_level(rule):
    """The coarse level's rule for a requested tensor ``rule`` (``None``: no two levels:
    not a tensor rule, or too few nodes to gain)."""
    if not isinstance(rule, TensorRule) or rule.n < 3 * COARSE_NODES:
        return None
    return TensorRule(rule.kind, COARSE_NODES, rule.width)


def telescope(coarse, fine):
    """Per-sample two-level values: ``coarse`` (all ``N`` samples) with ``(N / n) (fine -
    coarse[:n])`` added on the first ``n = len(fine)``; their mean is the estimator above."""
    N, n = len(coarse), len(fine)
    out = np.array(coarse, dtype=float, copy=True)
    out[:n] += (N / n) * (np.asarray(fine, dtype=float) - coarse[:n])
    return out


def plan(se, Q, rule, coarse, products, probe_samples):
    """Size the levels at ``Q`` (a :class:`MultilevelPlan`, or ``None`` when the fine share
    would exceed :data:`MAX_FINE_SHARE`).  ``products(Q) -> (sq, tw)`` gives per-sample
    values on the current stage; both rules run on the first ``probe_samples`` samples;
    variances are of the Nishimori-combined values (the estimator's); costs are the rules'
    node counts per sample."""
    N = se.samples
    m = min(N, probe_samples)
    with se._stage(m, coarse):
        sq_c, tw_c = products(Q)
    with se._stage(m, rule):
        sq_f, tw_f = products(Q)
    w = min_variance_weights(sq_f, tw_f)
    f_c = w * sq_c + (1 - w) * tw_c
    f_f = w * sq_f + (1 - w) * tw_f
    free = se.mask > 0
    V0 = f_c.var(axis=0)[free]
    V1 = (f_f - f_c).var(axis=0)[free]
    # an entry held at 0 by a symmetry (g_l = 0 on every sample: Q_ll = 0 of an even
    # group) is rounding noise in both rules: its ratio says nothing
    keep = V0 > 1e-12 * float(np.max(V0, initial=0.0))
    if not np.any(keep):
        return None
    # the coarse level runs on all N samples, whose design (RQMC) may beat independent
    # draws: its variance per sample is then V0 / gain, the gain read off the coarse
    # rule's all-sample pass (spread of the per-scrambling means against the per-sample
    # one); the fine level's few points per scrambling are counted as independent draws
    with se._stage(N, coarse):
        sq_a, tw_a = products(Q)
    f_a = w * sq_a + (1 - w) * tw_a
    _, stderr = se.sample_mean_stderr(f_a)
    plain = f_a.var(axis=0, ddof=1) / N
    gain = np.where(stderr > 0, plain / np.where(stderr > 0, stderr, 1.0) ** 2, 1.0)[free]
    gain = np.maximum(gain, 1.0)
    ratio = float(np.max(V1[keep] * gain[keep] / V0[keep]))
    # cost per sample ~ nodes of the rule (a count, not a timing: the plan, hence the
    # fixed point on the frozen samples, must not depend on the machine's load)
    dims = len(se.features.free_rows) * se.model.M
    cost = len(rule.nodes(dims)[1]) / len(coarse.nodes(dims)[1])
    share = np.sqrt(ratio / cost)
    B = se.scrambles or 1
    n = int(np.ceil(max(share * N, MIN_FINE_SAMPLES, 2 * B) / B) * B)
    if n > MAX_FINE_SHARE * N:
        return None
    return MultilevelPlan(coarse, n, N, ratio, cost)
