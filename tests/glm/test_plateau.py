"""The SE map on a staircase plateau, integrated deterministically
(symtheory/glm/se/plateau.py): against the sampled map, its identities, its refusals."""
import numpy as np
import pytest

from symtheory.core.validate import ParameterError
from symtheory.glm import StateEvolution
from symtheory.glm.se.plateau import (
    PlateauRule,
    plateau_qhat,
    plateau_row,
    solve_plateau,
)
from symtheory.glm.se.sampling import tail_multiple
from symtheory.smi.registry import build_model, sign_product


def _attention(alpha=0.5, samples=2):
    m = build_model("attention", {"depth": 2, "seq_len": 2, "skip": 1.0, "inv_temp": 1.0})
    return StateEvolution(m, alpha, samples=samples, observation="sample", sampling="rqmc")


@pytest.mark.slow
@pytest.mark.ci_slow  # ~40 s: the sampled map on 4096 draws and a plateau rule
def test_plateau_map_agrees_with_the_sampled_map():
    """Depth-2 attention, Q = diag(0, 0.771): E[sum_m g_2 g_2] by the plateau rule against
    the sampled map on 4096 RQMC draws, within 4 t-scaled standard errors plus the rule's
    own change against its refined level; the rule's mass is 1 and its g g^T equals the
    Nishimori twin to that change."""
    se = _attention(samples=4096)
    Q = np.diag([0.0, 0.771])
    Qhat, stderr, _ = se.qhat(Q)
    sampled, err = Qhat[1, 1] / se.alpha, stderr[1, 1] / se.alpha
    rule = PlateauRule(4, 6, 2.0, 12)
    sq, tw, mass = plateau_qhat(se, 0.771, rule)
    change = abs(sq - plateau_qhat(se, 0.771, rule.refined())[0])
    # E[1] = (the omega rule's total weight) x (the E-grid's mass per omega node, 1 to
    # its Gaussian tail beyond BOX_SIGMAS = 5 sd, ~1e-6): the radial rule's own defect
    # (4 Gauss-Legendre nodes per panel of rho exp(-rho^2/2)) is separated out
    from symtheory.glm.se.plateau import _omega_nodes
    total = _omega_nodes(0.771, rule)[1].sum()
    assert abs(total - 1) < 1e-3
    assert abs(mass - total) < 1e-5
    assert abs(sq - tw) <= change + 1e-6 * sq
    assert abs(sq - sampled) <= tail_multiple(4.0, se.error_groups) * err + change


def test_plateau_row_names_why_it_does_not_apply():
    """A plateau needs a reduced link, M = 2, every row but the solved one at 0."""
    se = _attention()
    assert plateau_row(se, np.diag([0.0, 0.5])) == 1
    assert "rows with Q_aa" in plateau_row(se, np.diag([0.3, 0.5]))
    assert "off-diagonal" in plateau_row(se, np.array([[0.0, 0.1], [0.1, 0.5]]))
    other = StateEvolution(sign_product(), 1.0, samples=2, observation="sample",
                           sampling="rqmc")
    assert plateau_row(other, np.diag([0.0, 0.5])) == "not a reduced noiseless link"


def test_plateau_refuses_bad_input_by_name():
    se = _attention()
    with pytest.raises(ParameterError, match="q must be in"):
        plateau_qhat(se, 1.2)
    with pytest.raises(ParameterError, match="q0 must be in"):
        solve_plateau(se, 0.0)
    with pytest.raises(ParameterError, match="angles must be an even integer"):
        PlateauRule(angles=5)
    with pytest.raises(ParameterError, match="radial_nodes"):
        PlateauRule(radial_nodes=1)
    with pytest.raises(ParameterError, match="step must be in"):
        PlateauRule(step=0.0)
    with pytest.raises(ParameterError, match="posterior_nodes"):
        PlateauRule(posterior_nodes=2)
    with pytest.raises(ParameterError, match="rule must be a PlateauRule"):
        plateau_qhat(se, 0.5, rule="gauss-hermite")
    with pytest.raises(ParameterError, match="tol must be > 0"):
        solve_plateau(se, 0.5, tol=0.0)
    with pytest.raises(ParameterError, match="max_evaluations"):
        solve_plateau(se, 0.5, max_evaluations=1)
    with pytest.raises(ParameterError, match="slope"):
        solve_plateau(se, 0.5, slope=1.2)


@pytest.mark.slow
@pytest.mark.ci_slow  # ~1-2 min: secant steps on a coarse plateau rule
def test_solve_plateau_converges_to_a_stable_root():
    """The secant solve reaches |F - q| <= 1e-9 on a coarse rule, reports a stable root
    (F' < 1) and an error estimate (the change to its refined rule) that covers the root's
    change to the default rule, a third, finer rule (one evaluation of its map)."""
    se = _attention()
    rule = PlateauRule(4, 4, 2.0, 12)
    res = solve_plateau(se, 0.77, rule)
    assert res.converged and res.stable and res.error_kind == "estimate"
    q = res.Q[1, 1]
    assert res.Q[0, 0] == 0.0 and res.residual <= 1e-9
    from symtheory.glm.se.plateau import plateau_map
    F_fine = plateau_map(se, q, PlateauRule())[0]
    # the root moves by (F_fine - q) / (1 - F'); the estimate must cover it
    slope = 1 - (res.trace[-1]["residual"] - res.trace[-2]["residual"]) / (
        res.trace[-1]["q"] - res.trace[-2]["q"])
    assert abs(F_fine - q) / slope <= res.Q_stderr[1, 1]


def test_polar_rule_weight_is_the_derived_jacobian_and_integrates_gaussian_moments():
    """The radial weight ``rho exp(-rho^2 / 2)`` is the polar change of variables of the
    2-D standard Gaussian, re-derived here by SymPy (Jacobian determinant times the density,
    integrated over the angle).  The folded rule, converged in its radial nodes (20 per
    panel), then reproduces the moments of ``omega ~ N(0, q I_2)`` truncated at the last
    panel's edge (``rho <= 6.5``, a tail of exp(-21)), integrated exactly by SymPy: mass,
    ``E w1^2``, ``E w1^2 w2^2``, ``E w1^4``, to 1e-12 (float64 sums of ~10^2 terms)."""
    import sympy as sp

    from symtheory.glm.se.plateau import RADIAL_PANELS, _omega_nodes

    r, t = sp.symbols("rho t", positive=True)
    x, y = r * sp.cos(t), r * sp.sin(t)
    jac = sp.Matrix([x, y]).jacobian([r, t]).det()
    density = sp.exp(-(x ** 2 + y ** 2) / 2) / (2 * sp.pi)
    radial = sp.simplify(sp.integrate(sp.simplify(jac * density), (t, 0, 2 * sp.pi)))
    assert sp.simplify(radial - r * sp.exp(-r ** 2 / 2)) == 0
    q = sp.Rational(3, 5)
    R = sp.Rational(RADIAL_PANELS[-1]).limit_denominator(100)
    w1, w2 = sp.sqrt(q) * x, sp.sqrt(q) * y

    def exact(f):
        # the angle first (f is a polynomial in cos t, sin t), then the derived radial weight
        angular = sp.integrate(sp.expand(f), (t, 0, 2 * sp.pi)) / (2 * sp.pi)
        return float(sp.integrate(sp.expand(angular * radial), (r, 0, R)))

    om, W = _omega_nodes(float(q), PlateauRule(20, 8, 1.5, 20))
    # the fold keeps half the circle: the images -omega give the same even moments
    a, b = om[:, 0], om[:, 1]
    for f, values in ((sp.Integer(1), 1.0 + 0 * a), (w1 ** 2, a ** 2),
                      (w1 ** 2 * w2 ** 2, a ** 2 * b ** 2), (w1 ** 4, a ** 4)):
        assert abs(W @ values - exact(f)) < 1e-12


def _sampled_plateau(q=0.771, stderr=0.009, **over):
    """A stand-in for a sampled solve's result ending on the plateau at ``q``."""
    from types import SimpleNamespace

    return SimpleNamespace(**{**dict(Q=np.diag([0.0, q]), Q_stderr=np.diag([0.0, stderr]),
                                     converged=True, stable=True, message="sampled"), **over})


def test_plateau_route_is_chosen_by_predicted_time(monkeypatch):
    """The automatic choice of solve_to_target: the plateau route is taken when one timed
    evaluation x PLATEAU_SOLVE_EVALUATIONS is below the predicted time of the samples the
    target needs (feasible or not), refused with both predictions stated otherwise, and
    not considered off a plateau or at an unconverged or unchecked point; the timed
    evaluation is the solve's first, not repeated."""
    from symtheory.glm.se import plateau

    se = _attention(samples=2048)
    rule = PlateauRule(2, 4, 4.0, 4)                # a coarse rule: the choice, not accuracy
    calls = []
    real_map = plateau.plateau_map
    monkeypatch.setattr(plateau, "plateau_map",
                        lambda *a, **k: calls.append(a[1]) or real_map(*a, **k))
    res = _sampled_plateau()
    # sampling predicted cheap: 2048 x (0.009/0.008)^2 samples at 1 us each
    c = plateau.plateau_route(se, res, 0.009, 0.008, 2048e-6, 2 ** 22, rule=rule)
    assert c.result is None and c.note.startswith("plateau route not chosen: more samples "
                                                  "predicted < 1 s")
    assert len(calls) == 1 and c.predicted > 0
    # the timing is reused by the next round: no evaluation, same verdict
    c2 = plateau.plateau_route(se, res, 0.009, 0.008, 2048e-6, 2 ** 22, rule=rule,
                               predicted=c.predicted)
    assert len(calls) == 1 and c2.note == c.note
    # feasible but slow sampling (1e6 s a round): the plateau route, one evaluation fewer
    calls.clear()
    c = plateau.plateau_route(se, res, 0.009, 0.008, 1e6, 2 ** 22, rule=rule)
    assert c.result is not None and c.result.method == "plateau map"
    assert calls[0] == 0.771 and calls.count(0.771) == 1     # timed once, then reused
    # an estimate above a reachable target: not used, not tried again
    c = plateau.plateau_route(se, res, 0.009, 1e-9, 1e6, 2 ** 62, rule=rule)
    assert c.result is None and "above the target" in c.note and c.predicted == np.inf
    # the target needs more samples than max_samples allows: sampling cannot reach it
    c = plateau.plateau_route(se, res, 0.009, 1e-9, 1.0, 2 ** 22, rule=rule)
    assert c.result.error_kind == "estimate" and "cannot reach it" in c.result.message
    assert 0.6 < c.result.Q[1, 1] < 0.9
    assert plateau.plateau_route(se, _sampled_plateau(Q=np.diag([0.3, 0.771])), 0.009, 1e-6,
                                 1.0, 2 ** 22, rule=rule).note is None
    for over, why in (({"stable": False}, "unstable"), ({"stable": None}, "unchecked"),
                      ({"converged": False}, "not converged")):
        c = plateau.plateau_route(se, _sampled_plateau(**over), 0.009, 1e-6, 1.0, 2 ** 22,
                                  rule=rule)
        assert c.result is None and why in c.note
    for args, name in (((0.009, 0.0, 1.0, 2 ** 22), "target_error"),
                       ((np.nan, 1e-3, 1.0, 2 ** 22), "error"),
                       ((0.009, 1e-3, -1.0, 2 ** 22), "seconds"),
                       ((0.009, 1e-3, 1.0, 16), "max_samples")):
        with pytest.raises(ParameterError, match=name):
            plateau.plateau_route(se, res, *args, rule=rule)


def test_solve_to_target_takes_or_reports_the_plateau_route(monkeypatch):
    """The wiring of solve_to_target (the sampled solve and the route stubbed): a plateau
    result is returned
    with its method and the sampled rounds, a target it misses is warned about at the
    caller, and a refusal's note is kept while sampling goes on."""
    import warnings

    from symtheory.core.solvers import ConvergenceWarning
    from symtheory.glm.se import plateau
    from symtheory.glm.se.result import SEResult

    se = _attention(samples=64)
    monkeypatch.setattr(type(se), "solve", lambda self, Q=None, **k: SEResult(
        value=np.diag([0.0, 0.77]), error=np.diag([0.0, 0.5 / np.sqrt(self.samples)]),
        Qhat=None, Qhat_stderr=None, converged=True, iterations=1, residual=0.0,
        nishimori_gap=0.0, message="sampled", trace=[], stable=True, samples=self.samples))
    fake = SEResult(value=np.diag([0.0, 0.7708]), error=np.diag([0.0, 3e-3]), Qhat=None,
                    Qhat_stderr=None, converged=True, iterations=5, residual=0.0,
                    nishimori_gap=0.0, message="plateau route chosen", trace=[], stable=True,
                    error_kind="estimate", method="plateau map")
    monkeypatch.setattr(plateau, "plateau_route",
                        lambda *a, **k: plateau.PlateauChoice(result=fake, predicted=1.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = se.solve_to_target(1e-3, max_samples=128)
    assert res.method == "plateau map" and res.target_rounds == [(64, 0.0625, res.target_rounds[0][2])]
    assert "NOT reached" in res.message
    warned = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert warned and warned[0].filename == __file__
    monkeypatch.setattr(plateau, "plateau_route",
                        lambda *a, **k: plateau.PlateauChoice(note="plateau route not chosen: x",
                                                              predicted=k.get("predicted") or 1.0))
    se.samples = 64
    res = se.solve_to_target(0.01, max_samples=2 ** 16)
    assert res.method != "plateau map" and "plateau route not chosen: x" in res.message
    assert float(res.Q_stderr.max()) <= 0.01 and "target error 0.01 reached" in res.message


def test_plateau_row_refuses_what_it_does_not_integrate():
    """A regularized SE, a deep link's 4-D free-row posterior, a Laplace-RQMC rule."""
    m = build_model("attention", {"depth": 2, "seq_len": 2, "skip": 1.0, "inv_temp": 1.0})
    reg = StateEvolution(m, 0.5, samples=2, observation="sample", sampling="rqmc",
                         regularization=1e-3)
    assert "regularization" in plateau_row(reg, np.diag([0.0, 0.5]))
    deep = build_model("attention", {"depth": 3, "seq_len": 2, "skip": 1.0, "inv_temp": 1.0})
    se3 = StateEvolution(deep, 0.5, samples=2, observation="sample", sampling="rqmc")
    assert "4-D" in plateau_row(se3, np.diag([0.0, 0.0, 0.5]))


@pytest.mark.slow
@pytest.mark.ci_slow  # ~2 min: a sampled round on 2048 samples, then the plateau solve
def test_solve_to_target_integrates_on_a_plateau():
    """Depth-2 attention at alpha 0.5: a target of 1e-4 (1.6e7 samples by the Monte-Carlo
    rate, above max_samples) is met by the plateau route, chosen automatically; its value
    lies within 3 sampled standard errors of the sampled round (its error estimate is
    far smaller)."""
    se = _attention(samples=2048)
    res = se.solve_to_target(1e-4)
    assert res.method == "plateau map" and "plateau route chosen" in res.message
    assert float(res.Q_stderr[1, 1]) <= 1e-4 and res.converged and res.stable
    n, err, _ = res.target_rounds[0]
    sampled = float(res.message.split("sampled plateau ")[1].split(" ")[0])
    assert n == 2048 and abs(res.Q[1, 1] - sampled) <= 3 * err
