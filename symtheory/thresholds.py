"""Weak-recovery and grand-staircase thresholds (smi.md 7-8): the public entry points.

* :func:`weak_recovery` -- ``alpha_c = 1/lambda_max`` of the linearized SE (Eqs. 15-16)
  of any declared multi-index model, deterministic where the dimension allows, with an
  error estimate, the learnable subspace and, with ``precision=P``, ``P`` digits
  confirmed by a ``2P``-digit run;
* :func:`staircase` -- the next threshold of the grand staircase (Eqs. 17-18);
* :func:`linearized_operator` -- the operator itself (its tensor and matrix).

They live in :mod:`symtheory.glm.thresholds.weak_recovery`; this module re-exports them lazily so that
``import symtheory`` stays instant.
"""
from __future__ import annotations

import importlib

_EXPORTS = {"weak_recovery": "thresholds.weak_recovery", "staircase": "thresholds.staircase",
            "linearized_operator": "thresholds.expectations",
            "ThresholdResult": "thresholds.operator", "StaircaseMap": "thresholds.staircase"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"symtheory.glm.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
