"""Three-layer tied softmax attention (M = 2, r = 1, c = 1): the pattern of Fig. 3 of
Troiani et al. (ICML 2025) -- per-layer overlaps and errors against alpha.

State evolution (smi.md 6, Eqs. 13-14) on frozen samples (block structure: the model is
even in every layer, smi.md 2.2), alphas in increasing order, each started from
``Q0 = max(Q*(previous alpha), 0.05 I)`` on the diagonal (``--start continuation``, the
default) or from the reference's ``0.05 I`` (``--start reference``).  The two reach the
same fixed point: the Bayes-optimal SE map is monotone in ``Q`` and in ``alpha``, so the
iterates from ``0.05 I`` at ``alpha`` stay above ``Q*(previous alpha)`` and below those
from the continuation start, which increase to the smallest fixed point above it; the
continuation start skips the slow escapes from the unstable ``Q_ll ~ 0``.  The
channel integrated by the Laplace-centred RQMC rule (glm/deep_posterior.py); per alpha:
the overlaps ``Q_ll`` with their Monte-Carlo standard errors (propagated through the
linearized map), the Bayes-optimal and plug-in errors (smi.md 4, 10.5) at the fixed
point, and the papers' ``BO_3w.csv`` (a Monte-Carlo-integrated SE with fresh samples,
smi.md 11.6) for comparison.

Estimator (``--estimator``): ``multilevel`` (default; glm/se/randomized_multilevel.py: a 128-point
rule on every draw corrected by the tol-1e-2 rule on Giles' share of them, measured per
alpha and recorded in the CSV) or ``square`` (the default rule, tol 5e-2 up to 1024 points,
whose own bias of Q_hat_22 is about -0.6% near alpha = 1.3).

Writes CSV + PNG + params.json into numerics/out/smi_deep_figures/ (or --out).
``--quick``: 2 alphas, 64 samples, coarse rules (checks the pipeline, not the numbers).
"""
from __future__ import annotations

import csv
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import output_dir, parser, save_figure, write_csv, write_params  # noqa: E402

from symtheory.glm import StateEvolution, bayes_error, plugin_error  # noqa: E402
from symtheory.glm.integrate.laplace_qmc import LaplaceQMCRule  # noqa: E402
from symtheory.glm.se.randomized_multilevel import MultilevelEstimator  # noqa: E402
from symtheory.smi import deep_attention  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "reference" / "smi" / "BO_3w.csv"


def main():
    p = parser(__doc__)
    p.add_argument("--alphas", type=float, nargs="+", default=None)
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--max-iter", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="seed of the SE's frozen draws")
    p.add_argument("--estimator", choices=("multilevel", "square"), default="multilevel")
    p.add_argument("--start", choices=("continuation", "reference"), default="continuation",
                   help="initial overlap of each alpha: max(previous fixed point, 0.05 I) "
                   "(continuation, alphas sorted) or 0.05 I (reference); same fixed point")
    args = p.parse_args()
    out = output_dir(__file__, args)
    quick = args.quick
    # full: two points per stage of the grand staircase measured by `smi threshold --depth
    # 3` (layer 3 at 0.212, layer 1 at 0.984, layer 2 at 1.117; README), and alpha < 1.5,
    # the counting bound of perfect recovery (2 outputs per sample, 3 layers)
    alphas = sorted(args.alphas or ([0.15, 0.6] if quick else [0.15, 0.6, 0.9, 1.05, 1.3, 1.45]))
    samples = args.samples or (64 if quick else 2000)
    max_iter = args.max_iter or (8 if quick else 60)
    rule = (LaplaceQMCRule(tol=5e-2, points=64, max_points=64, adapt=1) if quick
            else LaplaceQMCRule(tol=5e-2, points=128, max_points=1024))
    multilevel = MultilevelEstimator(
        coarse=LaplaceQMCRule(tol=1e3, points=64, max_points=64, adapt=1), fine=rule,
        fraction=0.25) if quick else MultilevelEstimator()
    if args.estimator == "multilevel":
        rule = None
    model = deep_attention(3, 2, 1, 1.0)
    params = dict(model=model.description, samples=samples, seed=args.seed, alphas=alphas,
                  estimator=args.estimator,
                  rule=(f"coarse {multilevel.coarse.describe()}; fine {multilevel.fine.describe()}"
                        if rule is None else rule.describe()),
                  start=args.start, max_iter=max_iter, error_samples=20000 if quick else 200000)
    write_params(out, params)
    rows = []
    t0 = time.time()
    Q_prev = np.zeros((3, 3))
    for alpha in alphas:
        ta = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            se = StateEvolution(model, alpha, samples=samples, seed=args.seed, rule=rule,
                                estimator=multilevel if rule is None else "auto")
            Q0 = 0.05 * np.eye(3)
            if args.start == "continuation":
                Q0 = np.diag(np.maximum(np.diag(Q_prev), 0.05))
            # the solver's own tolerance (1e-4 for this randomized rule, whose map is
            # smooth only to about that); 1e-6 could not be met and reported "no"
            res = se.solve(Q0, max_iter=max_iter, damping=0.3)
        Q_prev = res.Q
        if "se_estimator" not in params:
            params["se_estimator"] = se.estimator
        # the multilevel share is measured per alpha: its note (costs, variances) per alpha
        params.setdefault("estimator_notes", {})[str(alpha)] = res.observation
        write_params(out, params)
        Q = np.diag(np.diag(res.Q))
        row = {"alpha": alpha, "start": ", ".join(f"{v:.4g}" for v in np.diag(Q0))}
        for l in range(3):
            row[f"Q{l + 1}{l + 1}"] = res.Q[l, l]
            row[f"Q{l + 1}{l + 1}_stderr"] = res.Q_stderr[l, l]
        bo = bayes_error(model, Q, samples=params["error_samples"])
        pl = plugin_error(model, Q, samples=params["error_samples"])
        row.update(bo_error=bo.error, bo_stderr=bo.stderr, plugin_error=pl.error,
                   plugin_stderr=pl.stderr, converged=res.converged, stable=res.stable,
                   iterations=res.iterations, evaluations=se.evaluations,
                   channel_error_max=(np.nan if res.channel_error is None
                                      else float(res.channel_error)),
                   fine_fraction=(se.estimator_options.fraction if rule is None else np.nan),
                   seconds=round(time.time() - ta, 1))
        rows.append(row)
        print(f"[{time.time() - t0:6.0f}s] alpha={alpha}: Q = "
              + ", ".join(f"{row[f'Q{l}{l}']:.4f}+-{row[f'Q{l}{l}_stderr']:.1e}" for l in (1, 2, 3))
              + f"; converged={res.converged} stable={res.stable} ({res.iterations} it, "
              f"{se.evaluations} maps, {row['seconds']} s); BO {bo.error:.4f}, "
              f"plug-in {pl.error:.4f}", flush=True)
        write_csv(out / "se_depth3.csv", rows)      # after every alpha: a long run's partial result
    plot(rows, out)
    print(f"total {time.time() - t0:.0f} s")


def plot(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(REFERENCE) as fh:
        ref = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    a = np.array([r["alpha"] for r in rows])
    ra = np.array([r["alpha"] for r in ref])
    for l, col in zip((1, 2, 3), ("C0", "C1", "C2")):
        q = np.array([r[f"Q{l}{l}"] for r in rows])
        e = np.array([r[f"Q{l}{l}_stderr"] for r in rows])
        ax[0].errorbar(a, q, yerr=e, fmt="o-", color=col, label=f"SE Q{l}{l} (layer {l})")
        ax[0].plot(ra, [r[f"Q{l}{l}"] for r in ref], ":", color=col, label=f"BO_3w.csv Q{l}{l}")
    ax[0].set_xlabel("alpha")
    ax[0].set_ylabel("overlap")
    ax[0].set_title("depth 3, M = 2, r = 1, c = 1")
    for key, lab in (("bo_error", "Bayes-optimal"), ("plugin_error", "plug-in")):
        ax[1].errorbar(a, [r[key] for r in rows], yerr=[r[key.replace("error", "stderr")] for r in rows],
                       fmt="o-", label=lab)
    ax[1].set_xlabel("alpha")
    ax[1].set_ylabel("generalization error (squared Frobenius)")
    save_figure(fig, ax, out / "smi_deep.png")


if __name__ == "__main__":
    main()
