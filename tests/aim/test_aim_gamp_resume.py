"""An interrupted ``aim gamp`` keeps the runs it finished (issue 34): each run is committed
to the task journal as it ends, and the same call again computes only the others."""
import numpy as np
import pytest

from symtheory.aim import gamp as aim_gamp

# tiny d: GAMP may not converge in 30 iterations; what is tested is the resumption
pytestmark = pytest.mark.filterwarnings("ignore::symtheory.core.solvers.ConvergenceWarning")

ALPHAS, SEEDS = [0.3, 0.5], [0, 1]
SETTING = dict(d=30, rho=0.5, seq_len=1, link="identity", max_iter=30, damping=0.8)
REAL_RUN = aim_gamp.run_gamp


def _counting(monkeypatch, stop_after=None):
    """Count GAMP runs; raise KeyboardInterrupt at run ``stop_after + 1`` (a user's ^C)."""
    calls = []

    def run(*args, **kw):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(1)
        return REAL_RUN(*args, **kw)

    monkeypatch.setattr(aim_gamp, "run_gamp", run)
    return calls


def _frame(table):
    return {c: np.asarray(table[c]) for c in table.columns if c != "seconds"}


def test_interrupted_run_resumes_without_recomputing(tmp_path, monkeypatch, capsys):
    reference = aim_gamp.gamp_curve(ALPHAS, seeds=SEEDS, **SETTING)
    book = tmp_path / "out" / "gamp.tasks.sqlite"
    calls = _counting(monkeypatch, stop_after=3)
    with pytest.raises(KeyboardInterrupt):
        aim_gamp.gamp_curve(ALPHAS, seeds=SEEDS, journal=book, **SETTING)
    assert len(calls) == 3
    calls = _counting(monkeypatch)
    summary, trace = aim_gamp.gamp_curve(ALPHAS, seeds=SEEDS, journal=book, **SETTING)
    assert len(calls) == 1  # only the run the interruption stopped
    assert "3 of 4 runs already done" in capsys.readouterr().err
    for got, want in ((summary, reference[0]), (trace, reference[1])):
        g, w = _frame(got), _frame(want)
        assert g.keys() == w.keys()
        for c in w:  # the same seeds and code: bit-identical (JSON keeps floats exact)
            np.testing.assert_array_equal(g[c], w[c], err_msg=c)
    # other parameters are other tasks: nothing is reused
    calls = _counting(monkeypatch)
    aim_gamp.gamp_curve(ALPHAS[:1], seeds=SEEDS[:1], journal=book, **dict(SETTING, max_iter=29))
    assert len(calls) == 1


def test_cli_writes_the_journal_beside_its_output(tmp_path, monkeypatch, capsys):
    from symtheory.cli import main

    out = tmp_path / "gamp"
    argv = ["aim", "gamp", "--alpha", "0.3", "--seq-len", "1", "--link", "identity", "--d", "30", "--max-iter", "30", "--damping", "0.8",
            "--seeds", "0", "1", "--out", str(out), "--quiet"]
    calls = _counting(monkeypatch)
    assert main(argv) == 0
    first = next(out.glob("*.csv")).read_text()
    assert len(calls) == 2 and list(out.glob("*.tasks.sqlite"))
    calls = _counting(monkeypatch)
    assert main(argv) == 0
    assert len(calls) == 0 and "2 of 2 runs already done" in capsys.readouterr().err
    assert next(out.glob("*.csv")).read_text().split("\n")[0] == first.split("\n")[0]
