"""``symtheory smi ...`` subcommands: state evolution, errors at an overlap, GAMP."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from ..core.cli_common import alphas_from_args as _alphas
from ..core.cli_common import check_format as _format
from ..core.cli_common import emit, num
from ..core import validate
from ..core.table import Table
from ..core.validate import ParameterError

NORMALIZATION = (
    "Model (Troiani et al., arXiv:2502.00901): y = g(W x/sqrt(d)), x in R^{d x M} with "
    "N(0,1) entries, W in R^{P x d} with N(0,1) entries; deep tied attention "
    "X_{l+1} = (c I + softmax_row(beta X_l W_l^T W_l X_l^T/d)) X_l, output the last "
    "attention matrix; alpha = n/d (per token dimension).  Overlaps Q = W_hat W*^T/d "
    "(P x P); errors are squared Frobenius norms summed over the output entries.")

MODELS = ("attention", "linear-attention", "outer-product", "linear-tokens")


def build_model(args):
    from . import deep_attention, linear_tokens, outer_product

    if args.model == "attention":
        return deep_attention(args.depth, args.seq_len, 1, args.skip, args.beta, "softmax")
    if args.model == "linear-attention":
        return deep_attention(args.depth, args.seq_len, 1, args.skip, args.beta, "linear")
    if args.model == "outer-product":
        return outer_product(args.seq_len)
    if args.model == "linear-tokens":
        return linear_tokens(args.seq_len)
    raise ParameterError(f"model must be one of {', '.join(MODELS)}, got {args.model!r}")


def _rule(args):
    from ..core.quadrature import TensorRule

    n = validate.integer("quadrature-nodes", args.quadrature_nodes, low=2)
    return TensorRule(args.quadrature, n, 6.0)


def _noise(args):
    if args.noise is None:
        return None
    return validate.real("noise", args.noise, low=0.0, low_open=True)


def parse_overlap(text: str, P: int) -> np.ndarray:
    """``"Q11,Q12;Q21,Q22"`` -> P x P symmetric PSD matrix with Q < I."""
    try:
        rows = [[float(v) for v in row.split(",")] for row in text.strip().split(";")]
    except ValueError:
        raise ParameterError(f"overlap must be numbers like 'Q11,Q12;Q21,Q22', got {text!r}") from None
    Q = np.array(rows, dtype=float)
    if Q.shape != (P, P):
        raise ParameterError(f"overlap must be {P} x {P} for this model, got shape {Q.shape}")
    if not np.all(np.isfinite(Q)) or not np.allclose(Q, Q.T, atol=1e-12):
        raise ParameterError("overlap must be finite and symmetric")
    lam = np.linalg.eigvalsh(Q)
    if lam[0] < -1e-12 or lam[-1] > 1 + 1e-12:
        raise ParameterError(f"overlap eigenvalues must lie in [0, 1], got [{lam[0]:.3g}, {lam[-1]:.3g}]")
    return Q


# ----------------------------------------------------------------------- se
def cmd_se(args) -> int:
    from ..glm.errors import bayes_error, plugin_error
    from ..glm.se import StateEvolution

    _format(args)
    model = build_model(args)
    alphas = [float(a) for a in _alphas(args)]
    if any(a <= 0 for a in alphas):
        raise ParameterError("alpha must be in (0, inf) for state evolution")
    samples = validate.integer("samples", args.samples, low=100)
    lam = validate.real("side-information", args.side_information, low=0.0)
    rule, noise = _rule(args), _noise(args)
    P = model.P
    if args.start == "uninformed":
        Q0 = 0.05 * np.eye(P)
    else:
        Q0 = 0.99 * np.eye(P)
    cols = {"alpha": []}
    names = [(a, b) for a in range(P) for b in range(a, P)]
    for a, b in names:
        cols[f"Q{a + 1}{b + 1}"] = []
    for a in range(P):
        cols[f"Q{a + 1}{a + 1}_stderr"] = []
    for k in ("bo_error", "bo_stderr", "plugin_error", "plugin_stderr"):
        cols[k] = []
    for k in ("free_entropy", "free_entropy_stderr", "converged", "iterations", "residual",
              "nishimori_gap"):
        cols[k] = []
    from ..core.progress import progress_bar

    for alpha in progress_bar(alphas, desc="SE", enabled=not args.quiet):
        se = StateEvolution(model, alpha, samples=samples, seed=args.seed, noise_variance=noise,
                            rule=rule, side_information=lam)
        res = se.solve(Q0, damping=args.damping, max_iter=args.max_iter)
        cols["alpha"].append(alpha)
        for a, b in names:
            cols[f"Q{a + 1}{b + 1}"].append(float(res.Q[a, b]))
        for a in range(P):
            cols[f"Q{a + 1}{a + 1}_stderr"].append(float(res.Q_stderr[a, a]))
        if args.no_errors:
            bo = pl = None
        else:
            Qc = 0.5 * (res.Q + res.Q.T)
            bo = bayes_error(model, Qc, samples=args.error_samples, seed=args.seed)
            pl = plugin_error(model, Qc, samples=args.error_samples, seed=args.seed)
        cols["bo_error"].append(bo.error if bo else float("nan"))
        cols["bo_stderr"].append(bo.stderr if bo else float("nan"))
        cols["plugin_error"].append(pl.error if pl else float("nan"))
        cols["plugin_stderr"].append(pl.stderr if pl else float("nan"))
        phi, phi_se = se.free_entropy(res.Q)
        cols["free_entropy"].append(phi)
        cols["free_entropy_stderr"].append(phi_se)
        cols["converged"].append(res.converged)
        cols["iterations"].append(res.iterations)
        cols["residual"].append(res.residual)
        cols["nishimori_gap"].append(res.nishimori_gap)
    meta = {"model": model.description, "samples": samples, "seed": args.seed,
            "quadrature": f"{rule.kind} {rule.n}", "noise_variance": noise,
            "side_information": lam, "start": args.start, "damping": args.damping,
            "normalization": NORMALIZATION,
            "stderr": "Q*_stderr: Monte-Carlo standard error of the fixed point (propagated "
                      "through the linearized SE map); errors: Monte-Carlo standard errors",
            "free_entropy": "Phi = -Tr(Q Q_hat)/2 + psi_P(Q_hat) + alpha Psi_out(Q) (smi.md 4); "
                            "Psi_out is the log-density of y in the observed coordinates"}
    table = Table(cols, meta)
    return emit(table, args, "smi_se", plot=_plot_se)


def _plot_se(table, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    a = table["alpha"]
    for name in table.names:
        if name.startswith("Q") and not name.endswith("stderr") and name[1] == name[2]:
            ax[0].errorbar(a, table[name], yerr=table[name + "_stderr"], marker="o", ms=3,
                           label=f"$Q_{{{name[1:]}}}$")
    ax[0].set_xlabel(r"$\alpha = n/d$")
    ax[0].set_ylabel("overlap")
    ax[0].legend()
    ax[1].errorbar(a, table["bo_error"], yerr=table["bo_stderr"], marker="o", ms=3, label="Bayes-optimal")
    ax[1].errorbar(a, table["plugin_error"], yerr=table["plugin_stderr"], marker="s", ms=3,
                   label="plug-in")
    ax[1].set_xlabel(r"$\alpha$")
    ax[1].set_ylabel("generalization error")
    ax[1].legend()
    fig.suptitle(table.meta.get("model", ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# ----------------------------------------------------------------------- error
def cmd_error(args) -> int:
    from ..glm.errors import bayes_error, plugin_error

    _format(args)
    model = build_model(args)
    Q = parse_overlap(args.overlap, model.P)
    samples = validate.integer("samples", args.samples, low=100)
    if args.kind == "bo":
        est = bayes_error(model, Q, samples=samples, seed=args.seed)
    elif args.kind == "plugin":
        est = plugin_error(model, Q, samples=samples, seed=args.seed)
    else:
        raise ParameterError(f"kind must be 'bo' or 'plugin', got {args.kind!r}")
    table = Table({"kind": [args.kind], "error": [est.error], "stderr": [est.stderr],
                   "samples": [est.samples], "overlap": [args.overlap]},
                  {"model": model.description, "seed": args.seed, "normalization": NORMALIZATION})
    return emit(table, args, f"smi_error_{args.kind}")


# ----------------------------------------------------------------------- gamp
def cmd_gamp(args) -> int:
    from ..glm.gamp_tokens import gamp_tokens
    from .data import generate

    _format(args)
    model = build_model(args)
    d = validate.integer("d", args.d, low=2)
    alpha = validate.real("alpha", args.alpha, low=0.0, low_open=True)
    noise = _noise(args)
    data = generate(model, d, alpha, seed=args.seed, noise_variance=noise or 0.0)
    ch = model.channel(noise, _rule(args))
    lam = validate.real("side-information", args.side_information, low=0.0)
    S = None
    if lam > 0:
        rng = np.random.default_rng(args.seed + 1)
        S = np.sqrt(lam) * data.W + rng.standard_normal(data.W.shape)
    res = gamp_tokens(data.X, data.y, ch, damping=args.damping, max_iter=args.max_iter,
                      seed=args.seed + 2, init_scale=args.init_scale, side_information=lam,
                      side_observation=S, truth=data.W, progress=not args.quiet)
    P = model.P
    cols = {"iteration": [r["iteration"] for r in res.trace]}
    for a in range(P):
        cols[f"M{a + 1}{a + 1}"] = [float(r["M"][a, a]) for r in res.trace]
        cols[f"Q{a + 1}{a + 1}"] = [float(r["Q"][a, a]) for r in res.trace]
        cols[f"V{a + 1}{a + 1}"] = [float(r["V"][a, a]) for r in res.trace]
        cols[f"cosine{a + 1}"] = [float(r["cosine"][a]) for r in res.trace]
    meta = {"model": model.description, "d": d, "alpha": alpha, "n": data.X.shape[0],
            "seed": args.seed, "damping": args.damping, "init_scale": args.init_scale,
            "side_information": lam, "noise_variance": noise, "message": res.message,
            "converged": res.converged, "diverged": res.diverged,
            "normalization": NORMALIZATION}
    print(f"GAMP: {res.message}", file=sys.stderr)
    return emit(Table(cols, meta), args, "smi_gamp", plot=_plot_gamp)


def _plot_gamp(table, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    it = table["iteration"]
    for name in table.names:
        if name.startswith("cosine"):
            ax.plot(it, table[name], marker="o", ms=3, label=f"layer/row {name[6:]}")
    ax.set_xlabel("iteration")
    ax.set_ylabel(r"cosine similarity $|M_{ll}|/\sqrt{Q_{ll}}$")
    ax.legend()
    ax.set_title(table.meta.get("model", ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# ----------------------------------------------------------------------- parser
def _model_args(p):
    p.add_argument("--model", default="attention", help=f"one of {', '.join(MODELS)}")
    p.add_argument("--depth", type=int, default=2, help="number of attention layers L")
    p.add_argument("--seq-len", type=int, default=2, help="tokens per sequence M")
    p.add_argument("--skip", type=num("skip"), default=1.0, help="skip strength c > 0")
    p.add_argument("--beta", type=num("beta"), default=1.0, help="softmax inverse temperature")
    p.add_argument("--noise", type=num("noise"), default=None,
                   help="Gaussian output-noise variance (default: noiseless)")
    p.add_argument("--quadrature", default="gauss-hermite", choices=("gauss-hermite", "uniform"),
                   help="channel quadrature rule over the integrated indices")
    p.add_argument("--quadrature-nodes", type=int, default=30, help="nodes per axis")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--format", default="csv", help="csv (default) or json")
    p.add_argument("--out", help="folder for the table, its parameters (and the plot)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def register(sub) -> None:
    smi = sub.add_parser("smi", help="sequence multi-index models / deep attention (arXiv:2502.00901)",
                         description=NORMALIZATION)
    ssub = smi.add_subparsers(dest="task", required=True)
    se = ssub.add_parser("se", help="state evolution fixed points, BO and plug-in errors",
                         description=NORMALIZATION)
    _model_args(se)
    g = se.add_mutually_exclusive_group()
    g.add_argument("--alpha", nargs="+", type=num("alpha"), metavar="A", help="n/d values")
    g.add_argument("--alpha-grid", nargs=3, type=num("alpha-grid"), metavar=("START", "STOP", "NUM"))
    se.add_argument("--samples", type=int, default=20000, help="Monte-Carlo samples (frozen)")
    se.add_argument("--error-samples", type=int, default=200000, help="samples for the errors")
    se.add_argument("--no-errors", action="store_true", help="skip the error columns")
    se.add_argument("--start", choices=("uninformed", "informed"), default="uninformed",
                    help="Q0 = 0.05 I (uninformed) or 0.99 I (informed)")
    se.add_argument("--side-information", type=num("side-information"), default=0.0)
    se.add_argument("--damping", type=float, default=0.2, help="weight of the old iterate")
    se.add_argument("--max-iter", type=int, default=300)
    se.add_argument("--plot", action="store_true", help="write a PNG of overlaps and errors")
    se.set_defaults(func=cmd_se)

    er = ssub.add_parser("error", help="Bayes-optimal or plug-in error at a given overlap",
                         description=NORMALIZATION)
    _model_args(er)
    er.add_argument("--overlap", required=True, help='P x P matrix, e.g. "0.1,0;0,0.8"')
    er.add_argument("--kind", default="bo", help="bo (Eq. 11) or plugin (reference csv)")
    er.add_argument("--samples", type=int, default=200000)
    er.set_defaults(func=cmd_error)

    gp = ssub.add_parser("gamp", help="GAMP (Algorithm 1) on simulated teacher data",
                         description=NORMALIZATION)
    _model_args(gp)
    gp.add_argument("--d", type=int, required=True, help="token dimension")
    gp.add_argument("--alpha", type=num("alpha"), required=True, help="n/d")
    gp.add_argument("--damping", type=float, default=0.0,
                    help="weight of the previous iterate, [0, 1); 0 = undamped")
    gp.add_argument("--max-iter", type=int, default=40)
    gp.add_argument("--init-scale", type=float, default=0.1, help="std of the random initial W")
    gp.add_argument("--side-information", type=num("side-information"), default=0.0)
    gp.add_argument("--plot", action="store_true", help="write a PNG of the cosine trace")
    gp.set_defaults(func=cmd_gamp)
