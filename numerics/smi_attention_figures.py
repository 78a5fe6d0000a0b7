"""Two-layer tied softmax attention (M = 2, r = 1, c = 1): the pattern of Figs. 1-2 of
Troiani et al. (ICML 2025).

(a) State-evolution overlaps Q11 (layer 1), Q22 (layer 2) vs alpha from the reference's
    start Q0 = 0.05 I, with GAMP (Algorithm 1) points at finite d, the Bayes-optimal and
    plug-in errors along the curve, and -- to explain the reference data -- the same SE
    with the reference code's regularization V = I - Q + 1e-3 I next to BO_2w.csv.
(b) GAMP cosine similarity per layer vs iteration at alpha = 1.2 (layer 2 first).

Writes CSV + PNG + params.json into numerics/out/smi_attention_figures/ (or --out).
``--quick``: d = 200, a coarse alpha grid, fewer samples (a few minutes).
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

from symtheory.glm.gamp.tokens import gamp_tokens  # noqa: E402
from symtheory.glm import StateEvolution, bayes_error, plugin_error  # noqa: E402
from symtheory.core.quadrature import TensorRule  # noqa: E402
from symtheory.smi import deep_attention  # noqa: E402
from symtheory.smi.data import generate  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "reference" / "smi"


def main():
    p = parser(__doc__)
    p.add_argument("--d", type=int, default=None)
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--se-alphas", type=float, nargs="+", default=None, help="SE grid")
    p.add_argument("--gamp-alphas", type=float, nargs="+", default=None, help="GAMP points")
    args = p.parse_args()
    out = output_dir(__file__, args)
    quick = args.quick
    d = args.d or (200 if quick else 1000)
    seeds = args.seeds or (1 if quick else 3)
    samples = 2000 if quick else 5000
    se_alphas = ([0.2, 0.5, 0.8, 1.1, 1.4] if quick
                 else list(np.round(np.arange(0.1, 1.61, 0.1), 4)))
    gamp_alphas = [0.3, 0.6, 1.2] if quick else [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4]
    se_alphas = args.se_alphas or se_alphas
    gamp_alphas = args.gamp_alphas or gamp_alphas
    iters = 40
    model = deep_attention(2, 2, 1, 1.0)
    rule = TensorRule("gauss-hermite", 30)
    params = dict(model=model.description, d=d, seeds=seeds, se_samples=samples,
                  quadrature="gauss-hermite 30", se_alphas=se_alphas, gamp_alphas=gamp_alphas,
                  gamp=dict(damping=0.0, init_scale=0.1, max_iter=iters),
                  reference_regularization=1e-3)
    write_params(out, params)

    rows = []
    t0 = time.time()
    for alpha in se_alphas:
        row = {"alpha": alpha}
        for tag, reg in (("", 0.0), ("_reg1e-3", 1e-3)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                se = StateEvolution(model, alpha, samples=samples, seed=0, rule=rule,
                                    regularization=reg)
                res = se.solve(np.diag([0.05, 0.05]), max_iter=300)
            row[f"Q11{tag}"], row[f"Q22{tag}"] = res.Q[0, 0], res.Q[1, 1]
            row[f"Q11_stderr{tag}"], row[f"Q22_stderr{tag}"] = res.Q_stderr[0, 0], res.Q_stderr[1, 1]
            row[f"converged{tag}"] = res.converged
        Q = np.diag([row["Q11"], row["Q22"]])
        bo = bayes_error(model, Q, samples=50000 if quick else 200000)
        pl = plugin_error(model, Q, samples=50000 if quick else 200000)
        row.update(bo_error=bo.error, bo_stderr=bo.stderr, plugin_error=pl.error,
                   plugin_stderr=pl.stderr)
        rows.append(row)
        print(f"[{time.time() - t0:6.0f}s] SE alpha={alpha}: Q11={row['Q11']:.4f} "
              f"Q22={row['Q22']:.4f} (reg 1e-3: {row['Q11_reg1e-3']:.4f}, "
              f"{row['Q22_reg1e-3']:.4f}) BO={bo.error:.4f} plug-in={pl.error:.4f}", flush=True)
    write_csv(out / "se_curve.csv", rows)

    gamp_rows, traces = [], []
    ch = model.channel(rule=rule)
    for alpha in gamp_alphas:
        for seed in range(seeds):
            data = generate(model, d, alpha, seed=seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = gamp_tokens(data.X, data.y, ch, truth=data.W, max_iter=iters,
                                  init_scale=0.1, seed=100 + seed)
            last = res.trace[-1]
            gamp_rows.append({"alpha": alpha, "seed": seed, "M11": last["M"][0, 0],
                              "M22": last["M"][1, 1], "Q11": last["Q"][0, 0],
                              "Q22": last["Q"][1, 1], "cosine1": last["cosine"][0],
                              "cosine2": last["cosine"][1], "iterations": res.iterations,
                              "diverged": res.diverged})
            if abs(alpha - 1.2) < 1e-9:
                for r in res.trace:
                    traces.append({"seed": seed, "iteration": r["iteration"],
                                   "cosine1": r["cosine"][0], "cosine2": r["cosine"][1],
                                   "M11": r["M"][0, 0], "M22": r["M"][1, 1]})
            print(f"[{time.time() - t0:6.0f}s] GAMP d={d} alpha={alpha} seed={seed}: "
                  f"cos1={last['cosine'][0]:.3f} cos2={last['cosine'][1]:.3f}", flush=True)
    write_csv(out / "gamp_finals.csv", gamp_rows)
    if traces:
        write_csv(out / "gamp_trace_alpha1.2.csv", traces)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(REFERENCE / "BO_2w.csv") as fh:
        ref = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    fig, ax = plt.subplots(1, 3, figsize=(14, 4))
    a = np.array([r["alpha"] for r in rows])
    for key, col in (("Q11", "C0"), ("Q22", "C1")):
        ax[0].plot(a, [r[key] for r in rows], "-", color=col, label=f"SE {key}")
        ax[0].plot(a, [r[key + "_reg1e-3"] for r in rows], ":", color=col,
                   label=f"SE {key}, V + 1e-3 I")
        ax[0].plot([r["alpha"] for r in ref], [r[key] for r in ref], "x", color=col, ms=4,
                   label=f"BO_2w.csv {key}")
        ga = sorted({r["alpha"] for r in gamp_rows})
        # cos^2 = M^2/(Q |W*|^2/d) -> Q_SE asymptotically (Nishimori: M = Q)
        cos = [np.mean([r["cosine" + key[1]] ** 2 for r in gamp_rows if r["alpha"] == x])
               for x in ga]
        ax[0].plot(ga, cos, "o", color=col, mfc="none", label=f"GAMP d={d} cos$^2$ layer {key[1]}")
    ax[0].set_xlabel(r"$\alpha = n/d$")
    ax[0].set_ylabel("overlap")
    ax[1].errorbar(a, [r["bo_error"] for r in rows], yerr=[r["bo_stderr"] for r in rows],
                   label="Bayes-optimal (Eq. 11)")
    ax[1].errorbar(a, [r["plugin_error"] for r in rows], yerr=[r["plugin_stderr"] for r in rows],
                   label="plug-in (reference convention)")
    ax[1].set_xlabel(r"$\alpha$")
    ax[1].set_ylabel(r"generalization error $\|y - \hat y\|_F^2$")
    if traces:
        for seed in range(seeds):
            tr = [r for r in traces if r["seed"] == seed]
            ax[2].plot([r["iteration"] for r in tr], [r["cosine1"] for r in tr], "-", color="C0",
                       alpha=0.7, label="layer 1" if seed == 0 else None)
            ax[2].plot([r["iteration"] for r in tr], [r["cosine2"] for r in tr], "-", color="C1",
                       alpha=0.7, label="layer 2" if seed == 0 else None)
        ax[2].set_xlabel("GAMP iteration")
        ax[2].set_ylabel("cosine similarity")
        ax[2].set_title(rf"$\alpha = 1.2$, $d = {d}$", fontsize=9)
    save_figure(fig, ax, out / "smi_attention.png")


if __name__ == "__main__":
    main()
