"""The level-set channel's fast path (Numba fixed-level tanh-sinh, error = change to one
level lower) against its independent path, the adaptive numpy rule split at the folds
and modes (:func:`~symtheory.glm.integrate.level_set.level_set_moments`), and its
fallback to that rule where the fixed rule's estimate misses the tolerance."""
import logging

import numpy as np
import pytest
import sympy as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from symtheory.glm.factors import level_set as ls_factor
from symtheory.glm.factors.level_set import LevelSetChannel
from symtheory.glm.factors.multi_index import MultiIndexModel
from symtheory.glm.integrate.level_set import level_set_moments

z1, z2 = sp.symbols("z1 z2", real=True)
LINKS = {"sqdiff": z1 ** 2 - z2 ** 2, "product": z1 * z2}


@pytest.fixture(scope="module")
def channels():
    return {k: LevelSetChannel(MultiIndexModel(f"fast_{k}", sp.Matrix([[z1], [z2]]),
                                               sp.Matrix([[g]]))).configured()
            for k, g in LINKS.items()}


def _scaled_gap(m, ref, Sigma):
    """Largest difference in the channels' error units: ``log Z``, means over prior
    standard deviations, covariances over their products."""
    sd = np.sqrt(np.diag(Sigma))
    return max(float(np.max(np.abs(m.log_partition - ref[0]))),
               float(np.max(np.abs(m.mean_shift.reshape(-1, 2) - ref[1]) / sd)),
               float(np.max(np.abs(m.cov_shift - ref[2]) / np.outer(sd, sd))))


@pytest.mark.slow
@pytest.mark.ci_slow  # ~10 s: the default tier stays under 5 min
@settings(max_examples=30, deadline=None)
@given(link=st.sampled_from(sorted(LINKS)), z=st.tuples(*[st.floats(-3, 3)] * 2),
       om=st.tuples(*[st.floats(-2, 2)] * 2), v=st.tuples(*[st.floats(0.2, 1.5)] * 2),
       rho=st.floats(-0.6, 0.6))
def test_fast_path_matches_the_adaptive_rule(channels, link, z, om, v, rho):
    """Both rules state an error <= 1e-10 in the same units (the fast one by its change to
    one level lower, the adaptive one by its last refinement at rtol 1e-11); their
    difference is then below the sum, 2e-10 (measured ~1e-13)."""
    ch = channels[link]
    y = float(sp.lambdify((z1, z2), LINKS[link])(*z))
    assume(abs(y) > 1e-6)          # pinched level sets: the adaptive rule misses 1e-10
    Sigma = np.array([[v[0], rho * np.sqrt(v[0] * v[1])], [rho * np.sqrt(v[0] * v[1]), v[1]]])
    omega = np.array(om).reshape(1, 2, 1)
    m = ch.moments(np.array([[y]]), omega, Sigma)
    assert ch.last_accuracy.converged
    ref = level_set_moments(ch.structure, np.array([y]), omega.reshape(1, 2), Sigma, rtol=1e-11)
    assume(ref[3][0] <= 1e-11)
    assert _scaled_gap(m, ref, Sigma) <= 2e-10


@pytest.mark.slow
@pytest.mark.ci_slow  # 10 s
def test_the_fast_path_carries_gamp_like_samples(channels):
    """At GAMP's scale (omega ~ N(0, 0.22 I), V = 0.78 I: the SE fixed point of alpha = 1)
    the fixed rule meets rtol 1e-10 at most samples: fewer than 10% go to the adaptive rule
    (measured 0 of 400 for z1^2 - z2^2, ~5% for z1 z2), and the method says how many."""
    rng = np.random.default_rng(5)
    n = 400
    omega = np.sqrt(0.22) * rng.standard_normal((n, 2))
    zs = omega + np.sqrt(0.78) * rng.standard_normal((n, 2))
    for name, ch in channels.items():
        y = sp.lambdify((z1, z2), LINKS[name])(zs[:, 0], zs[:, 1])
        ch.moments(y[:, None], omega[:, :, None], 0.78 * np.eye(2))
        assert ch.last_accuracy.converged
        assert ch.last_fallback < 0.1 * n
        assert f"adaptive at {ch.last_fallback} of {n} samples" in ch.last_accuracy.method


def test_a_large_fixed_rule_estimate_falls_back_to_the_adaptive_rule(channels, monkeypatch,
                                                                      caplog):
    """At level 3 (change to level 2: ~1e-3) every sample misses rtol 1e-10: all go to the
    adaptive rule, the result is that rule's (to rounding, 1e-13), and the fallback is
    counted, logged and named in the accuracy record."""
    ch = channels["product"]
    monkeypatch.setattr(ls_factor, "FAST_LEVEL", 3)
    rng = np.random.default_rng(2)
    omega = 0.5 * rng.standard_normal((20, 2))
    y = 0.3 + rng.standard_normal(20)
    Sigma = np.array([[0.7, 0.1], [0.1, 0.5]])
    with caplog.at_level(logging.INFO, logger=ls_factor.__name__):
        m = ch.moments(y[:, None], omega[:, :, None], Sigma)
    assert ch.last_fallback == 20
    assert "adaptive at 20 of 20 samples" in ch.last_accuracy.method
    assert any("integrated adaptively" in r.getMessage() for r in caplog.records)
    ref = level_set_moments(ch.structure, y, omega, Sigma, rtol=1e-10)
    assert _scaled_gap(m, ref, Sigma) <= 1e-13
