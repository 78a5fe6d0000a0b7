"""Free entropy f(q) of BSR and the absence of a hard phase (bsr.md 12, paper Fig. 8).

For the (beta, rho, alpha) of the reference files, f(q) on a q grid (ours, with error
estimates) next to the reference values; the maximum sits at the Bayes-optimal
overlap and is unique.  Writes free_entropy.csv, free_entropy.png, params.json.

    python numerics/bsr_free_entropy.py [--quick]
"""
import csv
from pathlib import Path

import numpy as np

from _common import output_dir, parser, save_figure, write_csv, write_params

from symtheory import bsr
from symtheory.bsr.theory import free_entropy

REF = Path(__file__).resolve().parents[1] / "tests" / "reference" / "bsr" / "free_entropy"


def main():
    args = parser(__doc__).parse_args()
    out = output_dir(__file__, args)
    sets = [(1.0, 0.5, [0.35, 0.7, 0.74]), (2.0, 0.5, [0.2, 0.575, 0.615]),
            (1.0, 1.0, [0.5, 0.95, 0.99]), (2.0, 1.0, [0.5, 0.95, 0.99])]
    if args.quick:
        sets = sets[:2]
    nq = 12 if args.quick else 40
    write_params(out, {"sets": sets, "n_q": nq, "delta": 0.0, "log_energy_level": 5})
    rows = []
    for beta, rho, alphas in sets:
        for a in alphas:
            q_bo = bsr.bo_point(a, beta, rho).q
            qs = np.unique(np.concatenate([1 - np.logspace(-3, np.log10(0.98), nq), [q_bo]]))
            for q in qs:
                if q >= 1:
                    continue
                f, err = free_entropy(q, a, beta, rho)
                rows.append({"beta": beta, "rho": rho, "alpha": a, "q": q, "f": f, "error": err,
                             "q_bo": q_bo})
            sub = [r for r in rows if (r["beta"], r["rho"], r["alpha"]) == (beta, rho, a)]
            qmax = max(sub, key=lambda r: r["f"])["q"]
            print(f"beta={beta} rho={rho} alpha={a}: argmax q = {qmax:.4f}, BO q = {q_bo:.4f}")
    write_csv(out / "free_entropy.csv", rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(4 * len(sets), 3.6))
    for ax, (beta, rho, alphas) in zip(np.atleast_1d(axes), sets):
        ref_file = next(iter(REF.glob(f"beta{beta:g}_rho{rho:g}_*.csv")), None)
        ref = list(csv.DictReader(open(ref_file))) if ref_file else []
        for i, a in enumerate(alphas):
            sub = [r for r in rows if (r["beta"], r["rho"], r["alpha"]) == (beta, rho, a)]
            ax.plot([r["q"] for r in sub], [r["f"] for r in sub], f"C{i}-", label=rf"$\alpha$={a}")
            ax.axvline(sub[0]["q_bo"], color=f"C{i}", ls=":", lw=0.8)
            rr = [r for r in ref if abs(float(r["alpha"]) - a) < 1e-9]
            ax.plot([float(r["q"]) for r in rr], [float(r["fe"]) for r in rr], f"C{i}x", ms=3)
        ax.set_title(rf"$\beta$={beta:g}, $\rho$={rho:g} (x: reference)", fontsize=9)
        ax.set_xlabel("q")
    np.atleast_1d(axes)[0].set_ylabel("f(q)")
    save_figure(fig, axes, out / "free_entropy.png", legend_size=7)


if __name__ == "__main__":
    main()
