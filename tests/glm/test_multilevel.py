"""Two-level Monte Carlo of the SE map (glm/se/multilevel.py): the telescoping identity,
the map it gives against the one-rule map, and the staged solve that sizes and uses it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symtheory.core.quadrature import TensorRule
from symtheory.glm import StateEvolution
from symtheory.glm.se.multilevel import MultilevelPlan, coarse_level, telescope
from symtheory.smi import deep_attention


@pytest.fixture(scope="module")
def attention():
    return deep_attention(2, 2, 1, 1.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 64), st.integers(1, 64), st.integers(0, 2 ** 31 - 1))
def test_telescope_mean_is_coarse_mean_plus_fine_correction(N, n, seed):
    """mean(telescope(c, f)) = mean(c) + mean(f - c[:n]) (Giles' two-level estimator),
    and with n = N it is f itself, sample by sample."""
    n = min(n, N)
    rng = np.random.default_rng(seed)
    c, f = rng.standard_normal((N, 2, 2)), rng.standard_normal((n, 2, 2))
    v = telescope(c, f)
    np.testing.assert_allclose(v.mean(0), c.mean(0) + (f - c[:n]).mean(0), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(telescope(c, rng.standard_normal((N, 2, 2)) + 0 * c)[:0], c[:0])
    full = rng.standard_normal((N, 2, 2))
    np.testing.assert_allclose(telescope(c, full), full, rtol=1e-12, atol=1e-12)


def test_coarse_level_only_where_it_can_gain():
    assert coarse_level(TensorRule("gauss-hermite", 30, 6.0)) == TensorRule("gauss-hermite", 4, 6.0)
    assert coarse_level(TensorRule("gauss-hermite", 10, 6.0)) is None
    assert coarse_level(None) is None


def test_two_level_map_is_the_fine_map_with_all_samples_fine_and_close_to_it_otherwise(attention):
    """Depth-2 attention at Q = diag(0, 0.4), 2048 samples, fine rule GH 30: the two-level
    map with every sample on the fine level is the one-rule map to rounding; with the fine
    level on 512 samples it agrees within 4 joint standard errors (the difference is the
    fine-minus-coarse correction's sampling error: independent of the coarse level's)."""
    Q = np.diag([0.0, 0.4])
    se = StateEvolution(attention, 0.5, samples=2048, seed=3)
    plain, plain_se, _ = se.qhat(Q)
    coarse = TensorRule("gauss-hermite", 4, 6.0)
    se.multilevel = MultilevelPlan(coarse, 2048, 2048, 0.0, 1.0)
    same, _, _ = se.qhat(Q)
    np.testing.assert_allclose(same, plain, rtol=1e-10, atol=1e-14)
    se.multilevel = MultilevelPlan(coarse, 512, 2048, 0.0, 1.0)
    two, two_se, _ = se.qhat(Q)
    joint = np.sqrt(plain_se ** 2 + two_se ** 2)[1, 1]
    assert abs(two[1, 1] - plain[1, 1]) <= 4 * joint
    assert two_se[1, 1] >= 0.5 * plain_se[1, 1]      # the correction's error is counted


@pytest.mark.slow
@pytest.mark.ci_slow
def test_staged_solve_uses_two_levels_and_reaches_the_one_rule_fixed_point(attention):
    """Depth-2 attention, alpha = 0.5, 4096 samples: after the warm-up stages the solve
    sizes the levels (GH 4 on all samples, the requested GH 30 on a prefix) and says so;
    its fixed point agrees with the one-rule solve (multilevel=False) within 3
    joint standard errors, and the channel error is measured on the fine level."""
    two = StateEvolution(attention, 0.5, samples=4096, seed=2).solve()
    assert two.converged and "two-level Monte Carlo" in two.message, two.message
    one = StateEvolution(attention, 0.5, samples=4096, seed=2, multilevel=False).solve()
    assert one.converged and "two-level" not in one.message
    joint = float(np.hypot(two.Q_stderr[1, 1], one.Q_stderr[1, 1]))
    assert abs(two.Q[1, 1] - one.Q[1, 1]) <= 3 * joint
    assert two.channel_error is not None and two.channel_qhat_error is not None


def test_multilevel_option_is_checked(attention):
    with pytest.raises(Exception, match="multilevel must be True or False"):
        StateEvolution(attention, 0.5, samples=64, multilevel="yes")
