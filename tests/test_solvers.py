"""Shared solvers: bracketed roots, damped fixed points, mpmath refinement."""
import math
import warnings

import mpmath
import numpy as np
import pytest

from symtheory.core.solvers import (ConvergenceWarning, NoBracketError, find_root, fixed_point,
                                    fixed_points_from_starts, refine_root_mp)


def test_find_root_reports_iterations_and_residual():
    r = find_root(lambda v: math.cos(v) - v, 0.0, 1.0)
    assert r.converged and r.iterations > 2
    assert abs(r.value - 0.7390851332151607) < 1e-14
    assert r.residual < 1e-14


def test_find_root_without_sign_change_names_the_values():
    with pytest.raises(NoBracketError, match="no sign change"):
        find_root(lambda v: v * v + 1, -1.0, 1.0, name="demo")


def test_find_root_propagates_user_exceptions():
    def f(v):
        raise ZeroDivisionError("from the model")
    with pytest.raises(ZeroDivisionError, match="from the model"):
        find_root(f, 0.0, 1.0)


def test_fixed_point_scalar_and_array():
    r = fixed_point(math.cos, 0.0, tol=1e-13)
    assert r.converged and abs(r.value - 0.7390851332151607) < 1e-12
    A = np.array([[0.5, 0.1], [0.0, 0.3]])
    b = np.array([1.0, 2.0])
    r = fixed_point(lambda v: A @ v + b, np.zeros(2), tol=1e-13)
    np.testing.assert_allclose(r.value, np.linalg.solve(np.eye(2) - A, b), rtol=1e-11)


def test_adaptive_damping_tames_an_oscillating_map():
    # x <- -1.5 x + 2.5 has the fixed point 1 but diverges undamped (|slope| > 1)
    r = fixed_point(lambda v: -1.5 * v + 2.5, 0.0, damping=0.0, adaptive=True, tol=1e-12)
    assert r.converged and abs(r.value - 1.0) < 1e-10


def test_non_convergence_warns_and_reports():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = fixed_point(lambda v: v + 1.0, 0.0, maxiter=20, adaptive=False)
    assert not r.converged and r.iterations == 20
    assert any(issubclass(x.category, ConvergenceWarning) for x in w)


def test_distinct_fixed_points_from_informed_and_uninformed_starts():
    F = lambda v: v**3 * 0.0 + (1.0 if v > 0.5 else 0.0)  # noqa: E731 -- two fixed points 0, 1
    res = fixed_points_from_starts(F, {"uninformed": 0.0, "informed": 1.0})
    assert res["distinct"]
    assert res["uninformed"].value == 0.0 and res["informed"].value == 1.0


def test_refine_root_mp_confirms_at_twice_the_digits():
    f = lambda v: mpmath.cos(v) - v  # noqa: E731
    r = refine_root_mp(f, 0.7390851332151607, digits=30)
    assert r.confirmed and r.agreement_digits >= 30
    with mpmath.workdps(40):
        exact = mpmath.findroot(lambda v: mpmath.cos(v) - v, 0.74)
        assert abs(r.value - exact) < mpmath.mpf(10) ** -32
