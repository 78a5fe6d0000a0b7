"""Numba driver of :class:`symtheory.glm.factors.deep.LaplaceQMCChannel` (Laplace-centred
mixture importance sampling with randomized QMC over the free rows of a reduced link).
"""
from __future__ import annotations

# The driver reuses ``{name}_logterms`` / ``{name}_psi`` / ``{name}_newton`` of
# :mod:`symtheory.glm.integrate.posterior_rules` (log integrand per branch; Newton with central differences) and
# the mixture / RQMC pieces of :mod:`symtheory.glm.integrate.laplace_qmc`.
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


