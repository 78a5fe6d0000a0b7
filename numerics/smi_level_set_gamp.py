"""Noiseless two-index links on their level sets: GAMP at finite d against the state
evolution (issue 32).

Links ``y = z1^2 - z2^2`` (examples/square_difference.py) and ``y = z1 z2``, declared
without noise: the channel is the Gaussian on the level set ``{g(z) = y}`` (co-area
formula, glm/integrate/level_set.py), GAMP (Algorithm 1, smi.md 5) calls it per sample;
the SE integrates ``y`` given ``omega`` on the same level sets (glm/se/observation.py,
kind 'level set') and, with nothing sampled, omega on a Gauss-Hermite tensor rule
(``sampling='auto'``), solved to an error estimate of ``--se-target`` on every overlap.

Per link, alpha and seed: the final normalized overlaps ``m_ab = W_hat_a . W*_b /
|W*_b|^2``, matched to the teacher's rows by the row permutation of largest
``sum_a |m_a pi(a)|`` (``y = z1 z2`` is symmetric under swapping the rows: GAMP may
learn them swapped) and taken in absolute value (signs: ``z1^2 - z2^2`` is even in each
row, ``z1 z2`` in both together).  Compared with the SE's ``Q_aa`` (rho = 1) and its
standard error; the finite-size noise is the spread of the seeds (two seeds: a crude
estimate) and, for scale, ``1/sqrt(d)``.  ``y = z1 z2`` is ``(u^2 - v^2)/2`` in the
rotated indices ``u, v = (z1 +- z2)/sqrt(2)`` and the Gaussian prior is rotation
invariant, so its SE fixed point is the rotated one of ``z1^2 - z2^2``: ``q I`` for
``diag(q, q)`` (a check of the two SEs against each other, printed).

Writes smi_level_set_gamp.csv (one row per link, alpha, seed), smi_level_set_gamp_se.csv
and params.json (seeds, version, command) into numerics/out/smi_level_set_gamp/ (or
--out).  Full: d = 1000, alphas 1 and 1.5, seeds 0 1, SE to 2e-3; --quick: d = 100,
alpha 1, one seed, SE on 8 nodes per axis (checks the pipeline, not the numbers).

    python numerics/smi_level_set_gamp.py [--quick] [--d D] [--alphas A ...] [--seeds S ...]
"""
from __future__ import annotations

import itertools
import runpy
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import output_dir, parser, write_csv, write_params

ROOT = Path(__file__).resolve().parents[1]


def models():
    import sympy as sp

    from symtheory.glm import MultiIndexModel

    sd = runpy.run_path(str(ROOT / "examples" / "square_difference.py"))["model"]
    z1, z2 = sp.symbols("z1 z2", real=True)
    prod = MultiIndexModel("product", sp.Matrix([[z1], [z2]]), sp.Matrix([[z1 * z2]]),
                           description="y = z1 z2 (noiseless)")
    return {"square_difference": sd, "product": prod}


def matched(m):
    """``(|m_a pi(a)|, pi)`` for the row permutation ``pi`` of largest ``sum |m_a pi(a)|``."""
    P = m.shape[0]
    best = max(itertools.permutations(range(P)),
               key=lambda p: sum(abs(m[a, p[a]]) for a in range(P)))
    return np.array([abs(m[a, best[a]]) for a in range(P)]), best


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--d", type=int, default=None, help="dimension (default 1000; quick 100)")
    p.add_argument("--alphas", type=float, nargs="+", default=None,
                   help="n/d (default 1 1.5; quick 1)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="data seeds (default 0 1)")
    p.add_argument("--max-iter", type=int, default=None, help="GAMP iterations (default 200)")
    p.add_argument("--se-target", type=float, default=2e-3,
                   help="error estimate wanted on the SE's overlaps (default 2e-3)")
    p.add_argument("--damping", type=float, default=0.3,
                   help="GAMP damping, the weight of the previous iterate (default 0.3)")
    args = p.parse_args(argv)
    from symtheory.glm import StateEvolution
    from symtheory.glm.gamp.tokens import gamp_tokens
    from symtheory.smi.data import generate

    quick = args.quick
    d = args.d or (100 if quick else 1000)
    alphas = args.alphas or ([1.0] if quick else [1.0, 1.5])
    seeds = args.seeds or ([0] if quick else [0, 1])
    max_iter = args.max_iter or (20 if quick else 200)
    nodes = 8 if quick else 24
    out = output_dir(__file__, args)
    params = {"d": d, "alphas": alphas, "seeds": seeds, "max_iter": max_iter,
              "damping": args.damping, "init_scale": 0.1, "se_omega_nodes": nodes, "se_target": args.se_target, "se_seed": 0,
              "se_start": "0.05 I", "gamp_start_seed": "seed + 2"}
    write_params(out, params)
    t0 = time.time()
    rows, se_rows = [], []
    for name, model in models().items():
        for alpha in alphas:
            se = StateEvolution(model, alpha, omega_nodes=nodes)
            fp = (se.solve(0.05 * np.eye(2)) if quick else
                  se.solve_to_target(args.se_target, 0.05 * np.eye(2)))
            q, qe = np.diag(fp.Q), np.diag(fp.Q_stderr)
            se_rows.append({"link": name, "alpha": alpha, "Q11": q[0], "Q22": q[1],
                            "Q12": float(fp.Q[0, 1]), "Q11_stderr": qe[0], "Q22_stderr": qe[1],
                            "converged": fp.converged, "stable": fp.stable,
                            "observation": se.observation_note,
                            "observation_qhat_error": se.observation_qhat_error})
            print(f"[{time.time() - t0:6.0f}s] {name} alpha {alpha:g}: SE Q diag "
                  f"{np.round(q, 5)} +- {np.round(qe, 5)}, Q12 {fp.Q[0, 1]:.2g}", flush=True)
            ch = model.channel(None)
            for seed in seeds:
                data = generate(model, d, alpha, seed=seed)
                t_run = time.time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    res = gamp_tokens(data.X, data.y, ch, damping=args.damping,
                                      max_iter=max_iter, seed=seed + 2, init_scale=0.1,
                                      truth=data.W)
                seconds = time.time() - t_run
                m = res.W @ data.W.T / np.sum(data.W ** 2, axis=1)[None, :]
                ov, perm = matched(m)
                rows.append({"link": name, "alpha": alpha, "seed": seed, "d": d,
                             "iterations": len(res.trace) - 1, "message": res.message,
                             "seconds": seconds,
                             "m11": ov[0], "m22": ov[1], "permutation": "".join(map(str, perm)),
                             "SE_Q11": q[0], "SE_Q22": q[1], "SE_Q11_stderr": qe[0],
                             "SE_Q22_stderr": qe[1], "diff1": ov[0] - q[0], "diff2": ov[1] - q[1]})
                print(f"[{time.time() - t0:6.0f}s]   seed {seed}: |m| {np.round(ov, 4)} "
                      f"(rows {perm}), minus SE {np.round(ov - q, 4)}; {res.message}, "
                      f"{seconds:.1f} s", flush=True)
    write_csv(out / "smi_level_set_gamp.csv", rows)
    write_csv(out / "smi_level_set_gamp_se.csv", se_rows)
    for name in models():
        for alpha in alphas:
            r = [x for x in rows if x["link"] == name and x["alpha"] == alpha]
            diffs = np.array([[x["diff1"], x["diff2"]] for x in r])
            ms = np.array([[x["m11"], x["m22"]] for x in r]).ravel()
            spread = float(np.std(ms, ddof=1)) if ms.size > 1 else float("nan")
            print(f"{name} alpha {alpha:g}: mean |m| - SE {diffs.mean():+.4f}, spread of the "
                  f"{ms.size} overlaps {spread:.4f} (1/sqrt(d) = {d ** -0.5:.4f})")
    for alpha in alphas:
        a = [x for x in se_rows if x["alpha"] == alpha]
        print(f"alpha {alpha:g}: SE z1^2 - z2^2 Q diag ({a[0]['Q11']:.5f}, {a[0]['Q22']:.5f}) "
              f"against z1 z2 ({a[1]['Q11']:.5f}, {a[1]['Q22']:.5f}), Q12 {a[1]['Q12']:.2g} "
              "(rotation: equal)")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
