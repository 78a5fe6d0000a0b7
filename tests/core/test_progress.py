"""Progress bars: quiet when stderr is not a terminal, a newline when they end."""
from __future__ import annotations

import io
import sys

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
