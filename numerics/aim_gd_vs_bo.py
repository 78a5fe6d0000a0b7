"""AIM: single and averaged gradient descent against the Bayes-optimal error (aim.md 6).

Softmax AIM, tied prior S = W W^T/sqrt(r d), same-architecture students trained by Adam
(lr 0.1, 1000 full-batch steps, W ~ N(0, 1)), as in the paper's GD_softmax_averaged.py.
Single runs are compared with twice the Bayes error (a posterior sample has twice the MMSE),
the average of the students' S (AGD) with the Bayes error itself.

The Bayes curve is the authors' state-evolution file SE_softmax_T=2_rho=<rho>.csv,
interpolated linearly and mapped to other T by the collapse alpha (T^2+T-2) (aim.md 3.4);
it is zero past alpha_PR.  (The package's own AIM theory is not used yet.)  The authors'
d = 200 GD files (GD_single, GD_averaged: 16 teachers, 32 students) are read at the same
alphas, which are points of their grid.  Reference data: <repo>/../shared/reference/aim.

Writes aim_gd_vs_bo.csv, aim_gd_vs_bo.png, params.json.

    python numerics/aim_gd_vs_bo.py [--quick] [--d D] [--students M] [--teachers K] [--points I ...]
"""
import csv
import math
import sys
from pathlib import Path

import numpy as np

from _common import output_dir, parser, save_figure, write_csv, write_params

from symtheory.aim.gd import gd_curve

REFERENCE = (Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "aim"
             / "BO_ExtensiveRankAttention" / "data")
#: the authors' GD grid: 32 log-spaced alphas in [0.0012, 0.3]
REFERENCE_GRID = np.geomspace(0.0012, 0.3, 32)
FULL_POINTS = [12, 16, 19, 21, 23, 25, 27, 28, 29, 30]
QUICK_POINTS = [19, 25, 28]


def read_csv(path: Path) -> dict:
    """Named columns of a reference CSV (the SE files start with an unnamed index)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {name: np.asarray([float(r[name]) for r in rows]) for name in rows[0] if name}


def bayes_mse(alphas, rho: float, seq_len: int) -> np.ndarray:
    """The reference SE curve (T = 2 file) at alpha (T^2+T-2)/4, zero past its last point
    (alpha_PR)."""
    path = REFERENCE / "SE_softmax" / f"SE_softmax_T=2_rho={rho:g}.csv"
    if not path.is_file():
        sys.exit(f"the Bayes curve is read from {path}, which is missing (reference data "
                 f"live in <repo>/../shared/reference/aim; files exist for rho = 0.1, 0.2, "
                 f"0.5, 2)")
    se = read_csv(path)
    a_t2 = np.asarray(alphas) * (seq_len**2 + seq_len - 2) / 4
    return np.where(a_t2 > se["alpha"][-1], 0.0, np.interp(a_t2, se["alpha"], se["mmse"]))


def reference_gd(kind: str, rho: float, seq_len: int, alphas) -> np.ndarray:
    """The authors' d = 200 GD errors at ``alphas`` (NaN where absent)."""
    suffix = "_averages=32" if kind == "GD_averaged" else ""
    path = REFERENCE / kind / f"GD_softmax_D=200_rho={rho:g}_T={seq_len}{suffix}.csv"
    if not path.is_file():
        return np.full(len(alphas), math.nan)
    ref = read_csv(path)
    out = []
    for a in alphas:
        hit = np.isclose(ref["alpha"], a, rtol=1e-9)
        out.append(float(ref["mmse"][hit][0]) if hit.any() else math.nan)
    return np.asarray(out)


def main():
    p = parser(__doc__)
    p.add_argument("--d", type=int, default=None, help="dimension (default 100; quick 40)")
    p.add_argument("--students", type=int, default=None, help="students averaged (16; quick 8)")
    p.add_argument("--teachers", type=int, default=None, help="teachers per alpha (2; quick 1)")
    p.add_argument("--seq-len", type=int, default=2)
    p.add_argument("--rho", type=float, default=0.5)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--points", type=int, nargs="+", default=None,
                   help="indices (0..31) into the authors' alpha grid (default: a spread of "
                        "10; quick: 3)")
    args = p.parse_args()
    out = output_dir(__file__, args)
    d = args.d or (40 if args.quick else 100)
    students = args.students or (8 if args.quick else 16)
    teachers = args.teachers or (1 if args.quick else 2)
    points = args.points or (QUICK_POINTS if args.quick else FULL_POINTS)
    alphas = [float(a) for a in REFERENCE_GRID[points]]
    T, rho = args.seq_len, args.rho
    bayes = bayes_mse(alphas, rho, T)         # fail early if the curve is missing
    params = {"d": d, "rho": rho, "seq_len": T, "link": "softmax", "inv_temp": 1.0,
              "delta": 0.0, "alphas": alphas, "students": students, "teachers": teachers,
              "steps": args.steps, "lr": args.lr, "optimizer": "adam (optax)",
              "init": "W ~ N(0, 1)", "seed": args.seed,
              "bayes_curve": f"reference SE_softmax_T=2_rho={rho:g}.csv interpolated at "
                             f"alpha (T^2+T-2)/4 (the package's AIM theory is not used yet)",
              "reference_gd": "authors' GD_single / GD_averaged files, d = 200, 16 teachers, "
                              "32 students"}
    params["grid_points"] = points
    write_params(out, params)
    table = gd_curve(alphas, d=d, rho=rho, seq_len=T, link="softmax", students=students,
                     teachers=teachers, steps=args.steps, lr=args.lr, seed=args.seed,
                     progress=True)
    ref_single = reference_gd("GD_single", rho, T, alphas)
    ref_avg = reference_gd("GD_averaged", rho, T, alphas)
    rows = []
    for i, a in enumerate(alphas):
        mine = range(i * teachers, (i + 1) * teachers)     # gd_curve's row order
        single = np.asarray([table.columns["mse_single"][k] for k in mine])
        averaged = np.asarray([table.columns["mse_averaged"][k] for k in mine])
        sem = (lambda v: float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1
               else math.nan)
        rows.append({
            "alpha": a, "n": table.columns["n"][mine[0]], "teachers": len(mine),
            "bayes_mse": float(bayes[i]), "two_bayes": 2 * float(bayes[i]),
            "gd_single": float(single.mean()), "gd_single_sem": sem(single),
            "gd_averaged": float(averaged.mean()), "gd_averaged_sem": sem(averaged),
            "averaged_minus_bayes": float(averaged.mean() - bayes[i]),
            "single_over_bayes": float(single.mean() / bayes[i]) if bayes[i] > 0 else math.nan,
            "ref_d200_single": float(ref_single[i]), "ref_d200_averaged": float(ref_avg[i]),
            "final_loss_max": max(table.columns["final_loss_max"][k] for k in mine),
            "seconds_per_run": float(np.mean([table.columns["seconds"][k] for k in mine])),
        })
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()},
              flush=True)
    write_csv(out / "aim_gd_vs_bo.csv", rows)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.geomspace(min(alphas) / 1.5, max(alphas) * 1.5, 300)
    bo = bayes_mse(grid, rho, T)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.plot(grid, bo, "k-", label="Bayes-optimal (reference SE)")
    ax.plot(grid, 2 * bo, "k--", lw=1, label="2 x Bayes-optimal")
    x = [r["alpha"] for r in rows]
    ax.errorbar(x, [r["gd_single"] for r in rows], yerr=[r["gd_single_sem"] for r in rows],
                fmt="o", color="C0", label=f"single GD, d={d}")
    ax.errorbar(x, [r["gd_averaged"] for r in rows], yerr=[r["gd_averaged_sem"] for r in rows],
                fmt="s", color="C1", label=f"averaged GD ({students} students), d={d}")
    ax.plot(x, ref_single, "o", mfc="none", color="C0", label="single GD, d=200 (authors)")
    ax.plot(x, ref_avg, "s", mfc="none", color="C1", label="averaged GD (32), d=200 (authors)")
    ax.set_xscale("log")
    ax.set_xlabel(r"$\alpha = n/d^2$")
    ax.set_ylabel(r"$\frac{1}{d}\|\hat S - S\|_F^2$")
    ax.set_title(rf"softmax AIM, T={T}, $\rho$={rho:g}: Adam lr {args.lr:g}, "
                 f"{args.steps} steps, {teachers} teacher(s)/alpha", fontsize=9)
    save_figure(fig, ax, out / "aim_gd_vs_bo.png")


if __name__ == "__main__":
    main()
