"""Benchmark: the depth-3 attention SE map's ``Q_hat``, error^2 x time of the multilevel
estimator against the default ``'square'`` estimator (smi.md 6, Eq. 13).

Model: ``deep_attention(depth=3, seq_len=2, rank=1, skip=1)``; one map evaluation at a
fixed ``Q`` near the alpha = 1.3 fixed point (``diag(0.4, 0.3, 0.992)``; ``--q`` for
another), on ``--samples`` frozen draws, repeated for ``--seeds`` design seeds.

* today: ``StateEvolution`` defaults for this link (``'square'``, LaplaceQMCRule tol 5e-2,
  128..1024 points);
* new: ``estimator='multilevel'`` (glm/se/randomized_multilevel.py): a 128-point rule on every draw,
  the tol-1e-2 rule (up to 8192 points) on Giles' share of them.

Per seed: wall-clock time of ``qhat`` (kernels warm, point sets cached by a first call at
another Q) and the stated standard errors.  Efficiency of an estimator = mean stated
variance x mean time (both scale as 1/n and n); the speedup is today's over the new one's,
for each free diagonal entry in overlap units -- ``Q = F_prior(Q_hat)`` -- and the smallest
over the entries (the one that limits an overlap target).  Honesty of the error bars: the
scatter of each estimator's values over the seeds against its stated errors
(``chi2/dof``, ~1 if they cover), and the difference of the two means in combined errors
(the default rule's own bias, -0.6% on entry 22 measured on 256 draws, is in it).
Timings are wall-clock in one process; on a shared machine state the load.

Run: ``python numerics/bench/deep_se_multilevel.py [--samples N] [--seeds K]``
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def run(model, Q, n, seed, estimator):
    from symtheory.glm import StateEvolution

    se = StateEvolution(model, 1.0, samples=n, seed=seed, estimator=estimator)
    se.qhat(0.98 * Q)            # warm: kernels, point sets, the multilevel pilot
    t = time.perf_counter()
    Qh, err, _ = se.qhat(Q)
    return np.diag(Qh), np.diag(err), time.perf_counter() - t, se.observation_note


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--q", type=float, nargs=3, default=(0.4, 0.3, 0.992))
    args = p.parse_args()
    from symtheory.smi.registry import build_model

    warnings.simplefilter("ignore")
    model = build_model("attention", {"depth": 3, "seq_len": 2, "skip": 1.0, "inv_temp": 1.0})
    Q = np.diag(args.q)
    print(f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"Q = diag{tuple(args.q)}, {args.samples} draws, seeds 0..{args.seeds - 1}")
    res = {"square": [], "multilevel": []}
    for seed in range(args.seeds):
        for name in res:
            v, e, t, note = run(model, Q, args.samples, seed, "auto" if name == "square"
                                else name)
            res[name].append((v, e, t))
            print(f"seed {seed} {name:10s}: Q_hat/alpha diag {np.round(v, 4)} +- "
                  f"{np.round(e, 4)}, {t:.1f} s", flush=True)
            if seed == 0 and name == "multilevel":
                print("  " + note.split("; ", 1)[-1])
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    eff = {}
    for name, rows in res.items():
        v = np.array([r[0] for r in rows])
        e = np.array([r[1] for r in rows])
        t = np.array([r[2] for r in rows])
        # overlap units: dQ/dQ_hat = 1/(1 + Q_hat)^2 (Gaussian prior), at alpha = 1.3
        dq = 1.0 / (1.0 + 1.3 * v.mean(0)) ** 2
        chi2 = (((v - v.mean(0)) / e) ** 2).sum(0) / (len(v) - 1)
        eff[name] = (np.mean((1.3 * e * dq) ** 2, axis=0) * t.mean(), v.mean(0),
                     e.mean(0) / np.sqrt(len(v)))
        print(f"{name:10s}: mean time {t.mean():.1f} s; mean stated stderr {np.round(e.mean(0), 4)}; "
              f"scatter over seeds / stated: chi2/dof {np.round(chi2, 2)} ({len(v) - 1} dof)")
    d = (eff["square"][1] - eff["multilevel"][1]) / np.hypot(eff["square"][2], eff["multilevel"][2])
    print(f"mean difference square - multilevel, in combined errors of the means: {np.round(d, 2)}")
    ratio = eff["square"][0] / eff["multilevel"][0]
    print(f"error^2 x time, square / multilevel, per entry: {np.round(ratio, 2)}")
    print(f"speedup {ratio.min():.2f}")


if __name__ == "__main__":
    main()
