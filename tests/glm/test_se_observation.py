"""The Rao-Blackwellized SE estimator (symtheory/glm/se/observation.py): the observation
integrated given omega, checked against independent quadrature and against the sampled
estimator; the symmetry average; the stop on a target error."""
import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, stats

from symtheory.core.validate import ParameterError
from symtheory.glm import MultiIndexModel
from symtheory.glm.se.sampling import tail_multiple
from symtheory.glm.se.state_evolution import StateEvolution
from symtheory.smi.registry import sign_product


def _abs_model():
    z = sp.Symbol("z", real=True)
    return MultiIndexModel("abs_rb", sp.Matrix([[z]]), sp.Matrix([[sp.Abs(z)]]),
                           description="|z|")


@pytest.mark.slow
@pytest.mark.ci_slow  # 30-75 s: the default tier stays under 5 min
def test_scalar_noisy_matches_scipy_quad():
    """E[g_out^2 | omega] of y = |z| + sqrt(0.2) xi by the observation rule against nested
    scipy quad of int dy Z_out(y) g_out(y)^2 (inner split at z = 0), to 1e-6 relative."""
    delta, q = 0.2, 0.3
    V = 1 - q
    se = StateEvolution(_abs_model(), 1.0, samples=3, noise_variance=delta,
                        sampling="monte-carlo", observation="integrate")
    omegas = np.array([-0.9, 0.1, 1.4])
    se.xi = (omegas / math.sqrt(q)).reshape(3, 1, 1)
    sq, tw, _, mass = se._integrated_products(np.array([[q]]))
    assert np.max(np.abs(mass - 1)) < 1e-9

    def moments(y, om):
        def f(z, k):
            return z ** k * stats.norm.pdf(z, om, math.sqrt(V)) * stats.norm.pdf(
                y, abs(z), math.sqrt(delta))
        return [integrate.quad(f, -12, 12, args=(k,), points=[0.0], epsabs=1e-14,
                               epsrel=1e-12, limit=200)[0] for k in range(2)]

    for i, om in enumerate(omegas):
        def outer(y):
            Z, m1 = moments(y, om)
            return 0.0 if Z == 0 else Z * ((m1 / Z - om) / V) ** 2
        ref = integrate.quad(outer, -4, 12, epsabs=1e-12, epsrel=1e-10, limit=200)[0]
        assert sq[i, 0, 0] == pytest.approx(ref, rel=1e-6)
        # the Nishimori twin has the same conditional mean (Eq. (12) of arXiv:2502.00901)
        assert tw[i, 0, 0] == pytest.approx(ref, rel=1e-5)


def test_discrete_integrated_agrees_with_sampled_and_is_exact_sum():
    """sign(z1 z2): the exact sum over y = +-1 is unbiased -- Q_hat within the joint
    error bars (4 sigma, t-scaled) of the sampled estimator's -- and its error is smaller."""
    m = sign_product()
    Q = np.diag([0.3, 0.2])
    a = StateEvolution(m, 1.0, samples=4096, observation="integrate", sampling="rqmc")
    b = StateEvolution(m, 1.0, samples=4096, observation="sample", seed=1)
    assert a.observation_rule.kind == "discrete" and b.observation_rule is None
    qa, sa, _ = a.qhat(Q)
    qb, sb, _ = b.qhat(Q)
    joint = np.sqrt(sa ** 2 + sb ** 2)
    assert np.all(np.abs(qa - qb) <= tail_multiple(4.0, 16) * joint)
    assert np.all(np.diag(sa) < np.diag(sb))
    assert a.observation_qhat_error == 0.0 and a.observation_mass_error < 1e-9


def test_symmetry_average_keeps_symmetric_point_symmetric():
    """sign(z1 z2) is symmetric under z1 <-> z2: with the images averaged, Q_hat at a
    symmetric Q is symmetric to rounding; sampled, it is not (only within errors)."""
    m = sign_product()
    Q = np.array([[0.25, 0.05], [0.05, 0.25]])
    a = StateEvolution(m, 1.0, samples=1024, observation="integrate", sampling="rqmc")
    assert len(a.symmetries) == 1
    qa = a.qhat(Q)[0]
    assert abs(qa[0, 0] - qa[1, 1]) < 1e-12 * qa[0, 0]
    # a Gauss-Hermite tensor rule is invariant under the swap itself: no images needed
    c = StateEvolution(m, 1.0, observation="integrate", sampling="gauss-hermite", omega_nodes=12)
    assert c.symmetries == []
    qc = c.qhat(Q)[0]
    assert abs(qc[0, 0] - qc[1, 1]) < 1e-12 * qc[0, 0]
    b = StateEvolution(m, 1.0, samples=1024, observation="sample")
    qb = b.qhat(Q)[0]
    assert abs(qb[0, 0] - qb[1, 1]) > 1e-8


@pytest.mark.slow
@pytest.mark.ci_slow  # 30-75 s: the default tier stays under 5 min
def test_target_error_stops_on_the_error_bar():
    m = sign_product()
    se = StateEvolution(m, 3.5, samples=256, observation="integrate")
    res = se.solve_to_target(2e-3)
    free = se.mask > 0
    assert float(np.max(res.Q_stderr[free])) <= 2e-3
    assert res.target_rounds[-1][0] == se.samples == res.samples
    assert "target error 0.002 reached" in res.message
    assert "y integrated given omega" in res.observation
    with pytest.raises(ParameterError, match="target_error"):
        se.solve_to_target(0.0)


def test_integrate_refused_with_reason_and_auto_falls_back():
    z, e = sp.symbols("z e", real=True)
    from symtheory.glm import DeterministicReduction

    m = MultiIndexModel("pr_rb", sp.Matrix([[z]]), sp.Matrix([[z ** 2]]),
                        reduction=DeterministicReduction(
                            solved_rows=(0,), mixing=sp.eye(1), E=sp.Matrix([[e]]),
                            head=sp.Matrix([[e ** 2]]), observed=((0, 0),)))
    with pytest.raises(ParameterError, match="reduced noiseless link"):
        StateEvolution(m, 1.0, samples=64, observation="integrate")
    se = StateEvolution(m, 1.0, samples=64)
    assert se.observation_rule is None and se.observation_note.startswith("y sampled")
    with pytest.raises(ParameterError, match="observation must be"):
        StateEvolution(m, 1.0, samples=64, observation="yes")


def test_map_channel_relaxes_a_strict_adaptive_rule_only():
    """The map evaluates the channel at NODE_RTOL: a default rule (rtol 1e-10) is relaxed
    (the condition was once inverted, so no default rule ever was), a looser one is kept,
    and the sampled map moves by no more than that tolerance allows."""
    from symtheory.core.quadrature import AdaptiveRule
    from symtheory.glm.se.observation import NODE_RTOL

    se = StateEvolution(_abs_model(), 1.0, samples=64, noise_variance=0.2,
                        observation="sample", sampling="rqmc")
    assert se.channel.rule.rtol < NODE_RTOL
    assert se._observation_channel().rule.rtol == NODE_RTOL
    Q = np.array([[0.4]])
    se.qhat(Q)
    assert se.channel_error <= NODE_RTOL
    y, omega, V, _ = se.sample_channel(Q)
    g_relaxed = se._observation_channel().moments(y, omega, V).output_functions()[0]
    g_strict = se.channel.moments(y, omega, V).output_functions()[0]
    # the rule's rtol bounds the change of the posterior mean in prior standard
    # deviations; g = (E[z|y] - omega) / V: 10 x rtol / sqrt(V) leaves a margin for the
    # estimate being a change between levels, not a bound
    assert np.max(np.abs(g_relaxed - g_strict)) < 10 * NODE_RTOL / math.sqrt(V[0, 0])
    loose = StateEvolution(_abs_model(), 1.0, samples=64, noise_variance=0.2,
                           observation="sample", sampling="rqmc",
                           rule=AdaptiveRule(rtol=1e-5))
    assert loose._observation_channel() is loose.channel
