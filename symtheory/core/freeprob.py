"""Symbolic free probability: algebraic equations for Stieltjes transforms.

Conventions.  For a probability law ``nu`` on the real line,

* ``s_nu(u) = E_nu[1/(t - u)]`` (the resolvent convention of Marchenko-Pastur and
  Silverstein; ``s(u) ~ -1/u`` at infinity);
* ``G_mu(z) = E_mu[1/(z - t)] = -s_mu(z)`` (the Cauchy/Stieltjes convention used for
  densities: ``mu(x) = Im G(x - i0)/pi``).

An *algebraic law* is given by a polynomial relation ``P(s, u) = 0`` satisfied by its
transform (:class:`AlgebraicStieltjes`).  Laws are built from one theorem only,
Silverstein's equation for sample-covariance matrices (:func:`sample_covariance`),
together with exact operations (shift, scaling, symmetrization of singular values);
every polynomial is obtained by elimination (resultants), never typed in.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import sympy as sp


@dataclass(frozen=True)
class AlgebraicStieltjes:
    """Polynomial relation ``poly(s, u) = 0`` for ``s(u) = E[1/(t - u)]``.

    ``params`` are the free parameters (positive symbols) of the law.
    """

    poly: sp.Expr
    s: sp.Symbol
    u: sp.Symbol
    params: tuple = ()

    def degree(self) -> int:
        return sp.Poly(self.poly, self.s).degree()

    def subs(self, mapping) -> "AlgebraicStieltjes":
        return AlgebraicStieltjes(sp.expand(self.poly.subs(mapping)), self.s, self.u,
                                  tuple(p for p in self.params if p not in mapping))


def point_mass(value=1, s=None, u=None) -> AlgebraicStieltjes:
    """Law ``delta_value``: ``s(u) = 1/(value - u)``, i.e. ``(value - u) s - 1 = 0``."""
    s = s or sp.Symbol("s")
    u = u or sp.Symbol("u")
    return AlgebraicStieltjes(sp.expand((value - u) * s - 1), s, u)


def shift(law: AlgebraicStieltjes, c) -> AlgebraicStieltjes:
    """Law of ``t + c``: ``s_{t+c}(u) = s_t(u - c)``."""
    return AlgebraicStieltjes(sp.expand(law.poly.subs(law.u, law.u - c)), law.s, law.u,
                              law.params)


def _primitive_factor(expr, var_must, other_vars, probe):
    """Irreducible factor of ``expr`` that is the law's relation.

    Among the factors depending on every variable in ``var_must``, keep the one
    satisfied by the large-``|u|`` branch ``s ~ probe``.  Constant, monomial and
    parameter-only factors are discarded.
    """
    _, factors = sp.factor_list(sp.expand(expr))
    cands = [f for f, _ in factors if all(f.has(v) for v in var_must)]
    if len(cands) == 1:
        return sp.expand(cands[0])
    if not cands:
        raise ValueError("elimination produced no factor depending on all variables")
    return sp.expand(probe(cands))


def sample_covariance(population: AlgebraicStieltjes, ratio, scale, m=None, w=None,
                      params=()) -> AlgebraicStieltjes:
    """Law of the eigenvalues of ``M = sum_{j<=N} tau_j x_j x_j^T`` (``d x d``).

    ``x_j ~ N(0, I_d)`` independent, ``N/d -> ratio``, ``tau_j = t_j * scale / d`` with
    ``t_j ~ population``.  Silverstein's equation for ``m(w) = (1/d) Tr (M - w)^{-1}``:

        1/m = -w + ratio * E[ scale t / (1 + scale t m) ]
            = -w + (ratio/m) * (1 - s_pop(-1/(scale m)) / (scale m)).

    The population transform is eliminated with a resultant; returns the relation
    ``P(m, w) = 0`` (the irreducible factor satisfied by ``m ~ -1/w``).
    """
    m = m or sp.Symbol("m")
    w = w or sp.Symbol("w")
    s, u = sp.Dummy("s_pop"), sp.Dummy("u_pop")
    pop_poly = population.poly.xreplace({population.s: s, population.u: u})
    kappa = sp.sympify(scale)
    silverstein = 1 / m + w - (ratio / m) * (1 - s / (kappa * m))
    pop = pop_poly.subs(u, -1 / (kappa * m))
    a = sp.numer(sp.together(silverstein))
    b = sp.numer(sp.together(pop))
    res = sp.resultant(sp.expand(a), sp.expand(b), s)
    all_params = tuple(params) or tuple(sorted(res.free_symbols - {m, w}, key=str))

    def probe(cands):
        return _select_branch(cands, m, w, all_params)

    poly = _primitive_factor(res, (m, w), all_params, probe)
    return AlgebraicStieltjes(poly, m, w, all_params)


def _select_branch(cands, s, u, params, trials=3):
    """Pick the candidate factor that has a root ``s ~ -1/u`` for large ``|u|``."""
    rng = random.Random(12345)
    scores = []
    for f in cands:
        bad = 0
        for _ in range(trials):
            vals = {p: sp.Rational(rng.randint(20, 300), 100) for p in params}
            uu = sp.Integer(10) ** 6 * sp.I
            roots = sp.Poly(f.subs(vals).subs(u, uu), s).nroots(n=30)
            target = -1 / uu
            if not roots or min(abs(complex(r - target)) for r in roots) > 1e-3 * abs(complex(target)):
                bad += 1
        scores.append(bad)
    best = min(range(len(cands)), key=lambda i: scores[i])
    if scores[best] != 0 or scores.count(0) > 1:
        raise ValueError("could not identify the factor carrying the physical branch")
    return cands[best]


def symmetrized_singular_law(law: AlgebraicStieltjes, G=None, z=None) -> tuple[sp.Expr, sp.Symbol, sp.Symbol]:
    """Symmetrized singular-value law from the law of the squared singular values.

    If ``lambda = sigma^2`` has transform ``m(w)``, the even law
    ``(delta_sigma + delta_-sigma)/2`` has ``G(z) = z E[1/(z^2 - lambda)] = -z m(z^2)``.
    Returns the polynomial ``P(G, z)`` (numerator of ``law(m=-G/z, w=z^2)``) and the
    two symbols.
    """
    G = G or sp.Symbol("G")
    z = z or sp.Symbol("z")
    expr = law.poly.subs({law.s: -G / z, law.u: z**2})
    num = sp.numer(sp.together(expr))
    _, factors = sp.factor_list(sp.expand(num))
    keep = [f for f, k in factors if f.has(G) and f.has(z)]
    if len(keep) != 1:
        raise ValueError("symmetrization left an ambiguous factorization")
    return sp.expand(keep[0]), G, z


def edge_polynomial(P: sp.Expr, G: sp.Symbol, z: sp.Symbol) -> sp.Expr:
    """Polynomial in ``z`` whose real roots contain every edge of the support.

    Edges are branch points of ``G(z)``: zeros of the discriminant of ``P`` in ``G``
    (and of its leading coefficient).  The discriminant is factored symbolically and
    its parameter-only content dropped: numerically stripping "small" coefficients
    instead creates spurious roots.
    """
    disc = sp.discriminant(sp.Poly(P, G)).as_expr()
    lead = sp.Poly(P, G).LC()
    _, factors = sp.factor_list(sp.expand(disc * lead))
    kept = [f for f, _ in factors if f.has(z) and sp.Poly(f, z).degree() > 0
            and not (f.is_Pow or f == z)]
    if not kept:
        raise ValueError("no edge factor found")
    return sp.expand(sp.Mul(*kept))


def large_z_moments(P: sp.Expr, G: sp.Symbol, z: sp.Symbol, order: int) -> list[sp.Expr]:
    """Moments ``E[t^k]``, ``k = 0..order``, of the law whose ``G`` solves ``P(G, z) = 0``.

    Uses the expansion ``G(z) = sum_k E[t^k] / z^(k+1)`` at infinity, solved order by
    order (the ``k = 0`` coefficient is fixed to 1, the normalization).
    """
    eps = sp.Symbol("eps_", positive=True)
    cs = sp.symbols(f"c1:{order + 1}")
    series = eps * (1 + sum(c * eps ** (k + 1) for k, c in enumerate(cs)))
    expr = sp.expand(sp.numer(sp.together(P.subs({z: 1 / eps, G: series}))))
    coeffs = list(reversed(sp.Poly(expr, eps).all_coeffs()))
    # lowest orders vanish identically iff G ~ 1/z is a branch of P
    k0 = 0
    while k0 < len(coeffs) and not (coeffs[k0].free_symbols & set(cs)):
        if sp.simplify(coeffs[k0]) != 0:
            raise ValueError("G(z) ~ 1/z is not a branch of the polynomial")
        k0 += 1
    sol: dict = {}
    moments = [sp.Integer(1)]
    for c in coeffs[k0:]:
        if len(moments) > order:
            break
        c = sp.expand(c.subs(sol))
        unknown = sorted((x for x in c.free_symbols & set(cs) if x not in sol), key=cs.index)
        if not unknown:
            if sp.simplify(c) != 0:
                raise ValueError("inconsistent large-z expansion")
            continue
        x = unknown[0]
        val = sp.solve(c, x)
        if len(val) != 1:
            raise ValueError("moment recursion is not linear at this order")
        sol[x] = sp.factor(val[0])
        moments.append(sol[x])
    return moments


# ----------------------------------------------------------------- R-transforms
# Voiculescu's R-transform: G^{-1}(g) = R(g) + 1/g, and R_{a boxplus b} = R_a + R_b for
# free (e.g. independent, one of them rotation invariant) a and b.  An algebraic law
# has an algebraic R-transform; the relations below are obtained by substitution and
# resultants, like everything else in this module.


def r_transform_relation(law: AlgebraicStieltjes, R=None,
                         g=None) -> tuple[sp.Expr, sp.Symbol, sp.Symbol]:
    """Polynomial ``Q(R, g) = 0`` satisfied by the R-transform of ``law``.

    With ``G = -s`` and ``z = u`` the inverse Cauchy transform is ``z = R(g) + 1/g`` at
    ``G = g``, so ``Q`` is the numerator of ``law.poly(s = -g, u = R + 1/g)`` (factors
    depending on one variable only are dropped).  Returns ``(Q, R, g)``.
    """
    R = R or sp.Symbol("R")
    g = g or sp.Symbol("g")
    expr = law.poly.subs({law.s: -g, law.u: R + 1 / g}, simultaneous=True)
    num = sp.numer(sp.together(expr))
    _, factors = sp.factor_list(sp.expand(num))
    keep = [f for f, _ in factors if f.has(R) and f.has(g)]
    if len(keep) != 1:
        raise ValueError(f"R-transform relation: ambiguous factorization {keep}")
    return sp.expand(keep[0]), R, g


def law_from_r_transform(Q: sp.Expr, R: sp.Symbol, g: sp.Symbol, params=(), s=None,
                         u=None) -> AlgebraicStieltjes:
    """Inverse of :func:`r_transform_relation`: the Stieltjes relation of the law whose
    R-transform solves ``Q(R, g) = 0`` (``g = -s``, ``R = u - 1/g = u + 1/s``).  The factor kept
    is the one carrying the branch ``s ~ -1/u`` at infinity."""
    s = s or sp.Symbol("s")
    u = u or sp.Symbol("u")
    expr = Q.subs({R: u + 1 / s, g: -s}, simultaneous=True)
    num = sp.numer(sp.together(expr))
    params = tuple(params) or tuple(sorted(num.free_symbols - {s, u}, key=str))
    poly = _primitive_factor(num, (s, u), params,
                             lambda cands: _select_branch(cands, s, u, params))
    return AlgebraicStieltjes(poly, s, u, params)


def semicircle(variance, s=None, u=None, params=()) -> AlgebraicStieltjes:
    """Wigner semicircle of the given variance, defined by its R-transform
    ``R(g) = variance * g`` (the free Gaussian: only the second free cumulant)."""
    R, g = sp.symbols("R_sc g_sc")
    return law_from_r_transform(R - sp.sympify(variance) * g, R, g, params=params, s=s, u=u)


def free_additive_convolution(a: AlgebraicStieltjes, b: AlgebraicStieltjes,
                              params=()) -> AlgebraicStieltjes:
    """Law of ``A + B`` for free ``A ~ a``, ``B ~ b``: ``R = R_a + R_b``.

    ``R_a`` is eliminated between ``Q_a(R_a, g) = 0`` and ``Q_b(R - R_a, g) = 0`` by a
    resultant; the relation is returned in the variables of ``a``.
    """
    R, g, Ra = sp.Symbol("R_"), sp.Symbol("g_"), sp.Symbol("Ra_")
    Qa, _, _ = r_transform_relation(a, Ra, g)
    Qb, Rb, _ = r_transform_relation(b, sp.Symbol("Rb_"), g)
    Qb = Qb.subs(Rb, R - Ra)
    res = sp.resultant(sp.Poly(Qa, Ra), sp.Poly(sp.expand(Qb), Ra)).as_expr()
    _, factors = sp.factor_list(sp.expand(res))
    cands = [f for f, _ in factors if f.has(R) and f.has(g)]
    params = tuple(params) or tuple(sorted((set(a.params) | set(b.params)), key=str))
    laws = [law_from_r_transform(sp.expand(f), R, g, params, a.s, a.u) for f in cands]
    if len(laws) == 1:
        return laws[0]
    poly = _select_branch([lw.poly for lw in laws], a.s, a.u, params)
    return AlgebraicStieltjes(poly, a.s, a.u, params)


def free_additive_convolution_semicircle(law: AlgebraicStieltjes, variance,
                                         params=()) -> AlgebraicStieltjes:
    """Law of ``A + sqrt(variance) Z``, ``Z`` a Wigner (GOE) matrix with semicircle on
    ``[-2, 2]`` free from ``A``: ``R_Y(g) = R_A(g) + variance g``."""
    params = tuple(params) or tuple(law.params) + tuple(
        sorted(sp.sympify(variance).free_symbols - set(law.params), key=str))
    return free_additive_convolution(law, semicircle(variance, params=params), params=params)
