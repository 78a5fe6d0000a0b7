"""Shared test configuration.

Hypothesis: no deadline (first calls load or compile kernels), a modest number of
examples so the default run stays within its time budget; the ``ci`` profile is
derandomized for reproducible CI logs.  ``thorough`` (1000 examples) is what the
``@pytest.mark.slow`` kernel-vs-mpmath properties use (``pytest -m slow``); setting
``HYPOTHESIS_PROFILE=thorough`` applies it to every property.
"""
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, max_examples=25,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: settings for the slow, exhaustive kernel-vs-mpmath properties: ``@THOROUGH``
THOROUGH = settings.get_profile("thorough")

#: reference data from the papers' public code (vendored copy, see reference/README.md)
REFERENCE = Path(os.environ.get("SYMTHEORY_REFERENCE", Path(__file__).resolve().parent / "reference"))


def pytest_addoption(parser):
    parser.addoption("--refresh-golden", action="store_true", default=False,
                     help="rewrite the generated-kernel snapshots under tests/golden/")


#: the package's example declarations (tests load them as a user runs them)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="session")
def door():
    """``(channel, params)`` of the symmetric door ``y = sign(|u| - K)`` with ``K =
    Phi^{-1}(3/4)`` (``P(y = 1) = 1/2``), from examples/symmetric_door.py."""
    import runpy

    from scipy.special import ndtri

    return runpy.run_path(str(EXAMPLES / "symmetric_door.py"))["channel"], (float(ndtri(0.75)),)
