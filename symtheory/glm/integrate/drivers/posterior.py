"""Numba drivers of the posterior rule that follows the posterior (reduced deterministic
channels; :mod:`..posterior_rules` documents the integral), used by
:class:`~symtheory.glm.integrate.reduced_posterior.ReducedPosterior`.

:func:`build` makes them from the packed mixing kernel ``kern(u, pars, tout)`` (the
M x M mixing matrix ``T(u)`` into ``tout``): ``posterior_prior`` (component 0 only: the
rule over the Gaussian marginal of ``u``) and ``posterior`` (the prior and Gaussians at
the peaks of the integrand, power-heuristic shares).  :func:`integrand` gives the log
integrand and its Newton search to :mod:`.deep` too.

The per-point helpers (logterms, logsum, psi) run without reference counting
(``_nrt=False``: no allocation, no array views; :mod:`symtheory.core._moments_nb` says
why).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numba
import numpy as np

from ....core import _moments_nb as mnb
from .reduced import branch_terms, place_u, workspace


def build(kern, jit):
    """The drivers of one reduced posterior (module docstring); ``jit`` compiles and
    caches them for this kernel (:meth:`symtheory.core.codegen.Kernel.drivers`)."""
    logterms, psi, newton, _ = integrand(kern, jit)
    return SimpleNamespace(posterior_prior=_posterior_prior(logterms, jit),
                           posterior=_posterior(psi, _peaks(psi, newton, jit), jit))


def integrand(kern, jit):
    """``(logterms, psi, newton, backtrack)`` of the kernel: the log integrand per branch
    at u, the log integrand at a flat point x, its maximization from x and the line
    search of that."""
    logterms = _logterms(kern, jit)
    psi = _psi(logterms, jit)
    backtrack = _backtrack(psi, jit)
    return logterms, psi, _newton(psi, backtrack, jit), backtrack


@numba.njit(cache=True, error_model="numpy")
def logaddexp(a, b):
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


def _logterms(kern, jit):
    @jit(error_model="numpy", _nrt=False)
    def logterms(u, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                 logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv):
        """log integrand per branch at u (pf x M) into lk; -inf for invalid branches.
        Returns the largest of them (logsum gives the log-sum: the tensor rule needs
        only the branches, and the sum's exps and log were a sixth of its cost)."""
        M = omega.shape[2]
        pf = free_rows.shape[0]
        r = solved_rows.shape[0]
        K = Ebr.shape[1]
        lu = -0.5 * M * (logdet_Vuu + pf * math.log(2.0 * math.pi))
        for m in range(M):
            for a in range(pf):
                da = u[a, m] - omega[s, free_rows[a], m]
                for b in range(pf):
                    lu -= 0.5 * da * Vuu_inv[a, b] * (u[b, m] - omega[s, free_rows[b], m])
        kern(u, pars, tout)
        const = -0.5 * M * logdetC - 0.5 * M * r * math.log(2.0 * math.pi)
        best = -math.inf
        for k in range(K):
            lk[k] = -math.inf
            if valid[s, k] == 0:
                continue
            lp, ldT = branch_terms(s, k, u, tout, Ebr, omega, free_rows, solved_rows, Bm, Cinv,
                                   Tw, Ew, X, dv)
            if ldT == -math.inf:
                continue
            lk[k] = lu + lp + const - r * ldT + lwb[s, k]
            for m in range(M):
                for q in range(r):
                    Xall[k, m, q] = X[m, q]
            if lk[k] > best:
                best = lk[k]
        return best
    return logterms


@numba.njit(cache=True, error_model="numpy", _nrt=False)
def logsum(lk, best):
    """log sum_k exp(lk[k]) given best = max_k lk[k]."""
    if best == -math.inf:
        return best
    acc = 0.0
    for k in range(lk.shape[0]):
        if lk[k] > -math.inf:
            acc += math.exp(lk[k] - best)
    return best + math.log(acc)


def _psi(logterms, jit):
    @jit(error_model="numpy", _nrt=False)
    def psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
            logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u):
        pf = free_rows.shape[0]
        M = omega.shape[2]
        for a in range(pf):
            for m in range(M):
                u[a, m] = x[a * M + m]
        best = logterms(u, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                        Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv)
        return logsum(lk, best)
    return psi


def _backtrack(psi, jit):
    @jit(error_model="numpy")
    def backtrack(x, step, f0, tries, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                  Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u,
                  xt):
        """The first t of 1, 1/2, ... (tries of them) with psi(x + t step) >= f0: (t, that
        value, True), the point in xt; (t, last value, False) if none."""
        t = 1.0
        ft = -math.inf
        for ls in range(tries):
            xt[:] = x + t * step
            ft = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                     logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
            if ft >= f0:
                return t, ft, True
            t *= 0.5
        return t, ft, False
    return backtrack


def _newton(psi, backtrack, jit):
    @jit(error_model="numpy")
    def newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
               Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u,
               H, g, xt):
        """Maximize the log integrand from x (in place) by Newton steps with
        central-difference derivatives and backtracking.  Returns the final value, or -inf
        if the Hessian at the end is not negative definite (no usable peak).  H holds the
        Hessian on exit."""
        d = x.shape[0]
        f0 = psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                 logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
        if f0 == -math.inf:
            return f0
        for it in range(60):
            h = hstep
            for i in range(d):
                xt[:] = x
                xt[i] = x[i] + h
                fp = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                         Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X,
                         dv, u)
                xt[i] = x[i] - h
                fm = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                         Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X,
                         dv, u)
                g[i] = (fp - fm) / (2 * h)
                H[i, i] = (fp - 2 * f0 + fm) / (h * h)
                for j in range(i):
                    xt[:] = x
                    xt[i] += h
                    xt[j] += h
                    fpp = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                              Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                              Ew, X, dv, u)
                    xt[i] -= 2 * h
                    fmp = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                              Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                              Ew, X, dv, u)
                    xt[j] -= 2 * h
                    fmm = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                              Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                              Ew, X, dv, u)
                    xt[i] += 2 * h
                    fpm = psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                              Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                              Ew, X, dv, u)
                    H[i, j] = (fpp - fpm - fmp + fmm) / (4 * h * h)
                    H[j, i] = H[i, j]
            if not (np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
                return -math.inf
            lam, vec = np.linalg.eigh(H)
            # Newton direction on the negative-definite part; gradient ascent elsewhere
            step = np.zeros(d)
            for i in range(d):
                proj = 0.0
                for j in range(d):
                    proj += vec[j, i] * g[j]
                if lam[i] < 0:
                    coef = -proj / lam[i]
                else:
                    coef = proj * 0.5
                for j in range(d):
                    step[j] += coef * vec[j, i]
            nrm = math.sqrt(np.sum(step * step))
            if nrm > 1.0:
                step *= 1.0 / nrm
                nrm = 1.0
            t, ft, improved = backtrack(x, step, f0, 30, s, Ebr, lwb, valid, omega, pars,
                                        free_rows, solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv,
                                        logdetC, lk, Xall, tout, Tw, Ew, X, dv, u, xt)
            if not improved:
                break
            x[:] = xt
            f0 = ft
            if t * nrm < 1e-10 and lam[d - 1] < 0:
                break
        lam = np.linalg.eigvalsh(H)
        if lam[d - 1] >= 0:
            return -math.inf
        return f0
    return newton


def _posterior_prior(logterms, jit):
    @jit(parallel=True, error_model="numpy")
    def posterior_prior(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                        logdet_Vuu, Bm, Cinv, logdetC, tn, tw, out_logZ, out_mean, out_cov):
        """Component 0 only: the rule over the Gaussian marginal of u (no peak search)."""
        n = omega.shape[0]
        P = omega.shape[1]
        M = omega.shape[2]
        pf = free_rows.shape[0]
        r = solved_rows.shape[0]
        K = Ebr.shape[1]
        Kn = tn.shape[0]
        d = P * M
        log_norm0 = -0.5 * M * (logdet_Vuu + pf * math.log(2.0 * math.pi))
        ltw = np.log(tw)
        for s in numba.prange(n):
            lk, Xall, tout, Tw, Ew, X, dv, u = workspace(K, M, r, pf)
            logw = np.empty(Kn * K)
            zs = np.empty((Kn * K, d))
            cnt = 0
            for j in range(Kn):
                place_u(u, s, omega, free_rows, Luu, tn, j)
                # the log prior density of u is part of lk; the rule integrates against it
                lprior = log_norm0
                for m in range(M):
                    for a in range(pf):
                        for b in range(pf):
                            lprior -= 0.5 * (u[a, m] - omega[s, free_rows[a], m]) * Vuu_inv[a, b] * (
                                u[b, m] - omega[s, free_rows[b], m])
                tot = logterms(u, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                               Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                               Ew, X, dv)
                if tot == -math.inf:
                    continue
                for k in range(K):
                    if lk[k] == -math.inf:
                        continue
                    logw[cnt] = ltw[j] + lk[k] - lprior
                    for m in range(M):
                        for a in range(pf):
                            zs[cnt, free_rows[a] * M + m] = u[a, m]
                        for q in range(r):
                            zs[cnt, solved_rows[q] * M + m] = Xall[k, m, q]
                    cnt += 1
            out_logZ[s] = mnb.weighted_moments(logw, zs, cnt, out_mean[s], out_cov[s])
    return posterior_prior


@numba.njit(cache=True)
def mixture_workspace(ncomp_max, dfree):
    """Newton's work arrays H, g, xt, x and a mixture of up to ncomp_max components in
    dfree dimensions: means cm, Cholesky factors cL, their inverses cLi, log-normalizers
    clog, weights cw (zeros)."""
    return (np.zeros((dfree, dfree)), np.zeros(dfree), np.zeros(dfree), np.zeros(dfree),
            np.zeros((ncomp_max, dfree)), np.zeros((ncomp_max, dfree, dfree)),
            np.zeros((ncomp_max, dfree, dfree)), np.zeros(ncomp_max), np.zeros(ncomp_max))


@numba.njit(cache=True, error_model="numpy")
def prior_component(s, omega, free_rows, Luu, cm, cL):
    """Component 0 of the mixture: the Gaussian marginal of u (token-major flattening
    a M + m) into cm[0], cL[0]."""
    M = omega.shape[2]
    pf = free_rows.shape[0]
    for a in range(pf):
        for m in range(M):
            cm[0, a * M + m] = omega[s, free_rows[a], m]
            for b in range(pf):
                cL[0, a * M + m, b * M + m] = Luu[a, b]


def _peaks(psi, newton, jit):
    @jit(error_model="numpy")
    def peaks(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv, logdet_Vuu,
              Bm, Cinv, logdetC, starts, tn, inflate, hstep, lk, Xall, tout, Tw, Ew, X, dv,
              u, H, g, xt, x, cm, cL, cw):
        """Newton peaks of sample s from the given starts, then (scanned only when the
        given ones leave a peak to find: the scan costs Kn integrand values) from the best
        nodes of component 0: means, Cholesky factors of inflate^2 inv(-H + prior
        precision) and log Laplace masses into cm, cL, cw[1:]; returns the number of
        components (1 + peaks)."""
        M = omega.shape[2]
        pf = free_rows.shape[0]
        Kn = tn.shape[0]
        dfree = pf * M
        ncomp_max = cm.shape[0]
        nstart = starts.shape[1]
        ncomp = 1
        best_val = np.full(2, -math.inf)
        best_idx = np.full(2, -1)
        scanned = False
        for st in range(nstart + 2):
            if ncomp >= ncomp_max:
                break
            if st >= nstart and not scanned:
                scanned = True
                for j in range(Kn):
                    for i in range(dfree):
                        acc = cm[0, i]
                        for k2 in range(dfree):
                            acc += cL[0, i, k2] * tn[j, k2]
                        x[i] = acc
                    v = psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                            Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X,
                            dv, u)
                    if v > best_val[0]:
                        best_val[1] = best_val[0]
                        best_idx[1] = best_idx[0]
                        best_val[0] = v
                        best_idx[0] = j
                    elif v > best_val[1]:
                        best_val[1] = v
                        best_idx[1] = j
            if st < nstart:
                if not np.isfinite(starts[s, st, 0]):
                    continue
                for i in range(dfree):
                    x[i] = starts[s, st, i]
            else:
                j = best_idx[st - nstart]
                if j < 0:
                    continue
                for i in range(dfree):
                    acc = cm[0, i]
                    for k2 in range(dfree):
                        acc += cL[0, i, k2] * tn[j, k2]
                    x[i] = acc
            val = newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                         Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv,
                         u, H, g, xt)
            if val == -math.inf:
                continue
            # covariance inflate^2 inv(-H + prior precision): a peak component is never
            # wider than the marginal of u (a flat direction of the log integrand at its
            # maximum would otherwise spread the rule far beyond the mass)
            Prec = -H.copy()
            for a in range(pf):
                for b in range(pf):
                    for m in range(M):
                        Prec[a * M + m, b * M + m] += Vuu_inv[a, b]
            Cov = np.linalg.inv(Prec) * (inflate * inflate)
            Cov = 0.5 * (Cov + Cov.T)
            dup = False
            for c in range(1, ncomp):
                # Mahalanobis distance to an existing peak
                dlt = x - cm[c]
                y = np.linalg.solve(cL[c], dlt)
                if np.sum(y * y) < 1.0:
                    dup = True
                    break
            if dup:
                continue
            L = np.linalg.cholesky(Cov)
            cm[ncomp] = x
            cL[ncomp] = L
            # Laplace mass of the peak: exp(val) sqrt(det(2 pi inv(-H)))
            sgn, ldH = np.linalg.slogdet(-H)
            cw[ncomp] = val - 0.5 * ldH + 0.5 * dfree * math.log(2 * math.pi)
            ncomp += 1
        return ncomp
    return peaks


@numba.njit(cache=True, error_model="numpy")
def log_weights(cw, ncomp, prior_weight):
    """Mixture log-weights into cw: prior_weight on component 0 when peaks exist, the
    rest by the peaks' Laplace masses (cw[1:ncomp] on entry)."""
    if ncomp == 1:
        cw[0] = 0.0
        return
    top = -math.inf
    for c in range(1, ncomp):
        if cw[c] > top:
            top = cw[c]
    tot = 0.0
    for c in range(1, ncomp):
        tot += math.exp(cw[c] - top)
    for c in range(1, ncomp):
        cw[c] = math.log(1.0 - prior_weight) + cw[c] - top - math.log(tot)
    cw[0] = math.log(prior_weight)


def _posterior(psi, peaks, jit):
    @jit(parallel=True, error_model="numpy")
    def posterior(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                  logdet_Vuu, Bm, Cinv, logdetC, starts, tn, tw, max_peaks, inflate,
                  prior_weight, power, hstep, out_logZ, out_mean, out_cov, out_peaks):
        n = omega.shape[0]
        P = omega.shape[1]
        M = omega.shape[2]
        pf = free_rows.shape[0]
        r = solved_rows.shape[0]
        K = Ebr.shape[1]
        Kn = tn.shape[0]
        dfree = pf * M
        d = P * M
        ncomp_max = 1 + max_peaks
        ltw = np.log(tw)
        for s in numba.prange(n):
            lk, Xall, tout, Tw, Ew, X, dv, u = workspace(K, M, r, pf)
            H, g, xt, x, cm, cL, cLi, clog, cw = mixture_workspace(ncomp_max, dfree)
            prior_component(s, omega, free_rows, Luu, cm, cL)
            ncomp = 1
            if max_peaks > 0 and dfree > 0:
                ncomp = peaks(s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                              logdet_Vuu, Bm, Cinv, logdetC, starts, tn, inflate, hstep, lk,
                              Xall, tout, Tw, Ew, X, dv, u, H, g, xt, x, cm, cL, cw)
            log_weights(cw, ncomp, prior_weight)
            out_peaks[s] = ncomp - 1
            for c in range(ncomp):
                ld = 0.0
                for i in range(dfree):
                    ld += math.log(cL[c, i, i])
                clog[c] = -ld - 0.5 * dfree * math.log(2 * math.pi)
                cLi[c] = np.linalg.inv(cL[c]) if dfree > 0 else cL[c]
            npts = ncomp * Kn * K
            logw = np.empty(npts)
            zs = np.empty((npts, d))
            cnt = 0
            for c in range(ncomp):
                for j in range(Kn):
                    for i in range(dfree):
                        acc = cm[c, i]
                        for k2 in range(dfree):
                            acc += cL[c, i, k2] * tn[j, k2]
                        x[i] = acc
                    # the share h_c = (pi_c N_c)^power / sum_c2 (pi_c2 N_c2)^power of this
                    # component at x (power 1: the balance heuristic, h_c = pi_c N_c / q)
                    lq = -math.inf
                    lnc = 0.0
                    for c2 in range(ncomp):
                        qq = 0.0
                        for i in range(dfree):
                            acc = 0.0
                            for k2 in range(dfree):
                                acc += cLi[c2, i, k2] * (x[k2] - cm[c2, k2])
                            qq += acc * acc
                        if c2 == c:
                            lnc = clog[c2] - 0.5 * qq
                        lq = logaddexp(lq, power * (cw[c2] + clog[c2] - 0.5 * qq))
                    lshare = power * (cw[c] + lnc) - lq - lnc      # log(h_c / N_c)
                    tot = psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                              Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                              X, dv, u)
                    if tot == -math.inf:
                        continue
                    for k in range(K):
                        if lk[k] == -math.inf:
                            continue
                        logw[cnt] = ltw[j] + lshare + lk[k]
                        for a in range(pf):
                            for m in range(M):
                                zs[cnt, free_rows[a] * M + m] = x[a * M + m]
                        for q in range(r):
                            for m in range(M):
                                zs[cnt, solved_rows[q] * M + m] = Xall[k, m, q]
                        cnt += 1
            out_logZ[s] = mnb.weighted_moments(logw, zs, cnt, out_mean[s], out_cov[s])
    return posterior
