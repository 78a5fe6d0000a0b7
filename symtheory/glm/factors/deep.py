"""Posterior moments of reduced deterministic links of any depth by a rule that follows
the posterior: Laplace centring and scaling + randomized quasi-Monte Carlo.

The channel integral of Troiani et al., arXiv:2502.00901, Corollary E.1, over the free rows ``u``
(``d_u = p_free M`` dimensions, ``(L - 1) r M`` for deep attention),

    Z_out = sum_k int du f_k(u),
    f_k(u) = N(u; omega_u, V_uu) N(X_k(u); mu_{h|u}, C_{h|u}) |det T(u)|^{-r} / |det dy/dE(E^(k))|,
    T(u) X_k(u) = E^(k)(y),

grows as ``n^{d_u}`` with a tensor rule (``d_u = 4`` at depth 3: 30^4 nodes).
Here it is an importance-sampling integral ``Z = E_q[sum_k f_k / q]`` over the mixture
``q = sum_c pi_c N(m_c, S_c)`` of

* component 0, the Gaussian marginal of ``u`` (defensive: ``f/q`` stays bounded where
  the likelihood is flat);
* Laplace components at the maxima of ``log sum_k f_k`` (Newton from the best
  ``starts`` points of a short scan of component 0 that lie outside the peaks already
  found, and from the images of each mode under the sign flips of every even row group
  of ``u`` (an even link: g(-Z_group) = g(Z)): the Gaussian factors break that symmetry, so an image is a start,
  not a mode), covariance ``inflate^2 (-Hessian)^{-1}``, weight by Laplace mass;
* up to ``adapt`` rounds of adaptive importance sampling on a scrambling of its own:
  moment-matching refits of the peaks and, while the weights are uneven, a ridge
  component at the heaviest point outside the peaks (moved onto the crest by Newton steps
  in the stiff directions, curvatures floored at the prior's).  When the solved layer is
  nearly known (``C_{h|u} -> 0``) the posterior lies near a curved 2-D manifold of the
  free rows (depth 3) whose tails run far from its modes: Gaussians at the modes alone
  left them to component 0, whose rare points there carried the largest weights (8% of
  the samples at ``Q = diag(0, 0, 0.98)`` stayed above tol 3e-2 at 4096 points);

the mixture is built once per sample and kept at every level; each component is fed the
same number of points of a scrambled Sobol net
(``scipy.stats.qmc``; balance-heuristic weights ``f/q`` with the whole mixture, which
keeps the estimator unbiased whatever the components are -- the peaks only reduce its
variance).  ``R`` independent scramblings give ``R`` estimates of ``(log Z, E[z],
E[z z^T])``; their spread is the reported error: the 95% Student-t half-width of the
mean, in natural units (``log Z``; means over prior standard deviations; covariances
over their products).  Samples above the requested tolerance are recomputed with 2x or
4x the points, up to ``max_points`` (:func:`~symtheory.glm.integrate.laplace_qmc.rqmc_levels`).  Memory per
sample is ``O(R d^2)`` (running sums with a running log-scale), whatever the depth.
"""
from __future__ import annotations

import numpy as np

from ...core.codegen import Kernel
from ...core.quadrature import AdaptiveRule, TensorRule
from ...core.validate import ParameterError
from ..integrate.drivers import deep as deep_drivers
from ..integrate.laplace_qmc import LaplaceQMCRule, by_point_set, flip_patterns, rqmc_levels
from ..integrate.moments import Moments
from .multi_index import MultiIndexModel
from .reduced import ReducedChannel

__all__ = ["LaplaceQMCChannel", "LaplaceQMCModel", "LaplaceQMCRule"]

#: a refit round adds a ridge component while the effective sample size of its weights is
#: below this share of its points (weights dominated by a few points outside the peaks)
ESS_ADD = 0.3
#: the adaptation stops once the effective sample size of a round is this share of its points
ESS_DONE = 0.5
#: points of a component in proportion to its weight, but at least this share of the
#: level's points (the defensive component and small peaks keep a net of their own)
MIN_POINTS_SHARE = 1 / 16
#: widening of a moment-matched refit (its covariance times ADAPT_INFLATE^2)
ADAPT_INFLATE = 1.2
#: step of the central differences of the Newton search (the log integrand is O(1) smooth
#: on the scale of the prior: 1e-4 balances truncation and rounding)
NEWTON_STEP = 1e-4


class LaplaceQMCChannel(ReducedChannel):
    """:class:`~symtheory.glm.factors.reduced.ReducedChannel` integrated by a
    :class:`LaplaceQMCRule` (see the module docstring); a ``TensorRule`` falls back to
    the parent's tensor Gauss-Hermite path."""

    def __init__(self, model: MultiIndexModel):
        super().__init__(model)
        M = self.M
        pf = len(self.free_rows)
        u_syms = [model.indices[a, m] for a in model.free_rows for m in range(M)]
        pars = list(model.param_symbols)
        self.qmc_kernel = Kernel(
            f"dp_{model.name}_mixing", u_syms + pars, list(model.reduction.mixing),
            doc=f"mixing T(u) of {model.name} and its Laplace-RQMC posterior driver",
            packed=(pf, M))
        # sign flips of u (token-major flattening a M + m) that leave the link unchanged
        self.flips = flip_patterns(model, [a * M + m for a in model.free_rows for m in range(M)])
        self._points = {}

    def _default_rule(self):
        return LaplaceQMCRule()

    def configured(self, noise_variance=None, rule=None):
        if isinstance(rule, (TensorRule, AdaptiveRule)):
            return super().configured(noise_variance, rule)
        if rule is not None and not isinstance(rule, LaplaceQMCRule):
            raise ParameterError(f"rule must be a LaplaceQMCRule or a TensorRule, got {rule!r}")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.noise_variance = noise_variance
        new.rule = rule or self._default_rule()
        new.last_accuracy = None
        return new

    def _rqmc_points(self, n, point_set=0):
        key = (self.rule, n, point_set)
        if key not in self._points:
            self._points[key] = np.ascontiguousarray(
                self.rule.normal_points(len(self.free_rows) * self.M, n, point_set))
        return self._points[key]

    def moments(self, y, omega, V, *, include_jacobian=True):
        """``(log Z_out (n,), E[Z|y] (n, P, M), Cov (n, P M, P M))``, index ``a M + m``;
        :attr:`last_accuracy` holds the per-sample error estimate and the method."""
        if not isinstance(self.rule, LaplaceQMCRule):
            return super().moments(y, omega, V, include_jacobian=include_jacobian)
        y, omega, V = self._prep(y, omega, V)
        E, logjac, valid = self.branches(y)
        lwb = -logjac if include_jacobian else np.zeros_like(logjac)
        return self.branch_moments(E, lwb, valid, omega, V)

    def branch_moments(self, E, lwb, valid, omega, V):
        """The Laplace-RQMC posterior moments from the inversion branches of the
        observations: ``E (n, K, M r)`` the branches ``E^(k)``, ``lwb (n, K)`` their log
        weights (``-log|det|`` of the observation's Jacobian, or 0), ``valid (n, K)``;
        ``omega (n, P, M)``, ``V`` (P x P).  The entry point of callers that invert in
        their own coordinates (the SE's inversion features, ``glm.se.state_evolution``); returns and
        records as :meth:`moments`."""
        if not isinstance(self.rule, LaplaceQMCRule):
            raise ParameterError(f"branch_moments needs a LaplaceQMCRule, got {self.rule!r}")
        omega = np.ascontiguousarray(omega, dtype=float)
        V = 0.5 * (np.asarray(V, dtype=float) + np.asarray(V, dtype=float).T)
        n, P, M = omega.shape
        free, solved = list(self.model.free_rows), list(self.model.solved_rows)
        if not free:
            raise ParameterError("the Laplace-RQMC rule needs free rows; this reduction has none")
        Vuu = V[np.ix_(free, free)]
        Vhu = V[np.ix_(solved, free)]
        Vhh = V[np.ix_(solved, solved)]
        Vuu_inv = np.linalg.inv(Vuu)
        B = Vhu @ Vuu_inv
        C = Vhh - B @ Vhu.T
        C = 0.5 * (C + C.T)
        sd = np.sqrt(np.repeat(np.diag(V), M))
        rule = self.rule
        fixed = (np.ascontiguousarray(E, dtype=float), np.ascontiguousarray(lwb, dtype=float),
                 np.ascontiguousarray(valid, dtype=np.int64))
        mats = (np.array(list(self.model.params.values()), dtype=float), self.free_rows,
                self.solved_rows, np.ascontiguousarray(np.linalg.cholesky(Vuu)),
                np.ascontiguousarray(Vuu_inv), float(np.linalg.slogdet(Vuu)[1]),
                np.ascontiguousarray(B), np.ascontiguousarray(np.linalg.inv(C)),
                float(np.linalg.slogdet(C)[1]))
        logZ, mean = np.empty(n), np.empty((n, P * M))
        cov = np.empty((n, P * M, P * M))
        drivers = self.qmc_kernel.drivers(deep_drivers.build)
        drive = drivers.rqmc
        tcrit = rule.t95()
        # the smallest prior precision of u: the floor of a ridge component's curvatures
        pmin = float(1.0 / np.linalg.eigvalsh(Vuu).max())
        # the proposal of each sample, built once (scan, Newton, adaptation on a scrambling
        # of its own, 4x the first level's points) and kept at every level
        dfree = len(free) * M
        ncomp_max = 1 + int(rule.starts) * (1 + len(self.flips)) + int(rule.adapt)
        comps = np.zeros(n, dtype=np.int64)
        mix = (np.zeros((n, ncomp_max, dfree)), np.zeros((n, ncomp_max, dfree, dfree)),
               np.zeros((n, ncomp_max)), comps)
        n_adapt_pts = min(4 * rule.points, rule.max_points)
        drivers.rqmc_mixture(
            *fixed, omega, *mats, self.flips, self._rqmc_points(n_adapt_pts)[-1],
            int(rule.scan), int(rule.starts), float(rule.inflate), pmin, ESS_ADD, ESS_DONE,
            float(rule.prior_share), int(rule.adapt), ADAPT_INFLATE, NEWTON_STEP, *mix)
        mats_qmc = mats[:3] + mats[4:]          # no Cholesky factor of V_uu: in the mixture

        sums = np.empty((n, rule.scrambles, 1 + P * M))

        # sample s integrates on point set s % point_sets (the proposals are built on set
        # 0's extra scrambling: they only steer, the estimates stay independent)
        def run(todo, npts):
            return by_point_set(rule, todo, npts, run_set)

        def run_set(todo, npts, k_set):
            sub = [a[todo] for a in fixed]
            out = (np.empty(todo.size), np.empty((todo.size, P * M)),
                   np.empty((todo.size, P * M, P * M)), np.empty(todo.size),
                   np.empty((todo.size, rule.scrambles, 1 + P * M)))
            drive(*sub, np.ascontiguousarray(omega[todo]), *mats_qmc,
                  *[np.ascontiguousarray(a[todo]) for a in mix],
                  self._rqmc_points(npts, k_set)[:-1], MIN_POINTS_SHARE, float(tcrit), sd,
                  *out)
            logZ[todo], mean[todo], cov[todo], sums[todo] = out[0], out[1], out[2], out[4]
            return out[3]

        self.last_scrambling_sums = None
        err, used = rqmc_levels(rule, n, run, double_near_tol=True)
        #: per-scrambling sums (n, scrambles, 1 + P M), as the noise channel's
        self.last_scrambling_sums = sums
        self.components = comps
        self.points_used = used
        method = (f"reduction (Corollary E.1) + {rule.describe()}; error = 95% half-width over the "
                  f"scramblings; {comps.mean():.2f} components and {used.mean():.0f} points per "
                  "component and scrambling on average")
        self._record(method, rule.tol, err)
        return Moments.from_posterior(logZ, mean, cov, omega, V)


class LaplaceQMCModel(MultiIndexModel):
    """A :class:`~symtheory.glm.factors.multi_index.MultiIndexModel` whose noiseless reduced
    channel integrates with :class:`LaplaceQMCRule` by default (deep links, where the
    tensor rule over ``p_free M`` axes is out of reach); ``channel(rule=TensorRule(...))``
    still gives the tensor Gauss-Hermite path."""

    def channel(self, noise_variance=None, rule=None, *, check: bool = True):
        if (noise_variance is not None or self.reduction is None
                or isinstance(rule, (TensorRule, AdaptiveRule))):
            return super().channel(noise_variance, rule, check=check)
        if "reduced_qmc" not in self._channels:
            self._channels["reduced_qmc"] = LaplaceQMCChannel(self)
        return self._channels["reduced_qmc"].configured(rule=rule)
