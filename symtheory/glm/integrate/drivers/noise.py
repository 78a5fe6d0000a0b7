"""Fused Numba drivers of :class:`~symtheory.glm.factors.gaussian_noise.GaussianNoiseChannel`.

:func:`build` makes them for one channel from its kernel ``kern(zR, pars, kout)`` (the
packed affine-split kernel: ``A(z_R), b(z_R)`` of ``g = A z_S + b`` into ``kout``,
followed by their derivatives ``dA/dz_R, db/dz_R``):

* ``tensor``    sum over given nodes ``(t, w)`` of ``E f(t)``, ``t ~ N(0, I)``
  (prior-whitened ``z_R``);
* ``adaptive``  ``|R| = 1``: composite Gauss-Legendre split at the link's jumps, panels
  doubled until the moments change by < rtol, domain grown until the neglected mass is
  < rtol Z_out (GaussianNoiseChannel docstring);
* ``laplace``   ``|R| >= 2``: Laplace-centred mixture importance sampling with RQMC
  (:mod:`..laplace_qmc`, pieces in :mod:`.mixture`) in prior-whitened
  ``z_R = omega_R + L t``.

The per-point helpers (node, lf_psi) run without reference counting (``_nrt=False``: no
allocation, no array views; :mod:`symtheory.core._moments_nb` says why).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numba
import numpy as np

from ....core import _moments_nb as mnb
from . import mixture as mx


def build(kern, jit):
    """The drivers of one channel (module docstring); ``jit`` compiles and caches them
    for this kernel (:meth:`symtheory.core.codegen.Kernel.drivers`)."""
    node = _node(kern, jit)
    lf_psi = _lf_psi(node, jit)
    laplace_one = _laplace_one(lf_psi, _search(lf_psi, jit), _adapt(lf_psi, jit), jit)
    return SimpleNamespace(tensor=_tensor(node, jit), adaptive=_adaptive(node, jit),
                           laplace=_laplace(laplace_one, jit))


@numba.njit(cache=True)
def workspace(n_out, nS, nR):
    """The work arrays of node: kout, A, bvec, mS, post, zR, AC, Sw, vec (one set per
    sample: each thread of the parallel loops owns its own)."""
    return (np.empty(n_out * (nS + 1) * (1 + nR)), np.empty((n_out, nS)), np.empty(n_out),
            np.empty(nS), np.empty(nS), np.empty(nR), np.empty((n_out, nS)),
            np.empty((n_out, n_out)), np.empty((3, n_out)))


def _node(kern, jit):
    @jit(_nrt=False)
    def node(ys, oms, pars, delta, zR, S_idx, R_idx, Kmat, Ccond, kout, A, bvec, mS, post,
             zfull, within, AC, Sw, vec):
        """log N(y; A m + b, A C A^T + delta I) at z_R; z_S's conjugate posterior into
        zfull/within."""
        kern(zR, pars, kout)
        n_out = ys.shape[0]
        nS = S_idx.shape[0]
        for i in range(n_out):
            for j in range(nS):
                A[i, j] = kout[i * nS + j]
            bvec[i] = kout[n_out * nS + i]
        for j in range(nS):
            acc = oms[S_idx[j]]
            for r in range(R_idx.shape[0]):
                acc += Kmat[j, r] * (zR[r] - oms[R_idx[r]])
            mS[j] = acc
        logl = mnb.gaussian_conjugate(A, bvec, ys, mS, Ccond, delta, post, within, AC, Sw, vec)
        for r in range(R_idx.shape[0]):
            zfull[R_idx[r]] = zR[r]
        for j in range(nS):
            zfull[S_idx[j]] = post[j]
        return logl
    return node


def _tensor(node, jit):
    @jit(parallel=True)
    def tensor(y, omega, pars, delta, S_idx, R_idx, Kmat, Ccond, L_RR, tn, tw, out_logZ,
               out_mean, out_cov):
        n = omega.shape[0]
        d = omega.shape[1]
        nS = S_idx.shape[0]
        nR = R_idx.shape[0]
        n_out = y.shape[1]
        Kn = tn.shape[0]
        for s in numba.prange(n):
            logw = np.empty(Kn)
            zs = np.empty((Kn, d))
            within = np.empty((Kn, nS, nS))
            kout, A, bvec, mS, post, zR, AC, Sw, vec = workspace(n_out, nS, nR)
            for j in range(Kn):
                for r in range(nR):
                    acc = omega[s, R_idx[r]]
                    for q in range(r + 1):
                        acc += L_RR[r, q] * tn[j, q]
                    zR[r] = acc
                logw[j] = math.log(tw[j]) + node(y[s], omega[s], pars, delta, zR, S_idx, R_idx,
                                                 Kmat, Ccond, kout, A, bvec, mS, post, zs[j],
                                                 within[j], AC, Sw, vec)
            out_logZ[s] = mnb.mixture_moments(logw, zs, within, S_idx, Kn, out_mean[s],
                                              out_cov[s])
    return tensor


def _adaptive(node, jit):
    @jit(parallel=True)
    def adaptive(y, omega, pars, delta, S_idx, R_idx, Kmat, Ccond, sdR, zbreaks, gl_x, gl_w,
                 sd, rtol, min_level, max_level, T0, T_max, log_lsup, out_logZ, out_mean,
                 out_cov, out_err, out_level):
        n = omega.shape[0]
        d = omega.shape[1]
        nS = S_idx.shape[0]
        n_out = y.shape[1]
        ngl = gl_x.shape[0]
        nb = zbreaks.shape[0]
        log_sqrt_2pi = 0.5 * math.log(2.0 * math.pi)
        for s in numba.prange(n):
            kout, A, bvec, mS, post, zR, AC, Sw, vec = workspace(n_out, nS, 1)
            pts = np.empty(nb + 2)
            mean0 = np.empty(d)
            cov0 = np.empty((d, d))
            logz0 = 0.0
            logz1 = -math.inf
            err = math.inf
            level = min_level
            T = T0
            om = omega[s, R_idx[0]]
            while True:
                pts[0] = -T
                npc = 1
                for k in range(nb):
                    tb = (zbreaks[k] - om) / sdR
                    if pts[npc - 1] < tb < T:
                        pts[npc] = tb
                        npc += 1
                pts[npc] = T
                err = math.inf
                for level in range(min_level, max_level + 1):
                    npan = 2 ** level
                    count = npc * npan * ngl
                    logw = np.empty(count)
                    zs = np.empty((count, d))
                    within = np.empty((count, nS, nS))
                    j = 0
                    for p in range(npc):
                        h = (pts[p + 1] - pts[p]) / npan
                        for q in range(npan):
                            mid = pts[p] + (q + 0.5) * h
                            for g in range(ngl):
                                t = mid + 0.5 * h * gl_x[g]
                                zR[0] = om + sdR * t
                                logw[j] = (math.log(0.5 * h * gl_w[g]) - 0.5 * t * t
                                           - log_sqrt_2pi
                                           + node(y[s], omega[s], pars, delta, zR, S_idx,
                                                  R_idx, Kmat, Ccond, kout, A, bvec, mS, post,
                                                  zs[j], within[j], AC, Sw, vec))
                                j += 1
                    logz1 = mnb.mixture_moments(logw, zs, within, S_idx, count, out_mean[s],
                                                out_cov[s])
                    if level > min_level:
                        err = mnb.moment_change(logz0, mean0, cov0, logz1, out_mean[s],
                                                out_cov[s], sd)
                        if err <= rtol:
                            break
                    logz0 = logz1
                    mean0[:] = out_mean[s]
                    cov0[:, :] = out_cov[s]
                # neglected mass <= sup(lik) 2 Q(T) <= exp(log_lsup - T^2/2): below rtol Z_out?
                T_need = math.sqrt(2.0 * max(0.0, log_lsup - logz1 - math.log(rtol)))
                if T_need <= T or T >= T_max:
                    break
                T = min(T_need + 0.5, T_max)
            out_logZ[s] = logz1
            out_err[s] = max(err, math.exp(min(0.0, log_lsup - 0.5 * T * T - logz1)))
            out_level[s] = level
    return adaptive


def _lf_psi(node, jit):
    @jit(_nrt=False)
    def lf_psi(t, ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout, A, bvec, mS,
               post, zfull, within, AC, Sw, vec, zR):
        """log of N(t; 0, I) P(y | z_R = omega_R + L t) (z_S integrated); z's conjugate
        posterior given z_R into zfull / within, A, b and their derivatives into kout."""
        nR = R_idx.shape[0]
        lp = -0.5 * nR * math.log(2.0 * math.pi)
        for r in range(nR):
            acc = oms[R_idx[r]]
            for q in range(r + 1):
                acc += L[r, q] * t[q]
            zR[r] = acc
            lp -= 0.5 * t[r] * t[r]
        return lp + node(ys, oms, pars, delta, zR, S_idx, R_idx, Kmat, Ccond, kout, A, bvec,
                         mS, post, zfull, within, AC, Sw, vec)
    return lf_psi


@numba.njit(cache=True)
def lf_gauss_newton(ys, L, delta, kout, A, bvec, mS, Kmat, nR, t, grad, Hn):
    """At the point of the last lf_psi call: the gradient of
    F(t) = |t|^2/2 + |y - A m - b|^2/(2 delta) into grad and its Gauss-Newton Hessian
    I + J^T J / delta (J = d(A m + b)/dt) into Hn.  F = -log integrand + const when z_S is
    empty; otherwise the term A C A^T of the covariance is left out (the proposal only
    needs a close centre and scale: the estimator stays unbiased)."""
    n_out = ys.shape[0]
    nS = mS.shape[0]
    o1 = n_out * (nS + 1)
    o2 = o1 + n_out * nS * nR
    for r in range(nR):
        grad[r] = t[r]
        for q in range(nR):
            Hn[r, q] = 1.0 if r == q else 0.0
    Jz = np.empty(nR)
    Jt = np.empty(nR)
    for i in range(n_out):
        res = ys[i] - bvec[i]
        for j in range(nS):
            res -= A[i, j] * mS[j]
        for r in range(nR):
            acc = kout[o2 + i * nR + r]
            for j in range(nS):
                acc += kout[o1 + (i * nS + j) * nR + r] * mS[j] + A[i, j] * Kmat[j, r]
            Jz[r] = acc
        for q in range(nR):
            acc = 0.0
            for r in range(q, nR):
                acc += Jz[r] * L[r, q]
            Jt[q] = acc
        for r in range(nR):
            grad[r] -= Jt[r] * res / delta
            for q in range(nR):
                Hn[r, q] += Jt[r] * Jt[q] / delta


def _search(lf_psi, jit):
    @jit()
    def search(ys, oms, pars, delta, S_idx, R_idx, Kmat, Ccond, L, flips, tn, nscan, inflate,
               kout, A, bvec, mS, post, zR, AC, Sw, vec, zfull, within, t, cm, cL, cw):
        """Laplace peaks of one sample (means, Cholesky factors, log masses into cm, cL,
        cw[1:]; returns the number of components): Gauss-Newton from the prior mean (t = 0
        in whitened t), its images under the flips and the two best of the first nscan
        points of tn[-1] (the scrambling for the scan and the adaptation)."""
        nR = R_idx.shape[0]
        nflip = flips.shape[0]
        R = tn.shape[0] - 1
        nstart = 3 + nflip             # prior mean, its flip images, two best scan points
        tt = np.zeros(nR)
        grad = np.zeros(nR)
        Hn = np.zeros((nR, nR))
        step = np.zeros(nR)
        work = np.zeros(nR)
        Lc = np.zeros((nR, nR))
        starts = np.zeros((nstart, nR))
        # starts: t = 0 (prior mean), its images under the flips (z_R -> f z_R), the best
        # two of the first nscan points of the prior
        for k in range(nflip):
            for r in range(nR):
                work[r] = (flips[k, r] - 1.0) * oms[R_idx[r]]
            mx.tril_solve(L, work, step)
            starts[1 + k] = step
        b1 = -math.inf
        b2 = -math.inf
        for j in range(nscan):
            v = lf_psi(tn[R, j], ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout, A,
                       bvec, mS, post, zfull, within, AC, Sw, vec, zR)
            if v > b1:
                b2 = b1
                starts[nstart - 1] = starts[nstart - 2]
                b1 = v
                starts[nstart - 2] = tn[R, j]
            elif v > b2:
                b2 = v
                starts[nstart - 1] = tn[R, j]
        ncomp = 1
        for st in range(nstart):
            t[:] = starts[st]
            if st >= nstart - 2 and (b1 if st == nstart - 2 else b2) == -math.inf:
                continue
            if mx.dedup(t, cm, cL, ncomp, work):
                continue
            # Gauss-Newton ascent with backtracking on the exact log integrand
            f0 = lf_psi(t, ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout, A,
                        bvec, mS, post, zfull, within, AC, Sw, vec, zR)
            if f0 == -math.inf:
                continue
            for it in range(50):
                lf_gauss_newton(ys, L, delta, kout, A, bvec, mS, Kmat, nR, t, grad, Hn)
                Lc[:, :] = Hn
                mnb.cholesky_logdet(Lc)
                for r in range(nR):
                    step[r] = -grad[r]
                mnb.cholesky_solve(Lc, step)
                alpha = 1.0
                ok = False
                for ls in range(30):
                    for r in range(nR):
                        tt[r] = t[r] + alpha * step[r]
                    ft = lf_psi(tt, ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout,
                                A, bvec, mS, post, zfull, within, AC, Sw, vec, zR)
                    if ft >= f0:
                        ok = True
                        break
                    alpha *= 0.5
                if not ok:
                    break
                t[:] = tt
                f0 = ft
                if alpha * math.sqrt(np.sum(step * step)) < 1e-10:
                    break
            # kout etc. now hold the last evaluated point: re-evaluate at t
            f0 = lf_psi(t, ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout, A,
                        bvec, mS, post, zfull, within, AC, Sw, vec, zR)
            lf_gauss_newton(ys, L, delta, kout, A, bvec, mS, Kmat, nR, t, grad, Hn)
            if not (f0 > -math.inf and np.all(np.isfinite(t))
                    and np.all(np.isfinite(Hn))):
                continue
            if mx.dedup(t, cm, cL, ncomp, work):
                continue
            if not mx.laplace_factor(-Hn, inflate, Lc):
                continue
            cm[ncomp] = t
            cL[ncomp] = Lc
            # log Laplace mass exp(f0) det(inflate^2 inv(Hn))^(1/2) up to a common constant
            ld = 0.0
            for r in range(nR):
                ld += math.log(Lc[r, r])
            cw[ncomp] = f0 + ld
            ncomp += 1
        return ncomp
    return search


def _adapt(lf_psi, jit):
    @jit()
    def adapt(ys, oms, pars, delta, S_idx, R_idx, Kmat, Ccond, L, tn, prior_share, n_adapt,
              adapt_inflate, kout, A, bvec, mS, post, zR, AC, Sw, vec, zfull, within, t, cm,
              cL, cLi, clog, cw, ncomp):
        """n_adapt rounds of adaptive importance sampling on the extra scrambling tn[-1]:
        moment-matching refits of the peak components (see laplace_qmc)."""
        nR = R_idx.shape[0]
        R = tn.shape[0] - 1
        Npt = tn.shape[1]
        lqc = np.zeros(cm.shape[0])
        for it in range(n_adapt):
            if ncomp == 1:
                break
            A0 = np.zeros(ncomp)
            Asq = np.zeros(ncomp)
            A1 = np.zeros((ncomp, nR))
            A2 = np.zeros((ncomp, nR, nR))
            aref = -math.inf
            for jc in range(Npt * ncomp):
                j = jc // ncomp
                c = jc - j * ncomp
                mx.place(cm, cL, c, tn[R, j], t)
                v = lf_psi(t, ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout, A,
                           bvec, mS, post, zfull, within, AC, Sw, vec, zR)
                if v == -math.inf:
                    continue
                lq = mx.mixture_logq(t, cm, cLi, clog, ncomp, lqc)
                lw = v - lq + math.log(cw[c])
                if not (abs(lw) < math.inf):
                    continue
                aref = mx.refit_add(t, lw, lq, lqc, ncomp, A0, Asq, A1, A2, aref)
            if not mx.refit(A0, Asq, A1, A2, cm, cL, cLi, clog, cw, ncomp, prior_share,
                            adapt_inflate):
                break
    return adapt


def _laplace_one(lf_psi, search, adapt, jit):
    @jit()
    def laplace_one(s, y, omega, pars, delta, S_idx, R_idx, Kmat, Ccond, L, flips, tn, nscan,
                    inflate, prior_share, n_adapt, adapt_inflate, tcrit, sd, out_logZ,
                    out_mean, out_cov, out_err, out_comp, out_sums):
        """One sample of laplace (a plain function: the parallel loop only dispatches)."""
        d = omega.shape[1]
        nS = S_idx.shape[0]
        nR = R_idx.shape[0]
        n_out = y.shape[1]
        R = tn.shape[0] - 1            # tn[R]: the scrambling for the scan and the adaptation
        Npt = tn.shape[1]
        ncomp_max = 4 + flips.shape[0]  # the prior and a peak per start
        ys = y[s]
        oms = omega[s]
        kout, A, bvec, mS, post, zR, AC, Sw, vec = workspace(n_out, nS, nR)
        zfull = np.empty(d)
        within = np.empty((nS, nS))
        t = np.zeros(nR)
        cm = np.zeros((ncomp_max, nR))
        cL = np.zeros((ncomp_max, nR, nR))
        cLi = np.zeros((ncomp_max, nR, nR))
        clog = np.zeros(ncomp_max)
        cw = np.zeros(ncomp_max)
        lqc = np.zeros(ncomp_max)
        for r in range(nR):
            cL[0, r, r] = 1.0          # component 0: the prior, N(0, I) in whitened t
        ncomp = search(ys, oms, pars, delta, S_idx, R_idx, Kmat, Ccond, L, flips, tn, nscan,
                       inflate, kout, A, bvec, mS, post, zR, AC, Sw, vec, zfull, within, t, cm,
                       cL, cw)
        mx.peak_weights(cw, ncomp, prior_share)
        mx.finish_mixture(cm, cL, cLi, clog, cw, ncomp, nR)
        adapt(ys, oms, pars, delta, S_idx, R_idx, Kmat, Ccond, L, tn, prior_share, n_adapt,
              adapt_inflate, kout, A, bvec, mS, post, zR, AC, Sw, vec, zfull, within, t, cm, cL,
              cLi, clog, cw, ncomp)
        out_comp[s] = ncomp
        S0 = np.zeros(R)
        S1 = np.zeros((R, d))
        S2 = np.zeros((R, d, d))
        z0 = np.zeros(d)
        ref = -math.inf
        broken = False
        for rr in range(R):
            # every component at every point of the net (stratified mixture)
            for jc in range(Npt * ncomp):
                j = jc // ncomp
                c = jc - j * ncomp
                mx.place(cm, cL, c, tn[rr, j], t)
                v = lf_psi(t, ys, oms, pars, delta, L, S_idx, R_idx, Kmat, Ccond, kout, A,
                           bvec, mS, post, zfull, within, AC, Sw, vec, zR)
                if v == -math.inf:
                    continue
                lw = v - mx.mixture_logq(t, cm, cLi, clog, ncomp, lqc) + math.log(cw[c])
                if not (lw < math.inf) or lw != lw:
                    broken = True
                    continue
                ref, w = mx.rqmc_add(rr, lw, zfull, S0, S1, S2, z0, ref)
                # the conditional covariance of z_S given z_R (exact, conjugate)
                for i in range(nS):
                    for k in range(nS):
                        if S_idx[i] >= S_idx[k]:
                            S2[rr, S_idx[i], S_idx[k]] += w * within[i, k]
        mx.rqmc_finish(S0, S1, S2, z0, ref, Npt, tcrit, sd, broken, s, out_logZ, out_mean,
                       out_cov, out_err)
        mx.rqmc_sums(S0, S1, z0, s, out_sums)
    return laplace_one


def _laplace(laplace_one, jit):
    @jit(parallel=True)
    def laplace(y, omega, pars, delta, S_idx, R_idx, Kmat, Ccond, L, flips, tn, nscan, inflate,
                prior_share, n_adapt, adapt_inflate, tcrit, sd, out_logZ, out_mean, out_cov,
                out_err, out_comp, out_sums):
        for s in numba.prange(omega.shape[0]):
            laplace_one(s, y, omega, pars, delta, S_idx, R_idx, Kmat, Ccond, L, flips, tn,
                        nscan, inflate, prior_share, n_adapt, adapt_inflate, tcrit, sd,
                        out_logZ, out_mean, out_cov, out_err, out_comp, out_sums)
    return laplace
