"""AIM sweep declarations (symtheory/aim/tasks.py) and the ``aim gamp`` command line."""
import math

import pytest

from symtheory.core.tasks import computations, figures
from symtheory.core.validate import ParameterError


@pytest.fixture(scope="module")
def registry():
    import symtheory.aim.tasks  # noqa: F401  (registers)

    return computations(), figures()


def test_aim_computations_and_figures_are_registered(registry):
    comps, figs = registry
    assert {"aim.theory_point", "aim.gamp", "aim.gd"} <= set(comps)
    assert {"aim.mse_vs_alpha", "aim.collapse", "aim.hardmax"} <= set(figs)
    quick = figs["aim.mse_vs_alpha"].spec(True)
    assert [r["label"] for r in quick["run"]] == ["theory", "gamp", "gd"]


@pytest.mark.parametrize("name, params, key", [
    ("aim.theory_point", dict(rho=0.5, alpha=0.1, link="hardmax", seq_len=3), "hardmax"),
    ("aim.theory_point", dict(rho=0.5, alpha=0.1, link="softmax", seq_len=1), "seq_len"),
    ("aim.theory_point", dict(rho=-1, alpha=0.1), "rho"),
    ("aim.gamp", dict(rho=0.5, alpha=1e-6, d=10, seed=0), "alpha"),
    ("aim.gd", dict(rho=0.5, alpha=0.1, d=10, seed=0, students=0), "students"),
])
def test_bad_parameters_are_refused_before_running(registry, name, params, key):
    with pytest.raises(ParameterError, match=key):
        registry[0][name].validate(params)


def test_theory_point_is_the_package_theory(registry):
    """aim.md 7: softmax, rho = 0.5, alpha_tilde = alpha (T^2 + T - 2) = 0.2 -> 0.7236774222
    (T = 2 at alpha = 0.05 and T = 3 at alpha = 0.02: the collapse)."""
    comp = registry[0]["aim.theory_point"]
    for T, alpha in ((2, 0.05), (3, 0.02)):
        out, report = comp.execute(comp.validate(dict(rho=0.5, alpha=alpha, seq_len=T)))
        assert out["mmse"] == pytest.approx(0.7236774222, abs=1e-9)
        assert report["converged"] is True
        assert out["alpha_pr"] == pytest.approx(0.75 / (T * T + T - 2), rel=1e-12)
        assert math.isnan(out["gen_error"])          # gen_samples = None skips it


def test_gamp_point_runs_and_reports(registry):
    comp = registry[0]["aim.gamp"]
    out, report = comp.execute(comp.validate(dict(rho=0.5, alpha=0.3, d=30, seed=0, max_iter=5)))
    assert out["n"] == 270 and out["se_mse"] == 0.0 and 0 < out["mse"] < 1
    assert report["iterations"] == 5 and report["converged"] is False


# ------------------------------------------------------------------ command line
def _main(argv):
    from symtheory.cli import main

    return main(argv)


@pytest.mark.parametrize("argv, message", [
    (["aim", "gamp", "--alpha", "0.1", "--link", "hardmax", "--seq-len", "3"], "--seq-len"),
    (["aim", "gamp", "--alpha", "0.1", "--link", "hardmax", "--delta", "0.1"], "--delta"),
    (["aim", "gamp", "--alpha", "0.1", "--damping", "1"], "--damping"),
    (["aim", "gamp", "--alpha", "0.01", "--d", "3"], "alpha"),
])
def test_gamp_cli_refuses_bad_options(argv, message, capsys):
    try:
        code = _main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code != 0
    assert message in capsys.readouterr().err


def test_gamp_cli_writes_table_trace_and_plot(tmp_path, capsys):
    code = _main(["aim", "gamp", "--d", "30", "--alpha", "0.1", "--seq-len", "1", "--link",
                  "identity", "--max-iter", "5", "--quiet", "--out", str(tmp_path), "--plot"])
    assert code == 0
    stem = "aim_gamp_T1_identity_rho0.5_d30"
    rows = (tmp_path / f"{stem}.csv").read_text().splitlines()
    assert rows[0].startswith("alpha,seed,n,mse,variance,se_mse") and len(rows) == 2
    assert (tmp_path / f"{stem}.png").stat().st_size > 1000
    code = _main(["aim", "gamp", "--d", "30", "--alpha", "0.1", "--seq-len", "1", "--link",
                  "identity", "--max-iter", "5", "--quiet", "--trace"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and out[0].startswith("alpha,seed,iteration,mse,variance,se_variance")
    # one row per recorded iteration, the start first (a run that blows up at this tiny d
    # stops early)
    assert [int(r.split(",")[2]) for r in out[1:]] == list(range(len(out) - 1))
