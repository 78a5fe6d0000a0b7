"""Refuse allocations that will not fit, saying how large they are."""
from __future__ import annotations

from .validate import ParameterError

#: fraction of the available memory one allocation may take
MAX_FRACTION = 0.8


def available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1024 or unit == "TB":
            return f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TB"


def check_allocation(nbytes: int, what: str) -> None:
    """Raise :class:`ParameterError` if ``nbytes`` exceed 80% of the available memory."""
    avail = available_bytes()
    if avail is not None and nbytes > MAX_FRACTION * avail:
        raise ParameterError(f"{what} needs {human(nbytes)}, but only {human(avail)} of memory "
                             f"is available; reduce the sizes (or use float32)")
