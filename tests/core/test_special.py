"""Stable special functions: Numba implementations vs mpmath, derivatives, no rewriting."""
import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from conftest import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st

from symtheory.core import special, special_numba
from symtheory.core.codegen import Kernel

PAIRS = [
    (special_numba.erfcx, special.mp_erfcx),
    (special_numba.log_ndtr, special.mp_log_ndtr),
    (special_numba.log1pexp, special.mp_log1pexp),
    (special_numba.expit, special.mp_expit),
    (special_numba.inv_mills, special.mp_inv_mills),
    (special_numba.inv_mills_plus_x, special.mp_inv_mills_plus_x),
]
# Tolerance: a backward-stable float64 evaluation has relative error about
# eps * (1 + cond(x)), cond(x) = |x f'(x)/f(x)| the relative condition number (the
# rounding of intermediate arguments such as x/sqrt(2) is amplified by it: log Phi(x)
# has cond ~ x^2 for large x).  We allow 16 eps * (1 + cond).
EPS = 2.220446049250313e-16
RTOL = 2e-14  # for checks at points where cond = O(1)


def _rel(a, b):
    b = float(b)
    return abs(a - b) / max(abs(b), 1e-300)


def _check(f_nb, f_mp, x):
    ref = f_mp(x)
    if abs(ref) > mpmath.mpf("1.7e308"):  # not representable: must overflow to inf
        assert math.isinf(f_nb(x))
        return
    cond = abs(x * mpmath.diff(f_mp, x) / ref) if ref != 0 else 0
    assert _rel(f_nb(x), ref) <= 16 * EPS * (1 + float(cond)), (f_nb.__name__, x)


@pytest.mark.parametrize("f_nb,f_mp", PAIRS)
def test_grid_including_tails(f_nb, f_mp):
    xs = np.concatenate([np.linspace(-30, 30, 601), [-26.5, -12.0001, 11.9999, 12.0, 25.0, 29.9]])
    with mpmath.workdps(40):
        for x in xs:
            _check(f_nb, f_mp, float(x))


def _random_point_property(x):
    with mpmath.workdps(40):
        for f_nb, f_mp in PAIRS:
            _check(f_nb, f_mp, x)


@given(st.floats(-38, 38))
def test_random_points(x):
    _random_point_property(x)


@pytest.mark.slow
@settings(THOROUGH)
@given(st.floats(-38, 38))
def test_random_points_thorough(x):
    _random_point_property(x)


def test_inv_mills_plus_x_has_no_cancellation_in_the_left_tail():
    """x + phi(x)/Phi(x) ~ -1/x for x -> -inf: the naive sum loses log10(x^2) digits
    (8 at x = -1e4, all 16 at x = -1e8); the continued fraction keeps the relative accuracy.
    The relative condition number is ~1 there, so 16 eps is the bound of ``_check``."""
    with mpmath.workdps(40):
        for x in (-1.5, -1.6, -2.0, -5.0, -40.0, -1e4, -1e8):
            _check(special_numba.inv_mills_plus_x, special.mp_inv_mills_plus_x, x)
    naive = -1e4 + special_numba.inv_mills(-1e4)
    assert _rel(naive, special.mp_inv_mills_plus_x(-1e4)) > 1e-10  # what the fraction avoids
    naive = -1e8 + special_numba.inv_mills(-1e8)
    assert _rel(naive, special.mp_inv_mills_plus_x(-1e8)) > 1e-2


def _check_log_ndtr_diff(a, b):
    """log(Phi(b) - Phi(a)): error within 16 eps (1 + cond), cond = |a dL/da| + |b dL/db|
    (the rounding of each end is amplified by its own sensitivity)."""
    with mpmath.workdps(40):
        ref = special.mp_log_ndtr_diff(a, b)
        got = special_numba.log_ndtr_diff(a, b)
        da = mpmath.diff(lambda t: special.mp_log_ndtr_diff(t, b), a)
        db = mpmath.diff(lambda t: special.mp_log_ndtr_diff(a, t), b)
        cond = (abs(a * da) + abs(b * db)) / abs(ref) if ref != 0 else 0
        assert _rel(got, ref) <= 16 * EPS * (1 + float(cond)), (a, b, got, ref)


@given(st.floats(-38, 38), st.floats(1e-3, 40))
def test_log_ndtr_diff_random_intervals(a, width):
    _check_log_ndtr_diff(a, a + width)


@pytest.mark.slow
@settings(THOROUGH)
@given(st.floats(-38, 38), st.floats(1e-3, 40))
def test_log_ndtr_diff_random_intervals_thorough(a, width):
    _check_log_ndtr_diff(a, a + width)


def test_log_ndtr_diff_tails_and_edge_cases():
    for a, b in ((-40.0, -39.0), (39.0, 40.0), (-30.0, 30.0), (5.0, 37.0), (-0.5, 0.5)):
        _check_log_ndtr_diff(a, b)
    assert math.isnan(special_numba.log_ndtr_diff(1.0, 0.0))
    assert special_numba.log_ndtr_diff(1.0, 1.0) == -math.inf
    # naive log(Phi(40) - Phi(39)) = log(1.0 - 1.0) = -inf
    assert math.isfinite(special_numba.log_ndtr_diff(39.0, 40.0))


def test_log_ndtr_far_tail_has_no_underflow():
    # naive log(ndtr(-40)) = log(0) = -inf
    assert math.isfinite(special_numba.log_ndtr(-40.0))
    assert _rel(special_numba.log_ndtr(-40.0), special.mp_log_ndtr(-40)) < RTOL
    # naive log(ndtr(10)) = log(1.0) = 0 exactly
    assert special_numba.log_ndtr(10.0) < 0


@pytest.mark.parametrize("F", special.STABLE_FUNCTIONS)
def test_symbolic_derivative_matches_mpmath_derivative(F):
    x = sp.Symbol("x")
    d = sp.diff(F(x), x)
    # the derivative is written again in stable functions (no erfc/exp blow-up forms)
    assert not d.has(sp.erfc)
    f_mp = F._mp_impl()
    with mpmath.workdps(30):
        for x0 in (-7.5, -1.2, 0.3, 4.0, 9.0):
            num = mpmath.diff(f_mp, mpmath.mpf(x0))
            val = d.subs(x, sp.Float(x0, 40)).evalf(30)  # exact input: 30 valid digits
            assert abs(mpmath.mpf(str(val)) - num) <= mpmath.mpf(10) ** -25 * (1 + abs(num))


@pytest.mark.parametrize("F", special.STABLE_FUNCTIONS)
def test_not_rewritten_by_sympy(F):
    x = sp.Symbol("x", real=True)
    e = F(-x) + F(x)
    assert sp.simplify(e).atoms(F) == {F(x), F(-x)}
    assert sp.expand(F(-x)) == F(-x)


def test_rewrite_agrees_in_the_bulk():
    x = sp.Symbol("x")
    for F in special.STABLE_FUNCTIONS:
        r = F(x).rewrite(sp.exp) if F in (special.Log1pExp, special.Expit) else F(x).rewrite(sp.erfc)
        assert not r.has(F)
        for x0 in (-2.0, 0.5, 3.0):
            assert abs(complex(r.subs(x, x0).evalf(25)) - float(F(x0).evalf(25))) < 1e-15
    a, b = sp.symbols("a b")
    r = special.LogNdtrDiff(a, b).rewrite(sp.erfc)
    for a0, b0 in ((-2.0, 0.5), (0.3, 3.0)):
        val = complex(r.subs({a: a0, b: b0}).evalf(25))
        assert abs(val - float(special.LogNdtrDiff(a0, b0).evalf(25))) < 1e-15


@pytest.mark.parametrize("argindex", [1, 2])
def test_log_ndtr_diff_derivatives_match_mpmath(argindex):
    a, b = sp.symbols("a b", real=True)
    d = sp.diff(special.LogNdtrDiff(a, b), (a, b)[argindex - 1])
    with mpmath.workdps(30):
        for a0, b0 in ((-7.5, -6.0), (-1.2, 0.3), (4.0, 9.0)):
            f = ((lambda t: special.mp_log_ndtr_diff(t, b0)) if argindex == 1
                 else (lambda t: special.mp_log_ndtr_diff(a0, t)))
            num = mpmath.diff(f, (a0, b0)[argindex - 1])
            val = mpmath.mpf(str(d.subs({a: sp.Float(a0, 40), b: sp.Float(b0, 40)}).evalf(30)))
            assert abs(val - num) <= mpmath.mpf(10) ** -25 * (1 + abs(num))


def test_generated_kernel_uses_numba_implementations():
    x = sp.Symbol("x")
    k = Kernel("test_special_kernel", [x], [special.LogNdtr(x), sp.diff(special.LogNdtr(x), x)])
    assert "symtheory.core.special_numba.log_ndtr" in k.source
    vals = k(-35.0)
    with mpmath.workdps(30):
        assert _rel(vals[0], special.mp_log_ndtr(-35)) < RTOL
        ref = mpmath.npdf(-35) / mpmath.ncdf(-35)
        assert _rel(vals[1], ref) < 1e-13
        assert "symtheory.core.special_numba.inv_mills" in k.source
        mpv = k.mp(-35, dps=30)
        assert abs(mpv[0] - special.mp_log_ndtr(-35)) < mpmath.mpf(10) ** -25
