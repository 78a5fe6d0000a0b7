"""Minibatch SGD on attention students (smi.md 15, Fig. 2 right): the JAX student is the
declared link, its update is W <- W - lr (grad + wd W) with the gradient checked against
finite differences of an independent float64 path, runs are reproducible from their seed,
bad input is refused, the command line writes table + parameters + plot, and (slow) layer 2
is learned before layer 1."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("jax")

from symtheory.core.validate import ParameterError
from symtheory.smi.sgd import epoch_learned, link_function, sgd_layerwise, sgd_step
from symtheory.smi.tasks import build_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    return build_model("attention", 2, 2, 1.0, 1.0)


@pytest.fixture(scope="module")
def jax_link(model):
    import jax

    return jax.jit(link_function(model))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.floats(0.1, 4.0))
def test_jax_link_is_the_compiled_link(model, jax_link, seed, scale):
    """lambdify(jax) of the declared link vs the generated numba kernel (float64): JAX
    computes in float32, whose rounding (eps 6e-8) over the ~100 operations of the two-layer
    softmax stays far below 1e-5 on outputs in [0, 1]."""
    import jax.numpy as jnp

    Z = scale * np.random.default_rng(seed).standard_normal((64, model.P, model.M))
    got = np.asarray(jax_link(jnp.asarray(Z, dtype=jnp.float32)))
    assert np.max(np.abs(got - model.g(Z).reshape(64, -1))) < 1e-5


def test_update_is_sgd_with_weight_decay_on_the_finite_difference_gradient(model):
    """One step of `on_batch` = W - lr (grad + wd W), with grad from central differences
    of the loss sum (g(W x/sqrt d) - y)^2 / d computed in float64 through the numba
    kernel (independent of JAX).  h = 1e-5: truncation ~h^2 |g'''| ~ 1e-10; the float32
    JAX gradient is exact to ~1e-6 relative, so 1e-4 of the largest entry is loose."""
    import jax.numpy as jnp

    d, b, lr, wd = 7, 5, 0.3, 0.02
    rng = np.random.default_rng(4)
    W = rng.standard_normal((model.P, d))
    X = rng.standard_normal((b, d, model.M))
    y = model.g(np.einsum("pd,sdm->spm", rng.standard_normal((model.P, d)), X) / math.sqrt(d))
    y = y.reshape(b, -1)

    def loss64(W):
        pred = model.g(np.einsum("pd,sdm->spm", W, X) / math.sqrt(d)).reshape(b, -1)
        return float(np.sum((pred - y) ** 2) / d)

    h = 1e-5
    grad = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        e = np.zeros_like(W)
        e[idx] = h
        grad[idx] = (loss64(W + e) - loss64(W - e)) / (2 * h)
    loss, on_batch = sgd_step(model, d, lr, wd, repeats=1)
    assert float(loss(jnp.asarray(W), jnp.asarray(X), jnp.asarray(y))) == pytest.approx(loss64(W), rel=1e-5)
    got = np.asarray(on_batch(jnp.asarray(W, dtype=jnp.float32), jnp.asarray(X, dtype=jnp.float32),
                              jnp.asarray(y, dtype=jnp.float32)))
    want = W - lr * (grad + wd * W)
    assert np.max(np.abs(got - want)) < 1e-4 * max(1.0, np.max(np.abs(lr * grad)))
    # repeats = 3: three such steps on the same batch
    _, three = sgd_step(model, d, lr, wd, repeats=3)
    W3 = jnp.asarray(W, dtype=jnp.float32)
    for _ in range(3):
        W3 = on_batch(W3, jnp.asarray(X, dtype=jnp.float32), jnp.asarray(y, dtype=jnp.float32))
    got3 = three(jnp.asarray(W, dtype=jnp.float32), jnp.asarray(X, dtype=jnp.float32),
                 jnp.asarray(y, dtype=jnp.float32))
    assert np.allclose(np.asarray(got3), np.asarray(W3), rtol=0, atol=1e-6)


def test_runs_are_reproducible_and_record_what_they_did(model):
    kw = dict(seed=3, epochs=3, batch=16, test_samples=50)
    a = sgd_layerwise(model, 20, 3.0, **kw)
    b = sgd_layerwise(model, 20, 3.0, **kw)
    assert np.array_equal(a.W, b.W) and np.array_equal(a.cosine, b.cosine)
    assert a.epochs.tolist() == [0, 1, 2, 3] and a.cosine.shape == (4, 2)
    assert np.allclose(a.cosine, a.M / np.sqrt(a.Q))
    assert a.params["weight_decay"] == pytest.approx(0.07 / 20) and a.params["n"] == 60
    assert a.params["seeds"]["teacher data"] == 3 and not a.diverged
    c = sgd_layerwise(model, 20, 3.0, **dict(kw, seed=4))
    assert not np.array_equal(a.W, c.W)


@pytest.mark.parametrize("kw, key", [
    ({"batch": 0}, "batch"), ({"lr": -1.0}, "lr"), ({"epochs": 0}, "epochs"),
    ({"init_scale": 0.0}, "init_scale"), ({"weight_decay": -0.1}, "weight_decay")])
def test_bad_input_is_refused_naming_the_parameter(model, kw, key):
    with pytest.raises(ParameterError, match=key):
        sgd_layerwise(model, 10, 1.0, **kw)


def test_divergence_is_reported(model):
    with pytest.warns(UserWarning, match="diverged"):
        res = sgd_layerwise(model, 10, 2.0, epochs=3, lr=1e30, batch=5, test_samples=0)
    assert res.diverged and "non-finite" in res.message


def test_cli_writes_table_params_and_plot(tmp_path, capsys):
    from symtheory.cli import main

    code = main(["smi", "sgd", "--d", "20", "--alpha", "3", "--epochs", "2", "--batch", "16",
                 "--test-samples", "50", "--seed", "1", "--quiet", "--out", str(tmp_path), "--plot"])
    assert code == 0
    rows = (tmp_path / "smi_sgd.csv").read_text().splitlines()
    assert rows[0].split(",")[:2] == ["epoch", "cosine1"] and len(rows) == 4
    params = json.loads((tmp_path / "smi_sgd.params.json").read_text())
    text = json.dumps(params)
    assert '"lr": 15.0' in text and '"seed": 1' in text and "weight_decay" in text
    assert (tmp_path / "smi_sgd.png").stat().st_size > 0


def test_cli_rejects_bad_option():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "symtheory.cli", "smi", "sgd", "--lr", "-2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--lr" in out.stderr


@pytest.mark.slow
def test_layer_two_is_learned_before_layer_one(model):
    """smi.md 15 / Fig. 2 right at d = 200 (the paper: d = 500), the paper's protocol:
    for both seeds layer 2 reaches |cos| >= 0.8 within a few epochs while layer 1 is
    still below 0.5, and layer 1 reaches it only later or never (measured: layer 2 at
    epochs 1 and 3-5, layer 1 at 14-40; the plateaus are 0.89-0.96, SGD noise at lr 15)."""
    for seed in (0, 1):
        res = sgd_layerwise(model, 200, 15.0, seed=seed, epochs=60, test_samples=200)
        l1, l2 = epoch_learned(res, 0.8)
        assert l2 is not None and l2 <= 8, (seed, l1, l2)
        assert abs(res.cosine[res.epochs.tolist().index(l2), 0]) < 0.5
        assert l1 is None or l1 > l2 + 3, (seed, l1, l2)


def test_cli_trains_a_model_declared_in_a_file(tmp_path):
    """`--model-file` (issue 8: every smi subcommand takes a declared model): a phase-retrieval
    student (P = 1 row) trains and writes one cosine column; a shape option next to the
    file is refused, not ignored."""
    from symtheory.cli import main

    example = str(ROOT / "examples" / "phase_retrieval.py")
    code = main(["smi", "sgd", "--model-file", example, "--d", "20", "--alpha", "3",
                 "--epochs", "2", "--batch", "16", "--lr", "0.5", "--test-samples", "50",
                 "--seed", "1", "--quiet", "--out", str(tmp_path)])
    assert code == 0
    header = (tmp_path / "smi_sgd.csv").read_text().splitlines()[0].split(",")
    assert "cosine1" in header and "cosine2" not in header
    assert main(["smi", "sgd", "--model-file", example, "--depth", "3", "--quiet"]) == 2
