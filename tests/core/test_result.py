"""The one Result base: its shared fields, the error kinds it accepts, aliases."""
import math
from dataclasses import dataclass

import numpy as np
import pytest

from symtheory.core.result import Result, alias


@dataclass
class _Overlap(Result):
    Qhat: object = None
    Q = alias("value", "the overlap")


def test_defaults_say_not_converged_and_not_estimated():
    r = Result()
    assert r.converged is False and r.error is None and math.isnan(r.residual)


def test_subclass_keeps_the_shared_fields_and_an_alias():
    r = _Overlap(value=np.eye(2), error=np.zeros((2, 2)), error_kind="stderr", converged=True,
                 iterations=3, residual=1e-9, method="m", message="ok", Qhat=np.ones((2, 2)))
    assert r.Q is r.value
    rep = r.report()
    assert rep["value"] == [[1.0, 0.0], [0.0, 1.0]] and rep["iterations"] == 3
    assert set(rep) == {"value", "error", "error_kind", "converged", "iterations", "residual",
                        "method", "message"}


def test_unknown_error_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="error_kind"):
        Result(error_kind="sigma")
