"""The reproduced BSR figures overlay the paper's own points and mark alpha_PR (issue 34).

The points are shipped with the package (symtheory/bsr/data); they are re-selected here
from the reference copy of the authors' data (tests/reference/bsr) with the rules of
symtheory/bsr/data/README.md, and alpha_PR is checked against its closed form (bsr.md 7),
an independent path from the package's ``alpha_pr`` column."""
import csv
import math

import numpy as np
import pytest

from conftest import REFERENCE
from symtheory.bsr import tasks as bsr_tasks
from symtheory.core.table import Table

FIGURES = {"fig1": ("fig1/delta0.0_beta1.0_rhos0.1-2.0.csv", "rho", [0.1, 0.2, 0.5, 1.0, 2.0]),
           "fig2": ("fig2/delta0.0_rho0.5_betas1-2-5-inf.csv", "beta", [1.0, 2.0, 5.0, math.inf])}


def closed_form_alpha_pr(beta, rho):
    """bsr.md 7: rho (1 + beta - rho) / beta for rho < 1, else 1; beta = inf: min(rho, 1)."""
    if math.isinf(beta):
        return min(rho, 1.0)
    return rho * (1 + beta - rho) / beta if rho < 1 else 1.0


def _selected(path):
    """The rows of the README's rule: alpha on the 0.05 grid, not 0 < alpha <= 0.005, not
    alpha = alpha_PR, not above the ridge error (the data's known-wrong rows)."""
    out = []
    with open(path) as fh:
        for r in csv.DictReader(fh):
            a = float(r["alpha"])
            if round(a / 0.005) % 10 or 0 < a <= 0.005 or float(r["mmse"]) > float(r["mse_ridge_opt"]):
                continue
            if math.isclose(a, closed_form_alpha_pr(float(r["beta"]), float(r["rho"])), abs_tol=1e-12):
                continue
            out.append([float(r[c]) for c in ("beta", "rho", "delta", "alpha", "mmse")])
    return np.array(out)


@pytest.mark.parametrize("name", FIGURES)
def test_shipped_points_are_the_reference_rows_known_right(name):
    shipped = bsr_tasks.paper_points(name)
    got = np.column_stack([shipped[c] for c in ("beta", "rho", "delta", "alpha", "mmse")])
    want = _selected(REFERENCE / "bsr" / FIGURES[name][0])
    np.testing.assert_array_equal(got, want)  # copied unchanged
    assert len(got) == (102 if name == "fig1" else 81)  # 3 rows at alpha_PR left out


def _theory_table(name):
    """A small theory table as the sweep stores it: our bo_point at two alphas per curve."""
    from symtheory.bsr import bo_point

    _, by, values = FIGURES[name]
    cols = {c: [] for c in ("alpha", "beta", "rho", "mmse", "alpha_pr", "ridge_mse")}
    for v in values:
        beta, rho = (1.0, v) if by == "rho" else (v, 0.5)
        for a in (0.3, 0.6):
            pt = bo_point(a, beta, rho, 0.0)
            for c, x in (("alpha", a), ("beta", beta), ("rho", rho), ("mmse", pt.mmse),
                         ("alpha_pr", pt.alpha_pr), ("ridge_mse", pt.ridge_mse)):
                cols[c].append(x)
    return Table(cols)


@pytest.mark.parametrize("name", FIGURES)
def test_figure_overlays_the_points_and_marks_alpha_pr(name, tmp_path):
    import matplotlib.pyplot as plt

    _, by, values = FIGURES[name]
    fig, ax, written = bsr_tasks._fig_axes({"theory": _theory_table(name)}, tmp_path, name)
    labels = ax.get_legend_handles_labels()[1]
    plt.close(fig)
    assert [p.name for p in written] == [f"bsr.{name}.paper_points.csv", f"bsr.{name}.thresholds.csv"]
    # the overlay series: every shipped point, one marker series per curve
    with open(written[0]) as fh:
        series = list(csv.DictReader(fh))
    shipped = bsr_tasks.paper_points(name)
    assert len(series) == len(shipped["alpha"])
    assert sorted((float(r[by]), float(r["alpha"]), float(r["mmse"])) for r in series) == \
        sorted(zip(shipped[by].tolist(), shipped["alpha"].tolist(), shipped["mmse"].tolist()))
    assert "paper (Erba et al., points)" in labels
    # the thresholds: one per curve, at the closed form; one labelled line per position
    with open(written[1]) as fh:
        marks = list(csv.DictReader(fh))
    assert sorted(float(r[by]) for r in marks) == values  # listed by position
    for r in marks:
        beta, rho = (1.0, float(r["rho"])) if by == "rho" else (float(r["beta"]), 0.5)
        assert r["threshold"] == "alpha_PR"
        assert abs(float(r["alpha"]) - closed_form_alpha_pr(beta, rho)) < 1e-12
        assert r["label"] in labels and r["label"].startswith(rf"$\alpha_{{PR}}={float(r['alpha']):.4g}$")
    assert len([lab for lab in labels if "alpha_{PR}" in lab]) == len({r["alpha"] for r in marks})
