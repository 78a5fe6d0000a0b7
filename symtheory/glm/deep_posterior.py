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

import math
from dataclasses import dataclass

import numpy as np

from ..core.codegen import Kernel
from ..core.quadrature import AdaptiveRule, TensorRule
from ..core.validate import ParameterError
from ._posterior_rules import TEMPLATE as _PEAK_TEMPLATE
from .multi_index import ChannelAccuracy, MultiIndexModel, ReducedChannel


@dataclass(frozen=True)
class LaplaceQMCRule:
    """Accuracy request and budget of :class:`LaplaceQMCChannel`.

    ``tol``: target of the per-sample error (95% half-width over the scramblings, natural
    units); ``points``: Sobol points per component and scrambling at the first level (a
    power of 2); ``max_points``: the largest level; ``scrambles``: independent
    randomizations (>= 4, error estimate); ``inflate``: widening of the Laplace
    covariances (>= 1); ``prior_share``: weight of the defensive component; ``adapt``: rounds of
    moment-matching refits of the peak components (adaptive importance sampling); ``scan``: component-0 points scanned for a start; ``seed``: the
    randomization (fixed, so the moments are a deterministic function of the inputs).
    """

    tol: float = 3e-3
    points: int = 256
    max_points: int = 4096
    scrambles: int = 8
    inflate: float = 1.5
    prior_share: float = 0.15
    adapt: int = 2
    scan: int = 64
    seed: int = 12345

    def __post_init__(self):
        if not (self.tol > 0 and math.isfinite(self.tol)):
            raise ParameterError(f"tol must be finite and > 0, got {self.tol}")
        for name in ("points", "max_points"):
            v = int(getattr(self, name))
            if v < 2 or v & (v - 1):
                raise ParameterError(f"{name} must be a power of 2 >= 2, got {v}")
        if self.max_points < self.points:
            raise ParameterError(f"max_points ({self.max_points}) must be >= points ({self.points})")
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

    def describe(self) -> str:
        return (f"Laplace-centred RQMC (Sobol {self.points}..{self.max_points} points per "
                f"component x {self.scrambles} scramblings, inflate {self.inflate:g}, "
                f"tol {self.tol:g})")

    def normal_points(self, dim: int, n: int) -> np.ndarray:
        """``(scrambles + 1, n, dim)`` standard normal RQMC points (the last one for the
        search and the adaptation of the proposal) (inverse CDF of scrambled
        Sobol nets, whose first ``2^m`` points are a net for every ``m``)."""
        from scipy.stats import norm, qmc

        ss = np.random.SeedSequence(self.seed)
        out = np.empty((self.scrambles + 1, n, dim))
        for r, child in enumerate(ss.spawn(self.scrambles + 1)):
            sob = qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng(child))
            out[r] = norm.ppf(sob.random_base2(int(round(math.log2(n)))))
        return out


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
            extra_source=(_PEAK_TEMPLATE + _DRIVER).replace("CALL_ARGS", call))
        # sign flips of u (token-major flattening a M + m) that leave the link unchanged
        free = list(model.free_rows)
        flips = []
        for group, even in model.even_groups.items():
            if even and set(group) <= set(free):
                f = np.ones(pf * M)
                for a in group:
                    f[free.index(a) * M:(free.index(a) + 1) * M] = -1.0
                flips.append(f)
        patterns = [np.ones(pf * M)]
        for f in flips:
            patterns += [p * f for p in patterns]
        self.flips = np.ascontiguousarray(patterns[1:] if patterns[1:] else np.zeros((0, pf * M)))
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
        n, P, M = omega.shape
        E, logjac, valid = self.branches(y)
        lwb = -logjac if include_jacobian else np.zeros_like(logjac)
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
        fixed = (np.ascontiguousarray(E), np.ascontiguousarray(lwb), valid)
        mats = (np.array(list(self.model.params.values()), dtype=float), self.free_rows,
                self.solved_rows, np.ascontiguousarray(np.linalg.cholesky(Vuu)),
                np.ascontiguousarray(Vuu_inv), float(np.linalg.slogdet(Vuu)[1]),
                np.ascontiguousarray(B), np.ascontiguousarray(np.linalg.inv(C)),
                float(np.linalg.slogdet(C)[1]))
        logZ, mean = np.empty(n), np.empty((n, P * M))
        cov, err = np.empty((n, P * M, P * M)), np.full(n, np.inf)
        comps, used = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        drive = self.qmc_kernel.extra("{name}_rqmc")
        tcrit = _student_t95(rule.scrambles - 1)
        todo = np.arange(n)
        npts = rule.points
        while todo.size:
            tn = self._rqmc_points(npts)
            sub = [a[todo] for a in fixed]
            out = (np.empty(todo.size), np.empty((todo.size, P * M)),
                   np.empty((todo.size, P * M, P * M)), np.empty(todo.size),
                   np.empty(todo.size, dtype=np.int64))
            drive(*sub, np.ascontiguousarray(omega[todo]), *mats, self.flips, tn,
                  int(rule.scan), float(rule.inflate), float(rule.prior_share),
                  int(rule.adapt), 1.2, 1e-4, float(tcrit), sd, *out)
            logZ[todo], mean[todo], cov[todo], err[todo], comps[todo] = out
            used[todo] = npts
            if npts >= rule.max_points:
                break
            todo = todo[~(err[todo] <= rule.tol)]
            npts = min(4 * npts, rule.max_points)
        self.components = comps
        self.points_used = used
        method = (f"reduction (smi.md 9) + {rule.describe()}; error = 95% half-width over the "
                  f"scramblings; {comps.mean():.2f} components and {used.mean():.0f} points per "
                  "component and scrambling on average")
        self._record(method, rule.tol, err)
        return logZ, mean.reshape(n, P, M), cov


def _student_t95(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


# The driver reuses ``{name}_logterms`` / ``{name}_psi`` / ``{name}_newton`` of
# :mod:`._posterior_rules` (log integrand per branch; Newton with central differences).
_DRIVER = '''

@numba.njit(cache=True)
def {name}_mixture_logq(x, cm, cLi, clog, ncomp, lqc):
    """log of the Gaussian mixture density at x (clog holds log weight - log det); the
    log of each weighted component into lqc."""
    dfree = x.shape[0]
    lq = -math.inf
    for c in range(ncomp):
        qq = 0.0
        for i in range(dfree):
            acc = 0.0
            for k in range(i + 1):
                acc += cLi[c, i, k] * (x[k] - cm[c, k])
            qq += acc * acc
        lqc[c] = clog[c] - 0.5 * qq
        lq = {name}_logaddexp(lq, lqc[c])
    return lq


@numba.njit(cache=True)
def {name}_tril_solve(L, b, out):
    """out = inverse(L) b for a lower-triangular L (no LAPACK: nothing may raise inside the
    parallel region)."""
    n = L.shape[0]
    for i in range(n):
        acc = b[i]
        for k in range(i):
            acc -= L[i, k] * out[k]
        out[i] = acc / L[i, i]


@numba.njit(cache=True)
def {name}_place(cm, cL, c, t, x):
    """x = m_c + L_c t: the point of component c at the standard normal node t."""
    for i in range(x.shape[0]):
        acc = cm[c, i]
        for k in range(i + 1):
            acc += cL[c, i, k] * t[k]
        x[i] = acc


@numba.njit(cache=True)
def {name}_finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree):
    """log(weight / det) and the inverse Cholesky factor of every component."""
    e = numpy.zeros(dfree)
    col = numpy.zeros(dfree)
    for c in range(ncomp):
        ld = 0.0
        for i in range(dfree):
            ld += math.log(abs(cL[c, i, i]))
        clog[c] = math.log(cw[c]) - ld - 0.5 * dfree * math.log(2 * math.pi)
        for j in range(dfree):
            e[:] = 0.0
            e[j] = 1.0
            {name}_tril_solve(cL[c], e, col)
            for i in range(dfree):
                cLi[c, i, j] = col[i]


@numba.njit(cache=True)
def {name}_laplace_factor(H, inflate, Lc):
    """Lower Cholesky factor of inflate^2 inverse(-H) into Lc; False if -H is not
    numerically positive definite."""
    d = H.shape[0]
    A = -H.copy()
    if symtheory.core._moments_nb.cholesky_logdet(A) == -math.inf:
        return False
    e = numpy.zeros(d)
    for j in range(d):
        e[:] = 0.0
        e[j] = 1.0
        symtheory.core._moments_nb.cholesky_solve(A, e)
        for i in range(d):
            Lc[i, j] = e[i] * inflate * inflate
    for i in range(d):
        for j in range(i):
            v = 0.5 * (Lc[i, j] + Lc[j, i])
            Lc[i, j] = v
            Lc[j, i] = v
    return symtheory.core._moments_nb.cholesky_logdet(Lc) > -math.inf


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
                dup = False
                for c in range(1, ncomp):
                    dlt = xt - cm[c]
                    {name}_tril_solve(cL[c], dlt, g)
                    if numpy.sum(g * g) < 1.0:
                        dup = True
                        break
                if dup:
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
    if ncomp == 1:
        cw[0] = 1.0
    else:
        top = numpy.max(cw[1:ncomp])
        tot = 0.0
        for c in range(1, ncomp):
            cw[c] = math.exp(cw[c] - top)
            tot += cw[c]
        for c in range(1, ncomp):
            cw[c] *= (1.0 - prior_share) / tot
        cw[0] = prior_share
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
            if lw > aref:
                if aref > -math.inf:
                    f = math.exp(aref - lw)
                    A0 *= f
                    Asq *= f * f
                    A1 *= f
                    A2 *= f
                aref = lw
            w = math.exp(lw - aref)
            for c2 in range(1, ncomp):
                wr = w * math.exp(lqc[c2] - lq)
                A0[c2] += wr
                Asq[c2] += wr * wr
                for i in range(dfree):
                    A1[c2, i] += wr * x[i]
                    for k2 in range(i + 1):
                        A2[c2, i, k2] += wr * x[i] * x[k2]
        tot_mass = 0.0
        for c in range(1, ncomp):
            tot_mass += A0[c]
        if not tot_mass > 0:
            break
        for c in range(1, ncomp):
            # refit only with enough effective points (ESS >= 4 (d + 1))
            if A0[c] <= 0 or A0[c] * A0[c] < 4.0 * (dfree + 1) * Asq[c]:
                continue
            mu = A1[c] / A0[c]
            Cv = numpy.empty((dfree, dfree))
            for i in range(dfree):
                for k2 in range(i + 1):
                    Cv[i, k2] = (A2[c, i, k2] / A0[c] - mu[i] * mu[k2]) * adapt_inflate ** 2
                    Cv[k2, i] = Cv[i, k2]
            if not numpy.all(numpy.isfinite(Cv)):
                continue
            if symtheory.core._moments_nb.cholesky_logdet(Cv) == -math.inf:
                continue
            cm[c] = mu
            cL[c] = Cv
        for c in range(1, ncomp):
            cw[c] = (1.0 - prior_share) * max(A0[c], 1e-3 * tot_mass) / tot_mass
        nrm = 0.0
        for c in range(1, ncomp):
            nrm += cw[c]
        for c in range(1, ncomp):
            cw[c] *= (1.0 - prior_share) / nrm
        {name}_finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
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
                if ref == -math.inf:
                    ref = lw
                    z0[:] = z
                if lw > ref:
                    f = math.exp(ref - lw)
                    S0 *= f
                    S1 *= f
                    S2 *= f
                    ref = lw
                w = math.exp(lw - ref)
                S0[rr] += w
                for a in range(d):
                    za = z[a] - z0[a]
                    S1[rr, a] += w * za
                    for b in range(a + 1):
                        S2[rr, a, b] += w * za * (z[b] - z0[b])
    # pooled estimate and the spread of the R per-scrambling estimates
    T0 = numpy.sum(S0)
    if not (T0 > 0) or ref == -math.inf:
        out_logZ[s] = -math.inf
        out_mean[s] = numpy.nan
        out_cov[s] = numpy.nan
        out_err[s] = math.inf
        return
    nq = Npt
    out_logZ[s] = ref + math.log(T0 / (R * nq))
    mu = numpy.zeros(d)
    for a in range(d):
        mu[a] = numpy.sum(S1[:, a]) / T0
        out_mean[s, a] = z0[a] + mu[a]
    for a in range(d):
        for b in range(a + 1):
            v = numpy.sum(S2[:, a, b]) / T0 - mu[a] * mu[b]
            out_cov[s, a, b] = v
            out_cov[s, b, a] = v
    # error: sample standard deviation of the per-scrambling moments / sqrt(R), x t_95
    err = 0.0
    if numpy.min(S0) <= 0 or broken:
        err = math.inf
    else:
        nmom = 1 + d + d * (d + 1) // 2
        est = numpy.empty((R, nmom))
        for rr in range(R):
            est[rr, 0] = math.log(S0[rr])
            k = 1
            for a in range(d):
                est[rr, k] = (S1[rr, a] / S0[rr]) / sd[a]
                k += 1
            for a in range(d):
                for b in range(a + 1):
                    est[rr, k] = (S2[rr, a, b] / S0[rr] - S1[rr, a] * S1[rr, b] / (S0[rr] * S0[rr])) / (sd[a] * sd[b])
                    k += 1
        for k in range(nmom):
            mk = numpy.mean(est[:, k])
            var = numpy.sum((est[:, k] - mk) ** 2) / (R - 1)
            err = max(err, tcrit * math.sqrt(var / R))
    out_err[s] = err


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
