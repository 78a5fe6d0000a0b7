"""``symtheory smi ...`` subcommands: state evolution, errors at an overlap, GAMP.

The parser is declared with light imports only; each command imports the numerics it
runs.  Options are checked while parsing (``symtheory.core.cli_common``); what needs the
model (the overlap's size, the need for output noise) is checked right after the model is
built, before anything is computed.  The options are generated from the tasks' schemas
(:mod:`symtheory.smi.params`); the models come from :mod:`symtheory.smi.registry`.
"""
from __future__ import annotations

import sys

from ..core.cli_common import add_output, add_params, alphas_from_args, converter, describe, emit
from ..core.validate import ParameterError
from ..glm.se.sampling import design_record
from . import params as P
from . import registry
from .common_cli import NORMALIZATION, add_model_options, build_model  # noqa: F401 (public)
from .model_file import EXAMPLE

OVERLAP_FORM = "a symmetric P x P matrix 'Q11,Q12;Q21,Q22' with eigenvalues in [0, 1]"


def _rule(args):
    """The tensor rule of --quadrature / --quadrature-nodes, or None (the channel's default
    rule) when neither is given."""
    from ..core.quadrature import TensorRule

    if args.quadrature is None and args.quadrature_nodes is None:
        return None
    return TensorRule(args.quadrature or "gauss-hermite", args.quadrature_nodes or 30, 6.0)


def _rule_in_use(se) -> str:
    """What integrated the channel in the SE ``se``: its feature rule (a reduced link), the
    channel's rule, or the channel default, described."""
    for rule in (getattr(se, "feature_rule", None), getattr(se.channel, "rule", None)):
        if rule is not None and hasattr(rule, "describe"):
            return rule.describe()
    return "channel default"


def _overlap_text(text: str):
    """``"Q11,Q12;Q21,Q22"`` -> rows of floats: finite, square and symmetric (parse time;
    the size and the eigenvalues are checked against the model later)."""
    def bad(why):
        return ParameterError(f"--overlap must be {OVERLAP_FORM}, got {text!r} ({why})")

    try:
        rows = [[float(v) for v in row.split(",")] for row in text.strip().split(";")]
    except ValueError:
        raise bad("not numbers") from None
    P = len(rows)
    if any(len(r) != P for r in rows):
        raise bad(f"rows of lengths {[len(r) for r in rows]}, not a square matrix")
    flat = [v for r in rows for v in r]
    if not all(abs(v) < float("inf") for v in flat):
        raise bad("not finite")
    if any(abs(rows[a][b] - rows[b][a]) > 1e-12 for a in range(P) for b in range(a)):
        raise bad("not symmetric")
    return rows


def parse_overlap(rows, P: int):
    """The checked overlap as a ``P x P`` array (eigenvalues in [0, 1] up to 1e-12)."""
    import numpy as np

    if isinstance(rows, str):
        rows = _overlap_text(rows)
    Q = np.array(rows, dtype=float)
    if Q.shape != (P, P):
        raise ParameterError(f"--overlap must be {P} x {P} for this model (P = {P}), got "
                             f"{Q.shape[0]} x {Q.shape[1]}")
    lam = np.linalg.eigvalsh(Q)
    # 1e-12: a matrix typed to 12 digits may round just outside [0, 1]
    if lam[0] < -1e-12 or lam[-1] > 1 + 1e-12:
        raise ParameterError(f"--overlap must have eigenvalues in [0, 1], got "
                             f"[{lam[0]:.3g}, {lam[-1]:.3g}]")
    return Q


# ----------------------------------------------------------------------- se
def cmd_se(args) -> int:
    alphas = alphas_from_args(args)

    def fits(sizes):          # the frozen samples' memory, before any SymPy work
        registry.check_se_memory(args.samples, sizes, noise=args.noise is not None,
                                 sampling=args.sampling)

    model = build_model(args, precheck=fits)
    import numpy as np

    from ..core.progress import progress_bar
    from ..core.table import Table
    from ..glm.se.errors import bayes_error, plugin_error
    from ..glm.se.state_evolution import StateEvolution

    rule, noise, lam = _rule(args), args.noise, args.side_information
    P = model.P
    Q0 = (0.05 if args.start == "uninformed" else 0.99) * np.eye(P)
    names = [(a, b) for a in range(P) for b in range(a, P)]
    cols = {k: [] for k in ["alpha"] + [f"Q{a + 1}{b + 1}" for a, b in names] +
            [f"Q{a + 1}{a + 1}_stderr" for a in range(P)]}
    for k in ("bo_error", "bo_stderr", "plugin_error", "plugin_stderr", "free_entropy",
              "free_entropy_stderr", "converged", "stable", "iterations", "residual",
              "nishimori_gap", "channel_error", "channel_qhat_error", "samples", "observation",
              "method"):
        cols[k] = []
    rules_used = {}       # a reduced link may switch to the peak-following rule per alpha
    reports = []          # the solver's message per alpha (stages, escapes, error notes)
    for alpha in progress_bar(alphas, desc="SE", enabled=not args.quiet):
        se = StateEvolution(model, alpha, samples=args.samples, seed=args.seed,
                            noise_variance=noise, rule=rule, side_information=lam,
                            sampling=args.sampling, observation=args.observation,
                            omega_nodes=args.omega_nodes)
        if args.target_error is not None:
            # rounds of growing samples; each round's ETA goes to stderr
            res = se.solve_to_target(args.target_error, Q0, damping=args.damping,
                                     max_iter=args.max_iter, progress=not args.quiet)
        else:
            # the inner bar counts SE iterations (of the budget): one alpha point can take
            # minutes
            res = se.solve(Q0, damping=args.damping, max_iter=args.max_iter,
                           progress=not args.quiet)
        rules_used.setdefault(_rule_in_use(se), []).append(alpha)
        reports.append({"alpha": alpha, "report": res.message})
        cols["alpha"].append(alpha)
        for a, b in names:
            cols[f"Q{a + 1}{b + 1}"].append(float(res.Q[a, b]))
        for a in range(P):
            cols[f"Q{a + 1}{a + 1}_stderr"].append(float(res.Q_stderr[a, a]))
        if not args.errors:
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
        cols["stable"].append("unchecked" if res.stable is None else bool(res.stable))
        cols["iterations"].append(res.iterations)
        cols["residual"].append(res.residual)
        cols["nishimori_gap"].append(res.nishimori_gap)
        cols["channel_error"].append(float("nan") if res.channel_error is None
                                     else res.channel_error)
        cols["channel_qhat_error"].append(float("nan") if res.channel_qhat_error is None
                                          else res.channel_qhat_error)
        cols["samples"].append(res.samples)
        cols["observation"].append(res.observation)
        cols["method"].append(res.method)
    meta = {"model": model.description, "samples": args.samples,
            "target_error": args.target_error,
            **design_record(se.sampling, se.omega_nodes), "seed": args.seed,
            "quadrature": (next(iter(rules_used)) if len(rules_used) == 1 else
                           "; ".join(f"{r} at alpha = {', '.join(f'{a:g}' for a in al)}"
                                     for r, al in rules_used.items())),
            "estimator": se.estimator, "method": sorted(set(cols["method"])),
            "solver_reports": reports,
            "noise_variance": noise,
            "side_information": lam, "start": args.start, "damping": args.damping,
            "normalization": NORMALIZATION,
            "stderr": "sampling gauss-hermite: Q*_stderr is the rules' error estimate (change "
                      "of Q_hat against 2/3 of the Gauss-Hermite nodes per axis plus the "
                      "observation rule's coarse level, added linearly through the linearized "
                      "SE map), not a standard error; otherwise "
                      "Q*_stderr: standard error of the fixed point from the frozen samples "
                      "(rqmc: spread of the per-scrambling means, a t quantity with "
                      "scrambles - 1 degrees of freedom; monte-carlo: per-sample spread, or "
                      "under --noise the spread of the means over the channel rule's "
                      "point sets), "
                      "propagated through the linearized SE map, combined in quadrature "
                      "with the iteration's truncation error (Newton-predicted distance to "
                      "the fixed point); errors: Monte-Carlo "
                      "standard errors of their own --error-samples draws; where the "
                      "method column reads 'plateau map' (chosen under --target-error on a "
                      "staircase plateau, glm/se/plateau.py) Q*_stderr is that rule's error "
                      "estimate (change against a refined rule through 1 - F')",
            "free_entropy": "Phi = -Tr(Q Q_hat)/2 + psi_P(Q_hat) + alpha Psi_out(Q) (smi.md 4); "
                            "Psi_out is the log-density of y in the observed coordinates (of "
                            "the inversion features, e.g. softmax logit differences, for a "
                            "noiseless reduced link: a shift independent of Q and alpha)",
            "nishimori_gap": "max |E g g^T - E(-dg)| / ||(rho - Q)^-1||",
            "channel_error": "the channel's estimated error of the posterior moments (max over "
                             "samples) at the fixed point: change against 1.5x the quadrature "
                             "nodes per axis (noiseless reduced link), against half the nodes "
                             "(other tensor rules: an over-estimate), or the 95% half-width "
                             "over RQMC scramblings",
            "channel_qhat_error": "the same refinement's change of Q_hat at the fixed point "
                                  "in its sampling standard errors (max over entries; "
                                  "grows with samples for a fixed quadrature bias: like "
                                  "sqrt(samples) for monte-carlo, faster for rqmc; "
                                  "not part of Q_stderr; NaN where the rule has no "
                                  "refinement: a noisy link's RQMC rule, whose random "
                                  "error is in the sampling spread)"}
    return emit(Table(cols, meta), args, "smi_se", plot=_plot_se)


def _marker(n_points: int):
    """A single point draws no line: mark the points when there are few."""
    return "o" if n_points < 30 else None


def _plot_se(table, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    a = table["alpha"]
    mk = _marker(len(a))
    for name in table.names:
        if name.startswith("Q") and not name.endswith("stderr") and name[1] == name[2]:
            ax[0].errorbar(a, table[name], yerr=table[name + "_stderr"], marker=mk, ms=4,
                           label=f"$Q_{{{name[1:]}}}$")
    ax[0].set_xlabel(r"$\alpha = n/d$")
    ax[0].set_ylabel("overlap")
    ax[0].legend()
    ax[1].errorbar(a, table["bo_error"], yerr=table["bo_stderr"], marker=mk, ms=4,
                   label="Bayes-optimal")
    ax[1].errorbar(a, table["plugin_error"], yerr=table["plugin_stderr"], marker="s", ms=4,
                   label="plug-in")
    ax[1].set_xlabel(r"$\alpha = n/d$")
    ax[1].set_ylabel("generalization error")
    ax[1].legend()
    fig.suptitle(table.meta.get("model", ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130, format="png")
    plt.close(fig)


# ----------------------------------------------------------------------- error
def cmd_error(args) -> int:
    model = build_model(args, "error")
    Q = parse_overlap(args.overlap, model.P)
    from ..core.table import Table
    from ..glm.se.errors import bayes_error, plugin_error

    estimate = bayes_error if args.kind == "bo" else plugin_error
    est = estimate(model, Q, samples=args.samples, seed=args.seed)
    text = ";".join(",".join(repr(v) for v in row) for row in args.overlap)
    table = Table({"kind": [args.kind], "error": [est.error], "stderr": [est.stderr],
                   "samples": [est.samples], "overlap": [text]},
                  {"model": model.description, "seed": args.seed, "normalization": NORMALIZATION})
    return emit(table, args, f"smi_error_{args.kind}")


# ----------------------------------------------------------------------- gamp
def cmd_gamp(args) -> int:
    model = build_model(args, "gamp")
    import numpy as np

    from ..core.table import Table
    from ..glm.gamp.tokens import gamp_tokens
    from .data import generate

    d, alpha, noise, lam = args.d, args.alpha, args.noise, args.side_information
    data = generate(model, d, alpha, seed=args.seed, noise_variance=noise or 0.0)
    ch = model.channel(noise, _rule(args))
    S = None
    if lam > 0:
        rng = np.random.default_rng(args.seed + 1)
        S = np.sqrt(lam) * data.W + rng.standard_normal(data.W.shape)
    res = gamp_tokens(data.X, data.y, ch, damping=args.damping,
                      max_iter=args.max_iter, tol=args.tol, seed=args.seed + 2,
                      init_scale=args.init_scale,
                      side_information=lam, side_observation=S, truth=data.W,
                      progress=not args.quiet)
    P = model.P
    cols = {"iteration": [r["iteration"] for r in res.trace]}
    for a in range(P):
        cols[f"M{a + 1}{a + 1}"] = [float(r["M"][a, a]) for r in res.trace]
        cols[f"Q{a + 1}{a + 1}"] = [float(r["Q"][a, a]) for r in res.trace]
        cols[f"V{a + 1}{a + 1}"] = [float(r["V"][a, a]) for r in res.trace]
        cols[f"cosine{a + 1}"] = [float(r["cosine"][a]) for r in res.trace]
        cols[f"normalized_overlap{a + 1}"] = [float(r["normalized_overlap"][a])
                                              for r in res.trace]
    meta = {"model": model.description, "d": d, "alpha": alpha, "n": data.X.shape[0],
            "seed": args.seed, "damping": args.damping,
            "damping_meaning": "weight of the previous iterate (0 = undamped)",
            "tol": args.tol, "init_scale": args.init_scale, "side_information": lam,
            "noise_variance": noise,
            "message": res.message, "converged": res.converged, "diverged": res.diverged,
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
            ax.plot(it, table[name], marker=_marker(len(it)), ms=4, label=f"index row {name[6:]}")
    ax.set_xlabel("iteration")
    ax.set_ylabel(r"cosine similarity $|M_{aa}|/\sqrt{Q_{aa} |W^*_a|^2/d}$")
    ax.legend()
    ax.set_title(table.meta.get("model", ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130, format="png")
    plt.close(fig)


# ----------------------------------------------------------------------- parser
MODEL_FILE_HELP = ("--model-file PATH runs the Python file PATH, which must define `model` (a "
                   "symtheory.glm.MultiIndexModel) or a function `build_model()` returning one "
                   "(smi.md 1, 9).  Phase retrieval y = z^2, the same model as --model "
                   "outer-product --seq-len 1:")
SE_COLUMNS = (
    "Columns (one row per alpha): alpha = n/d; Qab (a <= b) = entries of the overlap Q = "
    "W_hat W*^T/d at the fixed point; Qaa_stderr = their standard errors (with --sampling "
    "gauss-hermite, nothing sampled: the rules' error estimate instead -- Q_hat's change "
    "against 2/3 of the nodes per axis plus the observation rule's coarse level, added "
    "linearly through the linearized SE map; otherwise of the frozen "
    "samples' design, --sampling, combined in quadrature with the iteration's truncation "
    "error: the distance to the fixed point one Newton step predicts, which matters only "
    "where the SE map's Jacobian has an eigenvalue near 1); "
    "bo_error, bo_stderr = Bayes-optimal generalization error (smi.md Eq. 11) and its "
    "standard error; plugin_error, plugin_stderr = error of the prediction with the mean "
    "weights (smi.md 10.5); free_entropy, free_entropy_stderr = Phi (smi.md 4); converged, "
    "iterations, residual = report of the fixed-point solve; stable = no eigenvalue of the "
    "SE map's Jacobian at the fixed point above 1 (true/false; 'unchecked' when no "
    "difference stays in 0 <= Q < rho) -- an unstable point is not the Bayes-optimal "
    "answer even when converged; nishimori_gap = largest "
    "entry of |E g_out g_out^T - E(-dg_out)| (the two Q_hat/alpha estimators, equal at "
    "Bayes-optimality) in units of ||V^-1|| = 1/lambda_min(rho - Q), the scale bounding both: "
    "comparable across alpha, 0 up to sampling error (under --noise, where Q_hat comes "
    "from the cross product of two independent halves of the channel rule's "
    "scramblings, and for a deep link (--depth >= 3 without --quadrature), whose "
    "Laplace-RQMC rule makes the default estimator 'square', it also shows the rule's bias in E(-dg_out), which that "
    "estimator does not use); "
    "channel_error = largest estimated error of the channel's posterior moments over the "
    "samples at the fixed point (noiseless reduced link: change against the rule with 1.5x "
    "the quadrature nodes per axis; other tensor rules: change against half the nodes, an "
    "over-estimate; a noisy link with >= 3 non-affine indices: the 95% half-width over "
    "the RQMC scramblings; log Z absolute, means in prior standard deviations): above ~1e-2 "
    "the quadrature, not the Monte Carlo, limits a sample's moments -- except under "
    "--noise, whose 'cross' estimator (estimator in the parameters) takes per-sample "
    "errors up to ~0.25 by design: they enter Q_hat linearly and are counted in "
    "Q*_stderr; "
    "channel_qhat_error = that refinement's change of Q_hat at the fixed point in Q_hat's "
    "sampling standard errors (max over entries; NaN where there is no refinement, "
    "e.g. a noisy link's RQMC rule): what the SE sees of the quadrature.  It is a bias, "
    "not part of Q*_stderr, and in these units it grows with --samples (like its square "
    "root for --sampling monte-carlo, faster for rqmc).  Below "
    "~0.3 it adds under 5% to the error bar (added in quadrature); between 0.3 and 1 "
    "widen the error bar by it; above 1 the quadrature limits the result -- a finer "
    "--quadrature-nodes helps where the rule converges.  A noiseless reduced link whose "
    "rule over the prior moves Q_hat by more than 0.3 of them at the first warm-up "
    "stage's fixed point (a posterior much narrower than the prior, e.g. skip 100 at "
    "alpha = 1) continues on all samples with a peak-following rule (Gauss-Hermite around "
    "Newton-located maxima, half the nodes per component, power-2 shares between the "
    "components); otherwise its final stage is a two-level Monte Carlo (Giles): "
    "Gauss-Hermite 4 per axis on all samples plus the requested rule's difference from it "
    "on a prefix sized from their measured variances and node counts, unbiased for the "
    "requested rule (named in the solver report; the channel errors above are then "
    "those of the requested rule on that prefix); quadrature in the parameters names the "
    "rule used; "
    "samples = the frozen samples (gauss-hermite: the tensor rule's nodes) the fixed point "
    "was solved on (more than --samples "
    "after --target-error rounds); observation = how y was treated: integrated given omega "
    "(which rule, and the row permutations of the link each sample was averaged over) or "
    "sampled, and why.")
ERROR_COLUMNS = (
    "Columns: kind (bo: Bayes-optimal error, smi.md Eq. 11; plugin: prediction with the mean "
    "weights, smi.md 10.5); error, its Monte-Carlo stderr, samples; overlap = the matrix "
    "used.")
GAMP_COLUMNS = (
    "Columns (one row per iteration): iteration; for each index row a: Maa = W_hat_a . "
    "W*_a/d (teacher overlap), Qaa = |W_hat_a|^2/d (self overlap), Vaa = the algorithm's "
    "variance, cosine a = |Maa|/sqrt(Qaa |W*_a|^2/d) (cosine similarity with the teacher "
    "row), normalized_overlap a = W_hat_a . W*_a/|W*_a|^2 (signed; for a row group the model "
    "is even in, compare its absolute value with the SE's Q_aa/rho_aa: Maa carries the "
    "teacher's own norm |W*_a|^2/d, rho_aa within rho_aa sqrt(2/d) for a Gaussian prior; "
    "away from perfect recovery both still spread by O(1/sqrt(d)) over teachers).")


def _task_options(schema: dict, *names) -> dict:
    return {k: schema[k] for k in names}


def register(sub) -> None:
    smi = sub.add_parser("smi", help="sequence multi-index models / deep attention "
                                     "(arXiv:2502.00901)",
                         description=describe(NORMALIZATION))
    ssub = smi.add_subparsers(dest="task", required=True, help="what to compute")

    se = ssub.add_parser("se", help="state evolution fixed points, BO and plug-in errors",
                         description=describe("Matrix state evolution (smi.md 4): "
                                              "deterministic quadrature where y can be "
                                              "integrated given omega and P M <= 2, else Monte "
                                              "Carlo on frozen samples.", NORMALIZATION,
                                              SE_COLUMNS, MODEL_FILE_HELP, example=EXAMPLE))
    add_model_options(se, P.SE, defaults={"quadrature": None})
    add_params(se, _task_options(P.SE, "alpha", "samples", "target_error", "observation",
                                 "sampling", "omega_nodes", "error_samples", "errors",
                                 "start",
                                 "side_information", "damping", "max_iter", "seed"),
               grid=("alpha",), many=("alpha",))
    add_output(se, plot="overlaps and errors vs alpha")
    se.set_defaults(func=cmd_se)

    er = ssub.add_parser("error", help="Bayes-optimal or plug-in error at a given overlap",
                         description=describe("Generalization error at a given overlap matrix.",
                                              NORMALIZATION, ERROR_COLUMNS, MODEL_FILE_HELP,
                                              example=EXAMPLE))
    add_model_options(er, P.ERROR, defaults={"quadrature": None})
    er.add_argument("--overlap", type=converter(_overlap_text, "matrix"), required=True, metavar="Q",
                    help=f"{OVERLAP_FORM}, e.g. \"0.1,0;0,0.8\"")
    add_params(er, _task_options(P.ERROR, "kind", "samples", "seed"))
    add_output(er, quiet=False)
    er.set_defaults(func=cmd_error)

    gp = ssub.add_parser("gamp", help="GAMP (Algorithm 1) on simulated teacher data",
                         description=describe("GAMP for multi-index models with tokens "
                                              "(smi.md 5, Algorithm 1) on data drawn from the "
                                              "model.", NORMALIZATION, GAMP_COLUMNS,
                                              MODEL_FILE_HELP, example=EXAMPLE))
    add_model_options(gp, P.GAMP, defaults={"quadrature": None})
    add_params(gp, _task_options(P.GAMP, "d", "alpha", "damping", "max_iter", "tol",
                                 "init_scale", "side_information", "seed"),
               defaults={"seed": 0})
    add_output(gp, plot="cosine similarity per index row vs iteration")
    gp.set_defaults(func=cmd_gamp)

    from .sgd_cli import register_sgd

    register_sgd(ssub)

    from .thresholds_cli import register_threshold

    register_threshold(ssub)      # smi threshold, smi phase-diagram

    from .derive_cli import register_derive

    register_derive(ssub)
