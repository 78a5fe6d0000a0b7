"""Free-probability derivations and the algebraic spectral-law engine.

Independent paths used here: the spec's published polynomials (bsr.md 4.2, 4.4),
singular values of sampled matrices, mpmath (tanh-sinh + polyroots) integrals,
direct SciPy quadrature, and exact values for the semicircle law.
"""
import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from symtheory.bsr import model as M
from symtheory.bsr.theory import theory
from symtheory.core import freeprob
from symtheory.core.functionals import reduce_integral
from symtheory.core.spectral import AlgebraicSpectralLaw

t, rho, D = M.t, M.rho, M.D


def test_marchenko_pastur_quadratic_is_derived():
    law = M.observation_law()["wishart"]
    s, u = law.s, law.u
    phi = sp.Symbol("phi", positive=True)
    textbook = u * s**2 + (phi * u + 1 - phi) * s + phi  # bsr.md 4.2
    assert sp.simplify(law.poly / textbook).is_constant()


def test_quartic_matches_the_published_form():
    law = M.observation_law()["gram"]
    m, w = law.s, law.u
    beta = t**2
    spec = (-D * w**2 * m**4 + (2 * D * (beta - 1) * w - t * w**2) * m**3
            + (t * (beta - 2 + rho * (1 + D)) * w - D * (beta - 1)**2) * m**2
            + (rho * beta * w + t * (beta - 1) * (1 - rho * (1 + D))) * m + rho * beta)
    assert sp.expand(law.poly + spec) == 0 or sp.expand(law.poly - spec) == 0


def test_edge_polynomial_is_the_quintic_of_the_spec():
    law = M.observation_law()
    z = law["z"]
    w = sp.Symbol("w")
    E = sp.Poly(sp.expand(law["edges"]).subs(z**2, w), w)
    assert E.degree() == 5
    beta, phi = t**2, rho / t**2
    c5 = 4 * phi**3 * beta**sp.Rational(7, 2)
    c0 = D**2 * (beta - 1)**4 * ((phi * (1 + D) - 1)**2 + 4 * D * phi) * ((rho * (1 + D) - 1)**2 + 4 * D * rho)
    ratio_spec = sp.simplify(c0 / c5)
    ratio = sp.simplify(E.all_coeffs()[-1] / E.all_coeffs()[0])
    assert sp.simplify(ratio - ratio_spec) == 0


def test_moments_from_large_z_expansion():
    law = M.observation_law()
    mom = freeprob.large_z_moments(law["P"], law["G"], law["z"], 2)
    assert mom[0] == 1 and mom[1] == 0
    assert sp.simplify(mom[2] - t * (1 + D)) == 0  # (1/sqrt(beta)) int x^2 mu = 1 + D


def test_rie_mmse_reduction_gives_the_published_formula():
    expr, rem = M.rie_mmse()
    I1, I2 = sorted(rem, key=str)  # I[mu/x^2], I[mu^3]
    published = D - D**2 / t**3 * ((t**2 - 1)**2 * I1 + 4 * sp.pi**2 / 3 * I2)
    assert sp.simplify(expr - published) == 0


def test_reduce_integral_rejects_non_linear_terms():
    x, mu, H = M.x, M.mu, M.H
    with pytest.raises(ValueError):
        reduce_integral(mu**2 * x, x, mu, H, moments=(1, 0, 1))


def _law():
    return theory().law


def _params(draw_beta, draw_rho, draw_D):
    return (math.sqrt(draw_beta), draw_rho, draw_D)


params_strategy = st.tuples(st.floats(1.0, 6.0), st.floats(0.05, 2.0), st.floats(0.02, 3.0))


def _identity_integrals(law, p):
    x, mu, H = sp.symbols("x mu H", real=True)
    k = law.integrand_kernel("test_identities", [mu, x**2 * mu, x * H * mu, H**2 * mu, mu**3],
                             x, mu, H)
    return law.integrate(k, *p, rtol=1e-12)


@given(params_strategy)
def test_density_normalization_moments_and_hilbert_identities(bp):
    law = _law()
    p = _params(*bp)
    res = _identity_integrals(law, p)
    one, m2, xH, H2, mu3 = res.values
    # quadrature converged to rtol 1e-12; allow 1e-9 for the root-finding noise near edges
    assert abs(one - 1) < 1e-9
    assert abs(m2 - p[0] * (1 + p[2])) < 1e-9 * m2
    assert abs(xH - 0.5) < 1e-9
    assert abs(H2 - math.pi**2 / 3 * mu3) < 1e-9 * H2


def test_integrals_and_functionals_report_on_the_result_base():
    """IntegralResult and FunctionalValue are core Results: ``values``/``errors``/``nodes``
    are the value, error estimate and iterations; the functional's error is the
    coefficient-weighted sum of its integrals' errors (nonzero: a real estimate)."""
    from symtheory.core.result import Result

    law = _law()
    res = _identity_integrals(law, _params(2.0, 0.5, 0.4))
    assert isinstance(res, Result) and res.converged and res.error_kind == "estimate"
    assert res.values is res.value and res.errors is res.error and res.nodes == res.iterations > 0
    fv = theory().mmse_functional.evaluate((math.sqrt(2.0), 0.5, 0.4))
    assert isinstance(fv, Result) and fv.converged and fv.nodes == fv.iterations > 0
    assert 0 < fv.error <= 1e-11 * abs(fv.value) and set(fv.errors) == set(fv.integrals)


@given(st.floats(1.2, 6.0), st.floats(0.05, 2.0), st.floats(0.02, 3.0))
def test_inverse_second_moment_is_algebraic(beta, r, Dv):
    """int mu/x^2 = m(0): the root of the quartic at w = 0 (a second, exact path)."""
    law = _law()
    x, mu, H = sp.symbols("x mu H", real=True)
    k = law.integrand_kernel("test_inv2", [mu / x**2], x, mu, H)
    val = law.integrate(k, math.sqrt(beta), r, Dv, rtol=1e-12).values[0]
    tt = math.sqrt(beta)
    # quartic at w = 0: -D(beta-1)^2 m^2 + t(beta-1)(1 - rho(1+D)) m + rho beta = 0, m(0) > 0
    a2, a1, a0 = -Dv * (beta - 1)**2, tt * (beta - 1) * (1 - r * (1 + Dv)), r * beta
    m0 = max(np.roots([a2, a1, a0]).real)
    assert abs(val - m0) < 1e-9 * m0


def test_two_bulks_of_the_spec():
    sup = _law().support(math.sqrt(5), 0.2, 0.05)
    assert len(sup.bulks) == 2
    (a, b), (c, e) = sup.bulks
    np.testing.assert_allclose([a, b, c, e], [0.194, 0.461, 1.80, 5.05], atol=5e-3)


@pytest.mark.parametrize("beta,r,Dv", [(2.0, 0.5, 0.3), (1.0, 0.2, 0.5), (5.0, 0.2, 0.05)])
def test_density_matches_sampled_singular_values(beta, r, Dv):
    """Empirical CDF of singular values of (S* + sqrt(D) Z)/(dL)^(1/4) at d = 500.

    Eigenvalue rigidity makes the empirical CDF deviate from the limit by O(log d / d);
    we allow 0.02 (about 10/d) in Kolmogorov distance.
    """
    rng = np.random.default_rng(2024)
    d = 500
    L, rr = int(beta * d), int(r * d)
    S = rng.standard_normal((d, rr)) @ rng.standard_normal((rr, L)) / math.sqrt(rr)
    Y = (S + math.sqrt(Dv) * rng.standard_normal((d, L))) / (d * L) ** 0.25
    sv = np.sort(np.linalg.svd(Y, compute_uv=False))
    law = _law()
    p = (math.sqrt(L / d), rr / d, Dv)
    grid = np.quantile(sv, np.linspace(0.05, 0.95, 10))
    x, mu, H = sp.symbols("x mu H", real=True)
    cdf = []
    for g in grid:
        # P(sigma <= g) = 2 int_0^g mu (even law)
        val, _ = integrate.quad(lambda s: law.density(s, *p)[0], 0, g, limit=200)
        cdf.append(2 * val)
    emp = np.searchsorted(sv, grid, side="right") / d
    assert np.max(np.abs(np.array(cdf) - emp)) < 0.02


def test_hilbert_transform_outside_the_support_matches_direct_quadrature():
    law = _law()
    p = (math.sqrt(5), 0.2, 0.05)
    sup = law.support(*p)
    (a, b), (c, e) = sup.bulks
    for xg in (0.5 * a, 0.5 * (b + c), 1.3 * e):
        direct = 0.0
        for lo, hi in ((a, b), (c, e)):
            direct += integrate.quad(lambda s: law.density(s, *p)[0] * (1 / (xg - s) + 1 / (xg + s)),
                                     lo, hi, limit=200, epsabs=1e-13)[0]
        assert abs(law.hilbert(xg, *p)[0] - direct) < 1e-8 * (1 + abs(direct))


@settings(max_examples=4)
@given(params_strategy)
def test_float_integrals_equal_mpmath_integrals(bp):
    """Same integrals by an independent path: mpmath tanh-sinh, roots by Newton/polyroots
    at 25 digits.  Float path: rtol 1e-11 per integral plus root noise -> 1e-9."""
    law = _law()
    p = _params(*bp)
    x, mu, H = sp.symbols("x mu H", real=True)
    k = law.integrand_kernel("test_mp3", [mu**3], x, mu, H)
    f = law.integrate(k, *p, rtol=1e-11).values[0]
    m = law.mp_integrate(k, *p, dps=25)[0]
    assert abs(f - float(m)) < 1e-9 * abs(float(m))


def test_log_energy_of_the_semicircle():
    """Generic law: semicircle G^2 s2 - z G + 1 = 0; Sigma = -1/4 + log(s2)/2 (exact)."""
    G, z, s2 = sp.symbols("G z s2", positive=True)
    P = s2 * G**2 - z * G + 1
    law = AlgebraicSpectralLaw(P, G, z, (s2,), freeprob.edge_polynomial(P, G, z), even=True,
                               name="semicircle_test")
    for var in (1.0, 4.0):
        (sig, err), (lg, err2) = law.log_energy(var)
        assert abs(sig - (-0.25 + 0.5 * math.log(var))) < 1e-12
        assert abs(lg - (-0.5 + 0.5 * math.log(var))) < 1e-12
        assert err < 1e-12 and err2 < 1e-12


@pytest.mark.parametrize("even", [False, True])
def test_mpmath_edge_rule_on_the_semicircle_is_exact_to_the_working_precision(even):
    """Semicircle (variance s2): int mu = 1, int x^2 mu = s2 and int mu^3 = 3/(4 pi^2 s2)
    exactly.  The edge rule (trapezoid in theta between the edges at -+2 sqrt(s2); as an
    even law its half [0, b], the point x = 0 where the polynomial degenerates not
    evaluated) reaches them to 1e-45 at 50 digits in at most 64 nodes per integral set;
    tanh-sinh, the reference rule, agrees."""
    G, z, s2 = sp.symbols("G z s2", positive=True)
    P = s2 * G**2 - z * G + 1
    law = AlgebraicSpectralLaw(P, G, z, (s2,), freeprob.edge_polynomial(P, G, z), even=even,
                               name=f"semicircle_edge_test_{int(even)}")
    x, mu, H = sp.symbols("x mu H", real=True)
    k = law.integrand_kernel("moments", [mu, x**2 * mu, mu**3], x, mu, H)
    with mpmath.workdps(50):
        for var in (mpmath.mpf(1), mpmath.mpf("2.5")):
            exact = [1, var, 3 / (4 * mpmath.pi**2 * var)]
            got, err = law.mp_integrate(k, var, dps=50, error=True)
            kind = law._mp_pieces(law.mp_support(var, dps=50), (var,))[0][2]
            assert kind == ("even" if even else "edges")
            for g, e, ex in zip(got, err, exact):
                assert abs(g - ex) < mpmath.mpf(10) ** -45 * ex
                assert e < mpmath.mpf(10) ** -40 * ex
            ref = law.mp_integrate(k, var, dps=50, rule="tanh-sinh")
            assert all(abs(g - r) < mpmath.mpf(10) ** -45 * r for g, r in zip(got, ref))


@pytest.mark.parametrize("beta, rho, D", [
    (2.0, 0.5, 2.526),     # one bulk, branch points far: one trapezoid piece
    (2.0, 0.5, 0.3),       # a complex branch pair 0.039 off the bulk: cut, tanh-sinh pieces
    (4.0, 0.1, 2.5),       # two bulks
    (1.0, 0.2, 4.1),       # beta = 1: a bulk symmetric about 0, its half
    (1.2, 0.9, 1e-3),      # an inner bulk [0.0069, 0.026] next to 0, mu/x^2 integrated
])
def test_mpmath_edge_rule_agrees_with_tanh_sinh_on_bsr(beta, rho, D):
    """mmse_RIE's integrals by the edge rule at 40 digits against the reference
    tanh-sinh path at 50 digits (roots by Newton in mpmath's mpc, edges by polyroots):
    agreement to 1e-38 relative (measured 1e-40 .. 1e-42)."""
    th = theory()
    fun = th.mmse_functional
    with mpmath.workdps(40):
        p = (mpmath.sqrt(beta), mpmath.mpf(rho), mpmath.mpf(D))
        which = [i for i, c in enumerate(fun.coeff_kernel.mp(*p)) if c != 0]
        k = fun.integrand_kernel_for(which)
        got = th.law.mp_integrate(k, *p, dps=40)
        ref = th.law.mp_integrate(k, *p, dps=50, rule="tanh-sinh")
        for g, r in zip(got, ref):
            assert abs(g - r) < mpmath.mpf(10) ** -38 * abs(r)
