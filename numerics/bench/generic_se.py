"""Benchmark: the SE estimator that integrates the observation (issue 32, item 2) against
today's plain RQMC, error-bar^2 x time, on three declared links.

Links:

* scalar noisy: ``y = |z| + sqrt(0.2) xi`` (P = M = 1), alpha = 1.5 (weak threshold
  0.7159);
* 2-index noiseless: ``y = sign(z1 z2)`` (P = 2, M = 1, the shipped ``sign-product``),
  alpha = 3.5 (weak threshold pi^2/4);
* depth-2 attention (skip 1, seq-len 2), alpha = 0.5: a reduced noiseless link whose
  fixed point is a staircase plateau (layer 1 at 0, held there by its sign symmetry).
  Plain: y sampled, Gauss-Hermite 30 on all 16384 samples (``multilevel=False``).  New:
  ``solve_to_target(PLATEAU_TARGET)`` from ``PLATEAU_WARMUP_SAMPLES`` samples: its sampled
  round finds the plateau and it chooses the plateau map by itself (glm/se/plateau.py:
  omega in polar coordinates, y integrated over its two feature coordinates given omega;
  nothing sampled), solved by secant steps; its error is the change against the refined
  rule, through ``1 - F'``; all timed.

For each link both estimators solve the SE from ``0.05 I`` in this process, warm kernels
(one untimed map evaluation first): today's ``observation='sample'`` at the default
16384 frozen samples; the new one as described per link.  Printed:
the fixed points, the largest standard error of a free overlap (``Q_stderr``, through the
linearized map; for a deterministic rule its error estimate), the wall time of the solve, the ratio
``(err_plain^2 t_plain) / (err_new^2 t_new)`` and whether the fixed points agree within
``AGREE`` joint standard errors on every free entry.  Under load the ratio is what counts
(both halves run in the same process, interleaved in time as closely as one can).
Ends with ``speedup <min ratio>``.

Deterministic rows (scalar noisy, sign(z1 z2)): their SE maps are 2-D and 2-D x sum
integrals, so the new side is ``sampling='gauss-hermite'`` (the default 'auto' there):
Gauss-Hermite over omega (96 nodes for |z|, 24 per axis for sign(z1 z2)) x the observation
rule over y; its "error" is the rules' error estimate (change against 2/3 of the nodes per
axis, through the linearized map), deterministic, not a standard error.  Reference (independent): nested scipy quad of the closed-form ``Z_out`` (two
truncated Gaussians), ``E g^2(Q = 0.4475) = 0.542135746`` and the fixed point
``Q* = 0.4512016777`` (tests/glm/test_scalar_noisy_se.py re-derives both, slow tier).

Measured 2026-11-28 21:20 UTC on 2 cores, one other job running (ratios only count):

* scalar noisy |z|, alpha 1.5: plain RQMC 0.4442 +- 0.00134 in 5.3 s; Gauss-Hermite 96
  (folded to 48) Q = 0.451204, error estimate 1.8e-5, 3.3 s (2.3e-6 from the nested-
  quadrature Q* = 0.4512016777): ratio 8813, counted despite plain RQMC sitting 5.2 of its
  stated errors below (its understated error: at 4096 samples, 5 seeds, z = -1.25, -2.74,
  0.03, -0.51, -0.11; at 16384, seeds 0-2, z = -5.23, -1.57, -0.26, the sampled map at Q*
  itself as far from Q*/(1 - Q*): the understatement sits in the map's own RQMC standard
  error over 16 scramblings of a heavy-tailed g_out^2).
* sign(z1 z2), alpha 3.5: plain 0.47023 / 0.46957 +- 0.0026 in 46.5 s; Gauss-Hermite 24^2
  with the exact sum over y: 0.47076 = 0.47076 (Q12 = 0 exactly), error estimate 1.1e-5,
  3.9 s: ratio 7.2e5, agree within 0.95 joint errors.
* depth-2 attention, alpha 0.5 (2026-11-29 05:40 UTC, idle): plain GH 30 on all 16384
  samples 0.77295 +- 0.0018 in 26.9 s; plateau route 0.770782, error estimate 2.9e-5
  (warm-up on 2048 samples 0.7662 +- 0.0088, then 5 evaluations of the plateau map + 1 of
  its refined rule; mass defect 1e-7, E g g^T - E(-dg) = -3.8e-6) in 79.6 s: ratio 1303,
  agree within 1.2 joint errors.  Earlier, with another job running: 72.4 s against 186 s,
  ratio 768.  (The two-level map of the channel rule measured 1.2 here before: per
  evaluation it cannot gain more than ~4x, docs/guide.md.)  Re-measured 2026-11-29 06:45
  UTC with the route chosen by ``solve_to_target`` (a depth-3 SE running alongside): plain
  0.77295 +- 0.00181 in 44.7 s; the sampled round (2048 samples, 11.7 s) predicted 1.6e7
  samples for the target against 112 s for the plateau map, which gave 0.770782 +- 2.9e-5
  in 119.4 s in all: ratio 1445, agree within 1.19 joint errors.

Run: ``python numerics/bench/generic_se.py [NAME ...]`` (rows whose name contains a NAME)
"""
from __future__ import annotations

import sys
import time

import numpy as np

PLAIN_SAMPLES = 16384
#: samples of the sampled solve that finds the depth-2 attention plateau (its value only
#: starts the deterministic solve)
PLATEAU_WARMUP_SAMPLES = 2048
#: the target error asked of the attention row's new side (1e-4: 1.6e7 samples by the
#: Monte-Carlo rate, so ``solve_to_target`` chooses the plateau map by itself)
PLATEAU_TARGET = 1e-4
#: Gauss-Hermite nodes per axis of the deterministic rows (None: the default, 24): |z| + noise
#: converges slowly in omega (measured at alpha 1.5: Q - Q* = 1.2e-3 at 24, 6.9e-5 at 48)
OMEGA_NODES = {"scalar noisy |z|": 96}
AGREE = 3.0


def links():
    import sympy as sp

    from symtheory.glm import MultiIndexModel
    from symtheory.smi.registry import build_model, sign_product

    z = sp.Symbol("z", real=True)
    absz = MultiIndexModel("bench_abs", sp.Matrix([[z]]), sp.Matrix([[sp.Abs(z)]]),
                           description="|z|")
    return [("scalar noisy |z|", absz, 1.5, 0.2),
            ("2-index noiseless sign(z1 z2)", sign_product(), 3.5, None),
            ("depth-2 attention", build_model("attention", {"depth": 2, "seq_len": 2,
                                                             "skip": 1.0, "inv_temp": 1.0}),
             0.5, None)]


def run(model, alpha, noise, samples, observation, multilevel=True, sampling="rqmc",
        omega_nodes=None):
    import warnings

    from symtheory.glm.se.sampling import DEFAULT_OMEGA_NODES
    from symtheory.glm.se.state_evolution import StateEvolution

    se = StateEvolution(model, alpha, samples=samples, noise_variance=noise,
                        observation=observation, multilevel=multilevel, sampling=sampling,
                        omega_nodes=omega_nodes or DEFAULT_OMEGA_NODES)
    se.qhat(0.05 * np.eye(model.P))          # warm kernels, untimed
    se._last_integrated = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = se.solve()
        dt = time.perf_counter() - t0
    free = se.mask > 0
    return res, float(np.max(res.Q_stderr[free])), dt, free, se.observation_note


def run_plateau(model, alpha):
    """The route a user gets by asking for a target error: ``solve_to_target`` on
    PLATEAU_WARMUP_SAMPLES samples finds the plateau (layer 1 at 0, stable by that solve's
    Jacobian) and, predicting the plateau map sooner than the samples the target needs,
    solves the deterministic plateau map from there (glm/se/plateau.py); all timed."""
    import warnings

    from symtheory.glm.se.state_evolution import StateEvolution

    se = StateEvolution(model, alpha, samples=PLATEAU_WARMUP_SAMPLES, observation="sample")
    se.qhat(0.05 * np.eye(model.P))          # warm kernels, untimed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = se.solve_to_target(PLATEAU_TARGET)
        dt = time.perf_counter() - t0
    if res.method != "plateau map":
        raise RuntimeError(f"solve_to_target did not take the plateau route: {res.message}")
    return res, float(np.max(res.Q_stderr)), dt, res.message


def main(argv):
    only = [a for a in argv if not a.startswith("-")]
    ratios = []
    for name, model, alpha, noise in links():
        if only and not any(o in name for o in only):
            continue
        print(f"== {name}, alpha = {alpha:g}" + (f", Delta = {noise:g}" if noise else ""))
        if name == "depth-2 attention":
            # the fixed point is a plateau (layer 1 at 0): the new estimator integrates y
            # and omega there deterministically (glm/se/plateau.py)
            rp, ep, tp, free, note_p = run(model, alpha, noise, PLAIN_SAMPLES, "sample",
                                           multilevel=False)
            rn, en, tn, note_n = run_plateau(model, alpha)
        else:
            rp, ep, tp, free, note_p = run(model, alpha, noise, PLAIN_SAMPLES, "sample")
            # nothing sampled: y integrated given omega, omega on a Gauss-Hermite tensor rule
            rn, en, tn, _, note_n = run(model, alpha, noise, 2, "auto",
                                        sampling="gauss-hermite",
                                        omega_nodes=OMEGA_NODES.get(name))
        ratio = ep ** 2 * tp / (en ** 2 * tn)
        joint = np.sqrt(rp.Q_stderr ** 2 + rn.Q_stderr ** 2)
        z = np.max(np.abs(rp.Q - rn.Q)[free] / np.maximum(joint[free], 1e-300))
        print(f"  plain RQMC ({PLAIN_SAMPLES} samples): Q = {np.round(rp.Q, 5).tolist()}, "
              f"max stderr {ep:.3g}, {tp:.1f} s, converged {rp.converged}")
        unit = "nodes" if rn.error_kind == "estimate" else "samples"
        size = f"{rn.samples} {unit}" if rn.samples else rn.method
        print(f"  new ({size}; {note_n}): Q = {np.round(rn.Q, 6).tolist()}, "
              f"max {'error estimate' if rn.error_kind == 'estimate' else 'stderr'} "
              f"{en:.3g}, {tn:.1f} s, converged {rn.converged}")
        print(f"  fixed points differ by at most {z:.2f} joint standard errors "
              f"({'agree' if z <= AGREE else 'DISAGREE'} within {AGREE:g})")
        print(f"  error^2 x time ratio {ratio:.1f}")
        if z > AGREE and name.startswith("scalar"):
            # plain RQMC's stated error is understated on this link (docstring); the
            # deterministic value is checked against nested quadrature in the tests
            print("  (counted: plain RQMC's understated error, the new value checked "
                  "against nested quadrature in tests/glm/test_scalar_noisy_se.py)")
            ratios.append(ratio)
            continue
        ratios.append(ratio if z <= AGREE else 0.0)
    print(f"speedup {min(ratios):.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
