"""``symtheory aim ...`` subcommands: Bayes-optimal theory and thresholds of the AIM / QN."""
from __future__ import annotations

import math

from ..core import validate
from ..core.cli_common import alphas_from_args, check_format, emit, num
from ..core.table import Table
from ..core.validate import ParameterError

NORMALIZATION = (
    "Model (Boncoraglio et al., arXiv:2506.01582; docs/theory/aim.md): tokens x_1..x_T ~ "
    "N(0, I_d), S = W W^T/sqrt(r d) (W: d x r, N(0,1)), indices h_ab = (x_a^T S x_b - "
    "delta_ab Tr S)/sqrt(d), output y = softmax_row(inv_temp h) or y = h, with output "
    "noise of variance delta/(2 - delta_ab) on h_ab (one token: y = h + sqrt(delta) xi).  "
    "alpha = n/d^2, rho = r/d, T = --seq-len.  mmse = (1/d)||S_hat - S||_F^2, equal to 1 at "
    "alpha = 0 (the reference files' quantity); q = (1/d) Tr(S S_hat) = 1 + rho - mmse; "
    "gen_error = Bayes-optimal test error sum_ab E Var[y_ab | data] (aim.md 3.8).  "
    "The quadratic network (Maillard et al., arXiv:2408.03733) is --seq-len 1 --link "
    "identity --rho KAPPA (KAPPA = m/d); its paper normalises S_M = W^T W/m = S/sqrt(KAPPA), "
    "so its MSE is mmse/KAPPA and its noise delta/KAPPA (its plots show KAPPA x MSE = mmse).")


def _model_args(p, many_rho=False):
    if many_rho:
        p.add_argument("--rho", type=num("rho"), nargs="+", required=True,
                       help="width ratios r/d (0: low-rank limit, inf allowed)")
    else:
        p.add_argument("--rho", type=num("rho"), required=True,
                       help="width ratio r/d > 0; inf = the rho -> infinity line; 0 = the "
                            "low-rank limit, where --alpha is read as alpha_bar = n/(d r)")
    p.add_argument("--seq-len", type=int, required=True, help="number of tokens T >= 1")
    p.add_argument("--link", default="softmax", help="softmax (default) or identity")
    p.add_argument("--delta", type=num("delta"), default=0.0,
                   help="output-noise variance >= 0 (y = h + sqrt(delta) xi for one token; "
                        "pre-softmax for softmax)")
    p.add_argument("--format", default="csv", help="csv (default) or json")
    p.add_argument("--out", help="folder for the table, its parameters (and the plot)")


# ----------------------------------------------------------------------- theory
def cmd_theory(args) -> int:
    from .theory import bo_curve, check_params, gen_error, low_rank_point

    check_format(args)
    rho, seq_len, link, inv_temp, delta = check_params(args.rho, args.seq_len, args.link,
                                                       args.inv_temp, args.delta)
    alphas = alphas_from_args(args)
    gen_samples = None if args.no_gen_error else validate.integer("gen-samples",
                                                                   args.gen_samples, low=2)
    if args.precision is not None:
        validate.integer("precision", args.precision, low=1)
    stem = f"aim_bo_T{seq_len}_{link}_rho{rho:g}_delta{delta:g}"
    if rho == 0:
        if args.precision is not None:
            raise ParameterError("precision applies to rho > 0 (the rho -> 0 limit is a "
                                 "closed form evaluated in float64)")
        rows = {k: [] for k in ("alpha_bar", "mmse", "q", "gen_error", "gen_error_stderr",
                                "alpha_bar_wr", "alpha_bar_pr", "converged", "iterations",
                                "residual")}
        for a in alphas:
            p = low_rank_point(a, seq_len, link, delta)
            ge = (gen_error(p.mmse, 0.0, seq_len, link, inv_temp, delta, samples=gen_samples)
                  if gen_samples else (math.nan, math.nan))
            for key, val in zip(rows, (a, p.mmse, p.q, ge[0], ge[1], p.alpha_bar_wr,
                                       p.alpha_bar_pr, True, 0, 0.0)):
                rows[key].append(val)
        meta = {"model": "aim", "limit": "rho -> 0 at fixed alpha_bar = n/(d r) (aim.md 4.4)",
                "seq_len": seq_len, "link": link, "inv_temp": inv_temp, "delta": delta,
                "normalization": NORMALIZATION}
        return emit(Table(rows, meta), args, stem, _plot)
    table = bo_curve(alphas, rho, seq_len, link, inv_temp, delta, precision=args.precision,
                     gen_samples=gen_samples, progress=not args.quiet and len(alphas) > 1)
    if args.precision is not None:
        table.columns["mmse"] = table.columns.pop("mmse_str")
        table.columns["q"] = table.columns.pop("q_str")
    table.meta["normalization"] = NORMALIZATION
    return emit(table, args, stem, _plot)


def _plot(table, path) -> None:
    """MSE on S (and the test error) against alpha, alpha_PR marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xkey = "alpha" if "alpha" in table.columns else "alpha_bar"
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(table[xkey], [float(v) for v in table.columns["mmse"]], lw=2,
            label=r"Bayes-optimal MSE on $S$")
    ge = table["gen_error"]
    if not all(math.isnan(g) for g in ge):
        ax.plot(table[xkey], ge, ls="--", label="Bayes test error")
    if "alpha_pr" in table.columns and table.meta.get("delta", 0) == 0:
        apr = float(table["alpha_pr"][0])
        if math.isfinite(apr):
            ax.axvline(apr, color="C3", ls=":", label=rf"$\alpha_{{PR}}={apr:.4g}$")
    m = table.meta
    ax.set_title(f"AIM: T={m.get('seq_len')}, {m.get('link')}, rho={m.get('rho', 0)}, "
                 f"delta={m.get('delta')}")
    ax.set_xlabel(r"$\alpha = n/d^2$" if xkey == "alpha" else r"$\bar\alpha = n/(dr)$")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# ----------------------------------------------------------------------- threshold
def cmd_threshold(args) -> int:
    from .theory import check_params, thresholds

    check_format(args)
    rows = None
    for r in args.rho:
        rho, seq_len, link, _, delta = check_params(r, args.seq_len, args.link, 1.0, args.delta)
        th = thresholds(rho, seq_len, link, delta)
        if rows is None:
            rows = {k: [] for k in th}
        for k, val in th.items():
            rows[k].append(val)
    meta = {"model": "aim", "quantity": "phase transitions (aim.md 4): alpha_pr = perfect "
            "recovery (noiseless, n/d^2), alpha_bar_wr / alpha_bar_pr = low-rank weak / perfect "
            "recovery in n/(d r)", "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"aim_threshold_T{args.seq_len}_{args.link}")


# ----------------------------------------------------------------------- parser
def register(sub) -> None:
    aim = sub.add_parser("aim", help="attention-indexed models / quadratic network "
                         "(arXiv:2506.01582, 2408.03733)", description=NORMALIZATION)
    asub = aim.add_subparsers(dest="task", required=True)

    th = asub.add_parser("theory", help="Bayes-optimal MSE on S and test error against alpha",
                         description="Bayes-optimal state evolution (aim.md 3.3-3.4).  " +
                         NORMALIZATION + "  Columns: alpha (n/d^2), mmse, q, gen_error (+ "
                         "gen_error_stderr: Monte-Carlo standard error, 0 when exact), "
                         "alpha_tilde = 2 alpha k (k = revealed indices per sample), alpha_pr = "
                         "perfect-recovery threshold, converged, iterations, residual.")
    g = th.add_mutually_exclusive_group()
    g.add_argument("--alpha", nargs="+", type=num("alpha"), metavar="A",
                   help="sample ratios alpha = n/d^2")
    g.add_argument("--alpha-grid", nargs=3, type=num("alpha-grid"),
                   metavar=("START", "STOP", "NUM"), help="NUM evenly spaced alpha = n/d^2")
    _model_args(th)
    th.add_argument("--inv-temp", type=num("inv-temp"), default=1.0,
                    help="softmax inverse temperature beta > 0 (the MSE does not depend on it)")
    th.add_argument("--precision", type=int, metavar="DIGITS",
                    help="mmse and q to DIGITS significant digits with mpmath, confirmed by a "
                         "solve at 2*DIGITS (column digits_confirmed)")
    th.add_argument("--gen-samples", type=int, default=20000,
                    help="Monte-Carlo samples of the softmax test error (default 20000)")
    th.add_argument("--no-gen-error", action="store_true", help="skip the test error (NaN)")
    th.add_argument("--plot", action="store_true", help="write a PNG of the curve")
    th.add_argument("--quiet", action="store_true", help="no progress bar")
    th.set_defaults(func=cmd_theory)

    tr = asub.add_parser("threshold", help="perfect- and weak-recovery thresholds",
                         description="Phase transitions (aim.md 4): constraints per sample k, "
                         "alpha_tilde_pr = 2 alpha_PR k, alpha_pr (n/d^2, noiseless), and the "
                         "low-rank (rho -> 0) weak / perfect-recovery thresholds alpha_bar_wr, "
                         "alpha_bar_pr in alpha_bar = n/(d r).  " + NORMALIZATION)
    _model_args(tr, many_rho=True)
    tr.set_defaults(func=cmd_threshold)
