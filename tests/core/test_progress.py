"""Progress bars: quiet when stderr is not a terminal, a newline when they end."""
from __future__ import annotations

import io
import sys

import pytest

from symtheory.core.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_quiet_when_stderr_is_not_a_terminal(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    assert list(progress_bar(range(3), desc="x")) == [0, 1, 2]
    assert log.getvalue() == ""


def test_on_a_terminal_the_bar_ends_its_line(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert list(progress_bar(range(3), desc="x")) == [0, 1, 2]
    out = term.getvalue()
    assert "3/3" in out and out.endswith("\n")


def test_disabled_is_the_plain_iterable():
    it = range(2)
    assert progress_bar(it, enabled=False) is it


# ------------------------------------------------------------------ the ETA (issue 34)
from symtheory.core.progress import WorkBar, format_seconds  # noqa: E402


class _Clock:
    """A fake clock: ``tick(s)`` advances it."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def tick(self, s):
        self.t += s


def test_eta_leaves_out_the_compiling_update():
    """First update 100 s (compilation), then 1 s per unit: after the second update the
    ETA is 1 s x the units left -- tqdm's average would say (101/2) s per unit."""
    clock = _Clock()
    bar = WorkBar(total=50, enabled=False, clock=clock)
    clock.tick(100.0)
    bar.advance(1, warm=True)
    assert bar.eta() is None  # nothing measured yet: unknown, not a guess from the compile
    clock.tick(1.0)
    bar.advance(1)
    assert bar.eta() == 48.0
    for _ in range(10):
        clock.tick(2.0)  # a loaded machine: 2 s per unit from now on
        bar.advance(1)
    assert bar.eta() == 2.0 * 38  # median of the measured costs follows the load


def test_eta_is_work_left_times_cost_per_unit():
    clock = _Clock()
    bar = WorkBar(enabled=False, clock=clock)
    clock.tick(5.0)
    bar.advance(1000, warm=True)
    clock.tick(0.5)
    bar.advance(16000)  # 1/32 ms per unit
    assert bar.eta() is None  # work left unknown
    bar.remaining(32000)
    assert bar.eta() == 1.0
    assert [format_seconds(s) for s in (None, 42.4, 185, 7620)] == ["?", "42s", "3m05s", "2h07m"]


def test_on_a_terminal_the_bar_shows_the_eta(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    clock = _Clock()
    items = []
    for i in progress_bar(range(4), desc="x", clock=clock):
        clock.tick(30.0 if i == 0 else 2.0)
        items.append(i)
    assert items == [0, 1, 2, 3]
    out = term.getvalue()
    first, last = out.strip().split("\r")[1], out.strip().split("\r")[-1]
    assert first.endswith("0/4 it [00:00, ETA ?]")  # nothing measured yet
    assert last.endswith("4/4 it [00:00, ETA 0s]") and out.endswith("\n")


def test_se_bar_counts_evaluations_and_predicts_from_the_contraction():
    """The SE's bar (glm.se.staged_solve._Run) on a fake solve: a warm-up stage on 1000
    samples whose first evaluation compiles (60 s), then 0.1 s per evaluation; the
    residual halves per iteration; one later stage on 16000 samples.  ETA = 0.1 s x the
    iterations to the tolerance + ETA_STAGE_ITERATIONS evaluations of the later stage at
    16x the cost (scaled by the samples); then Newton below newton_below."""
    import math

    import numpy as np

    from symtheory.glm.se import staged_solve as ss

    class FakeSE:
        alpha, samples, channel = 0.5, 1000, object()

        def _free_entries(self):
            return [(0, 0)]

        def _from_free(self, q):
            return np.array([[q[0]]])

    clock, se = _Clock(), FakeSE()
    run = ss._Run(se, 0.5, 1e-8, 0.05, 3, 300, False, clock=clock, later=[16000], budget=1200)
    q = np.array([0.5])
    clock.tick(60.0)
    run.record(1, q, 1e-1)
    assert run._bar.eta() is None  # one residual, cost unmeasured: unknown
    res = 1e-1
    for it in range(2, 6):
        clock.tick(0.1)
        res /= 2
        run.record(it, q, res)
    left = math.ceil(math.log(1e-8 * 1.5 / res) / math.log(0.5))
    later = ss.ETA_STAGE_ITERATIONS * 0.1 * 16
    assert run._bar.eta() == pytest.approx(0.1 * left + later, rel=1e-12)
    # the budget of 300 x 4 iterations plays no part: the old bar's ETA was
    # (60 + 0.4) / 5 s per iteration x 1195 iterations left = 4 h
    assert run._bar.eta() < 60
    # below newton_below: a few Newton steps, not the geometric tail
    run.newton_below = 1e-3
    clock.tick(0.1)
    run.record(6, q, 1e-4)
    assert run._bar.eta() == pytest.approx(0.1 * ss.ETA_NEWTON_STEPS + later, rel=1e-12)
    # the next stage: its own cost once measured (its first evaluation compiles)
    run.later, se.samples = [], 16000
    clock.tick(30.0)
    run.record(7, q, 1e-2)
    clock.tick(0.5)
    run.record(8, q, 1e-3)
    assert run._bar.cost(16000) == 0.5
    run.close()
