"""Progress reporting for long runs: tqdm on stderr, quiet when disabled or when stderr
is not a terminal (a log file gets no bar), and ending with a newline when closed (so the
next line, e.g. "wrote ...", starts on its own line)."""
from __future__ import annotations

import sys


def progress_bar(iterable, *, desc: str = "", enabled: bool = True, total=None):
    if not enabled:
        return iterable
    from tqdm import tqdm

    # disable=None: tqdm turns itself off when stderr is not a TTY
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, leave=True, disable=None,
                dynamic_ncols=True, mininterval=0.5)
