"""The expectation over ``y`` in the linearized operator (Eq. 15 of Troiani et al.,
arXiv:2502.00901), computed deterministically where the dimension allows.

``observation grid`` (deterministic links with a reduction)
    ``E_y f(y) = int dE p(E) f(y(E))`` over the ``M r`` coordinates of ``E = T(u) h^T``
    (:mod:`symtheory.glm.integrate.reduced_posterior`); the outer rule is the (offset)
    midpoint rule on a box of ``width`` times the largest singular value of ``T(u)`` --
    spectrally accurate for this smooth, Gaussian-tailed integrand; when ``T`` is
    constant ``E`` is Gaussian and a Gauss-Hermite rule in ``h`` is used.
``cells`` (links that are functions of the signs of products of indices, e.g.
    ``sign(z1 z2)``): ``g`` is constant on the boxes cut by the zeros of the factors; the
    Gaussian moments of each box are products of 1-D interval moments (mpmath
    quadrature); noiseless outputs give a finite sum, Gaussian output noise a 1-D
    integral over ``y`` (mpmath, split at the cell values).
``scalar quadrature`` (one index, one output, Gaussian output noise): nested quadrature,
    the inner integral split at the kinks and the real SymPy preimages of ``y``
    (:func:`real_preimage`, shared by both arithmetics); float64: tanh-sinh; mpmath:
    Gauss-Legendre nodes cached per precision on panels (:func:`scalar_mp_rule`).
``output quadrature`` (Gaussian output noise, one output, ``P M <= 2`` indices the link
    is not discrete in): ``E_y f(y) = int dy Z_out(y|0, I) f(y)`` by tanh-sinh in ``y`` on
    ``(-inf, 0], [0, inf)`` (infinite ends mapped with the output scale), the posterior
    moments at each node from the channel's own adaptive rule (the rule its declaration
    check accepts: a likelihood narrower than the prior is followed by panel doubling,
    which a fixed Gauss-Hermite rule is not).
``monte carlo`` (anything else): frozen Gaussian samples through the model's channel;
    error bar by batch means (heavy tails: the spread of batch means, not of samples).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from ...core.quadrature import TensorRule, tanh_sinh_unit
from ...core.validate import ParameterError
from ..integrate.reduced_posterior import ReducedPosterior
from .operator import (
    LinearizedOperator,
    _dict_to_tensor,
    _mp_first,
    _mp_tensor_from_cov,
    _observation_grid,
    _operator_from_nodes,
    operator_matrix,
)


# ---------------------------------------------------------------------- sign-type links
def sign_cells(model):
    """Cells of a link that is a function of signs (``sign``/``Heaviside`` of products of
    univariate factors of the indices), or ``None``.

    Returns ``(cuts, boxes)``: ``cuts[i]`` the sorted real zeros (SymPy numbers) of the
    factors in index ``i`` (flattened ``a M + m``), ``boxes`` a list of ``(intervals,
    y)`` with one interval per index and the (constant) output on the box."""
    import itertools

    link = model.link.xreplace(model.params)
    idx = list(model.indices)
    atoms = set()
    for e in link:
        atoms |= e.atoms(sp.sign) | e.atoms(sp.Heaviside)
    if not atoms:
        return None
    reps = {a: sp.Dummy() for a in atoms}
    if any(e.xreplace(reps).free_symbols & set(idx) for e in link):
        return None
    cuts = {z: set() for z in idx}
    for a in atoms:
        _, factors = sp.factor_list(a.args[0])
        for f, _mult in factors:
            fs = f.free_symbols
            if len(fs) != 1 or not fs <= set(idx):
                return None
            z = next(iter(fs))
            poly = sp.Poly(f, z)
            cuts[z].update(poly.real_roots())
    intervals = []
    for z in idx:
        c = sorted(cuts[z], key=lambda v: float(v))
        ends = [-sp.oo] + c + [sp.oo]
        intervals.append(list(zip(ends[:-1], ends[1:])))
    boxes = []
    for box in itertools.product(*intervals):
        rep = {}
        for z, (lo, hi) in zip(idx, box):
            if lo == -sp.oo and hi == sp.oo:
                rep[z] = sp.Integer(0)
            elif lo == -sp.oo:
                rep[z] = hi - 1
            elif hi == sp.oo:
                rep[z] = lo + 1
            else:
                rep[z] = (lo + hi) / 2
        y = tuple(sp.nsimplify(e.xreplace(rep)) for e in link)
        if any(v.free_symbols for v in y):
            return None
        boxes.append((box, y))
    return [sorted(cuts[z], key=lambda v: float(v)) for z in idx], boxes


def _interval_moments(lo, hi, dps):
    """``(E[1_I], E[z 1_I], E[z^2 1_I])`` for ``z ~ N(0, 1)`` by mpmath quadrature."""
    import mpmath

    with mpmath.workdps(dps):
        a = -mpmath.inf if lo == -sp.oo else mpmath.mpf(sp.N(lo, dps + 5))
        b = mpmath.inf if hi == sp.oo else mpmath.mpf(sp.N(hi, dps + 5))
        c = 1 / mpmath.sqrt(2 * mpmath.pi)
        return [mpmath.quad(lambda t, k=k: t ** k * c * mpmath.exp(-t * t / 2), [a, b])
                for k in range(3)]


def _cell_moments(boxes, d, dps):
    """Per distinct output value: ``(P(y), E[Z 1_y], E[Z Z^T 1_y])`` (mpmath)."""
    import mpmath

    cache = {}
    cells = {}
    with mpmath.workdps(dps):
        for box, y in boxes:
            ms = []
            for lo, hi in box:
                if (lo, hi) not in cache:
                    cache[(lo, hi)] = _interval_moments(lo, hi, dps)
                ms.append(cache[(lo, hi)])
            m0 = [m[0] for m in ms]
            p = mpmath.fprod(m0)
            mean = mpmath.matrix(d, 1)
            sec = mpmath.matrix(d, d)
            for i in range(d):
                others = mpmath.fprod(m0[k] for k in range(d) if k != i)
                mean[i] = ms[i][1] * others
                sec[i, i] = ms[i][2] * others
                for j in range(i):
                    rest = mpmath.fprod(m0[k] for k in range(d) if k not in (i, j))
                    sec[i, j] = sec[j, i] = ms[i][1] * ms[j][1] * rest
            if y in cells:
                P0, m1, m2 = cells[y]
                cells[y] = (P0 + p, m1 + mean, m2 + sec)
            else:
                cells[y] = (p, mean, sec)
    return cells


def _cells_operator_mp(model, cells_spec, noise_variance, dps):
    """Eq. (15) for a sign-type link (mpmath at ``dps`` digits).  Returns ``(T, first)``
    as dicts of mpf; noiseless: a finite sum over output values; with Gaussian noise on
    a single output: ``int dy Z_out(y) f(y)`` by mpmath quadrature split at the values."""
    import mpmath

    P, M = model.P, model.M
    d = P * M
    _, boxes = cells_spec
    with mpmath.workdps(dps):
        cells = _cell_moments(boxes, d, dps)
        keys = [(a, b, c, e) for a in range(P) for b in range(P) for c in range(P) for e in range(P)]
        if not noise_variance:
            T = {k: mpmath.mpf(0) for k in keys}
            first = {(a, b): mpmath.mpf(0) for a in range(P) for b in range(P)}
            for p, m1, m2 in cells.values():
                mean = m1 / p
                cov = m2 / p - mean * mean.T
                for k, v in _mp_tensor_from_cov(cov, P, M, p).items():
                    T[k] += v
                for k, v in _mp_first(mean, P, M, p).items():
                    first[k] += v
            return T, first
        if len(model.link) != 1:
            raise ParameterError("noisy sign-type links are supported for a single output")
        Delta = mpmath.mpf(noise_variance)
        values = sorted(cells)
        ys = [mpmath.mpf(sp.N(v[0], dps + 5)) for v in values]
        memo = {}

        def at(yv):
            if yv not in memo:
                lik = [mpmath.exp(-(yv - yk) ** 2 / (2 * Delta)) / mpmath.sqrt(2 * mpmath.pi * Delta)
                       for yk in ys]
                Z = mpmath.fsum(l * cells[v][0] for l, v in zip(lik, values))
                m1 = sum((cells[v][1] * l for l, v in zip(lik, values)), mpmath.matrix(d, 1))
                m2 = sum((cells[v][2] * l for l, v in zip(lik, values)), mpmath.matrix(d, d))
                mean = m1 / Z
                cov = m2 / Z - mean * mean.T
                memo[yv] = (_mp_tensor_from_cov(cov, P, M, Z), _mp_first(mean, P, M, Z))
            return memo[yv]

        pts = [-mpmath.inf] + sorted(set(ys)) + [mpmath.inf]
        T = {k: mpmath.quad(lambda yv, k=k: at(yv)[0][k], pts) for k in keys}
        first = {k: mpmath.quad(lambda yv, k=k: at(yv)[1][k], pts)
                 for k in [(a, b) for a in range(P) for b in range(P)]}
        return T, first


# ---------------------------------------------------------------------- scalar noisy links
#: the observation of a one-index link in :func:`scalar_preimages`
Y_OBS = sp.Symbol("y_obs", real=True)


def scalar_preimages(model):
    """``(z, y_obs, branches)``: the solutions ``z(y_obs)`` of ``g(z) = y_obs`` of a
    one-index link as SymPy gives them (``sp.solve``; possibly ``Piecewise`` with a
    ``nan`` default where a branch does not exist), or ``None`` when SymPy cannot solve
    it.  The split points of the scalar quadrature (Eq. 15) and what ``smi derive``
    prints."""
    z = model.indices[0, 0]
    g = model.link[0].xreplace(model.params)
    try:
        return z, Y_OBS, sp.solve(sp.Eq(g, Y_OBS), z)
    except (NotImplementedError, ValueError, TypeError):
        return z, Y_OBS, None


def _scalar_breakpoints(model):
    """SymPy pieces of a one-index link ``g``: the index ``z``, ``g``, the symbol ``y`` of
    the preimage branches, the branches ``z(y)`` solving ``g(z) = y`` (SymPy expressions,
    from :func:`scalar_preimages`; each path lambdifies them for its own arithmetic) and
    the sorted kinks and critical points of ``g`` (inner splits)."""
    z, ysym, sols = scalar_preimages(model)
    g = model.link[0].xreplace(model.params)
    branches = list(sols or [])
    points = set()
    for a in g.atoms(sp.Abs, sp.Heaviside, sp.sign, sp.Max, sp.Min):
        for arg in a.args:
            if arg.free_symbols == {z}:
                try:
                    points.update(sp.Poly(arg, z).real_roots())
                except sp.PolynomialError:
                    pass
    try:
        crit = sp.solve(sp.diff(g, z), z)
        points.update(c for c in crit if c.is_real)
    except (NotImplementedError, ValueError, TypeError):
        pass
    return z, g, ysym, branches, sorted(points, key=lambda v: float(v))


def real_preimage(v, rtol):
    """A preimage branch's value ``v = z(y)`` as a real number, or ``None`` when it is no
    real preimage of ``y``: ``nan`` (SymPy writes ``Abs(z) = y`` as ``Piecewise((y, y >=
    0), (nan, True))``: no preimage for ``y < 0``), infinite, or complex beyond
    ``|Im v| <= rtol (1 + |Re v|)``.  One test for the float64 and the mpmath paths (a
    ``nan`` kept as a split point poisons every quadrature that uses it)."""
    real, imag = getattr(v, "real", v), getattr(v, "imag", 0)
    if real != real or imag != imag or abs(real) == math.inf:   # nan, inf
        return None
    if abs(imag) > rtol * (1 + abs(real)):
        return None
    return real


def _exact_decimal(x):
    """A float parameter at the working precision as the decimal it was typed as
    (``0.2`` is 1/5, not the binary double 0.2000000000000000111)."""
    import mpmath

    return mpmath.mpf(repr(float(x)))


def scalar_mp_rule(dps, noise_sd):
    """``(degree_y, half_y, degree_z, half_z)``: Gauss-Legendre size (``3 * 2**(degree -
    1)`` nodes) and panel half-length of the outer (``y``) and inner (``z``) rules of
    :func:`_scalar_operator_mp` for an error ``10^-(dps + 3)``.  The scale is ``s =
    min(1, noise_sd)``.  Outer: the integrand ``p(y) J(y)^2`` is analytic in a strip whose
    half-width is set by the nearest complex zero of ``p(y)`` (measured ~2.4 s for ``|z|``
    at ``Delta = 0.2``); Gauss-Legendre on a panel of half-length ``H`` converges as
    ``rho^(-2n)``, ``rho = r + sqrt(1 + r^2)``, ``r = delta/H`` (Trefethen, Approximation
    Theory and Approximation Practice, Thm 19.3).  Inner: the posterior is entire between
    splits and Gaussian-like of width ``s``: the Chebyshev coefficients of ``exp(-a x^2)``
    fall as ``(a/4)^n / n!``, ``a = H^2 / (2 s^2)``, halved for safety.  The size with
    fewer nodes per unit length wins.  A link whose posterior is narrower (``|g'| >> 1``)
    is under-resolved; the rerun at twice the digits (which uses finer panels) then
    disagrees and the result says so."""
    s = min(1.0, float(noise_sd))
    tol = (dps + 3) * math.log(10)
    best_y = best_z = None
    for deg in (4, 5, 6, 7):
        n = 3 * 2 ** (deg - 1)
        rho = math.exp(tol / (2 * n))
        half_y = 2.4 * s / (0.5 * (rho - 1 / rho))
        a = 4 * math.exp((math.lgamma(n + 1) - tol) / n)
        half_z = 0.5 * s * math.sqrt(2 * a)
        if best_y is None or n / half_y < best_y[0]:
            best_y = (n / half_y, deg, half_y)
        if best_z is None or n / half_z < best_z[0]:
            best_z = (n / half_z, deg, half_z)
    return best_y[1], best_y[2], best_z[1], best_z[2]


#: outer nodes beyond which the mpmath scalar quadrature refuses (minutes of mpmath work:
#: ~1 ms per node); a link with a wide range against the noise (y = z^3 - z, delta = 0.3:
#: 39360 nodes at 20 digits, 148416 at 40) gets there
MAX_SCALAR_Y_NODES = 100000


def _panels(cuts, half):
    """``(mid, half-length)`` of the panels splitting each interval between consecutive
    ``cuts`` into pieces of half-length at most ``half`` (empty intervals dropped)."""
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if not b > a:
            continue
        k = max(1, math.ceil(float(b - a) / (2 * half)))
        h = (b - a) / (2 * k)
        out.extend((a + (2 * i + 1) * h, h) for i in range(k))
    return out


def _scalar_operator_mp(model, noise_variance, dps, rule_digits=None):
    """Eq. (15) for ``y = g(z) + sqrt(Delta) xi`` with one index and one output in ``dps``
    digit arithmetic, the rule made for ``rule_digits`` (default ``dps``) correct digits
    (a confirming run asks for fewer than its arithmetic carries): Gauss-Legendre nodes
    computed once at this precision (:func:`~symtheory.core.quadrature.
    gauss_legendre_mp`) and mapped onto panels
    (:func:`scalar_mp_rule`), outer over ``y`` on the range of ``g`` widened by the
    noise, inner over ``z`` split at the kinks and the real preimages of each ``y``
    (:func:`real_preimage`: undefined branches are dropped, as in float64).  Both
    integrals are cut where the integrand is below ``10^-(rule_digits + 5)`` of its peak
    (``|z| <= z_max``, ``y`` in the noise-widened range of ``g``), and a float64 pass
    over the same nodes drops the nodes beneath that threshold before the mpmath pass.
    Returns ``({(0,0,0,0): T}, {(0,0): first}, info)``, ``info`` the rule, the mass
    ``E_y 1`` and the node counts."""
    import mpmath

    from ...core.quadrature import gauss_legendre_mp

    z, g, ysym, branches, points = _scalar_breakpoints(model)
    gnum = sp.lambdify(z, g, "numpy")
    gmp = sp.lambdify(z, g, "mpmath")
    pre = [sp.lambdify(ysym, b, "mpmath") for b in branches]
    Df = float(noise_variance)
    sd = math.sqrt(Df)
    rule_digits = dps if rule_digits is None else int(rule_digits)
    cut = (rule_digits + 5) * math.log(10) + 20   # log-integrand drop below the peak cut
    z_max = math.sqrt(2 * cut)                # exp(-z_max^2 / 2) = e^-cut
    deg_y, half_y, deg_z, half_z = scalar_mp_rule(rule_digits, sd)
    zgrid = np.linspace(-z_max, z_max, 4001)
    gz = np.asarray(gnum(zgrid), dtype=float) * np.ones_like(zgrid)
    if not np.all(np.isfinite(gz)):
        raise ParameterError("the link is not finite on |z| <= "
                             f"{z_max:.3g}; the scalar quadrature needs a finite link")
    with mpmath.workdps(dps):
        Delta = _exact_decimal(noise_variance)
        xy, wy = gauss_legendre_mp(deg_y, dps)
        xz, wz = gauss_legendre_mp(deg_z, dps)
        xzf = np.array([float(v) for v in xz])
        wzf = np.array([float(v) for v in wz])
        zlim = mpmath.mpf(z_max)
        kinks = [mpmath.mpf(sp.N(p, dps + 5)) for p in points if abs(float(p)) < z_max]
        rtol = mpmath.mpf(10) ** (-(dps // 2))
        y_lo = mpmath.mpf(float(gz.min()) - z_max * sd)
        y_hi = mpmath.mpf(float(gz.max()) + z_max * sd)
        n_y = 3 * 2 ** (deg_y - 1) * math.ceil(float(y_hi - y_lo) / (2 * half_y))
        if n_y > MAX_SCALAR_Y_NODES:
            raise ParameterError(
                f"the {rule_digits}-digit scalar quadrature would need {n_y} outer nodes "
                f"(> {MAX_SCALAR_Y_NODES}): the link ranges over [{float(gz.min()):.4g}, "
                f"{float(gz.max()):.4g}] on |z| <= {z_max:.3g} against a noise sd of {sd:.3g}; "
                "ask for fewer digits, or use the float64 path")
        Y, WY = [], []
        for m, h in _panels([y_lo, y_hi], half_y):
            Y.extend(m + h * x for x in xy)
            WY.extend(h * w for w in wy)

        def inner_panels(yv):
            cuts = set(kinks)
            for f in pre:
                try:
                    v = real_preimage(f(yv), rtol)
                except (ValueError, ZeroDivisionError, TypeError):
                    continue
                if v is not None and -zlim < v < zlim:
                    cuts.add(v)
            return _panels([-zlim] + sorted(cuts) + [zlim], half_z)

        # float64 pass: which y and which (panel, node) pairs matter at this precision
        plan, est = [], np.full(len(Y), -np.inf)
        for i, yv in enumerate(Y):
            pans = inner_panels(yv)
            mf = np.array([float(m) for m, _ in pans])
            hf = np.array([float(h) for _, h in pans])
            Zf = mf[:, None] + hf[:, None] * xzf[None, :]
            with np.errstate(all="ignore"):
                gZ = np.asarray(gnum(Zf), dtype=float) * np.ones_like(Zf)
                L = -0.5 * Zf ** 2 - (float(yv) - gZ) ** 2 / (2 * Df)
            top = np.max(L)
            keep = np.nonzero(L > top - cut)
            f = np.exp(L[keep] - top) * (hf[keep[0]] * wzf[keep[1]])
            zk = Zf[keep]
            n0 = f.sum()
            mean = (f * zk).sum() / n0
            J = (f * zk * zk).sum() / n0 - mean * mean - 1.0
            # the outer integrand's size, N0 (J^2 + mean^2), up to the (positive) weight
            est[i] = top + math.log(n0) + math.log(J * J + mean * mean + 1e-300)
            plan.append((pans, keep))
        top_y = np.max(est)
        norm = 1 / (2 * mpmath.pi * mpmath.sqrt(Delta))
        T = first = mass = mpmath.mpf(0)
        pairs = 0
        half, c = mpmath.mpf(0.5), 1 / (2 * Delta)
        kept_y = np.nonzero(est > top_y - cut)[0]
        for i in kept_y:
            yv = Y[i]
            pans, (ip, jn) = plan[i]
            ts = [pans[p][0] + pans[p][1] * xz[j] for p, j in zip(ip, jn)]
            es = [pans[p][1] * wz[j] * mpmath.exp(-(t * t * half + (u := yv - gmp(t)) * u * c))
                  for t, p, j in zip(ts, ip, jn)]
            pairs += len(ts)
            N0 = mpmath.fsum(es)
            mean = mpmath.fdot(es, ts) / N0
            J = mpmath.fdot(es, [t * t for t in ts]) / N0 - mean * mean - 1
            wN = WY[i] * norm * N0
            T += wN * J * J
            first += wN * mean * mean
            mass += wN
        info = {
            "rule": f"Gauss-Legendre panels: y {3 * 2 ** (deg_y - 1)} nodes per "
                    f"{2 * half_y:.3g}, z {3 * 2 ** (deg_z - 1)} nodes per {2 * half_z:.3g}",
            "mass": mass, "pairs": pairs, "y_nodes": f"{len(kept_y)} of {len(Y)}"}
    return {(0, 0, 0, 0): T}, {(0, 0): first}, info


def _split_nodes(cuts, level):
    """Nodes and weights of the tanh-sinh rule (:func:`symtheory.core.quadrature.
    tanh_sinh_unit`) on every interval between consecutive ``cuts (n, k)`` (rows sorted;
    zero-length intervals contribute nothing); nodes are placed by their distance to the
    nearer end, accurate near both ends."""
    side, gap, w = tanh_sinh_unit(level)
    a, b = cuts[:, :-1, None], cuts[:, 1:, None]
    L = b - a
    half_gap = 0.5 * gap                 # distance to the nearer end on [0, 1]
    x = np.where(side < 0, a + L * half_gap, b - L * half_gap)
    return x.reshape(len(cuts), -1), (L * (2.0 ** -level * 0.5 * w)).reshape(len(cuts), -1)


def _scalar_operator_float(model, noise_variance, level, z_max=12.0):
    """Eq. (15) for ``y = g(z) + sqrt(Delta) xi`` (one index, one output) in float64:
    nested tanh-sinh, inner over ``|z| <= z_max`` (Gaussian mass outside ~1e-32) split at
    the kinks and the real preimages of ``y`` (SymPy), outer over ``y`` split at the
    images of kinks, critical points and ``z = +-(0.5, 1, 2, 3, 4, 6, 8)``.  Returns
    ``(T, first, mass)``."""
    z, g, ysym, branches, points = _scalar_breakpoints(model)
    gnum = sp.lambdify(z, g, "numpy")
    pre_np = [sp.lambdify(ysym, b, "numpy") for b in branches]
    Delta = float(noise_variance)
    sd = math.sqrt(Delta)
    kinks = np.array([float(p) for p in points if abs(float(p)) < z_max])
    zgrid = np.linspace(-z_max, z_max, 4001)
    gz = np.asarray(gnum(zgrid), dtype=float) * np.ones_like(zgrid)
    marks = np.concatenate([kinks, [0.5, 1, 2, 3, 4, 6, 8], [-0.5, -1, -2, -3, -4, -6, -8]])
    ymarks = np.asarray(gnum(marks), dtype=float) * np.ones_like(marks)
    y_lo, y_hi = gz.min() - 12 * sd, gz.max() + 12 * sd
    ycuts = np.unique(np.concatenate([[y_lo, y_hi], ymarks[(ymarks > y_lo) & (ymarks < y_hi)]]))
    Y, WY = _split_nodes(ycuts[None, :], level)
    Y, WY = Y[0], WY[0]
    # inner cuts per y: -z_max, kinks, real preimages, z_max (missing ones -> z_max)
    cols = [np.full_like(Y, -z_max), np.full_like(Y, z_max)] + [np.full_like(Y, k) for k in kinks]
    with np.errstate(all="ignore"):
        for f in pre_np:
            v = np.asarray(f(Y + 0j), dtype=complex) * np.ones_like(Y)
            vr = [real_preimage(x, 1e-12) for x in v]
            cols.append(np.array([x if x is not None and abs(x) < z_max else z_max
                                  for x in vr], dtype=float))
    cuts = np.sort(np.stack(cols, axis=1), axis=1)
    Zn, Wz = _split_nodes(cuts, level)
    gZ = np.asarray(gnum(Zn), dtype=float) * np.ones_like(Zn)
    logf = -0.5 * Zn ** 2 - (Y[:, None] - gZ) ** 2 / (2 * Delta)
    top = np.max(logf, axis=1, keepdims=True)
    f = np.exp(logf - top) * Wz
    N0 = f.sum(axis=1)
    mean = (f * Zn).sum(axis=1) / N0
    second = (f * Zn ** 2).sum(axis=1) / N0
    J = second - mean ** 2 - 1.0
    dens = N0 * np.exp(top[:, 0]) / (2 * math.pi * sd)
    T = float(np.sum(WY * dens * J * J))
    first = float(np.sum(WY * dens * mean * mean))
    mass = float(np.sum(WY * dens))
    return np.array(T).reshape(1, 1, 1, 1), np.array(first).reshape(1, 1), mass


# ---------------------------------------------------------------------- constant mixing, mpmath
def gauss_hermite_mp(n, dps):
    """Probabilists' Gauss-Hermite nodes and weights (``sum w f(x) ~ E f(N(0,1))``) at
    ``dps`` digits by Golub-Welsch: eigenvalues of the Jacobi matrix of the Hermite
    recurrence (off-diagonal ``sqrt(k)``) and squared first eigenvector components."""
    import mpmath

    with mpmath.workdps(dps):
        A = mpmath.matrix(n, n)
        for k in range(1, n):
            A[k, k - 1] = A[k - 1, k] = mpmath.sqrt(k)
        x, Q = mpmath.eigsy(A)
        return [x[i] for i in range(n)], [Q[0, i] ** 2 for i in range(n)]


def _constant_mixing_operator_mp(model, n, dps):
    """Eq. (15) for a reduced link without free rows, mpmath Gauss-Hermite ``n^{Mr}`` in
    ``h`` (exact for polynomial integrands); branches and Jacobians by the same SymPy
    expressions evaluated in mpmath (:meth:`Kernel.mp`)."""
    import itertools

    import mpmath

    rp = ReducedPosterior(model)
    P, M, r = model.P, model.M, rp.r
    d = P * M
    Mr = M * r
    with mpmath.workdps(dps):
        x, w = gauss_hermite_mp(n, dps)
        Tmix = mpmath.matrix(model.reduction.mixing.xreplace(model.params).evalf(dps + 5).tolist())
        Tinv = Tmix ** -1
        ldT = mpmath.log(abs(mpmath.det(Tmix)))
        pars = [mpmath.mpf(v) for v in rp.pars]
        tol = mpmath.mpf(10) ** (-(dps // 2))
        keys = [(a, b, c, e) for a in range(P) for b in range(P) for c in range(P) for e in range(P)]
        T = {k: mpmath.mpf(0) for k in keys}
        first = {(a, b): mpmath.mpf(0) for a in range(P) for b in range(P)}
        for combo in itertools.product(range(n), repeat=Mr):
            weight = mpmath.fprod(w[i] for i in combo)
            H = mpmath.matrix(M, r)
            for j, i in enumerate(combo):
                H[j // r, j % r] = x[i]
            E = Tmix * H
            Ef = [E[i // r, i % r] for i in range(Mr)]
            fe = rp.feature_kernel.mp(*Ef, *pars, dps=dps)
            phi, ref = fe[:rp.n_feat], fe[rp.n_feat + 1:]
            Eb = rp.branch_kernel.mp(*phi, *pars, dps=dps)
            pts, lws = [], []
            for k in range(rp.n_branches):
                Ek = Eb[k * Mr:(k + 1) * Mr]
                if any(isinstance(v, mpmath.mpc) and abs(v.imag) > tol for v in Ek):
                    continue
                Ek = [v.real if isinstance(v, mpmath.mpc) else v for v in Ek]
                fk = rp.feature_kernel.mp(*Ek, *pars, dps=dps)
                if any(abs(a - b) > tol * (1 + abs(b)) for a, b in zip(fk[rp.n_feat + 1:], ref)):
                    continue
                detk = abs(fk[rp.n_feat])
                if detk == 0:
                    continue
                X = Tinv * mpmath.matrix([[Ek[i * r + q] for q in range(r)] for i in range(M)])
                zvec = mpmath.matrix(d, 1)
                for q, a in enumerate(rp.solved_rows):
                    for m in range(M):
                        zvec[a * M + m] = X[m, q]
                sq = mpmath.fsum(X[m, q] ** 2 for m in range(M) for q in range(r))
                lws.append(-sq / 2 - r * ldT - mpmath.log(detk))
                pts.append(zvec)
            if not pts:
                raise ArithmeticError("no valid inversion branch at a quadrature node")
            top = max(lws)
            ws = [mpmath.exp(l - top) for l in lws]
            tot = mpmath.fsum(ws)
            mean = sum((p * (wk / tot) for p, wk in zip(pts, ws)), mpmath.matrix(d, 1))
            cov = sum(((p - mean) * (p - mean).T * (wk / tot) for p, wk in zip(pts, ws)),
                      mpmath.matrix(d, d))
            for k2, v in _mp_tensor_from_cov(cov, P, M, weight).items():
                T[k2] += v
            for k2, v in _mp_first(mean, P, M, weight).items():
                first[k2] += v
    return T, first


# ---------------------------------------------------------------------- Monte Carlo
def _monte_carlo_operator(model, noise_variance, samples, seed, rule, batches=20, symmetry=None):
    """Eq. (15) by Monte Carlo over ``Z ~ N(0, I)`` (+ output noise) through the model's
    channel.  Returns per-batch tensors (heavy tails: the error bar is the spread of
    batch means, heavy tails)."""
    P, M = model.P, model.M
    rng = np.random.default_rng(seed)
    ch = model.channel(noise_variance if noise_variance else None, rule)
    per_batch = max(2, int(samples) // batches)
    Ts, firsts = [], []
    for _ in range(batches):
        Z = rng.standard_normal((per_batch, P, M))
        y = model.g(Z).reshape(per_batch, -1)
        if noise_variance:
            y = y + math.sqrt(noise_variance) * rng.standard_normal(y.shape)
        moments = ch.moments(y, np.zeros((per_batch, P, M)), np.eye(P))
        mean, cov = moments.mean, moments.cov
        bad = ~(np.all(np.isfinite(cov.reshape(per_batch, -1)), axis=1))
        if bad.any():
            raise FloatingPointError(f"posterior moments not finite on {bad.sum()} samples "
                                     "(channel quadrature failed)")
        w = np.full(per_batch, 1.0 / per_batch)
        T, first, _ = _operator_from_nodes(w, (None, mean, cov), P, M, symmetry)
        Ts.append(T)
        firsts.append(first)
    return np.array(Ts), np.array(firsts), per_batch * batches


# ---------------------------------------------------------------------- output quadrature
#: channel rule of the output quadrature: the channel's adaptive rule at a tolerance its
#: box reaches within the node budget at Delta = 0.1 on z1^2 - z2^2 (rtol 1e-10 is missed
#: there: 3e-7 estimated at 262k nodes per sample); its stated error enters the error bar
OUTPUT_QUADRATURE_RULE_RTOL = 1e-7
#: tanh-sinh level of the output quadrature (weak_recovery compares with level - 1)
OUTPUT_QUADRATURE_LEVEL = 4
#: nodes beyond this many output scales are dropped (their mass shows in ``1 - mass``)
OUTPUT_QUADRATURE_CUT = 60.0


def _output_quadrature_operator(model, noise_variance, level, rule=None, symmetry=None):
    """Eq. (15) for a noisy one-output link: ``E_y f(y) = sum_k w_k Z_out(y_k) f(y_k)``,
    tanh-sinh nodes ``w_k, y_k`` at ``level`` on ``(-inf, 0], [0, inf)`` mapped with the
    output scale ``sqrt(E g^2 + Delta)``, the posterior moments at ``omega = 0, V = I``
    from ``model.channel(noise_variance, rule)`` (default: its :class:`AdaptiveRule` at
    :data:`OUTPUT_QUADRATURE_RULE_RTOL`).  Returns ``(T, first, info)``; ``info['mass']``
    is ``sum w Z_out`` (1 up to the rule and the dropped tails), ``info['channel_error']``
    the channel's stated moment errors carried to ``T`` (absolute, first order)."""
    from ...core.quadrature import AdaptiveRule
    from ..integrate.level_set_output import output_pieces

    P, M = model.P, model.M
    ch = model.channel(noise_variance, rule or AdaptiveRule(rtol=OUTPUT_QUADRATURE_RULE_RTOL))
    scale = math.sqrt(_output_scale(model) ** 2 + noise_variance)
    y, wy = output_pieces([0.0], scale, level)
    keep = np.abs(y) <= OUTPUT_QUADRATURE_CUT * scale
    y, wy = y[keep], wy[keep]
    mom = ch.moments(y[:, None], np.zeros((y.size, P, M)), np.eye(P))
    w = wy * np.exp(mom.log_partition)
    T, first, _ = _operator_from_nodes(w, (None, mom.mean, mom.cov), P, M, symmetry)
    acc = ch.last_accuracy
    e = np.zeros(y.size) if acc is None else np.broadcast_to(acc.error, y.size)
    # first-order effect on T = E_y J (x) J of a covariance error e_k (V = I units) per
    # node: |dT| <= sum_k w_k 2 |J_k| e_k (far-tail nodes state large errors, tiny weights)
    Jn = np.linalg.norm((mom.cov - np.eye(P * M)[None]).reshape(y.size, -1), axis=1)
    info = {"mass": float(w.sum()), "y_nodes": int(y.size), "level": level,
            "channel_error": float(np.sum(w * 2 * Jn * e)),
            "channel_error_max": float(np.max(e)) if e.size else 0.0,
            "channel": acc.method if acc is not None else ch.method}
    return T, first, info


# ---------------------------------------------------------------------- level sets
#: first and last tanh-sinh level of the output integral of :func:`_level_set_operator`
LEVEL_SET_Y_LEVELS = (4, 10)


def _output_scale(model):
    """``sqrt(E g(Z)^2)`` under the prior (Gauss-Hermite 24 per index): the length that
    maps the infinite output pieces."""
    from ...core.quadrature import gauss_hermite

    x, w = gauss_hermite(24)
    grids = np.meshgrid(*[x] * (model.P * model.M), indexing="ij")
    weights = np.prod(np.meshgrid(*[w] * (model.P * model.M), indexing="ij"), axis=0)
    Z = np.stack([g.reshape(-1) for g in grids], axis=1).reshape(-1, model.P, model.M)
    g = model.g(Z).reshape(-1)
    return float(np.sqrt(np.sum(weights.reshape(-1) * g ** 2))) or 1.0


def _level_set_operator(model, rtol=1e-12):
    """Eq. (15) for a noiseless link integrated on its level sets: ``E_y f(y) = int dy
    Z_out(y|0, I) f(y)`` on tanh-sinh nodes in ``y`` split at the link's critical values
    (:func:`symtheory.glm.integrate.level_set.output_nodes`, refined to ``rtol``), the
    posterior moments at each ``y`` on the level set.  Returns ``(T, first, info)`` with
    the refinement's last relative change as ``info['error']``."""
    from ..integrate.level_set import critical_values
    from ..integrate.level_set_output import output_nodes

    ch = model.channel()
    P, M = model.P, model.M
    cuts = critical_values(model.link, model.indices, model.params)
    w, mean, cov, error = output_nodes(ch.structure, np.zeros(P * M), np.eye(P * M), cuts,
                                       _output_scale(model), rtol=rtol)
    T, first, _ = _operator_from_nodes(w, (None, mean.reshape(-1, P, M), cov), P, M)
    info = {"error": error, "mass": float(w.sum()), "y_nodes": int(w.size),
            "critical_values": cuts}
    return T, first, info


# ---------------------------------------------------------------------- assembly
def choose_method(model, noise_variance=None) -> str:
    """``observation-grid`` | ``cells`` | ``level-set`` | ``scalar-quadrature`` |
    ``output-quadrature`` | ``monte-carlo``."""
    if not noise_variance and model.reduction is not None:
        return "observation-grid"
    if sign_cells(model) is not None:
        return "cells"
    if not noise_variance and _has_level_set(model):
        return "level-set"
    if noise_variance and model.P * model.M == 1 and len(model.link) == 1:
        return "scalar-quadrature"
    if noise_variance and model.P * model.M <= 2 and len(model.link) == 1:
        return "output-quadrature"
    return "monte-carlo"


def _has_level_set(model) -> bool:
    from ..integrate.nested_level_set import link_level_set
    from ..integrate.link_structure import NotApplicable

    try:
        link_level_set(model.link, model.indices, model.params)
    except NotApplicable:
        return False
    return True


def _mp_operator(model, method, noise_variance, dps, gh_nodes, rule_digits=None):
    """``(T, first, info)`` at ``dps`` digits by ``method`` (dicts of mpf; ``info``: what
    the method reports about its rule; ``rule_digits``: the accuracy the scalar
    quadrature's rule is made for, default ``dps``)."""
    if method == "cells":
        return (*_cells_operator_mp(model, sign_cells(model), noise_variance, dps), {})
    if method == "scalar-quadrature":
        return _scalar_operator_mp(model, noise_variance, dps, rule_digits)
    if method == "observation-grid" and ReducedPosterior(model).constant_mixing \
            and not model.free_rows:
        return (*_constant_mixing_operator_mp(model, gh_nodes, dps), {})
    raise ParameterError(
        "precision is available for sign-type links, one-index links with Gaussian output "
        "noise and reduced links without free rows (e.g. y = z z^T); this model's "
        f"expectation ({method}) is computed in float64 only")


def linearized_operator(model, *, noise_variance=None, method="auto", outer_nodes=48,
                        width=8.0, rule=None, samples=200000, seed=0, dps=None, symmetry=None):
    """The operator (15) at the trivial point with the expectation computed by ``method``
    (see the module docstring; ``auto`` picks by :func:`choose_method`).

    ``outer_nodes``/``width``: observation grid (nodes per axis, box in units of the
    largest singular value of the mixing; Gauss-Hermite nodes per axis when the mixing
    is constant); ``rule``: quadrature over the free rows (observation grid, default Gauss-Hermite 30)
    or of the channel (output quadrature, Monte Carlo; default the channel's own
    adaptive rule); ``samples``/``seed``: Monte Carlo; ``dps``: mpmath digits for the cells and scalar-quadrature methods (default
    20); ``symmetry``: the link's symmetry group imposed on the observation grid and Monte
    Carlo (:func:`~symtheory.glm.thresholds.operator._operator_from_nodes`).  Returns a :class:`LinearizedOperator` (no error estimate: compare resolutions,
    as :func:`weak_recovery` does)."""
    if noise_variance is not None and not (np.isfinite(noise_variance) and noise_variance >= 0):
        raise ParameterError(f"noise_variance must be finite and >= 0, got {noise_variance}")
    method = choose_method(model, noise_variance) if method == "auto" else method
    P, M = model.P, model.M
    channel_rule = rule        # None: the channel's own (adaptive) rule
    rule = rule or TensorRule("gauss-hermite", 30)
    if method == "observation-grid":
        if noise_variance:
            raise ParameterError("the observation grid is for noiseless links (noise_variance 0)")
        T, first, info = _observation_grid(model, outer_nodes=outer_nodes, width=width, rule=rule,
                                           symmetry=symmetry)
        return LinearizedOperator(T, operator_matrix(T), first, method, info["mass"], info)
    if method in ("cells", "scalar-quadrature"):
        if method == "cells" and sign_cells(model) is None:
            raise ParameterError("method 'cells' needs a link made of signs of index factors")
        if method == "scalar-quadrature" and not (noise_variance and P * M == 1):
            raise ParameterError("method 'scalar-quadrature' needs one index, one output and "
                                 "noise_variance > 0")
        Td, Fd, _ = _mp_operator(model, method, noise_variance, dps or 20, None)
        T, first = _dict_to_tensor(Td, Fd, P)
        return LinearizedOperator(T, operator_matrix(T), first, method, 1.0,
                                  {"dps": dps or 20})
    if method == "level-set":
        if noise_variance:
            raise ParameterError("method 'level-set' is for noiseless links (noise_variance 0)")
        T, first, info = _level_set_operator(model)
        return LinearizedOperator(T, operator_matrix(T), first, method, info["mass"], info)
    if method == "output-quadrature":
        if not (noise_variance and len(model.link) == 1):
            raise ParameterError("method 'output-quadrature' needs one output and "
                                 "noise_variance > 0")
        T, first, info = _output_quadrature_operator(
            model, noise_variance, OUTPUT_QUADRATURE_LEVEL,
            channel_rule, symmetry)
        return LinearizedOperator(T, operator_matrix(T), first, method, info["mass"], info)
    if method == "monte-carlo":
        Ts, Fs, n = _monte_carlo_operator(model, noise_variance, samples, seed, channel_rule,
                                          symmetry=symmetry)
        T = Ts.mean(axis=0)
        return LinearizedOperator(T, operator_matrix(T), Fs.mean(axis=0), method, 1.0,
                                  {"samples": n, "batch_tensors": Ts, "batch_first": Fs})
    raise ParameterError(f"method must be auto, observation-grid, cells, level-set, "
                         f"scalar-quadrature, output-quadrature or monte-carlo, got {method!r}")


