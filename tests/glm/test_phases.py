"""Declared priors beyond Gaussian, the scalar-GLM free entropy and its phase transitions.

References are independent: an mpmath implementation written apart from the package
(its equations re-derived from Barbier et al., PNAS 116 (2019); 30- and 60-digit runs
agreeing on 25 digits; 2026-11-28), and in-test mpmath solves of the Gaussian case."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from scipy.special import ndtri

from symtheory.core.validate import ParameterError
from symtheory.glm.factors import separable_prior as S
from symtheory.glm.factors.scalar import sign_channel
from symtheory.glm.se.scalar_glm import ScalarGlmSE
from symtheory.glm.thresholds.phases import phase_transitions

#: the independent implementation's values (25 digits confirmed at 2x precision)
PERCEPTRON = {"alpha_alg": 1.492631818230351274145863, "alpha_IT": 1.244683989850690279092058}
DOOR = {"alpha_c": 1.360459304311955025440247, "alpha_alg": 1.566433056107812134614135,
        "alpha_IT": 1.0}


def _check(report, reference):
    found = {t.kind: t for t in report.transitions}
    assert set(found) == set(reference), report.message
    for kind, ref in reference.items():
        t = found[kind]
        # >= 6 significant digits asked; the stated error bar must cover the difference
        assert abs(t.alpha - ref) <= max(t.error, 1e-15), (kind, t.alpha, t.error)
        assert t.error < 1e-6 * ref, (kind, t.error)
    # the spinodal is where the SE map's slope crosses 1; the finite difference carries
    # O(1e-8) truncation and ~1e-12/1e-4 rounding, 1e-6 leaves a margin of 100
    assert abs(found["alpha_alg"].map_slope - 1) < 1e-6, found["alpha_alg"].map_slope


@pytest.mark.slow
@pytest.mark.ci_slow
def test_binary_perceptron_thresholds():
    rep = phase_transitions(ScalarGlmSE(sign_channel(noise=False), S.rademacher()))
    _check(rep, PERCEPTRON)
    assert rep.perfect_recovery


@pytest.mark.slow
@pytest.mark.ci_slow  # 10 s
def test_symmetric_door_thresholds(door):
    ch, params = door
    rep = phase_transitions(ScalarGlmSE(ch, S.rademacher(), params))
    _check(rep, DOOR)


def _mp_sign_overlap(alpha):
    """``q(alpha)`` of the Gaussian prior with ``y = sign(z)`` in mpmath: ``q = qhat/(1 +
    qhat)``, ``qhat = alpha (2/(1 - q)) E[phi(u)^2/Phi(u)]``, ``u = sqrt(q/(1 - q)) xi``."""
    mpmath.mp.dps = 30

    def psi(q):
        r = mpmath.sqrt(q / (1 - q))
        f = lambda x: mpmath.npdf(x) * 2 * mpmath.npdf(r * x) ** 2 / mpmath.ncdf(r * x) / (1 - q)
        return mpmath.quad(f, [-mpmath.inf, 0, mpmath.inf])

    return float(mpmath.findroot(lambda q: q - alpha * psi(q) / (1 + alpha * psi(q)), 0.5))


@pytest.mark.parametrize("alpha", [1, 2, 4])
def test_gaussian_prior_sign_overlap_to_1e8(alpha):
    se = ScalarGlmSE(sign_channel(noise=False), S.gaussian())
    res = se.solve(alpha)
    assert res.converged
    assert abs((1 - res.value) - _mp_sign_overlap(alpha)) < 1e-8


@pytest.mark.slow
def test_no_first_order_transition_with_a_gaussian_prior():
    rep = phase_transitions(ScalarGlmSE(sign_channel(noise=False), S.gaussian()), points=30)
    assert rep.transitions == [] and "no spinodal" in rep.message


@pytest.mark.parametrize("case", ["rademacher-sign", "gaussian-sign", "gauss_bernoulli-sign",
                                  "rademacher-door", "rademacher-probit", "gaussian-probit",
                                  "ternary-door", "gauss_bernoulli-door",
                                  pytest.param("laplace-probit", marks=pytest.mark.slow)])
def test_i_mmse_along_the_fixed_point_curve(case, door):
    """``d phi / d alpha = psi_out`` along a branch (the envelope theorem): by central
    differences of ``phi(V)`` and ``alpha(V)`` in ``V`` (step 1e-4 relative: truncation
    ~1e-8, quadrature noise 1e-10/1e-4) against ``psi_out`` there, to 1e-6."""
    prior_name, chan = case.split("-")
    prior = {"rademacher": S.rademacher, "gaussian": S.gaussian, "laplace": _laplace,
             "ternary": lambda: S.discrete({-1: sp.Rational(1, 4), 0: sp.Rational(1, 2),
                                            1: sp.Rational(1, 4)}),
             "gauss_bernoulli": lambda: S.gauss_bernoulli(0.3)}[prior_name]()
    if chan == "door":
        se = ScalarGlmSE(door[0], prior, door[1])
    elif chan == "probit":
        se = ScalarGlmSE(sign_channel(), prior, (0.2,))
    else:
        se = ScalarGlmSE(sign_channel(noise=False), prior)
    V = 0.3 * se.v_max
    lo, mid, hi = (se.point(V * (1 + e)) for e in (-1e-4, 0.0, 1e-4))
    slope = (hi["phi"] - lo["phi"]) / (hi["alpha"] - lo["alpha"])
    assert slope == pytest.approx(mid["psi_out"], abs=1e-6)
    # phi's stated quadrature error is small enough for this to mean something
    assert mid["phi_error"] < 1e-9


def _laplace():
    """A density prior: ``p(w) = exp(-|w|)/2``, its log-partition by ``sympy.integrate``."""
    w = sp.Symbol("w", real=True)
    return S.SeparablePrior("laplace", [S.density_component(sp.exp(-sp.Abs(w)) / 2, w)])


def test_declared_priors_pass_their_checks_and_bad_ones_are_refused():
    w = sp.Symbol("w", real=True)
    laplace = _laplace()
    assert laplace.second_moment == pytest.approx(2.0)
    # SymPy's closed form against scipy.quad (refused above 1e-9); the normalization at a
    # small A to 1e-12 (module docstring of separable_prior)
    assert laplace.report["log Z vs quadrature"] < 1e-12
    assert laplace.report["normalization"] < 1e-14
    ternary = S.discrete({-1: sp.Rational(1, 4), 0: sp.Rational(1, 2), 1: sp.Rational(1, 4)})
    assert ternary.report["nishimori"] < 1e-12
    with pytest.raises(ParameterError, match="does not normalize"):
        S.density_component(sp.exp(-w ** 2), w)
    with pytest.raises(ParameterError, match="non-negative"):
        S.discrete({-1: sp.Rational(3, 2), 1: -sp.Rational(1, 2)})
    with pytest.raises(ParameterError, match="sum to 1"):
        S.discrete({-1: sp.Rational(1, 2), 1: sp.Rational(1, 4)})
    with pytest.raises(ParameterError, match="second moment"):
        S.density_component(1 / (sp.pi * (1 + w ** 2)), w)


def test_rademacher_input_functions_are_tanh_without_overflow():
    r = S.rademacher()
    B = np.array([0.3, -2.0, 50.0, -800.0])
    _, f, v = r.log_partition_terms(B, 1.0)
    np.testing.assert_allclose(f, np.tanh(B), rtol=1e-15)
    np.testing.assert_allclose(v, 1 / np.cosh(np.clip(B, -700, 700)) ** 2, rtol=1e-12,
                               atol=0.0)
    assert math.isclose(r.error_terms(1e8)[0][1], -math.log(2), rel_tol=1e-15)



@pytest.mark.parametrize("p", ["1/2", "1/10", "0.9"])
def test_door_half_width_against_mpmath(p):
    """SymPy's solved K (glm.tasks) against the Gaussian tail in mpmath at 30 digits
    (1e-25: the derivation is exact, the margin is mpmath's own evaluation)."""
    from symtheory.glm.tasks import door_half_width

    q = sp.Rational(sp.nsimplify(p))
    K = door_half_width(q)
    with mpmath.workdps(30):
        tail = mpmath.erfc(mpmath.mpf(str(K.evalf(40))) / mpmath.sqrt(2))
        assert abs(tail - mpmath.mpf(q.p) / q.q) < mpmath.mpf("1e-25")
    assert float(door_half_width()) == pytest.approx(float(ndtri(0.75)), rel=1e-15)
    with pytest.raises(ValueError, match="p_outside"):
        door_half_width(1)
