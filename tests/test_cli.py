"""Command-line interface: tables, files, plots, precision, and bad input."""
import csv
import io
import json
import subprocess
import sys

import pytest

from symtheory.cli import main

COLUMNS = {"alpha", "mmse", "q", "alpha_pr", "ridge_mse", "converged", "iterations", "residual"}


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_csv_table_has_the_required_columns(capsys):
    code, out, _ = run(["bsr", "theory", "--alpha", "0.1", "0.3", "0.7", "--beta", "2", "--rho",
                        "0.5", "--delta", "0", "--quiet"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert COLUMNS <= set(rows[0])
    assert [float(r["alpha"]) for r in rows] == [0.1, 0.3, 0.7]
    assert float(rows[1]["mmse"]) == pytest.approx(0.5902453914318666, abs=1e-12)
    assert float(rows[2]["mmse"]) == 0.0 and float(rows[2]["alpha_pr"]) == 0.625
    assert rows[0]["converged"] == "true"


def test_grid_json_and_beta_infinity(capsys):
    code, out, _ = run(["bsr", "theory", "--alpha-grid", "0", "0.4", "5", "--beta", "inf", "--rho",
                        "0.5", "--format", "json", "--quiet"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["meta"]["beta"] == "inf" or data["meta"]["beta"] == float("inf")
    mm = [r["mmse"] for r in data["rows"]]
    assert mm[3] == pytest.approx((1 - 0.3) * (0.5 - 0.3) / 0.5, abs=1e-12)


def test_out_folder_gets_table_parameters_and_plot(tmp_path, capsys):
    code, _, err = run(["bsr", "theory", "--alpha-grid", "0", "1", "11", "--beta", "1", "--rho",
                        "0.2", "--delta", "0.1", "--out", str(tmp_path), "--plot", "--quiet"], capsys)
    assert code == 0
    stem = "bsr_bo_beta1_rho0.2_delta0.1"
    assert (tmp_path / f"{stem}.csv").exists()
    params = json.loads((tmp_path / f"{stem}.params.json").read_text())
    assert params["rho"] == 0.2 and params["delta"] == 0.1 and "command" in params
    png = (tmp_path / f"{stem}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "wrote" in err


def test_precision_prints_the_requested_digits(capsys):
    code, out, _ = run(["bsr", "theory", "--alpha", "0.3", "--beta", "2", "--rho", "0.5",
                        "--precision", "20", "--quiet"], capsys)
    assert code == 0
    row = next(csv.DictReader(io.StringIO(out)))
    assert len(row["mmse"].split(".")[1]) == 20          # 20 significant digits (0.59...)
    assert row["mmse"].startswith("0.5902453914318674")
    assert float(row["digits_confirmed"]) >= 20


@pytest.mark.parametrize("args,needle", [
    (["--alpha", "-0.1", "--beta", "2", "--rho", "0.5"], "alpha"),
    (["--alpha", "0.1", "--beta", "-2", "--rho", "0.5"], "beta"),
    (["--alpha", "0.1", "--beta", "nan", "--rho", "0.5"], "beta"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0"], "rho"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0.5", "--delta", "-1"], "delta"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0.5", "--delta", "inf"], "delta"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0.5", "--format", "xml"], "format"),
    (["--alpha-grid", "0", "1", "0", "--beta", "2", "--rho", "0.5"], "NUM"),
    (["--beta", "2", "--rho", "0.5"], "alpha"),
])
def test_bad_input_exits_nonzero_naming_the_parameter(args, needle, capsys):
    code, _, err = run(["bsr", "theory", "--quiet"] + args, capsys)
    assert code == 2
    assert needle in err and "must" in err or "give" in err


def test_installed_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "symtheory.cli", "bsr", "theory", "--alpha", "0.2",
                          "--beta", "1", "--rho", "0.2", "--quiet"], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[0].startswith("alpha,")
