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
check) converges to machine precision on it.  Where ``y`` given ``omega`` has a rule of
its own (:mod:`symtheory.glm.se.observation`) and ``P M <= 2``, nothing is drawn by default
(``sampling='auto'`` -> ``'gauss-hermite'``): ``xi`` runs over a Gauss-Hermite tensor rule,
folded by the sign flips of an even model's rows, and the map is a deterministic
quadrature whose error is estimated against a coarser rule.  Otherwise the draws are
randomized quasi-Monte Carlo (``sampling='rqmc'``): ``scrambles`` independently scrambled Sobol sequences
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

import numpy as np

from ...core.quadrature import TensorRule
from ...core.validate import ParameterError
from ..factors.gaussian_prior import GaussianPrior
from .accuracy import SamplingAccuracy
from .free_entropy import FreeEntropyTerms
from .integrated_observation import IntegratedObservation
from .linearization import MapLinearization
from .per_sample import CHANNEL_ERROR_REFINEMENT, PerSampleMoments  # noqa: F401 (re-export)
from .sampling import (
    DEFAULT_OMEGA_NODES,
    DEFAULT_SAMPLES,
    DEFAULT_SCRAMBLES,
    TENSOR_MAX_DIM,
    check_sampling,
    fold_tensor_rule,
    gauss_hermite_tensor,
    min_variance_weights,
)
from .staged_solve import StagedSolve

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


class StateEvolution(PerSampleMoments, SamplingAccuracy, FreeEntropyTerms,
                     IntegratedObservation, StagedSolve, MapLinearization):
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
    sampling : {"rqmc", "monte-carlo", "gauss-hermite", "auto"}, optional
        The design of the frozen samples (module docstring); ``'auto'``: ``'gauss-hermite'``
        where ``y`` is integrated given ``omega`` and ``P M <= 2``, else ``'rqmc'``
        (:attr:`sampling` says which).  ``'gauss-hermite'``: nothing
        sampled -- ``xi`` on a Gauss-Hermite tensor rule of ``omega_nodes`` per axis
        (``P M <= 2``) and ``y`` integrated given ``omega`` (the observation rule, which it
        requires); the map is then deterministic and ``Q_stderr`` is the rule's error
        bound (``error_kind='estimate'``: the change against
        :func:`~symtheory.glm.se.sampling.coarse_omega_nodes` per axis plus the observation
        rule's coarse-level change, through the linearized map).
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
    omega_nodes : int, optional
        Gauss-Hermite nodes per axis of ``xi`` with ``sampling='gauss-hermite'`` (>= 6,
        default :data:`~symtheory.glm.se.sampling.DEFAULT_OMEGA_NODES`).

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
                 sampling="auto", scrambles=DEFAULT_SCRAMBLES, observation="auto",
                 multilevel=True, omega_nodes=DEFAULT_OMEGA_NODES):
        if not (np.isfinite(alpha) and alpha > 0):
            raise ParameterError(f"alpha must be finite and > 0, got {alpha}")
        if int(samples) < 2:
            raise ParameterError(f"samples must be >= 2, got {samples}")
        if not (np.isfinite(side_information) and side_information >= 0):
            raise ParameterError(
                f"side_information must be finite and >= 0, got {side_information}")
        check_sampling(sampling)
        if isinstance(omega_nodes, bool) or not isinstance(omega_nodes, (int, np.integer)) \
                or omega_nodes < 6:
            raise ParameterError(f"omega_nodes must be an integer >= 6, got {omega_nodes!r}")
        if sampling == "gauss-hermite" and model.P * model.M > TENSOR_MAX_DIM:
            raise ParameterError(
                f"sampling='gauss-hermite' covers P M <= {TENSOR_MAX_DIM} coordinates of xi "
                f"(nodes^(P M) per map evaluation), got P M = {model.P * model.M}; use 'rqmc'")
        self.omega_nodes = int(omega_nodes)
        if isinstance(scrambles, bool) or not isinstance(scrambles, (int, np.integer)) or \
                scrambles < 4:
            raise ParameterError(f"scrambles must be an integer >= 4, got {scrambles!r}")
        if sampling in ("rqmc", "auto") and (isinstance(seed, bool) or
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
        if sampling == "auto":
            sampling = self._auto_sampling(observation, estimator)
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
        if sampling == "gauss-hermite":
            self._check_tensor_design()
        if self.estimator_options is not None and self.estimator_options.note:
            self.observation_note += "; " + self.estimator_options.note

    def _auto_sampling(self, observation, estimator):
        """``sampling='auto'``: ``'gauss-hermite'`` where everything can be integrated --
        ``y`` given ``omega`` by an observation rule (:mod:`symtheory.glm.se.observation`)
        and ``xi`` on a tensor rule (``P M <= TENSOR_MAX_DIM``) -- else ``'rqmc'``."""
        from ..integrate.link_structure import NotApplicable
        from .observation import ObservationRule, check_observation

        check_observation(observation)
        model = self.model
        if (model.P * model.M > TENSOR_MAX_DIM or observation == "sample"
                or not (isinstance(estimator, str) and estimator in ("auto", "square"))
                or (self.noise_variance is None and model.reduction is not None)):
            return "rqmc"
        try:
            self._prebuilt_observation = ObservationRule(model, self.channel, self.noise_variance)
        except NotApplicable:
            return "rqmc"
        return "gauss-hermite"

    def _draw_samples(self, sampling, scrambles, seed):
        """The frozen draws ``xi``, ``eta`` (and output noise) of the expectation."""
        P, M = self.model.P, self.model.M
        n_out = self.model.link.rows * self.model.link.cols
        noisy = self.noise_variance is not None
        self.sampling = sampling
        self.scrambles = int(scrambles) if sampling == "rqmc" else None
        #: weights of the Gauss-Hermite tensor rule over xi (sum 1); None: equal weights
        self.omega_weights = None
        dim = 2 * P * M + (n_out if noisy else 0)
        if sampling == "gauss-hermite":
            self.xi, self.omega_weights = gauss_hermite_tensor(self.omega_nodes, P * M)
            self.xi, self.omega_weights = fold_tensor_rule(
                self.xi.reshape(-1, P, M), self.omega_weights, getattr(self, "tensor_folds", ()))
            self.samples = len(self.xi)
            # y is integrated given omega: no eta, no output noise is ever drawn
            self.eta = np.zeros_like(self.xi)
            self.noise = np.zeros((self.samples, n_out)) if noisy else None
        elif sampling == "rqmc":
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
        if estimator == "auto" and self.sampling == "gauss-hermite":
            # y integrated: E[g g^T | omega] = E[-dg | omega] per node up to the rule's
            # error, so the combined estimator has nothing to combine
            estimator = "square"
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
        return (0.5 * (Qhat + Qhat.T) * self.mask, stderr * self.mask, self.sample_mean(sq),
                self.sample_mean(tw))

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
