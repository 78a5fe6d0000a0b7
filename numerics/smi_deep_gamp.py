"""Three-layer tied softmax attention (M = 2, r = 1, c = 1): GAMP (Algorithm 1, smi.md 5)
at finite d against the state evolution (smi.md 6), with the per-layer trace.

Teacher data from the model (smi.data.generate); GAMP on the shared token engine
(glm/gamp_tokens.py) with the deep channel's Laplace-centred RQMC rule; the SE at the
same alpha on frozen samples (glm/se.py) from the reference's start ``0.05 I``.  Per
seed and layer ``l``, per iteration: the teacher overlap ``|M_ll| = |W_hat_l . W*_l| / d``
and the normalized overlap ``|m_l| = |W_hat_l . W*_l| / |W*_l|^2`` (signs are not
identifiable: the model is even in every layer, smi.md 2.2); ``|m_l|`` is compared with
the SE's ``Q_ll`` (rho = 1) and its Monte-Carlo standard error.  ``M_ll`` carries the
teacher's own norm ``|W*_l|^2 / d = 1 +- sqrt(2 / d)`` (+-0.045 at d = 1000): at perfect
recovery it *is* that norm (glm/gamp_tokens.py).

Writes smi_deep_gamp_trace.csv (per seed and iteration), smi_deep_gamp.csv (final
overlaps against the SE), smi_deep_gamp.png and params.json into
numerics/out/smi_deep_gamp/ (or --out).  Full: d = 1000, alpha = 2 (above the counting
bound 1.5: the SE from 0.05 I learns all three layers, to perfect recovery), seeds 0 1,
100 iterations with damping 0.4 (undamped, seed 0 diverges at iteration 9 there: |M_11|
= 2.5), SE on 2000 samples; --quick: d = 60, one seed, 3 iterations, SE on 64 samples
with a coarse rule (checks the pipeline, not the numbers).  ``--alpha 0.6``: only the
last layer is learned, partially (README).

    python numerics/smi_deep_gamp.py [--quick] [--d D] [--alpha A] [--seeds S ...]
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import output_dir, parser, save_figure, write_csv, write_params  # noqa: E402

#: GAMP's channel rule (LaplaceQMCRule settings) at full size; numerics/smi_deep_map_scan.py
#: evaluates the SE map on it
GAMP_RULE = dict(tol=1e-1, points=64, max_points=256)


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--d", type=int, default=None, help="dimension (default 1000; quick 60)")
    p.add_argument("--alpha", type=float, default=2.0, help="n/d (default 2)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="data seeds (default 0 1)")
    p.add_argument("--max-iter", type=int, default=None, help="GAMP iterations (default 100; quick 3)")
    p.add_argument("--samples", type=int, default=None, help="SE samples (default 2000)")
    p.add_argument("--se-max-iter", type=int, default=300,
                   help="SE iteration cap (default 300; the SE stops earlier at its residual "
                        "tolerance, 1e-4 for this randomized rule)")
    p.add_argument("--estimator", choices=("multilevel", "square"), default="multilevel",
                   help="SE estimator (default multilevel: glm/se/randomized_multilevel.py; square: the "
                        "default rule's g g^T)")
    p.add_argument("--se-start", type=float, nargs=3, default=(0.05, 0.05, 0.05),
                   help="diagonal of the SE's start (default the reference's 0.05 I)")
    p.add_argument("--damping", type=float, default=0.4,
                   help="GAMP damping, the weight of the previous iterate (default 0.4; "
                        "0 = undamped)")
    p.add_argument("--gamp-tol", type=float, default=GAMP_RULE["tol"],
                   help="tolerance of GAMP's Laplace-RQMC channel rule (default 0.1)")
    p.add_argument("--gamp-max-points", type=int, default=None,
                   help="largest point set per component of GAMP's rule (default 256; quick 64); "
                        "a finer rule removes the twin's ratio bias from GAMP's A "
                        "(numerics/smi_deep_map_scan.py)")
    args = p.parse_args(argv)
    from symtheory.glm import StateEvolution
    from symtheory.glm.gamp.tokens import gamp_tokens
    from symtheory.glm.integrate.laplace_qmc import LaplaceQMCRule
    from symtheory.glm.se.randomized_multilevel import MultilevelEstimator
    from symtheory.smi import deep_attention
    from symtheory.smi.data import generate

    quick = args.quick
    d = args.d or (60 if quick else 1000)
    seeds = args.seeds or ([0] if quick else [0, 1])
    max_iter = args.max_iter or (3 if quick else 100)
    samples = args.samples or (64 if quick else 2000)
    gamp_max = args.gamp_max_points or (64 if quick else GAMP_RULE["max_points"])
    if not (d >= 2 and args.alpha > 0 and max_iter >= 1 and samples >= 2
            and args.se_max_iter >= 1 and 0 < args.gamp_tol < 1 and gamp_max >= 64):
        p.error("need --d >= 2, --alpha > 0, --max-iter >= 1, --samples >= 2, --se-max-iter >= 1, "
                "--gamp-tol in (0, 1), --gamp-max-points >= 64")
    # GAMP sums g_out over the n samples in every update, so the per-sample random error
    # of a coarse rule averages out there; the SE squares it, so it gets the finer rule.
    # GAMP's A = -mean(dg_out) is the Nishimori twin, which keeps the rule's ratio bias of
    # second moments (glm/se.py, estimator); not measured for this rule
    gamp_rule = LaplaceQMCRule(tol=args.gamp_tol, points=GAMP_RULE["points"], max_points=gamp_max)
    rule = (LaplaceQMCRule(tol=1e-1, points=64, max_points=64) if quick
            else LaplaceQMCRule(tol=5e-2, points=128, max_points=1024))
    model = deep_attention(3, 2, 1, 1.0)
    out = output_dir(__file__, args)
    params = dict(model=model.description, d=d, alpha=args.alpha, seeds=seeds,
                  max_iter=max_iter, damping=args.damping, se_samples=samples,
                  se_rule=rule.describe() if args.estimator == "square" else "multilevel",
                  gamp_rule=gamp_rule.describe(), se_estimator=args.estimator,
                  se_start=list(args.se_start), se_max_iter=args.se_max_iter)
    write_params(out, params)
    t0 = time.time()
    trace, finals = [], []
    for seed in seeds:
        data = generate(model, d, args.alpha, seed=seed)
        ch = model.channel(None, gamp_rule)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # per-sample misses: reported
            res = gamp_tokens(
                data.X, data.y, ch, damping=args.damping, max_iter=max_iter, seed=seed + 2,
                truth=data.W, callback=lambda r, s=seed: print(
                    f"[{time.time() - t0:6.0f}s] seed {s} iteration {r['iteration']}: |M_ll| "
                    f"{np.round(np.abs(np.diag(r['M'])), 4)}, |m_l| "
                    f"{np.round(np.abs(r['normalized_overlap']), 4)}", flush=True))
        norms = np.sum(data.W ** 2, axis=1) / d

        def overlaps(r):
            return {**{f"M{a + 1}{a + 1}": abs(float(r["M"][a, a])) for a in range(3)},
                    **{f"normalized_overlap{a + 1}": abs(float(r["normalized_overlap"][a]))
                       for a in range(3)}}

        for r in res.trace:
            trace.append({"seed": seed, "iteration": r["iteration"], **overlaps(r)})
        finals.append({"seed": seed, "iterations": len(res.trace), "message": res.message,
                       **overlaps(res.trace[-1]),
                       **{f"teacher_norm{a + 1}": float(norms[a]) for a in range(3)}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if args.estimator == "square":
            se = StateEvolution(model, args.alpha, samples=samples, seed=0, rule=rule)
        else:
            se = StateEvolution(model, args.alpha, samples=samples, seed=0, estimator=(
                MultilevelEstimator(coarse=rule, fine=rule, fraction=0.5) if quick
                else "multilevel"))
        # the solver's own tolerance: the randomized rule's map is smooth to ~1e-4 only
        fp = se.solve(np.diag(args.se_start), max_iter=args.se_max_iter, damping=0.3)
    write_params(out, dict(params, se_note=fp.observation))
    print(f"[{time.time() - t0:6.0f}s] SE: Q diag {np.round(np.diag(fp.Q), 4)} +- "
          f"{np.round(np.diag(fp.Q_stderr), 4)} ({fp.message})", flush=True)
    for row in finals:
        for a in range(3):
            row[f"SE_Q{a + 1}{a + 1}"] = float(fp.Q[a, a])
            row[f"SE_Q{a + 1}{a + 1}_stderr"] = float(fp.Q_stderr[a, a])
            row[f"diff{a + 1}"] = row[f"normalized_overlap{a + 1}"] - float(fp.Q[a, a])
    write_csv(out / "smi_deep_gamp_trace.csv", trace)
    write_csv(out / "smi_deep_gamp.csv", finals)
    plot(trace, fp, args.alpha, d, out)
    for row in finals:
        print(f"seed {row['seed']}: final |m_l| - SE Q_ll = "
              + ", ".join(f"{row[f'diff{a}']:+.4f}" for a in (1, 2, 3)))
    print(f"total {time.time() - t0:.0f} s")


def plot(trace, fp, alpha, d, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    seeds = sorted({r["seed"] for r in trace})
    for a, col in zip(range(3), ("C0", "C1", "C2")):
        for k, s in enumerate(seeds):
            rows = [r for r in trace if r["seed"] == s]
            ax.plot([r["iteration"] for r in rows], [r[f"normalized_overlap{a + 1}"] for r in rows],
                    "o-" if k == 0 else "s--", ms=3, color=col,
                    label=f"GAMP layer {a + 1}" + (f" (seed {s})" if len(seeds) > 1 else ""))
        ax.axhline(fp.Q[a, a], color=col, ls=":", label=f"SE Q{a + 1}{a + 1}")
        ax.axhspan(fp.Q[a, a] - fp.Q_stderr[a, a], fp.Q[a, a] + fp.Q_stderr[a, a], color=col,
                   alpha=0.15, lw=0)
    ax.set_xlabel("GAMP iteration")
    ax.set_ylabel(r"normalized overlap $|W_l \cdot W^*_l| / |W^*_l|^2$")
    ax.set_title(f"depth 3, M = 2, r = 1, c = 1; alpha = {alpha:g}, d = {d}")
    save_figure(fig, ax, out / "smi_deep_gamp.png")


if __name__ == "__main__":
    main()
