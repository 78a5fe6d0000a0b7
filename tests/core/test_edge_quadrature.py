"""The mpmath edge rule (core.quadrature.integrate_edges_mp): exponential convergence for
square-root edges, and an honest 'not converged' where its assumption fails."""
import mpmath
import pytest

from symtheory.core.quadrature import integrate_edges_mp, mp_edge_nodes


def test_square_root_edges_converge_exponentially():
    """int_{-1}^{1} sqrt(1 - x^2) x^2 = pi/8 and int (1 - x^2)^(3/2)/(x + 3) (reference:
    mpmath.quad at 60 digits) to 1e-48 at 50 digits, in 63 nodes (level 6): the
    trapezoid in theta on an analytic periodic integrand."""
    with mpmath.workdps(60):
        ref2 = mpmath.quad(lambda x: (1 - x * x) ** mpmath.mpf(1.5) / (x + 3), [-1, 1])
    with mpmath.workdps(50):
        f = lambda x: [mpmath.sqrt(1 - x * x) * x * x,  # noqa: E731
                       (1 - x * x) ** mpmath.mpf(1.5) / (x + 3)]
        val, err, nodes, ok = integrate_edges_mp(f, mpmath.mpf(-1), mpmath.mpf(1),
                                                 tol=mpmath.mpf(10) ** -49)
        assert ok and nodes <= 63
        for v, e, r in zip(val, err, [mpmath.pi / 8, ref2]):
            assert abs(v - r) < mpmath.mpf(10) ** -48 * r
            assert e < mpmath.mpf(10) ** -45 * r


def test_even_integrand_gives_the_upper_half():
    """even=True: only nodes in [m, b) are evaluated (the midpoint shifted off m) and
    int_m^b is returned: int_0^1 sqrt(1 - x^2) = pi/4."""
    seen = []
    with mpmath.workdps(40):
        def f(x):
            seen.append(x)
            return [mpmath.sqrt(1 - x * x)]
        val, _, nodes, ok = integrate_edges_mp(f, mpmath.mpf(-1), mpmath.mpf(1),
                                               tol=mpmath.mpf(10) ** -39, even=True)
        assert ok and abs(val[0] - mpmath.pi / 4) < mpmath.mpf(10) ** -38
        assert nodes == len(seen) and min(seen) > 0


def test_a_regular_end_is_reported_not_converged():
    """int_0^1 1 dx has no square-root edge: in theta the integrand sin(theta) has a kink
    in its periodic extension and the rule converges like n^-2; it must say so
    (converged False) rather than stop at a wrong value."""
    with mpmath.workdps(30):
        val, err, nodes, ok = integrate_edges_mp(lambda x: [mpmath.mpf(1)], mpmath.mpf(0),
                                                 mpmath.mpf(1), tol=mpmath.mpf(10) ** -28,
                                                 max_level=9)
        assert not ok and nodes == 2 ** 9 - 1
        assert err[0] >= abs(val[0] - 1) / 10


def test_a_singular_integrand_ends_the_refinement():
    """A division by zero or a non-finite value at a node: not converged, no exception."""
    with mpmath.workdps(20):
        _, _, _, ok = integrate_edges_mp(lambda x: [1 / (x - mpmath.mpf(0.5))], mpmath.mpf(0),
                                         mpmath.mpf(1), tol=mpmath.mpf(10) ** -18)
        assert not ok


def test_nodes_nest_and_are_cached():
    """Level l's nodes are the odd multiples of pi 2^-l: the union over levels <= 4 is
    every multiple k pi/16, k = 1..15, once; the tables are computed once per precision."""
    thetas = []
    for level in range(1, 5):
        side, gap, _ = mp_edge_nodes(level, 100)
        thetas += [(s, g) for s, g in zip(side, gap)]
        assert mp_edge_nodes(level, 100)[1] is gap
    with mpmath.workprec(100):
        xs = sorted(float(-1 + g if s < 0 else 1 - g) for s, g in thetas)
        want = sorted(float(-mpmath.cos(k * mpmath.pi / 16)) for k in range(1, 16))
    assert xs == pytest.approx(want, abs=1e-15)
