"""``symtheory bsr ...`` subcommands."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from ..core import validate
from ..core.cli_common import alphas_from_args as _alphas
from ..core.cli_common import check_format as _format
from ..core.cli_common import emit, num
from ..core.table import Table
from ..core.validate import ParameterError

NORMALIZATION = (
    "Model (Erba et al., arXiv:2410.18858): y = <X, S*>/sqrt(dL) + sqrt(delta) xi, "
    "S* = U V^T/sqrt(r), X, U, V with i.i.d. N(0,1) entries (S* has unit-variance "
    "entries); beta = L/d, rho = r/min(d, L), alpha = n/(dL).  Errors are per-entry "
    "mean((S_hat - S*)^2), the same normalization as the Bayes-optimal mmse = 1 - q "
    "(= test error - delta).")


def _common_model(p, alpha_many=True, delta=True):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--alpha", nargs="+" if alpha_many else None, type=num("alpha"), metavar="A",
                   help="sample ratios n/(dL)")
    if alpha_many:
        g.add_argument("--alpha-grid", nargs=3, type=num("alpha-grid"),
                       metavar=("START", "STOP", "NUM"), help="NUM evenly spaced ratios")
    p.add_argument("--beta", type=num("beta"), required=True, help="L/d")
    p.add_argument("--rho", type=num("rho"), required=True, help="r/min(d, L) > 0")
    if delta:
        p.add_argument("--delta", type=num("delta"), default=0.0, help="label-noise variance >= 0")
    p.add_argument("--format", default="csv", help="csv (default) or json")
    p.add_argument("--out", help="folder for the table, its parameters (and the plot)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


# ----------------------------------------------------------------------- theory
def cmd_theory(args) -> int:
    from . import bo_curve
    from .theory import check_params

    _format(args)
    beta, rho, delta = check_params(args.beta, args.rho, args.delta)
    alphas = _alphas(args)
    if args.precision is not None and args.precision < 1:
        raise ParameterError(f"precision must be an integer >= 1 (digits), got {args.precision}")
    table = bo_curve(alphas, beta, rho, delta, precision=args.precision,
                     progress=not args.quiet and len(alphas) > 1)
    if args.precision is not None:
        table.columns["mmse"] = table.columns.pop("mmse_str")
        table.columns["q"] = table.columns.pop("q_str")
    b = "inf" if math.isinf(beta) else f"{beta:g}"

    def plot(t, path):
        from .plots import plot_bo_curve

        if args.precision is not None:
            t.columns["mmse"] = [float(v) for v in t.columns["mmse"]]
        plot_bo_curve(t, path)

    return emit(table, args, f"bsr_bo_beta{b}_rho{rho:g}_delta{delta:g}", plot)


# ----------------------------------------------------------------------- gamp
def cmd_gamp(args) -> int:
    from .data import generate
    from .gamp import gamp_rie
    from .theory import bo_point, check_params, ridge_mse

    beta, rho, delta = check_params(args.beta, args.rho, args.delta)
    if math.isinf(beta):
        raise ParameterError("beta must be finite for a simulation, got inf")
    d = validate.integer("d", args.d, low=2)
    seeds = validate.integer("seeds", args.seeds, low=1)
    seed0 = validate.integer("seed", args.seed, low=0)
    alphas = _alphas(args)
    rows = {k: [] for k in ("alpha", "seed", "mse", "se_mse", "bo_mse", "ridge_mse", "iterations",
                            "converged", "stopped", "diverged")}
    traces = []
    for a in alphas:
        validate.real("alpha", a, low=0, low_open=True)
        for s in range(seed0, seed0 + seeds):
            data = generate(d, beta, rho, a, delta, seed=s)
            res = gamp_rie(data, damping=args.damping, a_estimator=args.a_estimator,
                           onsager=args.onsager, max_iter=args.max_iter, tol=args.tol,
                           progress=not args.quiet)
            rows["alpha"].append(data.alpha)
            rows["seed"].append(s)
            rows["mse"].append(res.final_mse)
            rows["se_mse"].append(res.trace["se_variance"][-1] if res.trace["se_variance"] else float("nan"))
            rows["bo_mse"].append(bo_point(data.alpha, beta, rho, delta).mmse)
            rows["ridge_mse"].append(ridge_mse(data.alpha, delta))
            rows["iterations"].append(res.iterations)
            rows["converged"].append(res.converged)
            rows["stopped"].append(res.stopped)
            rows["diverged"].append(res.diverged)
            traces.append((data.alpha, s, res.trace))
            if not args.quiet:
                print(f"alpha={data.alpha:.4g} seed={s}: {res.message}; mse={res.final_mse:.4g}",
                      file=sys.stderr)
            del data
    meta = {"model": "bsr", "algorithm": "GAMP-RIE (bsr.md 6)", "d": d, "beta": beta, "rho": rho,
            "delta": delta, "damping": args.damping, "a_estimator": args.a_estimator,
            "onsager": args.onsager, "max_iter": args.max_iter, "tol": args.tol,
            "normalization": NORMALIZATION}
    table = Table(rows, meta)
    if args.trace:
        tr = {k: [] for k in ("alpha", "seed", "iteration", "mse", "se_mse", "variance")}
        for a, s, t in traces:
            for i, m, se, v in zip(t["iteration"], t["mse"], t["se_variance"], t["variance"]):
                for k, val in zip(tr, (a, s, i, m, se, v)):
                    tr[k].append(val)
        table = Table(tr, meta)
    return emit(table, args, f"bsr_gamp_d{d}_beta{beta:g}_rho{rho:g}_delta{delta:g}")


# ----------------------------------------------------------------------- gd
def cmd_gd(args) -> int:
    from .data import generate
    from .gd import gradient_descent
    from .theory import bo_point, check_params

    beta, rho, delta = check_params(args.beta, args.rho, args.delta)
    if math.isinf(beta):
        raise ParameterError("beta must be finite for a simulation, got inf")
    d = validate.integer("d", args.d, low=2)
    alphas = _alphas(args)
    rows = {k: [] for k in ("alpha", "gd_mean", "gd_std", "agd", "bo_mse", "two_bo", "train_mean",
                            "runs", "diverged_runs", "steps")}
    for a in alphas:
        data = generate(d, beta, rho, a, delta, seed=args.seed)
        res = gradient_descent(data, runs=args.runs, lr=args.lr, steps=args.steps, init=args.init,
                               init_scale=args.init_scale, seed=args.seed + 1,
                               record_every=args.record_every, progress=not args.quiet)
        bo = bo_point(data.alpha, beta, rho, delta).mmse
        fin = res.final_gen_error
        rows["alpha"].append(data.alpha)
        rows["gd_mean"].append(float(np.nanmean(fin)))
        rows["gd_std"].append(float(np.nanstd(fin)))
        rows["agd"].append(res.averaged_error)
        rows["bo_mse"].append(bo)
        rows["two_bo"].append(2 * bo)
        rows["train_mean"].append(float(np.nanmean(res.train_error[-1])))
        rows["runs"].append(args.runs)
        rows["diverged_runs"].append(int(res.diverged.sum()))
        rows["steps"].append(int(res.steps[-1]))
    meta = {"model": "bsr", "algorithm": "full-batch GD on L = (1/4) sum (yhat - y)^2 (bsr.md 13)",
            "d": d, "beta": beta, "rho": rho, "delta": delta, "runs": args.runs, "lr": args.lr,
            "steps": args.steps, "init": args.init, "init_scale": args.init_scale,
            "seed": args.seed, "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"bsr_gd_d{d}_beta{beta:g}_rho{rho:g}_delta{delta:g}")


# ----------------------------------------------------------------------- mnne
def cmd_mnne(args) -> int:
    from .baselines import mnne_fit, mnne_threshold
    from .data import generate
    from .theory import alpha_pr, check_params

    beta, rho, _ = check_params(args.beta, args.rho, 0.0)
    d = validate.integer("d", args.d, low=2)
    samples = validate.integer("samples", args.samples, low=1)
    alphas = _alphas(args)
    rows = {k: [] for k in ("alpha", "mse_mean", "mse_std", "samples", "alpha_mnne", "alpha_pr")}
    thr = mnne_threshold(beta, rho)
    for a in alphas:
        errs = []
        for s in range(args.seed, args.seed + samples):
            data = generate(d, beta, rho, a, 0.0, seed=s)
            errs.append(float(np.mean((mnne_fit(data) - data.S) ** 2)))
        rows["alpha"].append(a)
        rows["mse_mean"].append(float(np.mean(errs)))
        rows["mse_std"].append(float(np.std(errs)))
        rows["samples"].append(samples)
        rows["alpha_mnne"].append(thr)
        rows["alpha_pr"].append(alpha_pr(beta, rho))
    meta = {"model": "bsr", "algorithm": "min |S|_* s.t. <X_mu, S> = y_mu (cvxpy; bsr.md 11.1)",
            "d": d, "beta": beta, "rho": rho, "seed": args.seed, "samples": samples,
            "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"bsr_mnne_d{d}_beta{beta:g}_rho{rho:g}")


def cmd_mnne_threshold(args) -> int:
    from .baselines import mnne_threshold
    from .theory import alpha_pr

    _format(args)
    beta = validate.real("beta", args.beta, low=0, low_open=True)
    rows = {"beta": [], "rho": [], "alpha_mnne": [], "alpha_pr": []}
    for r in args.rho:
        r = validate.real("rho", r, low=0)
        rows["beta"].append(beta)
        rows["rho"].append(r)
        rows["alpha_mnne"].append(mnne_threshold(beta, r))
        rows["alpha_pr"].append(alpha_pr(beta, r) if r > 0 else 0.0)
    meta = {"model": "bsr", "quantity": "Donoho-Gavish-Montanari threshold (bsr.md 11.2)",
            "beta": beta}
    return emit(Table(rows, meta), args, f"bsr_mnne_threshold_beta{beta:g}")


# ----------------------------------------------------------------------- parser
def register(sub) -> None:
    bsr = sub.add_parser("bsr", help="bilinear sequence regression (arXiv:2410.18858)")
    bsub = bsr.add_subparsers(dest="task", required=True)

    th = bsub.add_parser("theory", help="Bayes-optimal error curve",
                         description="Bayes-optimal error of BSR. " + NORMALIZATION +
                         "  Columns: mmse = 1 - q, ridge_mse = Bayes-optimal ridge on vectorized "
                         "tokens, alpha_pr = perfect-recovery threshold.  beta may be inf.")
    _common_model(th)
    th.add_argument("--plot", action="store_true", help="write a PNG (BO, ridge, alpha_PR)")
    th.add_argument("--precision", type=int, metavar="DIGITS",
                    help="mmse and q to DIGITS significant digits with mpmath, confirmed by a "
                         "solve at 2*DIGITS")
    th.set_defaults(func=cmd_theory)

    gp = bsub.add_parser("gamp", help="GAMP-RIE on simulated data, next to SE and BO",
                         description="GAMP-RIE (bsr.md 6) at finite size. " + NORMALIZATION +
                         "  Columns: mse of the returned estimate, se_mse = state-evolution "
                         "prediction after the same iterations, bo_mse = Bayes-optimal error.")
    _common_model(gp)
    gp.add_argument("--d", type=int, required=True, help="token dimension d (L = round(beta d))")
    gp.add_argument("--seed", type=int, default=0, help="first seed (data)")
    gp.add_argument("--seeds", type=int, default=1, help="number of consecutive seeds")
    gp.add_argument("--damping", type=float, default=0.0,
                    help="weight of the previous iterate, [0, 1); 0 = undamped")
    gp.add_argument("--a-estimator", default="derivative", choices=("derivative", "square"))
    gp.add_argument("--onsager", default="empirical", choices=("empirical", "predicted"))
    gp.add_argument("--max-iter", type=int, default=100)
    gp.add_argument("--tol", type=float, default=1e-8, help="stop when mean squared change < TOL")
    gp.add_argument("--trace", action="store_true", help="per-iteration table instead of finals")
    gp.set_defaults(func=cmd_gamp)

    gd = bsub.add_parser("gd", help="gradient descent and averaged GD",
                         description="Full-batch GD on S = U V^T/sqrt(r), loss (1/4) sum_mu "
                         "(yhat_mu - y_mu)^2, K runs from independent initializations on the "
                         "same data; agd = error of the averaged final S. " + NORMALIZATION)
    _common_model(gd)
    gd.add_argument("--d", type=int, required=True)
    gd.add_argument("--runs", type=int, default=16)
    gd.add_argument("--lr", type=float, default=0.1)
    gd.add_argument("--steps", type=int, default=50_000)
    gd.add_argument("--init", default="prior", choices=("prior", "small"))
    gd.add_argument("--init-scale", type=float, default=1e-4, help="std of the small init")
    gd.add_argument("--record-every", type=int, default=100)
    gd.add_argument("--seed", type=int, default=0)
    gd.set_defaults(func=cmd_gd)

    mn = bsub.add_parser("mnne", help="minimal nuclear-norm estimator (cvxpy)",
                         description="argmin |S|_* s.t. <X_mu, S> = y_mu (noiseless), needs "
                         "symtheory[convex]. " + NORMALIZATION)
    _common_model(mn, delta=False)
    mn.add_argument("--d", type=int, required=True)
    mn.add_argument("--samples", type=int, default=4)
    mn.add_argument("--seed", type=int, default=0)
    mn.set_defaults(func=cmd_mnne)

    mt = bsub.add_parser("mnne-threshold", help="nuclear-norm exact-recovery threshold",
                         description="Donoho-Gavish-Montanari threshold alpha_MNNE(rho, beta) "
                         "(bsr.md 11.2) and alpha_PR.  rho = r/min(d, L), beta = L/d.")
    mt.add_argument("--beta", type=num("beta"), required=True)
    mt.add_argument("--rho", type=num("rho"), nargs="+", required=True)
    mt.add_argument("--format", default="csv")
    mt.add_argument("--out")
    mt.set_defaults(func=cmd_mnne_threshold)
