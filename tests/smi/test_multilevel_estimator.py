"""The SE's two-level estimator for a deep link (glm/se/randomized_multilevel.py): a cheap
Laplace-RQMC rule on every draw corrected by a fine rule on a prefix of the draws (Giles'
share), and the grand staircase's slope corrected the same way."""
import dataclasses

import numpy as np
import pytest

from symtheory.core.quadrature import TensorRule
from symtheory.core.validate import ParameterError
from symtheory.glm.integrate.laplace_qmc import LaplaceQMCRule
from symtheory.glm.se.randomized_multilevel import (MAX_FRACTION, MIN_FRACTION, MultilevelEstimator,
                                         giles_fraction, multilevel_mean_stderr)
from symtheory.glm.se.state_evolution import StateEvolution
from symtheory.glm.thresholds.grand_staircase import subspace_instability
from symtheory.smi import deep_attention

COARSE = LaplaceQMCRule(tol=1e3, points=64, max_points=64, adapt=2)
FINE = LaplaceQMCRule(tol=5e-2, points=128, max_points=256)
Q = np.diag([0.4, 0.3, 0.99])


@pytest.fixture(scope="module")
def depth3():
    return deep_attention(3, 2, 1, 1.0)


def test_giles_fraction_formula_and_rounding():
    # relative variances 0.01 and 0.01 (mean 0.01), costs 1 and 100: sqrt(1e-4) = 0.01,
    # rounded to 2^-7 (log2 100 = 6.64)
    frac, raw = giles_fraction([1.0, 4.0, 0.0], [0.01, 0.04, 5.0], 1.0, 100.0)
    assert raw == pytest.approx(0.01, rel=1e-12) and frac == 2.0 ** -7
    assert giles_fraction([1.0], [1e-12], 1.0, 1e3)[0] == MIN_FRACTION
    assert giles_fraction([1.0], [1.0], 1.0, 1.0)[0] == MAX_FRACTION
    assert giles_fraction([0.0], [1.0], 1.0, 1.0)[0] == MAX_FRACTION   # no free variance


def test_mean_and_stderr_are_those_of_the_groups():
    rng = np.random.default_rng(1)
    sq, diff, B = rng.normal(size=(32, 2, 2)), rng.normal(size=(8, 2, 2)), 4
    mean, se = multilevel_mean_stderr(sq, diff, B)
    groups = [sq[b::B].mean(0) + diff[b::B].mean(0) for b in range(B)]
    assert np.allclose(mean, np.mean(groups, axis=0), atol=1e-14)
    assert np.allclose(se, np.std(groups, axis=0, ddof=1) / 2, atol=1e-14)


def test_refusals(depth3):
    with pytest.raises(ParameterError, match="fraction"):
        MultilevelEstimator(fraction=0.9)
    with pytest.raises(ParameterError, match="pilot"):
        MultilevelEstimator(pilot=8)
    with pytest.raises(ParameterError, match="coarse"):
        MultilevelEstimator(coarse=TensorRule())
    with pytest.raises(ParameterError, match="rules as"):
        StateEvolution(depth3, 1.0, samples=32, estimator="multilevel", rule=COARSE)
    with pytest.raises(ParameterError, match="deep link"):     # under output noise
        StateEvolution(depth3, 1.0, samples=32, estimator="multilevel", noise_variance=0.1,
                       check_channel=False)
    with pytest.raises(ParameterError, match="MultilevelEstimator"):
        StateEvolution(depth3, 1.0, samples=32, estimator=3)


def test_qhat_is_coarse_mean_plus_fine_correction_on_the_prefix(depth3):
    """Independent path: two plain 'square' SEs on the same draws, one per rule (a point
    set per scrambling, as the estimator's rules)."""
    est = MultilevelEstimator(coarse=COARSE, fine=FINE, fraction=0.5)
    se = StateEvolution(depth3, 1.3, samples=48, seed=3, estimator=est)
    Qhat, stderr, _ = se.qhat(Q)
    sq = {}
    for name, rule in (("c", COARSE), ("f", FINE)):
        plain = StateEvolution(depth3, 1.3, samples=48, seed=3,
                               rule=dataclasses.replace(rule, point_sets=16))
        g = plain.gout_at(Q)[0]
        sq[name] = np.einsum("sam,sbm->sab", g, g)
    diff = sq["f"][:32] - sq["c"][:32]      # 2 draws per scrambling: 32 of 48
    mean, err = multilevel_mean_stderr(sq["c"], diff, 16)
    free = se.mask > 0
    assert np.allclose(Qhat[free], 1.3 * mean[free], rtol=1e-10, atol=0)
    assert np.allclose(stderr[free], 1.3 * err[free], rtol=1e-10, atol=0)
    # the correction is not zero: the two rules differ on these draws
    assert np.max(np.abs(diff)) > 1e-6 * np.max(np.abs(sq["c"]))


def test_share_is_measured_once_and_stated(depth3):
    se = StateEvolution(depth3, 1.3, samples=64, seed=0,
                        estimator=MultilevelEstimator(coarse=COARSE, fine=FINE, pilot=32))
    first = se.qhat(Q)[0]
    assert "share given" in StateEvolution(
        depth3, 1.3, samples=64, estimator=MultilevelEstimator(fraction=0.25)).observation_note
    frac = se.estimator_options.fraction
    assert frac in [2.0 ** -k for k in range(1, 9)]
    assert "multilevel estimator" in se.observation_note and "Giles' share" in \
        se.observation_note
    # a fixed function of Q from then on: the same value at the same Q after another Q
    se.qhat(Q * 0.9)
    assert se.estimator_options.fraction == frac
    assert np.array_equal(se.qhat(Q)[0], first)
    # the share's costs are posterior evaluations, a function of the draws: a second SE on
    # the same draws measures the same share and the same map, whatever the machine's load
    assert "posterior evaluations per draw" in se.observation_note
    again = StateEvolution(depth3, 1.3, samples=64, seed=0,
                           estimator=MultilevelEstimator(coarse=COARSE, fine=FINE, pilot=32))
    assert np.array_equal(again.qhat(Q)[0], first)
    assert again.estimator_options.note == se.estimator_options.note


def test_staircase_slope_with_an_identical_fine_rule_is_the_coarse_one(depth3):
    """With fine = coarse the correction vanishes draw by draw: lambda and its stderr
    equal the plain SE's (wiring of the slope's correction and of its error groups)."""
    Qs = np.diag([0.0, 0.0, 0.95])
    est = MultilevelEstimator(coarse=COARSE, fine=COARSE, fraction=0.25)
    ml = StateEvolution(depth3, 1.0, samples=64, seed=0, estimator=est, pinned_rows=(0, 1))
    plain = StateEvolution(depth3, 1.0, samples=64, seed=0, pinned_rows=(0, 1),
                           rule=dataclasses.replace(COARSE, point_sets=16))
    lam_ml, se_ml, G_ml = subspace_instability(ml, Qs, [0, 1])
    lam, se_, G = subspace_instability(plain, Qs, [0, 1])
    assert lam_ml == pytest.approx(lam, rel=1e-12)
    assert se_ml == pytest.approx(se_, rel=1e-10)
    assert np.allclose(np.abs(G_ml), np.abs(G), atol=1e-10)
