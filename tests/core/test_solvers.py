"""Shared solvers: bracketed roots, damped fixed points, mpmath refinement."""
import math
import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symtheory.core.roots_mp import polynomial_roots_mp, refine_root_mp
from symtheory.core.solvers import (ConvergenceWarning, NoBracketError, check_damping,
                                    difference_jacobian, find_root, fixed_point,
                                    fixed_points_from_starts)
from symtheory.core.validate import ParameterError


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


# ------------------------------------------------------------------ the fixed-point engine
@pytest.mark.parametrize("bad", [1.0, -0.1, 1.5, float("nan")])
def test_damping_has_one_meaning_and_range(bad):
    """damping = weight of the previous iterate, in [0, 1); anything else is refused by name."""
    assert check_damping(0.0) == 0.0 and check_damping(0.5) == 0.5
    with pytest.raises(ParameterError, match=r"damping must be .*\[0, 1\)"):
        check_damping(bad)
    with pytest.raises(ParameterError, match="damping"):
        fixed_point(math.cos, 0.0, damping=bad)


def test_damping_weighs_the_previous_iterate():
    """One undamped-adaptive-free step of x <- F(x) = 1 from x = 0 with theta = 0.25 lands on
    0.25 * 0 + 0.75 * 1: the previous iterate carries the weight theta."""
    r = fixed_point(lambda v: 1.0, 0.0, damping=0.25, adaptive=False, maxiter=2, keep_history=True,
                    warn=False)
    assert r.history == [0.0, 0.75]


def test_result_reports_value_converged_iterations_residual_message():
    r = fixed_point(math.cos, 0.0, tol=1e-13)
    assert r.converged and r.iterations > 1 and r.residual <= 1e-13 * 2
    assert "converged" in r.message and r.evaluations >= r.iterations and r.stable is None


def test_newton_polish_removes_critical_slowing_down():
    """x <- x - 1e-4 (x - 0.3) contracts by 0.9999 per step (~2e5 iterations to 1e-10);
    with the Newton polish the linear map is solved in one step after the first."""
    F = lambda v: v - 1e-4 * (v - 0.3)  # noqa: E731
    slow = fixed_point(F, 0.0, adaptive=False, maxiter=500, warn=False)
    assert not slow.converged
    r = fixed_point(F, 0.0, adaptive=False, newton_below=1.0, tol=1e-12)
    # |F(x) - x| = 1e-4 |x - 0.3| <= tol (1 + |x|): x is within 1.3e-12 / 1e-4 of 0.3
    assert r.converged and r.iterations <= 3 and abs(r.value - 0.3) <= 1.3e-8


def test_truncation_is_the_distance_left_to_the_fixed_point():
    """The residual tolerance bounds |F(x) - x|, which is (1 - lambda) times the distance
    to the fixed point: on a slowly contracting linear map in 2-D (eigenvalues 0.99 and
    0.5) the damped iteration stops ~1e-4 away while its residual is ~1e-6.  The reported
    truncation, the Newton correction from the last iterate with the Jacobian of the
    stability check, is that distance (Newton is exact on a linear map; the 1e-6 difference
    steps round at ~1e-10 relative, amplified by (1 - 0.99)^-1: measured 5e-10, bound
    1e-6), and None without a Jacobian."""
    A = np.array([[0.99, 0.0], [0.3, 0.5]])
    x_star = np.array([0.3, 0.2])
    F = lambda v: x_star + A @ (v - x_star)  # noqa: E731
    r = fixed_point(F, x_star + 0.05, adaptive=False, tol=1e-6, maxiter=5000,
                    stability=True, warn=False)
    assert r.converged and r.stable and r.residual <= 2e-6
    dist = np.abs(r.value - x_star)
    assert dist.max() > 20 * r.residual
    np.testing.assert_allclose(r.truncation, dist, rtol=1e-6, atol=1e-14)
    assert fixed_point(F, x_star + 0.05, adaptive=False, tol=1e-6, maxiter=5000,
                       warn=False).truncation is None


def test_jacobian_start_is_used_as_a_chord_within_its_radius():
    """A Jacobian handed over from a cheaper map (here the exact one, perturbed by 1%, as a
    subset's would be) is used within its radius: Newton from 0.005 off the fixed point
    of a linear 2-D contraction needs no difference probes -- start, then chord steps,
    each contracting the error ~100-fold (|(I - J0)^-1 (J - J0)| ~ 0.01), to tol 1e-9 --
    and the stability check reuses it at the end.  Beyond its radius, or without it, the
    engine differences as before; a malformed one is refused by name."""
    A = np.array([[0.5, 0.1], [0.2, 0.3]])
    x_star = np.array([0.3, 0.2])
    F = lambda v: x_star + A @ (v - x_star)  # noqa: E731
    x0 = x_star + 0.005
    kw = dict(adaptive=False, newton_below=1.0, tol=1e-9, stability=True)
    seeded = fixed_point(F, x0, jacobian_start=(x0, 1.01 * A, 0.1), **kw)
    assert seeded.converged and seeded.stable
    assert np.max(np.abs(seeded.value - x_star)) < 1e-8
    assert seeded.evaluations <= 5 and seeded.jacobian_reuses >= seeded.evaluations - 1
    far = fixed_point(F, x0, jacobian_start=(x0 + 1.0, 1.01 * A, 0.1), **kw)
    plain = fixed_point(F, x0, **kw)
    assert far.evaluations == plain.evaluations > seeded.evaluations
    # the reported Jacobian is the seed, at the seed's own point (no drift to x0 + steps)
    assert seeded.jacobian_seeded and not plain.jacobian_seeded
    assert np.array_equal(seeded.jacobian_point, x0) and seeded.jacobian_radius == 0.1
    np.testing.assert_array_equal(seeded.jacobian, 1.01 * A)
    for bad in ((x0, np.eye(3), 0.1), (x0, 1.01 * A), (x0, 1.01 * A, "far"),
                (x0 + np.nan, 1.01 * A, 0.1), (x0, 1.01 * A, np.nan), (x0, 1.01 * A, -1)):
        with pytest.raises(ParameterError, match="jacobian_start"):
            fixed_point(F, x0, jacobian_start=bad, **kw)


def test_a_chord_seed_is_used_anywhere_while_it_contracts_and_dropped_when_it_does_not():
    """A seed with radius inf (a chord Jacobian: the staged SE hands a coarse map's to the
    next stage) steers Newton from the first step at any distance, here 0.2 off the fixed
    point (1000 probe radii), with no difference probe: each chord step contracts the
    error ~100-fold.  A seed far off (here with the sign of the coupling flipped and 0.9 on
    the diagonal: steps contract by less than CHORD_CONTRACTION) is dropped after its
    first failed step; the engine then differences F and still converges to the same point."""
    from symtheory.core.solvers import CHORD_CONTRACTION

    A = np.array([[0.5, 0.1], [0.2, 0.3]])
    x_star = np.array([0.3, 0.2])
    F = lambda v: x_star + A @ (v - x_star)  # noqa: E731
    x0 = x_star + 0.2
    kw = dict(adaptive=False, newton_below=np.inf, tol=1e-9, stability=True)
    chord = fixed_point(F, x0, jacobian_start=(x0, 1.01 * A, np.inf), **kw)
    assert chord.converged and chord.stable and chord.jacobian_seeded
    assert np.max(np.abs(chord.value - x_star)) < 1e-8
    assert chord.evaluations <= 6 and chord.jacobian_reuses >= chord.evaluations - 1
    bad_seed = np.array([[0.9, -0.1], [-0.2, 0.9]])
    step = np.linalg.solve(bad_seed - np.eye(2), x0 - F(x0))
    x1 = x0 + step
    assert np.max(np.abs(F(x1) - x1)) > CHORD_CONTRACTION * np.max(np.abs(F(x0) - x0))
    dropped = fixed_point(F, x0, jacobian_start=(x0, bad_seed, np.inf), **kw)
    assert dropped.converged and not dropped.jacobian_seeded
    assert np.max(np.abs(dropped.value - x_star)) < 1e-8


def test_a_seed_near_marginal_does_not_decide_stability():
    """A seed whose largest eigenvalue is above MARGINAL_EIGENVALUE (here it reads 1.02,
    'unstable', for a map whose true eigenvalues are 0.58 and 0.22) still steers Newton,
    but the stability verdict is the map's own: differenced, stable, no escape."""
    from symtheory.core.solvers import MARGINAL_EIGENVALUE

    A = np.array([[0.5, 0.1], [0.2, 0.3]])
    x_star = np.array([0.3, 0.2])
    F = lambda v: x_star + A @ (v - x_star)  # noqa: E731
    x0 = x_star + 0.005
    seed = np.diag([1.02, 0.3])
    assert np.max(np.linalg.eigvals(seed).real) > MARGINAL_EIGENVALUE
    r = fixed_point(F, x0, adaptive=False, newton_below=1.0, tol=1e-9, stability=True,
                    jacobian_start=(x0, seed, 0.1), warn=False)
    assert r.converged and r.stable and r.escapes == 0 and not r.jacobian_seeded
    np.testing.assert_allclose(r.jacobian, A, atol=1e-8)


def test_jacobian_is_reused_within_its_smallest_probe_and_recomputed_beyond():
    """The stability check right after a Newton step reuses the Newton Jacobian when the
    step is shorter than its smallest difference probe (|x' - x| <= h): the change of the
    Jacobian, O(h F''), is then within its own truncation error.  A linear contraction in
    2-D (differences exact at any h, Newton exact in one step) from 0.05 off its fixed
    point: with h = 0.1 that costs start + 2 probes + Newton point = 4 evaluations; with
    h = 1e-6 the check differences again, 6."""
    A = np.array([[0.5, 0.1], [0.2, 0.3]])
    x_star = np.array([0.3, 0.2])
    F = lambda v: x_star + A @ (v - x_star)  # noqa: E731
    # tol 1e-9: one Newton step reaches it at either h (at h = 1e-6 rounding leaves the
    # differences ~1e-10 off, and the step lands ~5e-12 off)
    runs = {h: fixed_point(F, x_star + 0.05, adaptive=False, newton_below=1.0, tol=1e-9,
                           stability=True, jacobian_step=h) for h in (0.1, 1e-6)}
    for r in runs.values():
        assert r.converged and r.stable and np.max(np.abs(r.value - x_star)) < 1e-9
        assert np.max(np.abs(r.jacobian - A)) < 1e-8
    assert (runs[0.1].evaluations, runs[0.1].jacobian_reuses) == (4, 1)
    assert (runs[1e-6].evaluations, runs[1e-6].jacobian_reuses) == (6, 0)


def test_reused_jacobian_is_within_the_difference_error_of_the_slope():
    """On a curved map the reused Jacobian is one measured within h of the fixed point,
    so it is off the slope there by at most its forward-difference error plus the
    change over h: F = 0.5 x + 0.1 x^2 + 0.3 (fixed point 0.69722, F' = 0.5 + 0.2 x,
    F'' = 0.2): |J - F'(x*)| <= 0.1 h + 0.2 h.  Reuse across Newton steps shorter than
    h makes them chord steps; the fixed point is the same to the tolerance."""
    F = lambda v: 0.5 * v + 0.1 * v * v + 0.3  # noqa: E731
    x_star = (0.5 - math.sqrt(0.25 - 0.12)) / 0.2
    h = 0.1
    r = fixed_point(F, 0.6, adaptive=False, newton_below=1.0, tol=1e-12, stability=True,
                    jacobian_step=h)
    assert r.converged and r.stable and abs(r.value - x_star) < 1e-10
    assert r.jacobian_reuses >= 1
    assert abs(float(r.jacobian[0, 0]) - (0.5 + 0.2 * x_star)) <= 0.3 * h


def test_difference_jacobian_reports_its_probes():
    """``probes`` receives max|x_probe - x| of each difference taken: the step, or the
    share of the distance to the boundary next to it."""
    probes = []
    difference_jacobian(lambda v: v ** 2, np.array([0.5, 0.999]), step=1e-3,
                        domain=lambda v: bool(np.all(v < 1.0)), boundary_fraction=0.125,
                        probes=probes)
    assert probes[0] == pytest.approx(1e-3, rel=1e-9)
    assert probes[1] == pytest.approx(0.125 * 1e-3, rel=1e-6)


def test_newton_approaches_a_fixed_point_on_the_boundary_by_the_fraction_rule():
    """``F(v) = 1 - 0.98 (1 - v)`` on ``0 <= v < 1``: the fixed point 1 is the boundary
    itself (perfect recovery), reached geometrically by the iteration (ratio 0.98: ~1100
    steps to 1e-10).  Newton aims exactly at 1, outside the domain; the fraction-to-the-
    boundary step (0.99 of the way) shrinks the gap 100-fold per step instead: gap 1 ->
    1e-10 needs 5 steps, each 1 Jacobian + 1 trial evaluation."""
    F = lambda v: 1.0 - 0.98 * (1.0 - v)  # noqa: E731
    slow = fixed_point(F, 0.0, adaptive=False, maxiter=500, domain=_unit_interval, warn=False,
                       tol=1e-12)
    assert not slow.converged
    r = fixed_point(F, 0.0, adaptive=False, newton_below=1.0, domain=_unit_interval, tol=1e-12)
    # residual 0.02 (1 - v) <= 1e-12 (1 + v): the gap is below 1e-10
    assert r.converged and r.iterations <= 8 and 0 < 1.0 - r.value <= 1e-10


def _boundary_map(v):
    """Fixed points 0.4 (slope 0.52, stable) and 1 (slope 1.12, unstable) on the domain
    0 <= v < 1 -- the shape of phase retrieval's SE below alpha = 1.  ``F(v) - v`` is
    concave near 1, so Newton from the left stays inside and converges to 1."""
    return v + (v - 1.0) * (v - 0.4) * (1.2 - v)


def _unit_interval(v):
    return 0.0 <= v < 1.0


def test_newton_does_not_polish_onto_an_unstable_boundary_point():
    """From 0.99 Newton on F(v) - v = 0 converges to the root v = 1 (the boundary); the
    engine refuses it there (Jacobian 1.12 > 1) and the damped iteration walks to 0.4."""
    r = fixed_point(_boundary_map, 0.99, damping=0.2, adaptive=False, domain=_unit_interval,
                    newton_below=1.0, stability=True, tol=1e-12)
    assert r.converged and r.stable and r.escapes == 0
    assert abs(r.value - 0.4) < 1e-10


def test_unstable_fixed_point_next_to_the_boundary_is_left_inwards():
    """Started within 1e-13 of the unstable fixed point 1 the run converges at once; the
    stability check (one-sided differences into the domain) finds the slope 1.12 > 1, the
    kick towards larger v leaves the domain, so the engine kicks inwards and ends on 0.4."""
    r = fixed_point(_boundary_map, 1.0 - 1e-13, damping=0.2, adaptive=False,
                    domain=_unit_interval, newton_below=1e-3, stability=True, tol=1e-12)
    assert r.converged and r.stable and r.escapes == 1
    assert abs(r.value - 0.4) < 1e-10 and "left 1 unstable" in r.message
    J = difference_jacobian(_boundary_map, np.array([0.4]),
                            domain=lambda v: _unit_interval(v[0]))
    assert abs(J[0, 0] - 0.52) < 1e-5                 # forward difference error ~ h = 1e-6


def test_escape_next_to_the_boundary_is_scaled_to_its_distance():
    """The same start: the kick inwards is sqrt(t kick) = sqrt(1e-13 * 0.05) = 7.07e-8, not
    0.05 (t = 1e-13 is the distance to the boundary along the unstable direction; next
    to 1 the float grid is 1.1e-16, 1e-3 of t, hence rel=1e-3).  With a map on the scale
    of log t the kick is a share of the way, not a restart of the transient."""
    xs = []
    fixed_point(_boundary_map, 1.0 - 1e-13, damping=0.2, adaptive=False, domain=_unit_interval,
                newton_below=1e-3, stability=True, tol=1e-12,
                callback=lambda it, x, res: xs.append(x))
    assert xs[0] == 1.0 - 1e-13
    assert 1.0 - xs[1] == pytest.approx(1e-13 + math.sqrt(1e-13 * 0.05), rel=1e-3)


def test_escape_escalates_when_the_small_kick_stays_within_the_tolerance():
    """At the SE's tol 1e-8 the first kick from 1 - 1e-13 (7.07e-8) leaves a residual of
    8.5e-9: the run re-converges at once next to the same unstable point, now t = 7.07e-8
    from the boundary.  The second escape goes half the remaining way in log t to a full
    kick, t^(1/4) kick^(3/4) = 1.7e-3, and the run ends on 0.4 (found in review: with
    sqrt(t kick) every time the kicks shrank towards the boundary's scale)."""
    xs = []
    r = fixed_point(_boundary_map, 1.0 - 1e-13, damping=0.2, adaptive=False,
                    domain=_unit_interval, newton_below=1e-3, stability=True, tol=1e-8,
                    callback=lambda it, x, res: xs.append(x))
    assert r.converged and r.stable and r.escapes == 2 and abs(r.value - 0.4) < 1e-6
    kicks = [1.0 - x for x in xs[1:3]]
    assert kicks[0] == pytest.approx(1e-13 + math.sqrt(1e-13 * 0.05), rel=1e-3)
    assert kicks[1] == pytest.approx(kicks[0] + kicks[0] ** 0.25 * 0.05 ** 0.75, rel=1e-3)


def test_escape_distance_is_found_on_a_log_scale():
    """F(v) = 2v/(1 + |v|) on v < 1e-20: 0 is unstable (slope 2) and 1e-20 from the
    boundary; linear bisection from kick/16 resolved only ~3e-21 and fell back to the
    full kick.  The kick is sqrt(1e-20 * 0.05) = 2.24e-11 and the run ends on -1."""
    xs = []
    r = fixed_point(lambda v: 2 * v / (1 + abs(v)), 0.0, damping=0.0, adaptive=False,
                    domain=lambda v: v < 1e-20, newton_below=1e-3, stability=True, tol=1e-12,
                    callback=lambda it, x, res: xs.append(x))
    assert r.converged and r.stable and abs(r.value + 1.0) < 1e-9
    assert -xs[1] == pytest.approx(math.sqrt(1e-20 * 0.05), rel=1e-6)


def test_unstable_point_in_an_invariant_subspace_is_left_and_reported():
    """F(x, y) = (2x/(1 + x), y/2 + 1/4): x = 0 is invariant and unstable (slope 2), y
    converges to 1/2.  From (0, 0) the run converges to (0, 1/2), the check kicks along
    +x and the result is the stable (1, 1/2).  With no kick allowed the unstable point is
    returned, flagged and warned about."""
    F = lambda v: np.array([2 * v[0] / (1 + v[0]), 0.5 * v[1] + 0.25])  # noqa: E731
    dom = lambda v: v[0] >= 0  # noqa: E731
    r = fixed_point(F, np.zeros(2), damping=0.3, adaptive=False, domain=dom, newton_below=1e-3,
                    stability=True, tol=1e-12)
    assert r.converged and r.stable and r.escapes == 1
    np.testing.assert_allclose(r.value, [1.0, 0.5], atol=1e-10)
    with pytest.warns(ConvergenceWarning, match="UNSTABLE"):
        r = fixed_point(F, np.zeros(2), damping=0.3, adaptive=False, domain=dom,
                        newton_below=1e-3, stability=True, tol=1e-12, max_kicks=0)
    assert r.converged and r.stable is False and r.value[0] == 0.0
    assert abs(_eig_max(r.jacobian) - 2.0) < 1e-5


def _eig_max(J):
    return float(np.max(np.linalg.eigvals(J).real))


def test_start_outside_the_domain_is_refused():
    with pytest.raises(ParameterError, match="outside the domain"):
        fixed_point(_boundary_map, 1.0, domain=_unit_interval)


def test_difference_jacobian_at_the_apex_of_the_psd_cone():
    """F(Q) = Q + Q^2 on symmetric 2 x 2 matrices, free entries (q00, q01, q11), domain
    Q >= 0.  At Q = 0 a unit step in q01 is indefinite both ways (no Jacobian); along the
    PSD directions E_00, E_11, E_01 + E_10 + E_00 + E_11 the Jacobian is the identity (the
    Q^2 term contributes O(h) = 1e-6)."""
    def mat(q):
        return np.array([[q[0], q[1]], [q[1], q[2]]])

    def F(q):
        Q = mat(q)
        R = Q + Q @ Q
        return np.array([R[0, 0], R[0, 1], R[1, 1]])

    def psd(q):
        return np.linalg.eigvalsh(mat(q))[0] >= 0

    assert difference_jacobian(F, np.zeros(3), domain=psd) is None
    D = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    J = difference_jacobian(F, np.zeros(3), domain=psd, directions=D)
    np.testing.assert_allclose(J, np.eye(3), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-40, 2), min_size=2, max_size=5, unique=True),
       st.floats(0, 0.9), st.integers(0, 2), st.integers(15, 40))
def test_polynomial_roots_mp_resolve_each_root_relative_to_itself(decades, offset, zeros,
                                                                  digits):
    """Simple roots spread over 42 decades (one per decade drawn, signs alternating) and
    exact zeros, from the expanded product ``x^zeros prod (x - r_k)``: each comes back to
    ``digits`` significant digits (10^(1-digits) relative), which plain polyroots
    (absolute tolerance, cleanup to 0) does not give for roots below 10^-digits."""
    with mpmath.workdps(3 * digits + 100):
        true = [(-1) ** k * mpmath.mpf(10) ** (d + offset) for k, d in enumerate(decades)]
        poly = [mpmath.mpf(1)]
        for r in true + [mpmath.mpf(0)] * zeros:
            poly = [a - r * b for a, b in zip(poly + [0], [0] + poly)]
        got = polynomial_roots_mp(poly, digits=digits)
        assert len(got) == len(true) + zeros
        assert sum(1 for g in got if g == 0) == zeros
        got = sorted((mpmath.re(g) for g in got if g != 0), key=abs)
        for t, g in zip(sorted(true, key=abs), got):
            assert abs(g - t) <= mpmath.mpf(10) ** (1 - digits) * abs(t)


def test_polynomial_roots_mp_checks_digits():
    with pytest.raises(ValueError, match="digits"):
        polynomial_roots_mp([1, -1], digits=0)


def test_difference_jacobian_next_to_the_boundary_uses_the_local_scale():
    """``F(x) = 1 - 0.8 (1 - x) + 1e6 (1 - x)^2`` on ``x < 1`` at ``1 - x = 1e-10``: the
    local slope is 0.8 - 2e-4; a backward secant over the default step 1e-6 would read
    ``0.8 - 1e6 (1e-6 + 2e-10) = -0.2``.  The step shrinks below the distance to the
    boundary; the remaining error is the curvature over that step (~1e-5) plus rounding
    of F near 1 over a step of ~1e-11 (~1e-5)."""
    F = lambda v: 1 - 0.8 * (1 - v) + 1e6 * (1 - v) ** 2  # noqa: E731
    x = np.array([1 - 1e-10])
    J = difference_jacobian(F, x, step=1e-6, domain=lambda v: bool(v[0] < 1))
    assert J[0, 0] == pytest.approx(0.8 - 2e-4, abs=1e-4)


def test_difference_jacobian_steps_on_a_share_of_the_distance_to_the_boundary():
    """``F(v) = 1 - (1 - v)^1.5`` on ``v < 1`` (singular at the boundary, like an overlap
    map at perfect recovery: it varies on the scale of the distance ``t = 1 - v``) at
    ``t = 1.5e-6``, step 1e-6: the step fits inside, but the forward secant over it
    reads 1.48e-3 against the slope ``1.5 sqrt(t) = 1.837e-3`` (20% low).  With
    ``boundary_fraction = 1e-3`` the step is 1e-3 t: the curvature error is ~h/(4 t) =
    2.5e-4 relative, and the rounding error of F near 1 over h ~ 1.5e-9 is ~1e-7."""
    F = lambda v: 1 - (1 - v) ** 1.5  # noqa: E731
    t = 1.5e-6
    x = np.array([1 - t])
    dom = lambda v: bool(v[0] < 1)  # noqa: E731
    slope = 1.5 * math.sqrt(t)
    J = difference_jacobian(F, x, step=1e-6, domain=dom, boundary_fraction=1e-3)
    assert J[0, 0] == pytest.approx(slope, rel=5e-4)
    # far from the boundary (beyond step / boundary_fraction) the plain step is kept
    J = difference_jacobian(F, np.array([0.5]), step=1e-6, domain=dom, boundary_fraction=1e-3)
    assert J[0, 0] == pytest.approx(1.5 * math.sqrt(0.5), rel=1e-5)
    with pytest.raises(ParameterError, match="boundary_fraction"):
        difference_jacobian(F, x, domain=dom, boundary_fraction=0.0)
    # the engine refuses it at the start, not at its first Jacobian
    for bad in (0.0, 0.7, float("nan")):
        with pytest.raises(ParameterError, match="jacobian_boundary_fraction"):
            fixed_point(F, 0.5, domain=lambda v: v < 1, jacobian_boundary_fraction=bad)


@pytest.mark.parametrize("x, domain", [
    (1.0, lambda v: bool(v[0] <= 1)),                       # on a closed boundary
    (float(np.nextafter(1.0, 0.0)), lambda v: bool(v[0] < 1)),  # one ulp inside
    (1 - 1e-13, lambda v: bool(v[0] < 1)),
])
def test_difference_jacobian_on_the_boundary_is_not_a_zero_column(x, domain):
    """Closer to the boundary than rounding allows (1e-13 |x|), the backward step is
    used: slope 2 of ``F = 2v`` (a forward step that rounds back to x gave 0)."""
    J = difference_jacobian(lambda v: 2 * v, np.array([x]), step=1e-6, domain=domain)
    assert J[0, 0] == pytest.approx(2.0, rel=1e-6)


def test_polynomial_roots_mp_refuses_what_polyroots_cannot_resolve():
    """(x - 1)^4 (x - 2): polyroots does not converge at any precision up to the cap (a
    quadruple root), so the function raises ArithmeticError naming it instead of
    returning unconverged roots; the zero polynomial is refused.  (The retry that does
    succeed, BSR's edges at Delta = 1e12, is in test_bsr_edges.)"""
    poly = [mpmath.mpf(1)]
    for r in (1, 1, 1, 1, 2):
        poly = [a - r * b for a, b in zip(poly + [0], [0] + poly)]
    with pytest.raises(ArithmeticError, match="did not converge"):
        polynomial_roots_mp(poly, digits=10, max_digits=40)
    with pytest.raises(ValueError, match="zero polynomial"):
        polynomial_roots_mp([0, 0], digits=10)


@pytest.mark.parametrize("roots", [["1e-250"], ["-3e-250", "2e-250"], ["7e+280", "-1e+281"],
                                   ["1e-200", "1e-180"]])
def test_polynomial_roots_mp_at_any_scale(roots):
    """Roots of one tiny or huge scale are found relative to themselves at once (the stop
    test is absolute near 1: a linear polynomial with root 1e-250 used to escalate to
    max_digits and raise).  Independent check: the roots the polynomial was built from."""
    import mpmath

    with mpmath.workdps(40):
        r = [mpmath.mpf(x) for x in roots]
        c = [mpmath.mpf(1)]
        for x in r:                      # coefficients of prod (t - x), leading first
            c = [a - x * b for a, b in zip(c + [0], [0] + c)]
        got = sorted((mpmath.re(z) for z in polynomial_roots_mp(c, digits=30, max_digits=60)))
        for g, x in zip(got, sorted(r)):
            assert abs(g - x) <= mpmath.mpf(10) ** -29 * abs(x)


def test_polynomial_roots_mp_complex_coefficients():
    """Complex coefficients (a public input the rescaling must not break): x^2 - 3i x - 2
    = (x - i)(x - 2i) and x^2 + i, roots +-(1 - i)/sqrt(2)."""
    import mpmath

    got = sorted(polynomial_roots_mp([1, -3j, -2], digits=20), key=lambda z: mpmath.im(z))
    assert abs(got[0] - 1j) < 1e-19 and abs(got[1] - 2j) < 1e-19
    got = polynomial_roots_mp([1, 0, 1j], digits=20)
    for z in got:
        assert abs(z * z + 1j) < 1e-19


# ------------------------------------------------------------------ certified roots (core.roots)
def _with_error(g, err):
    """g as an Estimate with the error bar err (what a model's evaluation returns)."""
    from symtheory.core.roots import Estimate

    return lambda x: Estimate(value=g(x), error=err, method="test")


def test_certify_root_bounds_the_distance_to_the_root():
    """g(x) = 0.3 - x known to +-1e-9: a point 1e-10 off the root is certified with an
    error bound that covers the true distance: w = 1e-9 (the error bar) does not clear
    it below (g(x - w) = 9e-10), 8 w does; a tolerance below the bound is reported."""
    from symtheory.core.roots import certify_root

    x = 0.3 + 1e-10
    r = certify_root(_with_error(lambda v: 0.3 - v, 1e-9), x, 0.0, 1.0, rtol=1e-6)
    assert r.converged and r.error_kind == "bound" and r.method == "test"
    assert abs(x - 0.3) <= r.error == pytest.approx(8e-9)
    assert r.evaluations == r.iterations == 5          # at x, then x -+ w, x -+ 8 w
    tight = certify_root(_with_error(lambda v: 0.3 - v, 1e-9), x, 0.0, 1.0, rtol=1e-10,
                         hint="more digits elsewhere")
    assert not tight.converged and "rtol = 1e-10; more digits elsewhere" in tight.message


def test_certify_root_refuses_when_the_error_hides_the_sign_change():
    """Error bars that hide the sign change up to w > x leave the root uncertified: not
    converged, the error is the distance to the farther bracket end, and the message says
    why; an error bar beyond the rigorous bracket leaves the bracket as the bound."""
    from symtheory.core.roots import certify_root

    r = certify_root(_with_error(lambda v: 0.3 - v, 10.0), 0.3, 0.0, 100.0, rtol=1e-3)
    assert not r.converged and r.error == pytest.approx(99.7)
    assert "could not certify" in r.message
    inside = certify_root(_with_error(lambda v: 0.3 - v, 10.0), 0.3, 0.2, 0.5, rtol=1e-3)
    assert inside.error == pytest.approx(0.2) and "certified to" in inside.message
    none = certify_root(_with_error(lambda v: -v, 0.0), 0.0, 0.0, 0.5, rtol=1e-3,
                        no_root="reason")
    assert not none.converged and none.value == 0.0 and none.error == 0.5
    assert none.message == "no positive root resolved: reason"


def test_bracketed_root_finds_a_root_decades_below_the_bracket():
    """g(v) = 1e-200 - v on [0, 1]: the positive lower end is found by decades and Brent
    gives the root to the last ulps (independent check: the root itself)."""
    from symtheory.core.roots import bracketed_root, first_positive

    g = lambda v: 1e-200 - v  # noqa: E731
    assert first_positive(g, 1.0) == pytest.approx(1e-201, rel=1e-12)
    assert bracketed_root(g, 0.0, 1.0) == pytest.approx(1e-200, rel=1e-14)
    assert bracketed_root(lambda v: 1.0 - v, 0.0, 0.5) == 0.5      # root beyond the bracket
    assert bracketed_root(lambda v: -1.0, 0.0, 0.5) == 0.0         # no positive end


def test_certified_lower_root_is_below_the_root():
    """g(v) = 1/3 - v with rounding 4 eps: the certified lower bound is below 1/3 (exact
    in rationals) and within 1e-13 relative of it."""
    from fractions import Fraction

    from symtheory.core.roots import EPS, certified_lower_root

    g = lambda v: 1 / 3 - v  # noqa: E731
    lo = certified_lower_root(g, lambda v: g(v) - 4 * EPS, 1.0)
    assert Fraction(lo) < Fraction(1, 3) and lo > (1 / 3) * (1 - 1e-13)
    assert certified_lower_root(g, g, 0.2) == 0.2      # g > 0 at the upper end: the end


def test_tighter_bracket_replaces_a_looser_certified_root():
    from symtheory.core.roots import CertifiedRoot, tighter_bracket

    loose = CertifiedRoot(value=0.5, error=0.1, converged=False, iterations=7, method="m")
    r = tighter_bracket(loose, 0.49, 0.51, rtol=0.05, message="bounds")
    assert (r.value, r.method, r.converged, r.iterations) == (0.5, "bounds", True, 7)
    assert r.error == pytest.approx(0.01)
    assert tighter_bracket(loose, 0.0, 0.51, rtol=0.05, message="") is loose


def test_within_bounds_intersects_and_refuses_a_contradiction():
    from symtheory.core.roots import Estimate, best_estimate, within_bounds

    e = Estimate(value=1.0, error=0.5, method="path")
    assert e.converged and e.note == ""
    clipped = within_bounds(e, 0.9, 2.0)
    assert (clipped.value, clipped.error, clipped.method) == (pytest.approx(1.2), pytest.approx(0.3), "path")
    out = within_bounds(e, 2.0, 3.0)
    assert out.method == "bounds" and out.error_kind == "bound" and "outside" in out.note
    failed = Estimate(value=math.nan, method="other", message="failed")
    assert not failed.converged
    assert best_estimate([failed], 0.0, 1.0).method == "bounds"
    assert best_estimate([failed, e], 0.0, 10.0) is e


# ------------------------------------------------------------------ extrapolation (core.extrapolation)
def _ladder(**kw):
    from symtheory.core.extrapolation import Ladder

    args = dict(method="test", parameter="s", values=(1e-4, 1e-3, 1e-2, 1e-1), exponent=1,
                agreement=0.25, resolution=0.1, good_rtol=1e-13)
    args.update(kw)
    return Ladder(**args)


def test_ladder_extrapolates_a_known_expansion_within_its_bound():
    """f(s) = 1 + 2 s + 3 s^2 (exact at the anchors): extrapolated from s_i = 1e-4, 1e-3,
    1e-2 to s = 1e-7 with p = 1; the true value lies within the reported bound, which is
    of the size of the neglected 3 s^2 seen at the anchors times s."""
    from symtheory.core.roots import Estimate

    f = lambda s: 1 + 2 * s + 3 * s * s  # noqa: E731
    lad = _ladder()
    est = lad.estimate(1e-7, lambda s: Estimate(value=f(s), error=0.0, method="exact"),
                       lambda s: 1.0)
    assert est.method == "test" and est.converged
    assert abs(est.value - f(1e-7)) <= est.error < 1e-7 * 6 * 3e-2


def test_ladder_refuses_a_crossover():
    """A correction whose coefficient changes by O(1) between anchors (a crossover, not an
    asymptotic expansion) is refused: infinite error, saying the anchors disagree."""
    from symtheory.core.roots import Estimate

    f = lambda s: 1 + (2 * s if s < 5e-4 else 5 * s)  # noqa: E731
    est = _ladder(values=(1e-4, 1e-3, 1e-2)).estimate(
        1e-7, lambda s: Estimate(value=f(s), error=0.0, method="exact"), lambda s: 1.0)
    assert math.isinf(est.error) and "disagree" in est.note


def test_ladder_inverse_variable_and_validation():
    """An inverse ladder declares parameter values towards infinity; s = 1/parameter.
    Bad declarations are refused by field name."""
    lad = _ladder(values=(1e7, 1e6, 1e5), inverse=True, excludes=("t",))
    assert lad.s_values == (1 / 1e7, 1 / 1e6, 1 / 1e5)
    assert lad.parameter_at(lad.s_at(2.0)) == 2.0
    assert lad.remaining(frozenset({"s", "t", "u"})) == frozenset({"u"})
    with pytest.raises(ParameterError, match="values"):
        _ladder(values=(1e-1, 1e-2, 1e-3))          # farthest first
    with pytest.raises(ParameterError, match="values"):
        _ladder(values=(1e-2, 1e-1))                # fewer than three
    with pytest.raises(ParameterError, match="agreement must be > 0"):
        _ladder(agreement=0.0)


# ------------------------------------------------------------------ results on the Result base
def test_solver_results_are_results_with_their_old_signatures():
    """SolverResult keeps its positional signature (value, converged, iterations, residual,
    method, message); fixed_point's truncation is its error estimate; PrecisionRoot's
    confirmed is its converged."""
    from symtheory.core.result import Result
    from symtheory.core.solvers import SolverResult

    r = SolverResult(0.5, True, 3, 0.0, "brent", "msg")
    assert isinstance(r, Result) and (r.value, r.iterations, r.message) == (0.5, 3, "msg")
    A = np.array([[0.5, 0.1], [0.2, 0.3]])
    fp = fixed_point(lambda v: A @ v + 1.0, np.zeros(2), tol=1e-6, stability=True)
    assert fp.error_kind == "estimate" and np.array_equal(fp.error, fp.truncation)
    assert fixed_point(math.cos, 0.0).error is None
    pr = refine_root_mp(lambda v: mpmath.cos(v) - v, 0.7390851332151607, digits=20)
    assert isinstance(pr, Result) and pr.confirmed is pr.converged is True
    assert pr.iterations > 2 and pr.error < mpmath.mpf(10) ** -20 and pr.residual < 1e-25


def test_newton_refined_float_roots_equal_the_polyroots_escalation():
    """(x - 1/3)(x - 2)(x^2 + x + 7/4)(x + 1e-9): numpy.roots refined by Newton gives all
    five to 40 digits, as the polyroots escalation does (forced by a larger max); a
    near-double pair (separation 1e-9 relative) is left to polyroots (None)."""
    from symtheory.core.roots_mp import _newton_roots_mp

    with mpmath.workdps(60):
        true = [mpmath.mpf(1) / 3, mpmath.mpf(2), mpmath.mpc(-0.5, mpmath.sqrt(1.5)),
                mpmath.mpc(-0.5, -mpmath.sqrt(1.5)), mpmath.mpf("-1e-9")]
        poly = [mpmath.mpf(1)]
        for r in true:
            poly = [a - r * b for a, b in zip(poly + [0], [0] + poly)]
        poly = [mpmath.re(c) for c in poly]
        fast = _newton_roots_mp(poly, 40)
        assert fast is not None and len(fast) == 5
        for r in true:
            assert min(abs(f - r) for f in fast) < mpmath.mpf(10) ** -40 * abs(r)
        got = polynomial_roots_mp(poly, digits=40)
        for r in true:
            assert min(abs(g - r) for g in got) < mpmath.mpf(10) ** -39 * abs(r)
        close = [mpmath.mpf(1), mpmath.mpf(1) + mpmath.mpf("1e-9"), mpmath.mpf(3)]
        poly = [mpmath.mpf(1)]
        for r in close:
            poly = [a - r * b for a, b in zip(poly + [0], [0] + poly)]
        assert _newton_roots_mp(poly, 40) is None
        got = polynomial_roots_mp(poly, digits=30)
        for r in close:
            assert min(abs(g - r) for g in got) < mpmath.mpf(10) ** -20


def test_refine_root_mp_secant_carries_its_slope_into_the_confirmation():
    """cos(v) = v from the float64 root: the secant with the slope carried into the
    60-digit solve needs fewer evaluations than findroot restarted at each precision
    (measured 5 vs 14), and both give the root to 1e-32 (findroot at 50 digits as the
    independent value)."""
    f = lambda v: mpmath.cos(v) - v  # noqa: E731
    new = refine_root_mp(f, 0.7390851332151607, digits=30)
    old = refine_root_mp(f, 0.7390851332151607, digits=30, method="findroot")
    assert new.confirmed and old.confirmed and new.iterations < old.iterations
    with mpmath.workdps(50):
        exact = mpmath.findroot(f, mpmath.mpf("0.739"))
        assert abs(new.value - exact) < mpmath.mpf(10) ** -32
        assert abs(new.value_check - exact) < mpmath.mpf(10) ** -45
    with pytest.raises(ValueError, match="method"):
        refine_root_mp(f, 0.739, digits=10, method="newton")
