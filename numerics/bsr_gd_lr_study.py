"""GD learning-rate and initialization study (bsr.md 13, the paper's lr figure).

d = 50, beta = 1, rho = 0.2, alpha = 0.44 (above alpha_PR = 0.36, below alpha_MNNE):
final error of GD vs the learning rate, from prior (N(0,1)) and small-norm (std 1e-4)
initializations, K runs each; NaN marks diverged runs.  Writes gd_lr_study.csv,
gd_lr_study.png, params.json.

    python numerics/bsr_gd_lr_study.py [--quick]
"""
import warnings

import numpy as np

from _common import output_dir, parser, save_figure, write_csv, write_params

from symtheory.bsr.baselines import mnne_threshold
from symtheory.bsr.data import generate
from symtheory.bsr.gd import gradient_descent


def main():
    args = parser(__doc__).parse_args()
    out = output_dir(__file__, args)
    d = 20 if args.quick else 50
    runs = 4 if args.quick else 16
    steps = 1500 if args.quick else 10_000
    lrs = [0.1, 0.3, 0.5, 0.7] if args.quick else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    alpha, beta, rho = 0.44, 1.0, 0.2
    write_params(out, {"d": d, "alpha": alpha, "beta": beta, "rho": rho, "runs": runs,
                       "steps": steps, "lrs": lrs, "small_init_std": 1e-4, "data_seed": 0})
    data = generate(d, beta, rho, alpha, 0.0, seed=0)
    rows = []
    for init in ("prior", "small"):
        for lr in lrs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = gradient_descent(data, runs=runs, lr=lr, steps=steps, init=init,
                                       init_scale=1e-4, seed=3, record_every=steps // 10)
            fin = res.final_gen_error
            rows.append({"init": init, "lr": lr, "mean": float(np.nanmean(fin)) if np.isfinite(fin).any() else float("nan"),
                         "median": float(np.nanmedian(fin)) if np.isfinite(fin).any() else float("nan"),
                         "min": float(np.nanmin(fin)) if np.isfinite(fin).any() else float("nan"),
                         "max": float(np.nanmax(fin)) if np.isfinite(fin).any() else float("nan"),
                         "diverged": int(res.diverged.sum()), "runs": runs})
            print(rows[-1], flush=True)
    write_csv(out / "gd_lr_study.csv", rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, init in enumerate(("prior", "small")):
        rs = [r for r in rows if r["init"] == init]
        x = np.array([r["lr"] for r in rs]) + (i - 0.5) * 0.01
        ax.errorbar(x, [r["median"] for r in rs],
                    yerr=[[r["median"] - r["min"] for r in rs], [r["max"] - r["median"] for r in rs]],
                    fmt="o", capsize=3, label=f"{init} init (median, min-max)")
    ax.axhline(0.0, color="k", lw=0.8, label="Bayes-optimal (= 0 above alpha_PR)")
    ax.set_title(rf"GD final error, d={d}, $\alpha$={alpha} ($\alpha_{{MNNE}}$="
                 rf"{mnne_threshold(beta, rho):.3f})", fontsize=9)
    ax.set_xlabel("learning rate")
    ax.set_ylabel("error on $S^*$")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_ylim(bottom=0)
    save_figure(fig, ax, out / "gd_lr_study.png")


if __name__ == "__main__":
    main()
