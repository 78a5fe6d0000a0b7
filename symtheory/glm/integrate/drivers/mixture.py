"""Gaussian-mixture importance sampling with randomized QMC: the model-independent
pieces of the posterior rules that follow the likelihood (:mod:`..laplace_qmc` documents
the estimator; used by the drivers :mod:`.noise` and :mod:`.deep`).

A mixture of ``ncomp`` Gaussians in ``dfree`` dimensions is held as: means ``cm[c]``,
lower Cholesky factors ``cL[c]`` of the covariances, their inverses ``cLi[c]``,
``log(weight) - log det - dfree/2 log(2 pi)`` in ``clog[c]``, weights ``cw[c]``.
Component 0 is the defensive one.

The helpers called at every point (mixture_logq, place, rqmc_add) run without reference
counting (``_nrt=False``: no allocation, no array views; :mod:`symtheory.core._moments_nb`
says why).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ....core import _moments_nb as mnb

@numba.njit(cache=True, _nrt=False)
def mixture_logq(x, cm, cLi, clog, ncomp, lqc):
    """log of the Gaussian mixture density at x; the log of each weighted component
    into lqc."""
    dfree = x.shape[0]
    top = -math.inf
    for c in range(ncomp):
        qq = 0.0
        for i in range(dfree):
            acc = 0.0
            for k in range(i + 1):
                acc += cLi[c, i, k] * (x[k] - cm[c, k])
            qq += acc * acc
        lqc[c] = clog[c] - 0.5 * qq
        if lqc[c] > top:
            top = lqc[c]
    if top == -math.inf:
        return top
    acc = 0.0
    for c in range(ncomp):
        acc += math.exp(lqc[c] - top)
    return top + math.log(acc)


@numba.njit(cache=True)
def tril_solve(L, b, out):
    """out = inverse(L) b for a lower-triangular L (no LAPACK: nothing may raise inside the
    parallel region)."""
    n = L.shape[0]
    for i in range(n):
        acc = b[i]
        for k in range(i):
            acc -= L[i, k] * out[k]
        out[i] = acc / L[i, i]


@numba.njit(cache=True, _nrt=False)
def place(cm, cL, c, t, x):
    """x = m_c + L_c t: the point of component c at the standard normal node t."""
    for i in range(x.shape[0]):
        acc = cm[c, i]
        for k in range(i + 1):
            acc += cL[c, i, k] * t[k]
        x[i] = acc


@numba.njit(cache=True)
def finish_mixture(cm, cL, cLi, clog, cw, ncomp, dfree):
    """log(weight / det) and the inverse Cholesky factor of every component."""
    e = np.zeros(dfree)
    col = np.zeros(dfree)
    for c in range(ncomp):
        ld = 0.0
        for i in range(dfree):
            ld += math.log(abs(cL[c, i, i]))
        clog[c] = math.log(cw[c]) - ld - 0.5 * dfree * math.log(2 * math.pi)
        for j in range(dfree):
            e[:] = 0.0
            e[j] = 1.0
            tril_solve(cL[c], e, col)
            for i in range(dfree):
                cLi[c, i, j] = col[i]


@numba.njit(cache=True)
def laplace_factor(H, inflate, Lc):
    """Lower Cholesky factor of inflate^2 inverse(-H) into Lc; False if -H is not
    numerically positive definite."""
    d = H.shape[0]
    A = -H.copy()
    if mnb.cholesky_logdet(A) == -math.inf:
        return False
    e = np.zeros(d)
    for j in range(d):
        e[:] = 0.0
        e[j] = 1.0
        mnb.cholesky_solve(A, e)
        for i in range(d):
            Lc[i, j] = e[i] * inflate * inflate
    for i in range(d):
        for j in range(i):
            v = 0.5 * (Lc[i, j] + Lc[j, i])
            Lc[i, j] = v
            Lc[j, i] = v
    return mnb.cholesky_logdet(Lc) > -math.inf


@numba.njit(cache=True)
def dedup(x, cm, cL, ncomp, work):
    """True if x lies within Mahalanobis distance 1 of a peak component (1..ncomp-1)."""
    for c in range(1, ncomp):
        dlt = x - cm[c]
        tril_solve(cL[c], dlt, work)
        if np.sum(work * work) < 1.0:
            return True
    return False


@numba.njit(cache=True)
def peak_weights(cw, ncomp, prior_share):
    """cw[1:ncomp] hold the peaks' log masses on entry; on exit the mixture weights:
    prior_share on component 0, the rest in proportion to the masses."""
    if ncomp == 1:
        cw[0] = 1.0
        return
    top = np.max(cw[1:ncomp])
    tot = 0.0
    for c in range(1, ncomp):
        cw[c] = math.exp(cw[c] - top)
        tot += cw[c]
    for c in range(1, ncomp):
        cw[c] *= (1.0 - prior_share) / tot
    cw[0] = prior_share


@numba.njit(cache=True)
def refit_add(x, lw, lq, lqc, ncomp, A0, Asq, A1, A2, aref):
    """Add the point x of log weight lw (target / mixture) to the responsibility-weighted
    sums of every peak component (scaled by exp(-aref)); returns the new aref."""
    dfree = x.shape[0]
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
    return aref


@numba.njit(cache=True)
def refit(A0, Asq, A1, A2, cm, cL, cLi, clog, cw, ncomp, prior_share, adapt_inflate):
    """Moment-matching refit of each peak component with enough effective points
    (ESS >= 4 (d + 1)); weights by responsibility.  False if nothing was weighted."""
    dfree = cm.shape[1]
    tot_mass = 0.0
    for c in range(1, ncomp):
        tot_mass += A0[c]
    if not tot_mass > 0:
        return False
    for c in range(1, ncomp):
        if A0[c] <= 0 or A0[c] * A0[c] < 4.0 * (dfree + 1) * Asq[c]:
            continue
        mu = A1[c] / A0[c]
        Cv = np.empty((dfree, dfree))
        for i in range(dfree):
            for k2 in range(i + 1):
                Cv[i, k2] = (A2[c, i, k2] / A0[c] - mu[i] * mu[k2]) * adapt_inflate ** 2
                Cv[k2, i] = Cv[i, k2]
        if not np.all(np.isfinite(Cv)):
            continue
        if mnb.cholesky_logdet(Cv) == -math.inf:
            continue
        cm[c] = mu
        cL[c] = Cv
    for c in range(1, ncomp):
        cw[c] = (1.0 - prior_share) * max(A0[c], 1e-3 * tot_mass) / tot_mass
    renormalize(cm, cL, cLi, clog, cw, ncomp, prior_share)
    return True


@numba.njit(cache=True, _nrt=False)
def rqmc_add(rr, lw, z, S0, S1, S2, z0, ref):
    """Add the point z of log weight lw to the sums of scrambling rr (centred at z0,
    scaled by exp(-ref), rescaled when lw exceeds ref); returns (ref, its weight)."""
    d = z.shape[0]
    if ref == -math.inf:
        ref = lw
        for a in range(d):
            z0[a] = z[a]
    if lw > ref:
        # explicit loops: no temporaries (this hot helper runs without reference counting)
        f = math.exp(ref - lw)
        for q in range(S0.shape[0]):
            S0[q] *= f
            for a in range(d):
                S1[q, a] *= f
                for b in range(d):
                    S2[q, a, b] *= f
        ref = lw
    w = math.exp(lw - ref)
    S0[rr] += w
    for a in range(d):
        za = z[a] - z0[a]
        S1[rr, a] += w * za
        for b in range(a + 1):
            S2[rr, a, b] += w * za * (z[b] - z0[b])
    return ref, w


@numba.njit(cache=True)
def rqmc_sums(S0, S1, z0, s, out_sums):
    """Per scrambling rr: out_sums[s, rr, 0] = its weight sum, out_sums[s, rr, 1 + a] = its
    sum of w z_a (one common scale per sample), so that E[z] can be pooled over any set of
    scramblings -- estimates over disjoint sets are independent given the proposal (built
    on the extra scrambling): the SE's 'cross' estimator."""
    R = S0.shape[0]
    d = z0.shape[0]
    for rr in range(R):
        out_sums[s, rr, 0] = S0[rr]
        for a in range(d):
            out_sums[s, rr, 1 + a] = S1[rr, a] + z0[a] * S0[rr]


@numba.njit(cache=True)
def rqmc_finish(S0, S1, S2, z0, ref, npt, tcrit, sd, broken, s, out_logZ, out_mean,
                       out_cov, out_err):
    """Pooled (log Z, E[z], Cov[z]) of the R scramblings (npt points each) into row s; the
    error: Student-t 95% half-width of the mean of the per-scrambling estimates, in natural
    units (log Z; means over sd; covariances over products of sd)."""
    R = S0.shape[0]
    d = z0.shape[0]
    T0 = np.sum(S0)
    if not (T0 > 0) or ref == -math.inf:
        out_logZ[s] = -math.inf
        out_mean[s] = np.nan
        out_cov[s] = np.nan
        out_err[s] = math.inf
        return
    out_logZ[s] = ref + math.log(T0 / (R * npt))
    mu = np.zeros(d)
    for a in range(d):
        mu[a] = np.sum(S1[:, a]) / T0
        out_mean[s, a] = z0[a] + mu[a]
    for a in range(d):
        for b in range(a + 1):
            v = np.sum(S2[:, a, b]) / T0 - mu[a] * mu[b]
            out_cov[s, a, b] = v
            out_cov[s, b, a] = v
    err = 0.0
    if np.min(S0) <= 0 or broken:
        err = math.inf
    else:
        nmom = 1 + d + d * (d + 1) // 2
        est = np.empty((R, nmom))
        for rr in range(R):
            est[rr, 0] = math.log(S0[rr])
            k = 1
            for a in range(d):
                est[rr, k] = (S1[rr, a] / S0[rr]) / sd[a]
                k += 1
            for a in range(d):
                for b in range(a + 1):
                    est[rr, k] = (S2[rr, a, b] / S0[rr]
                                  - S1[rr, a] * S1[rr, b] / (S0[rr] * S0[rr])) / (sd[a] * sd[b])
                    k += 1
        for k in range(nmom):
            mk = np.mean(est[:, k])
            var = np.sum((est[:, k] - mk) ** 2) / (R - 1)
            err = max(err, tcrit * math.sqrt(var / R))
    out_err[s] = err


@numba.njit(cache=True)
def renormalize(cm, cL, cLi, clog, cw, ncomp, prior_share):
    """Scale the peak weights cw[1:ncomp] to sum to 1 - prior_share, then finish_mixture."""
    nrm = 0.0
    for c in range(1, ncomp):
        nrm += cw[c]
    for c in range(1, ncomp):
        cw[c] *= (1.0 - prior_share) / nrm
    finish_mixture(cm, cL, cLi, clog, cw, ncomp, cm.shape[1])
