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

#: smi.md 15 (GD_2w.ipynb)
PAPER = {"d": 500, "lr": 15.0, "weight_decay_d": 0.07, "batch": 200, "repeats": 3,
         "init_scale": 0.9, "epochs": 1700, "alpha": 15.0}


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


# ----------------------------------------------------------------------- command line
SGD_COLUMNS = (
    "Columns (one row per recorded epoch, epoch 0 = the initialization): epoch; for each "
    "layer (index row) l: cosine_l = (W_l . W*_l/d)/sqrt(W_l . W_l/d) (signed, the "
    "notebook's formula; the model is even in W_l), M_l = W_l . W*_l/d, Q_l = W_l . W_l/d; "
    "test_error = mean ||g(W x/sqrt d) - y||_F^2 on fresh sequences (the notebook's "
    "torch.mean over entries is this / M^2); train_error = the same on the training data.")


def register_cli(ssub) -> None:
    """The ``symtheory smi sgd`` subcommand (light imports: the parser only)."""
    from ..core.cli_common import add_output, add_seed, describe, int_arg, real_arg

    p = ssub.add_parser(
        "sgd", help="minibatch SGD on a same-architecture attention student (smi.md 15, "
                    "Fig. 2 right)",
        description=describe(
            "Two-layer (or --depth) tied softmax attention student trained by plain "
            "minibatch SGD on alpha = n/d teacher sequences (n samples of seq_len tokens in "
            "dimension d), as smi.md 15 (GD_2w.ipynb) states: init "
            "init-scale x N(0,1), loss sum (y_hat - y)^2/d per batch, W <- W - lr (grad + "
            "wd W) with wd = weight-decay-d/d, each batch used for --repeats steps, a fresh "
            "seeded batch order every epoch.  Tracks the cosine of each layer with the "
            "teacher (layer 2 is learned before layer 1).  Needs JAX (the 'gd' extra).",
            SGD_COLUMNS))
    pos = dict(low=0.0, low_open=True)
    p.add_argument("--d", type=int_arg("--d", low=2), default=PAPER["d"],
                   help=f"token dimension, an integer >= 2 (default {PAPER['d']})")
    p.add_argument("--alpha", type=real_arg("--alpha", **pos), default=PAPER["alpha"],
                   help=f"n/d, in (0, inf) (default {PAPER['alpha']:g})")
    p.add_argument("--epochs", type=int_arg("--epochs", low=1), default=PAPER["epochs"],
                   help=f"epochs, an integer >= 1 (default {PAPER['epochs']})")
    p.add_argument("--lr", type=real_arg("--lr", **pos), default=PAPER["lr"],
                   help=f"learning rate, in (0, inf) (default {PAPER['lr']:g})")
    p.add_argument("--weight-decay-d", type=real_arg("--weight-decay-d", low=0.0),
                   default=PAPER["weight_decay_d"],
                   help=f"d x weight decay, in [0, inf) (default {PAPER['weight_decay_d']:g})")
    p.add_argument("--batch", type=int_arg("--batch", low=1), default=PAPER["batch"],
                   help=f"batch size, an integer >= 1 (default {PAPER['batch']})")
    p.add_argument("--repeats", type=int_arg("--repeats", low=1), default=PAPER["repeats"],
                   help=f"SGD steps per batch, an integer >= 1 (default {PAPER['repeats']})")
    p.add_argument("--init-scale", type=real_arg("--init-scale", **pos),
                   default=PAPER["init_scale"],
                   help=f"std of the initial entries, in (0, inf) (default {PAPER['init_scale']:g})")
    p.add_argument("--record-every", type=int_arg("--record-every", low=1), default=1,
                   help="epochs between recorded rows, an integer >= 1 (default 1)")
    p.add_argument("--test-samples", type=int_arg("--test-samples", low=0), default=1000,
                   help="fresh test sequences, an integer >= 0 (default 1000)")
    # defaults None: a shape option given together with --model-file is refused, not ignored
    p.add_argument("--depth", type=int_arg("--depth", low=1), default=None,
                   help="attention layers, an integer >= 1 (default 2)")
    p.add_argument("--seq-len", type=int_arg("--seq-len", low=1), default=None,
                   help="tokens per sequence M, an integer >= 1 (default 2)")
    p.add_argument("--skip", type=real_arg("--skip", **pos), default=None,
                   help="skip strength c, in (0, inf) (default 1)")
    p.add_argument("--model-file", metavar="PATH", default=None,
                   help="a Python file defining `model` (a MultiIndexModel) or `build_model()`, "
                        "as for `smi se`: the student has that model's link (default: tied "
                        "softmax attention of --depth, --seq-len, --skip)")
    add_seed(p, help="seed of the teacher data, test set, initialization and batch order")
    add_output(p, plot="|cosine| per layer and the errors vs epoch")
    p.set_defaults(func=cmd_sgd)


def cmd_sgd(args) -> int:
    import sys

    from ..core.cli_common import emit
    from ..core.table import Table
    from ..core.validate import ParameterError
    from .tasks import build_model

    shape = {"--depth": args.depth, "--seq-len": args.seq_len, "--skip": args.skip}
    if args.model_file is not None:
        given = [k for k, v in shape.items() if v is not None]
        if given:
            raise ParameterError(f"{given[0]} does not apply to --model-file (the file "
                                 "declares the model)")
        from .model_file import load_model

        model = load_model(args.model_file)
    else:
        model = build_model("attention", 2 if args.depth is None else args.depth,
                            2 if args.seq_len is None else args.seq_len,
                            1.0 if args.skip is None else args.skip, 1.0)
    res = sgd_layerwise(model, args.d, args.alpha, seed=args.seed, epochs=args.epochs,
                        lr=args.lr, weight_decay=args.weight_decay_d / args.d,
                        batch=args.batch, repeats=args.repeats, init_scale=args.init_scale,
                        record_every=args.record_every, test_samples=args.test_samples,
                        progress=not args.quiet)
    cols = {"epoch": res.epochs.tolist()}
    for a in range(model.P):
        cols[f"cosine{a + 1}"] = res.cosine[:, a].tolist()
        cols[f"M{a + 1}"] = res.M[:, a].tolist()
        cols[f"Q{a + 1}"] = res.Q[:, a].tolist()
    cols["test_error"] = res.test_error.tolist()
    cols["train_error"] = res.train_loss.tolist()
    learned = epoch_learned(res)
    meta = dict(res.params, message=res.message, diverged=res.diverged,
                wall_time=res.wall_time, learned_epoch_cos_0_8=learned)
    print(f"SGD: {res.message} in {res.wall_time:.1f} s; first epoch with |cos| >= 0.8 per "
          f"layer: {learned}", file=sys.stderr)
    return emit(Table(cols, meta), args, "smi_sgd", plot=_plot_sgd)


def _plot_sgd(table, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(9, 3.6))
    ep = table["epoch"]
    for name in table.names:
        if name.startswith("cosine"):
            ax.plot(ep, abs(table[name]), label=f"layer {name[6:]}")
    ax_err.plot(ep, table["test_error"], "k", label="test")
    ax_err.plot(ep, table["train_error"], color="0.6", label="train")
    for a in (ax, ax_err):
        a.set_xscale("symlog", linthresh=1)
        a.set_xlabel("epoch")
        a.legend(fontsize=8)
    ax.set_ylabel("|cosine| with the teacher")
    ax_err.set_yscale("log")
    ax_err.set_ylabel(r"error $\|g - y\|_F^2$")
    fig.suptitle(table.meta.get("model", ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130, format="png")
    plt.close(fig)
