"""Three-layer tied softmax attention (M = 2, r = 1, c = 1): the SE map along one layer's
overlap, on common draws, to locate its fixed points and compare the rules GAMP and the
SE integrate the channel with (smi.md 6, Eq. 13; glm/se/randomized_multilevel.py).

At ``Q = diag(q_1, ..., q_L)`` with every overlap but layer ``--layer`` held, the script
evaluates ``F(Q) = F_prior(Q_hat(Q))`` for each value in ``--grid`` and prints ``F_ll - q_l``
(its zeros are the fixed points along that line; a stable one has slope ``< 0``).  All
points use the same frozen draws, so their differences are far more precise than each
point's standard error, and the slope ``dF_ll / dq_l`` (the map's slow eigenvalue
``lambda``) is read off as well; a root's standard error is about ``stderr(F_ll) / (1 -
lambda)``.  Estimators (``--estimator``, repeatable):

* ``multilevel``: the SE's sharp map (a 128-point Laplace-RQMC rule on every draw,
  telescoped with the tol-1e-2 rule on Giles' share of them: unbiased for the fine rule);
* ``gamp-rule``: the 'combined' estimator on GAMP's own channel rule
  (``LaplaceQMCRule(**GAMP_RULE)`` of numerics/smi_deep_gamp.py: tol 0.1, 64..256 points), whose
  twin ``-dg`` keeps the rule's ratio bias; the map a GAMP run with that rule follows,
  up to finite-d effects.

``--solve``: also each scanned map's fixed point from its grid root (the same draws), with
``Q_stderr``, into smi_deep_map_scan_solve.csv.  On ``gamp-rule`` that is the SE of GAMP's
own rule: where a GAMP run lands if its rule's bias, not finite d, sets its overlaps.

Writes smi_deep_map_scan.csv, smi_deep_map_scan.png, params.json (and with --solve
smi_deep_map_scan_solve.csv) into
numerics/out/smi_deep_map_scan/ (or --out).  Full (defaults): alpha = 1.3, q = (0.36, *,
0.992), layer 2 at 0.20 0.26 0.33 0.40, 8192 draws; --quick: 256 draws, two grid points.

    python numerics/smi_deep_map_scan.py [--quick] [--estimator E ...] [--solve]
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import output_dir, parser, save_figure, write_csv, write_params  # noqa: E402

ESTIMATORS = ("multilevel", "gamp-rule")


def build_se(model, alpha, samples, seed, estimator):
    from symtheory.glm import StateEvolution
    from symtheory.glm.integrate.laplace_qmc import LaplaceQMCRule

    if estimator == "multilevel":
        return StateEvolution(model, alpha, samples=samples, seed=seed, estimator="multilevel")
    from smi_deep_gamp import GAMP_RULE

    return StateEvolution(model, alpha, samples=samples, seed=seed, estimator="combined",
                          rule=LaplaceQMCRule(**GAMP_RULE))


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--alpha", type=float, default=1.3, help="n/d (default 1.3)")
    p.add_argument("--depth", type=int, default=3, help="layers L (default 3)")
    p.add_argument("--q", type=float, nargs="+", default=None,
                   help="held overlaps q_1..q_L, rho = 1 (default 0.36 0.3 0.992; the scanned "
                        "layer's entry is replaced by the grid)")
    p.add_argument("--layer", type=int, default=2, help="scanned layer, 1..L (default 2)")
    p.add_argument("--grid", type=float, nargs="+", default=None,
                   help="values of q_layer in (0, 1) (default 0.20 0.26 0.33 0.40)")
    p.add_argument("--samples", type=int, default=None, help="frozen draws (default 8192)")
    p.add_argument("--seed", type=int, default=0, help="design seed (default 0)")
    p.add_argument("--estimator", choices=ESTIMATORS, action="append", default=None,
                   help="map(s) to scan (default multilevel; repeat for both)")
    p.add_argument("--solve", action="store_true",
                   help="also solve each scanned estimator's SE from its grid root")
    p.add_argument("--plot-only", action="store_true",
                   help="redraw the figure from the CSV in the output folder, no computing")
    args = p.parse_args(argv)

    L = args.depth
    q = list(args.q) if args.q is not None else ([0.36, 0.3, 0.992] if L == 3 else None)
    if q is None or len(q) != L:
        p.error(f"--q needs {L} overlaps (one per layer)")
    if not 1 <= args.layer <= L:
        p.error(f"--layer must be in 1..{L}, got {args.layer}")
    grid = args.grid or ([0.2, 0.33] if args.quick else [0.2, 0.26, 0.33, 0.4])
    if not all(0 < g < 1 for g in grid + q):
        p.error("overlaps must lie in (0, 1) (rho = 1)")
    samples = args.samples or (256 if args.quick else 8192)
    estimators = args.estimator or ["multilevel"]
    out = output_dir(__file__, args)
    k = args.layer - 1
    if args.solve and not args.plot_only:
        (out / "smi_deep_map_scan_solve.csv").unlink(missing_ok=True)   # no stale solves
    if args.plot_only:
        import csv

        with open(out / "smi_deep_map_scan.csv") as fh:
            rows = [{key: (v if key == "estimator" else float(v)) for key, v in r.items()}
                    for r in csv.DictReader(fh)]
        plot(rows, sorted({r["estimator"] for r in rows}), args, q, k, samples, out)
        return
    write_params(out, dict(alpha=args.alpha, depth=L, seq_len=2, rank=1, skip=1.0, inv_temp=1.0,
                           held_q=q, layer=args.layer, grid=grid, samples=samples,
                           seed=args.seed, estimators=estimators, solve=args.solve))

    from symtheory.smi.registry import build_model

    warnings.simplefilter("ignore")
    model = build_model("attention", {"depth": L, "seq_len": 2, "skip": 1.0, "inv_temp": 1.0})
    rows, solved = [], []
    for est in estimators:
        se = build_se(model, args.alpha, samples, args.seed, est)
        Q0 = np.diag(q)
        Q0[k, k] = grid[0]
        se.qhat(0.98 * Q0)                  # kernels, point sets, the multilevel pilot
        for value in grid:
            Qd = list(q)
            Qd[k] = value
            t = time.perf_counter()
            Qh, err, gap = se.qhat(np.diag(Qd))
            d, e = np.diag(Qh), np.diag(err)
            F, dF = d / (1 + d), e / (1 + d) ** 2          # Gaussian prior, rho = 1
            rows.append(dict(estimator=est, q_layer=value, **{f"F{i + 1}": F[i] for i in range(L)},
                             **{f"F{i + 1}_stderr": dF[i] for i in range(L)},
                             residual=F[k] - value, nishimori_gap=gap,
                             seconds=time.perf_counter() - t))
            print(f"{est:10s} q{args.layer} = {value:.3f}: F = {np.round(F, 4).tolist()} +- "
                  f"{np.round(dF, 4).tolist()}, F - q = {F[k] - value:+.4f} "
                  f"({rows[-1]['seconds']:.0f} s)", flush=True)
        mine = [r for r in rows if r["estimator"] == est]
        x = np.array([r["q_layer"] for r in mine])
        r = np.array([r["residual"] for r in mine])
        slope = np.polyfit(x, r + x, 1)[0] if len(x) > 1 else np.nan
        sign = np.nonzero(np.diff(np.sign(r)))[0]
        roots = [x[i] - r[i] * (x[i + 1] - x[i]) / (r[i + 1] - r[i]) for i in sign]
        s = max(m[f"F{args.layer}_stderr"] for m in mine)
        print(f"{est}: slope dF/dq = {slope:.3f}; roots on the grid "
              f"{[round(float(v), 4) for v in roots]} (+- ~{s / max(1 - slope, 1e-3):.3f} "
              "from the largest stderr(F) / (1 - slope))", flush=True)
        write_csv(out / "smi_deep_map_scan.csv", rows)      # before the (long) solves
        if args.solve and roots:
            Qs = np.diag(q)
            Qs[k, k] = roots[0]                  # the first sign change of the residual
            t = time.perf_counter()
            res = se.solve(Q0=Qs)
            seconds = time.perf_counter() - t
            print(f"{est} solve: Q = {np.round(np.diag(res.Q), 4).tolist()} +- "
                  f"{np.round(np.diag(res.Q_stderr), 4).tolist()}, converged {res.converged}, "
                  f"stable {res.stable}, {res.iterations} iterations, {seconds:.0f} s",
                  flush=True)
            solved.append(dict(estimator=est, start=roots[0], converged=res.converged,
                               stable=res.stable, iterations=res.iterations,
                               residual=res.residual, seconds=seconds, message=res.message,
                               **{f"Q{i + 1}": res.Q[i, i] for i in range(L)},
                               **{f"Q{i + 1}_stderr": res.Q_stderr[i, i] for i in range(L)}))
            write_csv(out / "smi_deep_map_scan_solve.csv", solved)
    write_csv(out / "smi_deep_map_scan.csv", rows)

    plot(rows, estimators, args, q, k, samples, out)


def plot(rows, estimators, args, q, k, samples, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L = len(q)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for est in estimators:
        mine = [r for r in rows if r["estimator"] == est]
        ax.errorbar([r["q_layer"] for r in mine], [r["residual"] for r in mine],
                    yerr=[r[f"F{args.layer}_stderr"] for r in mine], marker="o", capsize=3,
                    label=est)
    ax.axhline(0, color="k", lw=0.8)
    held = ", ".join("*" if i == k else f"{v:g}" for i, v in enumerate(q))
    ax.set_xlabel(f"q_{args.layer}  (Q = diag({held}))")
    ax.set_ylabel(f"F_{args.layer}{args.layer}(Q) - q_{args.layer}")
    ax.set_title(f"depth-{L} attention SE map, alpha = {args.alpha:g}, {samples} common draws",
                 fontsize=9)
    save_figure(fig, ax, out / "smi_deep_map_scan.png")


if __name__ == "__main__":
    main()
