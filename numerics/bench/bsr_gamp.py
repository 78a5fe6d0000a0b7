"""Benchmark: cost of one GAMP-RIE iteration vs its unavoidable linear algebra.

At d = L = 100 (alpha = 0.5, n = 5000, p = 10^4) one iteration needs two passes over
the design (Phi @ vec(S) and Phi^T @ g) and one SVD of the d x L matrix R.  Measured
in the same run: the mean time of a GAMP-RIE iteration (after warm-up; RIE map, exact
divergence, channel kernel, state evolution included) and the time of those three
numpy operations.  Ends with ``ratio <number>`` (iteration / linear algebra).
Target: ratio <= 3.

Run: ``python numerics/bench/bsr_gamp.py``
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from symtheory.bsr.data import generate
from symtheory.bsr.gamp import gamp_rie


def main() -> float:
    d, beta, rho, alpha = 100, 1.0, 0.5, 0.5
    data = generate(d, beta, rho, alpha, 0.0, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gamp_rie(data, max_iter=3)                        # warm-up: kernels loaded
        iters = 20
        t0 = time.perf_counter()
        res = gamp_rie(data, max_iter=iters, tol=0.0)
        per_iter = (time.perf_counter() - t0) / res.iterations
    Phi, g, s = data.Phi, data.y.copy(), data.S.ravel()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        Phi @ s
        Phi.T @ g
        np.linalg.svd(s.reshape(d, -1), full_matrices=False)
    base = (time.perf_counter() - t0) / reps
    ratio = per_iter / base
    print(f"d = L = {d}, alpha = {alpha}: n = {data.n}, p = {d * data.L}")
    print(f"GAMP-RIE iteration: {1e3 * per_iter:.2f} ms (mean of {res.iterations})")
    print(f"Phi @ vec(S) + Phi^T @ g + SVD(d x L): {1e3 * base:.2f} ms")
    print(f"ratio {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main()
