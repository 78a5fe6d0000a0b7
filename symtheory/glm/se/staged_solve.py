"""Solving the state evolution for a stable fixed point in stages of increasing cost.

The iterations before a fixed point (an escape from an unstable point, a staircase) run
on cheaper maps -- a prefix of the frozen samples, then all of them with a coarser
channel rule -- each warm-starting the next; only the last stage evaluates the full map
(module :mod:`symtheory.glm.se.state_evolution`).  The engine is the package's one
fixed-point solver, :func:`symtheory.core.solvers.fixed_point` (damped iteration, Newton
polish, stability check and escape).
"""
from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ...core.progress import WorkBar
from ...core.quadrature import TensorRule
from ...core.solvers import MARGINAL_EIGENVALUE, ConvergenceWarning
from ...core.validate import ParameterError
from ..integrate.laplace_qmc import LaplaceQMCRule
from . import multilevel
from .multilevel import coarse_level
from .result import SEResult
from .sampling import DEFAULT_SCRAMBLES

#: :meth:`StagedSolve.solve` warms up on the first ``max(WARMUP_MIN_SAMPLES,
#: samples/WARMUP_FRACTION)`` frozen samples: a subset whose fixed point is within a few of
#: its (4x larger) Monte-Carlo errors of the full one, so the full-sample stages start
#: close and take few iterations
WARMUP_MIN_SAMPLES = 1000
WARMUP_FRACTION = 16
#: :meth:`StagedSolve.solve` switches a reduced link from a tensor rule over the prior of
#: the free rows to the peak-following rule when that rule's effect on Q_hat (change
#: against 1.5x the nodes) exceeds this many standard errors: the threshold under which it
#: adds less than 5% to the error bar (added in quadrature)
PEAK_RULE_SWITCH = 0.3

#: samples (a prefix: it holds every scrambling) the refined rule of that estimate runs on.
#: Its change of ``Q_hat`` is a mean over them of per-sample changes: for the change of a
#: converged rule (per-sample changes ~1e-3 of the per-sample spread of ``g g^T``) 4096 of
#: them estimate it to well within the all-sample standard error it is compared with, at a
#: fraction of a full refined pass (measured, depth-2 attention at 16384 samples: 10.6 s of
#: a 38 s solve before)
CHANNEL_ERROR_SAMPLES = 4096

#: with a randomized channel rule the second warm-up stage (coarsened rule) runs on this
#: share of the samples, not on all of them (see :meth:`StagedSolve.solve`)
RANDOMIZED_COARSE_FRACTION = 4
#: the progress bar's ETA (:class:`_Run`): the residual's contraction per iteration is
#: measured over this many iterations; above ETA_MAX_CONTRACTION (no measurable progress)
#: the time left is shown as unknown; a warm-started later stage is counted as
#: ETA_STAGE_ITERATIONS evaluations of its map
ETA_CONTRACTION_WINDOW = 5
ETA_MAX_CONTRACTION = 0.999
ETA_STAGE_ITERATIONS = 10
#: evaluations counted for the Newton steps once the residual is below ``newton_below``
ETA_NEWTON_STEPS = 3
#: default cap of :meth:`StagedSolve.solve_to_target` on the frozen samples (2^22: 4M)
TARGET_MAX_SAMPLES = 2 ** 22



@dataclass
class _Run:
    """One call of :meth:`StagedSolve.solve`: the engine's settings, its progress bar and
    the trace of every map evaluation.

    The bar counts map evaluations, of a kind per stage (its sample count).  Its ETA
    (:class:`WorkBar`) is the measured time of an evaluation in each stage, leaving out
    the first one of each stage (it compiles or loads the stage's kernels), times the
    evaluations left: in this stage, the iterations until the residual reaches the
    tolerance at the contraction measured over the last :data:`ETA_CONTRACTION_WINDOW`
    iterations, or to ``newton_below`` and then :data:`ETA_NEWTON_STEPS` (unknown,
    ``ETA ?``, until the residual contracts; at most the stage's budget), then
    :data:`ETA_STAGE_ITERATIONS` per later stage, costed as the current stage's
    evaluation scaled by the sample counts (an upper bound: part of an evaluation's
    cost does not grow with the samples)."""

    se: object
    damping: float
    tol: float
    kick: float
    max_kicks: int
    max_iter: int
    progress: bool
    trace: list = field(default_factory=list)
    clock: object = time.monotonic
    later: list = field(default_factory=list)  # sample counts of the stages after this one
    budget: int = 0  # iterations the current stage may take
    newton_below: float = 0.0  # the current stage's switch to Newton steps

    def __post_init__(self):
        self._bar = WorkBar(desc=f"SE alpha={self.se.alpha:g}", unit="map evaluations",
                            enabled=self.progress, clock=self.clock,
                            scale=lambda cost, n, m: cost * m / n)
        self._stage_key, self._residuals = None, []
        self._diag = np.array([a == b for a, b in self.se._free_entries()])

    def close(self):
        """End the progress bar (its line ends, the next output starts on a new one)."""
        self._bar.close()

    def record(self, it, q, res):
        se = self.se
        key = (se.samples, id(getattr(se, "feature_rule", None)), id(se.channel))
        first = key != self._stage_key
        if first:
            self._stage_key, self._residuals = key, []
        self._residuals.append(res)
        self._bar.advance(1, kind=se.samples, warm=first)
        self._bar.remaining(self._work_left(se.samples, q))
        self.trace.append({"iteration": len(self.trace) + 1, "Q": se._from_free(q),
                           "residual": res})

    def _work_left(self, samples, q):
        """``[(evaluations, samples)]`` left (``None``: unknown; see the class docstring)."""
        later = [(ETA_STAGE_ITERATIONS, n) for n in self.later]
        r = [x for x in self._residuals[-ETA_CONTRACTION_WINDOW - 1:] if x > 0]
        target = self.tol * (1 + float(np.max(np.abs(q))))
        if r and r[-1] <= target:
            return later
        if len(r) < 2:
            return None
        c = (r[-1] / r[0]) ** (1 / (len(r) - 1))
        if not c < ETA_MAX_CONTRACTION:
            return None
        # damped iteration down to newton_below, then Newton: a few steps, not the
        # geometric tail (measured: phase retrieval, 43 evaluations of the warm-up,
        # where the geometric estimate from its transient said 117-382)
        newton = self.newton_below > target
        stop = max(target, min(self.newton_below, r[-1])) if newton else target
        steps = (max(math.ceil(math.log(stop / r[-1]) / math.log(c)), 0)
                 + (ETA_NEWTON_STEPS if newton else 0))
        # never more than the stage's budget (at most half the iterations left: solve())
        return [(min(steps, max(self.budget - len(self._residuals), 0)), samples)] + later

    def iterate(self, q0, maxiter, newton_below, jacobian_start=None):
        # imported at the call (tests spy on the engine through its module)
        from ...core.solvers import fixed_point

        se = self.se
        self.budget = maxiter * (self.max_kicks + 1)  # the engine restarts after a kick
        self.newton_below = newton_below
        return fixed_point(lambda q: se._to_free(se.step(se._from_free(q))),
                           q0, damping=self.damping, adaptive=False, tol=self.tol,
                           maxiter=maxiter, domain=lambda q: se._in_domain(se._from_free(q)),
                           newton_below=newton_below, jacobian_directions=se._directions(),
                           jacobian_step=se.difference_step,
                           jacobian_boundary_fraction=se.boundary_fraction,
                           stability=True, kick=self.kick, max_kicks=self.max_kicks,
                           orientation=lambda v: float(np.sum(v[self._diag])),
                           callback=self.record, name=f"state evolution at alpha={se.alpha:g}",
                           warn=False, jacobian_start=jacobian_start)


class StagedSolve:
    """Mixin of :class:`~symtheory.glm.se.state_evolution.StateEvolution`: the staged
    solve (module docstring)."""

    def solve(self, Q0=None, *, damping=0.5, tol=None, max_iter=300, newton_below=1e-3,
              kick=0.05, max_kicks=3, progress=False, stderr=True,
              warmup="auto", peak_rule="auto") -> SEResult:
        """Return the stable fixed point of ``Q = F(Q)`` on the frozen samples, from ``Q0``.

        A thin client of the engine :func:`symtheory.core.solvers.fixed_point` on the free
        entries of ``Q`` (upper triangle inside the structure mask), with domain
        ``0 <= Q < rho``.

        Damped iteration ``Q <- theta Q + (1 - theta) F(Q)`` (``damping`` = ``theta``, the
        weight of the previous iterate, in [0, 1)) follows the basin of the start (``Q0``
        defaults to ``0.05 I``: a small symmetry-breaking overlap, the reference's start;
        pass e.g. ``0.99 I`` for an informed start).  Once the residual is below
        ``newton_below`` Newton steps (Jacobian by differencing the smooth frozen-sample
        map) remove the critical slowing down near thresholds; they are refused where
        the Jacobian has an eigenvalue > 1, i.e. towards an unstable fixed point.
        Converged when ``max |F(Q) - Q| <= tol (1 + max|Q|)``; ``tol`` defaults to
        :attr:`default_tol`: 1e-8, or :data:`RANDOMIZED_RULE_TOL` (1e-4) for a
        Laplace-RQMC rule, whose map is smooth only to about that.  ``Q_stderr``: the
        sampling error propagated through the linearized map, combined in quadrature with
        the iteration's truncation error (the engine's Newton-predicted distance to the
        fixed point: the tolerance bounds the residual, which is ``1 - lambda`` times that
        distance along a Jacobian eigenvalue ``lambda``); under a Laplace-RQMC rule the
        Jacobian may be the last warm-up stage's (see below; the message says so).

        Cost: the iterations before the fixed point (an escape from an unstable point, a
        staircase) run in cheaper stages, each warm-starting the next -- first on the
        first :meth:`warmup_samples` of the frozen samples (``warmup``: ``"auto"``, an
        integer, ``None`` = none), then on all of them with half the quadrature nodes per
        axis (a reduced link; a Laplace-RQMC rule, of a deep link or a noisy one: its
        :meth:`~symtheory.glm.integrate.laplace_qmc.LaplaceQMCRule.coarsened`, a quarter of the
        points, in both stages, the second on samples / :data:`RANDOMIZED_COARSE_FRACTION`
        only, Newton tried from the start of every stage after the first, with the last
        Jacobian computed before it, within that Jacobian's probe radius: the full map's
        own difference Jacobian is no more accurate at that rule's smoothness; it is
        differenced where the stability verdict is near marginal) -- and only the last
        stage uses the full map.  The result is
        the fixed point of the full map, converged by the same criterion; ``iterations``
        counts every stage and the message names them.  A warm-up stage runs at most half
        of the iterations left, so the full map always gets a share of ``max_iter``.

        Rule: a noiseless reduced link is integrated over its free rows by a tensor rule
        over their prior.  Where their posterior is far narrower than that prior (both
        layers nearly known, e.g. at a counting bound) such a rule converges slowly:
        with ``peak_rule="auto"`` its effect on ``Q_hat`` is measured at the first warm-up
        stage's fixed point (change against 1.5x the nodes, in standard errors of all the
        samples; on all of them when there is no subset stage), and above
        :data:`PEAK_RULE_SWITCH` the final stage (the only one left) uses the peak-following
        :class:`~symtheory.glm.integrate.reduced_posterior.PeakTensorRule` (the message says so; ``None``
        keeps the rule given).

        Stability: an even model keeps ``Q_ll = 0`` exactly, so a layer that decayed while
        another was being learned can sit on an *unstable* fixed point (the staircase of
        Eqs. (17)-(18) of arXiv:2502.00901); near perfect recovery below its threshold the
        point ``Q = rho`` is a fixed point of ``F`` that is unstable (e.g. ``y = z^2``: ``1
        - q`` grows by ``1/alpha`` per step).  Every converged point, on the boundary of the
        domain too (one-sided differences into it), is checked: if an eigenvalue of the
        Jacobian exceeds 1 the iteration restarts from the fixed point plus ``kick`` along
        the unstable direction (towards larger overlaps when that stays in the domain), at
        most ``max_kicks`` times; the message reports it and ``stable`` records the final
        verdict.

        Parameters
        ----------
        Q0 : numpy.ndarray, optional
            Start (default ``0.05 I``).
        damping : float, optional
            ``theta`` in ``[0, 1)``, the weight of the previous iterate.
        tol : float, optional
            Residual tolerance (default ``default_tol``).
        max_iter : int, optional
            Iterations over all stages.
        newton_below : float, optional
            Residual below which Newton steps are tried.
        kick : float, optional
            Size of the restart step along an unstable direction.
        max_kicks : int, optional
            Restarts at most.
        progress : bool, optional
            Show a progress bar.
        stderr : bool, optional
            Propagate the sampling error to ``Q_stderr`` (a Jacobian evaluation).
        warmup : "auto", int or None, optional
            Samples of the first warm-up stage (:meth:`warmup_samples`).
        peak_rule : "auto" or None, optional
            Switch a reduced link to the peak-following rule where needed (above).

        Returns
        -------
        SEResult
            The fixed point ``Q`` with ``Q_stderr``, ``Q_hat``, ``stable`` and the report.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> res = se.solve()
        >>> round(float(res.Q[0, 0]), 8), res.converged, res.stable
        (0.5, True, True)
        """
        if peak_rule not in ("auto", None):
            raise ParameterError(f"peak_rule must be 'auto' or None, got {peak_rule!r}")
        tol = self.default_tol if tol is None else tol
        self.multilevel = None      # the warm-up stages run one rule; see _staged_fixed_point
        P = self.model.P
        Q = self._check_Q(0.05 * np.eye(P) if Q0 is None else Q0)
        run = _Run(self, damping, tol, kick, max_kicks, max_iter, progress)
        self.psd_projections = 0
        self.estimate_channel_error = False
        try:
            fp = self._staged_fixed_point(run, self._to_free(Q), newton_below, warmup,
                                          peak_rule)
        finally:
            run.close()
        return self._fixed_point_result(fp, tol, stderr, run.trace)

    def solve_to_target(self, target_error, Q0=None, *, max_samples=TARGET_MAX_SAMPLES,
                        progress=False, **solve_options) -> SEResult:
        """Return the fixed point solved on frozen samples grown to a target error.

        The samples grow until the standard error of every free overlap at the fixed point
        (``max Q_stderr``, the package's one meaning of a target error) is at most
        ``target_error``, or ``max_samples`` is reached (then warned and said).  Each round
        solves (:meth:`solve`, warm-started at the last fixed point) and, while the error is
        above the target, redraws ``samples x (error/target)^2`` (the Monte-Carlo rate;
        randomized QMC on a smooth integrand converges faster and stops early), rounded up
        to the scramblings times a power of 2, at least doubled, at most 64x.

        Integrating instead of sampling, chosen automatically: where a round's
        fixed point is a converged, stable staircase plateau of a reduced noiseless link (every row
        but the solved one pinned at 0 by its sign symmetry, ``M = 2``, one solved row;
        :func:`~symtheory.glm.se.plateau.plateau_row`), the plateau map integrates
        ``omega`` and ``y`` deterministically (:mod:`symtheory.glm.se.plateau`).  It is
        taken when its predicted time (one evaluation timed there, times
        :data:`~symtheory.glm.se.plateau.PLATEAU_SOLVE_EVALUATIONS`) is below that of the
        samples the target needs, and used when its solve converged on a stable root
        whose error estimate meets the target (or no number of samples can); the result's
        ``method`` is then ``"plateau map"``, its ``Q_stderr`` the rule's error estimate
        (``error_kind = "estimate"``), and the message gives both predictions
        (:func:`~symtheory.glm.se.plateau.plateau_route`).  Otherwise sampling goes on and
        the message says why.

        Parameters
        ----------
        target_error : float
            Largest standard error of a free overlap at the fixed point (> 0).
        Q0 : numpy.ndarray, optional
            Starting overlap of the first round.
        max_samples : int, optional
            Cap on the frozen samples (>= the current ``samples``).
        progress : bool, optional
            One line per round on stderr with its ETA: the measured seconds per sample of
            the last round times the next round's samples.
        **solve_options
            Passed to :meth:`solve`.

        Returns
        -------
        SEResult
            The last round's fixed point, or the plateau map's (``method``);
            ``target_rounds`` lists every sampled round.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=64,
        ...                     noise_variance=0.5, check_channel=False)
        >>> res = se.solve_to_target(1e-3)
        >>> bool(float(res.Q_stderr.max()) <= 1e-3), round(float(res.Q[0, 0]), 3)
        (True, 0.5)
        """
        import sys
        import time

        if isinstance(target_error, bool) or not (isinstance(target_error, (int, float)) and
                                                  math.isfinite(target_error) and target_error > 0):
            raise ParameterError(f"target_error must be a finite number > 0, got {target_error!r}")
        if isinstance(max_samples, bool) or not isinstance(max_samples, (int, np.integer)) or \
                max_samples < self.samples:
            raise ParameterError(f"max_samples must be an integer >= samples ({self.samples}), got "
                                 f"{max_samples!r}")
        free = self.mask > 0
        rounds, Q, note, plateau_seconds = [], Q0, None, None
        while True:
            t0 = time.perf_counter()
            res = self.solve(Q, progress=False, **solve_options)
            seconds = time.perf_counter() - t0
            err = float(np.max(res.Q_stderr[free])) if free.any() else 0.0
            rounds.append((self.samples, err, seconds))
            if err <= target_error or self.samples >= max_samples or not np.isfinite(err):
                break
            if self.features is not None and self.omega_weights is None:
                # integrate instead of sampling where the fixed point allows it and it is
                # predicted sooner there (glm/se/plateau.py); its timing is made once
                from .plateau import plateau_route

                say = (lambda line: print(line, file=sys.stderr)) if progress else None
                choice = plateau_route(self, res, err, target_error, seconds, max_samples,
                                       predicted=plateau_seconds, progress=say)
                plateau_seconds, note = choice.predicted, choice.note or note
                if choice.result is not None:
                    return self._plateau_report(choice.result, target_error, rounds)
            if self.omega_weights is not None:
                # a tensor rule: 1.5x the nodes per axis a round (its error falls faster
                # than any power of the nodes on an analytic integrand)
                self.omega_nodes = math.ceil(1.5 * self.omega_nodes)
                self._draw_samples(self.sampling, DEFAULT_SCRAMBLES, self.seed)
                if progress:
                    print(f"SE alpha={self.alpha:g}: max error {err:.2g} > target "
                          f"{target_error:g} at {rounds[-1][0]} nodes ({seconds:.1f} s); next "
                          f"{self.omega_nodes} Gauss-Hermite nodes per axis, {self.samples} "
                          f"nodes", file=sys.stderr)
                Q = res.Q
                continue
            B = self.scrambles or DEFAULT_SCRAMBLES
            want = self.samples * min(64.0, max(2.0, (err / target_error) ** 2))
            n_new = B * 2 ** int(math.ceil(math.log2(want / B)))
            n_new = int(min(n_new, max_samples))
            if progress:
                print(f"SE alpha={self.alpha:g}: max stderr {err:.2g} > target {target_error:g} at "
                      f"{self.samples} samples ({seconds:.1f} s); next {n_new} samples, ETA "
                      f"{seconds / self.samples * n_new:.0f} s", file=sys.stderr)
            self.samples = n_new
            self._draw_samples(self.sampling, self.scrambles or DEFAULT_SCRAMBLES, self.seed)
            Q = res.Q
        if note:
            res.message += f"; {note}"
        return self._target_report(res, target_error, err, rounds, "max_samples",
                                   f"max stderr {err:.2g} above target_error {target_error:g} "
                                   f"at max_samples {self.samples}")

    def _plateau_report(self, res, target_error, rounds):
        """:meth:`_target_report` on the plateau route's result."""
        e = float(np.max(res.Q_stderr))
        return self._target_report(
            res, target_error, e, rounds,
            "the plateau rule's error estimate; no number of samples reaches it",
            f"the plateau map's error estimate {e:.2g} is above target_error "
            f"{target_error:g}, which max_samples cannot reach either", stacklevel=4)

    def _target_report(self, res, target_error, err, rounds, limit, warning, stacklevel=3):
        """:meth:`solve_to_target`'s report on its result ``res`` (largest error ``err``):
        the target reached or not (``limit`` says what stopped it, ``warning`` is warned)
        and the sampled rounds."""
        reached = err <= target_error
        res.message += (f"; target error {target_error:g} " +
                        ("reached" if reached else f"NOT reached ({limit})") +
                        ": sampled rounds (samples, max stderr, seconds) " +
                        ", ".join(f"({n}, {e:.2g}, {t:.1f})" for n, e, t in rounds))
        if not reached:
            warnings.warn(f"state evolution at alpha={self.alpha:g}: {warning}",
                          ConvergenceWarning, stacklevel=stacklevel)
        res.target_rounds = rounds
        return res

    def _stage_plan(self, warmup, newton_below):
        """``(rule, coarse rule, [(samples, stage rule)], Newton threshold after the first
        stage, inherit the Jacobian?)`` of the stages before the final one."""
        rule = getattr(self, "feature_rule", None)
        if rule is None:
            # a noisy link's Laplace-RQMC rule coarsens for the warm-up the same way
            rule = self._randomized_channel_rule()
        coarse = rule.coarsened() if rule is not None else None
        if isinstance(coarse, TensorRule) and coarse.n < 8:
            coarse = None
        m = self.warmup_samples(warmup)
        # the way to the fixed point is cheap stages, each warm-starting the next: the
        # first m of the frozen samples (a transient of ~200 iterations costs samples/m
        # times less), then all samples, both on the rule with half the nodes per axis (a
        # quarter of the cost); the fixed point itself on all samples and the requested
        # rule, from there.  A randomized (Laplace-RQMC) coarse rule has random errors of
        # its own, so its fixed point on all samples is no closer to the last stage's than
        # a subset's is: the second stage runs on samples/RANDOMIZED_COARSE_FRACTION of them
        second = self.samples
        if isinstance(rule, LaplaceQMCRule):
            second = self.samples // RANDOMIZED_COARSE_FRACTION
            second = second if second > m else None
        # a reduced link's tensor rule: the all-sample stage runs on the coarse level of
        # the two-level map that follows it (glm.se.multilevel), a warm start only; the
        # subset stage keeps half the nodes (its fixed point decides the peak rule)
        level0 = (coarse_level(rule) if self.features is not None and m < self.samples
                  and self.allow_multilevel else None)
        plan = ([(m, coarse or rule)] if m < self.samples else []) + (
            [(second, level0 or coarse)] if coarse is not None and second is not None else [])
        # with a randomized rule a stage after the first starts within a few of the last
        # subset's Monte-Carlo errors of its fixed point, inside the difference step its
        # Jacobian is measured with (the scale it treats the map as linear on): Newton
        # from there
        warm_newton = newton_below
        if isinstance(rule, LaplaceQMCRule) and newton_below > 0:
            warm_newton = max(newton_below, self.difference_step)
        elif newton_below > 0:
            # a deterministic rule's stage starts within the last subset's Monte-Carlo
            # errors (~1e-2) of its fixed point, with the last stage's Jacobian as a chord
            # seed: chord steps from there (each one pass; measured on depth-2 attention,
            # 16384 samples: 26 damped passes to the coarse stage's fixed point before)
            warm_newton = math.inf
        # with a randomized rule a stage also starts from the last Jacobian computed in a
        # stage before it, within that Jacobian's own probe radius (the difference step,
        # less next to the boundary): the map is smooth only to ~1e-4, so a difference
        # Jacobian of the full map is itself off by ~1e-4 / 1e-2 relative, as much as the
        # warm-up's is by its sampling noise, and its probes cost two full passes of the
        # final stage.  The engine differences the full map where the verdict is near
        # marginal
        return rule, coarse, plan, warm_newton, isinstance(rule, LaplaceQMCRule)

    def _staged_fixed_point(self, run, q0, newton_below, warmup, peak_rule):
        """Run the stages of :meth:`_stage_plan`, then the full map; the engine's result
        with every stage's iterations counted and named in its message."""
        if self.omega_weights is not None and warmup is not None:
            return self._tensor_staged_fixed_point(run, q0, newton_below)
        rule, coarse, plan, warm_newton, inherit = self._stage_plan(warmup, newton_below)
        done, stages, switch_note, inherited = 0, [], "", None
        for i, (n_stage, stage_rule) in enumerate(plan):
            run.later = [n for n, _ in plan[i + 1:]] + [self.samples]
            # at most half of the iterations left: a stage that converges slowly (its
            # coarse map near a nearly known layer) must leave the full map its share
            with self._stage(n_stage, stage_rule):
                first = run.iterate(q0, max(1, (run.max_iter - done) // 2),
                                    warm_newton if i else newton_below, inherited)
            stages.append((n_stage, stage_rule))
            q0, done = first.value, done + first.iterations
            if first.jacobian_point is not None:
                # a randomized rule's Jacobian holds within its probe radius; a
                # deterministic rule's seeds chord steps wherever they contract
                inherited = (first.jacobian_point, first.jacobian,
                             first.jacobian_radius if inherit else math.inf)
            if i == 0 and peak_rule == "auto":
                switch_note = self._switch_to_peak_rule(self._from_free(q0), n_stage)
                if getattr(self, "feature_rule", rule) is not rule:
                    # straight to the final stage: the peak rule's Newton search costs the
                    # same at any node count, and the coarsened rule's fixed points along a
                    # nearly flat direction are not the full rule's (measured: 50 coarse
                    # passes to 1 - Q11 = 3e-6, then 21 full ones to 4e-4)
                    break
        run.later = []
        ml_note = ""
        level0 = coarse_level(rule) if self.allow_multilevel else None
        if level0 is not None and stages and stages[-1] == (self.samples, level0) and \
                first.converged:
            levels = multilevel.plan(self, self._from_free(q0), rule, stages[-1][1],
                                     self._products, CHANNEL_ERROR_SAMPLES)
            if levels is not None:
                self.multilevel = levels
                ml_note = "; final stage by " + levels.describe(rule)
            else:
                ml_note = (f"; final stage on {rule.describe()} over all samples (a two-level "
                           "map would not halve its cost here)")
        fp = run.iterate(q0, max(1, run.max_iter - done),
                         warm_newton if stages else newton_below, inherited)
        fp.iterations += done
        if stages:
            fp.message += (" in the final stage (" +
                           f"{fp.iterations} iterations in all; warm-started by " + ", then ".join(
                               f"{n} samples" + ("" if r is None else f" on {r.describe()}")
                               for n, r in stages) + ")")
        fp.message += switch_note + ml_note
        if fp.jacobian_seeded:
            fp.message += ("; the final stage's Jacobian (Newton steps, stability, Q_stderr) "
                           "is the warm-up's, " + ("within its probe radius" if inherit else
                                                   "as a chord (its largest eigenvalue below "
                                                   f"{MARGINAL_EIGENVALUE:g})"))
        return fp

    def _tensor_staged_fixed_point(self, run, q0, newton_below):
        """The staged solve of a Gauss-Hermite tensor design: the way to the fixed point on
        :data:`WARMUP_OMEGA_NODES` per axis, then the requested rule from there by chord
        Newton steps with the warm-up's Jacobian (a deterministic map: its Jacobian
        differs from the fine rule's by the coarse rule's error only)."""
        from .sampling import WARMUP_OMEGA_NODES

        if self.omega_nodes <= WARMUP_OMEGA_NODES:
            return run.iterate(q0, run.max_iter, newton_below)
        run.later = [self.samples]
        with self._omega_rule(WARMUP_OMEGA_NODES):
            first = run.iterate(q0, max(1, run.max_iter // 2), newton_below)
            warm_samples = self.samples
        run.later = []
        inherited = (None if first.jacobian_point is None else
                     (first.jacobian_point, first.jacobian, math.inf))
        fp = run.iterate(first.value, max(1, run.max_iter - first.iterations),
                         math.inf if newton_below > 0 else 0.0, inherited)
        fp.iterations += first.iterations
        fp.message += (f" in the final stage ({fp.iterations} iterations in all; warm-started "
                       f"by {WARMUP_OMEGA_NODES} Gauss-Hermite nodes per axis, {warm_samples} "
                       f"nodes, {first.iterations} iterations)")
        if fp.jacobian_seeded:
            fp.message += ("; the final stage's Jacobian (Newton steps, stability, Q_stderr) "
                           "is the warm-up's, as a chord")
        return fp

    def _fixed_point_result(self, fp, tol, stderr, trace) -> SEResult:
        """The :class:`SEResult` at the engine's fixed point: ``Q_hat`` and the channel's
        accuracy there, ``Q_stderr`` through the linearized map with the iteration's
        truncation error in quadrature, and the report."""
        P = self.model.P
        Q = self._from_free(fp.value)
        self.estimate_channel_error = True
        Qhat, se, gap = self.qhat(Q)
        channel_error = self.channel_error
        qhat_error = self.quadrature_qhat_error(Q)
        tensor = self.omega_weights is not None
        rule_note = ""
        if tensor and stderr:
            se, rule_note = self._tensor_rule_error(Q, Qhat)
        Q_se = (self._fixed_point_stderr(Q, se, fp.jacobian, bound=tensor) if stderr
                else np.full((P, P), np.nan))
        msg = fp.message + f"; residual tolerance {tol:g} x (1 + max|Q|)" + rule_note
        if stderr and fp.truncation is not None:
            # the iteration's own error, in quadrature: next to perfect recovery the map
            # may contract rho - Q by ~1% per step, and the residual tolerance then holds
            # far from the fixed point (measured: at 1 - Q11 = 3.9e-7 with a sampling error
            # of 4.8e-9 there, the boundary fixed point 80 of them away)
            trunc = self._from_free(fp.truncation)
            if np.any((trunc > 0.1 * Q_se) & (trunc > 1e-15 * (1 + np.abs(Q)))):
                msg += (f"; Q_stderr includes the iteration's truncation error (distance to "
                        f"the fixed point predicted by a Newton step: up to "
                        f"{float(np.max(trunc)):.2g}, sampling error up to "
                        f"{float(np.max(Q_se)):.2g})")
            Q_se = np.sqrt(Q_se ** 2 + trunc ** 2)
        if self.observation_note:
            msg += "; " + self.observation_note
            if self.observation_rule is not None and not tensor:
                msg += (f" (mass defect {self.observation_mass_error:.1g}, effect of the coarse "
                        f"sub-grid on Q_hat {self.observation_qhat_error:.2g} standard errors)")
        if channel_error is not None:
            msg += f"; estimated channel quadrature error at the fixed point {channel_error:.2g}"
        if qhat_error is not None:
            msg += f" (on Q_hat: {qhat_error:.2g} sampling standard errors)"
        if self.psd_projections:
            msg += (f"; {self.psd_projections} map evaluations projected Q_hat onto the PSD cone "
                    "(negative eigenvalue within the 4-sigma tail of its standard errors)")
        if not fp.converged or fp.stable is False:
            warnings.warn(f"state evolution at alpha={self.alpha:g}: {msg}", ConvergenceWarning,
                          stacklevel=3)
        return SEResult(value=Q, error=Q_se, Qhat=Qhat, Qhat_stderr=se, converged=fp.converged,
                        iterations=fp.iterations, residual=fp.residual, nishimori_gap=gap,
                        message=msg, trace=trace, stable=fp.stable, channel_error=channel_error,
                        channel_qhat_error=qhat_error, samples=self.samples,
                        observation=self.observation_note,
                        observation_qhat_error=self.observation_qhat_error,
                        error_kind="estimate" if tensor else "stderr")

    def _tensor_rule_error(self, Q, Qhat):
        """``(bound on |Q_hat - exact|, note)`` of a Gauss-Hermite tensor design at ``Q``:
        the change against :func:`~symtheory.glm.se.sampling.coarse_omega_nodes` per axis
        plus the observation rule's coarse-level change (each the coarser rule's error, an
        over-estimate of the finer one's on a converging rule)."""
        from .sampling import coarse_omega_nodes

        obs = self.alpha * self.observation_qhat_change
        k, kc = self.omega_nodes, coarse_omega_nodes(self.omega_nodes)
        with self._omega_rule(kc):
            Qhat_c = self.qhat(Q)[0]
        omega = np.abs(Qhat - Qhat_c)
        note = (f"; Q_stderr is an error bound of the rules, not a standard error: Q_hat "
                f"changes by up to {float(np.max(omega)):.2g} from {k} to {kc} Gauss-Hermite "
                f"nodes per axis and by {float(np.max(obs)):.2g} on the observation rule's "
                "coarse level, carried through the linearized map")
        return omega + obs, note

    @contextlib.contextmanager
    def _omega_rule(self, nodes):
        """Evaluate the map on the Gauss-Hermite tensor rule of ``nodes`` per axis (a
        warm-up or the error estimate of ``sampling='gauss-hermite'``); restored on exit."""
        saved = (self.omega_nodes, self.samples, self.xi, self.eta, self.noise,
                 self.omega_weights)
        self.omega_nodes = int(nodes)
        self._draw_samples(self.sampling, DEFAULT_SCRAMBLES, self.seed)
        try:
            yield
        finally:
            (self.omega_nodes, self.samples, self.xi, self.eta, self.noise,
             self.omega_weights) = saved

    def _switch_to_peak_rule(self, Q, n) -> str:
        """After the first warm-up stage (fixed point ``Q`` on the first ``n`` samples):
        switch a reduced link's tensor rule over the prior to the peak-following rule when
        its effect on ``Q_hat`` there, ``|Q_hat(rule) - Q_hat(1.5x nodes)|`` over the
        standard error of all the samples (the subset's times ``sqrt(n / samples)``),
        exceeds :data:`PEAK_RULE_SWITCH`.  Not at a point where an even group of free rows
        sits at ``Q_ll = 0``: the peaks break the symmetry that holds it there exactly.
        Returns the note for the message ("" when nothing was measured)."""
        from ..integrate.reduced_posterior import PeakTensorRule

        rule = getattr(self, "feature_rule", None)
        if self.features is None or not isinstance(rule, TensorRule):
            return ""
        free = set(self.features.free_rows)
        at_zero = [g for g, even in self.model.even_groups.items()
                   if even and set(g) <= free and all(Q[a, a] == 0 for a in g)]
        saved = self.estimate_channel_error
        try:
            with self._stage(n, rule):
                self.estimate_channel_error = True
                self.qhat(Q)            # this pass also integrates with the refined rule
                effect = self.quadrature_qhat_error(Q)
        finally:
            self.estimate_channel_error = saved
        if effect is None:
            return ""
        effect *= math.sqrt(self.samples / n)
        if effect <= PEAK_RULE_SWITCH:
            return ""
        if at_zero:
            return (f"; the rule over the prior moved Q_hat by ~{effect:.2g} standard errors "
                    f"at the warm-up's fixed point, but even rows {at_zero} sit at 0 there, "
                    "where the peak-following rule would break their symmetry: kept")
        # half the nodes per axis for each component: a component spans the posterior, not
        # the prior (two nearly known rows, Q ~ rho: 12 / 18 / 30 nodes per component agree
        # within 0.01 standard errors, measured), at about the prior rule's cost
        self.feature_rule = PeakTensorRule(rule.coarsened())
        return (f"; the rule over the prior moved Q_hat by ~{effect:.2g} standard errors "
                f"(> {PEAK_RULE_SWITCH:g}) at the warm-up's fixed point: the full-sample stage on "
                f"{self.feature_rule.describe()}")

    def warmup_samples(self, warmup="auto") -> int:
        """Return the number of samples of the first warm-up stage of :meth:`solve`.

        ``"auto"`` = the larger of :data:`WARMUP_MIN_SAMPLES` and
        ``samples/WARMUP_FRACTION`` (all samples -- no subset stage -- when that is more than
        half of them); an integer in ``[2, samples]``; ``None`` for no subset stage.

        Parameters
        ----------
        warmup : "auto", int or None, optional
            The request.

        Returns
        -------
        int
            Samples of the first stage (``samples``: no subset stage).

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> se.warmup_samples(), se.warmup_samples(64)
        (256, 64)
        """
        if warmup is None or self.omega_weights is not None:
            # a prefix of a tensor rule is no rule: its warm-up is a coarser tensor rule
            return self.samples
        if isinstance(warmup, str):
            if warmup != "auto":
                raise ValueError(f"warmup must be 'auto', None or an integer, got {warmup!r}")
            m = max(WARMUP_MIN_SAMPLES, self.samples // WARMUP_FRACTION)
            return m if 2 * m <= self.samples else self.samples
        if isinstance(warmup, bool) or not isinstance(warmup, (int, np.integer)) or not (
                2 <= warmup <= self.samples):
            raise ValueError(f"warmup must be an integer in [2, samples = {self.samples}], "
                             f"'auto' or None, got {warmup!r}")
        return int(warmup)

    @contextlib.contextmanager
    def _stage(self, n, rule):
        """Evaluate the map on the first ``n`` frozen samples (nested in the full set: the
        same draws, so a stage's fixed point is a warm start for the next) and with
        ``rule`` (a reduced link's feature rule, or a noisy link's channel rule); restored
        on exit."""
        saved = (self.samples, self.xi, self.eta, self.noise, getattr(self, "feature_rule", None),
                 self.channel)
        self.samples, self.xi, self.eta = n, self.xi[:n], self.eta[:n]
        self.noise = None if self.noise is None else self.noise[:n]
        if rule is not None and self.features is not None:
            self.feature_rule = rule
        elif rule is not None:
            self.channel = self.channel.configured(self.noise_variance, rule)
        try:
            yield
        finally:
            self.samples, self.xi, self.eta, self.noise = saved[:4]
            if saved[4] is not None:
                self.feature_rule = saved[4]
            self.channel = saved[5]
