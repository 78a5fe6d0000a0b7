"""Input validation: every error names the parameter and its valid range."""
from __future__ import annotations

import math


class ParameterError(ValueError):
    """A parameter is outside its domain."""


def real(name: str, value, *, low=None, high=None, low_open=False, high_open=False,
         allow_inf=False) -> float:
    """Return ``float(value)`` or raise :class:`ParameterError` naming the valid range."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a real number, got {value!r}") from None
    lo_b = "(" if low_open else "["
    hi_b = ")" if high_open else "]"
    rng = f"{lo_b}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi_b}"
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ParameterError(f"{name} must be finite and in {rng}, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ParameterError(f"{name} must be in {rng}, got {v:g}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ParameterError(f"{name} must be in {rng}, got {v:g}")
    return v


def integer(name: str, value, *, low=None) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be an integer, got {value!r}") from None
    if v != value and not isinstance(value, str):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    if low is not None and v < low:
        raise ParameterError(f"{name} must be an integer >= {low}, got {v}")
    return v
