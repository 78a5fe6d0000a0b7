"""AIM / QN: GAMP-RIE at finite d against the state evolution (aim.md 5).

Three cases of the issue's acceptance, each with its state-evolution curve:

* QN, kappa = rho = 0.5 (T = 1, identity): alpha_PR = 0.375;
* softmax T = 2, rho = 0.5: alpha_PR = 0.1875;
* hardmax T = 2, rho = 0.5: the corrected (Bayes) SE and the authors' joint-density
  surrogate (aim.md 3.5) side by side -- GAMP with the Bayes g_out follows the first.

Writes aim_gamp_vs_se.csv (one row per run), aim_gamp_trace.csv (per iteration),
aim_gamp_vs_se.png, params.json.  Full: d = 200, 3 seeds (hardmax d = 100, 1 seed: its
orthant channel costs ~1 ms per sample and iteration); --quick: d = 60, 1 seed, one
alpha below alpha_PR and one above, 30 iterations.

    python numerics/aim_gamp_vs_se.py [--quick] [--cases qn softmax hardmax]
"""
import sys

import numpy as np

from _common import output_dir, parser, save_figure, write_csv, write_params

CASES = {
    "qn": dict(seq_len=1, link="identity", below=[0.1, 0.2, 0.3], above=[0.5]),
    "softmax": dict(seq_len=2, link="softmax", below=[0.05, 0.1, 0.15], above=[0.25]),
    "hardmax": dict(seq_len=2, link="hardmax", below=[0.1, 0.3, 0.6], above=[]),
}


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--d", type=int, help="dimension (default 200, hardmax 100; quick 60)")
    p.add_argument("--seeds", type=int, nargs="+", help="data seeds (default 0 1 2; quick 0)")
    args = p.parse_args(argv)
    from symtheory.aim.gamp import gamp_curve, se_mse

    out = output_dir(__file__, args)
    rows, trace_rows, curves = [], [], {}
    for name in args.cases:
        c = CASES[name]
        d = args.d or (60 if args.quick else (100 if name == "hardmax" else 200))
        seeds = args.seeds or ([0] if (args.quick or name == "hardmax") else [0, 1, 2])
        alphas = c["below"] + c["above"]
        if args.quick:      # one point below alpha_PR, one above (hardmax: one point)
            alphas = [c["below"][1]] + c["above"]
        summary, trace = gamp_curve(alphas, d=d, rho=0.5, seq_len=c["seq_len"], link=c["link"],
                                    seeds=seeds, damping=0.5,
                                    max_iter=30 if args.quick else 150, progress=True)
        for r in summary.rows():
            rows.append(dict(case=name, d=d, **r))
            print(name, {k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()},
                  file=sys.stderr, flush=True)
        trace_rows += [dict(case=name, **r) for r in trace.rows()]
        if name == "hardmax":
            # ~30 s per hardmax SE point (quadrature of E||g_out||^2): a coarse grid
            grid = np.array(sorted(set([0.0] + alphas + ([] if args.quick else [0.05, 0.2, 0.45]))))
        else:
            grid = np.linspace(0.0, max(alphas) * 1.1, 60)
        curves[name] = {"alpha": grid, "se": [se_mse(a, 0.5, c["seq_len"], c["link"]) for a in grid]}
        if name == "hardmax":
            curves[name]["published"] = [se_mse(a, 0.5, 2, "hardmax", 0.0, "joint-density")
                                         for a in grid]
    keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k)
                  if k in rows[0] else 99)
    write_csv(out / "aim_gamp_vs_se.csv", [{k: r.get(k, "") for k in keys} for r in rows])
    write_csv(out / "aim_gamp_trace.csv", trace_rows)
    write_params(out, dict(cases=args.cases, d=args.d, seeds=args.seeds, quick=args.quick,
                           rho=0.5, damping=0.5))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.cases), figsize=(5 * len(args.cases), 4), squeeze=False)
    for ax, name in zip(axes[0], args.cases):
        cv = curves[name]
        ax.plot(cv["alpha"], cv["se"], "k-", label="SE (Bayes)")
        if "published" in cv:
            ax.plot(cv["alpha"], cv["published"], "r--", label="SE, authors' joint-density g_out")
        pts = [r for r in rows if r["case"] == name]
        ax.plot([r["alpha"] for r in pts], [r["mse"] for r in pts], "o", mfc="none",
                label=f"GAMP-RIE, d={pts[0]['d']} (each seed)")
        ax.set_title(f"{name}, rho = 0.5", fontsize=9)
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel(r"$\frac{1}{d}\|\hat S - S\|_F^2$")
        ax.set_ylim(bottom=0)
    save_figure(fig, axes[0], out / "aim_gamp_vs_se.png")


if __name__ == "__main__":
    main()
