"""Multi-index channels with Gaussian output noise, ``y = g(Z) + sqrt(Delta) xi``.

The integration is chosen at declaration from what SymPy establishes about ``g``
(:mod:`symtheory.glm.integrate.link_structure`): exact orthant mixtures for links
constant on sign regions, Gaussian conjugacy for the affine part of ``g`` and a rule
that follows the integrand for the rest (composite Gauss-Legendre split at the link's
jumps in one dimension, an adaptive box in two, Laplace-centred randomized QMC above;
see :class:`GaussianNoiseChannel`).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from ...core._moments_nb import moment_change_batch
from ...core.codegen import Kernel
from ...core.quadrature import AdaptiveRule, TensorRule
from ...core.validate import ParameterError
from ..checks.symbolic import random_point_discrepancy
from ..integrate.drivers import noise as noise_drivers
from ..integrate.laplace_qmc import LaplaceQMCRule, by_point_set, flip_patterns, rqmc_levels
from ..integrate.link_structure import NotApplicable, affine_split, breakpoints, discrete_structure
from ..integrate.moments import Moments
from .discrete import _OrthantChannel


class GaussianNoiseChannel(_OrthantChannel):
    """``y = g(Z) + sqrt(Delta) xi`` with the integration chosen at declaration from what
    SymPy establishes about ``g`` (:mod:`symtheory.glm.integrate.link_structure`):

    1. ``g`` constant on sign regions of linear forms: ``Z_out = sum_k P(R_k) N(y; c_k,
       Delta)``, posterior = mixture of truncated Gaussians (exact up to 1-D orthant
       integrals, see :class:`DiscreteOutputChannel`);
    2. otherwise ``g = A(z_R) z_S + b(z_R)`` with the largest affine set ``S`` (possibly
       empty): ``z_S | z_R`` is integrated exactly (Gaussian conjugacy: ``Z_out =
       E_{z_R} N(y; A m + b, A C A^T + Delta I)``, with the conjugate posterior mean and
       covariance of ``z_S`` added to the moments), leaving ``|R|`` dimensions:

       * ``|R| = 0``: closed form (e.g. linear tokens);
       * ``|R| = 1``: composite Gauss-Legendre on ``[-T, T]`` (prior-whitened ``z_R``) split
         at the link's jumps (roots of its switch arguments), panels doubled per sample
         until the moments change by less than ``rtol``; ``T`` grows until the neglected
         mass, at most ``sup N(y; ., S) 2 Q(T) <= (2 pi Delta)^{-n/2} e^{-T^2/2}``, is below
         ``rtol Z_out``;
       * ``|R| = 2`` (or an explicit :class:`AdaptiveRule`): tensor composite Gauss-Legendre
         on the whitened box ``[-T, T]^|R|`` (Gaussian density in the weights: no
         polynomial approximation of the likelihood, unlike Gauss-Hermite), panels doubled
         per sample until the change meets ``rtol`` (or the node budget ends: reported,
         warned);
       * ``|R| >= 3`` by default (:data:`NOISE_LAPLACE_RULE`, or any
         :class:`~symtheory.glm.integrate.laplace_qmc.LaplaceQMCRule` for ``|R| >= 2``): the
         likelihood-following rule of :meth:`_laplace_rqmc` -- Laplace-centred Gaussian
         mixture importance sampling with randomized QMC, its error the 95% half-width
         over the scramblings (the box's ``(2^level 8)^|R|`` nodes per sample are out of
         reach at ``|R| = 4``: ~17M per sample at the first refinement).

    An explicit :class:`TensorRule` replaces the adaptive 1-D/tensor integration over
    ``z_R`` (its error estimate is the change against ``rule.coarsened()``)."""

    def __init__(self, model):
        super().__init__(model)
        g = model.link
        self.n_out = g.rows * g.cols
        try:
            self._setup_orthants(discrete_structure(g, model.indices, model.params))
            self.method = "Gaussian noise, orthant mixture: " + self.discrete.describe()
            return
        except NotApplicable as exc:
            self.discrete = None
            self.not_discrete = str(exc)
        zs = list(model.indices)
        split = affine_split(g, zs)
        rebuilt = split.A * sp.Matrix([zs[i] for i in split.S]) + split.b if split.S else split.b
        worst = random_point_discrepancy(list(rebuilt.subs(model.params)), list(g.subs(model.params)), zs)
        if worst > 1e-10:
            raise ValueError(f"affine split does not reproduce the link ({worst:.2e})")
        self.S = np.array(split.S, dtype=np.int64)
        self.R = np.array(split.R, dtype=np.int64)
        zR = [zs[i] for i in split.R]
        self.breaks = np.zeros(0)
        self.breaks_note = ""
        if len(zR) == 1:
            try:
                self.breaks = np.array(breakpoints(list(split.A) + list(split.b), zR[0],
                                                   model.params), dtype=float)
            except NotApplicable as exc:
                self.breaks_note = f" (jumps not located: {exc})"
        pars = list(model.param_symbols)
        # derivatives for the Gauss-Newton search of the Laplace-RQMC rule (|R| >= 2); a
        # jump of the link (DiracDelta) only moves the proposal, never the estimate
        derivs = [sp.diff(e, zr).replace(sp.DiracDelta, lambda *a: sp.S.Zero)
                  for e in list(split.A) + list(split.b) for zr in zR] if len(zR) >= 2 else []
        self.kernel = Kernel(
            f"mi_{model.name}_affine", zR + pars, list(split.A) + list(split.b) + derivs,
            doc=f"A(z_R), b(z_R) of {model.name}: g = A z_S + b, then d/dz_R of each",
            packed=(len(zR),))
        # sign flips of z_R that leave the link unchanged (starts of the mode search)
        self.flips = flip_patterns(model, list(split.R))
        self._points = {}
        names = [str(z) for z in zs]
        self.method = (f"Gaussian noise, exact Gaussian integral over "
                       f"{[names[i] for i in split.S]}, numerical over {[names[i] for i in split.R]}")

    def _default_rule(self):
        if self.discrete is None and self.R.size >= LAPLACE_MIN_DIM:
            return NOISE_LAPLACE_RULE
        return AdaptiveRule()

    def configured(self, noise_variance=None, rule=None):
        rule = self._default_rule() if rule is None else rule
        if not isinstance(rule, LaplaceQMCRule):
            return super().configured(noise_variance, rule)
        if self.discrete is not None or self.R.size < 2:
            raise ParameterError("the Laplace-RQMC rule integrates |R| >= 2 non-affine indices; "
                                 f"this channel has {self.method!r}: give an AdaptiveRule or a "
                                 "TensorRule")
        new = super().configured(noise_variance, AdaptiveRule())
        new.rule = rule
        return new

    def moments(self, y, omega, V):
        """``(log Z_out (n,), E[Z|y] (n, P, M), Cov (n, P M, P M))``, index ``a M + m``
        (and, by the Laplace-RQMC rule, :attr:`last_scrambling_sums`; else None)."""
        self.last_scrambling_sums = None
        y, omega, V = self._prep(y, omega, V)
        self._check_outputs(y)
        delta = self.noise_variance
        if self.discrete is not None:
            vals = self.discrete.values
            loglik = (-0.5 * np.sum((y[:, None, :] - vals[None]) ** 2, axis=2) / delta
                      - 0.5 * self.n_out * math.log(2 * math.pi * delta))
            return self._orthant_moments(y, omega, V, loglik, self.method)
        n, d = omega.shape[0], self.P * self.M
        om = np.ascontiguousarray(omega.reshape(n, d))
        Sigma = np.kron(V, np.eye(self.M))
        S, R = self.S, self.R
        S_RR = Sigma[np.ix_(R, R)]
        Kmat = np.linalg.solve(S_RR, Sigma[np.ix_(R, S)]).T if R.size else np.zeros((S.size, 0))
        Ccond = Sigma[np.ix_(S, S)] - Kmat @ Sigma[np.ix_(R, S)]
        Ccond = np.ascontiguousarray(0.5 * (Ccond + Ccond.T))
        Kmat = np.ascontiguousarray(Kmat)
        sd = np.sqrt(np.diag(Sigma))
        pars = np.array(list(self.model.params.values()), dtype=float)
        common = (y, om, pars, float(delta), S, R, Kmat, Ccond)
        rule = self.rule
        if R.size == 0:
            logZ, mean, cov = self._tensor_pass(TensorRule("gauss-hermite", 1), S_RR, common)
            err, method = np.zeros(n), self.method + " (none left: closed form)"
            tol = rule.rtol if isinstance(rule, AdaptiveRule) else math.inf
        elif isinstance(rule, TensorRule):
            logZ, mean, cov = self._tensor_pass(rule, S_RR, common)
            coarse = self._tensor_pass(rule.coarsened(), S_RR, common)
            err = moment_change_batch(coarse[0], coarse[1], coarse[2], logZ, mean, cov, sd)
            method = (f"{self.method} by {rule.describe()}; error = change vs "
                      f"{rule.coarsened().describe()}")
            tol = math.inf
        elif isinstance(rule, LaplaceQMCRule):
            logZ, mean, cov, err, method = self._laplace_rqmc(rule, S_RR, sd, common)
            tol = rule.tol
        elif R.size == 1:
            logZ, mean, cov, err = self._adaptive_1d(rule, S_RR, sd, common)
            method = (f"{self.method} by composite Gauss-Legendre {rule.gauss_legendre} "
                      f"split at {self.breaks.tolist()}{self.breaks_note}")
            tol = rule.rtol
        else:
            logZ, mean, cov, err = self._adaptive_tensor(rule, S_RR, sd, common)
            method = (f"{self.method} by tensor composite Gauss-Legendre "
                      f"{rule.gauss_legendre} on the whitened box, panels doubled to rtol")
            tol = rule.rtol
        self._record(method, tol, err)
        return Moments.from_posterior(logZ, mean, cov, omega, V)

    def _tensor_pass(self, rule, S_RR, common, nodes=None):
        """One pass of the generated driver over the nodes ``(t, w)`` of ``E f(t)``,
        ``t ~ N(0, I)`` (prior-whitened ``z_R``), from ``rule`` or given."""
        y, om = common[0], common[1]
        n, d = om.shape
        tn, tw = nodes if nodes is not None else rule.nodes(self.R.size)
        if self.R.size == 0:
            tn, tw = np.zeros((1, 0)), np.ones(1)
        keep = tw > 0
        tn, tw = np.ascontiguousarray(tn[keep]), np.ascontiguousarray(tw[keep])
        L_RR = np.linalg.cholesky(S_RR) if self.R.size else np.zeros((0, 0))
        logZ, mean, cov = np.empty(n), np.empty((n, d)), np.empty((n, d, d))
        self.kernel.drivers(noise_drivers.build).tensor(
            *common, np.ascontiguousarray(L_RR), tn, tw, logZ, mean, cov)
        return logZ, mean, cov

    def _adaptive_tensor(self, rule, S_RR, sd, common):
        """Tensor composite Gauss-Legendre on the prior-whitened box, panels doubled per
        sample until the moments change by less than ``rtol`` (that change is the error);
        samples whose neglected mass outside the box, at most
        ``sup(lik) 2 k Q(T) <= k exp(log_lsup - T^2/2)``, is not below ``rtol Z_out`` are
        redone on a larger box."""
        n = common[1].shape[0]
        k = self.R.size
        log_lsup = -0.5 * self.n_out * math.log(2 * math.pi * self.noise_variance)
        out = [np.empty(n), np.empty((n, sd.size)), np.empty((n, sd.size, sd.size))]
        err = np.full(n, np.inf)

        def run(idx, T):
            sub = (common[0][idx], common[1][idx]) + common[2:]
            levels = rule.box_levels(k)
            prev = self._tensor_pass(None, S_RR, sub, nodes=rule.box_nodes(k, levels[0], T))
            todo = np.arange(idx.size)
            res = [a.copy() for a in prev]
            e = np.full(idx.size, np.inf)
            for level in levels[1:]:
                cur = self._tensor_pass(None, S_RR, (sub[0][todo], sub[1][todo]) + sub[2:],
                                        nodes=rule.box_nodes(k, level, T))
                e[todo] = moment_change_batch(*(p[todo] for p in res), *cur, sd)
                for j in range(3):
                    res[j][todo] = cur[j]
                todo = todo[e[todo] > rule.rtol]
                if todo.size == 0:
                    break
            trunc = k * np.exp(np.minimum(0.0, log_lsup - 0.5 * T * T - res[0]))
            for j in range(3):
                out[j][idx] = res[j]
            err[idx] = np.maximum(e, trunc)
            return res[0]

        logZ = run(np.arange(n), rule.box_half_width)
        T_need = np.sqrt(2.0 * np.maximum(0.0, log_lsup + math.log(k) - logZ - math.log(rule.rtol)))
        for i in np.nonzero(T_need > rule.box_half_width)[0]:
            run(np.array([i]), min(float(T_need[i]) + 0.5, _BOX_T_MAX))
        return out[0], out[1], out[2], err

    def _laplace_rqmc(self, rule, S_RR, sd, common):
        """``|R| >= 2`` by Laplace-centred mixture importance sampling with randomized QMC
        (:mod:`symtheory.glm.integrate.laplace_qmc`) in prior-whitened ``z_R = omega_R + L t``: component 0 the
        prior ``N(0, I)``, peaks at the maxima of the log integrand found by Gauss-Newton
        from the prior mean, its images under the link's sign flips and the two best of
        ``rule.scan`` prior points, covariance ``inflate^2`` times the inverse Gauss-Newton
        Hessian; ``z_S | z_R`` stays exact (conjugate).  Error: 95% half-width over the
        scramblings (natural units), samples above ``rule.tol`` redone with 4x the points."""
        n, d = common[1].shape
        k = self.R.size
        L_RR = np.ascontiguousarray(np.linalg.cholesky(S_RR))
        logZ, mean, cov = np.empty(n), np.empty((n, d)), np.empty((n, d, d))
        sums = np.empty((n, rule.scrambles, 1 + d))
        comps = np.zeros(n, dtype=np.int64)
        drive = self.kernel.drivers(noise_drivers.build).laplace
        tcrit = rule.t95()

        def run(todo, npts):
            return by_point_set(rule, todo, npts, run_set)

        def run_set(todo, npts, k_set):
            key = (rule, npts, k_set)
            if key not in self._points:
                self._points[key] = np.ascontiguousarray(rule.normal_points(k, npts, k_set))
            out = (np.empty(todo.size), np.empty((todo.size, d)), np.empty((todo.size, d, d)),
                   np.empty(todo.size), np.empty(todo.size, dtype=np.int64),
                   np.empty((todo.size, rule.scrambles, 1 + d)))
            drive(np.ascontiguousarray(common[0][todo]), np.ascontiguousarray(common[1][todo]),
                  *common[2:], L_RR, self.flips, self._points[key], int(rule.scan),
                  float(rule.inflate), float(rule.prior_share), int(rule.adapt), 1.2, tcrit, sd,
                  *out)
            logZ[todo], mean[todo], cov[todo], comps[todo] = out[0], out[1], out[2], out[4]
            sums[todo] = out[5]
            return out[3]

        err, used = rqmc_levels(rule, n, run)
        self.components, self.points_used = comps, used
        #: per-scrambling sums (n, scrambles, 1 + P M): weight, then sum of w Z (index
        #: a M + m), one scale per sample -- E[Z|y] pooled over disjoint sets of
        #: scramblings are independent given the proposal (:func:`symtheory.glm.integrate.laplace_qmc.pooled_mean`)
        self.last_scrambling_sums = sums
        method = (f"{self.method} by {rule.describe()}; error = 95% half-width over the "
                  f"scramblings; {comps.mean():.2f} components and {used.mean():.0f} points per "
                  "component and scrambling on average")
        return logZ, mean, cov, err, method

    def _adaptive_1d(self, rule, S_RR, sd, common):
        n, d = common[1].shape
        gl_x, gl_w = rule.legendre()
        logZ, mean, cov = np.empty(n), np.empty((n, d)), np.empty((n, d, d))
        err, level = np.empty(n), np.empty(n, dtype=np.int64)
        log_lsup = -0.5 * self.n_out * math.log(2 * math.pi * self.noise_variance)
        self.kernel.drivers(noise_drivers.build).adaptive(
            *common, math.sqrt(S_RR[0, 0]), np.ascontiguousarray(self.breaks), gl_x, gl_w, sd,
            float(rule.rtol), int(rule.min_level), int(rule.max_level), _ADAPTIVE_T0,
            _ADAPTIVE_T_MAX, log_lsup,
            logZ, mean, cov, err, level)
        return logZ, mean, cov, err


#: initial half-width of the prior-whitened 1-D domain (grown per sample when needed)
_ADAPTIVE_T0 = 8.0
#: largest 1-D half-width: an output whose posterior sits T prior standard deviations
#: out has Z_out ~ e^{-T^2/2}; the weights are kept in logs, so only the resolution
#: (2^max_level panels) limits T -- beyond it the sample reports its error and warns
_ADAPTIVE_T_MAX = 200.0
#: largest half-width of the |R| >= 2 box (its node count grows like T^|R|)
_BOX_T_MAX = 38.0
#: fewest non-affine indices integrated by default with NOISE_LAPLACE_RULE: at |R| = 2 the
#: box rule reaches rtol 1e-10 within its node budget, and the declaration check (P M <= 2,
#: multi_index_check.CHECK_RTOL = 1e-6) holds a channel to more than an RQMC rule gives
LAPLACE_MIN_DIM = 3
#: default rule of GaussianNoiseChannel for |R| >= LAPLACE_MIN_DIM non-affine indices.
#: tol: Q_hat = alpha E[g_out g_out^T] is quadratic in g_out, so independent per-sample
#: errors do not average out: they add E[dg dg^T] ~ (tol / 2)^2 V^{-1} (tol a 95% half-width
#: in prior standard deviations).  Measured on deep attention (depth 2, Delta = 0.1,
#: Q = diag(0.05, 0.5), 1000 samples): a rule at median error 0.17 raised Q_hat_11 by
#: 5e-3 = 12 Monte-Carlo standard errors over one at 0.018.  At tol = 1e-2 the bias,
#: ~2.5e-5 / (1 - Q), stays below the Monte-Carlo standard error at 20,000 samples.
NOISE_LAPLACE_RULE = LaplaceQMCRule(tol=1e-2, points=64, max_points=1024, scrambles=8,
                                    adapt=1, scan=32)
#: the same channel's rule in the state evolution, whose ``'cross'`` estimator
#: (:class:`~symtheory.glm.se.state_evolution.StateEvolution`) averages ``g_A g_B^T`` of the posterior
#: means pooled over the rule's even and over its odd scramblings: their random errors no
#: longer add ``E[dg dg^T]``.  Two conditions, both measured: the samples must not share
#: one randomization of the points (a fixed point set's errors are correlated across
#: samples and their products do not average out: at Q = diag(0, 0.558), where
#: Q_hat_11 = 0 exactly, one set gave -2.7e-5 +- 0.6e-5 at 256 points, 16 sets
#: -0.6e-5 +- 1.4e-5), hence ``point_sets`` (the SE sets it to its scramblings, so the
#: error lands in its standard error); and the ratio bias must be small: depth-2
#: attention, Delta = 0.1, Q = 0.05 I, 1024 samples, 16 sets, Q_hat_11 = 2.45e-3 /
#: 2.43e-3 / 2.50e-3 at 128 / 256 / 1024 points (stderr 1.5e-4), one run's g g^T 2.68e-3
#: at 128 (measured; tests/smi/test_cross_estimator.py re-checks both conditions: the exact
#: 0 at Q11 = 0, and 128 points against the combined estimator at 1024).  Cost ~0.4 ms
#: per sample at 128 points (0.42 measured on 2 threads; 1.25 ms before the per-point
#: helpers ran without reference counting); 1-3% of samples above tol = 0.25 at the first level (escalated
#: to 4x the points).
NOISE_SE_RULE = LaplaceQMCRule(tol=0.25, points=128, max_points=1024, scrambles=8,
                               adapt=1, scan=32, point_sets=16)
