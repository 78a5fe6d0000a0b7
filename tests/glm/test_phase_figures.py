"""The glm figures are registered with ``symtheory reproduce`` and their quick specs are
valid sweep specs (validated, not run); one small GAMP point runs."""
from __future__ import annotations

import pytest

from symtheory.sweep.registry import discover, figures
from symtheory.sweep.spec import build_spec

FIGURES = ("glm.perceptron_gamp", "glm.sparse_phase_diagram")


@pytest.mark.parametrize("name", FIGURES)
def test_listed_and_quick_spec_is_valid(name, tmp_path):
    figs = figures()
    assert name in figs
    for quick in (True, False):
        spec = build_spec(figs[name].spec(quick), store=tmp_path / "s.sqlite")
        points = spec.points()
        assert points and all(p.computation.startswith("glm.") for p in points)
    quick_spec = build_spec(figs[name].spec(True), store=tmp_path / "q.sqlite")
    assert len(quick_spec.points()) < len(spec.points())


def test_small_gamp_point_runs_and_reports():
    comp = discover()["glm.gamp"]
    params = comp.validate({"d": 200, "alpha": 2.0, "seed": 0})
    assert params["restore_best"] is True and params["prior"] == "rademacher"
    out, report = comp.execute(params)
    assert out["n"] == 400
    assert -1.0 <= out["overlap"] <= 1.0
    assert set(report) >= {"converged", "iterations", "residual", "message", "warnings"}
