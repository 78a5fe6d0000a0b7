"""``symtheory aim ...`` subcommands (attention-indexed models, arXiv:2506.01582, and the
quadratic network, arXiv:2408.03733).

The parser is declared here with light imports only; each command imports the numerics
it runs.  Options are checked while parsing (``symtheory.core.cli_common``).
"""
from __future__ import annotations

import math

from ..core.cli_common import add_output, add_params, alphas_from_args, describe, emit
from ..core.validate import ParameterError
from . import params as P

NORMALIZATION = (
    "Model (Boncoraglio et al., arXiv:2506.01582; aim.md 1): tokens x_1..x_T ~ N(0, I_d), "
    "S = W W^T/sqrt(r d) with W (d x r) i.i.d. N(0, 1), indices h_ab = (x_a^T S x_b - "
    "delta_ab Tr S)/sqrt(d), output y = softmax_row(inv_temp h) or y = h (identity), with "
    "output noise of variance delta/(2 - delta_ab) on h_ab before the link (one token: "
    "y = h + sqrt(delta) xi).  Normalization: alpha = n/d^2, rho = r/d, T = --seq-len.  "
    "The error on S is mmse = (1/d)||S_hat - S||_F^2, equal to 1 at alpha = 0 (the "
    "quantity of the reference files).  The quadratic network (Maillard et al., "
    "arXiv:2408.03733) is --seq-len 1 --link identity --rho KAPPA (KAPPA = m/d); its paper "
    "normalizes S_M = W^T W/m = S/sqrt(KAPPA), so its MSE is mmse/KAPPA and its noise "
    "delta/KAPPA (its figures plot KAPPA x MSE = mmse).")

THEORY_COLUMNS = (
    "Columns: alpha, rho, seq_len, delta (the inputs); mmse = (1/d)||S_hat - S||_F^2 at "
    "the Bayes-optimal fixed point (aim.md 3.3); q = (1/d) Tr(S S_hat) = 1 + rho - mmse; "
    "gen_error = Bayes-optimal test error sum_ab E Var[y_ab | data] (aim.md 3.8, output "
    "noise included) and gen_error_stderr = its Monte-Carlo standard error (0 when exact, "
    "NaN with --no-gen-error); alpha_tilde = 2 alpha k, k = indices a sample reveals (2k = "
    "T^2 + T - 2 for softmax at any inv_temp, T(T + 1) for the identity); alpha_pr = "
    "perfect-recovery threshold (mmse = 0 above it when delta = 0); converged, iterations, "
    "residual = report of the fixed-point solve.  With --precision, mmse and q are strings "
    "with DIGITS significant digits and digits_confirmed = digits agreeing with a solve at "
    "2 x DIGITS.  With --rho 0 (the low-rank limit, aim.md 4.4) the rows are alpha_bar = "
    "n/(d r) (--alpha read as alpha_bar), mmse, q, gen_error, gen_error_stderr, "
    "alpha_bar_wr, alpha_bar_pr (weak and perfect recovery) and the solve report.")
THRESHOLD_COLUMNS = (
    "Columns: rho, seq_len, link, delta (the inputs); constraints_per_sample = k; "
    "alpha_tilde_pr = 2 k alpha_PR = 2 rho - rho^2 (rho <= 1, else 1); alpha_pr = "
    "perfect-recovery threshold in alpha = n/d^2 (noiseless; inf with noise); alpha_bar_wr, "
    "alpha_bar_pr = weak- and perfect-recovery thresholds of the low-rank limit in "
    "alpha_bar = n/(d r) (aim.md 4.4).")


# ----------------------------------------------------------------------- theory
def cmd_hardmax_theory(args) -> int:
    """Hardmax, T = 2 (aim.md 3.5): alpha, rho, mmse, q and the solve report."""
    from ..core.table import Table
    from .hardmax import hardmax_mse

    if args.seq_len != 2 or args.rho == 0 or math.isinf(args.rho) or args.delta != 0:
        raise ParameterError("--link hardmax needs --seq-len 2, 0 < --rho < inf, --delta 0")
    rows = {k: [] for k in ("alpha", "rho", "mmse", "q", "converged", "iterations", "residual")}
    for a in alphas_from_args(args):
        res = hardmax_mse(a, args.rho, args.hardmax_variant)
        for key, val in zip(rows, (a, args.rho, res.value, 1 + args.rho - res.value,
                                   res.converged, res.iterations, res.residual)):
            rows[key].append(val)
    meta = {"model": "aim", "link": "hardmax", "seq_len": 2,
            "hardmax_variant": args.hardmax_variant, "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args,
                f"aim_bo_T2_hardmax_{args.hardmax_variant}_rho{args.rho:g}", _plot)


def cmd_theory(args) -> int:
    if args.link == "hardmax":
        return cmd_hardmax_theory(args)
    if math.isinf(args.rho):
        return cmd_rho_infinity(args)
    if args.rho == 0 and args.precision is not None:
        raise ParameterError("--precision applies to --rho > 0 (the rho -> 0 limit is a "
                             "closed form evaluated in float64)")
    from .theory import bo_curve, gen_error, low_rank_point

    alphas = alphas_from_args(args)
    gen_samples = args.gen_samples if args.gen_error else None
    stem = f"aim_bo_T{args.seq_len}_{args.link}_rho{args.rho:g}_delta{args.delta:g}"
    if args.rho == 0:
        from ..core.table import Table

        rows = {k: [] for k in ("alpha_bar", "mmse", "q", "gen_error", "gen_error_stderr",
                                "alpha_bar_wr", "alpha_bar_pr", "converged", "iterations",
                                "residual")}
        for a in alphas:
            p = low_rank_point(a, args.seq_len, args.link, args.delta)
            ge = (gen_error(p.mmse, 0.0, args.seq_len, args.link, args.inv_temp, args.delta,
                            samples=gen_samples) if gen_samples else (math.nan, math.nan))
            for key, val in zip(rows, (a, p.mmse, p.q, ge[0], ge[1], p.alpha_bar_wr,
                                       p.alpha_bar_pr, True, 0, 0.0)):
                rows[key].append(val)
        meta = {"model": "aim", "limit": "rho -> 0 at fixed alpha_bar = n/(d r) (aim.md 4.4)",
                "seq_len": args.seq_len, "link": args.link, "inv_temp": args.inv_temp,
                "delta": args.delta, "normalization": NORMALIZATION}
        return emit(Table(rows, meta), args, stem, _plot)
    table = bo_curve(alphas, args.rho, args.seq_len, args.link, args.inv_temp, args.delta,
                     precision=args.precision, gen_samples=gen_samples,
                     progress=not args.quiet and len(alphas) > 1)
    if args.precision is not None:
        table.columns["mmse"] = table.columns.pop("mmse_str")
        table.columns["q"] = table.columns.pop("q_str")
    table.meta["normalization"] = NORMALIZATION
    return emit(table, args, stem, _plot)


RHO_INFINITY_COLUMNS = (
    "With --rho inf (the rho -> infinity line, aim.md 4.2: the prior's R-transform tends to a "
    "unit semicircle and the fixed point has a closed form, noiseless mmse = max(0, 1 - "
    "alpha_tilde)): alpha, mmse (a string of DIGITS digits with --precision, then "
    "digits_confirmed), gen_error, gen_error_stderr (identity link: exact and finite; "
    "softmax: not computed at rho = inf -- its indices have infinite variance -- so "
    "--no-gen-error is required), alpha_tilde, alpha_pr, method (the closed form; exact: "
    "nothing learned at alpha = 0, perfect recovery from alpha_pr when delta = 0).  q = 1 + "
    "rho - mmse diverges and is not reported.")


def cmd_rho_infinity(args) -> int:
    """``--rho inf``: the closed-form rho -> infinity line (aim.md 4.2), without the
    diverging overlap q; the softmax test error is refused rather than printed as NaN."""
    if args.gen_error and args.link != "identity":
        raise ParameterError(f"--rho inf: the {args.link} test error is not computed at rho = "
                             "inf (its indices h have infinite variance); give --no-gen-error "
                             "for the mmse line, or a finite --rho")
    from ..core.table import Table
    from .theory import alpha_pr, alpha_tilde, bo_point, gen_error, solve_mse

    alphas = alphas_from_args(args)
    cols = ["alpha", "mmse", "gen_error", "gen_error_stderr", "alpha_tilde", "alpha_pr", "method"]
    if args.precision is not None:
        cols.insert(2, "digits_confirmed")
    rows = {k: [] for k in cols}
    for a in alphas:
        pt = bo_point(a, math.inf, args.seq_len, args.link, args.inv_temp, args.delta,
                      precision=args.precision, gen_samples=None)
        ge = (gen_error(pt.mmse, math.inf, args.seq_len, args.link, args.inv_temp, args.delta)
              if args.gen_error else (math.nan, math.nan))
        vals = {"alpha": a, "mmse": pt.mmse_str if args.precision is not None else pt.mmse,
                "digits_confirmed": pt.digits_confirmed, "gen_error": ge[0],
                "gen_error_stderr": ge[1], "alpha_tilde": alpha_tilde(a, args.seq_len, args.link),
                "alpha_pr": alpha_pr(math.inf, args.seq_len, args.link),
                "method": _rho_infinity_method(solve_mse(a, math.inf, args.seq_len, args.link,
                                                         args.delta))}
        for k in cols:
            rows[k].append(vals[k])
    meta = {"model": "aim", "limit": "rho -> infinity at fixed alpha = n/d^2 (aim.md 4.2): "
            "denoising a unit semicircle, mmse(D) = D/(1 + D); q = 1 + rho - mmse diverges",
            "rho": "inf", "seq_len": args.seq_len, "link": args.link, "inv_temp": args.inv_temp,
            "delta": args.delta, "precision": args.precision, "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args,
                f"aim_bo_T{args.seq_len}_{args.link}_rhoinf_delta{args.delta:g}", _plot)


def _rho_infinity_method(res) -> str:
    """How the solver got a point of the rho = inf line: the closed form, or exactly
    (nothing learned at alpha = 0, perfect recovery at alpha >= alpha_PR)."""
    return "closed form (aim.md 4.2)" if res.method == "closed form" else \
        f"{res.method}: {res.message}"


def _plot(table, path) -> None:
    """MSE on S (and the test error) against alpha, alpha_PR marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xkey = "alpha" if "alpha" in table.columns else "alpha_bar"
    x = table[xkey]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    style = dict(marker="o") if len(x) == 1 else {}
    ax.plot(x, [float(v) for v in table.columns["mmse"]], lw=2,
            label=r"Bayes-optimal MSE on $S$", **style)
    ge = table["gen_error"] if "gen_error" in table.columns else [math.nan]
    if not all(math.isnan(g) for g in ge):
        ax.plot(x, ge, ls="--", label="Bayes test error", **style)
    if "alpha_pr" in table.columns and table.meta.get("delta", 0) == 0:
        apr = float(table["alpha_pr"][0])
        if math.isfinite(apr):
            ax.axvline(apr, color="C3", ls=":", label=rf"$\alpha_{{PR}}={apr:.4g}$")
    m = table.meta
    ax.set_title(f"AIM: T={m.get('seq_len')}, {m.get('link')}, rho={m.get('rho', 0)}, "
                 f"delta={m.get('delta')}")
    ax.set_xlabel(r"$\alpha = n/d^2$" if xkey == "alpha" else r"$\bar\alpha = n/(dr)$")
    ax.set_ylabel(r"error: MSE $\frac{1}{d}\|\hat S - S\|_F^2$, test error")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# ----------------------------------------------------------------------- threshold
HARDMAX_THRESHOLD_COLUMNS = (
    "With --link hardmax (T = 2): kind (weak_recovery: the low-rank limit, aim.md 4.4), "
    "alpha_bar = n/(d r) at the threshold (a string of --precision digits, default 30), "
    "error = |value - closed form of aim.md 4.4| at 2 x digits, method, digits_confirmed "
    "= digits on which the 2 x digits evaluation agrees.")


def cmd_hardmax_threshold(args) -> int:
    from ..core.table import Table
    from .hardmax import hardmax_weak_recovery

    if args.seq_len != 2:
        raise ParameterError(f"--link hardmax needs --seq-len 2, got {args.seq_len}")
    digits = args.precision or 30
    val, agree, err = hardmax_weak_recovery(args.hardmax_variant, digits=digits)
    rows = {"kind": ["weak_recovery"], "alpha_bar": [val], "error": [err],
            "method": [f"mpmath Plackett quadrature of E||g_out||^2 at q = 0 "
                       f"({args.hardmax_variant})"], "digits_confirmed": [agree]}
    meta = {"model": "aim", "link": "hardmax", "seq_len": 2,
            "hardmax_variant": args.hardmax_variant,
            "quantity": "low-rank weak-recovery threshold (aim.md 4.4)",
            "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"aim_threshold_T2_hardmax_{args.hardmax_variant}")


def cmd_threshold(args) -> int:
    from ..core.table import Table
    from .theory import thresholds

    if args.link == "hardmax":
        return cmd_hardmax_threshold(args)
    if args.precision is not None:
        # refused, not ignored: these thresholds are closed forms printed exactly
        raise ParameterError(f"--precision applies to --link hardmax; the {args.link} "
                             "thresholds are closed forms in rho and the tokens' constraint "
                             "count (aim.md 4), evaluated in float64")
    rows = None
    for r in args.rho:
        th = thresholds(r, args.seq_len, args.link, args.delta)
        if rows is None:
            rows = {k: [] for k in th}
        for k, val in th.items():
            rows[k].append(val)
    meta = {"model": "aim", "quantity": "phase transitions (aim.md 4)",
            "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"aim_threshold_T{args.seq_len}_{args.link}")


# ----------------------------------------------------------------------- parser
def register(sub) -> None:
    aim = sub.add_parser("aim", help="attention-indexed models and the quadratic network "
                         "(arXiv:2506.01582, 2408.03733)", description=describe(NORMALIZATION))
    asub = aim.add_subparsers(dest="task", required=True, help="what to compute")

    th = asub.add_parser("theory", help="Bayes-optimal MSE on S and test error against alpha",
                         description=describe(
                             "Bayes-optimal state evolution of the one-layer AIM (aim.md 3.3-3.4, "
                             "3.8): v = mmse_RIE((v + delta/2)/alpha_tilde).", NORMALIZATION,
                             THEORY_COLUMNS, RHO_INFINITY_COLUMNS))
    add_params(th, P.THEORY, grid=("alpha",), many=("alpha",), required=("seq_len",))
    add_output(th, plot="mmse and test error vs alpha, alpha_PR marked")
    th.set_defaults(func=cmd_theory)

    tr = asub.add_parser("threshold", help="perfect- and weak-recovery thresholds",
                         description=describe(
                             "Phase transitions of the one-layer AIM (aim.md 4): perfect "
                             "recovery at alpha = n/d^2 = alpha_PR and the low-rank weak and "
                             "perfect recovery.", NORMALIZATION, THRESHOLD_COLUMNS,
                             HARDMAX_THRESHOLD_COLUMNS))
    add_params(tr, P.THRESHOLD, many=("rho",), required=("rho", "seq_len"))
    add_output(tr, quiet=False)
    tr.set_defaults(func=cmd_threshold)

    from .gd_cli import register_gd

    register_gd(asub)
    from .gamp_cli import register_gamp

    register_gamp(asub)
    from .deep_cli import register_deep

    register_deep(asub)
