"""``core.quadrature.integrate_adaptive`` against closed forms.

Tolerance: the rule is asked for ``rtol = 1e-12``; its estimate (whole panel vs halves,
GL-10) overestimates the error of the kept halves for analytic integrands, so the true
error must sit below the request; 4x headroom covers the rounding of the final sum
(~1e-15 relative, a few hundred terms)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import erf

from symtheory.core.quadrature import integrate_adaptive
from symtheory.core.validate import ParameterError

RTOL = 1e-12


@settings(max_examples=40, deadline=None)
@given(mu=st.floats(-3, 3), log10_width=st.floats(-5, 0))
def test_narrow_gaussian_anywhere_in_the_interval(mu, log10_width):
    """A likelihood much narrower than the interval, declared with its width: graded panels
    reach its scale wherever it sits (a fixed grid, or an undeclared width, misses it)."""
    s = 10.0 ** log10_width
    f = lambda x: np.exp(-0.5 * ((x - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))  # noqa: E731
    exact = 0.5 * (erf((4 - mu) / (s * math.sqrt(2))) - erf((-4 - mu) / (s * math.sqrt(2))))
    value, error, converged = integrate_adaptive(f, -4.0, 4.0, rtol=RTOL, points=[mu],
                                                 widths=[s])
    assert converged
    assert abs(value[0] - exact) <= 4 * RTOL * exact
    assert error[0] <= RTOL * abs(value[0]) * 1.0001


@settings(max_examples=30, deadline=None)
@given(c=st.floats(-0.9, 0.9), jump=st.floats(0.1, 10))
def test_a_declared_jump_and_a_kink(c, jump):
    """|x - c| + jump * [x > c] on [-1, 1], both at the declared point c."""
    f = lambda x: np.stack([np.abs(x - c), jump * (x > c)], axis=-1)  # noqa: E731
    value, _, converged = integrate_adaptive(f, -1.0, 1.0, rtol=RTOL, points=[c])
    assert converged
    exact = np.array([0.5 * ((1 - c) ** 2 + (1 + c) ** 2), jump * (1 - c)])
    assert np.all(np.abs(value - exact) <= 4 * RTOL * exact)


def test_an_undeclared_jump_is_resolved_by_bisection_within_the_tolerance():
    value, error, converged = integrate_adaptive(lambda x: (x > 1 / 3).astype(float), 0.0, 1.0,
                                                 rtol=1e-10)
    assert converged
    assert abs(value[0] - 2 / 3) <= 1e-10 and error[0] <= 1e-10


def test_the_panel_budget_is_reported_not_hidden():
    _, _, converged = integrate_adaptive(lambda x: np.sin(1 / x), 1e-9, 1.0, rtol=1e-14,
                                         max_panels=50)
    assert not converged


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (0.0, math.inf), (2.0, 1.0)])
def test_bad_interval_is_refused(a, b):
    with pytest.raises(ParameterError, match="a < b"):
        integrate_adaptive(np.exp, a, b)



def test_widths_must_match_the_points():
    with pytest.raises(ParameterError, match="widths"):
        integrate_adaptive(np.exp, 0.0, 1.0, points=[0.5], widths=[0.1, 0.2])
    with pytest.raises(ParameterError, match="widths"):
        integrate_adaptive(np.exp, 0.0, 1.0, points=[0.5], widths=[0.0])
