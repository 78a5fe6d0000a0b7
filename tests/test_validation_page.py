"""The validation page's tables (``symtheory docs validation``, symtheory/validation.py):
every stored run is listed, and the numbers in the tables are the stored ones, read here
by an independent path (numpy's CSV reader instead of the module's csv.DictReader)."""
import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from symtheory.validation import validation_tables

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
REFERENCE = ROOT / "tests" / "reference"


@pytest.fixture(scope="module")
def page():
    return validation_tables(FIGURES, REFERENCE)


def _column(path, name):
    data = np.genfromtxt(path, delimiter=",", names=True, dtype=None, encoding=None)
    return data, np.asarray(data[name], dtype=float)


def _row(page, section, first_cell):
    """The cells of the row starting with ``first_cell`` in the table under ``section``."""
    body = page.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} under {section!r}")


def test_every_stored_run_is_listed(page):
    runs = sorted(p.parent.name for p in FIGURES.glob("*/params.json"))
    assert runs, "docs/figures holds no stored run"
    for run in runs:
        assert f"| `{run}` |" in page, f"stored run {run} missing from the validation page"


def test_se_row_holds_the_stored_and_the_paper_numbers(page):
    se, alpha = _column(FIGURES / "smi.se_gamp" / "smi.se_gamp.se.csv", "alpha")
    ours = float(se["Q22"][np.argmin(abs(alpha - 0.5))])
    ref = np.genfromtxt(REFERENCE / "smi" / "BO_2w.csv", delimiter=",", names=True)
    paper = float(ref["Q22"][np.argmin(abs(ref["alpha"] - 0.5))])
    cells = _row(page, "SMI state evolution against the paper", "0.50")
    assert float(cells[1]) == pytest.approx(ours, abs=5e-5)     # printed to 4 decimals
    assert float(cells[3]) == pytest.approx(paper, abs=5e-5)
    assert float(cells[4]) == pytest.approx(abs(ours - paper), rel=0.06)   # 2 digits


def test_threshold_row_pairs_the_papers_columns_by_layer(page):
    """alpha_critical.csv names its columns by layer: its alpha2 is the first threshold."""
    ours, skip = _column(FIGURES / "smi_phase_diagram" / "smi_phase_diagram.csv", "skip")
    ref = np.genfromtxt(REFERENCE / "smi" / "alpha_critical.csv", delimiter=",", names=True)
    cells = _row(page, "SMI thresholds against skip strength", "1.000")
    assert float(cells[1].split("+-")[0]) == pytest.approx(
        float(ours["alpha_1"][np.argmin(abs(skip - 1.0))]), abs=5e-5)
    assert float(cells[2]) == pytest.approx(float(ref["alpha2"][ref["skip"] == 1.0][0]), abs=5e-5)
    assert float(cells[5]) == pytest.approx(float(ref["alpha1"][ref["skip"] == 1.0][0]), abs=5e-5)


def test_perceptron_thresholds_are_the_stored_ones(page):
    # quoted commas in its message column: the stdlib reader by column position
    with open(FIGURES / "glm.perceptron_gamp" / "glm.perceptron_gamp.thresholds.csv") as f:
        header, values = list(csv.reader(f))[:2]
    t = dict(zip(header, values))
    shown = re.search(r"\| (1\.\d{10}) \| [^|]+ \| (1\.\d{10}) \|", page)
    assert shown, "the perceptron's threshold row is missing"
    assert float(shown.group(1)) == pytest.approx(float(t["alpha_it"]), abs=1e-10)
    assert float(shown.group(2)) == pytest.approx(float(t["alpha_alg"]), abs=1e-10)


def test_command_prints_the_page(page):
    out = subprocess.run([sys.executable, "-m", "symtheory.cli", "docs", "validation"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout == page


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="stored runs: no folder"):
        validation_tables(tmp_path / "nothing", REFERENCE)
