"""``symtheory smi sgd``: minibatch SGD on a same-architecture student (smi.md 15,
Troiani et al. 2025 Fig. 2 right; :func:`symtheory.smi.sgd.sgd_layerwise`).

The options are the schema of the ``smi.sgd`` sweep computation
(:data:`symtheory.smi.params.SGD`) with the paper's protocol as defaults; building the
parser imports nothing numeric.
"""
from __future__ import annotations

import sys

from ..core.cli_common import add_output, add_params, describe, emit
from . import params as P
from .common_cli import NORMALIZATION, add_model_options, build_model

SGD_COLUMNS = (
    "Columns (one row per recorded epoch, epoch 0 = the initialization): epoch; for each "
    "layer (index row) l: cosine_l = (W_l . W*_l/d)/sqrt(W_l . W_l/d) (signed, the "
    "notebook's formula; the model is even in W_l), M_l = W_l . W*_l/d, Q_l = W_l . W_l/d; "
    "test_error = mean ||g(W x/sqrt d) - y||_F^2 on fresh sequences (the notebook's "
    "torch.mean over entries is this / M^2); train_error = the same on the training data.")


def register_sgd(ssub) -> None:
    """Add ``symtheory smi sgd`` to the ``smi`` subparsers."""
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
            NORMALIZATION, SGD_COLUMNS))
    add_model_options(p, P.SGD,
                      file_help="a Python file defining `model` (a MultiIndexModel) or "
                                "`build_model()`, as for `smi se`: the student has that "
                                "model's link (default: tied softmax attention)")
    add_params(p, {k: P.SGD[k] for k in ("d", "alpha", "epochs", "lr", "weight_decay_d",
                                         "batch", "repeats", "init_scale", "record_every",
                                         "test_samples", "seed")},
               defaults=dict(P.PAPER_SGD, seed=0))
    add_output(p, plot="|cosine| per layer and the errors vs epoch")
    p.set_defaults(func=cmd_sgd)


def cmd_sgd(args) -> int:
    from ..core.table import Table
    from .sgd import epoch_learned, sgd_layerwise

    model = build_model(args, "sgd", channel=False)   # SGD integrates no channel
    res = sgd_layerwise(model, args.d, args.alpha, seed=args.seed, epochs=args.epochs,
                        lr=args.lr, weight_decay=args.weight_decay_d / args.d,
                        batch=args.batch, repeats=args.repeats, init_scale=args.init_scale,
                        record_every=args.record_every, test_samples=args.test_samples,
                        noise_variance=args.noise or 0.0, progress=not args.quiet)
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
