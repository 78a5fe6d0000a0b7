"""The SE's 'cross' estimator for a channel integrated by the Laplace-RQMC rule under
output noise (glm/se.py, glm/laplace_qmc.independent_half_means, NOISE_SE_RULE): the
product of posterior means from disjoint halves of the rule's scramblings carries no
variance bias, where one run's g g^T does."""
import dataclasses

import numpy as np
import pytest

from symtheory.core.validate import ParameterError
from symtheory.glm.integrate.laplace_qmc import (LaplaceQMCRule,
    independent_half_means,
    pooled_mean)
from symtheory.glm.factors.gaussian_noise import NOISE_SE_RULE
from symtheory.glm.se.sampling import tail_multiple
from symtheory.glm.se.state_evolution import StateEvolution
from symtheory.smi import deep_attention, outer_product


@pytest.fixture(scope="module")
def attention():
    return deep_attention(2, 2, 1, 1.0)


def _se(model, samples, **kw):
    return StateEvolution(model, 1.0, samples=samples, seed=0, noise_variance=0.1,
                          check_channel=False, **kw)


def test_default_is_cross_with_one_point_set_per_scrambling(attention):
    se = _se(attention, 64)
    assert se.estimator == "cross"
    assert se.channel.rule == dataclasses.replace(NOISE_SE_RULE, point_sets=se.scrambles)
    assert _se(attention, 64, sampling="monte-carlo").channel.rule.point_sets == 16
    # a rule given explicitly is kept, with one point set per SE scrambling (crossing a
    # single set's errors would not average out); with 'combined' it is kept as given
    rule = LaplaceQMCRule(tol=0.1, points=32, max_points=32, scrambles=4, scan=32)
    assert _se(attention, 64, rule=rule).channel.rule == dataclasses.replace(rule,
                                                                             point_sets=16)
    assert _se(attention, 64, rule=rule, estimator="combined").channel.rule == rule


def test_half_means_pool_to_the_channel_mean(attention):
    """The channel's mean pools all scramblings, so per sample it is a weighted average of
    the two halves' means: g = g_B + w (g_A - g_B) with one w in [0, 1] for every entry."""
    se = _se(attention, 64)
    Q = np.diag([0.3, 0.6])
    g, _ = se.gout_at(Q)
    gA, gB = se.gout_halves(Q)
    a, b = (gA - gB).reshape(64, -1), (g - gB).reshape(64, -1)
    w = np.einsum("si,si->s", a, b) / np.einsum("si,si->s", a, a)
    assert np.all((w > -1e-12) & (w < 1 + 1e-12))
    assert np.max(np.abs(b - w[:, None] * a)) < 1e-10 * np.max(np.abs(g))
    # and the sums behind them pool to the same: all scramblings = the weighted halves
    sums = se.channel.last_scrambling_sums
    mA, mB = independent_half_means(sums)
    assert np.allclose(pooled_mean(sums, [0, 2, 4, 6]), mA)
    assert np.allclose(pooled_mean(sums, np.arange(8)).reshape(g.shape),
                       se.posterior_moments(Q).mean)


def test_cross_has_no_variance_bias_where_qhat_vanishes(attention):
    """At Q11 = 0 the posterior of layer 1 is even (smi.md 2.2), E[z_1 | y] = 0 and
    Q_hat_11 = 0 exactly: an independent reference.  The cross estimator lands on it
    within its 3-sigma tail; one run's g g^T at the same points is biased up by the
    rule's variance, beyond that tail (measured +1.1e-4 against stderr 1.4e-5 at 256
    points)."""
    Q = np.diag([0.0, 0.558])
    cross = _se(attention, 1024)
    qh, er, _ = cross.qhat(Q)
    k = tail_multiple(3.0, cross.scrambles)
    assert abs(qh[0, 0]) < k * er[0, 0]
    square = _se(attention, 1024, rule=cross.channel.rule, estimator="square")
    qs, es, _ = square.qhat(Q)
    assert qs[0, 0] > k * es[0, 0]


@pytest.mark.slow
@pytest.mark.ci_slow
def test_cross_against_a_fine_rule_and_the_combined_estimator(attention):
    """At Q = 0.05 I (an uninformed start): the default (cross, 128 points) against the
    combined estimator at 1024 points, a different estimator and rule on the same
    samples; within the 3-sigma tail of the larger standard error times sqrt(2) (the
    two are positively correlated, so this over-states the spread of the difference)."""
    Q = 0.05 * np.eye(2)
    qc, ec, _ = _se(attention, 1024).qhat(Q)
    fine = dataclasses.replace(NOISE_SE_RULE, points=1024, max_points=1024, point_sets=16)
    qf, ef, _ = _se(attention, 1024, rule=fine, estimator="combined").qhat(Q)
    k = tail_multiple(3.0, 16) * np.sqrt(2)
    for a in range(2):
        assert abs(qc[a, a] - qf[a, a]) < k * max(ec[a, a], ef[a, a]), (a, qc, qf, ec, ef)


def test_cross_is_refused_without_a_randomized_noisy_rule():
    with pytest.raises(ParameterError, match="estimator='cross' needs"):
        StateEvolution(outer_product(1), 1.0, samples=64, estimator="cross")
    with pytest.raises(ParameterError, match="point_sets"):
        LaplaceQMCRule(point_sets=0)


def test_monte_carlo_design_batches_the_standard_error_by_point_set(attention):
    """Samples sharing a point set share its errors: with plain Monte-Carlo samples the
    stated error comes from the 16 point-set means, not from the per-sample spread (which
    the review measured 1.3-2x too small in variance)."""
    se = _se(attention, 64, sampling="monte-carlo")
    assert se.error_groups == 16 and se.tail_multiple(2.0) == tail_multiple(2.0, 16)
    v = np.arange(64.0) ** 2
    groups = np.array([v[k::16].mean() for k in range(16)])
    assert se.sample_mean_stderr(v)[1] == pytest.approx(groups.std(ddof=1) / 4)
    # without point sets (a deterministic design) the per-sample spread stays
    plain = StateEvolution(outer_product(1), 1.0, samples=64, sampling="monte-carlo")
    assert plain.error_groups is None


def test_point_sets_must_align_with_the_scramblings(attention):
    rule = dataclasses.replace(NOISE_SE_RULE, point_sets=4)
    with pytest.raises(ParameterError, match="multiple of scrambles"):
        _se(attention, 64, rule=rule)
    assert _se(attention, 64, rule=dataclasses.replace(rule, point_sets=32)).error_groups == 16


def test_warm_up_stage_swaps_the_noisy_rule_and_restores_it(attention):
    se = _se(attention, 64)
    channel = se.channel
    coarse = channel.rule.coarsened()
    assert coarse.points == 32 and coarse.point_sets == channel.rule.point_sets
    with se._stage(32, coarse):
        assert se.channel.rule == coarse and se.samples == 32
    assert se.channel is channel and se.samples == 64


@pytest.mark.slow
@pytest.mark.ci_slow
def test_randomized_warm_up_ladder_and_its_fixed_point(attention, monkeypatch):
    """With a randomized rule the warm-up is the first m samples, then samples/4 -- not all
    of them -- on the coarsened rule (its own random errors put its all-sample fixed point
    no closer to the full map's than a subset's), and the full map starts with Newton.
    The full map is evaluated only on all samples with the full rule, and lands on the
    fixed point a run without warm-up finds: two points of one map with residuals r1, r2
    are within (r1 + r2) / (1 - lambda) of each other (lambda: the Jacobian's spectral
    radius there), here doubled for the Jacobian's difference error."""
    import symtheory.glm.se.staged_solve as se_module

    monkeypatch.setattr(se_module, "WARMUP_MIN_SAMPLES", 16)
    seen = []
    se = _se(attention, 256)
    inner = se._posterior_moments

    def spy(Q, include_jacobian):
        seen.append((se.samples, se.channel.rule.points))
        return inner(Q, include_jacobian)

    se._posterior_moments = spy
    staged = se.solve()
    assert set(seen) == {(16, 32), (64, 32), (256, 128)}
    assert "16 samples" in staged.message and "64 samples" in staged.message
    direct = _se(attention, 256).solve(warmup=None)
    assert staged.converged and direct.converged
    J = se.map_jacobian(staged.Q)
    lam = float(np.max(np.abs(np.linalg.eigvals(J))))
    assert lam < 0.95
    bound = 2 * (staged.residual + direct.residual) / (1 - lam)
    assert np.max(np.abs(staged.Q - direct.Q)) <= bound


@pytest.mark.slow
@pytest.mark.ci_slow
def test_randomized_stages_hand_over_the_jacobian_where_it_was_computed(attention,
                                                                        monkeypatch):
    """Under a randomized rule each stage after the first gets the last Jacobian computed
    before it (the engine's own point and probe radius, so a reused one keeps its point
    instead of drifting with the stages); a deterministic rule's as a chord (radius inf).
    What the engine does with it is tests/core/test_solvers.py's."""
    import symtheory.core.solvers as solvers
    import symtheory.glm.se.staged_solve as se_module

    monkeypatch.setattr(se_module, "WARMUP_MIN_SAMPLES", 16)
    calls = []
    engine = solvers.fixed_point

    def spy(*a, **k):
        r = engine(*a, **k)
        calls.append((k.get("jacobian_start"), r))
        return r

    monkeypatch.setattr(solvers, "fixed_point", spy)
    se = _se(attention, 256)
    se.solve()
    assert len(calls) == 3 and calls[0][0] is None
    for (start, _), (_, before) in zip(calls[1:], calls[:-1]):
        if before.jacobian_point is None:
            continue
        point, J, radius = start
        assert np.array_equal(point, before.jacobian_point) and J is before.jacobian
        assert 0 < radius == before.jacobian_radius <= se.difference_step
    assert any(start is not None for start, _ in calls[1:])
    calls.clear()
    StateEvolution(deep_attention(2, 2, 1, 1.0), 0.5, samples=2048, seed=0).solve()
    # a deterministic rule hands its Jacobian on as a chord (radius inf): the engine
    # drops it after one step that does not halve the residual (test_solvers.py)
    assert len(calls) >= 2 and calls[0][0] is None
    assert all(start is not None and np.isinf(start[2]) for start, _ in calls[1:])


@pytest.mark.slow
@pytest.mark.ci_slow
def test_free_entropy_at_the_fixed_point_reuses_its_channel_pass(attention):
    """Psi_out at the Q just solved is the last channel pass (a full pass over the samples
    each time otherwise); at another Q the channel runs again."""
    se = _se(attention, 64)
    r = se.solve()
    calls = []
    moments = se.channel.moments

    def counted(*a, **k):
        calls.append(1)
        return moments(*a, **k)

    se.channel.moments = counted
    phi, phi_se = se.free_entropy(r.Q)
    assert np.isfinite(phi) and np.isfinite(phi_se) and not calls
    se.free_entropy(0.5 * r.Q)
    assert len(calls) == 1


def test_new_helpers_refuse_bad_input_by_name():
    sums = np.ones((3, 8, 5))
    for bad, match in (((sums, [8]), "scramblings"), ((sums, [0, 0]), "scramblings"),
                       ((sums, []), "scramblings"), ((np.ones((3, 8)), [0]), "sums")):
        with pytest.raises(ParameterError, match=match):
            pooled_mean(*bad)
    with pytest.raises(ParameterError, match="sums"):
        independent_half_means(np.ones((3, 1, 5)))
    for sigmas in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ParameterError, match="sigmas"):
            tail_multiple(sigmas, 16)
    from symtheory.glm.se.sampling import design_record

    assert design_record("rqmc") == {"sampling": "rqmc", "scrambles": 16}
    with pytest.raises(ParameterError, match="sampling"):
        design_record("sobol")
    rule = dataclasses.replace(NOISE_SE_RULE, point_sets=4)
    for k in (-1, 4, 1.5):
        with pytest.raises(ParameterError, match="point_set"):
            rule.normal_points(2, 4, k)
    # the points of set 0 are the rule's seed itself (results of one set reproduce)
    assert np.array_equal(rule.normal_points(2, 4, 0),
                          dataclasses.replace(rule, point_sets=1).normal_points(2, 4))
