"""Posterior moments of reduced deterministic links of any depth by a rule that follows
the posterior: Laplace centring and scaling + randomized quasi-Monte Carlo.

The channel integral of smi.md Sec. 9 (Corollary E.1) over the free rows ``u``
(``d_u = p_free M`` dimensions, ``(L - 1) r M`` for deep attention),

    Z_out = sum_k int du f_k(u),
    f_k(u) = N(u; omega_u, V_uu) N(X_k(u); mu_{h|u}, C_{h|u}) |det T(u)|^{-r} / |det dy/dE(E^(k))|,
    T(u) X_k(u) = E^(k)(y),

grows as ``n^{d_u}`` with a tensor rule (``d_u = 4`` at depth 3: 30^4 nodes, smi.md 10.2).
Here it is an importance-sampling integral ``Z = E_q[sum_k f_k / q]`` over the mixture
``q = sum_c pi_c N(m_c, S_c)`` of

* component 0, the Gaussian marginal of ``u`` (defensive: ``f/q`` stays bounded where
  the likelihood is flat);
* Laplace components at the maxima of ``log sum_k f_k`` (Newton from the best of a
  short scan of component 0 and from its images under the sign flips of every even row
  group of ``u``, smi.md 2.2), covariance ``inflate^2 (-Hessian)^{-1}``;

each component fed the same number of points of a scrambled Sobol net
(``scipy.stats.qmc``; balance-heuristic weights ``f/q`` with the whole mixture, which
keeps the estimator unbiased whatever the components are -- the peaks only reduce its
variance).  ``R`` independent scramblings give ``R`` estimates of ``(log Z, E[z],
E[z z^T])``; their spread is the reported error: the 95% Student-t half-width of the
mean, in natural units (``log Z``; means over prior standard deviations; covariances
over their products).  Samples above the requested tolerance are recomputed with 4x the
points, up to ``max_points``.  Memory per sample is ``O(R d^2)`` (running sums with a
running log-scale), whatever the depth.
"""
from __future__ import annotations

import numpy as np

from ..core.codegen import Kernel
from ..core.quadrature import AdaptiveRule, TensorRule
from ..core.validate import ParameterError
from ._posterior_rules import TEMPLATE as _PEAK_TEMPLATE
from .laplace_qmc import TEMPLATE as _MIXTURE_TEMPLATE
from .laplace_qmc import LaplaceQMCRule, flip_patterns, rqmc_levels
from .multi_index import MultiIndexModel, ReducedChannel

__all__ = ["LaplaceQMCChannel", "LaplaceQMCModel", "LaplaceQMCRule"]


class LaplaceQMCChannel(ReducedChannel):
    """:class:`~symtheory.glm.multi_index.ReducedChannel` integrated by a
    :class:`LaplaceQMCRule` (see the module docstring); a ``TensorRule`` falls back to
    the parent's tensor Gauss-Hermite path."""

    def __init__(self, model: MultiIndexModel):
        super().__init__(model)
        M = self.M
        pf = len(self.free_rows)
        u_syms = [model.indices[a, m] for a in model.free_rows for m in range(M)]
        pars = list(model.param_symbols)
        call = ", ".join([f"u[{a}, {m}]" for a in range(pf) for m in range(M)]
                         + [f"pars[{i}]" for i in range(len(pars))] + ["tout"])
        self.qmc_kernel = Kernel(
            f"dp_{model.name}_mixing", u_syms + pars, list(model.reduction.mixing),
            doc=f"mixing T(u) of {model.name} and its Laplace-RQMC posterior driver",
            extra_imports=("symtheory.core._moments_nb",),
            extra_source=(_PEAK_TEMPLATE + _MIXTURE_TEMPLATE + _DRIVER).replace("CALL_ARGS", call))
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

    def _rqmc_points(self, n):
        key = (self.rule, n)
        if key not in self._points:
            self._points[key] = np.ascontiguousarray(
                self.rule.normal_points(len(self.free_rows) * self.M, n))
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
        their own coordinates (the SE's inversion features, ``glm.se``); returns and
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
        comps = np.zeros(n, dtype=np.int64)
        drive = self.qmc_kernel.extra("{name}_rqmc")
        tcrit = rule.t95()

        def run(todo, npts):
            sub = [a[todo] for a in fixed]
            out = (np.empty(todo.size), np.empty((todo.size, P * M)),
                   np.empty((todo.size, P * M, P * M)), np.empty(todo.size),
                   np.empty(todo.size, dtype=np.int64))
            drive(*sub, np.ascontiguousarray(omega[todo]), *mats, self.flips,
                  self._rqmc_points(npts), int(rule.scan), float(rule.inflate),
                  float(rule.prior_share), int(rule.adapt), 1.2, 1e-4, float(tcrit), sd, *out)
            logZ[todo], mean[todo], cov[todo], comps[todo] = out[0], out[1], out[2], out[4]
            return out[3]

        err, used = rqmc_levels(rule, n, run)
        self.components = comps
        self.points_used = used
        method = (f"reduction (smi.md 9) + {rule.describe()}; error = 95% half-width over the "
                  f"scramblings; {comps.mean():.2f} components and {used.mean():.0f} points per "
                  "component and scrambling on average")
        self._record(method, rule.tol, err)
        return logZ, mean.reshape(n, P, M), cov


# The driver reuses ``{name}_logterms`` / ``{name}_psi`` / ``{name}_newton`` of
# :mod:`._posterior_rules` (log integrand per branch; Newton with central differences) and
# the mixture / RQMC pieces of :mod:`.laplace_qmc`.
_DRIVER = '''

@numba.njit(cache=True)
def {name}_rqmc_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                    logdet_Vuu, Bm, Cinv, logdetC, flips, tn, nscan, inflate, prior_share,
                    n_adapt, adapt_inflate, hstep, tcrit, sd, out_logZ, out_mean, out_cov,
                    out_err, out_comp):
    """One sample of the driver below (a plain function: the parallel loop only
    dispatches, so no allocation in it can be hoisted and shared between threads)."""
    P = omega.shape[1]
    M = omega.shape[2]
    pf = free_rows.shape[0]
    r = solved_rows.shape[0]
    K = Ebr.shape[1]
    R = tn.shape[0] - 1            # tn[R]: the scrambling for the scan and the adaptation
    Npt = tn.shape[1]
    dfree = pf * M
    d = P * M
    nflip = flips.shape[0]
    ncomp_max = 2 + nflip
    lk = numpy.empty(K)
    Xall = numpy.zeros((K, M, r))
    tout = numpy.empty(M * M)
    Tw = numpy.empty((M, M))
    Ew = numpy.empty((M, r))
    X = numpy.empty((M, r))
    dv = numpy.empty(r)
    u = numpy.zeros((pf, M))
    H = numpy.zeros((dfree, dfree))
    g = numpy.zeros(dfree)
    xt = numpy.zeros(dfree)
    x = numpy.zeros(dfree)
    z = numpy.zeros(d)
    cm = numpy.zeros((ncomp_max, dfree))
    cL = numpy.zeros((ncomp_max, dfree, dfree))
    cLi = numpy.zeros((ncomp_max, dfree, dfree))
    clog = numpy.zeros(ncomp_max)
    cw = numpy.zeros(ncomp_max)
    lqc = numpy.zeros(ncomp_max)
    for a in range(pf):
        for m in range(M):
            cm[0, a * M + m] = omega[s, free_rows[a], m]
            for b in range(pf):
                cL[0, a * M + m, b * M + m] = Luu[a, b]
    ncomp = 1
    # Laplace centre: Newton from the best of the first nscan points of component 0
    best = -math.inf
    for j in range(nscan):
        {name}_place(cm, cL, 0, tn[R, j], xt)
        v = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                       logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
        if v > best:
            best = v
            x[:] = xt
    if best > -math.inf:
        val = {name}_newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows,
                            solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall,
                            tout, Tw, Ew, X, dv, u, H, g, xt)
        Lc = numpy.zeros((dfree, dfree))
        if (val > -math.inf and numpy.all(numpy.isfinite(x)) and numpy.all(numpy.isfinite(H))
                and {name}_laplace_factor(H, inflate, Lc)):
            # the mode and its images under the link's sign flips (the mixing is even
            # in each flipped group, only the Gaussian factors break the symmetry)
            for st in range(1 + nflip):
                for i in range(dfree):
                    f = 1.0 if st == 0 else flips[st - 1, i]
                    xt[i] = x[i] * f
                    for k2 in range(dfree):
                        cL[ncomp, i, k2] = Lc[i, k2] * f
                if {name}_dedup(xt, cm, cL, ncomp, g):
                    continue
                v = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                               Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                               Ew, X, dv, u)
                if v == -math.inf:
                    continue
                cm[ncomp] = xt
                cw[ncomp] = v
                ncomp += 1
    # mixture weights: prior_share on component 0, the rest by the peaks' heights
    # (equal Laplace widths)
    {name}_peak_weights(cw, ncomp, prior_share)
    {name}_finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
    # adaptive importance sampling: refit each peak component to the weighted points
    # it is responsible for (moment matching, population Monte Carlo) on the extra
    # scrambling tn[R]; a curved or skewed posterior is then covered, not missed
    for it in range(n_adapt):
        if ncomp == 1:
            break
        A0 = numpy.zeros(ncomp)
        Asq = numpy.zeros(ncomp)
        A1 = numpy.zeros((ncomp, dfree))
        A2 = numpy.zeros((ncomp, dfree, dfree))
        aref = -math.inf
        for jc in range(Npt * ncomp):
            j = jc // ncomp
            c = jc - j * ncomp
            {name}_place(cm, cL, c, tn[R, j], x)
            tot = {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                             Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                             Ew, X, dv, u)
            if tot == -math.inf:
                continue
            lq = {name}_mixture_logq(x, cm, cLi, clog, ncomp, lqc)
            lw = tot - lq + math.log(cw[c])
            if not (abs(lw) < math.inf):
                continue
            aref = {name}_refit_add(x, lw, lq, lqc, ncomp, A0, Asq, A1, A2, aref)
        if not {name}_refit(A0, Asq, A1, A2, cm, cL, cLi, clog, cw, ncomp, prior_share,
                            adapt_inflate):
            break
    out_comp[s] = ncomp
    # running sums per scrambling, centred at z0 and scaled by exp(-ref)
    S0 = numpy.zeros(R)
    S1 = numpy.zeros((R, d))
    S2 = numpy.zeros((R, d, d))
    z0 = numpy.zeros(d)
    ref = -math.inf
    broken = False
    for rr in range(R):
        # every component at every point of the net (stratified mixture: the
        # estimator stays a smooth function of the point, as QMC needs)
        for jc in range(Npt * ncomp):
            j = jc // ncomp
            c = jc - j * ncomp
            {name}_place(cm, cL, c, tn[rr, j], x)
            tot = {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                             Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout,
                             Tw, Ew, X, dv, u)
            if tot == -math.inf:
                continue
            lq = {name}_mixture_logq(x, cm, cLi, clog, ncomp, lqc)
            for k in range(K):
                if lk[k] == -math.inf:
                    continue
                lw = lk[k] - lq + math.log(cw[c])
                if not (lw < math.inf) or lw != lw:
                    broken = True
                    continue
                for a in range(pf):
                    for m in range(M):
                        z[free_rows[a] * M + m] = x[a * M + m]
                for q in range(r):
                    for m in range(M):
                        z[solved_rows[q] * M + m] = Xall[k, m, q]
                ref, w = {name}_rqmc_add(rr, lw, z, S0, S1, S2, z0, ref)
    {name}_rqmc_finish(S0, S1, S2, z0, ref, Npt, tcrit, sd, broken, s, out_logZ, out_mean,
                       out_cov, out_err)


@numba.njit(cache=True, parallel=True)
def {name}_rqmc(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                logdet_Vuu, Bm, Cinv, logdetC, flips, tn, nscan, inflate, prior_share, n_adapt,
                adapt_inflate, hstep, tcrit, sd, out_logZ, out_mean, out_cov, out_err, out_comp):
    for s in numba.prange(omega.shape[0]):
        {name}_rqmc_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                        logdet_Vuu, Bm, Cinv, logdetC, flips, tn, nscan, inflate, prior_share,
                        n_adapt, adapt_inflate, hstep, tcrit, sd, out_logZ, out_mean, out_cov,
                        out_err, out_comp)
'''


class LaplaceQMCModel(MultiIndexModel):
    """A :class:`~symtheory.glm.multi_index.MultiIndexModel` whose noiseless reduced
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
