"""Gradient descent and averaged GD vs the Bayes-optimal error and twice it (bsr.md 13).

Full-batch GD on S = U V^T/sqrt(r) from K prior initializations on the same data;
single runs are compared with 2 x BO (a posterior sample has twice the BO error) and the
average of the K final matrices (AGD) with BO.  Writes gd_vs_bo.csv, gd_vs_bo.png,
params.json.

    python numerics/bsr_gd_vs_bo.py [--quick] [--runs K] [--lr LR] [--steps T]
"""
import warnings

import numpy as np

from _common import output_dir, parser, save_figure, write_csv, write_params

from symtheory import bsr
from symtheory.bsr.data import generate
from symtheory.bsr.gd import gradient_descent


def main():
    p = parser(__doc__)
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--steps", type=int, default=None)
    args = p.parse_args()
    out = output_dir(__file__, args)
    d = 20 if args.quick else 50
    runs = args.runs or (8 if args.quick else 64)
    steps = args.steps or (2000 if args.quick else 10_000)
    lr = args.lr or 0.5
    beta, rho, delta = 1.0, 0.2, 0.0
    alphas = [0.1, 0.2, 0.3, 0.45] if not args.quick else [0.15, 0.3]
    write_params(out, {"d": d, "beta": beta, "rho": rho, "delta": delta, "alphas": alphas,
                       "runs": runs, "lr": lr, "steps": steps, "init": "prior", "data_seed": 0})
    rows = []
    for a in alphas:
        data = generate(d, beta, rho, a, delta, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = gradient_descent(data, runs=runs, lr=lr, steps=steps, seed=1, record_every=steps // 20)
        bo = bsr.bo_point(data.alpha, beta, rho, delta).mmse
        fin = res.final_gen_error
        rows.append({"alpha": data.alpha, "bo_mse": bo, "two_bo": 2 * bo,
                     "gd_mean": float(np.nanmean(fin)), "gd_std": float(np.nanstd(fin)),
                     "agd": res.averaged_error, "train_mean": float(np.nanmean(res.train_error[-1])),
                     "diverged": int(res.diverged.sum()), "runs": runs, "lr": lr, "steps": steps})
        print(rows[-1], flush=True)
    write_csv(out / "gd_vs_bo.csv", rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0.01, max(alphas) * 1.1, 100)
    bo = bsr.bo_curve(grid, beta, rho, delta)["mmse"]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(grid, bo, "k-", label="Bayes-optimal")
    ax.plot(grid, 2 * bo, "k--", label="2 x Bayes-optimal")
    ax.errorbar([r["alpha"] for r in rows], [r["gd_mean"] for r in rows],
                yerr=[r["gd_std"] for r in rows], fmt="o", label=f"GD (lr={lr}, {runs} runs)")
    ax.plot([r["alpha"] for r in rows], [r["agd"] for r in rows], "s", label=f"averaged GD ({runs})")
    ax.axvline(bsr.alpha_pr(beta, rho), color="C3", ls=":", label=r"$\alpha_{PR}$")
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel("error on $S^*$")
    ax.set_title(rf"BSR GD, d={d}, $\beta$={beta:g}, $\rho$={rho:g}, $\Delta$={delta:g}")
    save_figure(fig, ax, out / "gd_vs_bo.png")


if __name__ == "__main__":
    main()
