"""The mpmath path of the phase transitions (symtheory.glm.thresholds.phases_mp) against
the independent 25-digit references of tests/glm/test_phases.py (an mpmath implementation
written apart from the package, 30- and 60-digit runs agreeing on 25 digits)."""
from __future__ import annotations

import time

import mpmath
import pytest
import sympy as sp

from symtheory.glm.factors import separable_prior as S
from symtheory.glm.factors.scalar import sign_channel
from symtheory.glm.se.scalar_glm import ScalarGlmSE
from symtheory.glm.thresholds import phases_mp as M
from symtheory.glm.thresholds.phases import phase_transitions

#: the references as strings (25 digits; a float literal would keep 17)
PERCEPTRON = {"alpha_alg": "1.492631818230351274145863", "alpha_IT": "1.244683989850690279092058"}
DOOR_ALPHA_C = "1.360459304311955025440247"


@pytest.fixture(scope="module")
def door_se(door):
    """The symmetric door's SE (tests/glm/conftest.py) with the Rademacher prior."""
    return ScalarGlmSE(door[0], S.rademacher(), door[1])


def _rel(a, ref):
    return abs(mpmath.mpf(a) - mpmath.mpf(ref)) / mpmath.mpf(ref)


@pytest.mark.slow
def test_binary_perceptron_thresholds_to_18_digits():
    """At dps = 20 (25 working digits) both thresholds within 1e-18 of the reference: the
    reference carries 25 digits, so 1e-18 leaves the mpmath path two of its 20 digits
    for the quadrature's and the root's tolerances (measured: 1e-24).  The 20- and
    40-digit runs must agree on >= 15 digits (measured: 20, the cap)."""
    se = ScalarGlmSE(sign_channel(noise=False), S.rademacher())
    t0 = time.perf_counter()
    rep = phase_transitions(se, precision=20)
    elapsed = time.perf_counter() - t0
    found = {t.kind: t for t in rep.transitions}
    assert set(found) == set(PERCEPTRON), rep.message
    for kind, ref in PERCEPTRON.items():
        t = found[kind]
        a20, a40 = t.mp_values
        with mpmath.workdps(50):
            assert _rel(a20, ref) < 1e-18, (kind, a20)
            assert _rel(a40, ref) < 1e-18, (kind, a40)
        assert t.digits_confirmed >= 15, t.message
        assert "digits confirmed" in t.message
    print(f"phase_transitions(precision=20), perceptron: {elapsed:.1f} s")


def test_door_alpha_c_and_trivial_crossing_at_20_and_40_digits(door_se):
    """``alpha_c = -1/(v_max^2 Psi'(v_max))`` (Stein's lemma, derivatives by SymPy) at
    the exact ``K = sqrt(2) erfinv(1/2)``: the 25-digit reference to 1e-18 at 20 digits
    (same margin as above); the crossing with the trivial point is exactly 1
    (``psi_c(inf) = -log 2 = psi_out(v_max)``)."""
    curve = M.MpCurve(door_se, params=(sp.sqrt(2) * sp.erfinv(sp.Rational(1, 2)),))
    vals = []
    for dps in (20, 40):
        with mpmath.workdps(dps + M.GUARD):
            vals.append(M.alpha_c(curve)[0])
            assert abs(M.alpha_it(curve, None)[0] - 1) < mpmath.mpf(10) ** -dps
    with mpmath.workdps(50):
        assert _rel(vals[0], DOOR_ALPHA_C) < 1e-18
        assert M._agreement(vals[0], vals[1], 20) == 20


def test_mp_curve_point_matches_float64():
    """One point of the curve through the bracketed inverse prior map, against the float64
    state evolution (rtol 1e-12; 1e-11 leaves a factor 10)."""
    se = ScalarGlmSE(sign_channel(noise=False), S.rademacher())
    curve = M.MpCurve(se)
    ref = se.point(0.3)
    with mpmath.workdps(20):
        p = curve.point(mpmath.mpf("0.3"))
        assert abs(p["V"] - mpmath.mpf("0.3")) < mpmath.mpf(10) ** -18
        assert float(p["alpha"]) == pytest.approx(ref["alpha"], rel=1e-11)
        assert float(curve.phi(p["qhat"])) == pytest.approx(ref["phi"], rel=1e-11)


def test_density_prior_is_refused_by_name():
    w = sp.Symbol("w", real=True)
    prior = S.SeparablePrior("std_normal_density", [
        S.density_component(sp.exp(-w ** 2 / 2) / sp.sqrt(2 * sp.pi), w)])
    with pytest.raises(NotImplementedError, match="density"):
        M.MpPrior(prior)


def test_perceptron_fixed_point_of_the_docstring_is_on_the_mpmath_curve():
    """ScalarGlmSE.solve's docstring prints V = 0.43928526 at alpha = 1 (binary
    perceptron). Re-derived by the independent mpmath path: the curve's inverse prior
    map at that V gives alpha, and its root in V at alpha = 1 (secant, 20 digits) rounds
    to the printed 8 decimals. The float64 solve (residual tolerance 1e-14) matches it to
    1e-12: a factor 100 for the map's slope near the fixed point (measured 9e-15)."""
    se = ScalarGlmSE(sign_channel(noise=False), S.rademacher())
    curve = M.MpCurve(se)
    with mpmath.workdps(20):
        V = mpmath.findroot(lambda v: curve.point(v)["alpha"] - 1, (mpmath.mpf("0.43"),
                                                                    mpmath.mpf("0.45")),
                            solver="secant")
    assert round(float(V), 8) == 0.43928526
    assert abs(se.solve(1.0).value - float(V)) < 1e-12
