"""The iteration engines: damped GAMP keeps its fixed point; the SE fixed-point engine
checks stability on the boundary, does not depend on call order, and reports a finite
standard error at the trivial fixed point."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, optimize

from symtheory.core.validate import ParameterError
from symtheory.glm import MultiIndexModel, StateEvolution
from symtheory.glm.gamp.tokens import gamp_tokens
from symtheory.smi import outer_product


@pytest.fixture(scope="module")
def phase_retrieval():
    """``y = z z^T`` with one token: ``y = z^2``."""
    return outer_product(1)


# ------------------------------------------------------------------ damping
def test_every_engine_refuses_damping_outside_0_1(phase_retrieval):
    from symtheory.glm.gamp.loop import DenseOperator, gamp

    X, y = np.ones((4, 3, 1)), np.ones((4, 1))
    for bad in (1.0, -0.2):
        with pytest.raises(ParameterError, match=r"damping must be in \[0, 1\)"):
            gamp_tokens(X, y, phase_retrieval.channel(), damping=bad)
        with pytest.raises(ParameterError, match=r"damping must be in \[0, 1\)"):
            # refused before the channel is used
            gamp(DenseOperator(np.ones((4, 3))), np.ones(4), None, None, damping=bad)
        with pytest.raises(ParameterError, match=r"damping must be in \[0, 1\)"):
            StateEvolution(phase_retrieval, 0.5, samples=10).solve(damping=bad)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_damped_token_gamp_reaches_the_undamped_fixed_point(phase_retrieval, seed):
    """Phase retrieval y = z^2, d = 500, alpha = 1.5 (above the algorithmic threshold
    ~1.13, so undamped GAMP recovers the signal).  Damping 0.5 must reach the same
    |overlap| within 0.02 -- and the same estimate up to the global sign, within 1% in
    norm (both runs stop at a mean squared change of 1e-8, i.e. ~1e-4 from the fixed
    point at the damped contraction rate).  Measured: overlaps 0.99999+ for damping 0, 0.3
    and 0.5 on seeds 0-2; the former damping (estimate and variance only) stayed below
    0.06 after 300 iterations."""
    from symtheory.smi.data import generate

    data = generate(phase_retrieval, 500, 1.5, seed=seed)
    runs = {}
    for theta in (0.0, 0.5):
        res = gamp_tokens(data.X, data.y, phase_retrieval.channel(), damping=theta,
                          max_iter=300, tol=1e-8, seed=seed + 10)
        assert res.converged and not res.diverged, res.message
        W = res.W[0]
        runs[theta] = (W, abs(W @ data.W[0]) / np.linalg.norm(W) / np.linalg.norm(data.W[0]))
    (W0, ov0), (W5, ov5) = runs[0.0], runs[0.5]
    assert ov0 > 0.99 and abs(ov5 - ov0) <= 0.02
    assert min(np.linalg.norm(W5 - W0), np.linalg.norm(W5 + W0)) <= 0.01 * np.linalg.norm(W0)


def test_normalized_overlap_is_the_share_of_the_teacher_recovered(phase_retrieval):
    """``normalized_overlap`` ``m = W . W* / |W*|^2`` is what the SE's ``Q / rho`` predicts
    at finite d; ``M = W . W* / d`` carries the teacher's own norm ``|W*|^2 / d``
    (1 +- sqrt(2/d)).  Phase retrieval at alpha = 1.5 recovers the teacher: ``|m| -> 1``
    while ``|M|`` ends on that norm (0.931 for this seed at d = 400).  Tolerance 1e-6: the
    run stops at a mean squared change of 1e-10 (measured: 8e-8 from 1)."""
    from symtheory.smi.data import generate

    data = generate(phase_retrieval, 400, 1.5, seed=5)
    norm = float(data.W[0] @ data.W[0]) / 400
    assert abs(norm - 1) > 0.02       # the premise: this teacher's norm is visibly not rho
    res = gamp_tokens(data.X, data.y, phase_retrieval.channel(), truth=data.W, max_iter=300,
                      tol=1e-10, seed=15)
    assert res.converged, res.message
    last = res.trace[-1]
    assert abs(abs(last["normalized_overlap"][0]) - 1) < 1e-6
    assert abs(abs(last["M"][0, 0]) - norm) < 1e-6
    # half the teacher plus noise orthogonal to it: m = 0.5 exactly, where the cosine
    # and M are not (0.44, 0.47 here): the trace's row 0 is W0
    rng = np.random.default_rng(0)
    w = data.W[0]
    noise = rng.standard_normal(w.size)
    noise -= (noise @ w) / (w @ w) * w
    start = gamp_tokens(data.X, data.y, phase_retrieval.channel(), truth=data.W, max_iter=1,
                        W0=(0.5 * w + noise)[None, :])
    row = start.trace[0]
    assert row["normalized_overlap"][0] == pytest.approx(0.5, abs=1e-12)
    assert abs(row["cosine"][0] - 0.5) > 0.05 and abs(row["M"][0, 0] - 0.5) > 0.02


def test_token_gamp_refuses_a_teacher_with_a_zero_row(phase_retrieval):
    """The trace divides by each teacher row's norm: a zero (or non-finite) row is refused
    by name before any iteration, not turned into NaN overlaps."""
    X, y = np.ones((4, 3, 1)), np.ones((4, 1))
    for bad in (np.zeros((1, 3)), np.array([[np.nan, 1.0, 1.0]])):
        with pytest.raises(ValueError, match="truth must be finite with every row nonzero"):
            gamp_tokens(X, y, phase_retrieval.channel(), truth=bad, max_iter=1)


def test_damped_bsr_gamp_rie_lands_on_the_bayes_optimal_error():
    """BSR GAMP-RIE (glm.gamp.loop via bsr.gamp) at d = 60, beta = 1, rho = 0.5, alpha = 0.4,
    noiseless, damping 0.3: final error within 0.04 of the Bayes-optimal one (the
    finite-size tolerance of tests/bsr/test_bsr_finite.py: fluctuations O(1/sqrt n) ~ 0.02)
    and within 1e-3 of the undamped run on the same data (same fixed point)."""
    from symtheory.bsr import data as D
    from symtheory.bsr.gamp import gamp_rie
    from symtheory.bsr.theory import bo_point

    bo = bo_point(0.4, 1.0, 0.5, 0.0).mmse
    data = D.generate(60, 1.0, 0.5, 0.4, 0.0, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        damped = gamp_rie(data, damping=0.3, max_iter=200)
        undamped = gamp_rie(data, damping=0.0, max_iter=200)
    assert damped.converged and not damped.diverged, damped.message
    assert abs(damped.final_mse - bo) < 0.04
    assert abs(damped.final_mse - undamped.final_mse) < 1e-3


# ------------------------------------------------------------------ SE at the boundary
def _phase_retrieval_map(q, alpha, nodes=200):
    """Independent 1-D SE of phase retrieval with N(0, 1) prior:
    ``q_new = qhat/(1 + qhat)``, ``qhat = alpha E[g_out^2]``, ``g_out = (E[z|y, w, V] - w)/V``
    with the closed form ``E[z|y, w, V] = sqrt(y) tanh(sqrt(y) w / V)``, ``w = sqrt(q) xi``,
    ``z = w + sqrt(V) eta``, ``V = 1 - q``; ``E`` by a ``nodes^2`` Gauss-Hermite rule."""
    x, wts = np.polynomial.hermite_e.hermegauss(nodes)
    wts = wts / wts.sum()
    xi, eta = np.meshgrid(x, x, indexing="ij")
    V = 1.0 - q
    w = np.sqrt(q) * xi
    s = np.abs(w + np.sqrt(V) * eta)
    g = (s * np.tanh(s * w / V) - w) / V
    qhat = alpha * float(np.einsum("i,j,ij->", wts, wts, g * g))
    return qhat / (1.0 + qhat)


def _phase_retrieval_map_adaptive(q, alpha):
    """The same map with scipy's adaptive 2-D quadrature (cross-check of the rule)."""
    V = 1.0 - q

    def f(eta, xi):
        w = np.sqrt(q) * xi
        s = abs(w + np.sqrt(V) * eta)
        g = (s * np.tanh(s * w / V) - w) / V
        return g * g * np.exp(-(xi * xi + eta * eta) / 2) / (2 * np.pi)

    val, _ = integrate.dblquad(f, -12, 12, -12, 12, epsabs=1e-12, epsrel=1e-10)
    return alpha * val / (1 + alpha * val)


def test_phase_retrieval_se_from_an_informed_start_is_not_perfect_recovery(phase_retrieval):
    """y = z^2 at alpha = 0.95 < 1: Q = 1 is a fixed point of the SE but unstable (1 - q
    grows by 1/alpha per step near it), and the only stable one is q* ~ 0.3987 (computed
    here independently: 1-D SE by quadrature, Brent root, slope < 1).  From the informed
    start 0.99 the frozen-sample SE (2e4 samples) must converge, be stable, and agree with
    q* within 4 of its reported standard errors (the map is steep here: slope ~0.83, so
    the error of Q_hat is amplified ~6x).  Before, the Newton polish landed on Q = 1 and
    the stability check could not leave it (seed 0 with 2000 or 5000 samples)."""
    alpha = 0.95
    q_star = optimize.brentq(lambda q: _phase_retrieval_map(q, alpha) - q, 0.2, 0.6, xtol=1e-12)
    # the 200-node rule against adaptive quadrature (tolerance 1e-10 relative) at q*
    assert abs(_phase_retrieval_map(q_star, alpha)
               - _phase_retrieval_map_adaptive(q_star, alpha)) < 1e-8
    h = 1e-5
    slope = (_phase_retrieval_map(q_star + h, alpha) - _phase_retrieval_map(q_star - h, alpha)) / (2 * h)
    assert 0 < slope < 1 and abs(q_star - 0.3987) < 1e-3

    se = StateEvolution(phase_retrieval, alpha, samples=20000, seed=0)
    res = se.solve(0.99 * np.eye(1))
    assert res.converged and res.stable, res.message
    q, err = float(res.Q[0, 0]), float(res.Q_stderr[0, 0])
    assert 0 < err < 0.05
    assert abs(q - q_star) <= 4 * err


def test_se_does_not_depend_on_call_order(phase_retrieval):
    """One object, one seed: the map at Q_a is the same whether Q_b was evaluated before
    or not, and the informed / uninformed solves give the same answers in either order
    (to machine precision).  The configuration (2000 samples, seed 0) is the one whose
    informed start used to return the unstable Q = 1; now both starts find the same
    stable fixed point (within the iteration tolerance 1e-8 / (1 - slope))."""
    kw = dict(samples=2000, seed=0)
    Qa, Qb = np.array([[0.3]]), np.array([[0.9]])
    first = StateEvolution(phase_retrieval, 0.95, **kw)
    Fa_first = first.step(Qa)
    first.step(Qb)
    second = StateEvolution(phase_retrieval, 0.95, **kw)
    second.step(Qb)
    np.testing.assert_allclose(second.step(Qa), Fa_first, rtol=0, atol=1e-15)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = StateEvolution(phase_retrieval, 0.95, **kw)
        informed_1, uninformed_1 = one.solve(0.99 * np.eye(1)), one.solve(0.05 * np.eye(1))
        two = StateEvolution(phase_retrieval, 0.95, **kw)
        uninformed_2, informed_2 = two.solve(0.05 * np.eye(1)), two.solve(0.99 * np.eye(1))
    for a, b in ((informed_1, informed_2), (uninformed_1, uninformed_2)):
        np.testing.assert_allclose(a.Q, b.Q, rtol=0, atol=1e-14)
        np.testing.assert_allclose(a.Q_stderr, b.Q_stderr, rtol=0, atol=1e-14)
    assert informed_1.stable and uninformed_1.stable
    assert abs(informed_1.Q[0, 0] - uninformed_1.Q[0, 0]) < 1e-6
    assert informed_1.Q[0, 0] < 0.7


def test_fixed_point_stderr_is_finite_at_the_trivial_fixed_point():
    """y = z1 z2 + N(0, 0.1) (two index rows, flipping both leaves y unchanged but not one:
    structure 'full', the off-diagonal Q_12 is free).  Q = 0 is a fixed point for every
    sample set (E[z | y, omega = 0] = 0 by the joint flip), stable at alpha = 0.02.  There
    ``Q + h E_12`` is indefinite both ways, which made the standard error NaN; the
    Jacobians now difference along PSD directions.  The per-sample g_out vanishes at
    Q = 0 up to the rounding of the symmetric quadrature (~1e-16), so Q, the standard
    error of Q_hat and that of the fixed point vanish up to rounding (bound 1e-12)."""
    from symtheory.core.quadrature import TensorRule

    z0, z1 = sp.symbols("z0_0 z1_0", real=True)
    model = MultiIndexModel("product_two_rows", sp.Matrix([[z0], [z1]]), sp.Matrix([[z0 * z1]]))
    # the engine is under test, not the channel: Gauss-Hermite 12 is cheap but misses
    # dg_out by ~0.4 on this link, which the declaration check rightly refuses
    # (tests/glm/test_multi_index.py), so the check is skipped explicitly here
    se = StateEvolution(model, 0.02, samples=500, seed=0, noise_variance=0.1,
                        rule=TensorRule("gauss-hermite", 12), check_channel=False)
    assert se.structure == "full" and (0, 1) in se._free_entries()
    res = se.solve(np.zeros((2, 2)))
    assert res.converged and res.stable, res.message
    assert np.max(np.abs(res.Q)) < 1e-12 and np.max(res.Qhat_stderr) < 1e-12
    J = se.map_jacobian(np.zeros((2, 2)))
    assert J is not None and np.all(np.isfinite(J))
    assert np.all(np.isfinite(res.Q_stderr)) and np.max(res.Q_stderr) < 1e-12


def test_tensor_rule_refined_and_coarsened():
    """refined(factor): ~factor x the nodes per axis (the nested 2n - 1 for the uniform rule
    at factor 2); a non-finite or <= 1 factor is refused naming it.  The finer rule's
    change estimates the error of the coarser one: for E[t^(2k)] with Gauss-Hermite
    (exact for degree < 2n) the 5-node rule is wrong at degree 10 and the 8-node rule of
    refined(1.5) exact, so the change equals the actual error."""
    from symtheory.core.quadrature import TensorRule
    from symtheory.core.validate import ParameterError

    gh = TensorRule("gauss-hermite", 30)
    assert gh.refined(1.5) == TensorRule("gauss-hermite", 45)
    assert gh.refined() == TensorRule("gauss-hermite", 60)
    assert TensorRule("uniform", 41, 7.0).refined() == TensorRule("uniform", 81, 7.0)
    assert TensorRule("uniform", 41, 7.0).refined(1.5).n == 62
    for bad in (1.0, 0.5, float("inf"), float("nan")):
        with pytest.raises(ParameterError, match="factor must be finite and > 1"):
            gh.refined(bad)
    five = TensorRule("gauss-hermite", 5)
    x5, w5 = five.one_dim()
    x8, w8 = five.refined(1.5).one_dim()
    exact = 945.0                                   # E t^10 = 9!! for t ~ N(0, 1)
    assert np.sum(w8 * x8 ** 10) == pytest.approx(exact, rel=1e-12)
    change = abs(np.sum(w8 * x8 ** 10) - np.sum(w5 * x5 ** 10))
    assert change == pytest.approx(abs(exact - np.sum(w5 * x5 ** 10)), rel=1e-10)
    assert change > 1.0
