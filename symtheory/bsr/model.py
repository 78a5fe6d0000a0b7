"""Bilinear sequence regression (BSR), declared symbolically.

Erba, Troiani, Biggio, Maillard, Zdeborova, *Bilinear Sequence Regression*,
arXiv:2410.18858 (PRX 2025); rectangular RIE: Troiani et al., arXiv:2203.07752.
Specification: ``docs/theory/bsr.md`` (section numbers below refer to it).

Model (bsr.md 1): ``y = Tr[X S*]/sqrt(d L) + sqrt(Delta) xi``, ``S* = U V^T/sqrt(r)``,
``beta = L/d >= 1``, ``rho = r/d``, ``alpha = n/(d L)``.  Everything below is *derived*
by SymPy from these inputs:

* the theorem used: Silverstein's equation (:func:`freeprob.sample_covariance`);
* the model's random-matrix structure: rows of ``S* + sqrt(D) Z`` are Gaussian with
  covariance ``V V^T/r + D I_L`` (bsr.md 4.2), and ``V V^T/r`` is itself a sample
  covariance of a point mass;
* the rectangular RIE denoiser ``xi(x) = x - (2D/sqrt(beta)) [(beta-1)/(2x) + H(x)]``
  and the Nishimori form ``mmse = 1 - beta^(-1/2) int xi^2 mu`` (bsr.md 3.2);
* the degrees-of-freedom count ``r(d + L - r)`` of a rank-r matrix (bsr.md 7);
* the Gaussian prior (overlap map from its log-partition, :mod:`glm.factors.gaussian_prior`).

Symbols: ``t = sqrt(beta)`` (keeps every relation polynomial), ``rho``, ``D`` (the
effective noise ``Delta_eff``), ``alpha``, ``delta``, ``v = 1 - q``.
"""
from __future__ import annotations

import sympy as sp

from ..core import freeprob, functionals
from ..glm.factors import gaussian_prior
from ..core.derive import cached_derivation

t, rho, D = sp.symbols("t rho D", positive=True)
alpha, delta = sp.symbols("alpha delta", nonnegative=True)
v = sp.Symbol("v", positive=True)       # 1 - q, the MMSE
h = sp.Symbol("h", positive=True)       # low-rank effective SNR
alpha_lr = sp.Symbol("alpha_lr", nonnegative=True)
x, mu, H = sp.symbols("x mu H", real=True)
LAW_PARAMS = (t, rho, D)


@cached_derivation(freeprob)
def observation_law():
    """Law of the symmetrized singular values of ``(S* + sqrt(D) Z)/(dL)^(1/4)`` (bsr.md 4).

    Returns a dict with the Wishart quadratic of ``V V^T/r``, the quartic ``P(m, w)``
    for the Gram matrix, the symmetrized ``P(G, z)`` and its edge polynomial.
    """
    phi = sp.Symbol("phi", positive=True)
    # V V^T / r: L x L, r = phi L rank-one terms of weight 1/r = (1/phi)/L
    wishart = freeprob.sample_covariance(freeprob.point_mass(1), ratio=phi, scale=1 / phi,
                                         params=(phi,))
    kappa = wishart.subs({phi: rho / t**2})  # phi = r/L = rho/beta
    # Gram Y Y^T (d x d): L columns, population V V^T/r + D, weight 1/sqrt(dL) = (1/t)/d
    gram = freeprob.sample_covariance(freeprob.shift(kappa, D), ratio=t**2, scale=1 / t,
                                      params=LAW_PARAMS)
    P, G, z = freeprob.symmetrized_singular_law(gram)
    edges = freeprob.edge_polynomial(P, G, z)
    return {"wishart": wishart, "gram": gram, "P": P, "G": G, "z": z, "edges": edges}


def rie_denoiser():
    """Optimal singular-value map ``xi(x)`` of the rectangular RIE (bsr.md 5.1)."""
    return x - 2 * D / t * ((t**2 - 1) / (2 * x) + H)


def quadratic_coefficients(expr, var):
    """``(a, b, c)`` with ``expr = a var^2 + b var + c`` (each factored); refuses other degrees.

    The numeric side solves such quadratics with the cancellation-free formula
    (:func:`symtheory.bsr.theory.quadratic_roots`) instead of a printed ``sqrt`` root,
    which SymPy tends to write in a form that cancels catastrophically.
    """
    poly = sp.Poly(sp.expand(expr), var)
    if poly.degree() != 2:
        raise ValueError(f"expected a quadratic in {var}, got degree {poly.degree()}")
    return tuple(sp.factor(c) for c in poly.all_coeffs())


@cached_derivation(freeprob)
def law_moments():
    """Mass and second moment of the symmetrized law (large-z expansion of ``P``):
    exact values against which a computed density is checked (bsr.md 3.2 uses
    ``int mu = 1`` and ``beta^(-1/2) int x^2 mu = 1 + D``)."""
    law = observation_law()
    moments = freeprob.large_z_moments(law["P"], law["G"], law["z"], 2)
    return sp.simplify(moments[0]), sp.simplify(moments[2])


@cached_derivation(freeprob)
def origin_slope():
    """``int mu/x^2 = -G'(0)`` in closed form (the first integral of bsr.md 3.2).

    For ``beta > 1`` the support of ``mu`` avoids 0 and ``G(z) = g z + O(z^3)`` near
    ``z = 0`` with ``g = G'(0) = -int mu/x^2``.  Substituting ``G = g z`` in ``P(G, z)``,
    the lowest order in ``z`` is a quadratic in ``g`` whose roots have product
    ``< 0``: ``g`` is its negative root.  Returns ``{"g": symbol, "quadratic": (a, b, c)}``.
    """
    law = observation_law()
    g = sp.Symbol("g")
    e = sp.Poly(sp.expand(law["P"].subs(law["G"], g * law["z"])), law["z"])
    lowest = min(m[0] for m in e.monoms())
    return {"g": g, "quadratic": quadratic_coefficients(e.coeff_monomial(law["z"] ** lowest), g)}


@cached_derivation(freeprob, functionals)
def rie_mmse():
    """``mmse_RIE(beta, rho, D) = 1 - beta^(-1/2) int xi(x)^2 mu(x) dx`` reduced by the
    spectral identities (bsr.md 3.2).  Returns ``(expr, {I_symbol: integrand})``."""
    law = observation_law()
    moments = freeprob.large_z_moments(law["P"], law["G"], law["z"], 2)
    xi = rie_denoiser()
    reduced, remaining = functionals.reduce_integral(mu * xi**2, x, mu, H, moments=moments,
                                                     even=True)
    expr = sp.expand(1 - reduced / t)
    return sp.collect(expr, list(remaining)), remaining


def alpha_pr_formula():
    """Perfect-recovery threshold from the dimension of the rank-r manifold (bsr.md 7).

    ``r(d + L - r)`` degrees of freedom over ``d L`` measurements per unit alpha,
    with ``r = rho d``, ``L = beta d``; valid for ``rho <= 1`` (else 1).
    """
    d = sp.Symbol("d", positive=True)
    r, L = rho * d, t**2 * d
    return sp.simplify(r * (d + L - r) / (d * L))


@cached_derivation(gaussian_prior)
def ridge_quadratic():
    """The ridge fixed point ``m = 1 - F(alpha/(Delta + m))`` (bsr.md 8) as a quadratic
    ``(a, b, c)`` in ``m``; the error is its largest root (``max(0, 1 - alpha)`` at
    ``Delta = 0``)."""
    m = sp.Symbol("m", positive=True)
    F = gaussian_prior.gaussian_overlap_map(alpha / (delta + m))
    return quadratic_coefficients(sp.numer(sp.together(m - (1 - F))), m)


@cached_derivation()
def ridge_mse():
    """Bayes-optimal ridge (lambda = Delta) on vectorized tokens (bsr.md 8).

    Derived from its fixed point ``m = F(alpha/(Delta + m))`` with the Gaussian prior's
    overlap map ``F(qhat) = qhat/(1+qhat)`` (error ``1 - F``); the non-negative root.
    """
    m = sp.Symbol("m", positive=True)
    F = gaussian_prior.gaussian_overlap_map(alpha / (delta + m))
    sols = sp.solve(sp.Eq(m, 1 - F), m)
    # the physical branch is positive for delta > 0 (check at a sample point)
    pick = [s for s in sols if s.subs({alpha: sp.Rational(1, 2), delta: sp.Rational(1, 10)}).evalf() > 0]
    if len(pick) != 1:
        raise RuntimeError("ridge fixed point: could not isolate the physical root")
    return sp.simplify(pick[0])


@cached_derivation(freeprob)
def beta_infinity():
    """beta -> infinity limit (bsr.md 9), derived from the finite-beta law.

    With ``w = t u`` and ``m = m~/t`` the Gram matrix becomes ``Y Y^T/sqrt(beta) ->
    U U^T/r + D``; the leading order of the quartic in ``t`` is the relation of
    ``m~(u) = E[1/(kappa + D - u)]``.  Each column of ``S*`` is then a Gaussian
    linear-estimation problem with covariance ``U U^T/r``, whose MMSE is
    ``E[D kappa/(kappa + D)] = D - D^2 m~(0)``.

    Returns a dict with the limiting relation, ``mmse_inf(D)`` and the noiseless
    closed form of ``1 - q`` (below ``min(rho, 1)``).
    """
    law = observation_law()
    m, w = law["gram"].s, law["gram"].u
    mt, u = sp.symbols("mt u")
    expr = sp.expand(sp.numer(sp.together(law["gram"].poly.subs({m: mt / t, w: t * u}))))
    poly_t = sp.Poly(expr, t)
    lead = sp.factor(poly_t.coeffs()[0])
    _, factors = sp.factor_list(lead)
    rel = [f for f, _ in factors if f.has(mt) and f.has(u)]
    if len(rel) != 1:
        raise RuntimeError("beta->infinity: ambiguous limiting relation")
    rel = sp.expand(rel[0])
    roots = sp.solve(rel, mt)
    # physical branch: m~(u) -> 0 as u -> -infinity
    phys = [r for r in roots if sp.limit(r.subs({rho: sp.Rational(1, 3), D: sp.Rational(1, 2)}),
                                          u, -sp.oo) == 0]
    if len(phys) != 1:
        raise RuntimeError("beta->infinity: could not select the Stieltjes branch")
    m0 = sp.simplify(phys[0].subs(u, 0))
    mmse_inf = sp.simplify(D - D**2 * m0)
    # y = 1 - D m~(0) = E[kappa/(kappa + D)], mmse_inf = D y: the quadratic for y has
    # no cancellation at any D (its physical root is the smaller one; checked in tests)
    y = sp.Symbol("y")
    y_relation = sp.numer(sp.together(rel.subs(u, 0).subs(mt, (1 - y) / D)))
    y_quadratic = quadratic_coefficients(y_relation, y)
    # as D -> 0 the roots tend to 1 and rho: the dependence on D is then in the last
    # digits of the coefficients; around each limit the shifted quadratic keeps it
    y_roots0 = sp.solve(y_relation.subs(D, 0), y)
    shifted = {r0: quadratic_coefficients(sp.expand(y_relation.subs(y, r0 + y)), y)
               for r0 in y_roots0}
    # as D -> inf the coefficients grow like D rho (overflow at D rho ~ 1e308) while
    # the MMSE itself tends to 1: the quadratic for mmse_inf = D y in eps = 1/D keeps
    # every coefficient O(1) (its physical root is again the smaller one)
    mmse_sym, eps = sp.symbols("m eps", positive=True)
    large_D_relation = sp.numer(sp.together(y_relation.subs({y: mmse_sym * eps, D: 1 / eps})))
    common = sp.gcd_list(sp.Poly(large_D_relation, mmse_sym).all_coeffs())
    large_D = quadratic_coefficients(sp.cancel(large_D_relation / common), mmse_sym)
    # noiseless fixed point v = mmse_inf(v/alpha)
    sols = sp.solve(sp.Eq(v, mmse_inf.subs(D, v / alpha)), v)
    noiseless = [sp.factor(s) for s in sols if s != 0]
    return {"relation": rel, "m0": m0, "mmse": mmse_inf, "noiseless": noiseless,
            "y": y, "y_quadratic": y_quadratic, "y_shifted": shifted,
            "eps": eps, "mmse_quadratic_large_D": large_D}


@cached_derivation(gaussian_prior)
def low_rank():
    """Low-rank limit r = O(1) (bsr.md 10), in units ``alpha_lr = n/(r(d+L))``.

    Spiked rectangular model with Gaussian factors: ``qhat_u = h(1+beta) q_v``,
    ``qhat_v = h(1+beta)/beta q_u``, ``q_{u,v} = F(qhat_{u,v})`` with the prior's overlap
    map, ``h = alpha_lr/(Delta + 1 - q)``, ``q = q_u q_v``.  Returns the nontrivial
    ``q(h)``, the weak-recovery threshold and the beta -> infinity closed form.
    """
    qu, qv = sp.symbols("q_u q_v", positive=True)
    beta = t**2
    a = h * (1 + beta)
    F = gaussian_prior.gaussian_overlap_map
    sols = sp.solve([sp.Eq(qu, F(a * qv)), sp.Eq(qv, F(a / beta * qu))], [qu, qv], dict=True)
    nontrivial = [s for s in sols if s[qu] != 0]
    if len(nontrivial) != 1:
        raise RuntimeError("low-rank SE: expected one nontrivial solution")
    q_of_h = sp.factor(nontrivial[0][qu] * nontrivial[0][qv])
    # weak recovery: the nontrivial branch emerges from q = 0 where q(h(q=0)) = 0
    h0 = sp.solve(sp.numer(sp.factor(nontrivial[0][qu])), h)
    h_weak = [s for s in h0 if s.is_positive or s.subs(t, 2).evalf() > 0]
    alpha_weak = sp.simplify(h_weak[0] * (1 + delta))  # h(0) = alpha_lr/(1 + Delta)
    # beta -> infinity: q(h) -> limit, then solve q = q_inf(alpha_lr/(Delta + 1 - q))
    # noiseless strong threshold: 1 - q(h) ~ c/h as h -> oo, and h = alpha_lr/(1 - q)
    alpha_strong = sp.limit(h * (1 - q_of_h), h, sp.oo)
    q_inf = sp.limit(q_of_h, t, sp.oo)
    qq = sp.Symbol("q", positive=True)
    fps = sp.solve(sp.Eq(qq, q_inf.subs(h, alpha_lr / (delta + 1 - qq))), qq)
    # the overlap is the root in [0, 1] (check at a sample point)
    sample = {alpha_lr: sp.Rational(1, 2), delta: sp.Rational(1, 10)}
    phys = [r for r in fps if 0 <= r.subs(sample).evalf() <= 1]
    if len(phys) != 1:
        raise RuntimeError("low-rank beta -> infinity: could not select the overlap root")
    # 1 - q_u q_v = (1 - q_u) + q_u (1 - q_v): each 1 - q_. factored has no cancellation
    # and no h^3 (the single fraction 1 - q overflows to inf/inf for h ~ 1e103)
    one_minus_qu = sp.factor(1 - nontrivial[0][qu])
    one_minus_qv = sp.factor(1 - nontrivial[0][qv])
    v_stable = one_minus_qu + (1 - one_minus_qu) * one_minus_qv
    return {"q_of_h": q_of_h, "v_of_h": sp.factor(1 - q_of_h), "v_of_h_stable": v_stable,
            "q_u": nontrivial[0][qu], "q_v": nontrivial[0][qv],
            "alpha_weak": alpha_weak, "alpha_strong": alpha_strong, "q_inf_of_h": q_inf,
            "q_beta_inf": sp.simplify(phys[0])}


def free_entropy_expr():
    """Replica free entropy restricted to ``qhat(q) = alpha/(Delta + 1 - q)`` (bsr.md 12).

    ``f = (alpha-1)/2 log qhat - qhat Delta/2 - Sigma(mu)/beta - (beta-1)/beta int mu log|x|``
    with ``mu`` at noise ``D = 1/qhat`` (q-independent constants dropped, as in the
    paper's figure).  Returns ``(f, (Sigma, L, qhat))`` with ``Sigma``/``L`` symbols.
    """
    Sigma, Lg, qhat = sp.symbols("Sigma L_log qhat")
    f = (alpha - 1) / 2 * sp.log(qhat) - qhat * delta / 2 - Sigma / t**2 - (t**2 - 1) / t**2 * Lg
    return f, (Sigma, Lg, qhat)


lam = sp.Symbol("lam", positive=True)


@cached_derivation(freeprob)
def ridge_general():
    """Ridge with any penalty ``lam`` on vectorized tokens (bsr.md 8), derived.

    ``w = (Phi^T Phi + lam)^(-1) Phi^T y`` with ``Phi`` (n x p) of i.i.d. N(0, 1/p)
    entries, ``n/p = alpha``, ``w*`` i.i.d. N(0, 1):
    ``E|w - w*|^2/p = lam^2 m'(-lam) + Delta (m(-lam) - lam m'(-lam))``, ``m`` the
    Stieltjes transform of ``Phi^T Phi`` -- a sample covariance of a point mass with
    ratio alpha (Marchenko-Pastur, from :func:`freeprob.sample_covariance`).
    """
    mp = freeprob.sample_covariance(freeprob.point_mass(1), ratio=alpha, scale=1,
                                    params=(alpha,))
    m, u = mp.s, mp.u
    roots = sp.solve(mp.poly, m)
    # Stieltjes branch: m(u) ~ -1/u as u -> -infinity (positive for u < 0)
    sample = {alpha: sp.Rational(1, 3)}
    phys = [r for r in roots if sp.limit(r.subs(sample) * u, u, -sp.oo) == -1]
    if len(phys) != 1:
        raise RuntimeError("ridge: could not select the Marchenko-Pastur branch")
    m_u = phys[0]
    m0 = m_u.subs(u, -lam)
    m1 = sp.diff(m_u, u).subs(u, -lam)
    err = lam**2 * m1 + delta * (m0 - lam * m1)
    return sp.simplify(err)


def mnne_threshold_definition():
    """Donoho-Gavish-Montanari minimax threshold of nuclear-norm minimization (bsr.md 11.2).

    With ``b = 1/beta``, ``gamma = b(1-rho)/(1-rho b)``, ``p_gamma`` the Marchenko-Pastur
    density on ``[(1-sqrt gamma)^2, (1+sqrt gamma)^2]`` and
    ``M(lam) = rho + b rho - b rho^2 + (1 - rho b)[rho lam^2 + (1-rho) int_{t >= lam^2}
    (sqrt t - lam)^2 p_gamma(t) dt]``, ``alpha_MNNE = min_lam M``.  Returns the pieces:
    the outer expression in ``I = int (sqrt t - lam)^2 p`` and its lam-derivative
    (Leibniz; the boundary term vanishes), the integrand and its lam-derivative, and
    the support ends.
    """
    tt = sp.Symbol("tt", positive=True)
    b = 1 / t**2
    gamma = b * (1 - rho) / (1 - rho * b)
    g_lo, g_hi = (1 - sp.sqrt(gamma)) ** 2, (1 + sp.sqrt(gamma)) ** 2
    density = sp.sqrt((g_hi - tt) * (tt - g_lo)) / (2 * sp.pi * gamma * tt)
    integrand = (sp.sqrt(tt) - lam) ** 2 * density
    I, dI = sp.symbols("I dI")
    M_expr = rho + b * rho - b * rho**2 + (1 - rho * b) * (rho * lam**2 + (1 - rho) * I)
    # d/dlam of int_{lam^2}^{g_hi} integrand dt: boundary term integrand(lam^2) * 2 lam = 0
    assert sp.simplify(integrand.subs(tt, lam**2)) == 0
    dM_expr = sp.diff(M_expr, lam) + sp.diff(M_expr, I) * dI
    return {"M": M_expr, "dM": dM_expr, "I": I, "dI": dI, "integrand": integrand,
            "d_integrand": sp.diff(integrand, lam), "t": tt, "lo": g_lo, "hi": g_hi,
            "gamma": gamma}
