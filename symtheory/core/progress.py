"""Progress reporting for long runs: tqdm on stderr, quiet when disabled or when stderr
is not a terminal (a log file gets no bar), and ending with a newline when closed (so the
next line, e.g. "wrote ...", starts on its own line).

The time left is the package's own estimate, not tqdm's: the cost of a unit of work is
measured on the updates that did not compile anything (the first update of a loop, or of
a stage of a solver, loads or compiles its kernels and may take 100x the others), and
multiplied by the work left as the caller estimates it.  Until a cost is measured, or
while the work left is unknown, the bar says ``ETA ?`` rather than guess.
"""
from __future__ import annotations

import statistics
import sys
import time


def format_seconds(seconds) -> str:
    """``"?"``, ``"42s"``, ``"3m05s"`` or ``"2h07m"``."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


_NOTHING = object()  # no kind measured yet (None is a kind)


class WorkBar:
    """A progress bar in units of work (``desc``; ``unit`` names them) with an honest ETA.

    ``advance(work, kind=..., warm=...)`` records ``work`` units of ``kind`` done since
    the last call (its time from ``clock``, :func:`time.monotonic` unless a test passes a
    fake one); ``warm=True`` marks an update that includes compilation or loading: its
    time is not used for the cost per unit.  Units of different kinds cost differently
    (e.g. map evaluations on different sample counts); the cost of a kind is the median
    over its measured updates, and a kind not measured yet costs ``scale(cost, measured
    kind, kind)`` of the last kind measured (default: the same).  ``remaining(work)`` sets
    the caller's estimate of the work left: a number of units of the last kind, a list of
    ``(units, kind)``, or ``None`` (unknown).  :meth:`eta` is the sum of units x cost.
    ``enabled=False`` or a stderr that is not a terminal shows nothing (the estimate is
    still kept).
    """

    def __init__(self, *, desc: str = "", unit: str = "it", total=None, initial=0,
                 enabled: bool = True, clock=time.monotonic, scale=None, file=None):
        self.clock, self.done, self.scale = clock, 0.0, scale or (lambda c, a, b: c)
        self._costs: dict = {}
        self._kind, self._measured = None, _NOTHING
        self.left = None if total is None else [(float(total - initial), None)]
        self.note = ""  # shown after the ETA (e.g. "failed=0, lost=0")
        self._last = clock()
        self._bar = None
        if enabled:
            from tqdm import tqdm

            # disable=None: tqdm turns itself off when the stream is not a TTY; our ETA
            # replaces tqdm's remaining time (its rate averages in the compiling updates)
            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                             file=file or sys.stderr,
                             leave=True, disable=None, dynamic_ncols=True, mininterval=0.5,
                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} "
                                        "[{elapsed}{postfix}]")
            self._show(refresh=True)

    def advance(self, work=1.0, *, kind=None, warm: bool = False) -> None:
        t = self.clock()
        if not warm and work > 0:
            self._costs.setdefault(kind, []).append((t - self._last) / work)
            self._measured = kind
        self._last, self._kind = t, kind
        self.done += work
        if self.left is not None and len(self.left) == 1:  # a plain count goes down
            self.left = [(max(self.left[0][0] - work, 0.0), self.left[0][1])]
        if self._bar is not None:
            self._bar.update(work)
        self._show()

    def remaining(self, work) -> None:
        if work is None:
            self.left = None
        elif isinstance(work, (int, float)):
            self.left = [(max(float(work), 0.0), self._kind)]
        else:
            self.left = [(max(float(n), 0.0), k) for n, k in work]
        if self._bar is not None:
            total = None if self.left is None else self._bar.n + sum(n for n, _ in self.left)
            self._bar.total = int(total) if total is not None and total == int(total) else total
        self._show()

    def cost(self, kind=None):
        """Seconds per unit of ``kind`` (``None``: nothing measured yet)."""
        if kind in self._costs:
            return statistics.median(self._costs[kind])
        if self._measured is _NOTHING:
            return None
        return self.scale(statistics.median(self._costs[self._measured]), self._measured, kind)

    def eta(self):
        """Seconds left, or ``None`` when a cost or the work left is unknown."""
        if self.left is None or self._measured is _NOTHING:
            return None
        return sum(n * self.cost(k) for n, k in self.left if n > 0)

    def _show(self, refresh=False) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(f"ETA {format_seconds(self.eta())}"
                                      + (f", {self.note}" if self.note else ""), refresh=refresh)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def progress_bar(iterable, *, desc: str = "", enabled: bool = True, total=None, clock=time.monotonic):
    """``iterable`` with a :class:`WorkBar` (one unit per item; the first item, which
    compiles or loads the kernels, is not used for the ETA); the plain iterable when not
    ``enabled``."""
    if not enabled:
        return iterable
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    return _counted(iterable, WorkBar(desc=desc, total=total, clock=clock))


def _counted(iterable, bar):
    try:
        for i, item in enumerate(iterable):
            yield item
            bar.advance(1, warm=i == 0)
    finally:
        bar.close()
