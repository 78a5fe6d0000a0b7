"""Deterministic SE of P = M = 1 noisy links: ``sampling='gauss-hermite'`` (the default
'auto' there) integrates omega by Gauss-Hermite and y on the observation rule's grid, so the
whole map is a 2-D integral; checked against nested scipy quadrature of the closed form."""
import math
import warnings

import pytest
import sympy as sp
from scipy import integrate, stats
from scipy.optimize import brentq

from symtheory.glm import MultiIndexModel
from symtheory.glm.se.state_evolution import StateEvolution

z = sp.Symbol("z", real=True)


def test_linear_link_fixed_point_is_the_closed_form():
    # y = z + sqrt(0.5) xi, alpha = 1: Q_hat = alpha/(Delta + 1 - Q), Q = Q_hat/(1 + Q_hat)
    # -> Q = 1/2 exactly; Gauss-Hermite is exact here (g_out linear in omega)
    se = StateEvolution(MultiIndexModel("ident_sn", sp.Matrix([[z]]), sp.Matrix([[z]])),
                        1.0, noise_variance=0.5, omega_nodes=8)
    res = se.solve()
    assert abs(res.Q[0, 0] - 0.5) < 1e-8 and res.Q_stderr[0, 0] < 1e-6
    assert "Gauss-Hermite tensor rule, 8 nodes per axis" in res.observation


D = 0.2


def _egg(Q):
    """E_omega int dy Z_out g_out^2 for y = |z| + sqrt(D) xi by nested scipy quad of the
    closed form: Z_out = sum of two Gaussians in y times normal CDFs (z > 0, z < 0), the
    posterior a mixture of two truncated Gaussians."""
    V = 1 - Q
    s, sd = math.sqrt(V * D / (V + D)), math.sqrt(V + D)

    def inner(om):
        def f(y):
            N1, N2 = stats.norm.pdf(y, om, sd), stats.norm.pdf(-y, om, sd)
            m1, m2 = (om * D + y * V) / (V + D), (om * D - y * V) / (V + D)
            A1, A2 = N1 * stats.norm.cdf(m1 / s), N2 * stats.norm.cdf(-m2 / s)
            Zo = A1 + A2
            if Zo <= 0:
                return 0.0
            Ez = (A1 * m1 + N1 * s * stats.norm.pdf(m1 / s) + A2 * m2
                  - N2 * s * stats.norm.pdf(m2 / s)) / Zo
            return Zo * ((Ez - om) / V) ** 2
        return integrate.quad(f, -12 * sd + min(0, om), abs(om) + 12 * sd, points=[0.0],
                              epsabs=1e-14, epsrel=1e-12, limit=400)[0]

    sq = math.sqrt(Q)
    return integrate.quad(lambda x: stats.norm.pdf(x) * inner(sq * x), -12, 12, points=[0.0],
                          epsabs=1e-14, epsrel=1e-11, limit=400)[0]


@pytest.mark.slow
def test_abs_link_map_and_fixed_point_against_nested_quadrature():
    m = MultiIndexModel("bench_abs", sp.Matrix([[z]]), sp.Matrix([[sp.Abs(z)]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se = StateEvolution(m, 1.5, noise_variance=D, omega_nodes=128)
        assert se.sampling == "gauss-hermite"
        # the map: 0.542135746 (nested quad); 128 nodes measured 1e-8 from it
        assert abs(se.qhat([[0.4475]])[0][0, 0] / 1.5 - _egg(0.4475)) < 1e-6
        res = se.solve()
    ref = brentq(lambda q: q - 1.5 * _egg(q) / (1 + 1.5 * _egg(q)), 0.3, 0.6, xtol=1e-12)
    # the stated error (change against 85 nodes per axis) covers the distance to the
    # reference fixed point (Q* = 0.4512016777)
    assert abs(res.Q[0, 0] - ref) <= res.Q_stderr[0, 0]
    assert res.Q_stderr[0, 0] < 1e-4


def test_state_evolution_note_names_the_deterministic_path():
    from symtheory.glm.se.state_evolution import StateEvolution

    model = MultiIndexModel("ident_sn", sp.Matrix([[z]]), sp.Matrix([[z]]))
    se = StateEvolution(model, 1.0, samples=64, noise_variance=0.5, sampling="rqmc")
    assert "sampling='gauss-hermite'" in se.observation_note
    # the default design integrates everything here: y on its grid, omega by Gauss-Hermite
    auto = StateEvolution(model, 1.0, noise_variance=0.5)
    assert auto.sampling == "gauss-hermite" and "nothing sampled" in auto.observation_note
