"""Weak-recovery and grand-staircase thresholds (smi.md 7-8): the public entry points,
re-exported from :mod:`symtheory.glm.thresholds` (where they live and are documented).

* :func:`weak_recovery` -- ``alpha_c = 1/lambda_max`` of the linearized SE (Eqs. 15-16)
  of any declared multi-index model, deterministic where the dimension allows, with an
  error estimate, the learnable subspace and, with ``precision=P``, ``P`` digits
  confirmed by a ``2P``-digit run;
* :func:`staircase` -- the next threshold of the grand staircase (Eqs. 17-18);
* :func:`linearized_operator` -- the operator itself (its tensor and matrix);
* :class:`ThresholdResult`, :class:`StaircaseMap`.

``import symtheory`` does not load this module (``symtheory.thresholds`` is a lazy
submodule of the package); importing it loads the threshold numerics it names.
"""
from __future__ import annotations

from .glm.thresholds.expectations import linearized_operator
from .glm.thresholds.operator import ThresholdResult
from .glm.thresholds.staircase import StaircaseMap, staircase
from .glm.thresholds.weak_recovery import weak_recovery

__all__ = ["StaircaseMap", "ThresholdResult", "linearized_operator", "staircase",
           "weak_recovery"]
