"""``symtheory smi threshold`` and ``symtheory smi phase-diagram`` (smi.md 7-8, 10.4).

``threshold``: one row per threshold, columns ``kind`` (weak | staircase), ``alpha``,
``error``, ``method``, ``digits_confirmed`` (with ``--precision``), ``subspace``,
``seconds``.  Models: ``attention`` (``--depth --seq-len --skip --inv-temp``; weak
recovery and, for two layers, the staircase of the first layer), ``phase-retrieval``
(``y = z^2 + sqrt(delta) xi``, ``--delta`` >= 0), ``outer-product`` (``y = z z^T``,
``--seq-len``), ``sign-product`` (``y = sign(z1 z2) + sqrt(delta) xi``) or a model declared
in a Python file (``--model-file``).  The computation itself is generic
(:mod:`symtheory.glm.thresholds.weak_recovery`); this module only declares the models.

``phase-diagram``: ``alpha_1(c)`` and ``alpha_2(c)`` of the two-layer softmax attention over
a grid of skip strengths, with the bound ``1/(M(M+1))`` and the published
``alpha_critical.csv`` points for comparison.

The parser imports nothing heavy; register with ``register_threshold(smi_subparsers)``.
"""
from __future__ import annotations

import argparse
import math
import sys

from ..core.cli_common import add_output, add_params, checked_grid, describe, emit
from ..core.tasks import Param
from ..core.validate import ParameterError
from ..glm.se.sampling import design_record
from . import params as P
from . import registry
from .model_file import EXAMPLE
from .registry import sign_product  # noqa: F401 (public: the model of smi.md 13.4)

MAX_PRECISION = P.MAX_PRECISION
#: NUM of --skip-grid: each skip is a weak-recovery solve and a staircase search
#: (seconds to minutes), so the phase diagram's grid is capped below MAX_GRID
SKIP_GRID_NUM = Param.integer(low=1, high=200)

DEFINITION = ("alpha_c = 1/lambda_max of the linearized SE at the trivial point (smi.md 8.1-8.2, "
              "Eqs. 15-16); staircase: the alpha at which the fixed point on the learned rows "
              "becomes unstable along the other rows (smi.md 8.4, Eqs. 17-18); alpha = n/d per "
              "token dimension; error = estimated absolute error of alpha (two resolutions for "
              "quadrature, batch means for randomized QMC / Monte Carlo).")

THRESHOLD_HELP = (
    "Weak-recovery and grand-staircase thresholds (Troiani et al., arXiv:2502.00901; smi.md "
    "7-8) from the linearized state evolution of a model declared in SymPy: attention (--depth --seq-len --skip --inv-temp; the weak "
    "threshold and, for two layers, the staircase row; from depth 3 every threshold of the "
    "grand staircase on the SE), phase-retrieval (y = z^2 + "
    "sqrt(delta) xi), outer-product (y = z z^T), sign-product (y = sign(z1 z2) + sqrt(delta) "
    "xi) or --model-file.")
THRESHOLD_COLUMNS = (
    "Columns (one row per threshold): kind (weak = weak recovery, staircase = the next "
    "subspace), alpha, error (absolute error estimate of alpha), method, digits_confirmed "
    "(with --precision: significant digits on which the runs at P + 10 and 2P + 10 digits "
    "agree; nan otherwise), subspace (the learnable directions, unit vectors separated by ';'), "
    "seconds.")
DIAGRAM_HELP = (
    "Phase diagram of the two-layer tied softmax attention (r = 1; Troiani et al., "
    "arXiv:2502.00901): alpha_1(c) and alpha_2(c) "
    "over a geometric grid of skip strengths c, with the bound 1/(M(M+1)); --plot overlays "
    "the published alpha_critical.csv points (smi.md 10.4).")
DIAGRAM_COLUMNS = (
    "Columns (one row per skip value): skip, alpha_1 (weak recovery, layer 2 learned first), "
    "alpha_1_error, alpha_2 (staircase threshold of layer 1; nan with --weak-only), "
    "alpha_2_error, bound = 1/(M(M+1)), staircase_converged.")

#: published phase diagram (smi.md 10.4): columns named by layer, alpha2 = paper's alpha_1
PUBLISHED = "alpha_critical.csv"


def build_threshold_model(args):
    """``(model, noise_variance)`` from the command-line options; options that do not
    apply to the chosen model are refused by name (:mod:`symtheory.smi.registry`)."""
    model = registry.model_from_args(args, "threshold", P.SHAPE_DEFAULTS, file_allows=("delta",),
                                     channel=False)
    name = None if args.model_file is not None else (args.model or "attention")
    if name in ("attention", "outer-product"):
        return model, None
    return model, (args.delta or None)


def _subspace_label(G):
    import numpy as np

    if G is None or not np.any(G):
        return ""          # nothing learnable (alpha = inf)
    lam, vec = np.linalg.eigh(G)
    keep = lam > 1e-8 * lam[-1]
    return ";".join(",".join(f"{v:.6g}" for v in vec[:, i]) for i in np.where(keep)[0][::-1])


def cmd_threshold(args) -> int:
    precision = args.precision
    if precision is not None and args.model_file is None and (args.model or "attention") == "attention":
        raise ParameterError("--precision applies to sign-product, phase-retrieval (delta > 0 or "
                             "0) and outer-product (and model files with such links); the "
                             "attention expectation is computed in float64")
    attention = (args.model or "attention") == "attention" and args.model_file is None
    depth = args.depth if args.depth is not None else P.DEPTH.default
    if args.grand_staircase and (args.weak_only or precision is not None
                                 or args.target_error is not None):
        raise ParameterError("--grand-staircase is a Monte-Carlo computation on the SE: "
                             "--weak-only, --precision and --target-error do not apply to it")
    # deep attention: the SE-based staircase unless only the (deterministic, slow at
    # depth >= 3) weak-recovery grid is asked for
    grand = args.grand_staircase or (attention and depth >= 3 and not args.weak_only
                                     and args.target_error is None)
    if args.alpha_continuation != "auto" and not grand:
        raise ParameterError("--alpha-continuation applies to the grand staircase only "
                             "(--grand-staircase, or attention at depth >= 3)")
    if args.sampling is not None and not grand:
        raise ParameterError("--sampling applies to the grand staircase only "
                             "(--grand-staircase, or attention at depth >= 3)")
    args.sampling = args.sampling or "rqmc"      # the default where it applies
    want_stair = attention and not args.weak_only and not grand
    if want_stair and depth != 2:
        raise ParameterError("--depth must be 2 for the staircase row (smi.md 8.4); give "
                             "--weak-only for other depths")
    if attention and (args.seq_len or 2) != 2:
        # the threshold needs a noiseless channel, which softmax attention has through its
        # deterministic reduction (smi.md 9-10) at M = 2 only
        raise ParameterError(f"--seq-len must be 2 for --model attention, got {args.seq_len}: "
                             "its noiseless channel (the reduction of smi.md 9-10) exists at "
                             "M = 2 only; --model outer-product takes --seq-len in [1, 6]")
    model, noise = build_threshold_model(args)
    if grand:
        return _grand_staircase(model, noise, args)

    import mpmath

    from ..core.quadrature import TensorRule
    from ..core.table import Table
    from ..glm.thresholds.staircase import staircase
    from ..glm.thresholds.weak_recovery import weak_recovery

    from ..glm.thresholds.expectations import choose_method

    # --quadrature-nodes is the observation grid's inner rule; a noisy channel integrates
    # with its own adaptive rule (a fixed Gauss-Hermite rule misses a likelihood narrower
    # than the prior and is refused by the channel's declaration check)
    rule = (TensorRule("gauss-hermite", args.quadrature_nodes)
            if choose_method(model, noise) == "observation-grid" else None)
    if args.target_error is not None and precision is not None:
        raise ParameterError("--target-error refines the observation grid; --precision uses "
                             "mpmath instead: give one of them")
    results = [weak_recovery(model, noise_variance=noise, precision=precision,
                             outer_nodes=args.outer_nodes, rule=rule,
                             target_error=args.target_error)]
    if want_stair:
        results.append(staircase(model, samples=args.staircase_samples, seed=args.seed))
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
    for r in results:
        if not math.isfinite(float(r.alpha)):
            # the reason belongs next to the number, not only in --format json's meta
            print(f"note: {r.message}", file=sys.stderr)
    meta = {"model": model.description or model.name, "noise_variance": noise or 0.0,
            "precision": precision, "messages": [r.message for r in results],
            "definition": DEFINITION}
    stem = f"smi_threshold_{_model_stem(args)}"
    status = emit(Table(cols, meta), args, stem)
    unconfirmed = [f"{r.kind}: {r.message}" for r in results
                   if precision is not None and not r.converged]
    if unconfirmed:
        # the digits asked for were not produced: the table is kept, the status says so
        print(f"symtheory: error: --precision {precision}: digits not confirmed "
              f"({'; '.join(unconfirmed)})", file=sys.stderr)
        return 1
    return status


def _model_stem(args) -> str:
    """Output file stem of the model: its name, ``attention`` when none was given (the
    default model), ``model_file`` for ``--model-file``."""
    return "model_file" if args.model_file is not None else (args.model or "attention")


def _grand_staircase(model, noise, args) -> int:
    """Every threshold of the grand staircase from the SE itself (glm/grand_staircase.py);
    a deep link is integrated by the Laplace-RQMC rule with a fixed number of points
    (the map stays smooth for the root finders)."""
    import sys

    from ..core.table import Table
    from ..glm.factors.deep import LaplaceQMCModel
    from ..glm.thresholds.grand_staircase import grand_staircase
    from ..glm.integrate.laplace_qmc import LaplaceQMCRule

    if noise:
        raise ParameterError("--grand-staircase needs a noiseless model (the SE's pinned rows "
                             "use the model's even symmetry and reduction)")
    from ..core.quadrature import TensorRule

    rule = (LaplaceQMCRule(tol=5e-2, points=128, max_points=128)
            if isinstance(model, LaplaceQMCModel) else
            TensorRule("gauss-hermite", args.quadrature_nodes))
    quiet = getattr(args, "quiet", False)
    steps = grand_staircase(model, samples=args.staircase_samples, seed=args.seed, rule=rule,
                            sampling=args.sampling,
                            alpha_continuation=args.alpha_continuation,
                            log=None if quiet else (lambda line: print(line, file=sys.stderr,
                                                                       flush=True)))
    cols = {k: [] for k in ("kind", "alpha", "error", "method", "digits_confirmed", "subspace",
                            "seconds", "rows_learned_before", "rows_learned_at", "converged",
                            "se_check")}
    for st in steps:
        r = st.threshold
        cols["kind"].append(r.kind)
        cols["alpha"].append(float(r.alpha))
        cols["error"].append(float(r.error))
        cols["method"].append(r.method)
        cols["digits_confirmed"].append(float("nan"))
        cols["subspace"].append(_subspace_label(r.subspace))
        cols["seconds"].append(round(r.seconds, 3))
        cols["rows_learned_before"].append(" ".join(map(str, st.learned_before)))
        cols["rows_learned_at"].append(" ".join(map(str, st.learned_at)))
        cols["converged"].append(bool(r.converged))
        cols["se_check"].append(r.details.get("check", {}).get("verdict", ""))
    meta = {"model": model.description or model.name, "noise_variance": 0.0,
            "samples": args.staircase_samples, **design_record(args.sampling),
            "seed": args.seed,
            "alpha_continuation": args.alpha_continuation,
            "messages": [st.threshold.message for st in steps], "definition": DEFINITION}
    return emit(Table(cols, meta), args, f"smi_grand_staircase_{_model_stem(args)}")


# ----------------------------------------------------------------------- phase diagram
def published_points():
    """``(skip, layer-2 threshold, layer-1 threshold)`` rows of the published
    ``alpha_critical.csv`` (smi.md 10.4: ``alpha2`` column = the paper's ``alpha_1``), or
    ``[]`` when the reference file is not present (it ships with the tests)."""
    import csv
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tests" / "reference" / "smi" / PUBLISHED
    if not path.exists():
        return []
    with open(path) as fh:
        rows = [(float(r["skip"]), float(r["alpha2"]), float(r["alpha1"]))
                for r in csv.DictReader(fh)]
    return sorted(rows)


def phase_diagram(skips, *, seq_len=2, staircase_samples=4096, outer_nodes=48, inner_nodes=40,
                  seed=0, with_staircase=True, progress=None, target_error=1e-4):
    """Columns ``skip, alpha_1, alpha_1_error, alpha_2, alpha_2_error, bound`` of the
    two-layer softmax attention (``r = 1``): ``alpha_1`` the weak-recovery threshold (layer
    2 learned first, smi.md 10.4), ``alpha_2`` the staircase threshold of layer 1
    (smi.md 8.4), ``bound = 1/(M(M+1))`` (smi.md 8.3)."""
    from ..core.quadrature import TensorRule
    from ..glm.thresholds.staircase import staircase
    from ..glm.thresholds.weak_recovery import weak_recovery
    from .attention import deep_attention

    cols = {k: [] for k in ("skip", "alpha_1", "alpha_1_error", "alpha_2", "alpha_2_error",
                            "bound", "staircase_converged")}
    for c in skips:
        model = deep_attention(2, seq_len, 1, float(c))
        # small c needs a finer observation grid (48 nodes: 7e-3 at c = 0.1, 4e-7 at c = 1)
        wr = weak_recovery(model, outer_nodes=outer_nodes,
                           rule=TensorRule("gauss-hermite", inner_nodes),
                           target_error=target_error)
        cols["skip"].append(float(c))
        cols["alpha_1"].append(float(wr.alpha))
        cols["alpha_1_error"].append(float(wr.error))
        cols["bound"].append(1.0 / (seq_len * (seq_len + 1)))
        a2 = e2 = float("nan")
        conv = False
        if with_staircase:
            try:
                st = staircase(model, samples=staircase_samples, seed=seed, learned_row=1)
                a2, e2, conv = float(st.alpha), float(st.error), bool(st.converged)
            except ParameterError as exc:      # no instability on the scanned q grid
                import warnings

                warnings.warn(f"skip {c}: staircase not found ({exc})", RuntimeWarning)
        cols["alpha_2"].append(a2)
        cols["alpha_2_error"].append(e2)
        cols["staircase_converged"].append(conv)
        if progress is not None:
            progress(c, wr, a2)
    return cols


def plot_phase_diagram(table, path):
    """alpha_1(c), alpha_2(c) with error bars, the bound and the published points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    c = np.array(table.columns["skip"])
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.errorbar(c, table.columns["alpha_1"], yerr=table.columns["alpha_1_error"], fmt="o-",
                ms=3, label=r"$\alpha_1$ (weak recovery, layer 2)")
    a2 = np.array(table.columns["alpha_2"], dtype=float)
    if np.isfinite(a2).any():
        ax.errorbar(c, a2, yerr=table.columns["alpha_2_error"], fmt="s-", ms=3,
                    label=r"$\alpha_2$ (staircase, layer 1)")
    ax.plot(c, table.columns["bound"], "k--", lw=1, label=r"bound $1/(M(M+1))$")
    pub = [p for p in published_points() if c.min() <= p[0] <= c.max()]
    if pub:
        pc, p1, p2 = (np.array(v) for v in zip(*pub))
        ax.plot(pc, p1, "x", color="C0", alpha=0.6, label="published alpha_1 (csv alpha2)")
        ax.plot(pc, p2, "+", color="C1", alpha=0.8, label="published alpha_2 (csv alpha1)")
    ax.set_xscale("log")
    ax.set_xlabel("skip strength c")
    ax.set_ylabel(r"$\alpha = n/d$")
    ax.set_title("two-layer softmax attention, M = 2, r = 1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130, format="png")
    plt.close(fig)


def _skip_grid(args):
    """The geometric grid of --skip-grid START STOP NUM (checked while parsing)."""
    start, stop, num = args.skip_grid
    if num == 1:
        return [start]
    import numpy as np

    return [float(v) for v in np.geomspace(start, stop, num)]


def cmd_phase_diagram(args) -> int:
    if args.seq_len != 2:
        raise ParameterError(f"--seq-len must be 2 for the phase diagram, got {args.seq_len} "
                             "(the two-layer reduction of smi.md 10)")
    skips = _skip_grid(args)
    import sys

    from ..core.table import Table

    def progress(c, wr, a2):
        if not args.quiet:
            print(f"skip {c:.4g}: alpha_1 = {wr.alpha:.6f} +- {wr.error:.1g}, alpha_2 = {a2:.4f}",
                  file=sys.stderr, flush=True)

    cols = phase_diagram(skips, seq_len=args.seq_len, staircase_samples=args.staircase_samples,
                         outer_nodes=args.outer_nodes, inner_nodes=args.quadrature_nodes,
                         seed=args.seed, with_staircase=not args.weak_only, progress=progress,
                         target_error=args.target_error)
    meta = {"definition": DEFINITION, "model": "two-layer tied softmax attention, r = 1",
            "seq_len": args.seq_len, "skip_grid": list(args.skip_grid), "spacing": "geometric",
            "staircase_samples": args.staircase_samples, "outer_nodes": args.outer_nodes,
            "quadrature_nodes": args.quadrature_nodes, "seed": args.seed,
            "target_error": args.target_error,
            "published": f"tests/reference/smi/{PUBLISHED} (columns named by layer; smi.md 10.4)"}
    return emit(Table(cols, meta), args, "smi_phase_diagram", plot=plot_phase_diagram)


class _SkipGrid(argparse.Action):
    """``START STOP NUM`` of --skip-grid: START, STOP in the range of --skip, NUM in
    [1, 200] (:data:`SKIP_GRID_NUM`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            start, stop, _ = checked_grid("--skip-grid", P.SKIP, *values[:2], 1)
            num = SKIP_GRID_NUM.check("--skip-grid NUM", values[2])
        except ParameterError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, (start, stop, num))


NUMERICS = ("target_error", "outer_nodes", "quadrature_nodes", "weak_only", "staircase_samples",
            "seed")


def register_threshold(smi_subparsers) -> None:
    """Add ``symtheory smi threshold`` and ``symtheory smi phase-diagram``."""
    from .common_cli import add_model_options

    p = smi_subparsers.add_parser(
        "threshold", help="weak-recovery and grand-staircase thresholds (linearized SE)",
        description=describe(THRESHOLD_HELP, DEFINITION, THRESHOLD_COLUMNS,
                             "--model-file: a Python file defining `model` (a MultiIndexModel; "
                             "noiseless links need a DeterministicReduction, smi.md 9) or "
                             "`build_model()`; --delta adds Gaussian output noise. Example "
                             "(phase retrieval, alpha_c = 1/2):", example=EXAMPLE))
    add_model_options(p, P.THRESHOLD,
                      file_help="a Python file defining `model` (a MultiIndexModel) or "
                                "`build_model()` (as for `smi se`)", channel=())
    add_params(p, {k: P.THRESHOLD[k] for k in ("precision", *NUMERICS,
                                                "grand_staircase", "alpha_continuation",
                                                "sampling")},
               unset=("sampling",))
    add_output(p)
    p.set_defaults(func=cmd_threshold)

    d = smi_subparsers.add_parser(
        "phase-diagram", help="alpha_1(c), alpha_2(c) of two-layer softmax attention",
        description=describe(DIAGRAM_HELP, DEFINITION, DIAGRAM_COLUMNS))
    d.add_argument("--skip-grid", nargs=3, metavar=("START", "STOP", "NUM"), required=True,
                   action=_SkipGrid,
                   help="NUM skip strengths from START to STOP (geometric), START, STOP in "
                        f"{P.SKIP.interval()}, NUM an integer in [1, {SKIP_GRID_NUM.high}] (each "
                        "point is a weak-recovery solve and a staircase search)")
    add_params(d, P.PHASE_DIAGRAM)
    add_output(d, plot="alpha_1, alpha_2 vs c with the bound and the published points")
    d.set_defaults(func=cmd_phase_diagram)
