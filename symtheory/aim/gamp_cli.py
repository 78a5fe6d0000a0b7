"""``symtheory aim gamp``: GAMP-RIE on AIM / QN teacher data next to the state evolution
(aim.md 5).  Building the parser imports nothing numeric."""
from __future__ import annotations

from ..core.cli_common import add_output, add_params, describe, emit
from ..core.tasks import Param
from . import params as P
from .gd_cli import add_teacher_options, checked_alphas
from .registry import LINKS

GAMP_DESCRIPTION = describe(
    "GAMP-RIE (aim.md 5) on attention-indexed-model data (Boncoraglio et al., "
    "arXiv:2506.01582): the AIM as a GLM on S with T(T+1)/2 unit sensing matrices per "
    "sample, applied from the tokens (never stored); the symmetric RIE denoiser "
    "xi(x) = x - 2 D h(x) with the physical branch outside the bulk; its exact divergence "
    "as Onsager coefficient; damping of the messages, the estimate and its variance.  "
    "Teacher: tokens x_1..x_T ~ N(0, I_d), S = W W^T/sqrt(r d), r = round(rho d), "
    "h_ab = (x_a^T S x_b - delta_ab Tr S)/sqrt(d), y = softmax_row(inv_temp (h + noise)), "
    "y = h + noise (identity; --seq-len 1 is the quadratic network with rho = kappa) or "
    "the row hardmax (T = 2); n = round(alpha d^2) samples.",
    "Columns (one row per alpha and seed): alpha = n/d^2 (realised), seed, n, mse = "
    "(1/d)||S_hat - S||_F^2 (1 for S_hat = sqrt(rho) I), variance = the algorithm's own "
    "prediction of it, se_mse = the state evolution at this alpha (aim.md 3.3; hardmax: "
    "the Bayes channel, plus se_mse_joint_density = the authors' published surrogate), "
    "converged, iterations, residual = last (1/d)||S_t - S_{t-1}||_F^2, stopped = the run "
    "blew up and returned its iterate of least measured noise, damping = the damping used (a "
    "run that blows up is restarted, twice at most, with damping (1 + damping)/2), seconds.  --trace prints "
    "the per-iteration trace instead: alpha, seed, iteration, mse, variance, se_variance "
    "(the SE iterated from the same start), D (denoising noise).  With --out each run is "
    "committed to STEM.tasks.sqlite there as it ends: an interrupted command keeps the runs "
    "it finished, and the same command again computes only the others.",
    example="""\
        example (QN, kappa = 0.5, d = 200, three seeds; minutes):
          symtheory aim gamp --alpha 0.1 0.2 0.3 0.5 --seq-len 1 --link identity \\
              --rho 0.5 --seeds 0 1 2 --plot""")


TRACE = Param.flag(default=False, doc="print the per-iteration trace instead of one row per run")


def register_gamp(aim_subparsers) -> None:
    p = aim_subparsers.add_parser("gamp", help="GAMP-RIE against alpha, next to the state "
                                  "evolution", description=GAMP_DESCRIPTION)
    add_teacher_options(p, links=LINKS, d_default=200)
    add_params(p, {"hardmax_variant": P.GAMP["hardmax_variant"],
                   "seeds": P.GAMP["seed"].with_default([0], doc="data seeds"),
                   "damping": P.GAMP["damping"], "max_iter": P.GAMP["max_iter"],
                   "tol": P.GAMP["tol"],
                   "trace": TRACE}, many=("seeds",))
    add_output(p, plot="GAMP error vs alpha over the SE curve, and the per-iteration traces")
    p.set_defaults(func=cmd_gamp)


def cmd_gamp(args) -> int:
    from ..core.validate import ParameterError

    if args.link == "hardmax" and args.seq_len != 2:
        raise ParameterError(f"--seq-len must be 2 for --link hardmax, got {args.seq_len}")
    if args.link == "hardmax" and args.delta > 0:
        raise ParameterError("--delta must be 0 for --link hardmax (noiseless channel only)")
    alphas = checked_alphas(args)
    from pathlib import Path

    from .gamp import gamp_curve

    stem = f"aim_gamp_T{args.seq_len}_{args.link}_rho{args.rho:g}_d{args.d}"
    # with --out, each finished run is committed there: an interrupted command keeps them
    journal = Path(args.out) / f"{stem}.tasks.sqlite" if args.out else None
    summary, trace = gamp_curve(alphas, d=args.d, rho=args.rho, seq_len=args.seq_len,
                                link=args.link, inv_temp=args.inv_temp, delta=args.delta,
                                seeds=args.seeds, damping=args.damping, max_iter=args.max_iter,
                                tol=args.tol, hardmax_variant=args.hardmax_variant,
                                progress=not args.quiet and len(alphas) * len(args.seeds) > 1,
                                journal=journal)
    return emit(trace if args.trace else summary, args, stem + ("_trace" if args.trace else ""),
                lambda _table, path: plot_gamp(summary, trace, path))


def plot_gamp(summary, trace, path) -> None:
    """Left: GAMP error per run over the SE curve (hardmax: both SE variants).  Right: the
    per-iteration error next to the SE iterated from the same start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from .gamp import se_mse

    m = summary.meta
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    if m["link"] == "hardmax":
        # each hardmax SE point costs ~30 s (quadrature): the curves through the run's
        # alphas (computed with the runs) and alpha = 0 (error 1)
        a_se, idx = np.unique(np.concatenate([[0.0], summary["alpha"]]), return_index=True)
        for key, style, label in (("se_mse", "k.-", "state evolution (Bayes g_out)"),
                                  ("se_mse_joint_density", "r.--",
                                   "SE with the authors' joint-density g_out")):
            vals = np.concatenate([[1.0], summary[key]])[idx]
            ax.plot(a_se, vals, style, label=label)
    else:
        grid = np.linspace(0.0, 1.1 * float(np.max(summary["alpha"])), 80)
        ax.plot(grid, [se_mse(a, m["rho"], m["seq_len"], m["link"], m["delta"]) for a in grid],
                "k-", label="state evolution")
    ax.plot(summary["alpha"], summary["mse"], "o", mfc="none", label=f"GAMP-RIE, d={m['d']}")
    ax.set_xlabel(r"$\alpha = n/d^2$")
    ax.set_ylabel(r"$\frac{1}{d}\|\hat S - S\|_F^2$")
    ax.set_ylim(bottom=0)
    ax.set_title(f"AIM GAMP: T={m['seq_len']}, {m['link']}, rho={m['rho']:g}, "
                 f"delta={m['delta']:g}", fontsize=9)
    a_col, s_col = trace["alpha"], trace["seed"]
    for i, (a, s) in enumerate(sorted(set(zip(a_col, s_col)))):
        sel = (a_col == a) & (s_col == s)
        line, = bx.semilogy(trace["iteration"][sel], trace["mse"][sel], "-",
                            label=f"alpha={a:.3g}" if s == min(s_col) else None)
        bx.semilogy(trace["iteration"][sel], trace["se_variance"][sel], ":",
                    color=line.get_color())
    bx.set_xlabel("iteration (solid: GAMP, dotted: SE)")
    bx.set_ylabel("error")
    for a_ in (ax, bx):
        a_.grid(alpha=0.3)
        a_.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
