"""``symtheory aim gd``: single and averaged gradient descent on AIM teacher data (aim.md 6).

:func:`register_gd` adds the subcommand to the ``aim`` subparsers.  Building the parser
imports nothing numeric; the command imports numpy, then JAX and optax (the ``gd`` extra),
when it runs.  Every option is checked while parsing; the size checks that combine options
(``n = round(alpha d^2) >= 1``, ``r = round(rho d) >= 1``, two tokens or more for softmax)
run before anything is computed.
"""
from __future__ import annotations

import sys

from ..core.cli_common import add_output, add_params, alphas_from_args, check_format, describe, emit
from . import params as P
from .registry import TRAINABLE_LINKS

#: the links GD can train (the registry's; light to import)
LINKS = TRAINABLE_LINKS

GD_DESCRIPTION = describe(
    "Gradient descent on attention-indexed-model data (Boncoraglio et al., arXiv:2506.01582, "
    "docs/theory/aim.md 6).  Teacher: tokens x_1..x_T ~ N(0, I_d), S = W W^T/sqrt(r d) with W "
    "(d x r) i.i.d. N(0, 1), r = round(rho d); indices h_ab = (x_a^T S x_b - delta_ab Tr S)/"
    "sqrt(d); output y = softmax_row(inv_temp (h + noise)) or y = h + noise (identity; "
    "--seq-len 1 is the quadratic network), noise symmetric with variance delta on the "
    "diagonal and delta/2 off it.  n = round(alpha d^2) samples.",
    "Students: the same architecture with their own W, initialised N(0, init-scale^2), "
    "trained by Adam (lr --lr, --steps full-batch steps) on sum_{mu,a,b} (f_W(X)_ab - y_ab)^2 "
    "/ d.  --students students start from independent initialisations on the same data.",
    "Columns (one row per alpha and teacher): alpha = n/d^2 (realised), n, teacher, mse_single "
    "= mean over students of (1/d)||S_m - S||_F^2 (1 for S_hat = sqrt(rho) I), mse_single_std "
    "(over students), mse_averaged = (1/d)||mean_m S_m - S||_F^2 (averaged GD), "
    "mse_averaged_limit = mse_averaged - (mse_single - mse_averaged)/(students - 1) (an "
    "unbiased estimate of the error for infinitely many students), students, "
    "final_loss_max and grad_norm_max (largest final training loss and gradient norm over "
    "students: the run's residual), diverged (students with non-finite weights, left out), "
    "seconds and compile_seconds (wall time of the training run and of its compilation).  "
    "Needs JAX and optax: pip install 'symtheory[gd]'.",
    example="""\
        example (the paper's protocol at d = 100; minutes per alpha on two cores):
          symtheory aim gd --alpha 0.05 0.1 0.15 --rho 0.5 --seq-len 2 --students 16 \\
              --out gd --plot""")


def add_teacher_options(p, *, links, d_default: int) -> None:
    """``--d --alpha/--alpha-grid --rho --seq-len --link --inv-temp --delta``: the teacher
    of aim.md 1 (shared by ``aim gd`` and ``aim gamp``; the schema
    :data:`symtheory.aim.params.TEACHER`), ranges checked while parsing."""
    from dataclasses import replace

    teacher = dict(P.TEACHER, link=replace(P.LINK, choices=tuple(links)))
    add_params(p, teacher, grid=("alpha",), many=("alpha",), defaults={"d": d_default})


def register_gd(aim_subparsers) -> None:
    """Add ``gd`` to the ``aim`` family's subparsers (``add_subparsers`` result)."""
    p = aim_subparsers.add_parser("gd", help="single and averaged gradient descent (Adam) "
                                  "against alpha, same-architecture students",
                                  description=GD_DESCRIPTION)
    add_teacher_options(p, links=LINKS, d_default=100)
    add_params(p, {"students": P.GD["students"], "teachers": P.GD_CLI["teachers"],
                   "steps": P.GD["steps"], "lr": P.GD["lr"],
                   "init_scale": P.GD_CLI["init_scale"],
                   "seed": P.GD["seed"].with_default(0)})
    add_output(p, plot="single and averaged GD error against alpha")
    p.set_defaults(func=cmd_gd)


def checked_alphas(args) -> list:
    """The alphas of ``args`` after the checks that combine teacher options (two tokens or
    more for softmax, ``n = round(alpha d^2) >= 1``, ``r = round(rho d) >= 1``), before
    anything is computed."""
    check_format(args)
    alphas = alphas_from_args(args)
    from .data import check_link, sizes

    check_link(args.link, args.seq_len, args.inv_temp)
    for a in alphas:
        sizes(args.d, a, args.rho)
    return alphas


def cmd_gd(args) -> int:
    alphas = checked_alphas(args)
    try:
        from .gd import gd_curve, import_jax

        import_jax()
    except ImportError as exc:
        print(f"symtheory: error: {exc}", file=sys.stderr)
        return 1
    table = gd_curve(alphas, d=args.d, rho=args.rho, seq_len=args.seq_len, link=args.link,
                     inv_temp=args.inv_temp, delta=args.delta, students=args.students,
                     teachers=args.teachers, steps=args.steps, lr=args.lr,
                     init_scale=args.init_scale, seed=args.seed,
                     progress=not args.quiet and len(alphas) * args.teachers > 1)
    stem = f"aim_gd_T{args.seq_len}_{args.link}_rho{args.rho:g}_d{args.d}"
    return emit(table, args, stem, _plot)


def _plot(table, path) -> None:
    """Single and averaged GD error against alpha (mean over teachers, their std as bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    alpha = table["alpha"]
    xs = sorted(set(alpha))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for key, fmt, label in (("mse_single", "o", "single GD (mean over students)"),
                            ("mse_averaged", "s", f"averaged GD ({table.meta['students']} "
                                                  "students)")):
        vals = [table[key][alpha == x] for x in xs]
        ax.errorbar(xs, [np.mean(v) for v in vals], yerr=[np.std(v) for v in vals], fmt=fmt,
                    ls="-", capsize=3, label=label)
    m = table.meta
    ax.set_title(f"AIM GD: d={m['d']}, T={m['seq_len']}, {m['link']}, rho={m['rho']:g}, "
                 f"delta={m['delta']:g}, {m['teachers']} teacher(s)", fontsize=9)
    ax.set_xlabel(r"$\alpha = n/d^2$")
    ax.set_ylabel(r"$\frac{1}{d}\|\hat S - S\|_F^2$")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
