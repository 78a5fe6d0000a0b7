"""Stable special functions: Numba implementations vs mpmath, derivatives, no rewriting."""
import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from symtheory.core import special, special_numba
from symtheory.core.codegen import Kernel

PAIRS = [
    (special_numba.erfcx, special.mp_erfcx),
    (special_numba.log_ndtr, special.mp_log_ndtr),
    (special_numba.log1pexp, special.mp_log1pexp),
    (special_numba.expit, special.mp_expit),
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


@given(st.floats(-38, 38))
def test_random_points(x):
    with mpmath.workdps(40):
        for f_nb, f_mp in PAIRS:
            _check(f_nb, f_mp, x)


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
        r = F(x).rewrite(sp.erfc) if F in (special.Erfcx, special.LogNdtr) else F(x).rewrite(sp.exp)
        for x0 in (-2.0, 0.5, 3.0):
            assert abs(complex(r.subs(x, x0).evalf(25)) - float(F(x0).evalf(25))) < 1e-15


def test_generated_kernel_uses_numba_implementations():
    x = sp.Symbol("x")
    k = Kernel("test_special_kernel", [x], [special.LogNdtr(x), sp.diff(special.LogNdtr(x), x)])
    assert "symtheory.core.special_numba.log_ndtr" in k.source
    vals = k(-35.0)
    with mpmath.workdps(30):
        assert _rel(vals[0], special.mp_log_ndtr(-35)) < RTOL
        ref = mpmath.npdf(-35) / mpmath.ncdf(-35)
        assert _rel(vals[1], ref) < 1e-13
        mpv = k.mp(-35, dps=30)
        assert abs(mpv[0] - special.mp_log_ndtr(-35)) < mpmath.mpf(10) ** -25
