"""GAMP-RIE building blocks for AIM (aim.md 5).

The Onsager coefficient needs the divergence of the symmetric RIE denoiser; it is
checked here against central finite differences along every free coordinate of a
symmetric matrix (an independent path: only the denoiser itself is called).
"""
import math

import numpy as np
import pytest

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


# ------------------------------------------------------------------ the sensing operator
from symtheory.aim import data as aim_data  # noqa: E402
from symtheory.aim.gamp import IndexOperator, softmax_preimage  # noqa: E402


def _u_from_h(h):
    T = h.shape[-1]
    rows, cols = np.triu_indices(T)
    u = h[:, rows, cols].copy()
    u[:, rows == cols] /= math.sqrt(2.0)
    return u


def test_operator_applies_the_unit_sensing_matrices():
    """A(S) = u-image of the indices computed through W (data.attention_indices, never
    forming S); the adjoint passes <A x, g> = <x, A^T g>; the coordinates are an isometry
    with mean(x^2) = ||S||_F^2/d.  All exact up to rounding (1e-12 on O(1) numbers)."""
    D = aim_data.generate(17, 0.2, rho=0.4, seq_len=3, seed=4)
    op = IndexOperator(D.X)
    np.testing.assert_allclose(op.forward(D.S), _u_from_h(D.h), atol=1e-12)
    L = op.row_operator()
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((2, op.p)), rng.standard_normal((op.n, 2, op.K))
    assert np.sum(L.forward(x) * g) == pytest.approx(np.sum(x * L.adjoint(g)), rel=1e-12)
    assert np.mean(op.vec(D.S) ** 2) == pytest.approx(np.sum(D.S ** 2) / D.d, rel=1e-12)
    np.testing.assert_allclose(op.unvec(op.vec(D.S)), D.S, atol=1e-14)


def test_operator_rows_have_unit_variance():
    """E[Tr(G B) Tr(G C)] = Tr(B C)/d (aim.md 2): the operator's entries have variance
    1/p, so E (Phi x)_k^2 = mean(x^2).  Monte Carlo over 4000 samples of T = 2 tokens
    (12000 indices), a fixed symmetric B: relative standard error sqrt(2/12000) ~ 1.3 %,
    bound 5 standard errors."""
    rng = np.random.default_rng(1)
    d = 12
    X = rng.standard_normal((4000, 2, d))
    op = IndexOperator(X)
    A = rng.standard_normal((d, d))
    B = (A + A.T) / 2
    u = op.forward(B)
    expected = np.sum(B * B) / d
    assert np.mean(u ** 2) == pytest.approx(expected, rel=5 * math.sqrt(2 / u.size))


@pytest.mark.parametrize("T, inv_temp", [(2, 1.0), (3, 0.7), (4, 2.0)])
def test_softmax_preimage_spans_what_the_link_reveals(T, inv_temp):
    """P_perp u* = P_perp u with the kernel of the link's Jacobian derived by SymPy
    (model.link_rank): the preimage loses exactly the direction h -> h + c J."""
    from symtheory.aim import model as M

    D = aim_data.generate(9, 0.5, rho=0.5, seq_len=T, inv_temp=inv_temp, seed=T)
    ker = M.link_rank(T, "softmax").kernel
    u, u_star = _u_from_h(D.h), _u_from_h(softmax_preimage(D.y, inv_temp))
    proj = lambda z: z - (z @ ker) @ ker.T  # noqa: E731
    np.testing.assert_allclose(proj(u_star), proj(u), atol=1e-9)
    assert np.max(np.abs(u_star - u)) > 1e-3          # but u* is not u itself


# ------------------------------------------------------------------ the algorithm
def test_first_iteration_matches_the_state_evolution():
    """From S_hat = sqrt(rho) I, V = 1 the first denoising noise is D = 1/q_hat(V = 1) of
    the SE (aim.md 3.3) up to the sampling error of sum g^2: n k = 2160 squared Gaussian
    residuals, relative standard error sqrt(2/2160) = 3 %, bound 4 standard errors."""
    from symtheory.aim.gamp import run_gamp, se_engine

    D = aim_data.generate(60, 0.3, rho=0.5, seq_len=2, seed=0)
    res = run_gamp(D, max_iter=1)
    se = se_engine(D)
    # row 0 of the trace is the start; row 1 the first iteration
    assert res.trace["D"][1] == pytest.approx(1 / se.qhat(se.v_max), rel=4 * math.sqrt(2 / 2160))


@pytest.mark.parametrize("link, T, alpha, se, bound", [
    # d = 100 measured 0.4075 (QN, SE 0.3922) and 0.404 (softmax): finite size O(1/(alpha d))
    # (aim.md 5 reports 0.407 for its own GAMP-RIE at d = 100); bound 0.05 at d = 80
    ("identity", 1, 0.2, 0.3921960173, 0.05),
    ("softmax", 2, 0.1, 0.3921960173, 0.05),
])
def test_gamp_reaches_the_state_evolution_light(link, T, alpha, se, bound):
    from symtheory.aim.gamp import run_gamp, se_mse

    D = aim_data.generate(80, alpha, rho=0.5, seq_len=T, link=link, seed=0)
    assert se_mse(D.alpha, 0.5, T, link) == pytest.approx(se, abs=1e-9)   # aim.md 7
    res = run_gamp(D, damping=0.5, max_iter=60)
    assert not res.diverged
    assert abs(res.final_mse - se) < bound
    # the trace starts at the uninformative error and carries the SE next to it
    assert res.trace["se_variance"][-1] == pytest.approx(se, abs=1e-3)


def test_gamp_recovers_past_perfect_recovery_light():
    """softmax T = 2, rho = 0.5, alpha = 0.3 = 1.6 alpha_PR at d = 80: the error falls
    geometrically (d = 100 measured 1e-5 after 150 iterations at alpha = 0.25); 1e-3 after
    80 iterations leaves room for the finite-size slowdown, not for a stall at O(1e-2) as
    without the damped variance (0.045 at d = 100)."""
    from symtheory.aim.gamp import run_gamp

    D = aim_data.generate(80, 0.3, rho=0.5, seq_len=2, seed=0)
    res = run_gamp(D, damping=0.5, max_iter=80)
    assert res.final_mse < 1e-3


# ------------------------------------------------------------------ acceptance (slow)
@pytest.mark.slow
@pytest.mark.parametrize("link, T, below, above", [
    ("identity", 1, [0.1, 0.2, 0.3], 0.5),       # QN, kappa = 0.5: alpha_PR = 0.375
    ("softmax", 2, [0.05, 0.1, 0.15], 0.25),     # alpha_PR = 0.1875
])
def test_acceptance_gamp_follows_the_state_evolution(link, T, below, above):
    """aim.md 5 at d = 200, seeds 0-2, rho = 0.5, damping 0.5: within 0.03 of the SE at
    three alphas below alpha_PR, below 1e-4 above it.  Measured (numerics/aim_gamp_vs_se.py,
    ~40 s to 6 min per run on the shared machine): softmax 0.712, 0.712, 0.736 (SE 0.724;
    seed 2 blew up at damping 0.5 and was restarted at 0.75), 0.395, 0.380, 0.387 (SE
    0.392), 0.127, 0.131, 0.127 (SE 0.128), < 5e-6 at 0.25; QN 0.724, 0.718, 0.746 (SE
    0.724), 0.408, 0.394, 0.406 (SE 0.392), 0.138, 0.131, 0.135 (SE 0.128), < 5e-6 at 0.5
    (the authors' d = 200 AMP: 0.748 at 0.1, 1.5e-4 at 0.5).  The 0.03 bound: the
    finite-size offset O(1/(alpha d)) (aim.md 5: 1-10 % at d = 100) plus seed-to-seed
    spread ~0.01."""
    from symtheory.aim.gamp import gamp_curve

    summary, _ = gamp_curve(below + [above], d=200, rho=0.5, seq_len=T, link=link,
                            seeds=[0, 1, 2], damping=0.5, max_iter=150)
    a, mse, se = summary["alpha"], summary["mse"], summary["se_mse"]
    print(list(zip(a, summary["seed"], mse, se)))
    low = a < above - 1e-9
    assert np.all(np.abs(mse[low] - se[low]) < 0.03)
    assert np.all(se[~low] == 0) and np.all(mse[~low] < 1e-4)


@pytest.mark.slow
def test_acceptance_hardmax_gamp_follows_the_corrected_curve():
    """Hardmax T = 2, rho = 0.5, d = 100, seed 0: GAMP-RIE with the Bayes g_out against
    the corrected SE (0.7451, 0.3742, 0.1680 at alpha = 0.1, 0.3, 0.6; aim.md 3.5) and the
    authors' joint-density SE (0.8604, 0.6281, 0.4397).  Measured (numerics/
    aim_gamp_vs_se.py, 6-18 min per run on the shared machine): 0.7318, 0.3830, 0.1677
    (aim.md 3.5's own GAMP-RIE at d = 100: 0.7473, 0.4007, 0.1697).  Bound 0.05 (finite
    d) and at least 3x closer to the corrected curve than to the published one."""
    from symtheory.aim.gamp import gamp_curve

    summary, _ = gamp_curve([0.1, 0.3, 0.6], d=100, rho=0.5, seq_len=2, link="hardmax",
                            seeds=[0], damping=0.5, max_iter=150)
    mse, se, pub = summary["mse"], summary["se_mse"], summary["se_mse_joint_density"]
    print(list(zip(summary["alpha"], mse, se, pub)))
    np.testing.assert_allclose(se, [0.7451, 0.3742, 0.1680], atol=2e-4)
    np.testing.assert_allclose(pub, [0.8604, 0.6281, 0.4397], atol=2e-4)
    assert np.all(np.abs(mse - se) < 0.05)
    assert np.all(3 * np.abs(mse - se) < np.abs(mse - pub))
