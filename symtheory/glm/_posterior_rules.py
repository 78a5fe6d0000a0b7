"""Numba driver template for posterior moments of reduced deterministic channels with a
rule that follows the posterior (used by :mod:`symtheory.glm.linearized`).

The channel integral of smi.md Sec. 9 (Corollary E.1) over the free rows ``u``,

    Z = sum_k int du N(u; omega_u, V_uu) N(X_k(u); mu_{h|u}, C_{h|u}) |det T(u)|^{-r} e^{lw_k},
    T(u) X_k(u) = E^(k)   (X_k = h^T, the solved rows),

is computed as ``sum_c pi_c E_{N_c}[ pi(u) / q(u) ]`` with the normalized mixture
``q = sum_c pi_c N_c``: component 0 is the Gaussian marginal of ``u`` (the rule of
:class:`~symtheory.glm.multi_index.ReducedChannel`), the others are Gaussians at the
local maxima of the integrand (found by Newton's method from given starts and from the
best nodes of component 0) with the inverse Hessian, inflated, as covariance.  The
decomposition is exact for any mixture; the peaks only make ``pi/q`` smooth when the
solved rows are nearly known (``C_{h|u} -> 0``: the integrand concentrates on the
discrete preimages of ``u -> X(u)``, smi.md 10.2), where a rule over the prior misses
them.  Each component is integrated by the tensor Gauss-Hermite nodes ``tn, tw``.
"""

TEMPLATE = '''
@numba.njit(cache=True)
def {name}_logaddexp(a, b):
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))

@numba.njit(cache=True)
def {name}_logterms(u, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                    logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv):
    """log integrand per branch at u (pf x M); -inf for invalid branches.  Returns the
    log-sum over branches."""
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
    {name}(CALL_ARGS)
    const = -0.5 * M * logdetC - 0.5 * M * r * math.log(2.0 * math.pi)
    best = -math.inf
    for k in range(K):
        lk[k] = -math.inf
        if valid[s, k] == 0:
            continue
        for i in range(M):
            for j in range(M):
                Tw[i, j] = tout[i * M + j]
            for q in range(r):
                Ew[i, q] = Ebr[s, k, i * r + q]
        ldT = symtheory.core._moments_nb.lu_solve_logdet(Tw, Ew, X)
        if ldT == -math.inf:
            continue
        lp = 0.0
        for m in range(M):
            for q in range(r):
                mu = omega[s, solved_rows[q], m]
                for a in range(pf):
                    mu += Bm[q, a] * (u[a, m] - omega[s, free_rows[a], m])
                dv[q] = X[m, q] - mu
            for q in range(r):
                for q2 in range(r):
                    lp -= 0.5 * dv[q] * Cinv[q, q2] * dv[q2]
        lk[k] = lu + lp + const - r * ldT + lwb[s, k]
        for m in range(M):
            for q in range(r):
                Xall[k, m, q] = X[m, q]
        if lk[k] > best:
            best = lk[k]
    if best == -math.inf:
        return best
    acc = 0.0
    for k in range(K):
        if lk[k] > -math.inf:
            acc += math.exp(lk[k] - best)
    return best + math.log(acc)


@numba.njit(cache=True)
def {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
               logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u):
    pf = free_rows.shape[0]
    M = omega.shape[2]
    for a in range(pf):
        for m in range(M):
            u[a, m] = x[a * M + m]
    return {name}_logterms(u, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                           Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                           X, dv)


@numba.njit(cache=True)
def {name}_newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                  Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u,
                  H, g, xt):
    """Maximize the log integrand from x (in place) by Newton steps with central-difference
    derivatives and backtracking.  Returns the final value, or -inf if the Hessian at the
    end is not negative definite (no usable peak).  H holds the Hessian on exit."""
    d = x.shape[0]
    f0 = {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Vuu_inv,
                    logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew, X, dv, u)
    if f0 == -math.inf:
        return f0
    for it in range(60):
        h = hstep
        for i in range(d):
            xt[:] = x
            xt[i] = x[i] + h
            fp = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                            Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                            X, dv, u)
            xt[i] = x[i] - h
            fm = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                            Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                            X, dv, u)
            g[i] = (fp - fm) / (2 * h)
            H[i, i] = (fp - 2 * f0 + fm) / (h * h)
            for j in range(i):
                xt[:] = x
                xt[i] += h
                xt[j] += h
                fpp = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                                 Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                                 Ew, X, dv, u)
                xt[i] -= 2 * h
                fmp = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                                 Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                                 Ew, X, dv, u)
                xt[j] -= 2 * h
                fmm = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                                 Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                                 Ew, X, dv, u)
                xt[i] += 2 * h
                fpm = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                                 Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw,
                                 Ew, X, dv, u)
                H[i, j] = (fpp - fpm - fmp + fmm) / (4 * h * h)
                H[j, i] = H[i, j]
        if not (numpy.all(numpy.isfinite(g)) and numpy.all(numpy.isfinite(H))):
            return -math.inf
        lam, vec = numpy.linalg.eigh(H)
        # Newton direction on the negative-definite part; gradient ascent elsewhere
        step = numpy.zeros(d)
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
        nrm = math.sqrt(numpy.sum(step * step))
        if nrm > 1.0:
            step *= 1.0 / nrm
            nrm = 1.0
        t = 1.0
        improved = False
        for ls in range(30):
            xt[:] = x + t * step
            ft = {name}_psi(xt, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                            Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                            X, dv, u)
            if ft >= f0:
                improved = True
                break
            t *= 0.5
        if not improved:
            break
        x[:] = xt
        f0 = ft
        if t * nrm < 1e-10 and lam[d - 1] < 0:
            break
    lam = numpy.linalg.eigvalsh(H)
    if lam[d - 1] >= 0:
        return -math.inf
    return f0


@numba.njit(cache=True, parallel=True)
def {name}_posterior(Ebr, lwb, valid, omega, pars, free_rows, solved_rows, Luu, Vuu_inv,
                     logdet_Vuu, Bm, Cinv, logdetC, starts, tn, tw, max_peaks, inflate,
                     prior_weight, hstep, out_logZ, out_mean, out_cov, out_peaks):
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
    nstart = starts.shape[1]
    for s in numba.prange(n):
        lk = numpy.empty(K)
        Xall = numpy.zeros((K, M, r))
        tout = numpy.empty(M * M)
        Tw = numpy.empty((M, M))
        Ew = numpy.empty((M, r))
        X = numpy.empty((M, r))
        dv = numpy.empty(r)
        u = numpy.zeros((max(pf, 1), M))
        H = numpy.zeros((dfree, dfree))
        g = numpy.zeros(dfree)
        xt = numpy.zeros(dfree)
        x = numpy.zeros(dfree)
        # components: means (ncomp, dfree), Cholesky factors, log-normalizers, log-weights
        cm = numpy.zeros((ncomp_max, dfree))
        cL = numpy.zeros((ncomp_max, dfree, dfree))
        cLi = numpy.zeros((ncomp_max, dfree, dfree))
        clog = numpy.zeros(ncomp_max)
        cw = numpy.zeros(ncomp_max)
        # component 0: Gaussian marginal of u (token-major flattening a * M + m)
        for a in range(pf):
            for m in range(M):
                cm[0, a * M + m] = omega[s, free_rows[a], m]
                for b in range(pf):
                    cL[0, a * M + m, b * M + m] = Luu[a, b]
        ncomp = 1
        if max_peaks > 0 and dfree > 0:
            # starts: the given ones and the best nodes of component 0
            best_val = numpy.full(2, -math.inf)
            best_idx = numpy.full(2, -1)
            for j in range(Kn):
                for i in range(dfree):
                    acc = cm[0, i]
                    for k2 in range(dfree):
                        acc += cL[0, i, k2] * tn[j, k2]
                    x[i] = acc
                v = {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                               Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                               X, dv, u)
                if v > best_val[0]:
                    best_val[1] = best_val[0]
                    best_idx[1] = best_idx[0]
                    best_val[0] = v
                    best_idx[0] = j
                elif v > best_val[1]:
                    best_val[1] = v
                    best_idx[1] = j
            for st in range(nstart + 2):
                if ncomp >= ncomp_max:
                    break
                if st < nstart:
                    if not numpy.isfinite(starts[s, st, 0]):
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
                val = {name}_newton(x, s, hstep, Ebr, lwb, valid, omega, pars, free_rows,
                                    solved_rows, Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk,
                                    Xall, tout, Tw, Ew, X, dv, u, H, g, xt)
                if val == -math.inf:
                    continue
                # covariance inflate^2 inv(-H)
                Cov = numpy.linalg.inv(-H) * (inflate * inflate)
                Cov = 0.5 * (Cov + Cov.T)
                dup = False
                for c in range(1, ncomp):
                    # Mahalanobis distance to an existing peak
                    dlt = x - cm[c]
                    y = numpy.linalg.solve(cL[c], dlt)
                    if numpy.sum(y * y) < 1.0:
                        dup = True
                        break
                if dup:
                    continue
                L = numpy.linalg.cholesky(Cov)
                cm[ncomp] = x
                cL[ncomp] = L
                ld = 0.0
                for i in range(dfree):
                    ld += math.log(L[i, i])
                # Laplace mass of the peak: exp(val) sqrt(det(2 pi inv(-H)))
                cw[ncomp] = val + ld - dfree * math.log(inflate) + 0.5 * dfree * math.log(2 * math.pi)
                ncomp += 1
        # mixture weights: prior_weight on component 0 when peaks exist
        if ncomp == 1:
            cw[0] = 0.0
        else:
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
        out_peaks[s] = ncomp - 1
        for c in range(ncomp):
            ld = 0.0
            for i in range(dfree):
                ld += math.log(cL[c, i, i])
            clog[c] = -ld - 0.5 * dfree * math.log(2 * math.pi)
            cLi[c] = numpy.linalg.inv(cL[c]) if dfree > 0 else cL[c]
        npts = ncomp * Kn * K
        logw = numpy.empty(npts)
        zs = numpy.empty((npts, d))
        cnt = 0
        for c in range(ncomp):
            for j in range(Kn):
                for i in range(dfree):
                    acc = cm[c, i]
                    for k2 in range(dfree):
                        acc += cL[c, i, k2] * tn[j, k2]
                    x[i] = acc
                # log q(x): the mixture density
                lq = -math.inf
                for c2 in range(ncomp):
                    qq = 0.0
                    for i in range(dfree):
                        acc = 0.0
                        for k2 in range(dfree):
                            acc += cLi[c2, i, k2] * (x[k2] - cm[c2, k2])
                        qq += acc * acc
                    lq = {name}_logaddexp(lq, cw[c2] + clog[c2] - 0.5 * qq)
                tot = {name}_psi(x, s, Ebr, lwb, valid, omega, pars, free_rows, solved_rows,
                                 Vuu_inv, logdet_Vuu, Bm, Cinv, logdetC, lk, Xall, tout, Tw, Ew,
                                 X, dv, u)
                if tot == -math.inf:
                    continue
                for k in range(K):
                    if lk[k] == -math.inf:
                        continue
                    logw[cnt] = math.log(tw[j]) + cw[c] + lk[k] - lq
                    for a in range(pf):
                        for m in range(M):
                            zs[cnt, free_rows[a] * M + m] = x[a * M + m]
                    for q in range(r):
                        for m in range(M):
                            zs[cnt, solved_rows[q] * M + m] = Xall[k, m, q]
                    cnt += 1
        out_logZ[s] = symtheory.core._moments_nb.weighted_moments(logw, zs, cnt, out_mean[s], out_cov[s])
'''
