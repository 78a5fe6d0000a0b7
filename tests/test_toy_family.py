"""The toy family of docs/toy_family.md (examples/toy_family.py): a new family is one
file of under 150 lines that declares models, a schema and a task, and gets a validated
command line and a sweep computation from the package."""
from __future__ import annotations

import importlib.util
import json
import runpy
from pathlib import Path

import pytest

from symtheory.core.tasks import computations
from symtheory.core.validate import ParameterError

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "examples" / "toy_family.py"


@pytest.fixture(scope="module")
def toy():
    return runpy.run_path(str(TOY), run_name="toy_family")


def test_the_toy_family_is_short(toy):
    assert len(TOY.read_text().splitlines()) < 150


def test_its_task_is_a_validated_computation(toy):
    comp = computations()["toy.overlap"]
    assert comp.validate({"alpha": 1.0}) == {"alpha": 1.0, "model": "sign",
                                             "prior": "gaussian", "delta": 0.1}
    with pytest.raises(ParameterError, match="alpha"):
        comp.validate({"alpha": 0.0})
    with pytest.raises(ParameterError, match="model"):
        comp.validate({"alpha": 1.0, "model": "relu"})


def test_its_command_line_gives_the_gaussian_sign_overlap(toy, capsys):
    """Against the in-test mpmath solve of tests/glm/test_phases.py (1e-8, as there)."""
    spec = importlib.util.spec_from_file_location("phases_ref", ROOT / "tests/glm/test_phases.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    assert toy["main"](["--alpha", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["converged"] and abs(out["overlap"] - ref._mp_sign_overlap(2)) < 1e-8
    assert toy["main"](["--alpha", "-1"]) == 2
    assert "--alpha must be in (0, inf), got -1" in capsys.readouterr().err
