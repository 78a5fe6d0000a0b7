"""Benchmark: the SE estimator that integrates the observation (issue 32, item 2) against
today's plain RQMC, error-bar^2 x time, on three declared links.

Links:

* scalar noisy: ``y = |z| + sqrt(0.2) xi`` (P = M = 1), alpha = 1.5 (weak threshold
  0.7159);
* 2-index noiseless: ``y = sign(z1 z2)`` (P = 2, M = 1, the shipped ``sign-product``),
  alpha = 3.5 (weak threshold pi^2/4);
* depth-2 attention (skip 1, seq-len 2), alpha = 0.5: a reduced noiseless link whose
  observation has M r = 2 continuous feature coordinates, so y is sampled by both; the new
  estimator is the two-level Monte Carlo of its channel rule (glm/se/multilevel.py: GH 4 per
  axis on all samples + (GH 30 - GH 4) on a prefix), the plain one GH 30 on all samples
  (``multilevel=False``), both with the same staged solve.

For each link both estimators solve the SE from ``0.05 I`` in this process, warm kernels
(one untimed map evaluation first): today's ``observation='sample'`` at the default
16384 frozen samples, the new ``observation='auto'`` at ``NEW_SAMPLES`` of them.  Printed:
the fixed points, the largest standard error of a free overlap (``Q_stderr``, through the
linearized map), the wall time of the solve, the ratio
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

Measured 2026-11-28 on 2 cores under load ~8-10 (ratios only count):

* scalar noisy: ScalarNoisySE Q = 0.45120203, refinement error 1.7e-5, 64 s (3.5e-7 from
  the reference).  The old 40-node Gauss-Hermite check value 0.54222 was itself off by
  9e-5 (96 nodes: 0.5421368, 192: 0.5421358).  Plain RQMC (16384 samples) earlier gave
  0.4442 +- 0.00128: 5.5 of its standard errors below Q*; the y-grid RQMC (1024)
  0.4508 +- 0.00028: 1.4.  At 4096 samples, 5 seeds: z = (Q - Q*)/stderr = -1.25,
  -2.74, 0.03, -0.51, -0.11 (stderr 0.005-0.008, itself varying by 1.8x across seeds);
  the map at Q* itself (plain, same seeds) -1.3, -2.6, 0.0, -0.5, -0.1 standard errors
  from Q*/(1 - Q*).  At 16384 samples, seeds 0-2: z = -5.23, -1.57, -0.26 (stderr
  0.0013-0.0021), the sampled map at Q* -5.6, -1.5, -0.25 of its standard errors from
  Q*/(1 - Q*) = 0.822163: the understatement sits in the map's own RQMC standard error
  (spread over 16 scramblings of a heavy-tailed g_out^2), not only in the fixed point's
  propagation; 7 of the 8 runs lie below Q* (mean z -1.5).
* sign(z1 z2), alpha 3.5: plain 0.4702 / 0.4696 +- 0.0026 in 410 s; exact sum over y with
  the z1 <-> z2 average (4096 samples) 0.47218 = 0.47218 +- 0.00066 in 77 s: ratio 83.8,
  agree within 1.25 joint errors, Q11 = Q22 exactly (load ~16, before this change).
* depth-2 attention: falls back (reason printed): ratio 1.

Run: ``python numerics/bench/generic_se.py [NAME ...]`` (rows whose name contains a NAME)
"""
from __future__ import annotations

import sys
import time

import numpy as np

PLAIN_SAMPLES = 16384
NEW_SAMPLES = {"scalar noisy |z|": None, "2-index noiseless sign(z1 z2)": None,
               "depth-2 attention": 16384}
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


def main(argv):
    only = [a for a in argv if not a.startswith("-")]
    ratios = []
    for name, model, alpha, noise in links():
        if only and not any(o in name for o in only):
            continue
        print(f"== {name}, alpha = {alpha:g}" + (f", Delta = {noise:g}" if noise else ""))
        new_samples = NEW_SAMPLES[name]
        if name == "depth-2 attention":
            # y is sampled by both (its observation has M r = 2 continuous coordinates); the
            # new estimator is the two-level map of the channel rule (glm/se/multilevel.py)
            rp, ep, tp, free, note_p = run(model, alpha, noise, PLAIN_SAMPLES, "sample",
                                           multilevel=False)
            rn, en, tn, _, note_n = run(model, alpha, noise, new_samples, "sample")
            note_n = rn.message.split("; final stage by ")[-1].split(";")[0]
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
        print(f"  new ({rn.samples} nodes; {note_n}): Q = {np.round(rn.Q, 6).tolist()}, "
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
