"""``symtheory bsr ...`` subcommands (bilinear sequence regression, arXiv:2410.18858).

The parser is declared here with light imports only; each command imports the numerics
it runs.  Options are checked while parsing (``symtheory.core.cli_common``).
"""
from __future__ import annotations

import math
import sys

from ..core.cli_common import add_output, add_params, alphas_from_args, describe, emit
from ..core.tasks import Param
from ..core.validate import ParameterError
from . import params as P

NORMALIZATION = (
    "Model (Erba et al., arXiv:2410.18858; bsr.md 0): y = <X, S*>/sqrt(dL) + sqrt(delta) xi "
    "with S* = U V^T/sqrt(r); X (d x L), U (d x r), V (L x r) and xi have i.i.d. N(0,1) "
    "entries, so S* has unit-variance entries.  Normalization: beta = L/d, rho = r/d at "
    "every beta (the package-wide convention), alpha = n/(dL), delta = label-noise "
    "variance.  Errors are per entry, mean((S_hat - S*)^2): the Bayes-optimal one is "
    "mmse = 1 - q (= test error - delta).")

# ----------------------------------------------------------------------- theory
def cmd_theory(args) -> int:
    from . import bo_curve

    alphas = alphas_from_args(args)
    table = bo_curve(alphas, args.beta, args.rho, args.delta, precision=args.precision,
                     progress=not args.quiet and len(alphas) > 1)
    if args.precision is not None:
        table.columns["mmse"] = table.columns.pop("mmse_str")
        table.columns["q"] = table.columns.pop("q_str")
    b = "inf" if math.isinf(args.beta) else f"{args.beta:g}"

    def plot(t, path):
        from .plots import plot_bo_curve

        if args.precision is not None:
            t.columns["mmse"] = [float(v) for v in t.columns["mmse"]]
        plot_bo_curve(t, path)

    return emit(table, args, f"bsr_bo_beta{b}_rho{args.rho:g}_delta{args.delta:g}", plot)


# ----------------------------------------------------------------------- gamp
def cmd_gamp(args) -> int:
    from .data import generate
    from .gamp import gamp_rie
    from .theory import bo_point, ridge_mse

    beta, rho, delta, d = args.beta, args.rho, args.delta, args.d
    alphas = alphas_from_args(args)
    rows = {k: [] for k in ("alpha", "seed", "mse", "se_mse", "bo_mse", "ridge_mse", "iterations",
                            "converged", "stopped", "diverged")}
    traces = []
    for a in alphas:
        for s in range(args.seed, args.seed + args.seeds):
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
    from ..core.table import Table

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
    import numpy as np

    from ..core.table import Table
    from .data import generate
    from .gd import gradient_descent
    from .theory import bo_point

    beta, rho, delta, d = args.beta, args.rho, args.delta, args.d
    alphas = alphas_from_args(args)
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
    import importlib.util

    if importlib.util.find_spec("cvxpy") is None:
        raise ParameterError("bsr mnne needs cvxpy: pip install 'symtheory[convex]'")
    import numpy as np

    from ..core.table import Table
    from .baselines import mnne_fit, mnne_threshold
    from .data import generate
    from .theory import alpha_pr

    beta, rho, d = args.beta, args.rho, args.d
    alphas = alphas_from_args(args)
    rows = {k: [] for k in ("alpha", "mse_mean", "mse_std", "samples", "alpha_mnne", "alpha_pr")}
    thr = mnne_threshold(beta, rho)
    for a in alphas:
        errs = []
        for s in range(args.seed, args.seed + args.samples):
            data = generate(d, beta, rho, a, 0.0, seed=s)
            errs.append(float(np.mean((mnne_fit(data) - data.S) ** 2)))
        rows["alpha"].append(a)
        rows["mse_mean"].append(float(np.mean(errs)))
        rows["mse_std"].append(float(np.std(errs)))
        rows["samples"].append(args.samples)
        rows["alpha_mnne"].append(thr)
        rows["alpha_pr"].append(alpha_pr(beta, rho))
    meta = {"model": "bsr", "algorithm": "min |S|_* s.t. <X_mu, S> = y_mu (cvxpy; bsr.md 11.1)",
            "d": d, "beta": beta, "rho": rho, "seed": args.seed, "samples": args.samples,
            "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"bsr_mnne_d{d}_beta{beta:g}_rho{rho:g}")


def cmd_mnne_threshold(args) -> int:
    from ..core.table import Table
    from .baselines import mnne_threshold
    from .theory import alpha_pr

    rows = {"beta": [], "rho": [], "alpha_mnne": [], "alpha_pr": []}
    for r in args.rho:
        rows["beta"].append(args.beta)
        rows["rho"].append(r)
        rows["alpha_mnne"].append(mnne_threshold(args.beta, r))
        rows["alpha_pr"].append(alpha_pr(args.beta, r) if r > 0 else 0.0)
    meta = {"model": "bsr", "quantity": "Donoho-Gavish-Montanari threshold (bsr.md 11.2)",
            "beta": args.beta, "normalization": NORMALIZATION}
    return emit(Table(rows, meta), args, f"bsr_mnne_threshold_beta{args.beta:g}")


# ----------------------------------------------------------------------- parser
THEORY_COLUMNS = (
    "Columns: alpha, beta, rho, delta (the inputs); mmse = 1 - q, the Bayes-optimal "
    "per-entry error on S*; q = overlap (1/(dL)) E<S_hat, S*>; alpha_pr = perfect-recovery "
    "threshold (mmse = 0 above it when delta = 0); ridge_mse = error of Bayes-optimal ridge "
    "on the vectorized tokens (lambda = delta); alpha_lr = n/(r(d+L)) = alpha beta/((1 + "
    "beta) rho), the sample ratio per degree of freedom; converged, iterations, residual = "
    "report of the fixed-point solve; mmse_error = certified bound on |mmse - exact| and "
    "converged = (mmse_error <= rtol mmse); method = how the value was obtained (spectral "
    "path, a limit with its bound, mpmath, exact).  With --precision, mmse and q are strings with DIGITS "
    "significant digits and digits_confirmed = digits agreeing with a solve at 2 x DIGITS.")
GAMP_COLUMNS = (
    "Columns (one row per alpha and seed): alpha = n/(dL) of the drawn sizes, seed; mse = "
    "per-entry error of the returned estimate; se_mse = state-evolution prediction after the "
    "same number of iterations; bo_mse = Bayes-optimal mmse; ridge_mse = Bayes-optimal ridge "
    "error; iterations; converged (change < TOL), stopped (max-iter reached), diverged.  With "
    "--trace one row per iteration: alpha, seed, iteration, mse, se_mse, variance (the "
    "algorithm's own variance estimate).")
GD_COLUMNS = (
    "Columns: alpha; gd_mean, gd_std = mean and standard deviation over the runs of the "
    "final per-entry error; agd = error of the average of the runs' final S; bo_mse = "
    "Bayes-optimal mmse and two_bo = 2 bo_mse (the averaged-GD reference); train_mean = "
    "mean final training loss (1/n) sum (yhat - y)^2; runs; diverged_runs = runs that "
    "became non-finite; steps = GD steps done.")
MNNE_COLUMNS = (
    "Columns: alpha; mse_mean, mse_std = mean and standard deviation of the per-entry error "
    "over SAMPLES instances; samples; alpha_mnne = nuclear-norm recovery threshold "
    "(bsr.md 11.2); alpha_pr = Bayes-optimal perfect-recovery threshold.")
THRESHOLD_COLUMNS = (
    "Columns: beta, rho (the inputs); alpha_mnne = Donoho-Gavish-Montanari threshold "
    "alpha_MNNE(rho, beta) above which nuclear-norm minimization recovers S* exactly "
    "(bsr.md 11.2); alpha_pr = Bayes-optimal perfect-recovery threshold (bsr.md 7).")


TRACE = Param.flag(default=False, doc="per-iteration table instead of finals")


def _options(schema: dict, *names) -> dict:
    return {k: schema[k] for k in names}


def register(sub) -> None:
    bsr = sub.add_parser("bsr", help="bilinear sequence regression (arXiv:2410.18858)",
                         description=describe(NORMALIZATION))
    bsub = bsr.add_subparsers(dest="task", required=True, help="what to compute")

    th = bsub.add_parser("theory", help="Bayes-optimal error curve",
                         description=describe("Bayes-optimal error of BSR (bsr.md 3), beta may "
                                              "be inf.", NORMALIZATION, THEORY_COLUMNS))
    add_params(th, P.THEORY, grid=("alpha",), many=("alpha",))
    add_output(th, plot="mmse and ridge error vs alpha, alpha_PR marked")
    th.set_defaults(func=cmd_theory)

    sim = ("alpha", "beta", "rho", "delta", "d")
    gp = bsub.add_parser("gamp", help="GAMP-RIE on simulated data, next to SE and BO",
                         description=describe("GAMP-RIE (bsr.md 6) at finite size on data drawn "
                                              "from the model.", NORMALIZATION, GAMP_COLUMNS))
    add_params(gp, _options(P.GAMP, *sim), grid=("alpha",), many=("alpha",))
    add_params(gp, {"seed": P.GAMP["seed"].with_default(0, doc="first data seed"),
                    "seeds": P.SEEDS, **_options(P.GAMP, "damping", "a_estimator", "onsager",
                                                 "max_iter", "tol"), "trace": TRACE})
    add_output(gp)
    gp.set_defaults(func=cmd_gamp)

    gd = bsub.add_parser("gd", help="gradient descent and averaged GD",
                         description=describe("Full-batch GD on S = U V^T/sqrt(r) with loss "
                                              "(1/4) sum_mu (yhat_mu - y_mu)^2 (bsr.md 13), RUNS "
                                              "runs from independent initializations on the "
                                              "same data.", NORMALIZATION, GD_COLUMNS))
    add_params(gd, _options(P.GD, *sim), grid=("alpha",), many=("alpha",))
    add_params(gd, dict(_options(P.GD, "runs", "lr", "steps", "init", "init_scale",
                                 "record_every"),
                        seed=P.GD["seed"].with_default(0, doc="data seed (the runs use SEED + 1)")),
               defaults={"runs": 16, "lr": 0.1, "steps": 50_000})
    add_output(gd)
    gd.set_defaults(func=cmd_gd)

    mn = bsub.add_parser("mnne", help="minimal nuclear-norm estimator (cvxpy)",
                         description=describe("argmin |S|_* s.t. <X_mu, S> = y_mu on noiseless "
                                              "data (bsr.md 11.1); needs symtheory[convex] and "
                                              "d L <= 10000.", NORMALIZATION, MNNE_COLUMNS))
    add_params(mn, _options(P.MNNE, "alpha", "beta", "rho", "d"), grid=("alpha",),
               many=("alpha",))
    add_params(mn, {"samples": Param.integer(low=1, default=4, doc="instances per alpha (seeds "
                                                                   "SEED, SEED+1, ...)"),
                    "seed": P.MNNE["seed"].with_default(0, doc="first data seed")})
    add_output(mn)
    mn.set_defaults(func=cmd_mnne)

    mt = bsub.add_parser("mnne-threshold", help="nuclear-norm exact-recovery threshold",
                         description=describe(NORMALIZATION, THRESHOLD_COLUMNS))
    add_params(mt, P.THRESHOLDS, many=("rho",))
    add_output(mt, quiet=False)
    mt.set_defaults(func=cmd_mnne_threshold)
