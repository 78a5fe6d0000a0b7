"""The one factor interface on family-neutral toy models: noisy ``|z|``, probit, noisy
``z1 z2``.  For every channel, ``g_out`` and ``dg_out`` (derived once from the posterior
moments) are checked against independent paths: central differences of ``log Z_out``
and of ``g_out``, and the Nishimori identity ``E_y[g g^T + dg] = 0`` (by an exact sum or
by Monte Carlo with its standard error).  The one GAMP loop is checked on a noisy linear
GLM against its closed-form state evolution."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from symtheory.glm import MultiIndexModel
from symtheory.glm.factors.channel import Channel
from symtheory.glm.factors.scalar import gaussian_noise_channel, sign_channel

z, z1, z2 = sp.symbols("z z1 z2", real=True)
DELTA = 0.3


@pytest.fixture(scope="module")
def abs_link():
    """``y = |z| + sqrt(Delta) xi`` (one index, one token)."""
    return MultiIndexModel("toy_abs", sp.Matrix([[z]]), sp.Matrix([[sp.Abs(z)]])).channel(DELTA)


@pytest.fixture(scope="module")
def product_link():
    """``y = z1 z2 + sqrt(Delta) xi`` (two index rows, one token)."""
    return MultiIndexModel("toy_product", sp.Matrix([[z1], [z2]]),
                           sp.Matrix([[z1 * z2]])).channel(DELTA)


def _point(P, rng):
    A = rng.standard_normal((P, P))
    return 0.6 * rng.standard_normal((1, P, 1)), A @ A.T / P + 0.4 * np.eye(P)


def _finite_difference_checks(ch, y, omega, V, params=(), eps=1e-5):
    """g = d log Z/d omega and dg = d g/d omega by central differences (truncation
    ~1e-10, rounding ~1e-16/1e-5 of the values: tolerance 1e-6 of the scale)."""
    g, dg = ch.gout(y, omega, V, *params)
    P = omega.shape[1]
    for a in range(P):
        e = np.zeros_like(omega)
        e[0, a, 0] = eps
        lp = ch.log_partition(y, omega + e, V, *params)[0]
        lm = ch.log_partition(y, omega - e, V, *params)[0]
        assert g[0, a, 0] == pytest.approx((lp - lm) / (2 * eps), abs=1e-6 * (1 + abs(g[0, a, 0])))
        gp = ch.gout(y, omega + e, V, *params)[0][0, :, 0]
        gm = ch.gout(y, omega - e, V, *params)[0][0, :, 0]
        np.testing.assert_allclose(dg[0, :, 0, a, 0], (gp - gm) / (2 * eps),
                                   atol=1e-6 * (1 + np.max(np.abs(dg))))


@pytest.mark.parametrize("name", ["abs", "product"])
def test_noisy_links_output_functions_are_derivatives(name, abs_link, product_link):
    ch = {"abs": abs_link, "product": product_link}[name]
    assert isinstance(ch, Channel)
    rng = np.random.default_rng(3)
    for _ in range(3):
        omega, V = _point(ch.P, rng)
        y = np.array([[rng.normal(0.5, 1.0)]])
        _finite_difference_checks(ch, y, omega, V)


@pytest.mark.parametrize("name", ["abs", "product"])
def test_noisy_links_nishimori(name, abs_link, product_link):
    """``E_y[g g^T + dg] = 0`` at a fixed ``omega, V`` with ``y`` drawn from the model:
    Monte Carlo over 4000 draws, within 5 standard errors of 0 entrywise."""
    ch = {"abs": abs_link, "product": product_link}[name]
    model = ch.model
    rng = np.random.default_rng(4)
    omega, V = _point(ch.P, rng)
    n = 4000
    Z = omega + np.einsum("ab,sbm->sam", np.linalg.cholesky(V), rng.standard_normal((n, ch.P, 1)))
    y = model.g(Z).reshape(n, -1) + math.sqrt(DELTA) * rng.standard_normal((n, 1))
    g, dg = ch.gout(y, np.broadcast_to(omega, (n, ch.P, 1)), V)
    per = np.einsum("sam,sbm->sab", g, g) + np.einsum("sambm->sab", dg)
    mean, se = per.mean(axis=0), per.std(axis=0, ddof=1) / math.sqrt(n)
    assert np.all(np.abs(mean) <= 5 * se + 1e-12), (mean, se)


def test_probit_scalar_channel_in_both_layouts():
    """The probit channel (``y = sign(z + sqrt(Delta) xi)``) as a scalar channel: the
    elementwise layout and the ``1 x 1`` matrix layout give the same ``g_out``,
    ``dg_out``; finite differences confirm both; Nishimori holds exactly as a sum over
    ``y = +-1`` weighted by ``Z_out``."""
    ch = sign_channel()
    for omega, V in [(0.3, 0.7), (-1.7, 0.05), (2.5, 1.9)]:
        g_s, dg_s = ch.gout(np.array([1.0, -1.0]), np.array([omega, omega]), V, DELTA)
        g_m, dg_m = ch.gout(np.array([1.0, -1.0]), np.full((2, 1, 1), omega),
                            np.array([[V]]), DELTA)
        np.testing.assert_allclose(g_m.ravel(), g_s, rtol=1e-14)
        np.testing.assert_allclose(dg_m.ravel(), dg_s, rtol=1e-14)
        for y in (1.0, -1.0):
            _finite_difference_checks(ch, np.array([[y]]), np.full((1, 1, 1), omega),
                                      np.array([[V]]), (DELTA,))
        Zy = np.exp(ch.log_partition(np.array([1.0, -1.0]), np.array([omega, omega]), V, DELTA))
        assert Zy.sum() == pytest.approx(1.0, abs=1e-14)
        assert float(np.sum(Zy * (g_s ** 2 + dg_s))) == pytest.approx(0.0, abs=1e-13)


def test_one_gamp_loop_on_a_noisy_linear_glm():
    """``y = Phi w + sqrt(Delta) xi`` with a N(0, 1) prior: the state evolution is
    ``q = qhat/(1 + qhat)``, ``qhat = alpha/(Delta + 1 - q)`` (solved by SymPy here).
    GAMP (the one loop: dense operator, the scalar Gaussian channel in the matrix
    layout, the Gaussian prior's input functions) at p = 2000 lands on it within
    finite-size noise, 4/sqrt(p) ~ 0.09 (measured: overlap 0.5012 against q = 0.5, 20
    iterations; the predicted variance 1 - q to 3e-11)."""
    from symtheory.glm.factors.gaussian_prior import GaussianPrior
    from symtheory.glm.gamp.loop import DenseOperator, gamp

    alpha, p = 0.8, 2000
    q = sp.Symbol("q")
    qhat = alpha / (DELTA + 1 - q)
    q_se = float(next(r for r in sp.solve(sp.Eq(q, qhat / (1 + qhat)), q) if 0 < r < 1))
    rng = np.random.default_rng(6)
    n = int(alpha * p)
    Phi = rng.standard_normal((n, p)) / math.sqrt(p)
    w = rng.standard_normal(p)
    y = Phi @ w + math.sqrt(DELTA) * rng.standard_normal(n)
    res = gamp(DenseOperator(Phi), y, gaussian_noise_channel(), GaussianPrior(),
               channel_params=(DELTA,), max_iter=100, tol=1e-10, truth=w[None])
    assert res.converged and not res.diverged, res.message
    overlap = float(res.W[0] @ w) / p
    assert abs(overlap - q_se) < 4 / math.sqrt(p)
    # GAMP's own prediction of its error is the SE's 1 - q at the fixed point: for the
    # Gaussian prior and channel V does not depend on the data, only on its iteration
    assert abs(res.variance - (1 - q_se)) < 1e-8
