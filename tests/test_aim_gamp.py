"""GAMP-RIE building blocks for AIM (aim.md 5).

The Onsager coefficient needs the divergence of the symmetric RIE denoiser; it is
checked here against central finite differences along every free coordinate of a
symmetric matrix (an independent path: only the denoiser itself is called).
"""
import math

import numpy as np

from symtheory.aim.theory import theory


def test_rie_divergence_matches_finite_differences():
    """Daleckii-Krein divergence vs sum_{i <= j} of central differences (step 1e-6 on
    O(1) eigenvalues: truncation ~1e-12, rounding ~1e-10 per entry over d(d+1)/2 = 120
    entries -> 1e-6 relative)."""
    rng = np.random.default_rng(3)
    d, rho, D = 15, 0.5, 0.4
    r = int(rho * d)
    W = rng.standard_normal((d, r))
    S = W @ W.T / math.sqrt(r * d)
    A = rng.standard_normal((d, d))
    R = S + math.sqrt(D) * (A + A.T) / math.sqrt(2 * d)
    prior = theory().prior
    t = (math.sqrt(rho),)
    div = prior.divergence(R, t, D)
    eps = 1e-6
    fd = 0.0
    for i in range(d):
        for j in range(i, d):
            E = np.zeros((d, d))
            E[i, j] = E[j, i] = eps
            fd += (prior.denoise(R + E, t, D)[i, j] - prior.denoise(R - E, t, D)[i, j]) / (2 * eps)
    assert abs(div - fd) < 1e-6 * abs(fd)
    # the RIE shrinks: its divergence is below the identity map's d(d+1)/2
    assert abs(div) < d * (d + 1) / 2
