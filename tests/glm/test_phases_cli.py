"""``symtheory glm phases``: bad input refused by name before anything runs; a full run
on the binary perceptron prints the independent reference within its error bars."""
from __future__ import annotations

import csv
import io

import pytest

from symtheory.cli import main

from conftest import EXAMPLES


@pytest.mark.parametrize("argv,needle", [
    (["--prior", "gauss-bernoulli:2"], "RHO must be in (0, 1]"),
    (["--prior", "gauss-bernoulli:x"], "needs a number RHO"),
    (["--prior", "laplace"], "--prior must be gaussian, rademacher"),
    (["--prior", "missing.py"], "no such file"),
    (["--prior", "rademacher", "--points", "3"], "--points"),
    (["--prior", "rademacher", "--channel-param", "0.5"], "takes 0 values"),
])
def test_bad_input_is_refused_by_name(argv, needle, capsys):
    assert main(["glm", "phases", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_a_prior_file_that_fails_its_declaration_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import sympy as sp\nfrom symtheory.glm.factors.separable_prior import "
                   "discrete\nprior = discrete({-1: sp.Rational(3, 2), 1: -sp.Rational(1, 2)})\n")
    assert main(["glm", "phases", "--prior", str(bad)]) == 2
    assert "non-negative" in capsys.readouterr().err


@pytest.mark.slow
def test_binary_perceptron_from_the_command_line(capsys):
    from test_phases import PERCEPTRON   # the independent 25-digit values

    assert main(["glm", "phases", "--prior", "rademacher"]) == 0
    rows = {r["kind"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert set(rows) == {"alpha_alg", "alpha_IT"}
    for kind, ref in PERCEPTRON.items():
        assert abs(float(rows[kind]["alpha"]) - ref) <= float(rows[kind]["error"])


@pytest.mark.slow
def test_declared_door_and_prior_files_run(tmp_path):
    """The two example files as a user runs them, with the plot."""
    assert main(["glm", "phases", "--model-file", str(EXAMPLES / "symmetric_door.py"),
                 "--channel-param", "0.6744897501960817", "--prior",
                 str(EXAMPLES / "ternary_prior.py"), "--points", "40", "--plot", "--out",
                 str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("*.png"))) == 1 and len(list(tmp_path.glob("*.csv"))) == 1


@pytest.mark.slow
def test_precision_prints_confirmed_digits(capsys):
    """--precision 20: alpha to 20 digits, all confirmed at 40, the error bar their bound."""
    import mpmath
    from test_phases_mp import PERCEPTRON as REF25   # the 25-digit strings

    assert main(["glm", "phases", "--prior", "rademacher", "--precision", "20"]) == 0
    rows = {r["kind"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    for kind, ref in REF25.items():
        row = rows[kind]
        assert float(row["digits_confirmed"]) == 20 and float(row["error"]) < 1e-19
        # 20 printed digits: within half a unit of the 20th of the reference
        assert abs(mpmath.mpf(row["alpha"]) - mpmath.mpf(ref)) < mpmath.mpf("1e-19")
