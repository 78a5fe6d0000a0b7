"""``symtheory glm ...``: the family-neutral engines on a model the user declares.

``symtheory glm phases`` finds the phase transitions of a one-index GLM
``y ~ P_out(. | w . x / sqrt(d))`` with i.i.d. weights ``w_i ~ P`` (replica-symmetric
potential of Barbier, Krzakala, Macris, Miolane & Zdeborova, PNAS 116 (2019), Eqs.
(8)-(10)): weak recovery ``alpha_c``, the algorithmic spinodal ``alpha_alg`` and the
information-theoretic threshold ``alpha_IT`` (:mod:`symtheory.glm.thresholds.phases`).
"""
from __future__ import annotations

from ..core.cli_common import add_output, add_params, describe, emit
from ..core.tasks import Param
from ..core.validate import ParameterError

NORMALIZATION = (
    "Model: y ~ P_out(. | z), z = w . x / sqrt(d), x ~ N(0, I_d), w_i ~ P i.i.d. with "
    "rho = E w^2; alpha = n/d.  The replica-symmetric potential phi(alpha) = extr "
    "[-q q_hat/2 + psi_P(q_hat) + alpha psi_out(q)] (Barbier et al., PNAS 116 (2019), "
    "Eqs. (8)-(10)) is solved in the error V = rho - q.  Thresholds: alpha_c, where the "
    "uninformed fixed point (q = (E w)^2) loses stability; alpha_alg, the spinodal where "
    "the branch reached from an uninformed start ends (the SE map's slope crosses 1, "
    "reported as map_slope); alpha_IT, where the free entropies of the uninformed and "
    "the informed branch cross.  Between alpha_IT and alpha_alg (the hard phase) the "
    "Bayes-optimal error is below what AMP reaches.")

COLUMNS = (
    "Columns: kind (alpha_c, alpha_alg or alpha_IT), alpha, error (a bound: the "
    "quadrature's relative accuracy plus the change of alpha when the tolerance is "
    "loosened from 1e-12 to 1e-10; with --precision, |alpha| 10^-digits_confirmed), method, map_slope (the SE map's derivative at the "
    "spinodal, 1 there; NaN elsewhere), digits_confirmed (digits agreeing between "
    "mpmath runs at --precision and at twice it; NaN without --precision).")

PRIOR_HELP = ("the weights' prior: gaussian, rademacher, gauss-bernoulli:RHO (w = 0 with "
              "probability 1 - RHO, else N(0, 1); 0 < RHO <= 1), or a Python file defining "
              "`prior` (a symtheory.glm.SeparablePrior) or `build_prior()`")

PHASES_PARAMS = {
    "precision": Param.integer(low=5, high=200, default=None, nullable=True, metavar="DIGITS",
                               doc="confirm each threshold in mpmath at DIGITS and 2 x DIGITS "
                                   "digits; alpha is then printed to DIGITS digits",
                               why="below 5 the float64 value is better; 200 digits take "
                                   "hours"),
    "points": Param.integer(low=12, high=2000, default=90,
                            doc="points of the fixed-point curve alpha(V), from V = rho - "
                                "(E w)^2 down to V = 1e-30",
                            why="12 resolve one spinodal; 2000 take about 20x the default's "
                                "time"),
}


def prior_from_option(text: str):
    """The prior of ``--prior`` (see :data:`PRIOR_HELP`), refused by name if malformed."""
    from .factors import separable_prior as S

    if text == "gaussian":
        return S.gaussian()
    if text == "rademacher":
        return S.rademacher()
    if text.startswith("gauss-bernoulli"):
        _, _, rho = text.partition(":")
        try:
            value = float(rho)
        except ValueError:
            raise ParameterError(f"--prior gauss-bernoulli:RHO needs a number RHO in (0, 1], "
                                 f"got {text!r}") from None
        if not 0 < value <= 1:
            raise ParameterError(f"--prior gauss-bernoulli:RHO: RHO must be in (0, 1], got "
                                 f"{value}")
        return S.gauss_bernoulli(rho)
    if text.endswith(".py"):
        from ..core.cli_common import load_declaration

        return load_declaration(text, option="--prior", name="prior", factory="build_prior",
                                expected=S.SeparablePrior)
    raise ParameterError(f"--prior must be gaussian, rademacher, gauss-bernoulli:RHO or a "
                         f"Python file (*.py), got {text!r}")


def channel_from_args(args):
    """``(channel, params)`` of ``--channel sign`` or ``--model-file F``."""
    from .factors.scalar import ScalarChannel, sign_channel

    if args.model_file is None:
        channel = sign_channel(noise=False)
    else:
        from ..core.cli_common import load_declaration

        channel = load_declaration(args.model_file, option="--model-file", name="channel",
                                   factory="build_channel", expected=ScalarChannel)
    values = tuple(args.channel_param or ())
    if len(values) != len(channel.params):
        raise ParameterError(f"--channel-param: channel {channel.name!r} takes "
                             f"{len(channel.params)} values "
                             f"({', '.join(map(str, channel.params)) or 'none'}), got "
                             f"{len(values)}")
    return channel, values


def cmd_phases(args) -> int:
    import math

    from ..core.table import Table
    from .se.scalar_glm import ScalarGlmSE
    from .thresholds.phases import phase_transitions

    channel, values = channel_from_args(args)
    prior = prior_from_option(args.prior)
    se = ScalarGlmSE(channel, prior, values)
    report = phase_transitions(se, points=args.points, precision=args.precision)
    cols = {k: [] for k in ("kind", "alpha", "error", "method", "map_slope",
                            "digits_confirmed")}
    unconfirmed = []
    for t in report.transitions:
        row = t.row()
        if args.precision is not None:
            if t.mp_values is not None:
                import mpmath

                row["alpha"] = mpmath.nstr(t.mp_values[1], args.precision)
                # the confirmed digits bound the error (no longer the float64 bar)
                row["error"] = float(abs(t.mp_values[1])) * 10.0 ** -t.digits_confirmed
            if t.digits_confirmed is None or t.digits_confirmed < args.precision:
                unconfirmed.append(f"{t.kind}: {t.message.rsplit('; ', 1)[-1]}")
        for key, val in row.items():
            cols[key].append(val)
    meta = {"channel": channel.name, "channel_params": dict(zip(map(str, channel.params),
                                                                values)),
            "prior": args.prior, "rho": prior.second_moment, "points": args.points, "method": report.method,
            "perfect_recovery": report.perfect_recovery, "message": report.message,
            "curve": [{k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                       for k, v in p.items()} for p in report.curve],
            "normalization": NORMALIZATION}
    if getattr(args, "plot", False):
        meta["plot_curve"] = branch_curve(se, report)
    stem = f"phases_{channel.name}_{args.prior.replace(':', '').replace('/', '_')}"
    if not report.transitions:
        import sys

        print(f"symtheory: note: no transition found: {report.message}", file=sys.stderr)
    status = emit(Table(cols, meta), args, stem, plot_phases)
    if unconfirmed:
        import sys

        print(f"symtheory: error: --precision {args.precision}: not every threshold has its "
              f"digits confirmed ({'; '.join(unconfirmed)})", file=sys.stderr)
        return 1
    return status


def branch_curve(se, report, points: int = 160) -> list:
    """Fixed points for the plot, evenly spaced in the overlap ``q`` (the thresholds'
    curve is spaced for finding them, in ``log V``): ``V``, ``q``, ``alpha``, ``phi`` and
    ``stable`` (``alpha`` grows as ``V`` falls), then, when the informed branch is
    perfect recovery, ``V = 0`` itself (``phi = psi_c(inf) + alpha psi_out(0+)``, read
    off the curve's last point) at the curve's alphas."""
    import math

    import numpy as np

    frac = np.concatenate([np.linspace(1e-3, 0.95, points // 2),
                           1 - np.logspace(math.log10(0.05), -12, points - points // 2)])
    out, guess = [], None
    for f in frac:
        try:
            p = se.point(se.v_max * (1 - f), guess)
        except ArithmeticError:
            break
        guess = p["qhat"]
        out.append({k: p[k] for k in ("V", "q", "alpha", "phi")})
    alphas = np.array([p["alpha"] for p in out])
    grows = np.gradient(alphas) > 0
    for p, st in zip(out, grows):
        p["stable"] = bool(st)
    if report.perfect_recovery and report.curve:
        last = report.curve[-1]
        psi_c = last["phi"] - last["qhat"] * last["V"] / 2 - last["alpha"] * last["psi_out"]
        top = max(a for a in alphas if math.isfinite(a))
        for a in np.linspace(0, top, 60):
            out.append({"V": 0.0, "q": se.rho, "alpha": float(a),
                        "phi": psi_c + a * last["psi_out"], "stable": True, "perfect": True})
    return out


def plot_phases(table, path) -> None:
    """The overlap ``q/rho`` and the free entropy of every fixed point against alpha
    (stable: solid, unstable: dotted), the thresholds marked and the hard phase
    ``[alpha_IT, alpha_alg]`` shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    pts = table.meta["plot_curve"]
    curve = [p for p in pts if not p.get("perfect")]
    perfect = [p for p in pts if p.get("perfect")]
    rho = table.meta["rho"]
    found = dict(zip(table.columns["kind"], table.columns["alpha"]))

    def col(rows, key):
        return np.array([np.nan if r[key] is None else r[key] for r in rows], float)

    alpha, stable = col(curve, "alpha"), np.array([p["stable"] for p in curve])
    right = 1.3 * max(found.values(), default=float(np.nanmax(alpha[np.isfinite(alpha)])))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "q", "overlap q / rho"), (axes[1], "phi",
                                                                 "free entropy phi")):
        y = col(curve, key) / (rho if key == "q" else 1.0)
        ax.plot(alpha, np.where(stable, y, np.nan), "-", color="C0", label="stable fixed points")
        ax.plot(alpha, np.where(stable, np.nan, y), ":", color="C0", label="unstable")
        if perfect:
            yp = col(perfect, key) / (rho if key == "q" else 1.0)
            ax.plot(col(perfect, "alpha"), yp, "-", color="C4", label="perfect recovery V = 0")
        if "alpha_IT" in found and "alpha_alg" in found:
            ax.axvspan(found["alpha_IT"], found["alpha_alg"], color="0.88", label="hard phase")
        for kind, a in found.items():
            ax.axvline(a, ls="--", lw=0.8, color={"alpha_c": "C2", "alpha_alg": "C3",
                                                   "alpha_IT": "C1"}[kind],
                       label=f"{kind} = {a:.7g}")
        ax.set_xlim(0, right)
        ax.set_xlabel("alpha = n / d")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"channel {table.meta['channel']}, prior {table.meta['prior']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(sub) -> None:
    g = sub.add_parser("glm", help="the family-neutral engines on a declared GLM "
                                   "(phase transitions)",
                       description="Engines of symtheory.glm, on a model declared in a file.")
    tasks = g.add_subparsers(dest="task", required=True, help="the engine to run")
    p = tasks.add_parser(
        "phases", help="alpha_c, alpha_alg and alpha_IT of a one-index GLM with a declared prior",
        description=describe(
            "Phase transitions of y ~ P_out(. | w . x / sqrt(d)) with i.i.d. weights from "
            "the fixed-point curve of its state evolution (Barbier et al., PNAS 116 "
            "(2019)); one row per transition.", NORMALIZATION, COLUMNS,
            example="symtheory glm phases --prior rademacher   # binary perceptron, ~15 s on 2 idle cores"))
    p.add_argument("--model-file", metavar="PATH",
                   help="a Python file defining `channel` (a symtheory.glm.ScalarChannel with "
                        "finitely many outputs, y_levels) or `build_channel()`; default: "
                        "the noiseless sign channel y = sign(z)")
    p.add_argument("--channel-param", type=float, nargs="+", metavar="VALUE",
                   help="values of the channel's parameters, in its declared order")
    p.add_argument("--prior", required=True, metavar="PRIOR", help=PRIOR_HELP)
    add_params(p, PHASES_PARAMS)
    add_output(p, plot="overlap and free entropy of every branch against alpha, the hard "
                       "phase shaded", quiet=False)
    p.set_defaults(func=cmd_phases)
