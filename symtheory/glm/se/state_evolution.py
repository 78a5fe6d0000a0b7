"""Matrix state evolution of sequence multi-index models (Lemma 2.2, Eqs. (13)-(14) of Troiani
et al., arXiv:2502.00901).

    Q_hat = alpha E_{xi, eta}[ sum_m g_out(y, omega, V)_{.m} g_out(...)_{.m}^T ],
        omega = Q^{1/2} xi,  Z = omega + (rho - Q)^{1/2} eta,  y = g(Z) (+ noise),  V = rho - Q,
    Q_new = F_prior(Q_hat + lambda I)       (lambda: side information, App. C of arXiv:2502.00901)

For the Gaussian prior N(0, I_P) ``F_prior`` is the matrix function of the scalar
overlap map ``qhat/(1 + qhat)`` *derived* from the prior's log-partition
(:func:`symtheory.glm.factors.gaussian_prior.gaussian_overlap_map`): the prior is rotation invariant,
so ``F(O diag(l) O^T) = O diag(F(l)) O^T`` (= ``Q_hat (I + Q_hat)^{-1}``).

The expectation is an average over ``samples`` draws of ``(xi, eta, noise)`` drawn
**once** (common random numbers): the map is then a smooth deterministic function of
``Q`` alone (whatever was evaluated before), and the package's fixed-point engine
(:func:`symtheory.core.solvers.fixed_point`: damped iteration, Newton polish, stability
check) converges to machine precision on it.  The draws are randomized quasi-Monte Carlo
by default (``sampling='rqmc'``): ``scrambles`` independently scrambled Sobol sequences
in the ``2 P M (+ outputs)`` normal coordinates (:func:`~symtheory.core.quadrature.
scrambled_sobol_normals`), interleaved (sample ``s`` is point ``s // scrambles`` of
scrambling ``s % scrambles``) so that every prefix -- the warm-up stages of
:meth:`StateEvolution.solve` -- holds all scramblings.  Every draw is uniform, so the
averages are unbiased as with plain Monte Carlo (``sampling='monte-carlo'``), and on a
smooth integrand their variance is lower.  Measured (variance of ``Q_hat`` over seeds,
same sample count, default 16 scramblings): phase retrieval at ``Q = 0.5``, 1024
samples, 48 seeds: 3.9x lower; depth-2 attention (skip 1, ``Q = diag(0.3, 0.6)``, 16000
samples, 12 seeds): 3.8x on ``Q_hat_22``, no gain seen on ``Q_hat_11``.  One scrambling
of 8192 points gains more (7x and 16x there): fewer, larger scramblings trade the error
estimate's own accuracy for variance.  Reported uncertainties: the standard error of ``Q_hat`` (RQMC: the spread of the
``scrambles`` per-scrambling means / sqrt(scrambles), a 15-degree-of-freedom estimate at
the default 16; plain Monte Carlo: the per-sample spread / sqrt(samples)) and of the
fixed point, propagated through the linearized map ``(I - dF)^{-1}`` (estimated by
differencing the frozen-sample map), which grows near a threshold.

Coordinates of the observation: a noiseless link with a :class:`DeterministicReduction`
is integrated in its inversion-feature coordinates (e.g. the logit differences of a
softmax head), computed from the teacher's ``E = T(u) h^T`` and never from ``y``: a
saturated softmax (large skip strength or inverse temperature) rounds ``y`` to 0 or 1 and loses
the observation, while its logits stay exact.  The posterior moments (hence ``g_out``,
``dg_out``) do not depend on the coordinates; ``log Z_out`` (in :meth:`psi_out`) is the
log-density of the features, which differs from that of ``y`` by a function of the
observation only (a constant shift of ``Psi_out``, independent of ``Q`` and ``alpha``).

Structure: when the model is even in every row group (even models, arXiv:2502.00901) the cross-group
blocks of ``Q`` vanish at every iteration in expectation; the engine then keeps them at
exactly zero (``structure='block'``) so Monte-Carlo noise cannot break the symmetry.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from ...core.linalg import psd_sqrt
from ...core.quadrature import TensorRule
from ...core.validate import ParameterError
from ..factors.gaussian_prior import GaussianPrior
from ..integrate.moments import Moments
from .linearization import MapLinearization
from .sampling import (
    DEFAULT_SAMPLES,
    DEFAULT_SCRAMBLES,
    min_variance_weights,
    tail_multiple,
)
from .staged_solve import CHANNEL_ERROR_SAMPLES, StagedSolve

#: nodes-per-axis factor of the finer rule the channel error of a reduced noiseless link
#: is estimated against at the fixed point (one evaluation: 1.5^D times its cost over D
#: integrated coordinates)
CHANNEL_ERROR_REFINEMENT = 1.5


#: difference step (in overlap units) of the Jacobians of the frozen-sample map (Newton,
#: stability, standard errors) when the channel rule is randomized and adaptive (Laplace-
#: RQMC): its per-sample decisions (mixture components, points near tol) switch as ``Q``
#: moves, so the map is smooth only to ~1e-4 (measured at depth 3: lambda and the map
#: change by 1e-4 between points 1e-5 apart), and a 1e-5 difference read spectral radii of
#: 1.01 and 8.4 at stable points; 1e-2 balances that noise (J error ~1e-2) against the
#: truncation error.  Deterministic rules keep 1e-6.
RANDOMIZED_RULE_DIFFERENCE_STEP = 1e-2

#: default residual tolerance of :meth:`StateEvolution.solve` for such a rule: below its
#: map's smoothness (~1e-4, above) Newton steps no longer lower the residual and damped
#: steps only move along the noise (measured: depth 3, alpha 1.3, 2000 samples, the
#: residual sat at 1e-4 for 15 evaluations, 6 min, with the default 1e-8); still two
#: orders below the Monte-Carlo error of Q at such sample counts (~1e-2)
RANDOMIZED_RULE_TOL = 1e-4


class StateEvolution(StagedSolve, MapLinearization):
    """Matrix state evolution of an SMI model at sample complexity ``alpha`` (Lemma 2.2, Eqs. (13)-(14) of arXiv:2502.00901).

    ``Q_hat = alpha E[sum_m g_out g_out^T]`` on frozen samples and ``Q = F_prior(Q_hat +
    lambda I)``, in the normalization ``alpha = n/D`` (samples per token dimension ``D``, not
    ``n/(D M)``; see the module docstring).

    Parameters
    ----------
    model : MultiIndexModel
        The declared model (:class:`~symtheory.glm.factors.multi_index.MultiIndexModel`).
    alpha : float
        Sample complexity (finite, > 0).
    samples : int, optional
        Frozen draws (default :data:`DEFAULT_SAMPLES`); with RQMC best a power of 2 times
        ``scrambles``; below ``2 scrambles`` some scramblings hold one point and the stated
        error falls back to the per-sample spread, honest but without the RQMC gain.
    seed : int, optional
        Seed of the draws (>= 0 with RQMC).
    noise_variance : float, optional
        Gaussian output-noise variance; ``None`` = noiseless.
    rule : optional
        Quadrature of the channel (see :meth:`MultiIndexModel.channel
        <symtheory.glm.factors.multi_index.MultiIndexModel.channel>`).
    side_information : float, optional
        ``lambda >= 0`` (App. C of arXiv:2502.00901).
    structure : {"auto", "block", "full"}, optional
        Free entries of ``Q``: ``block`` keeps the cross-group blocks of an even model at
        exactly 0 (the default for one).
    prior : Prior, optional
        Weight prior (default :class:`~symtheory.glm.factors.gaussian_prior.GaussianPrior`).
    regularization : float, optional
        ``eps >= 0``: use ``V = rho - Q + eps I`` for both the teacher and the channel, as
        the reference code (``BO_2w.py``, eps = 1e-3) -- only to reproduce it; it caps how
        sharply a learned layer is known (the reference code of arXiv:2502.00901 does the
        same).
    estimator : {"auto", "square", "combined", "cross"}, optional
        ``'square'`` averages ``sum_m g g^T`` (default for a reduced deep link integrated
        by a Laplace-RQMC rule: there the twin below keeps the rule's ratio bias of second
        moments -- at depth 3, alpha = 1.05, ``Q = diag(0.13, 0.006, 0.983)``, on 1000
        paired samples refining the rule from tol 5e-2 / 1024 points to 1e-2 / 8192 moved
        ``E(-J)_11`` by -0.0103 +- 0.0007 and ``E(g g^T)_11`` by -0.0007 +- 0.0002 (of
        0.125), and on 2000 samples the combined ``Q_hat_11`` sat 1.7 of its standard
        errors above the square one; quantities built from ``J`` elsewhere -- the grand
        staircase's slope, GAMP's ``A`` -- keep that bias); ``'combined'`` (default
        otherwise when Bayes-optimal) averages it with its Nishimori twin ``-sum_m J_mm``
        (same mean, Eq. (12) of arXiv:2502.00901) with the per-entry weights of minimal
        variance, measured on the frozen samples at each ``Q`` (so the map depends on ``Q``
        alone, not on the order of calls) -- about 3x lower variance for the attention
        channel (the ``g g^T`` samples are heavy-tailed, ``-J`` is bounded above);
        ``'cross'`` (default for a channel integrated by a randomized rule under output
        noise, :class:`~symtheory.glm.integrate.laplace_qmc.LaplaceQMCRule`) averages
        ``sym(sum_m g_A g_B^T)`` of the posterior means pooled over the rule's even and
        over its odd scramblings (independent given its proposal, built on a further
        scrambling; one run,
        :func:`~symtheory.glm.integrate.laplace_qmc.independent_half_means`): the rule's
        random errors enter linearly and average out over the samples, where in ``g g^T``
        (and in ``-J``, through ``E[x] E[x]^T``) they add their variance ``E[dg dg^T]`` --
        so a sample needs 128 points, not 1024
        (:data:`~symtheory.glm.factors.gaussian_noise.NOISE_SE_RULE`, used when no
        ``rule`` is given; its ``-J`` keeps the ratio bias of second moments and is not
        used).  A reduced deep link integrated by a Laplace-RQMC rule takes ``'cross'`` on
        request (its default is ``'square'``): with a cheap rule (128 points, tol 0.25) it
        costs 1.6-6 ms per sample at depth 3 against 24-58 ms for the default rule, agrees
        with the default rule under ``'combined'`` within 1.4 standard errors (measured at
        Q = 0.05 I, diag(0.3, 0.3, 0.97), diag(0.02, 0.5, 0.99)), but without the
        Nishimori twin its variance on a nearly known layer is 4-6x larger.  A rule that
        escalates many samples is a poor partner: keeping a sample because its scramblings
        agree correlates the two halves.  ``'multilevel'`` (or a
        :class:`~symtheory.glm.se.randomized_multilevel.MultilevelEstimator`; a reduced deep link only):
        ``'square'`` with a cheap rule on every draw corrected by a fine rule on a prefix
        of them, the mean of the fine rule at a fraction of its cost (Giles' share, measured
        at the first full evaluation and stated in :attr:`observation_note`).
    check_channel : bool, optional
        ``False`` skips the channel's declaration check (see :meth:`MultiIndexModel.channel
        <symtheory.glm.factors.multi_index.MultiIndexModel.channel>`); the default runs it.
    pinned_rows : tuple of int, optional
        Rows whose overlap is held at exactly 0 (rows and columns of ``Q`` and ``Q_hat``):
        the invariant subspace of rows not learned yet, for a model even in each of their
        row groups (Eqs. (17)-(18) of arXiv:2502.00901) -- the fixed point ``Q*`` of
        Eq. (18) supported on the other rows, where the grand staircase tests stability.
    difference_step : float, optional
        Step of the map's difference Jacobians (Newton, stability, standard errors);
        default 1e-6, or :data:`RANDOMIZED_RULE_DIFFERENCE_STEP` for a Laplace-RQMC rule,
        whose map is smooth only to its adaptive decisions.  Within ``difference_step /
        boundary_fraction`` of ``Q = rho`` the step is ``boundary_fraction`` (1e-3, or 1/8
        for a randomized rule) of the distance to it
        (:func:`~symtheory.core.solvers.difference_jacobian`).
    sampling : {"rqmc", "monte-carlo"}, optional
        The design of the frozen samples (module docstring).
    scrambles : int, optional
        Independent randomizations of the RQMC design (>= 4, default
        :data:`DEFAULT_SCRAMBLES`).
    observation : {"auto", "integrate", "sample"}, optional
        ``'auto'`` (default) integrates ``y`` given ``omega`` by the exact sum over a
        discrete output's values, or on the level sets of a noiseless two-index link,
        and samples only ``omega``
        (:mod:`symtheory.glm.se.observation`), else samples ``y`` and says why
        (:attr:`observation_note`); ``'integrate'`` also takes the y-grid of one noisy
        output (opt-in: measured slower than sampling so far) and refuses a model that
        allows neither; ``'sample'`` always samples ``y`` (per-sample ``g_out``, as
        :meth:`gout_at` needs).
    multilevel : bool, optional
        ``True`` (default): :meth:`solve`'s final stage on a reduced link's tensor rule is
        the two-level Monte Carlo of :mod:`symtheory.glm.se.multilevel` where Giles'
        allocation puts at most a quarter of the samples on the requested rule; ``False``:
        that rule on all samples (the plain map, e.g. as a benchmark's reference).

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from symtheory.glm import MultiIndexModel, StateEvolution
    >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
    >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
    ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
    >>> res = se.solve()                 # Q = Q_hat/(1 + Q_hat), Q_hat = alpha/(Delta + 1 - Q)
    >>> round(float(res.Q[0, 0]), 8), res.converged
    (0.5, True)
    """

    def __init__(self, model, alpha, *, samples=DEFAULT_SAMPLES, seed=0, noise_variance=None, rule=None,
                 side_information=0.0, structure="auto", prior=None, regularization=0.0,
                 estimator="auto", check_channel=True, pinned_rows=(), difference_step=None,
                 sampling="rqmc", scrambles=DEFAULT_SCRAMBLES, observation="auto",
                 multilevel=True):
        if not (np.isfinite(alpha) and alpha > 0):
            raise ParameterError(f"alpha must be finite and > 0, got {alpha}")
        if int(samples) < 2:
            raise ParameterError(f"samples must be >= 2, got {samples}")
        if not (np.isfinite(side_information) and side_information >= 0):
            raise ParameterError(
                f"side_information must be finite and >= 0, got {side_information}")
        if sampling not in ("rqmc", "monte-carlo"):
            raise ParameterError(f"sampling must be 'rqmc' or 'monte-carlo', got {sampling!r}")
        if isinstance(scrambles, bool) or not isinstance(scrambles, (int, np.integer)) or \
                scrambles < 4:
            raise ParameterError(f"scrambles must be an integer >= 4, got {scrambles!r}")
        if sampling == "rqmc" and (isinstance(seed, bool) or
                                   not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ParameterError(f"seed must be an integer >= 0 with sampling='rqmc', got {seed!r}")
        if structure not in ("auto", "block", "full"):
            raise ParameterError(f"structure must be 'auto', 'block' or 'full', got {structure!r}")
        self.model = model
        self.alpha = float(alpha)
        self.samples = int(samples)
        self.seed = seed
        self.lam = float(side_information)
        from ..integrate.reduced_posterior import PeakTensorRule

        if isinstance(rule, PeakTensorRule) and (noise_variance is not None or
                                                 model.reduction is None):
            raise ParameterError("a PeakTensorRule integrates the free rows of a noiseless "
                                 "reduced link; this channel is not one")
        # the channel itself keeps the peak rule's tensor rule (its own integrals); the SE
        # integrates in feature coordinates with the peak rule
        self.channel = model.channel(
            noise_variance, rule.tensor if isinstance(rule, PeakTensorRule) else rule,
            check=check_channel)
        self.noise_variance = noise_variance
        self.prior = prior or GaussianPrior()
        self._draw_samples(sampling, scrambles, seed)
        self._set_structure(structure, pinned_rows)
        self.rho = self.prior.rho(model.P)
        if not (np.isfinite(regularization) and regularization >= 0):
            raise ValueError(f"regularization must be finite and >= 0, got {regularization}")
        self.regularization = float(regularization)
        self.evaluations = 0
        self.psd_projections = 0
        self.channel_error = None     # largest estimated error of the last posterior pass
        self.estimate_channel_error = True   # off while solve() iterates (cost of the check)
        #: two-level Monte Carlo of the map (glm.se.multilevel), set by solve() for its
        #: final stage (a reduced link's tensor rule) and kept for the fixed point's
        #: Q_hat / Psi_out; None: one rule on all samples
        self.multilevel = None
        if not isinstance(multilevel, bool):
            raise ParameterError(f"multilevel must be True or False, got {multilevel!r}")
        self.allow_multilevel = multilevel
        self._set_rules(rule, estimator, difference_step)
        self._set_observation(observation)
        if self.estimator_options is not None and self.estimator_options.note:
            self.observation_note += "; " + self.estimator_options.note

    def _draw_samples(self, sampling, scrambles, seed):
        """The frozen draws ``xi``, ``eta`` (and output noise) of the expectation."""
        P, M = self.model.P, self.model.M
        n_out = self.model.link.rows * self.model.link.cols
        noisy = self.noise_variance is not None
        self.sampling = sampling
        self.scrambles = int(scrambles) if sampling == "rqmc" else None
        dim = 2 * P * M + (n_out if noisy else 0)
        if sampling == "rqmc":
            from ...core.quadrature import SOBOL_MAX_DIM, scrambled_sobol_normals

            if dim > SOBOL_MAX_DIM:
                raise ParameterError(f"sampling='rqmc' needs 2 P M (+ outputs) = {dim} <= "
                                     f"{SOBOL_MAX_DIM} Sobol coordinates; use "
                                     "sampling='monte-carlo'")
            B = self.scrambles
            # (seed, 1): randomizations apart from a LaplaceQMCRule's at the same seed
            pts = scrambled_sobol_normals(dim, -(-self.samples // B), B,
                                          np.random.SeedSequence([int(seed), 1]))
            # interleaved: every prefix (a warm-up stage) holds all the scramblings
            x = pts.transpose(1, 0, 2).reshape(-1, dim)[:self.samples]
            self.xi = x[:, :P * M].reshape(self.samples, P, M)
            self.eta = x[:, P * M:2 * P * M].reshape(self.samples, P, M)
            self.noise = np.ascontiguousarray(x[:, 2 * P * M:]) if noisy else None
        else:
            # the draws of earlier versions, in their order (results reproduce)
            rng = np.random.default_rng(seed)
            self.xi = rng.standard_normal((self.samples, P, M))
            self.eta = rng.standard_normal((self.samples, P, M))
            self.noise = rng.standard_normal((self.samples, n_out)) if noisy else None

    def _set_structure(self, structure, pinned_rows):
        """The mask of the free entries of ``Q``: block-diagonal over row groups for an
        even model, rows pinned at 0 removed."""
        model, P = self.model, self.model.P
        if structure == "auto":
            structure = "block" if model.is_even else "full"
        self.structure = structure
        self.mask = np.ones((P, P))
        if structure == "block":
            self.mask = np.zeros((P, P))
            for g in model.row_groups:
                self.mask[np.ix_(g, g)] = 1.0
        pinned = tuple(sorted(set(int(a) for a in pinned_rows)))
        if any(not 0 <= a < P for a in pinned):
            raise ValueError(f"pinned_rows must be row indices in [0, {P - 1}], got {pinned_rows}")
        for g in model.row_groups:
            if set(g) & set(pinned) and not (set(g) <= set(pinned) and model.even_groups[g]):
                raise ValueError(
                    f"pinned_rows must be whole row groups in which the model is even (Q = 0 "
                    f"is then invariant there by the link's symmetry); group {g} is "
                    + ("not even" if not model.even_groups[g] else "split"))
        self.pinned_rows = pinned
        self.mask[list(pinned), :] = 0.0
        self.mask[:, list(pinned)] = 0.0

    def _set_rules(self, rule, estimator, difference_step):
        """The integration of a reduced link in feature coordinates, the estimator and the
        difference step of the map's Jacobians, all following the channel's rule."""
        from ..integrate.laplace_qmc import LaplaceQMCRule
        from ..integrate.reduced_posterior import PeakTensorRule

        self.features = None
        if self.noise_variance is None and self.model.reduction is not None:
            from ..integrate.reduced_posterior import ReducedPosterior

            self.features = ReducedPosterior(self.model)
            # a channel integrated by the Laplace-RQMC rule (deep links, where a tensor
            # rule over the free rows is out of reach) keeps its rule in these coordinates
            own = getattr(self.channel, "rule", None)
            self.feature_rule = (own if isinstance(own, LaplaceQMCRule) else
                                 rule if isinstance(rule, (TensorRule, PeakTensorRule))
                                 else TensorRule())
        randomized = isinstance(getattr(self, "feature_rule", None), LaplaceQMCRule) or \
            isinstance(getattr(self.channel, "rule", None), LaplaceQMCRule)
        self._resolve_estimator(estimator, rule, self.noise_variance)
        if difference_step is None:
            difference_step = RANDOMIZED_RULE_DIFFERENCE_STEP if randomized else 1e-6
        if not (np.isfinite(difference_step) and 0 < difference_step < 0.1):
            raise ValueError(f"difference_step must be in (0, 0.1), got {difference_step}")
        self.difference_step = float(difference_step)
        # next to Q = rho the map is a function of log(rho - Q): difference on a small
        # share of the distance to the boundary (a thousandth for a smooth map; a
        # randomized rule's map is smooth only to its noise, so a coarser share)
        self.boundary_fraction = 0.125 if randomized else 1e-3
        #: residual tolerance of solve() when none is given
        self.default_tol = RANDOMIZED_RULE_TOL if randomized else 1e-8

    def _set_observation(self, observation):
        """:attr:`observation_rule` (``None``: ``y`` sampled, :attr:`observation_note` says
        why) and the row symmetries whose images every sample is averaged over
        (:mod:`symtheory.glm.se.observation`)."""
        from ..integrate.link_structure import NotApplicable
        from .observation import ObservationRule, check_observation, row_symmetries

        check_observation(observation)
        self.observation_rule, self.observation_note, self.symmetries = None, "", []
        self.observation_qhat_error = None
        if observation == "sample":
            self.observation_note = "y sampled (observation='sample')"
            return
        reason = None
        if self.features is not None:
            reason = ("a reduced noiseless link: its observation has M r feature coordinates, "
                      "a grid per sample costs nodes^(M r) posterior integrals")
        elif self.estimator == "cross":
            reason = "the channel's rule is randomized (Laplace-RQMC)"
        else:
            try:
                self.observation_rule = ObservationRule(self.model, self.channel,
                                                        self.noise_variance)
            except NotApplicable as exc:
                reason = str(exc)
            if self.observation_rule is not None and observation == "auto" and \
                    self.observation_rule.kind == "scalar noise":
                # measured (numerics/bench/generic_se.py, y = |z| + sqrt(0.2) xi, alpha 1.5):
                # the y-grid's adaptive channel rule at every node made the solve 23x slower
                # than plain RQMC at 16x fewer samples, and its fixed point sat 8 of its stated
                # standard errors from the Gauss-Hermite value: opt-in until that is resolved
                self.observation_rule = None
                reason = ("one noisy output: the y-grid is opt-in (observation='integrate'); "
                          "not yet faster than sampling")
                if self.model.P * self.model.M == 1:
                    # the whole map is a 2-D integral there: deterministic, no samples
                    reason += ("; P = M = 1: the deterministic 2-D solve is "
                               "symtheory.glm.se.scalar_noisy.ScalarNoisySE")
        if reason is not None:
            if observation == "integrate":
                raise ParameterError(f"observation='integrate' is not available here: {reason}")
            self.observation_note = f"y sampled: {reason}"
            return
        values = getattr(getattr(self.channel, "discrete", None), "values", None)
        for S, _ in row_symmetries(self.model, self.noise_variance, values,
                                   self.observation_rule.symmetric())[1:]:
            # a symmetry that moves a pinned row onto a free one would break the mask
            if np.array_equal(np.abs(S) @ self.mask @ np.abs(S).T, self.mask):
                self.symmetries.append(S)
        self.observation_note = (f"y integrated given omega: {self.observation_rule.describe()}"
                                 + (f"; every sample averaged with its images under "
                                    f"{len(self.symmetries)} row permutation(s) of the link"
                                    if self.symmetries else ""))

    def _observation_channel(self):
        """The channel at the observation rule's nodes: an adaptive rule's tolerance relaxed
        to :data:`~symtheory.glm.se.observation.NODE_RTOL` (its error enters ``Q_hat``
        linearly through weights summing to 1, far below the sampling error; the default
        1e-10 costs ~3x more per node), anything else as configured."""
        from ...core.quadrature import AdaptiveRule
        from .observation import NODE_MIN_LEVEL, NODE_RTOL

        rule = getattr(self.channel, "rule", None)
        if not isinstance(rule, AdaptiveRule) or rule.rtol <= NODE_RTOL:
            return self.channel
        key = (id(self.channel), rule)
        if getattr(self, "_node_channel", (None,))[0] != key:
            relaxed = dataclasses.replace(rule, rtol=NODE_RTOL,
                                          min_level=min(rule.min_level, NODE_MIN_LEVEL))
            self._node_channel = (key, self.channel.configured(self.noise_variance, relaxed))
        return self._node_channel[1]

    def _integrated_products(self, Q):
        """Per sample of ``xi``: ``(E[sum_m g g^T | omega], E[-sum_m dg_mm | omega],
        E[log Z_out | omega], mass)`` by the observation rule, averaged over the sample's
        images under :attr:`symmetries`; also sets :attr:`observation_qhat_error` (the
        change of ``Q_hat`` under the rule's coarse sub-grid, in standard errors)."""
        Q = self._check_Q(Q)
        key = (Q.tobytes(), self.samples, self.channel)
        last = getattr(self, "_last_integrated", None)
        if last is not None and last[0] == key:
            return last[1]
        P, M, n = self.model.P, self.model.M, self.samples
        V = self.rho - Q + self.regularization * np.eye(P)
        sq = psd_sqrt(Q)
        rule = self.observation_rule
        images = [np.eye(P)] + self.symmetries
        fine = np.zeros((4, n, P, P))
        coarse = np.zeros((2, n, P, P))
        errors = []
        for S in images:
            omega = np.einsum("ab,sbm->sam", sq @ S, self.xi)
            if rule.kind == "level set":
                # the rule sums over its own nodes (two levels, Numba)
                f, c = rule.level_set_products(omega, V)
                for i in range(2):
                    fine[i] += f[i]
                    coarse[i] += c[i]
                fine[2] += f[2][:, None, None]
                fine[3] += f[3][:, None, None]
                continue
            Y, logw, sub = rule.nodes(omega, V)
            K = Y.shape[1]
            mom = self._observation_channel().moments(Y.reshape(n * K, -1),
                                                      np.repeat(omega, K, axis=0), V)
            if self._observation_channel().last_error is not None:
                errors.append(self._observation_channel().last_error)
            g, dg = mom.output_functions()
            logZ = mom.log_partition.reshape(n, K)
            with np.errstate(under="ignore"):
                W = np.exp(logw + logZ)
            ok = (W > 0).reshape(-1)
            g = np.where(ok[:, None, None], g, 0.0)
            dg = np.where(ok[:, None, None, None, None], dg, 0.0)
            sqk = np.einsum("sam,sbm->sab", g, g).reshape(n, K, P, P)
            twk = -np.einsum("sambm->sab", dg).reshape(n, K, P, P)
            twk = 0.5 * (twk + np.swapaxes(twk, 2, 3))
            bad = ~np.all(np.isfinite(sqk.reshape(n, -1)) & np.isfinite(twk.reshape(n, -1)), axis=1)
            if bad.any():
                raise FloatingPointError(
                    f"g_out is not finite at {bad.sum()} of {n} samples' observation nodes at "
                    f"Q = {Q.tolist()} (channel quadrature failed)")
            fine[0] += np.einsum("sk,skab->sab", W, sqk)
            fine[1] += np.einsum("sk,skab->sab", W, twk)
            fine[2] += np.einsum("sk,sk->s", W, np.where(W > 0, logZ, 0.0))[:, None, None]
            fine[3] += W.sum(axis=1)[:, None, None]
            if sub is not None:
                Wc = np.where(sub[None], 2.0 * W, 0.0)
                coarse[0] += np.einsum("sk,skab->sab", Wc, sqk)
                coarse[1] += np.einsum("sk,skab->sab", Wc, twk)
        fine /= len(images)
        coarse /= len(images)
        self.channel_error = max(errors) if errors else None
        out = (fine[0], fine[1], fine[2][:, 0, 0], fine[3][:, 0, 0])
        #: largest |sum_k w_k Z_out(y_k) - 1| over the samples: the rule's mass defect
        self.observation_mass_error = float(np.max(np.abs(out[3] - 1.0)))
        if rule.kind == "discrete":
            self.observation_qhat_error = 0.0
        else:
            # the same combination of the coarse sub-grid's products (its own weights)
            Qc = self._qhat_from_products(coarse[0] / 1.0, coarse[1], 1.0)[0]
            Qf, se = self._qhat_from_products(out[0], out[1], 1.0)[:2]
            free = self.mask > 0
            floor = max(1e-12 * float(np.max(np.abs(Qf))), 1e-300)
            self.observation_qhat_error = float(np.max(np.abs(Qf - Qc)[free] /
                                                       np.maximum(se[free], floor)))
        self._last_integrated = (key, out)
        return out

    def _randomized_channel_rule(self):
        """The channel's Laplace-RQMC rule when it integrates the observations directly (a
        noisy link), else None."""
        from ..integrate.laplace_qmc import LaplaceQMCRule

        own = getattr(self.channel, "rule", None)
        return own if self.features is None and isinstance(own, LaplaceQMCRule) else None

    def _resolve_estimator(self, estimator, rule, noise_variance):
        """Set :attr:`estimator`; for ``'cross'`` also the rule's point sets (one per SE
        scrambling, where a rule has one: a single set's errors are correlated across
        samples and their cross products do not average out) and, under noise without a
        given rule, :data:`~symtheory.glm.factors.gaussian_noise.NOISE_SE_RULE`."""
        from ..integrate.laplace_qmc import LaplaceQMCRule

        noisy_rqmc = self._randomized_channel_rule() is not None
        reduced_rqmc = isinstance(getattr(self, "feature_rule", None), LaplaceQMCRule)
        self.estimator_options = None
        if isinstance(estimator, str) and estimator == "multilevel" or \
                not isinstance(estimator, str):
            estimator = self._resolve_multilevel(estimator, rule, reduced_rqmc)
        if estimator == "auto":
            # a reduced link's Laplace-RQMC rule biases the twin -J (class docstring)
            estimator = ("cross" if noisy_rqmc else
                         "square" if self.regularization > 0 or reduced_rqmc else "combined")
        if estimator not in ("square", "combined", "cross", "multilevel"):
            raise ParameterError(f"estimator must be 'auto', 'square', 'combined', 'cross', "
                                 f"'multilevel' or a MultilevelEstimator, got {estimator!r}")
        if estimator == "combined" and self.regularization > 0:
            raise ParameterError("the combined estimator relies on the Nishimori identity, which "
                                 "the regularized (mismatched) channel breaks; use "
                                 "estimator='square'")
        if estimator == "cross":
            if not (noisy_rqmc or reduced_rqmc):
                raise ParameterError("estimator='cross' needs a channel integrated by a "
                                     "randomized rule (a LaplaceQMCRule), whose two halves of "
                                     "scramblings it crosses")
            if reduced_rqmc and self.feature_rule.point_sets == 1:
                # opt-in for deep links (not yet the default): the same design
                self.feature_rule = dataclasses.replace(
                    self.feature_rule, point_sets=self.scrambles or DEFAULT_SCRAMBLES)
            sets = self.scrambles or DEFAULT_SCRAMBLES
            if noisy_rqmc and rule is None:
                from ..factors.gaussian_noise import NOISE_SE_RULE

                # the channel's default is set for g g^T of one run; crossed, 128 points do
                self.channel = self.channel.configured(
                    noise_variance, dataclasses.replace(NOISE_SE_RULE, point_sets=sets))
            elif noisy_rqmc and self.channel.rule.point_sets == 1:
                self.channel = self.channel.configured(
                    noise_variance, dataclasses.replace(self.channel.rule, point_sets=sets))
        self.estimator = estimator
        # the groups of the standard error: samples sharing a point set share its errors
        active = self._randomized_channel_rule() or (
            self.feature_rule if reduced_rqmc else None)
        point_sets = int(active.point_sets) if active is not None else 1
        if self.scrambles is not None and point_sets > 1 and point_sets % self.scrambles:
            raise ParameterError(
                f"the rule's point_sets ({point_sets}) must be a multiple of scrambles "
                f"({self.scrambles}): a scrambling of the samples must own its point sets, "
                "or its mean shares errors with another's and the standard error is too small")
        #: groups whose means give the standard error: the scramblings (RQMC), the point
        #: sets of the channel rule (plain Monte Carlo with point sets), or None (samples)
        self.error_groups = self.scrambles or (point_sets if point_sets > 1 else None)

    def _resolve_multilevel(self, estimator, rule, reduced_rqmc):
        """The two-level estimator (:mod:`symtheory.glm.se.randomized_multilevel`) of a reduced link
        under a Laplace-RQMC rule: its coarse rule becomes the feature rule."""
        from .randomized_multilevel import MultilevelEstimator

        if isinstance(estimator, str):
            estimator = MultilevelEstimator()
        if not isinstance(estimator, MultilevelEstimator):
            raise ParameterError(f"estimator must be 'auto', 'square', 'combined', 'cross', "
                                 f"'multilevel' or a MultilevelEstimator, got {estimator!r}")
        if not reduced_rqmc or self.noise_variance is not None:
            raise ParameterError("the multilevel estimator needs a noiseless reduced link "
                                 "integrated by a Laplace-RQMC rule (a deep link)")
        if rule is not None:
            raise ParameterError("with the multilevel estimator pass the rules as "
                                 "MultilevelEstimator(coarse=..., fine=...), not rule=")
        self.estimator_options = estimator.with_point_sets(self.scrambles or DEFAULT_SCRAMBLES)
        if estimator.fraction is not None:
            self.estimator_options.note = self.estimator_options.describe("share given")
        self.feature_rule = self.estimator_options.coarse
        self._full_samples = self.samples
        return "multilevel"

    # ------------------------------------------------------------------ map
    def _check_Q(self, Q):
        Q = np.asarray(Q, dtype=float)
        P = self.model.P
        if Q.shape != (P, P):
            raise ValueError(f"Q must be {P} x {P}, got {Q.shape}")
        Q = 0.5 * (Q + Q.T) * self.mask
        lam_V = np.linalg.eigvalsh(self.rho - Q)
        lam_Q = np.linalg.eigvalsh(Q)
        if lam_Q[0] < -1e-12 or lam_V[0] <= 0:
            raise ValueError(f"Q must satisfy 0 <= Q < rho (eigenvalues of Q in "
                             f"[{lam_Q[0]:.3g}, {lam_Q[-1]:.3g}], of rho - Q from {lam_V[0]:.3g})")
        return Q

    def sample_channel(self, Q):
        """Return ``(y, omega, V, Z)`` of the frozen samples at overlap ``Q``.

        ``omega = Q^(1/2) xi``, ``Z = omega + (rho - Q)^(1/2) eta``, ``y = g(Z)`` (+ noise).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of numpy.ndarray
            ``y (n, outputs)``, ``omega (n, P, M)``, ``V (P, P)``, ``Z (n, P, M)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> y, omega, V, Z = se.sample_channel(np.array([[0.3]]))
        >>> y.shape, omega.shape, V
        ((256, 1), (256, 1, 1), array([[0.7]]))
        """
        Q = self._check_Q(Q)
        V = self.rho - Q + self.regularization * np.eye(self.model.P)
        sq, sv = psd_sqrt(Q), psd_sqrt(V)
        omega = np.einsum("ab,sbm->sam", sq, self.xi)
        Z = omega + np.einsum("ab,sbm->sam", sv, self.eta)
        y = self.model.g(Z).reshape(self.samples, -1)
        if self.noise is not None:
            y = y + np.sqrt(self.noise_variance) * self.noise
        return y, omega, V, Z

    def posterior_moments(self, Q, *, include_jacobian=True):
        """Return the posterior moments of the frozen samples at ``Q`` (with their ``omega`` and ``V``).

        A reduced link is integrated in feature coordinates (module docstring) with its tensor
        rule; the largest change against the rule with :data:`CHANNEL_ERROR_REFINEMENT` times
        the nodes per axis is kept in ``channel_error`` (the a-posteriori estimate of the
        error of the rule used, in the units of
        :class:`~symtheory.glm.integrate.moments.ChannelAccuracy`).  The last result is kept
        for the same ``Q`` and options (the free entropy's ``Psi_out`` at the fixed point just
        solved: a full pass over the samples); it is returned with the accuracy records it
        set.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        include_jacobian : bool, optional
            ``False`` drops the observation-only Jacobian factor.

        Returns
        -------
        Moments
            :class:`~symtheory.glm.integrate.moments.Moments` (``log_partition``,
            ``mean_shift``, ``cov_shift``, ``omega``, ``V``).

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> m = se.posterior_moments(np.array([[0.3]]))
        >>> m.mean_shift.shape, se.channel_error
        ((256, 1, 1), 0.0)
        """
        # the channel object itself (compared by identity): a stage swaps it
        key = (self._check_Q(Q).tobytes(), self.samples, getattr(self, "feature_rule", None),
               self.channel, include_jacobian, self.estimate_channel_error)
        # two entries: the two-level map alternates between its levels at one Q
        cache = self.__dict__.setdefault("_moments_cache", {})
        if key in cache:
            self.channel_error, self._scrambling_sums = cache[key][1:]
            return cache[key][0]
        out = self._posterior_moments(Q, include_jacobian)
        if len(cache) >= 2:
            del cache[next(iter(cache))]
        cache[key] = (out, self.channel_error, getattr(self, "_scrambling_sums", None))
        return out

    def _posterior_moments(self, Q, include_jacobian):
        if self.features is None:
            y, omega, V, _ = self.sample_channel(Q)
            if include_jacobian or not hasattr(self.channel, "branches"):
                moments = self.channel.moments(y, omega, V)
            else:
                moments = self.channel.moments(y, omega, V, include_jacobian=False)
            self.channel_error = self.channel.last_error
            self._scrambling_sums = getattr(self.channel, "last_scrambling_sums", None)
            return moments
        from ...core._moments_nb import moment_change_batch

        _, omega, V, Z = self.sample_channel(Q)
        rp = self.features
        Ebr, lw, valid, _ = rp.branches(rp.E_of_Z(Z))
        if not include_jacobian:
            lw = np.zeros_like(lw)
        from ..integrate.laplace_qmc import LaplaceQMCRule

        if isinstance(self.feature_rule, LaplaceQMCRule):
            # Laplace-RQMC: the rule states its own per-sample error (95% half-width over
            # its scramblings); that random error is part of the per-sample spread, hence
            # of the sampling standard error of Q_hat
            ch = self.channel.configured(rule=self.feature_rule)
            t0 = time.perf_counter()
            moments = ch.branch_moments(Ebr, lw, valid, omega, V)
            # the multilevel estimator's cost model (Giles' share)
            self._coarse_seconds_per_draw = (time.perf_counter() - t0) / len(Z)
            self._scrambling_sums = ch.last_scrambling_sums
            self.channel_error = (ch.last_accuracy.max_error if self.estimate_channel_error
                                  else None)
            return moments
        starts = self._peak_starts(Z) if not isinstance(self.feature_rule, TensorRule) else None
        # the error pass at a fixed point just iterated on reuses that pass's moments
        fine_key = (self._check_Q(Q).tobytes(), self.samples, self.feature_rule,
                    include_jacobian)
        cached = getattr(self, "_last_fine_posterior", None)
        if cached is not None and cached[0] == fine_key:
            fine = cached[1]
        else:
            fine = rp.posterior(Ebr, lw, valid, omega, V, self.feature_rule, starts=starts)
            self._last_fine_posterior = (fine_key, fine)
        if not self.estimate_channel_error:
            self.channel_error = None
            return Moments.from_posterior(fine[0], fine[1], fine[2], omega, V)
        # against a finer rule, not a coarser one: the change to half the nodes measures
        # the coarse rule's error, e.g. 8.4 with two nearly known rows (Q ~ rho) where GH 30 agrees with
        # a 1601^2 trapezoid to 5e-10 (measured).  On a prefix of the samples (every
        # scrambling; see CHANNEL_ERROR_SAMPLES)
        k = min(len(Z), CHANNEL_ERROR_SAMPLES)
        finer = rp.posterior(Ebr[:k], lw[:k], valid[:k], omega[:k], V,
                             self.feature_rule.refined(CHANNEL_ERROR_REFINEMENT),
                             starts=None if starts is None else starts[:k])
        self._refined_moments = (self._refined_key(Q),
                                 Moments.from_posterior(finer[0], finer[1], finer[2], omega[:k], V))
        sd = np.sqrt(np.repeat(np.diag(V), self.model.M))
        err = moment_change_batch(finer[0], finer[1].reshape(k, -1), finer[2], fine[0][:k],
                                  fine[1][:k].reshape(k, -1), fine[2][:k], sd)
        self.channel_error = float(np.max(err)) if err.size else 0.0
        return Moments.from_posterior(fine[0], fine[1], fine[2], omega, V)

    def _peak_starts(self, Z):
        """Starts of the peak search of a :class:`~symtheory.glm.integrate.reduced_posterior.PeakTensorRule`
        (``(n, k, p_free M)``): each sample's true free rows and their images under the sign
        flips of the even groups of free rows and their products
        (:func:`~symtheory.glm.integrate.laplace_qmc.flip_patterns`: symmetries of the
        link).  Starts only steer the proposal; the estimate is exact for any mixture."""
        from ..integrate.laplace_qmc import flip_patterns

        free, M = list(self.features.free_rows), self.model.M
        u = Z[:, free, :].reshape(len(Z), -1)          # entry a_free M + m: Z[free[a], m]
        flips = flip_patterns(self.model, [a * M + m for a in free for m in range(M)])
        return np.ascontiguousarray(np.concatenate([u[:, None, :], u[:, None, :] * flips[None]],
                                                   axis=1))

    def gout_at(self, Q):
        """Return ``(g_out, dg_out)`` of the frozen samples at ``Q`` (Eq. (12) of arXiv:2502.00901).

        The last result is kept (a fixed point is evaluated again by its callers: the
        standard error, the staircase's instability).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of numpy.ndarray
            ``g_out (n, P, M)`` and ``dg_out``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> g, dg = se.gout_at(np.array([[0.3]]))
        >>> g.shape, float(dg[0].ravel()[0]) == -1 / 1.2         # -1/(V + Delta)
        ((256, 1, 1), True)
        """
        return self._gout_all(Q)[:2]

    def gout_halves(self, Q):
        """Return ``(g_A, g_B)``: ``g_out`` of the posterior means pooled over the two halves of the scramblings.

        The even and the odd scramblings of the channel's Laplace-RQMC rule (``'cross'``
        estimator), independent given the rule's proposal
        (:func:`~symtheory.glm.integrate.laplace_qmc.independent_half_means`).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of numpy.ndarray
            ``(g_A, g_B)``, each ``(n, P, M)``.

        Raises
        ------
        ValueError
            Without the ``'cross'`` estimator.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.gout_halves(np.array([[0.3]]))
        Traceback (most recent call last):
            ...
        ValueError: gout_halves needs the 'cross' estimator
        """
        if self.estimator != "cross":
            raise ValueError("gout_halves needs the 'cross' estimator")
        return self._gout_all(Q)[2:]

    def _gout_all(self, Q):
        if self.observation_rule is not None:
            raise ParameterError("per-sample g_out do not exist when y is integrated given omega; "
                                 "construct the StateEvolution with observation='sample'")
        Q = self._check_Q(Q)
        key = (Q.tobytes(), self.samples, getattr(self, "feature_rule", None),
               getattr(self.channel, "rule", None), self.estimate_channel_error)
        cache = self.__dict__.setdefault("_gout_cache", {})
        if key in cache:
            return cache[key]
        moments = self.posterior_moments(Q)
        out = moments.output_functions()
        omega, V = moments.omega, moments.V
        if self.estimator == "cross":
            from ..integrate.laplace_qmc import independent_half_means

            Vinv = np.linalg.inv(V)
            out = out + tuple(np.einsum("ab,sbm->sam", Vinv, m.reshape(omega.shape) - omega)
                              for m in independent_half_means(self._scrambling_sums))
        if len(cache) >= 2:     # two entries: the levels of the two-level map
            del cache[next(iter(cache))]
        cache[key] = out
        return out

    def qhat(self, Q, alpha=None):
        """Return ``(Q_hat, stderr, nishimori_gap)`` at ``Q`` from the frozen samples.

        ``nishimori_gap`` = ``max_ab |E[g g^T] - E[-dg]|_ab / ||V^(-1)||_2``: the two
        estimators of ``Q_hat/alpha`` (equal at Bayes-optimality, Eq. (12) of
        arXiv:2502.00901) compared in units of ``V^(-1) = (rho - Q)^(-1)``, the scale that
        bounds both means (each lies between 0 and ``V^(-1)``), so it means the same at every
        ``alpha`` -- also where ``Q_hat -> 0`` (small ``alpha``), where a relative difference
        divides by ~0.  Consistent with 0 within its sampling error (about ``max stderr /
        (alpha ||V^(-1)||)``) -- except under a randomized rule (the ``'cross'`` estimator,
        and a reduced deep link's Laplace-RQMC rule under ``'square'``), where ``E(-dg)``
        keeps the rule's ratio bias of second moments (not used for ``Q_hat``).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        alpha : float, optional
            Sample complexity (default the SE's).

        Returns
        -------
        tuple
            ``(numpy.ndarray, numpy.ndarray, float)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> Qhat, stderr, gap = se.qhat(np.array([[0.3]]))       # alpha/(Delta + 1 - Q) = 1/1.2
        >>> round(float(Qhat[0, 0]), 8), gap < 0.01
        (0.83333333, True)
        """
        alpha = self.alpha if alpha is None else alpha
        if self.observation_rule is not None:
            sq, tw = self._integrated_products(Q)[:2]
            Qhat, stderr, m_sq, m_tw = self._qhat_from_products(sq, tw, alpha)
        elif self.multilevel is not None:
            sq, tw = self._two_levels(Q, self._products)
            Qhat, stderr, m_sq, m_tw = self._qhat_from_products(sq, tw, alpha)
        else:
            g, dg = self.gout_at(Q)
            halves = self.gout_halves(Q) if self.estimator == "cross" else None
            Qhat, stderr, m_sq, m_tw = self._qhat_from_gout(g, dg, alpha, Q, halves)
            if self.estimator == "multilevel":
                Qhat, stderr, m_sq = self._multilevel_qhat(g, alpha, Q)
        V = self.rho - self._check_Q(Q) + self.regularization * np.eye(self.model.P)
        scale = 1.0 / float(np.linalg.eigvalsh(V)[0])
        gap = float(np.max(np.abs(m_sq - m_tw)) / scale)
        self.evaluations += 1
        return Qhat, stderr, gap

    def _products(self, Q):
        """Per-sample ``(sum_m g g^T, -sum_m dg_mm)`` (symmetrized) at ``Q`` on the current
        samples and rule."""
        g, dg = self.gout_at(Q)
        bad = ~np.all(np.isfinite(g.reshape(len(g), -1)), axis=1)
        if bad.any():
            raise FloatingPointError(f"g_out is not finite for {bad.sum()} of {len(g)} samples "
                                     f"at Q = {Q.tolist()} (channel quadrature failed; try a "
                                     "finer rule)")
        tw = -np.einsum("sambm->sab", dg)
        return np.einsum("sam,sbm->sab", g, g), 0.5 * (tw + np.swapaxes(tw, 1, 2))

    def _two_levels(self, Q, values):
        """Per-sample two-level values of ``values(Q)`` (a tuple of arrays): the coarse
        rule of :attr:`multilevel` on all samples, telescoped with the requested rule on the
        first ``fine_samples`` (:func:`~symtheory.glm.se.multilevel.telescope`)."""
        from .multilevel import telescope

        plan = self.multilevel
        with self._stage(self.samples, plan.coarse):
            coarse = values(Q)
        with self._stage(plan.fine_samples, None):
            fine = values(Q)
        return tuple(telescope(c, f) for c, f in zip(coarse, fine))

    def _multilevel_qhat(self, g, alpha, Q):
        """``(Q_hat, stderr, E sq)`` of the two-level estimator from the coarse ``g`` of
        every draw and the fine rule on a prefix (:mod:`symtheory.glm.se.randomized_multilevel`)."""
        from .randomized_multilevel import multilevel_mean_stderr, multilevel_products

        sq = np.einsum("sam,sbm->sab", g, g)
        diff = multilevel_products(self, self._check_Q(Q), sq)
        mean, stderr = multilevel_mean_stderr(sq, diff, self.error_groups or DEFAULT_SCRAMBLES)
        Qhat = alpha * 0.5 * (mean + mean.T)
        return Qhat * self.mask, alpha * stderr * self.mask, mean

    def _qhat_from_gout(self, g, dg, alpha, Q, halves=None):
        """``(Q_hat, stderr, E g g^T, E(-dg))`` of per-sample ``g_out, dg_out`` (see
        :meth:`qhat`); ``halves``: ``(g_A, g_B)`` of :meth:`gout_halves` (``'cross'``),
        then ``g g^T`` is ``sym(g_A g_B^T)``."""
        for name, v in (("g_out", g),) + tuple(zip(("g_A", "g_B"), halves or ())):
            bad = ~np.all(np.isfinite(v.reshape(len(v), -1)), axis=1)
            if bad.any():
                raise FloatingPointError(
                    f"{name} is not finite for {bad.sum()} of {len(v)} samples at Q = "
                    f"{Q.tolist()} (channel quadrature failed; try a finer rule)")
        if halves is not None:
            sq = np.einsum("sam,sbm->sab", *halves)
            sq = 0.5 * (sq + np.swapaxes(sq, 1, 2))
        else:
            sq = np.einsum("sam,sbm->sab", g, g)
        tw = -np.einsum("sambm->sab", dg)
        return self._qhat_from_products(sq, 0.5 * (tw + np.swapaxes(tw, 1, 2)), alpha)

    def _qhat_from_products(self, sq, tw, alpha):
        """``(Q_hat, stderr, E sq, E tw)`` from per-sample ``sq`` (``sum_m g g^T``) and its
        Nishimori twin ``tw`` (``-sum_m dg_mm``, symmetrized), by the estimator."""
        if self.estimator == "combined":
            w = min_variance_weights(sq, tw)
            per = w * sq + (1 - w) * tw
        else:
            per = sq
        mean, stderr = self.sample_mean_stderr(per)
        Qhat, stderr = alpha * mean, alpha * stderr
        return (0.5 * (Qhat + Qhat.T) * self.mask, stderr * self.mask, sq.mean(axis=0),
                tw.mean(axis=0))

    def sample_mean_stderr(self, values):
        """Return ``(mean, standard error)`` over axis 0 of per-sample values of the frozen samples.

        All of them, or the prefix of a warm-up stage.  RQMC: the spread of the
        per-scrambling means over sqrt(scrambles) (the per-sample spread would count the
        variance the low-discrepancy points remove); plain Monte Carlo, or a prefix too short
        to hold two points of every scrambling: the per-sample spread over sqrt(n).  Plain
        Monte Carlo with a channel rule of several point sets: batch means over the point sets
        (samples sharing a set share its errors).

        Parameters
        ----------
        values : array_like
            Per-sample values, samples on axis 0.

        Returns
        -------
        tuple of numpy.ndarray
            ``(mean, stderr)`` over axis 0.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> mean, stderr = se.sample_mean_stderr(np.ones(256))
        >>> float(mean), float(stderr)
        (1.0, 0.0)
        """
        values = np.asarray(values, dtype=float)
        n = len(values)
        mean = values.mean(axis=0)
        B = self.error_groups
        if B is None or n < 2 * B:
            return mean, values.std(axis=0, ddof=1) / np.sqrt(n)
        groups = np.arange(n) % B
        sums = np.zeros((B,) + values.shape[1:])
        np.add.at(sums, groups, values)
        counts = np.bincount(groups, minlength=B).reshape((B,) + (1,) * (values.ndim - 1))
        return mean, (sums / counts).std(axis=0, ddof=1) / np.sqrt(B)

    def tail_multiple(self, sigmas):
        """Return :func:`~symtheory.glm.se.sampling.tail_multiple` for this SE's design.

        The multiple of a standard error with the tail probability of ``sigmas`` normal
        standard deviations (the t quantile for RQMC's ``scrambles - 1`` degrees of freedom).

        Parameters
        ----------
        sigmas : float
            Normal standard deviations.

        Returns
        -------
        float
            The multiple of the stated standard error.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.tail_multiple(4.0) > 4.0              # 16 scramblings: t with 15 degrees of freedom
        True
        """
        return tail_multiple(sigmas, self.error_groups)

    def quadrature_qhat_error(self, Q):
        """Return the effect of the channel rule's refinement on ``Q_hat`` at ``Q``, in sampling standard errors.

        (:attr:`SEResult.channel_qhat_error <symtheory.glm.se.result.SEResult.channel_qhat_error>`):
        reuses the refined moments of the last error-estimating pass at ``Q``; ``None`` if
        there is none (a randomized or non-reduced rule).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        float or None
            ``max_ab |Q_hat - Q_hat_refined|_ab / stderr_ab``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.quadrature_qhat_error(np.array([[0.3]])) is None     # not a reduced link
        True
        """
        Q = self._check_Q(Q)
        if self.multilevel is not None:
            # the requested rule runs on the fine level's samples only: refined there,
            # compared with the two-level map's standard errors
            _, stderr, _ = self.qhat(Q)
            with self._stage(self.multilevel.fine_samples, None):
                return self._refinement_effect(Q, stderr)
        return self._refinement_effect(Q, None)

    def _refinement_effect(self, Q, stderr):
        ref = getattr(self, "_refined_moments", None)
        if ref is None or ref[0] != self._refined_key(Q):
            return None
        g, dg = self.gout_at(Q)
        if stderr is None:
            _, stderr, _, _ = self._qhat_from_gout(g, dg, self.alpha, Q)
        g_ref, dg_ref = ref[1].output_functions()
        k = len(g_ref)          # the refined rule ran on the first k samples
        Qhat, _, _, _ = self._qhat_from_gout(g[:k], dg[:k], self.alpha, Q)
        Qhat_ref, _, _, _ = self._qhat_from_gout(g_ref, dg_ref, self.alpha, Q)
        free = self.mask > 0
        diff = np.abs(Qhat - Qhat_ref)[free]
        if not diff.size or not np.any(diff > 0):
            return 0.0
        # an entry held at 0 (Q_ll = 0 of an even model) is rounding noise in both rules
        floor = 1e-12 * max(float(np.max(np.abs(Qhat))), float(np.max(np.abs(Qhat_ref))))
        return float(np.max(diff / np.maximum(stderr[free], max(floor, 1e-300))))

    def _refined_key(self, Q):
        """What the refined moments of an error-estimating pass belong to (as gout's key:
        a different Q, sample set or rule must not reuse them)."""
        return (self._check_Q(Q).tobytes(), self.samples, getattr(self, "feature_rule", None))

    def psi_out(self, Q, *, include_jacobian=True):
        """Return ``Psi_out(Q) = E_(xi, y) log Z_out(y; Q^(1/2) xi, rho - Q)`` on the frozen samples.

        The density of ``y`` in the model's observed coordinates (of the inversion features
        for a reduced link, see the module docstring).  ``include_jacobian=False`` drops the
        y-only output Jacobian of deterministic channels: a Q-independent shift in expectation
        but a heavy-tailed one sample by sample, so derivatives in Q are far less noisy
        without it.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        include_jacobian : bool, optional
            Include the output Jacobian of a deterministic channel.

        Returns
        -------
        tuple of float
            ``(value, stderr)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> value, stderr = se.psi_out(np.array([[0.3]]))
        >>> exact = -0.5 * (1 + np.log(2 * np.pi * 1.2))        # -E log N(y; omega, V + Delta)
        >>> bool(abs(value - exact) < 3 * stderr)
        True
        """
        if self.observation_rule is not None:
            # E_omega int dy Z_out log Z_out: the rule's weighted log partition per sample
            logZ = self._integrated_products(Q)[2]
        elif self.multilevel is not None:
            logZ, = self._two_levels(Q, lambda q: (self.posterior_moments(
                q, include_jacobian=include_jacobian).log_partition,))
        else:
            logZ = self.posterior_moments(Q, include_jacobian=include_jacobian).log_partition
        if not np.all(np.isfinite(logZ)):
            raise FloatingPointError("log Z_out is not finite on some samples")
        mean, stderr = self.sample_mean_stderr(logZ)
        return float(mean), float(stderr)

    def free_entropy(self, Q):
        """Return the replica-symmetric free entropy at ``Q`` with ``Q_hat`` from the SE map (Eqs. (10)-(11) of arXiv:2502.00901).

        ``Phi = -Tr(Q Q_hat)/2 + psi_P(Q_hat) + alpha Psi_out(Q)``.  At a fixed point it is the
        value whose maximum over fixed points selects the Bayes-optimal one.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of float
            ``(Phi, stderr)`` (stderr of the Monte-Carlo term).

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> phi, stderr = se.free_entropy(np.array([[0.5]]))
        >>> bool(stderr > 0), bool(np.isfinite(phi))
        (True, True)
        """
        Q = self._check_Q(Q)
        Qhat = self.psd_qhat(Q) + self.lam * np.eye(self.model.P)
        po, se = self.psi_out(Q)
        phi = -0.5 * float(np.sum(Q * Qhat)) + self.prior.psi(Qhat) + self.alpha * po
        return phi, self.alpha * se

    def alpha_at_fixed_point(self, Q, entry=None):
        """Return the ``alpha`` at which ``Q`` is a fixed point along ``entry`` (Eqs. (13)-(14) solved for alpha).

        ``alpha = [F_prior^(-1)(Q)]_ee / E[g g^T]_ee`` (the channel does not depend on
        alpha).  Exact for a one-parameter reduced SE (e.g. ``Q = diag(0, q2)`` below the
        layer-1 threshold).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        entry : tuple of int, optional
            The entry ``(a, b)`` (default the largest diagonal entry).

        Returns
        -------
        tuple of float
            ``(alpha, stderr)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> alpha, stderr = se.alpha_at_fixed_point(np.array([[0.5]]))
        >>> round(float(alpha), 8)
        1.0
        """
        Q = self._check_Q(Q)
        if entry is None:
            i = int(np.argmax(np.abs(np.diag(Q))))
            entry = (i, i)
        a, b = entry
        target = self.prior.inverse_overlap_map(Q)[a, b] - self.lam * (a == b)
        Qhat1, se1, _ = self.qhat(Q, alpha=1.0)
        return target / Qhat1[a, b], target * se1[a, b] / Qhat1[a, b] ** 2

    def step(self, Q):
        """Return one application of the SE map ``F(Q) = F_prior(Q_hat(Q) + lambda I)``.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        numpy.ndarray
            The new overlap (entries outside the structure mask are 0).

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.step(np.array([[0.3]])).round(8)                  # Q_hat/(1 + Q_hat), Q_hat = 1/1.2
        array([[0.45454545]])
        """
        P = self.model.P
        return self.prior.overlap_map(self.psd_qhat(Q) + self.lam * np.eye(P)) * self.mask

    def psd_qhat(self, Q):
        """Return ``Q_hat`` at ``Q``, a vanishing eigenvalue pushed below 0 by noise projected out.

        Within the 4-sigma tail (t-scaled for RQMC) of the standard error the projection is
        counted in ``psd_projections``; beyond, ``FloatingPointError``.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        numpy.ndarray
            Positive semidefinite ``Q_hat``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.psd_qhat(np.array([[0.3]])).round(8)
        array([[0.83333333]])
        """
        Qhat, se, _ = self.qhat(Q)
        lam, O = np.linalg.eigh(Qhat)
        if lam[0] < 0:
            # Q_hat is PSD in expectation; the combined estimator's sampling noise can push
            # a vanishing eigenvalue slightly below 0.  Within the 4-sigma tail (t-scaled
            # for RQMC) this is projected out (and counted); beyond, it is an error.
            k = self.tail_multiple(4.0)
            if -lam[0] > k * float(np.max(se)) + 1e-12:
                raise FloatingPointError(
                    f"Q_hat has eigenvalue {lam[0]:.3g}, beyond {k:.3g} standard errors "
                    f"({np.max(se):.3g}, the 4-sigma tail) of positive semidefiniteness")
            self.psd_projections += 1
            Qhat = (O * np.clip(lam, 0.0, None)) @ O.T
        return Qhat
