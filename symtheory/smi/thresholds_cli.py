"""``symtheory smi threshold``: weak-recovery and grand-staircase thresholds (smi.md 7-8).

One row per threshold, columns ``kind`` (weak | staircase), ``alpha``, ``error``,
``method``, ``digits_confirmed`` (with ``--precision``), ``subspace``, ``seconds``.
Models: ``attention`` (``--depth --seq-len --skip --beta``; weak recovery and, for two
layers, the staircase of the first layer), ``phase-retrieval`` (``y = z^2 + sqrt(delta)
xi``, ``--delta`` >= 0), ``outer-product`` (``y = z z^T``, ``--seq-len``),
``sign-product`` (``y = sign(z1 z2) + sqrt(delta) xi``).  The computation itself is
generic (:mod:`symtheory.glm.linearized`); this module only declares the models.

Register with ``register_threshold(smi_subparsers)``.
"""
from __future__ import annotations

import sympy as sp

from ..core import validate
from ..core.cli_common import check_format, emit, num
from ..core.table import Table
from ..core.validate import ParameterError

MODELS = ("attention", "phase-retrieval", "outer-product", "sign-product")


def sign_product():
    """``y = sign(z1 z2)`` (P = 2, M = 1; smi.md 13.4): ``alpha_c = pi^2/4``."""
    from ..glm.multi_index import MultiIndexModel

    Z = sp.Matrix(2, 1, lambda a, m: sp.Symbol(f"z{a}_{m}", real=True))
    return MultiIndexModel("sign_product", Z, sp.Matrix([[sp.sign(Z[0, 0] * Z[1, 0])]]),
                           description="y = sign(z1 z2)")


def build_threshold_model(args):
    """``(model, noise_variance)`` from the command-line options."""
    from .attention import deep_attention
    from .closed_form import outer_product

    delta = validate.real("delta", args.delta, low=0.0)
    if args.model == "attention":
        if delta:
            raise ParameterError("delta must be 0 for the attention model (noiseless channel)")
        return deep_attention(args.depth, args.seq_len, 1, args.skip, args.beta, "softmax"), None
    if args.model == "phase-retrieval":
        return outer_product(1), (delta or None)
    if args.model == "outer-product":
        if delta:
            raise ParameterError("delta must be 0 for the outer-product model")
        return outer_product(args.seq_len), None
    if args.model == "sign-product":
        return sign_product(), (delta or None)
    raise ParameterError(f"model must be one of {', '.join(MODELS)}, got {args.model!r}")


def _subspace_label(G):
    import numpy as np

    lam, vec = np.linalg.eigh(G)
    keep = lam > 1e-8 * lam[-1]
    return ";".join(",".join(f"{v:.6g}" for v in vec[:, i]) for i in np.where(keep)[0][::-1])


def cmd_threshold(args) -> int:
    import mpmath

    from ..core.quadrature import TensorRule
    from ..glm.linearized import staircase, weak_recovery

    check_format(args)
    model, noise = build_threshold_model(args)
    precision = None
    if args.precision is not None:
        precision = validate.integer("precision", args.precision, low=1)
    nodes = validate.integer("quadrature-nodes", args.quadrature_nodes, low=4)
    outer = validate.integer("outer-nodes", args.outer_nodes, low=4)
    results = [weak_recovery(model, noise_variance=noise, precision=precision,
                             outer_nodes=outer, rule=TensorRule("gauss-hermite", nodes))]
    want_stair = args.model == "attention" and not args.weak_only
    if want_stair and args.depth != 2:
        raise ParameterError("the staircase row is available for depth 2; use --weak-only")
    if want_stair:
        samples = validate.integer("staircase-samples", args.staircase_samples, low=64)
        results.append(staircase(model, samples=samples, seed=args.seed))
    cols = {k: [] for k in ("kind", "alpha", "error", "method", "digits_confirmed", "subspace",
                            "seconds")}
    for r in results:
        if precision is not None and r.digits_confirmed is not None:
            # convert inside workdps: mpf() at the default 15 digits would round alpha
            with mpmath.workdps(2 * precision + 10):
                cols["alpha"].append(mpmath.nstr(mpmath.mpf(r.alpha), precision, min_fixed=-5,
                                                 max_fixed=5) if r.alpha else "0")
        else:
            cols["alpha"].append(float(r.alpha))
        cols["kind"].append(r.kind)
        cols["error"].append(float(r.error))
        cols["method"].append(r.method)
        cols["digits_confirmed"].append(float("nan") if r.digits_confirmed is None
                                        else float(r.digits_confirmed))
        cols["subspace"].append(_subspace_label(r.subspace))
        cols["seconds"].append(round(r.seconds, 3))
    meta = {"model": model.description, "noise_variance": noise or 0.0,
            "precision": precision, "messages": [r.message for r in results],
            "definition": "alpha_c = 1/lambda_max of the linearized SE (smi.md 8.1-8.2, Eq. 16); "
                          "staircase: instability of the fixed point on the learned rows "
                          "(smi.md 8.4, Eqs. 17-18); alpha = n/d per token dimension"}
    stem = f"smi_threshold_{args.model}"
    return emit(Table(cols, meta), args, stem)


def register_threshold(smi_subparsers) -> None:
    """Add ``symtheory smi threshold`` to the ``smi`` subparsers."""
    p = smi_subparsers.add_parser(
        "threshold", help="weak-recovery and grand-staircase thresholds (linearized SE)",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="attention", help=f"one of {', '.join(MODELS)}")
    p.add_argument("--depth", type=int, default=2, help="attention layers L")
    p.add_argument("--seq-len", type=int, default=2, help="tokens per sequence M")
    p.add_argument("--skip", type=num("skip"), default=1.0, help="skip strength c > 0")
    p.add_argument("--beta", type=num("beta"), default=1.0, help="softmax inverse temperature")
    p.add_argument("--delta", type=num("delta"), default=0.0,
                   help="Gaussian output-noise variance (phase-retrieval, sign-product; 0 allowed)")
    p.add_argument("--precision", type=int, metavar="DIGITS",
                   help="alpha to DIGITS significant digits with mpmath, confirmed at 2 DIGITS "
                        "(sign-product, phase-retrieval, outer-product)")
    p.add_argument("--outer-nodes", type=int, default=48,
                   help="observation-grid nodes per axis (attention)")
    p.add_argument("--quadrature-nodes", type=int, default=40,
                   help="Gauss-Hermite nodes per axis over the integrated indices")
    p.add_argument("--weak-only", action="store_true", help="skip the staircase row (attention)")
    p.add_argument("--staircase-samples", type=int, default=4096,
                   help="randomized-QMC samples of the staircase map")
    p.add_argument("--seed", type=int, default=0, help="random seed (staircase samples)")
    p.add_argument("--format", default="csv", help="csv (default) or json")
    p.add_argument("--out", help="folder for the table and its parameters")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_threshold)
