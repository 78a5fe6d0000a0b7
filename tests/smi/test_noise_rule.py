"""Laplace-centred RQMC rule of GaussianNoiseChannel for |R| >= 2 non-affine indices
(glm/integrate/laplace_qmc.py, driver in glm/integrate/drivers/noise.py), checked
against the independent path: the tensor composite Gauss-Legendre box rule
(GaussianNoiseChannel._adaptive_tensor) on the same samples."""
import json
import math
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symtheory.core.quadrature import AdaptiveRule
from symtheory.core.validate import ParameterError
from symtheory.glm.integrate.laplace_qmc import LaplaceQMCRule, flip_patterns
from symtheory.glm.factors.gaussian_noise import NOISE_LAPLACE_RULE
from symtheory.glm.integrate.moments import Moments
from symtheory.smi import deep_attention, linear_tokens


@pytest.fixture(scope="module")
def model():
    return deep_attention(2, 2)         # P = 2, M = 2: |R| = 4, none affine


def _samples(model, q, delta, n, seed):
    rng = np.random.default_rng(seed)
    V = (1.0 - q) * np.eye(model.P)
    om = math.sqrt(q) * rng.standard_normal((n, model.P, model.M))
    Z = om + math.sqrt(1.0 - q) * rng.standard_normal((n, model.P, model.M))
    y = model.g(Z).reshape(n, -1) + math.sqrt(delta) * rng.standard_normal((n, 4))
    return y, om, V


#: the reference: the box rule with 4 Gauss-Legendre nodes per panel, levels 1 and 2 (8^4
#: and 16^4 nodes); its own error estimate (change between the levels) enters the bound
BOX = AdaptiveRule(rtol=1e-6, gauss_legendre=4, box_min_level=1, max_tensor_nodes=70_000)
#: a rule far tighter than the default, so that its stated error is what is checked
CHECKED = LaplaceQMCRule(tol=1e-2, points=256, max_points=256, scrambles=8, adapt=1, scan=32)


def test_default_rule_and_flips(model):
    ch = model.channel(0.1, check=False)
    assert ch.rule == NOISE_LAPLACE_RULE and ch.R.size == 4 and ch.S.size == 0
    # both layers are even: flips of layer 1, layer 2 and both, in z_R coordinates
    assert sorted(map(tuple, flip_patterns(model, list(ch.R)))) == sorted(
        [(-1, -1, 1, 1), (1, 1, -1, -1), (-1, -1, -1, -1)])
    assert isinstance(model.channel(0.1, AdaptiveRule(), check=False).rule, AdaptiveRule)
    with pytest.raises(ParameterError, match="Laplace-RQMC"):
        linear_tokens(2).channel(0.1, CHECKED)      # |R| = 0: nothing to integrate


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.floats(0.05, 0.9), delta=st.floats(0.05, 1.0), seed=st.integers(0, 10_000))
def test_against_box_rule(model, q, delta, seed):
    n = 100
    y, om, V = _samples(model, q, delta, n, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # the box may miss its 1e-6
        box = model.channel(delta, BOX, check=False)
        b = box.moments(y, om, V).posterior()
        err_b = box.last_accuracy.error
        ch = model.channel(delta, CHECKED, check=False)
        a = ch.moments(y, om, V).posterior()
        err_a = ch.last_accuracy.error
    sd = math.sqrt(1.0 - q)
    diff = np.maximum.reduce([np.abs(a[0] - b[0]),
                              np.abs(a[1] - b[1]).reshape(n, -1).max(axis=1) / sd,
                              np.abs(a[2] - b[2]).reshape(n, -1).max(axis=1) / sd ** 2])
    # err_a is a 95% half-width of each moment (max over the 15 moments), err_b the box's
    # change between its levels: a sample may exceed their sum by chance, ~5% per moment;
    # 15% of the samples allows for that, a wrong rule or a wrong error misses it broadly
    bound = err_a + err_b
    assert np.all(np.isfinite(a[0])) and np.all(np.isfinite(err_a))
    assert np.mean(diff > bound) <= 0.15, (np.mean(diff > bound), np.median(diff), np.median(bound))
    # no bias: the mean of g_out over the samples (what the SE averages) agrees within
    # 4 standard errors of the per-sample differences plus the mean stated error
    ga, _ = Moments.from_posterior(*a, om, V).output_functions()
    gb, _ = Moments.from_posterior(*b, om, V).output_functions()
    dg = (ga - gb).reshape(n, -1)
    slack = 4 * dg.std(axis=0) / math.sqrt(n) + np.mean(bound) / sd
    assert np.all(np.abs(dg.mean(axis=0)) <= slack), (dg.mean(axis=0), slack)


def test_stated_accuracy_and_escalation(model):
    y, om, V = _samples(model, 0.5, 0.1, 60, 3)
    rule = LaplaceQMCRule(tol=0.05, points=32, max_points=512, scrambles=8, adapt=1, scan=32)
    ch = model.channel(0.1, rule, check=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ch.moments(y, om, V).posterior()
    acc = ch.last_accuracy
    assert acc.tolerance == 0.05 and "Laplace-centred RQMC" in acc.method
    assert acc.error.shape == (60,) and np.all(acc.error > 0)
    # a sample stops at the first level that meets the tolerance; only the last level may
    # leave it above
    done_early = ch.points_used < rule.max_points
    assert np.all(acc.error[done_early] <= rule.tol)
    assert set(np.unique(ch.points_used)) <= {32, 128, 512}
    assert 1 <= ch.components.min() and ch.components.max() <= 1 + 3 + 3


@pytest.mark.slow
def test_cli_acceptance(tmp_path):
    """Issue 9: `symtheory smi se --noise 0.1 --alpha 1.0` converges, in under 60 s on an
    idle 2-core machine (numba cache warm; 48 s measured at 16384 samples on 2026-11-25: the
    per-point helpers without reference counting, the warm-up ladder, Newton after it; on
    2026-11-27's slower machine that was 62-65 s, and 41-42 s with the final stage starting
    from the warm-up's Jacobian)."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    cmd = [sys.executable, "-c", "import sys; from symtheory.cli import main; sys.exit(main())",
           "smi", "se", "--noise", "0.1", "--alpha", "1.0", "--quiet", "--format", "json"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600,
                          cwd=tmp_path)
    elapsed = time.time() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout)["rows"][0]
    assert row["converged"] is True, row
    assert np.isfinite(float(row["channel_error"]))
    # the target holds for an idle 2-core machine (issue 9); SYMTHEORY_TIME_FACTOR scales it
    # on a shared one
    limit = 60.0 * float(os.environ.get("SYMTHEORY_TIME_FACTOR", "1"))
    print(f"smi se --noise 0.1 --alpha 1.0: {elapsed:.1f} s, channel_error "
          f"{float(row['channel_error']):.3g}")
    assert elapsed < limit, f"{elapsed:.1f} s >= {limit:.0f} s"
