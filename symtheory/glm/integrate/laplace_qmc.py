"""Laplace-centred mixture importance sampling with randomized quasi-Monte Carlo: the rule
and the shared Numba pieces of the posterior rules that follow the likelihood.

A posterior integral ``Z = int f(x) dx`` (with the moments of ``x`` under ``f / Z``) is
the importance-sampling integral ``Z = E_q[f / q]`` over the mixture
``q = sum_c pi_c N(m_c, S_c)`` of

* component 0, a defensive Gaussian (the prior: ``f / q`` stays bounded where the
  likelihood is flat);
* Laplace components at the maxima of ``log f`` (multi-start Newton, e.g. from the prior
  mean, its images under the sign flips of the link's even row groups (g unchanged when a group's rows flip sign) and
  the best points of a short scan of component 0), covariance ``inflate^2 (-Hessian)^{-1}``,
  optionally refitted to the weighted points (moment matching, population Monte Carlo);

each component fed the same points of a scrambled Sobol net (``scipy.stats.qmc``), with
balance-heuristic weights ``f / q`` against the whole mixture: the estimator is unbiased
(the ratio estimators of the moments consistent) whatever the components are -- the
peaks only reduce its variance.  ``R`` independent scramblings give ``R`` estimates of
``(log Z, E[x], E[x x^T])``; their spread is the reported error: the 95% Student-t
half-width of their mean, in natural units (``log Z``; means over prior standard
deviations; covariances over their products).  Samples above the tolerance are
recomputed with 4x the points (2x when close, for the deep driver), up to
``max_points`` (:func:`rqmc_levels`).

Users: :mod:`symtheory.glm.factors.deep` (noiseless reduced deep links) and
:class:`~symtheory.glm.factors.gaussian_noise.GaussianNoiseChannel` (``|R| >= 2`` non-affine indices
under Gaussian output noise).  The Numba pieces are in
:mod:`symtheory.glm.integrate.drivers.mixture`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ...core.validate import ParameterError

@dataclass(frozen=True)
class LaplaceQMCRule:
    """Accuracy request and budget of the Laplace-centred RQMC posterior rules.

    ``tol``: target of the per-sample error (95% half-width over the scramblings, natural
    units); ``points``: Sobol points per component and scrambling at the first level (a
    power of 2); ``max_points``: the largest level; ``scrambles``: independent
    randomizations (>= 4, error estimate); ``inflate``: widening of the Laplace
    covariances (>= 1); ``prior_share``: weight of the defensive component; ``adapt``:
    rounds of adaptive importance sampling (moment-matching refits of the peak
    components; the deep driver also adds a component on the ridge where the heaviest
    weights lie while they are uneven: a posterior near a curved manifold -- a nearly
    known solved layer of a deep link -- needs several rounds); ``scan``: component-0
    points scanned for Newton starts; ``starts``: how many of the best of them (outside
    the peaks already found) Newton starts from (each mode is refined from its sign-flip
    images too); ``seed``: the randomization (fixed, so the moments are a deterministic
    function of the inputs); ``point_sets``: independent randomizations of the points,
    sample ``s`` of a call using set ``s % point_sets`` -- with one set every sample's
    error comes from the same points, so it is correlated across samples and an average
    over samples keeps it (the SE's 'cross' estimator averages products of such errors);
    with as many sets as the SE has scramblings (sample ``s`` in its scrambling
    ``s % scrambles``) each scrambling mean carries its own, and the SE's standard error
    covers it.
    """

    tol: float = 3e-3
    points: int = 256
    max_points: int = 4096
    scrambles: int = 8
    inflate: float = 1.5
    prior_share: float = 0.15
    adapt: int = 6
    scan: int = 64
    starts: int = 4
    seed: int = 12345
    point_sets: int = 1

    def __post_init__(self):
        if not (self.tol > 0 and math.isfinite(self.tol)):
            raise ParameterError(f"tol must be finite and > 0, got {self.tol}")
        for name in ("points", "max_points"):
            v = int(getattr(self, name))
            if v < 2 or v & (v - 1):
                raise ParameterError(f"{name} must be a power of 2 >= 2, got {v}")
        if self.max_points < self.points:
            raise ParameterError(f"max_points ({self.max_points}) must be >= points ({self.points})")
        if isinstance(self.point_sets, bool) or int(self.point_sets) != self.point_sets or \
                self.point_sets < 1:
            raise ParameterError(f"point_sets must be an integer >= 1, got {self.point_sets!r}")
        if int(self.scrambles) < 4:
            raise ParameterError(f"scrambles must be >= 4 (error estimate), got {self.scrambles}")
        if not self.inflate >= 1:
            raise ParameterError(f"inflate must be >= 1, got {self.inflate}")
        if int(self.adapt) < 0:
            raise ParameterError(f"adapt must be >= 0, got {self.adapt}")
        if not 0 < self.prior_share < 1:
            raise ParameterError(f"prior_share must be in (0, 1), got {self.prior_share}")
        if not 1 <= int(self.scan) <= self.points:
            raise ParameterError(f"scan must be in [1, points={self.points}], got {self.scan}")
        if not 1 <= int(self.starts) <= int(self.scan):
            raise ParameterError(f"starts must be in [1, scan={self.scan}], got {self.starts}")

    def describe(self) -> str:
        sets = f", {self.point_sets} point sets" if self.point_sets > 1 else ""
        return (f"Laplace-centred RQMC (Sobol {self.points}..{self.max_points} points per "
                f"component x {self.scrambles} scramblings{sets}, inflate {self.inflate:g}, "
                f"tol {self.tol:g})")

    def coarsened(self):
        """The rule of the SE's cheap warm-up stages (``StateEvolution.solve``): a quarter
        of the points at every level (at least 32) and twice the tolerance; ``None`` when
        this rule is already that small."""
        points = max(32, self.points // 4)
        if points == self.points:
            return None
        return dataclasses.replace(self, points=points, max_points=max(points, self.max_points // 4),
                                   scan=min(self.scan, points),
                                   starts=min(self.starts, points), tol=2 * self.tol)

    def normal_points(self, dim: int, n: int, point_set: int = 0) -> np.ndarray:
        """``(scrambles + 1, n, dim)`` standard normal RQMC points (the last one for the
        search and the adaptation of the proposal) (inverse CDF of scrambled
        Sobol nets, whose first ``2^m`` points are a net for every ``m``); ``point_set``
        ``k > 0``: an independent randomization, from ``SeedSequence([seed, 2, k])``."""
        from ...core.quadrature import scrambled_sobol_normals

        if isinstance(point_set, bool) or not isinstance(point_set, (int, np.integer)) or \
                not 0 <= point_set < self.point_sets:
            raise ParameterError(f"point_set must be an integer in [0, {self.point_sets - 1}] "
                                 f"(point_sets = {self.point_sets}), got {point_set!r}")
        # tagged 2: apart from the SE's own design, SeedSequence([seed, 1])
        seed = (self.seed if point_set == 0 else
                np.random.SeedSequence([self.seed, 2, point_set]))
        return scrambled_sobol_normals(dim, n, self.scrambles + 1, seed)

    def t95(self) -> float:
        """Student-t 97.5% quantile with ``scrambles - 1`` degrees of freedom."""
        from scipy.stats import t

        return float(t.ppf(0.975, int(self.scrambles) - 1))


def rqmc_levels(rule: LaplaceQMCRule, n: int, run, *, double_near_tol: bool = False):
    """Per-sample escalation: ``run(todo, points) -> err`` computes the samples ``todo``
    with ``points`` per component and scrambling and returns their errors; samples above
    ``rule.tol`` are redone with 4x the points up to ``rule.max_points``, or 2x with
    ``double_near_tol`` when the error is within ``sqrt(2 / 1.25)`` of the tolerance (the
    RQMC error falls at least as ``1 / sqrt(points)``; 1.25 is a margin for the spread
    of the estimate; worth it where a level costs no more than its points, as when the
    proposal is kept between levels).  Returns the errors and the points each sample
    used."""
    err = np.full(n, np.inf)
    used = np.zeros(n, dtype=np.int64)
    queue = {rule.points: np.arange(n)}
    while queue:
        npts = min(queue)
        todo = queue.pop(npts)
        err[todo] = run(todo, npts)
        used[todo] = npts
        if npts >= rule.max_points:
            continue
        todo = todo[~(err[todo] <= rule.tol)]
        close = double_near_tol & (1.25 * (err[todo] / rule.tol) ** 2 <= 2)
        for factor, group in ((2, todo[close]), (4, todo[~close])):
            if group.size:
                nxt = min(factor * npts, rule.max_points)
                queue[nxt] = np.union1d(queue.get(nxt, group[:0]), group)
    return err, used


def by_point_set(rule: LaplaceQMCRule, todo, npts, run_set):
    """A level of :func:`rqmc_levels` over the rule's point sets: ``run_set(sub, npts,
    k)`` computes the samples ``sub`` (those of ``todo`` with index ``% point_sets == k``)
    on point set ``k`` and returns their errors; returns the errors of ``todo``."""
    err = np.empty(todo.size)
    for k in range(int(rule.point_sets)):
        sel = np.flatnonzero(todo % rule.point_sets == k)
        if sel.size:
            err[sel] = run_set(todo[sel], npts, k)
    return err


def flip_patterns(model, coords) -> np.ndarray:
    """Sign patterns ``(k, len(coords))`` (identity excluded) of the flips ``Z[group] ->
    -Z[group]`` of the model's even row groups (``MultiIndexModel.even_groups``) that act
    within ``coords`` (flat indices ``a M + m``), and of their products."""
    coords = list(coords)
    M = model.M
    patterns = [np.ones(len(coords))]
    for group, even in model.even_groups.items():
        entries = [a * M + m for a in group for m in range(M)]
        if not even or not set(entries) <= set(coords):
            continue
        f = np.ones(len(coords))
        f[[coords.index(e) for e in entries]] = -1.0
        patterns += [p * f for p in patterns]
    return np.ascontiguousarray(np.array(patterns[1:], dtype=float).reshape(len(patterns) - 1,
                                                                             len(coords)))


def pooled_mean(sums, scramblings) -> np.ndarray:
    """``E[z]`` pooled over ``scramblings`` (indices) from per-scrambling ``sums``
    ``(n, R, 1 + d)`` (weight sum, then sums of ``w z``): ``sum_r S1_r / sum_r S0_r``;
    NaN for a sample whose selected weights sum to 0."""
    sums = _check_sums(sums, 1)
    sel = np.asarray(scramblings)
    if sel.ndim != 1 or not sel.size or not np.issubdtype(sel.dtype, np.integer) or \
            sel.min() < 0 or sel.max() >= sums.shape[1] or len(set(sel.tolist())) < sel.size:
        raise ParameterError(f"scramblings must be distinct indices in [0, {sums.shape[1] - 1}], "
                             f"got {scramblings!r}")
    num = sums[:, sel, 1:].sum(axis=1)
    den = sums[:, sel, 0].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den[:, None]


def independent_half_means(sums):
    """Two estimates ``(m_A, m_B)`` of ``E[z]`` per sample, pooled over the even and over
    the odd scramblings of per-scrambling ``sums`` (:func:`pooled_mean`): independent
    given the proposal (built on the extra scrambling), so ``m_A m_B^T`` estimates
    ``E[z] E[z]^T`` without the variance of the estimates (the SE's 'cross' estimator),
    up to their ratio bias.  (A jackknife of each half over its quarters was tried
    against that bias: no measurable change.  The +18% / +4.6% of Q_hat_11 then seen at
    64 / 128 points were not ratio bias but the correlation of one shared point set's
    errors across samples: with a point set per SE scrambling, 128 points agree with
    1024 within the standard error, NOISE_SE_RULE.)"""
    R = _check_sums(sums, 2).shape[1]
    return pooled_mean(sums, np.arange(0, R, 2)), pooled_mean(sums, np.arange(1, R, 2))


def _check_sums(sums, min_scrambles):
    sums = np.asarray(sums, dtype=float)
    if sums.ndim != 3 or sums.shape[1] < min_scrambles or sums.shape[2] < 2:
        raise ParameterError(f"sums must be per-scrambling sums of shape (n, R >= "
                             f"{min_scrambles}, 1 + d >= 2), got shape {sums.shape}")
    return sums
