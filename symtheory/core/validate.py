"""Input validation: every error names the parameter and its valid range.

Messages read ``<name> must be in <range>, got <value>`` so that the command line can
show them unchanged (``symtheory.core.cli_common`` passes option names such as
``--damping`` as ``name``).
"""
from __future__ import annotations

import math


class ParameterError(ValueError):
    """A parameter is outside its domain."""


def interval(low=None, high=None, *, low_open=False, high_open=False, allow_inf=False) -> str:
    """``[low, high)``-style text of a range.  A ``None`` end is infinite: open, or closed
    when ``allow_inf`` admits that infinity (``(0, inf]``)."""
    lo_b = "(" if low_open or (low is None and not allow_inf) else "["
    hi_b = ")" if high_open or (high is None and not allow_inf) else "]"
    return f"{lo_b}{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}{hi_b}"


def real(name: str, value, *, low=None, high=None, low_open=False, high_open=False,
         allow_inf=False) -> float:
    """Return ``float(value)`` or raise :class:`ParameterError` naming the valid range.

    ``allow_inf`` admits ``+inf`` (when ``high`` is ``None``) and ``-inf`` (when ``low``
    is ``None``); NaN is always refused.
    """
    rng = interval(low, high, low_open=low_open, high_open=high_open, allow_inf=allow_inf)
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"{name} must be a real number in {rng}, got {value!r}") from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ParameterError(f"{name} must be finite and in {rng}, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ParameterError(f"{name} must be in {rng}, got {v:g}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ParameterError(f"{name} must be in {rng}, got {v:g}")
    return v


def as_integer(value):
    """``int`` of an integral value (``4``, ``4.0``, ``"4"``, ``"1e3"``), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
        try:
            f = float(value)
        except ValueError:
            return None
        return int(f) if math.isfinite(f) and f.is_integer() else None
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if v == value else None


def integer(name: str, value, *, low=None, high=None) -> int:
    """Return the integral ``value`` as ``int`` if it lies in ``[low, high]``, else raise
    :class:`ParameterError` naming the range."""
    if low is not None and high is not None:
        rng = f"an integer in [{low}, {high}]"
    elif low is not None:
        rng = f"an integer >= {low}"
    elif high is not None:
        rng = f"an integer <= {high}"
    else:
        rng = "an integer"
    v = as_integer(value)
    if v is None:
        raise ParameterError(f"{name} must be {rng}, got {value!r}")
    if (low is not None and v < low) or (high is not None and v > high):
        raise ParameterError(f"{name} must be {rng}, got {v}")
    return v


def choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices``, else :class:`ParameterError` listing them."""
    if value not in choices:
        raise ParameterError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value
