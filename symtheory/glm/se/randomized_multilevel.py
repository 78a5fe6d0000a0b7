"""Two-level estimator of ``Q_hat`` for a channel integrated by a randomized rule (opt-in,
``estimator='multilevel'``; the tensor-rule counterpart that the staged solve uses by
default is :mod:`symtheory.glm.se.multilevel`) -- a reduced
deep link under :class:`~symtheory.glm.integrate.laplace_qmc.LaplaceQMCRule`).

``E[sum_m g g^T]`` (Eq. (13) of arXiv:2502.00901) is estimated as

    mean_{all n samples} sq_coarse + mean_{first n_1 samples} (sq_fine - sq_coarse),

``sq = sum_m g_out g_out^T`` of the same draw ``(xi, eta)`` under a cheap rule and under a
fine one (Giles, Oper. Res. 56 (2008), two levels).  The mean is that of the fine rule,
whatever the coarse rule's bias (its squared random error ``E[dg dg^T]``, its ratio bias);
the difference has little variance because both rules see the same draw: the error of
``Q_hat`` is the outer Monte Carlo over ``(xi, eta)``, not the channel rule (measured at
depth 3 on 256-1024 draws at Q = diag(0.4, 0.3, 0.992): per-draw sd of ``sq_11`` 0.77,
of its fine - coarse difference 0.036, at 3-7 ms against 100-280 ms per draw).

Subset size (Giles' formula): ``n_1 / n = sqrt(V_1 C_0 / (V_0 C_1))`` minimizes the variance
at a given cost, with ``V_0``, ``C_0`` the per-draw variance and cost of the coarse level,
``V_1``, ``C_1`` those of the difference (the fine rule alone: the coarse values of the
subset are the first level's), costs counted in posterior evaluations per draw
(:func:`evaluations_per_draw`: a function of the draws, so the share and the map do not
depend on the machine's load).  Variances are per free entry in units of that entry's
``V_0`` (relative errors, so an entry near 0 does not decide alone) and averaged.  They are
measured once, at the first evaluation (``pilot`` draws of the fine rule), and the
fraction is rounded to a power of 2 so that the map stays a fixed function of ``Q``
afterwards; :attr:`MultilevelEstimator.note` records the measurement.

Standard error: the subset is a prefix of the interleaved RQMC design, so each scrambling
``b`` holds ``n / B`` draws of the first level and ``n_1 / B`` of the second; its estimate
``mean_b sq_coarse + mean_b (sq_fine - sq_coarse)`` is independent of the other
scramblings' (both rules use a point set per scrambling), and the spread of the ``B``
estimates gives the standard error, covariance of the two levels included.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ...core.validate import ParameterError
from ..integrate.laplace_qmc import LaplaceQMCRule

#: the first level: one level of 128 points per component (never escalates, so the
#: tolerance is nominal: set far above the rule's errors, which the second level corrects,
#: so that no sample is reported as missing it): 3-9 ms per draw at depth 3 under load,
#: against 14-34 ms for the default rule (numerics/bench/deep_se_multilevel.py)
COARSE_RULE = LaplaceQMCRule(tol=1e3, points=128, max_points=128)
#: the second level: per-sample tolerance 1e-2 up to 8192 points; its ``sq`` differs from
#: the default rule's (tol 5e-2, up to 1024) by -0.0018 +- 0.0007 on Q_hat_22 / alpha
#: (0.6%) at Q = diag(0.4, 0.3, 0.992), 256 draws: the default rule's bias is not
#: negligible at an overlap error of 5e-3
FINE_RULE = LaplaceQMCRule(tol=1e-2, points=256, max_points=8192)
#: bounds of the fine share (fractions 2^-k): at least 2 draws per scrambling always
MIN_FRACTION, MAX_FRACTION = 1 / 256, 1 / 2
#: the share of a warm-up stage before the fraction is measured: the smallest (2 draws per
#: scrambling at most sample counts) -- a warm-up only steers, and 1/16 of 4096 draws on
#: the fine rule cost ~3 min per warm-up evaluation under load
PROVISIONAL_FRACTION = MIN_FRACTION


@dataclass
class MultilevelEstimator:
    """The two-level estimator (module docstring): ``coarse`` on every draw, ``fine`` on the
    first ``fraction`` of them (``None``: Giles' fraction from ``pilot`` draws at the first
    evaluation).  Pass as ``StateEvolution(..., estimator=MultilevelEstimator())`` or
    ``estimator='multilevel'``.

    Parameters
    ----------
    coarse, fine : LaplaceQMCRule
        The two channel rules (their ``point_sets`` are set to the SE's scramblings).
    fraction : float, optional
        Share of the draws on the fine rule, in ``[1/256, 1/2]``; ``None`` measures it.
    pilot : int, optional
        Draws of the pilot (>= 32), the first ones of the design.
    """

    coarse: LaplaceQMCRule = COARSE_RULE
    fine: LaplaceQMCRule = FINE_RULE
    fraction: float | None = None
    pilot: int = 128
    note: str = ""

    def __post_init__(self):
        for name in ("coarse", "fine"):
            if not isinstance(getattr(self, name), LaplaceQMCRule):
                raise ParameterError(f"{name} must be a LaplaceQMCRule, got "
                                     f"{getattr(self, name)!r}")
        if self.fraction is not None and not (MIN_FRACTION <= self.fraction <= MAX_FRACTION):
            raise ParameterError(f"fraction must be in [{MIN_FRACTION}, {MAX_FRACTION}] or None, "
                                 f"got {self.fraction!r}")
        if isinstance(self.pilot, bool) or int(self.pilot) != self.pilot or self.pilot < 32:
            raise ParameterError(f"pilot must be an integer >= 32, got {self.pilot!r}")

    def with_point_sets(self, sets: int) -> "MultilevelEstimator":
        """A copy whose rules own a point set per SE scrambling (errors of one point set
        would be shared by all draws, and the scramblings' spread would not see them)."""
        return dataclasses.replace(
            self, coarse=dataclasses.replace(self.coarse, point_sets=sets),
            fine=dataclasses.replace(self.fine, point_sets=sets))

    def describe(self, how: str) -> str:
        """The note of the estimator once its fraction is set (``how``: where it came from)."""
        return (f"multilevel estimator: coarse rule ({self.coarse.describe()}) on every draw, "
                f"fine rule ({self.fine.describe()}) on the first {self.fraction:g} of them; "
                + how)

    def subset(self, n: int, groups: int) -> int:
        """Draws of the second level among ``n``: ``fraction n`` rounded up to a multiple of
        ``groups``, at least ``2 groups``, at most ``n``."""
        k = max(2, math.ceil(self.fraction * n / groups))
        return min(n, k * groups)


def giles_fraction(v0, v1, c0, c1):
    """Share ``n_1 / n`` of Giles' formula from per-entry variances ``v0`` (first level),
    ``v1`` (difference) and per-draw costs ``c0``, ``c1`` (posterior evaluations): entries with
    ``v0 > 0`` in relative units, averaged; rounded to a power of 2 within
    ``[MIN_FRACTION, MAX_FRACTION]``."""
    v0, v1 = np.asarray(v0, float).ravel(), np.asarray(v1, float).ravel()
    ok = v0 > 0
    if not ok.any():
        return MAX_FRACTION, float("nan")
    rel = float(np.mean(v1[ok] / v0[ok]))
    raw = math.sqrt(rel * c0 / c1) if rel > 0 else 0.0
    k = round(-math.log2(raw)) if raw > 0 else 64
    return float(min(MAX_FRACTION, max(MIN_FRACTION, 2.0 ** -k))), raw


def multilevel_products(se, Q, sq_coarse):
    """``(sq_fine - sq_coarse)`` on the subset of ``se``'s draws at ``Q`` (``(n_1, P, P)``),
    choosing the fraction at the first call (:func:`giles_fraction`)."""
    est = se.estimator_options
    n = len(sq_coarse)
    B = se.error_groups or se.scrambles or 16
    # the share is measured on the full map only (all draws, the coarse rule itself): a
    # warm-up stage of the solve (fewer draws, a coarsened rule, far from the fixed point)
    # uses PROVISIONAL_FRACTION meanwhile (subset_size)
    if est.fraction is None and _full_map(se, n):
        n_p = min(n, max(2 * B, int(est.pilot) // B * B))
        diff = _square(fine_outputs(se, Q, n_p)[0]) - sq_coarse[:n_p]
        c1, c0 = se._fine_evaluations_per_draw, se._coarse_evaluations_per_draw
        free = (se.mask > 0).ravel()
        v0 = sq_coarse.reshape(n, -1)[:, free].var(axis=0)
        v1 = diff.reshape(n_p, -1)[:, free].var(axis=0)
        est.fraction, raw = giles_fraction(v0, v1, c0, c1)
        rel = float(np.mean(v1[v0 > 0] / v0[v0 > 0])) if (v0 > 0).any() else 0.0
        est.note = est.describe(
            f"Giles' share {raw:.3g} from a {n_p}-draw pilot at Q diag "
            f"{np.round(np.diag(Q), 4).tolist()}: relative variance of the difference "
            f"{rel:.3g}, cost {c0:.4g} / {c1:.4g} posterior evaluations per draw (coarse / "
            "fine: Sobol points x mixture components, a function of the draws, not of the "
            "machine's load)")
        se.observation_note = "; ".join(s for s in (se.observation_note, est.note) if s)
    n1 = subset_size(se, n)
    return _square(fine_outputs(se, Q, n1)[0]) - sq_coarse[:n1]


def subset_size(se, n):
    """Draws of the second level among the first ``n`` at the current share (provisional
    before it is measured)."""
    est, B = se.estimator_options, se.error_groups or se.scrambles or 16
    if est.fraction is None:
        return min(n, max(2, math.ceil(PROVISIONAL_FRACTION * n / B)) * B)
    return est.subset(n, B)


def _full_map(se, n):
    return n == se._full_samples and se.feature_rule == se.estimator_options.coarse


def _square(g):
    return np.einsum("sam,sbm->sab", g, g)


def fine_outputs(se, Q, n1):
    """``(g_out, dg_out)`` of the first ``n1`` draws of ``se`` at ``Q`` under the fine rule
    (the last result kept: the map, its standard error and a staircase's slope share it)."""
    est = se.estimator_options
    key = (np.asarray(Q, dtype=float).tobytes(), est.fine, se.samples)
    last = getattr(se, "_last_fine", (None,))
    if last[0] == key and len(last[1][0]) >= n1:     # draws are independent: a prefix
        return tuple(a[:n1] for a in last[1])
    _, omega, V, Z = se.sample_channel(Q)
    omega, Z = omega[:n1], Z[:n1]
    rp = se.features
    Ebr, lw, valid, _ = rp.branches(rp.E_of_Z(Z))
    ch = se.channel.configured(rule=est.fine)
    out = ch.branch_moments(Ebr, lw, valid, omega, V).output_functions()
    se._fine_evaluations_per_draw = evaluations_per_draw(ch)
    if not np.all(np.isfinite(out[0])):
        raise FloatingPointError(f"g_out of the fine rule is not finite at Q = "
                                 f"{np.asarray(Q).tolist()}")
    se._last_fine = (key, out)
    return out


def evaluations_per_draw(channel) -> float:
    """Posterior evaluations per draw of the last pass of a Laplace-RQMC ``channel``: its
    mixture components times the Sobol points each used (per scrambling; both levels
    run the same scramblings), averaged over the draws -- the cost model of Giles' share,
    deterministic given the draws (wall-clock seconds would make the share, hence the
    map, depend on the machine's load)."""
    comps = np.asarray(channel.components, dtype=float).ravel()
    used = np.asarray(channel.points_used, dtype=float).ravel()
    return float(np.mean(comps * used))


def multilevel_mean_stderr(sq_coarse, diff, groups):
    """``(mean, stderr)`` of the two-level estimate: per group ``b`` (draw ``s`` in group
    ``s % groups``: the interleaved scramblings), ``mean_b sq_coarse + mean_b diff``, and the
    spread of those over sqrt(groups)."""
    est = np.array([sq_coarse[b::groups].mean(axis=0) + diff[b::groups].mean(axis=0)
                    for b in range(groups)])
    # equal to the mean of the groups' estimates when n and n_1 are multiples of groups
    mean = sq_coarse.mean(axis=0) + diff.mean(axis=0)
    return mean, est.std(axis=0, ddof=1) / np.sqrt(groups)
