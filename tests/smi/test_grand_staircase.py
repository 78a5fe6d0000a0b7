"""Grand staircase of any depth from the SE itself (glm/grand_staircase.py, smi.md 8.4).

Independent paths: the weak-recovery threshold of the deterministic observation grid
(glm/linearized.py ``weak_recovery``) and the two-layer staircase of ``StaircaseMap``
(its own width-adapted inner rule, its own RQMC batches and error bar).  Tolerances:
each error bar here is a first-order bound of at least one standard error (linear sums
of the contributions), so two independent values differing by more than 2x the sum of
their bars would happen by chance with probability < 1%.
"""
from __future__ import annotations

import numpy as np
import pytest

from symtheory.core.quadrature import TensorRule
from symtheory.glm import StateEvolution
from symtheory.glm.thresholds.grand_staircase import grand_staircase
from symtheory.glm.thresholds.staircase import staircase
from symtheory.glm.thresholds.weak_recovery import weak_recovery
from symtheory.smi import deep_attention


@pytest.fixture(scope="module")
def attention():
    return deep_attention(2, 2, 1, 1.0)


@pytest.mark.parametrize("pinned, match", [((2,), "row indices"), ((-1,), "row indices")])
def test_pinned_rows_are_checked(attention, pinned, match):
    with pytest.raises(ValueError, match=match):
        StateEvolution(attention, 1.0, samples=4, pinned_rows=pinned, check_channel=False)


def test_pinned_rows_stay_at_zero(attention):
    """A pinned row is masked out of Q and Q_hat: the map keeps it at 0 from any start
    and the solver has one free entry less."""
    rule = TensorRule("gauss-hermite", 12)
    se = StateEvolution(attention, 1.0, samples=64, rule=rule, pinned_rows=(0,),
                        check_channel=False)
    Q = se.step(np.diag([0.3, 0.5]))
    assert Q[0, 0] == 0.0 and Q[0, 1] == 0.0 and Q[1, 1] > 0
    assert se._free_entries() == [(1, 1)]


@pytest.mark.slow
@pytest.mark.ci_slow
def test_grand_staircase_two_layers(attention):
    """Two layers: the last row first, at the weak-recovery threshold (deterministic
    observation grid), then the first row; the SE check brackets both thresholds."""
    steps = grand_staircase(attention, samples=512, seed=1, rule=TensorRule("gauss-hermite", 16))
    assert [s.learned_at for s in steps] == [(1,), (0,)]
    exact = weak_recovery(attention, outer_nodes=32, rule=TensorRule("gauss-hermite", 24))
    first, second = (s.threshold for s in steps)
    assert abs(first.alpha - exact.alpha) <= 2 * (first.error + exact.error), (first, exact)
    assert first.alpha < second.alpha
    for s in steps:
        assert s.threshold.converged, s.threshold.message
        below, above = (s.growth[k] for k in sorted(s.growth))
        assert below < 1 < above
        # a deterministic rule on 512 samples: the check resolves both sides beyond its noise
        check = s.threshold.details["check"]
        assert check["verdict"] == "confirmed", s.threshold.message
        assert check["delta"] >= 0.1
        # two Monte-Carlo estimates of one slope: within 3 of their combined relative errors
        rel = np.hypot(s.threshold.details["lambda_stderr"] / s.threshold.eigenvalue,
                       check["slope_se"] / check["slope"])
        assert abs(np.log(check["check_alpha"] / s.threshold.alpha)) < 3 * rel


@pytest.mark.slow
def test_grand_staircase_against_the_two_layer_staircase(attention):
    """The second threshold against StaircaseMap's (an independent implementation)."""
    steps = grand_staircase(attention, samples=2000, seed=0)
    ref = staircase(attention, samples=4096, seed=2)
    got = steps[1].threshold
    assert abs(got.alpha - ref.alpha) <= 2 * (got.error + ref.error), (got.message, ref.message)


def test_cli_grand_staircase(capsys):
    """``smi threshold --grand-staircase``: one row per stage with the rows learned, and
    the flags that do not apply refused by name."""
    import json

    from symtheory.cli import main

    code = main(["smi", "threshold", "--grand-staircase", "--staircase-samples", "128",
                 "--quadrature-nodes", "10", "--format", "json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    rows = out["rows"] if "rows" in out else out
    assert [r["rows_learned_at"] for r in rows] == ["1", "0"]
    assert [r["kind"] for r in rows] == ["weak", "staircase"]
    assert all(r["error"] > 0 for r in rows)
    assert all(r["se_check"] in ("confirmed", "inconclusive", "contradicted") for r in rows)
    assert main(["smi", "threshold", "--grand-staircase", "--weak-only"]) == 2
    assert "--weak-only" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.ci_slow
def test_alpha_continuation_agrees_with_the_overlap_space_root(attention):
    """The stable-branch path (SE solves in alpha from below, the fallback for an unstable
    overlap-space root) and the overlap-space root solve the same frozen-sample equations;
    where the root is a stable fixed point (here: spectral radius ~0.84) they must give
    the same alpha to the continuation's Brent tolerance (5e-3 relative), with comparable
    error bars, and the SE check must bracket it."""
    lines = []
    step = grand_staircase(attention, samples=512, seed=1, rule=TensorRule("gauss-hermite", 16),
                           alpha_continuation="always", log=lines.append)[1]
    t = step.threshold
    assert "alpha continuation" in t.message and any("continuation:" in s for s in lines)
    root = t.details["alpha_overlap_root"]
    assert t.details["spectral_radius_overlap_root"] < 1
    assert abs(t.alpha - root) <= 5e-3 * root, (t.alpha, root)
    assert t.details["spectral_radius"] < 1 and t.converged, t.message
    assert 0 < t.error < 0.1 * t.alpha
    below, above = (step.growth[k] for k in sorted(step.growth))
    assert below < 1 < above


def test_alpha_continuation_option_is_checked(attention):
    with pytest.raises(ValueError, match="alpha_continuation"):
        grand_staircase(attention, samples=16, alpha_continuation="sometimes")
