"""GAMP-RIE at finite size vs Bayes-optimal theory, state evolution, ridge, alpha_PR, alpha_MNNE.

The BSR paper's Fig. 3/5 pattern (bsr.md 6): for each (beta, rho, Delta) the final GAMP
error (mean and std over seeds) against the BO curve, the ridge baseline and the two
thresholds, plus the per-iteration error next to its state evolution at one alpha.
Writes gamp_finals.csv, gamp_traces.csv, gamp_vs_theory.png and params.json.

    python numerics/bsr_gamp_vs_theory.py [--quick]
"""
import warnings

import numpy as np

from _common import output_dir, parser, save_figure, write_csv, write_params

from symtheory import bsr
from symtheory.bsr.baselines import mnne_threshold
from symtheory.bsr.data import generate
from symtheory.bsr.gamp import gamp_rie


def main():
    args = parser(__doc__).parse_args()
    out = output_dir(__file__, args)
    if args.quick:
        d, seeds = 40, [0]
        settings = {(1.0, 0.5, 0.0): [0.2, 0.4, 0.6, 0.9], (2.0, 0.2, 0.1): [0.08, 0.2, 0.4]}
    else:
        d, seeds = 100, [0, 1, 2]
        settings = {(1.0, 0.5, 0.0): [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.85, 0.95],
                    (2.0, 0.2, 0.1): [0.04, 0.08, 0.12, 0.16, 0.2, 0.25, 0.4, 0.7]}
    write_params(out, {"d": d, "seeds": seeds, "settings": {str(k): v for k, v in settings.items()},
                       "gamp": "undamped, A = alpha/(Delta+V), empirical Onsager (defaults)"})
    finals, traces = [], []
    for (beta, rho, delta), alphas in settings.items():
        for a in alphas:
            errs = []
            for s in seeds:
                data = generate(d, beta, rho, a, delta, seed=s)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = gamp_rie(data, max_iter=150)
                errs.append(res.final_mse)
                for i, m, se in zip(res.trace["iteration"], res.trace["mse"], res.trace["se_variance"]):
                    traces.append({"beta": beta, "rho": rho, "delta": delta, "alpha": a, "seed": s,
                                   "iteration": i, "mse": m, "se_mse": se})
                del data
            bo = bsr.bo_point(a, beta, rho, delta).mmse
            finals.append({"beta": beta, "rho": rho, "delta": delta, "alpha": a,
                           # the spread over seeds: none from one seed (n/a, not 0)
                           "gamp_mean": float(np.mean(errs)),
                           "gamp_std": float(np.std(errs, ddof=1)) if len(errs) > 1 else float("nan"),
                           "seeds": len(seeds), "bo_mse": bo, "ridge_mse": bsr.ridge_mse(a, delta),
                           "alpha_pr": bsr.alpha_pr(beta, rho),
                           "alpha_mnne": mnne_threshold(beta, rho)})
            spread = f"{np.std(errs, ddof=1):.4f}" if len(errs) > 1 else "n/a (1 seed)"
            print(f"beta={beta} rho={rho} delta={delta} alpha={a}: GAMP {np.mean(errs):.4f} "
                  f"+- {spread}, BO {bo:.4f}", flush=True)
    write_csv(out / "gamp_finals.csv", finals)
    write_csv(out / "gamp_traces.csv", traces)
    plot(out, finals, traces, settings)


def plot(out, finals, traces, settings):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    for i, (beta, rho, delta) in enumerate(settings):
        c = f"C{i}"
        grid = np.linspace(0.005, max(settings[(beta, rho, delta)]) * 1.05, 80)
        ax.plot(grid, bsr.bo_curve(grid, beta, rho, delta)["mmse"], color=c,
                label=rf"BO $\beta={beta:g},\rho={rho:g},\Delta={delta:g}$")
        ax.plot(grid, [bsr.ridge_mse(a, delta) for a in grid], color=c, ls=":", lw=1)
        rows = [f for f in finals if (f["beta"], f["rho"], f["delta"]) == (beta, rho, delta)]
        ax.errorbar([r["alpha"] for r in rows], [r["gamp_mean"] for r in rows],
                    yerr=[r["gamp_std"] for r in rows], fmt="o", color=c, ms=4, capsize=2)
        if delta == 0:
            ax.axvline(rows[0]["alpha_pr"], color=c, ls="--", lw=0.8)
        ax.axvline(rows[0]["alpha_mnne"], color=c, ls="-.", lw=0.8)
    ax.set_xlabel(r"$\alpha=n/(dL)$")
    ax.set_ylabel(r"error on $S^*$")
    ax.set_title("GAMP-RIE (points), BO (lines), ridge (dotted)\n"
                 r"$\alpha_{PR}$ dashed, $\alpha_{MNNE}$ dash-dot", fontsize=9)
    ax = axes[1]
    key = list(settings)[0]
    a_show = sorted(settings[key])[len(settings[key]) // 2]
    tr = [t for t in traces if (t["beta"], t["rho"], t["delta"]) == key and t["alpha"] == a_show]
    for s in sorted({t["seed"] for t in tr}):
        ts = [t for t in tr if t["seed"] == s]
        ax.plot([t["iteration"] for t in ts], [t["mse"] for t in ts], "o", ms=3, label=f"GAMP seed {s}")
    ts = [t for t in tr if t["seed"] == tr[0]["seed"]]
    ax.plot([t["iteration"] for t in ts], [t["se_mse"] for t in ts], "k-", label="state evolution")
    ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("error")
    ax.set_title(rf"$\beta={key[0]:g},\rho={key[1]:g},\Delta={key[2]:g},\alpha={a_show}$", fontsize=9)
    save_figure(fig, axes, out / "gamp_vs_theory.png", legend_size=7)


if __name__ == "__main__":
    main()
