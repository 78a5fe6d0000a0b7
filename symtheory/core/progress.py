"""Progress reporting for long sweeps (tqdm on stderr; silent when disabled)."""
from __future__ import annotations

import sys


def progress_bar(iterable, *, desc: str = "", enabled: bool = True, total=None):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, leave=False,
                dynamic_ncols=True, mininterval=0.5)
