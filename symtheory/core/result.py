"""One result type for every computation: its value(s), their error bars and how it went.

Every solver, state evolution, threshold and GAMP run of the package returns a
:class:`Result` or a subclass, so a caller (the CLI, the sweep store, a notebook) can
always read

========================  =============================================================
``value``                 the computed value(s): a number, an array, an ``mpf``
``error``                 its error bar (same shape), ``None`` when not estimated;
                          ``error_kind`` says which: ``"stderr"`` (a Monte-Carlo standard
                          error), ``"bound"`` (a certified bound on ``|value - exact|``)
                          or ``"estimate"`` (an a-posteriori estimate, e.g. the change
                          against a finer rule)
``converged``             the method met its own criterion (a report, never silence:
                          a run that did not is returned with ``converged=False``)
``iterations``            iterations or function evaluations spent
``residual``              the method's last residual (its stopping quantity)
``method``                how the value was computed
``message``               what happened, in words
========================  =============================================================

Subclasses add what is specific (an overlap matrix's ``Q_hat``, a threshold's
subspace, a GAMP trace) and may name ``value`` after what it is with :func:`alias`
(``SEResult.Q`` is its ``value``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

#: the kinds of error bar a result may carry
ERROR_KINDS = ("", "stderr", "bound", "estimate")


@dataclass(kw_only=True)
class Result:
    """Value(s), error bar and convergence report of a computation (module docstring)."""

    value: Any = None
    error: Any = None
    error_kind: str = ""
    converged: bool = False
    iterations: int = 0
    residual: float = math.nan
    method: str = ""
    message: str = ""

    def __post_init__(self):
        if self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind must be one of {ERROR_KINDS}, got {self.error_kind!r}")

    def report(self) -> dict:
        """Return the fields every result shares, as plain Python values (for tables and JSON).

        Returns
        -------
        dict
            ``value, error, error_kind, converged, iterations, residual, method, message``;
            arrays as nested lists.

        Examples
        --------
        >>> from symtheory.bsr import MMSEEstimate
        >>> MMSEEstimate(value=0.25, error=0.5, method="bounds").report()["method"]
        'bounds'
        """
        out = {}
        for f in fields(Result):
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if hasattr(v, "tolist") else v
        return out


def alias(field_name: str, doc: str = ""):
    """A read-only attribute that is another field of the result (``Q = alias("value")``)."""

    def get(self):
        return getattr(self, field_name)

    return property(get, doc=doc or f"Same as ``{field_name}``.")
