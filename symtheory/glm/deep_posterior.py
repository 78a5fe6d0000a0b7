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
* Laplace components at the maxima of ``log sum_k f_k`` (Newton from the best
  ``starts`` points of a short scan of component 0 that lie outside the peaks already
  found, and from the images of each mode under the sign flips of every even row group
  of ``u``, smi.md 2.2: the Gaussian factors break that symmetry, so an image is a start,
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
4x the points, up to ``max_points`` (:func:`~.laplace_qmc.rqmc_levels`).  Memory per
sample is ``O(R d^2)`` (running sums with a running log-scale), whatever the depth.
"""
from __future__ import annotations

import numpy as np

from ..core.codegen import Kernel
from ..core.quadrature import AdaptiveRule, TensorRule
from ..core.validate import ParameterError
from ._posterior_rules import TEMPLATE as _PEAK_TEMPLATE
from .laplace_qmc import TEMPLATE as _MIXTURE_TEMPLATE
from .laplace_qmc import LaplaceQMCRule, by_point_set, flip_patterns, rqmc_levels
from .multi_index import MultiIndexModel, ReducedChannel

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
        drive = self.qmc_kernel.extra("{name}_rqmc")
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
        self.qmc_kernel.extra("{name}_rqmc_mixture")(
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
def {name}_grad_hess(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                     Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u,
                     H, g, xt):
    """log integrand at x, its gradient into g and Hessian into H (central differences)."""
    d = x.shape[0]
    h = hstep
    f0 = {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                    logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
    for i in range(d):
        for j in range(i + 1):
            acc = 0.0
            for si in (-1.0, 1.0):
                for sj in (-1.0, 1.0):
                    xt[:] = x
                    xt[i] += si * h
                    xt[j] += sj * h
                    acc += si * sj * {name}_psi(xt, s, Ebr, lwb, valid, omega, pars,
                                                free_rows, solved_rows, Vuu_inv, logdet_Vuu,
                                                Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                                                X, dv, u)
            H[i, j] = acc / (4 * h * h)
            H[j, i] = H[i, j]
        xt[:] = x
        xt[i] += h
        fp = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                        logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
        xt[i] -= 2 * h
        fm = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                        logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
        g[i] = (fp - fm) / (2 * h)
    return f0


@numba.njit(cache=True)
def {name}_ridge_point(x, s, hstep, pmin, Ebr, lwb, valid, omega, pars, free_rows,
                       solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout,
                       Tw, Ew, X, dv, u, H, g, xt):
    """Move x (in place) onto the crest of the ridge of the log integrand: Newton steps in
    the stiff directions only (curvature above 4 pmin, the smallest prior precision), so
    x stays where it is along the ridge.  Returns the value there (H, g: its derivatives),
    -inf if the derivatives are not finite."""
    d = x.shape[0]
    f0 = -math.inf
    for it in range(4):
        f0 = {name}_grad_hess(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows,
                              solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall,
                              tout, Tw, Ew, X, dv, u, H, g, xt)
        if not (f0 > -math.inf and numpy.all(numpy.isfinite(g))
                and numpy.all(numpy.isfinite(H))):
            return -math.inf
        if it == 3:
            break
        lam, vec = numpy.linalg.eigh(-H)
        step = numpy.zeros(d)
        for i in range(d):
            if lam[i] > 4.0 * pmin:
                proj = 0.0
                for j in range(d):
                    proj += vec[j, i] * g[j]
                for j in range(d):
                    step[j] += proj / lam[i] * vec[j, i]
        t = 1.0
        moved = False
        for ls in range(20):
            xt[:] = x + t * step
            ft = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                            Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                            X, dv, u)
            if ft >= f0:
                moved = True
                break
            t *= 0.5
        if not moved:
            break
        x[:] = xt
    return f0


@numba.njit(cache=True)
def {name}_ridge_factor(H, pmin, inflate, Lc):
    """Lower Cholesky factor of inflate^2 inverse(-H) with the curvatures of -H raised to at
    least pmin (along a ridge the log integrand is flat or convex; the prior bounds the
    spread there).  False if the result is not positive definite."""
    d = H.shape[0]
    lam, vec = numpy.linalg.eigh(-H)
    for i in range(d):
        for j in range(d):
            acc = 0.0
            for k in range(d):
                acc += vec[i, k] * vec[j, k] / max(lam[k], pmin)
            Lc[i, j] = acc * inflate * inflate
    return symtheory.core._moments_nb.cholesky_logdet(Lc) > -math.inf


@numba.njit(cache=True)
def {name}_workspace(K, M, r, pf):
    """The work arrays of {name}_psi: lk, Xall, tout, Tw, Ew, X, dv, u (one set per
    sample: each thread of the parallel loops owns its own)."""
    return (numpy.empty(K), numpy.zeros((K, M, r)), numpy.empty(M * M), numpy.empty((M, M)),
            numpy.empty((M, r)), numpy.empty((M, r)), numpy.empty(r), numpy.zeros((pf, M)))


@numba.njit(cache=True)
def {name}_mixture_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu,
                       Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart,
                       inflate, pmin, ess_add, ess_done, prior_share, n_adapt,
                       adapt_inflate, hstep, out_cm, out_cL, out_cw, out_comp):
    """The proposal mixture of sample s from the search-and-adaptation points ts (a
    scrambling of its own): means, Cholesky factors, weights, count into out_* (a plain
    function: the parallel loop only dispatches, so no allocation in it can be hoisted
    and shared between threads)."""
    M = omega.shape[2]
    pf = free_rows.shape[0]
    r = solved_rows.shape[0]
    K = Ebr.shape[1]
    dfree = pf * M
    nflip = flips.shape[0]
    ncomp_max = out_cm.shape[1]
    lk, Xall, tout, Tw, Ew, X, dv, u = {name}_workspace(K, M, r, pf)
    H = numpy.zeros((dfree, dfree))
    g = numpy.zeros(dfree)
    xt = numpy.zeros(dfree)
    x = numpy.zeros(dfree)
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
    # Laplace centres: Newton from the nstart best points of the first nscan points of
    # component 0 (a posterior concentrated near a curved manifold -- a nearly known
    # solved layer -- has several modes that are not images of each other), each mode
    # refined from its images under the sign flips of the link (the mixing is even in
    # each flipped group, only the Gaussian factors break the symmetry, so an image is a
    # start near another mode, not a mode)
    topv = numpy.full(nstart, -math.inf)
    topx = numpy.zeros((nstart, dfree))
    for j in range(nscan):
        {name}_place(cm, cL, 0, ts[j], xt)
        v = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                       logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
        if not v > topv[nstart - 1]:
            continue
        i = nstart - 1
        while i > 0 and v > topv[i - 1]:
            topv[i] = topv[i - 1]
            topx[i] = topx[i - 1]
            i -= 1
        topv[i] = v
        topx[i] = xt
    Lc = numpy.zeros((dfree, dfree))
    mode = numpy.zeros(dfree)
    for st in range(nstart):
        if topv[st] == -math.inf or ncomp >= ncomp_max:
            break
        mode[:] = topx[st]
        if {name}_dedup(mode, cm, cL, ncomp, g):
            continue               # in the basin of a peak already found
        for im in range(1 + nflip):
            if ncomp >= ncomp_max:
                break
            for i in range(dfree):
                x[i] = mode[i] * (1.0 if im == 0 else flips[im - 1, i])
            if im > 0 and {name}_dedup(x, cm, cL, ncomp, g):
                continue
            val = {name}_newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows,
                                solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall,
                                tout, Tw, Ew, X, dv, u, H, g, xt)
            if not (val > -math.inf and numpy.all(numpy.isfinite(x))
                    and numpy.all(numpy.isfinite(H)) and {name}_laplace_factor(H, inflate, Lc)):
                continue
            if im == 0:
                mode[:] = x
            if {name}_dedup(x, cm, cL, ncomp, g):
                continue
            cm[ncomp] = x
            cL[ncomp] = Lc
            # log Laplace mass (up to a common constant): height + log det of the factor
            cw[ncomp] = val
            for i in range(dfree):
                cw[ncomp] += math.log(Lc[i, i])
            ncomp += 1
    # mixture weights: prior_share on component 0, the rest by the peaks' Laplace masses
    {name}_peak_weights(cw, ncomp, prior_share)
    {name}_finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
    # adaptive importance sampling on the points ts: refit each peak component to the
    # weighted points it is responsible for (moment matching, population Monte Carlo),
    # and while the weights are uneven (effective sample size below ess_add of the
    # points) add a component where the heaviest point outside the peaks lies, moved onto
    # the crest of the ridge there: when the solved layer is nearly known the posterior
    # lies near a curved manifold of u, which Gaussians at its modes do not follow far
    # (the prior component alone covers it, with heavy weights); stop once the effective
    # sample size reaches ess_done of the points
    xh = numpy.zeros(dfree)
    Nad = ts.shape[0]
    for it in range(n_adapt):
        if ncomp == 1:
            break
        A0 = numpy.zeros(ncomp)
        Asq = numpy.zeros(ncomp)
        A1 = numpy.zeros((ncomp, dfree))
        A2 = numpy.zeros((ncomp, dfree, dfree))
        aref = -math.inf
        lw_out = -math.inf
        eref = -math.inf
        sw = 0.0
        sw2 = 0.0
        for jc in range(Nad * ncomp):
            j = jc // ncomp
            c = jc - j * ncomp
            {name}_place(cm, cL, c, ts[j], x)
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
            if lw > eref:
                if eref > -math.inf:
                    sw *= math.exp(eref - lw)
                    sw2 *= math.exp(2 * (eref - lw))
                eref = lw
            sw += math.exp(lw - eref)
            sw2 += math.exp(2 * (lw - eref))
            if lw > lw_out and not {name}_dedup(x, cm, cL, ncomp, g):
                lw_out = lw
                xh[:] = x
        if not {name}_refit(A0, Asq, A1, A2, cm, cL, cLi, clog, cw, ncomp, prior_share,
                            adapt_inflate):
            break
        if sw * sw >= ess_done * Nad * ncomp * sw2:
            break                  # the weights are even: the mixture follows the posterior
        if (ncomp < ncomp_max and lw_out > -math.inf
                and sw * sw < ess_add * Nad * ncomp * sw2):
            val = {name}_ridge_point(xh, s, hstep, pmin, Ebr, lwb, valid, omega, pars,
                                     free_rows, solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv,
                                     logdetC, lk, Xall, tout, Tw, Ew, X, dv, u, H, g, xt)
            Lc = numpy.zeros((dfree, dfree))
            if val > -math.inf and {name}_ridge_factor(H, pmin, inflate, Lc):
                cm[ncomp] = xh
                cL[ncomp] = Lc
                # a share of the peaks' weight, as the mean peak; the next refit
                # reweighs by responsibility
                cw[ncomp] = (1.0 - prior_share) / (ncomp - 1)
                ncomp += 1
                nrm = 0.0
                for c in range(1, ncomp):
                    nrm += cw[c]
                for c in range(1, ncomp):
                    cw[c] *= (1.0 - prior_share) / nrm
                {name}_finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
    out_comp[s] = ncomp
    out_cm[s] = cm
    out_cL[s] = cL
    out_cw[s] = cw


@numba.njit(cache=True)
def {name}_sample_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                      logdet_Vuu, Bm, Cinv, logdetC, mix_m, mix_L, mix_w, mix_n, tn, min_share,
                      tcrit, sd, out_logZ, out_mean, out_cov, out_err, out_sums):
    """The RQMC estimates of sample s over the scramblings tn with its mixture (a plain
    function, as above)."""
    P = omega.shape[1]
    M = omega.shape[2]
    pf = free_rows.shape[0]
    r = solved_rows.shape[0]
    K = Ebr.shape[1]
    R = tn.shape[0]
    Npt = tn.shape[1]
    dfree = pf * M
    d = P * M
    ncomp = mix_n[s]
    lk, Xall, tout, Tw, Ew, X, dv, u = {name}_workspace(K, M, r, pf)
    x = numpy.zeros(dfree)
    z = numpy.zeros(d)
    cm = mix_m[s].copy()
    cL = mix_L[s].copy()
    cw = mix_w[s].copy()
    cLi = numpy.zeros(cL.shape)
    clog = numpy.zeros(ncomp)
    lqc = numpy.zeros(ncomp)
    {name}_finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
    # running sums per scrambling, centred at z0 and scaled by exp(-ref)
    S0 = numpy.zeros(R)
    S1 = numpy.zeros((R, d))
    S2 = numpy.zeros((R, d, d))
    z0 = numpy.zeros(d)
    ref = -math.inf
    broken = False
    # points per component in proportion to its weight (a power of 2, so each takes a
    # whole net: the first 2^m points of a scrambled Sobol sequence; at least
    # min_share Npt): Z = sum_c pi_c mean_j f / q(x_cj) over its n_c points, each
    # point weighted pi_c (Npt / n_c) f / q against the Npt of the sums
    wmax = numpy.max(cw[:ncomp])
    ncp = numpy.empty(ncomp, dtype=numpy.int64)
    lcw = numpy.empty(ncomp)
    for c in range(ncomp):
        nc = Npt
        while nc > 1 and nc // 2 >= min_share * Npt and (nc // 2) * wmax >= Npt * cw[c]:
            nc //= 2
        ncp[c] = nc
        lcw[c] = math.log(cw[c]) + math.log(Npt / nc)
    for rr in range(R):
        # every component on the same net (stratified mixture: the estimator stays a
        # smooth function of the point, as QMC needs)
        for jc in range(Npt * ncomp):
            j = jc // ncomp
            c = jc - j * ncomp
            if j >= ncp[c]:
                continue
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
                lw = lk[k] - lq + lcw[c]
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
    {name}_rqmc_sums(S0, S1, z0, s, out_sums)


@numba.njit(cache=True, parallel=True)
def {name}_rqmc_mixture(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                        logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart, inflate,
                        pmin, ess_add, ess_done, prior_share, n_adapt, adapt_inflate, hstep,
                        out_cm, out_cL, out_cw, out_comp):
    for s in numba.prange(omega.shape[0]):
        {name}_mixture_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu,
                           Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart,
                           inflate, pmin, ess_add, ess_done, prior_share, n_adapt,
                           adapt_inflate, hstep,
                           out_cm, out_cL, out_cw, out_comp)


@numba.njit(cache=True, parallel=True)
def {name}_rqmc(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv, logdet_Vuu, Bm,
                Cinv, logdetC, mix_m, mix_L, mix_w, mix_n, tn, min_share, tcrit, sd, out_logZ,
                out_mean, out_cov, out_err, out_sums):
    for s in numba.prange(omega.shape[0]):
        {name}_sample_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                          logdet_Vuu, Bm, Cinv, logdetC, mix_m, mix_L, mix_w, mix_n, tn,
                          min_share, tcrit, sd, out_logZ, out_mean, out_cov, out_err,
                          out_sums)
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
