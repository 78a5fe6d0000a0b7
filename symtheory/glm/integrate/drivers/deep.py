"""Numba drivers of :class:`symtheory.glm.factors.deep.LaplaceQMCChannel` (Laplace-centred
mixture importance sampling with randomized QMC over the free rows of a reduced link;
:mod:`symtheory.glm.factors.deep` documents the rule).

:func:`build` makes them from the packed mixing kernel ``kern(u, pars, tout)``:
``rqmc_mixture`` (the proposal of each sample: scan, Newton peaks and their sign-flip
images, adaptation with ridge components) and ``rqmc`` (the RQMC estimates with it).
They reuse the log integrand and its Newton search of :mod:`.posterior` and the mixture
and RQMC pieces of :mod:`.mixture`.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numba
import numpy as np

from ....core import _moments_nb as mnb
from . import mixture as mx
from .posterior import integrand, mixture_workspace, prior_component
from .reduced import workspace


def build(kern, jit):
    """The drivers of one channel (module docstring); ``jit`` compiles and caches them
    for this kernel (:meth:`symtheory.core.codegen.Kernel.drivers`)."""
    _, psi, newton, backtrack = integrand(kern, jit)
    ridge_point = _ridge_point(_grad_hess(psi, jit), backtrack, jit)
    mixture_one = _mixture_one(_search(psi, newton, jit), _adapt(psi, ridge_point, jit), jit)
    return SimpleNamespace(rqmc_mixture=_rqmc_mixture(mixture_one, jit),
                           rqmc=_rqmc(_sample_one(psi, jit), jit))


def _grad_hess(psi, jit):
    @jit()
    def grad_hess(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                  Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u,
                  H, g, xt):
        """log integrand at x, its gradient into g and Hessian into H (central
        differences)."""
        d = x.shape[0]
        h = hstep
        f0 = psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                 logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
        for i in range(d):
            for j in range(i + 1):
                acc = 0.0
                for si in (-1.0, 1.0):
                    for sj in (-1.0, 1.0):
                        xt[:] = x
                        xt[i] += si * h
                        xt[j] += sj * h
                        acc += si * sj * psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows,
                                             solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv,
                                             logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
                H[i, j] = acc / (4 * h * h)
                H[j, i] = H[i, j]
            xt[:] = x
            xt[i] += h
            fp = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                     logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
            xt[i] -= 2 * h
            fm = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                     logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
            g[i] = (fp - fm) / (2 * h)
        return f0
    return grad_hess


def _ridge_point(grad_hess, backtrack, jit):
    @jit()
    def ridge_point(x, s, hstep, pmin, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                    Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u,
                    H, g, xt):
        """Move x (in place) onto the crest of the ridge of the log integrand: Newton
        steps in the stiff directions only (curvature above 4 pmin, the smallest prior
        precision), so x stays where it is along the ridge.  Returns the value there
        (H, g: its derivatives), -inf if the derivatives are not finite."""
        d = x.shape[0]
        f0 = -math.inf
        for it in range(4):
            f0 = grad_hess(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                           Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X,
                           dv, u, H, g, xt)
            if not (f0 > -math.inf and np.all(np.isfinite(g))
                    and np.all(np.isfinite(H))):
                return -math.inf
            if it == 3:
                break
            lam, vec = np.linalg.eigh(-H)
            step = np.zeros(d)
            for i in range(d):
                if lam[i] > 4.0 * pmin:
                    proj = 0.0
                    for j in range(d):
                        proj += vec[j, i] * g[j]
                    for j in range(d):
                        step[j] += proj / lam[i] * vec[j, i]
            t, ft, moved = backtrack(x, step, f0, 20, s, Ebr, lwb, valid, omega, pars,
                                     free_rows, solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv,
                                     logdetC, lk, Xall, tout, Tw, Ew, X, dv, u, xt)
            if not moved:
                break
            x[:] = xt
        return f0
    return ridge_point


@numba.njit(cache=True)
def ridge_factor(H, pmin, inflate, Lc):
    """Lower Cholesky factor of inflate^2 inverse(-H) with the curvatures of -H raised to at
    least pmin (along a ridge the log integrand is flat or convex; the prior bounds the
    spread there).  False if the result is not positive definite."""
    d = H.shape[0]
    lam, vec = np.linalg.eigh(-H)
    for i in range(d):
        for j in range(d):
            acc = 0.0
            for k in range(d):
                acc += vec[i, k] * vec[j, k] / max(lam[k], pmin)
            Lc[i, j] = acc * inflate * inflate
    return mnb.cholesky_logdet(Lc) > -math.inf


def _search(psi, newton, jit):
    @jit()
    def search(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv, logdet_Vuu,
               Bm, Cinv, logdetC, flips, ts, nscan, nstart, inflate, hstep, lk, Xall, tout,
               Tw, Ew, X, dv, u, H, g, xt, x, cm, cL, cw):
        """Laplace centres of sample s (means, Cholesky factors, log Laplace masses into
        cm, cL, cw[1:]; returns the number of components): Newton from the nstart best
        points of the first nscan points of component 0 (a posterior concentrated near a
        curved manifold -- a nearly known solved layer -- has several modes that are not
        images of each other), each mode refined from its images under the sign flips of
        the link (the mixing is even in each flipped group, only the Gaussian factors
        break the symmetry, so an image is a start near another mode, not a mode)."""
        dfree = x.shape[0]
        nflip = flips.shape[0]
        ncomp_max = cm.shape[0]
        ncomp = 1
        topv = np.full(nstart, -math.inf)
        topx = np.zeros((nstart, dfree))
        for j in range(nscan):
            mx.place(cm, cL, 0, ts[j], xt)
            v = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
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
        Lc = np.zeros((dfree, dfree))
        mode = np.zeros(dfree)
        for st in range(nstart):
            if topv[st] == -math.inf or ncomp >= ncomp_max:
                break
            mode[:] = topx[st]
            if mx.dedup(mode, cm, cL, ncomp, g):
                continue               # in the basin of a peak already found
            for im in range(1 + nflip):
                if ncomp >= ncomp_max:
                    break
                for i in range(dfree):
                    x[i] = mode[i] * (1.0 if im == 0 else flips[im - 1, i])
                if im > 0 and mx.dedup(x, cm, cL, ncomp, g):
                    continue
                val = newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                             Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X,
                             dv, u, H, g, xt)
                if not (val > -math.inf and np.all(np.isfinite(x))
                        and np.all(np.isfinite(H)) and mx.laplace_factor(H, inflate, Lc)):
                    continue
                if im == 0:
                    mode[:] = x
                if mx.dedup(x, cm, cL, ncomp, g):
                    continue
                cm[ncomp] = x
                cL[ncomp] = Lc
                # log Laplace mass (up to a common constant): height + log det of the factor
                cw[ncomp] = val
                for i in range(dfree):
                    cw[ncomp] += math.log(Lc[i, i])
                ncomp += 1
        return ncomp
    return search


def _adapt(psi, ridge_point, jit):
    @jit()
    def adapt(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv, logdet_Vuu,
              Bm, Cinv, logdetC, ts, inflate, pmin, ess_add, ess_done, prior_share, n_adapt,
              adapt_inflate, hstep, lk, Xall, tout, Tw, Ew, X, dv, u, H, g, xt, x, cm, cL,
              cLi, clog, cw, ncomp):
        """Adaptive importance sampling on the points ts (returns the new number of
        components): refit each peak component to the weighted points it is responsible
        for (moment matching, population Monte Carlo), and while the weights are uneven
        (effective sample size below ess_add of the points) add a component where the
        heaviest point outside the peaks lies, moved onto the crest of the ridge there:
        when the solved layer is nearly known the posterior lies near a curved manifold
        of u, which Gaussians at its modes do not follow far (the prior component alone
        covers it, with heavy weights); stop once the effective sample size reaches
        ess_done of the points."""
        dfree = x.shape[0]
        ncomp_max = cm.shape[0]
        lqc = np.zeros(ncomp_max)
        xh = np.zeros(dfree)
        Nad = ts.shape[0]
        for it in range(n_adapt):
            if ncomp == 1:
                break
            A0 = np.zeros(ncomp)
            Asq = np.zeros(ncomp)
            A1 = np.zeros((ncomp, dfree))
            A2 = np.zeros((ncomp, dfree, dfree))
            aref = -math.inf
            lw_out = -math.inf
            eref = -math.inf
            sw = 0.0
            sw2 = 0.0
            for jc in range(Nad * ncomp):
                j = jc // ncomp
                c = jc - j * ncomp
                mx.place(cm, cL, c, ts[j], x)
                tot = psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                          logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
                if tot == -math.inf:
                    continue
                lq = mx.mixture_logq(x, cm, cLi, clog, ncomp, lqc)
                lw = tot - lq + math.log(cw[c])
                if not (abs(lw) < math.inf):
                    continue
                aref = mx.refit_add(x, lw, lq, lqc, ncomp, A0, Asq, A1, A2, aref)
                if lw > eref:
                    if eref > -math.inf:
                        sw *= math.exp(eref - lw)
                        sw2 *= math.exp(2 * (eref - lw))
                    eref = lw
                sw += math.exp(lw - eref)
                sw2 += math.exp(2 * (lw - eref))
                if lw > lw_out and not mx.dedup(x, cm, cL, ncomp, g):
                    lw_out = lw
                    xh[:] = x
            if not mx.refit(A0, Asq, A1, A2, cm, cL, cLi, clog, cw, ncomp, prior_share,
                            adapt_inflate):
                break
            if sw * sw >= ess_done * Nad * ncomp * sw2:
                break                  # the weights are even: the mixture follows the posterior
            if (ncomp < ncomp_max and lw_out > -math.inf
                    and sw * sw < ess_add * Nad * ncomp * sw2):
                val = ridge_point(xh, s, hstep, pmin, Ebr, lwb, valid, omega, pars, free_rows,
                                  solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall,
                                  tout, Tw, Ew, X, dv, u, H, g, xt)
                Lc = np.zeros((dfree, dfree))
                if val > -math.inf and ridge_factor(H, pmin, inflate, Lc):
                    cm[ncomp] = xh
                    cL[ncomp] = Lc
                    # a share of the peaks' weight, as the mean peak; the next refit
                    # reweighs by responsibility
                    cw[ncomp] = (1.0 - prior_share) / (ncomp - 1)
                    ncomp += 1
                    mx.renormalize(cm, cL, cLi, clog, cw, ncomp, prior_share)
        return ncomp
    return adapt


def _mixture_one(search, adapt, jit):
    @jit()
    def mixture_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                    logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart, inflate, pmin,
                    ess_add, ess_done, prior_share, n_adapt, adapt_inflate, hstep, out_cm,
                    out_cL, out_cw, out_comp):
        """The proposal mixture of sample s from the search-and-adaptation points ts (a
        scrambling of its own): means, Cholesky factors, weights, count into out_* (a
        plain function: the parallel loop only dispatches, so no allocation in it can be
        hoisted and shared between threads)."""
        M = omega.shape[2]
        pf = free_rows.shape[0]
        r = solved_rows.shape[0]
        K = Ebr.shape[1]
        dfree = pf * M
        ncomp_max = out_cm.shape[1]
        lk, Xall, tout, Tw, Ew, X, dv, u = workspace(K, M, r, pf)
        H, g, xt, x, cm, cL, cLi, clog, cw = mixture_workspace(ncomp_max, dfree)
        prior_component(s, omega, free_rows, Luu, cm, cL)
        ncomp = search(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                       logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart, inflate, hstep,
                       lk, Xall, tout, Tw, Ew, X, dv, u, H, g, xt, x, cm, cL, cw)
        # mixture weights: prior_share on component 0, the rest by the peaks' Laplace masses
        mx.peak_weights(cw, ncomp, prior_share)
        mx.finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
        ncomp = adapt(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                      logdet_Vuu, Bm, Cinv, logdetC, ts, inflate, pmin, ess_add, ess_done,
                      prior_share, n_adapt, adapt_inflate, hstep, lk, Xall, tout, Tw, Ew, X,
                      dv, u, H, g, xt, x, cm, cL, cLi, clog, cw, ncomp)
        out_comp[s] = ncomp
        out_cm[s] = cm
        out_cL[s] = cL
        out_cw[s] = cw
    return mixture_one


def _sample_one(psi, jit):
    @jit()
    def sample_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                   logdet_Vuu, Bm, Cinv, logdetC, mix_m, mix_L, mix_w, mix_n, tn, min_share,
                   tcrit, sd, out_logZ, out_mean, out_cov, out_err, out_sums):
        """The RQMC estimates of sample s over the scramblings tn with its mixture (a
        plain function, as above)."""
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
        lk, Xall, tout, Tw, Ew, X, dv, u = workspace(K, M, r, pf)
        x = np.zeros(dfree)
        z = np.zeros(d)
        cm = mix_m[s].copy()
        cL = mix_L[s].copy()
        cw = mix_w[s].copy()
        cLi = np.zeros(cL.shape)
        clog = np.zeros(ncomp)
        lqc = np.zeros(ncomp)
        mx.finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree)
        # running sums per scrambling, centred at z0 and scaled by exp(-ref)
        S0 = np.zeros(R)
        S1 = np.zeros((R, d))
        S2 = np.zeros((R, d, d))
        z0 = np.zeros(d)
        ref = -math.inf
        broken = False
        # points per component in proportion to its weight (a power of 2, so each takes a
        # whole net: the first 2^m points of a scrambled Sobol sequence; at least
        # min_share Npt): Z = sum_c pi_c mean_j f / q(x_cj) over its n_c points, each
        # point weighted pi_c (Npt / n_c) f / q against the Npt of the sums
        wmax = np.max(cw[:ncomp])
        ncp = np.empty(ncomp, dtype=np.int64)
        lcw = np.empty(ncomp)
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
                mx.place(cm, cL, c, tn[rr, j], x)
                tot = psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                          logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
                if tot == -math.inf:
                    continue
                lq = mx.mixture_logq(x, cm, cLi, clog, ncomp, lqc)
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
                    ref, w = mx.rqmc_add(rr, lw, z, S0, S1, S2, z0, ref)
        mx.rqmc_finish(S0, S1, S2, z0, ref, Npt, tcrit, sd, broken, s, out_logZ, out_mean,
                       out_cov, out_err)
        mx.rqmc_sums(S0, S1, z0, s, out_sums)
    return sample_one


def _rqmc_mixture(mixture_one, jit):
    @jit(parallel=True)
    def rqmc_mixture(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                     logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart, inflate, pmin,
                     ess_add, ess_done, prior_share, n_adapt, adapt_inflate, hstep, out_cm,
                     out_cL, out_cw, out_comp):
        for s in numba.prange(omega.shape[0]):
            mixture_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                        logdet_Vuu, Bm, Cinv, logdetC, flips, ts, nscan, nstart, inflate, pmin,
                        ess_add, ess_done, prior_share, n_adapt, adapt_inflate, hstep, out_cm,
                        out_cL, out_cw, out_comp)
    return rqmc_mixture


def _rqmc(sample_one, jit):
    @jit(parallel=True)
    def rqmc(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv, logdet_Vuu, Bm,
             Cinv, logdetC, mix_m, mix_L, mix_w, mix_n, tn, min_share, tcrit, sd, out_logZ,
             out_mean, out_cov, out_err, out_sums):
        for s in numba.prange(omega.shape[0]):
            sample_one(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                       logdet_Vuu, Bm, Cinv, logdetC, mix_m, mix_L, mix_w, mix_n, tn,
                       min_share, tcrit, sd, out_logZ, out_mean, out_cov, out_err, out_sums)
    return rqmc
