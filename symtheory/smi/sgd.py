"""Minibatch SGD on a same-architecture student: the layer-wise experiment of smi.md 15
(Troiani et al. 2025, Fig. 2 right; the reference's ``GD_2w.ipynb``).

Teacher data ``y_mu = g(W* x_mu / sqrt d)`` from :func:`symtheory.smi.data.generate`
(``n = round(alpha d)`` sequences, ``W*`` i.i.d. N(0, 1)).  The student is the declared
model itself: its output is the model's link ``g`` (the SymPy expression, turned into a
JAX function by ``lambdify``) on ``Z = W x / sqrt d``, so teacher and student share one
statement of the architecture.  As smi.md 15 states the protocol:

* init ``W_0 = init_scale * N(0, 1)`` entries (``init_scale = 0.9``);
* loss on a batch ``B``: ``sum_{mu in B, i, j} (g(W x_mu/sqrt d)_ij - y_mu,ij)^2 / d``;
* plain SGD with weight decay as PyTorch applies it: ``W <- W - lr (grad + wd W)``,
  ``lr = 15``, ``wd = 0.07 / d``;
* batches of 200 (a fresh seeded permutation every epoch, the last batch may be
  smaller), each batch used for 3 consecutive steps;
* tracked per layer ``l`` (index row): ``cos_l = (W_l . W*_l / d) / sqrt(W_l . W_l / d)``
  (the notebook's signed formula; the model is even in each ``W_l``, so ``-W*_l`` is as
  good as ``W*_l``), and the test error on fresh sequences
  ``mean ||g(W x/sqrt d) - y||_F^2`` (summed over the output entries, the package's
  convention; the notebook's ``torch.mean`` over entries is this divided by ``M^2``).

Computations run in float32 (JAX's default on CPU); overlaps and errors are taken in
float64.  Needs JAX and optax (the ``gd`` extra), imported on first use only.
"""
from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass, field

from ..core import validate
from .params import PAPER_SGD

#: smi.md 15 (GD_2w.ipynb)
PAPER = PAPER_SGD


@dataclass
class SGDResult:
    """One SGD run; histories have one row per recorded epoch (epoch 0 = the start)."""

    epochs: object          # (R,) recorded epochs
    cosine: object          # (R, P) signed cosine of each index row with the teacher row
    M: object               # (R, P) teacher overlaps W_l . W*_l / d
    Q: object               # (R, P) self overlaps W_l . W_l / d
    test_error: object      # (R,) mean squared Frobenius error on fresh sequences
    train_loss: object      # (R,) mean ||g - y||_F^2 per training sequence
    W: object               # (P, d) final student
    diverged: bool
    message: str
    wall_time: float
    params: dict = field(default_factory=dict)


def import_jax():
    """``(jax, jax.numpy)``, or an ImportError naming the ``gd`` extra."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        raise ImportError(f"smi SGD needs JAX ({exc.name} is missing): install the 'gd' extra, "
                          "e.g. pip install 'symtheory[gd]'") from exc
    return jax, jnp


def link_function(model):
    """The model's link ``g`` as a JAX function ``Z (n, P, M) -> (n, n_out)`` (SymPy
    ``lambdify`` of the declared expression with its parameters substituted)."""
    import sympy as sp

    jax, jnp = import_jax()
    exprs = list(model.link.subs(model.params))
    f = sp.lambdify(list(model.indices), exprs, modules="jax", cse=True)
    P, M = model.P, model.M

    def g(Z):
        cols = [Z[:, a, m] for a in range(P) for m in range(M)]
        out = f(*cols)
        return jnp.stack([jnp.broadcast_to(o, Z.shape[:1]) for o in out], axis=-1)

    return g


def sgd_step(model, d: int, lr: float, weight_decay: float, repeats: int):
    """``(loss, on_batch)``: the batch loss ``sum (g(W x/sqrt d) - y)^2 / d`` and the update
    of one batch, ``repeats`` SGD steps ``W <- W - lr (grad loss + weight_decay W)``
    (PyTorch's ``SGD(weight_decay=...)``).  ``X`` batches are ``(b, d, M)``, ``y`` ``(b,
    n_out)``."""
    jax, jnp = import_jax()
    g = link_function(model)
    inv_sqrt_d = 1.0 / math.sqrt(d)

    def loss(W, Xb, yb):
        Z = jnp.einsum("pd,sdm->spm", W, Xb) * inv_sqrt_d
        return jnp.sum((g(Z) - yb) ** 2) / d

    grad = jax.grad(loss)

    def on_batch(W, Xb, yb):
        def step(_, W):
            return W - lr * (grad(W, Xb, yb) + weight_decay * W)
        return jax.lax.fori_loop(0, repeats, step, W)

    return loss, on_batch


@functools.lru_cache(maxsize=8)
def _compiled(model, d, lr, weight_decay, repeats):
    """Jitted ``(data loss, one batch, an epoch of full batches)``, built once per setting
    (runs of several seeds in one process compile once)."""
    jax, _ = import_jax()
    loss, on_batch = sgd_step(model, d, lr, weight_decay, repeats)

    def full_batches(W, X, y, idx):
        def body(W, rows):
            return on_batch(W, X[rows], y[rows]), None
        return jax.lax.scan(body, W, idx)[0]

    return jax.jit(loss), jax.jit(on_batch), jax.jit(full_batches)


def sgd_layerwise(model, d: int, alpha: float, *, seed: int = 0, epochs: int = PAPER["epochs"],
                  lr: float = PAPER["lr"], weight_decay: float | None = None,
                  batch: int = PAPER["batch"], repeats: int = PAPER["repeats"],
                  init_scale: float = PAPER["init_scale"], record_every: int = 1,
                  test_samples: int = 1000, noise_variance: float = 0.0,
                  progress: bool = False) -> SGDResult:
    """Train a student of ``model`` by minibatch SGD on seeded teacher data (module
    docstring).  ``weight_decay`` defaults to ``0.07 / d``; ``seed`` fixes the teacher
    data (as :func:`~symtheory.smi.data.generate`), the test set, the initialization and
    the batch order (independent streams of ``numpy.random.SeedSequence([seed, k])``)."""
    import numpy as np

    from ..core.progress import progress_bar
    from ..core.solvers import ConvergenceWarning
    from .data import generate

    d = validate.integer("d", d, low=2)
    alpha = validate.real("alpha", alpha, low=0, low_open=True)
    seed = validate.integer("seed", seed, low=0)
    epochs = validate.integer("epochs", epochs, low=1)
    lr = validate.real("lr", lr, low=0, low_open=True)
    wd = 0.07 / d if weight_decay is None else validate.real("weight_decay", weight_decay, low=0)
    batch = validate.integer("batch", batch, low=1)
    repeats = validate.integer("repeats", repeats, low=1)
    init_scale = validate.real("init_scale", init_scale, low=0, low_open=True)
    record_every = validate.integer("record_every", record_every, low=1)
    test_samples = validate.integer("test_samples", test_samples, low=0)
    jax, jnp = import_jax()

    data = generate(model, d, alpha, seed=seed, noise_variance=noise_variance)
    n, P, Mt = data.X.shape[0], model.P, model.M
    test_rng = np.random.default_rng([seed, 1])
    X_test = test_rng.standard_normal((test_samples, d, Mt))
    y_test = model.g(np.einsum("pd,sdm->spm", data.W, X_test) / math.sqrt(d)).reshape(
        test_samples, -1) if test_samples else None
    rng = np.random.default_rng([seed, 2])  # initialization, then the batch order
    W0 = init_scale * rng.standard_normal((P, d))

    data_loss, last_batch, full_batches = _compiled(model, d, lr, wd, repeats)
    inv_sqrt_d = 1.0 / math.sqrt(d)
    X = jnp.asarray(data.X, dtype=jnp.float32)
    y = jnp.asarray(data.y, dtype=jnp.float32)
    W = jnp.asarray(W0, dtype=jnp.float32)
    n_full = n // batch
    rec = {"epochs": [], "cosine": [], "M": [], "Q": [], "test_error": [], "train_loss": []}

    def record(epoch, W):
        Wn = np.asarray(W, dtype=float)
        Mo = np.sum(Wn * data.W, axis=1) / d
        Qo = np.sum(Wn * Wn, axis=1) / d
        rec["epochs"].append(epoch)
        rec["M"].append(Mo)
        rec["Q"].append(Qo)
        rec["cosine"].append(Mo / np.sqrt(np.maximum(Qo, 1e-300)))
        if test_samples:
            pred = model.g(np.einsum("pd,sdm->spm", Wn, X_test) * inv_sqrt_d).reshape(test_samples, -1)
            rec["test_error"].append(float(np.mean(np.sum((pred - y_test) ** 2, axis=1))))
        else:
            rec["test_error"].append(math.nan)
        rec["train_loss"].append(float(data_loss(W, X, y)) * d / n)  # mean ||g - y||_F^2 per sequence

    start = time.perf_counter()
    record(0, W)
    diverged, message = False, f"ran {epochs} epochs"
    for epoch in progress_bar(range(1, epochs + 1), desc="SGD", enabled=progress):
        perm = rng.permutation(n)
        if n_full:
            W = full_batches(W, X, y, jnp.asarray(perm[:n_full * batch].reshape(n_full, batch)))
        if n % batch:
            rest = perm[n_full * batch:]
            W = last_batch(W, X[rest], y[rest])
        if epoch % record_every == 0 or epoch == epochs:
            if not bool(jnp.all(jnp.isfinite(W))):
                diverged, message = True, f"non-finite weights at epoch {epoch} (lr={lr})"
                warnings.warn(f"SGD diverged: {message}", ConvergenceWarning, stacklevel=2)
                break
            record(epoch, W)
    params = {"d": d, "alpha": alpha, "n": n, "seed": seed, "epochs": epochs, "lr": lr,
              "weight_decay": wd, "batch": batch, "repeats": repeats, "init_scale": init_scale,
              "record_every": record_every, "test_samples": test_samples,
              "noise_variance": noise_variance, "model": model.description,
              "seeds": {"teacher data": seed, "test set": [seed, 1],
                        "initialization and batch order": [seed, 2]},
              "precision": "float32 training, float64 overlaps and errors"}
    return SGDResult(np.array(rec["epochs"]), np.array(rec["cosine"]), np.array(rec["M"]),
                     np.array(rec["Q"]), np.array(rec["test_error"]), np.array(rec["train_loss"]),
                     np.asarray(W, dtype=float), diverged, message,
                     time.perf_counter() - start, params)


def epoch_learned(result: SGDResult, threshold: float = 0.8):
    """Per index row, the first recorded epoch with ``|cos_l| >= threshold`` (None: never).
    0.8: with lr 15 the SGD noise keeps the cosines on plateaus of 0.83-0.99 (d = 100-500),
    so a threshold nearer 1 can miss a learned layer."""
    import numpy as np

    out = []
    for a in range(result.cosine.shape[1]):
        hit = np.nonzero(np.abs(result.cosine[:, a]) >= threshold)[0]
        out.append(int(result.epochs[hit[0]]) if hit.size else None)
    return out
