"""SMI channels through the generic machinery: closed forms, symmetries, identities,
and the softmax/linear attention denoiser against an independent mpmath quadrature."""
from __future__ import annotations

import functools

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from symtheory.core.quadrature import TensorRule
from symtheory.smi import deep_attention, linear_tokens, outer_product


@pytest.fixture(scope="module")
def attention():
    return deep_attention(2, 2, 1, 1.0)


# ------------------------------------------------------------------ declarations
def test_symmetry_detection():
    assert deep_attention(2, 2).even_groups == {(0,): True, (1,): True}
    assert deep_attention(3, 2).is_even
    assert not linear_tokens(2).is_even          # y = z is odd
    untied = deep_attention(1, 2, variant="untied")
    assert untied.P == 2 and untied.is_even       # only the joint (K, Q) flip is declared
    from symtheory.glm import MultiIndexModel

    Z = untied.indices
    split = MultiIndexModel("untied_split", Z, untied.link, params=untied.params,
                     row_groups=[(0,), (1,)])
    assert split.even_groups == {(0,): False, (1,): False}   # K alone is not a symmetry


def test_reduction_rejects_a_wrong_head():
    from symtheory.glm import DeterministicReduction, MultiIndexModel

    m = outer_product(2)
    red = m.reduction
    bad = DeterministicReduction(red.solved_rows, red.mixing, red.E, 2 * red.head, red.observed)
    with pytest.raises(ValueError, match="does not reproduce the link"):
        MultiIndexModel("bad", m.indices, m.link, reduction=bad)


def test_deterministic_channel_needs_reduction_or_noise():
    with pytest.raises(ValueError, match="noise_variance"):
        linear_tokens(2).channel()
    with pytest.raises(ValueError, match="noise_variance"):
        linear_tokens(2).channel(-1.0)


def test_attention_link_matches_token_recursion(attention):
    """The generated link equals a plain numpy forward pass of Eq. (2) (token-major)."""
    rng = np.random.default_rng(0)
    d, c = 50, 1.0
    W = rng.standard_normal((2, d))
    X = rng.standard_normal((d, 2))           # feature-major x; token-major is X.T

    def softmax_rows(K):
        e = np.exp(K - K.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    Xt = X.T
    K1 = Xt @ W[:1].T @ W[:1] @ Xt.T / d
    X2 = (c * np.eye(2) + softmax_rows(K1)) @ Xt
    y_ref = softmax_rows(X2 @ W[1:].T @ W[1:] @ X2.T / d)
    Z = (W @ X / np.sqrt(d))[None]
    assert np.allclose(attention.g(Z)[0], y_ref, rtol=0, atol=1e-14)


# ------------------------------------------------------------------ closed forms
@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 3), seed=st.integers(0, 10**6),
       V=st.floats(0.05, 3.0), scale=st.floats(0.1, 2.0))
def test_outer_product_posterior_mean_closed_form(M, seed, V, scale):
    """y = z z^T reveals z up to sign: E[z|y] = z tanh(z.omega/V) (smi.md 13.3)."""
    m = outer_product(M)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((8, 1, M))
    omega = scale * rng.standard_normal((8, 1, M))
    y = m.g(z).reshape(8, -1)
    g, dg = m.channel().gout(y, omega, np.array([[V]]))
    mean_exact = z[:, 0] * np.tanh(np.sum(z[:, 0] * omega[:, 0], axis=1) / V)[:, None]
    g_exact = (mean_exact - omega[:, 0]) / V
    assert np.allclose(g[:, 0], g_exact, rtol=1e-10, atol=1e-10)
    # Jacobian: Cov(z|y) = z z^T (1 - tanh^2)
    t = np.tanh(np.sum(z[:, 0] * omega[:, 0], axis=1) / V)
    cov = np.einsum("sm,sn->smn", z[:, 0], z[:, 0]) * (1 - t * t)[:, None, None]
    dg_exact = cov / V**2 - np.eye(M)[None] / V
    assert np.allclose(dg[:, 0, :, 0, :], dg_exact, rtol=1e-9, atol=1e-9)


@settings(max_examples=15, deadline=None)
@given(c=st.floats(0.1, 4.0), seed=st.integers(0, 10**6),
       activation=st.sampled_from(["softmax", "linear"]))
def test_even_symmetry_gout_vanishes_at_prior(c, seed, activation):
    """g_out(y, 0, I) = 0 and cross-layer blocks of dg_out vanish (smi.md 13.6)."""
    m = deep_attention(2, 2, 1, c, activation=activation)
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((6, 2, 2))
    y = m.g(Z).reshape(6, -1)
    g, dg = m.channel(rule=TensorRule("gauss-hermite", 20)).gout(y, np.zeros((6, 2, 2)), np.eye(2))
    assert np.max(np.abs(g)) < 1e-12
    assert np.max(np.abs(dg[:, 0, :, 1, :])) < 1e-12
    assert np.max(np.abs(dg[:, 1, :, 0, :])) < 1e-12


def test_tower_and_nishimori_identities(attention):
    """At the prior E_y E[Z Z^T|y] = I; at any Q, E[g g^T] = -E[sum_m J_mm] (smi.md 13.7).
    Tolerance: 4 Monte-Carlo standard errors of the per-sample averages."""
    from symtheory.glm import StateEvolution

    ch = attention.channel(rule=TensorRule("gauss-hermite", 30))
    rng = np.random.default_rng(5)
    S = 4000
    Z = rng.standard_normal((S, 2, 2))
    y = attention.g(Z).reshape(S, -1)
    _, mean, cov = ch.moments(y, np.zeros((S, 2, 2)), np.eye(2)).posterior()
    second = cov + np.einsum("si,sj->sij", mean.reshape(S, 4), mean.reshape(S, 4))
    avg = second.mean(axis=0)
    err = second.std(axis=0) / np.sqrt(S)
    assert np.all(np.abs(avg - np.eye(4)) <= 4 * err + 1e-12)

    se = StateEvolution(attention, 0.5, samples=S, seed=2, structure="full")
    Q = np.array([[0.3, 0.05], [0.05, 0.6]])
    y, omega, V, _ = se.sample_channel(Q)
    g, dg = se.channel.gout(y, omega, V)
    per = np.einsum("sam,sbm->sab", g, g) + np.einsum("sambm->sab", dg)
    assert np.all(np.abs(per.mean(axis=0)) <= 4 * per.std(axis=0) / np.sqrt(S))


# ------------------------------------------------------------------ independent path
def _mp_moments(y, omega, V, c, activation, dps=15):
    """Posterior moments of Z from Corollary E.1 by mpmath 2-D quadrature over z1.

    Independent of the package: the inversion is the spec's closed form (smi.md 10.1 /
    10.3), A(z1) and the Gaussian are written directly in mpmath."""
    mp = mpmath.mp
    with mpmath.workdps(dps):
        y = [[mpmath.mpf(v) for v in row] for row in y]
        if activation == "softmax":
            a = mpmath.log(y[0][0] / y[0][1])
            b = mpmath.log(y[1][1] / y[1][0])
            s = mpmath.sqrt(a + b)
            h0 = [a / s, -b / s]
        else:
            h0 = [mpmath.sqrt(y[0][0]), mpmath.sign(y[0][1]) * mpmath.sqrt(y[1][1])]
        Vm = mpmath.matrix([[mpmath.mpf(V[0][0]), mpmath.mpf(V[0][1])],
                            [mpmath.mpf(V[1][0]), mpmath.mpf(V[1][1])]])
        Vi = Vm ** -1
        sd = mpmath.sqrt(Vm[0, 0])
        om = [[mpmath.mpf(v) for v in row] for row in omega]

        def A_of(z1):
            if activation == "softmax":
                S11 = 1 / (1 + mpmath.exp(z1[0] * z1[1] - z1[0] ** 2))
                S22 = 1 / (1 + mpmath.exp(z1[0] * z1[1] - z1[1] ** 2))
                return mpmath.matrix([[c + S11, 1 - S11], [1 - S22, c + S22]])
            return mpmath.matrix([[c + z1[0] ** 2, z1[0] * z1[1]], [z1[0] * z1[1], c + z1[1] ** 2]])

        @functools.lru_cache(maxsize=None)
        def point(t0, t1):
            z1 = [om[0][0] + sd * t0, om[0][1] + sd * t1]
            A = A_of(z1)
            detA = abs(mpmath.det(A))
            out = []
            for sgn in (1, -1):
                z2 = A ** -1 * mpmath.matrix([sgn * h0[0], sgn * h0[1]])
                Zs = [z1[0], z1[1], z2[0], z2[1]]          # order (layer, token): a*2+m
                q = 0
                for m in range(2):
                    dvec = mpmath.matrix([z1[m] - om[0][m], z2[m] - om[1][m]])
                    q += (dvec.T * Vi * dvec)[0]
                out.append((mpmath.exp(-q / 2) / detA, Zs))
            return out

        def integral(f):
            # |t| > 9 carries Gaussian mass < 1e-18 relative: negligible at 1e-6
            return mpmath.quad(lambda t0, t1: sum(w * f(Zs) for w, Zs in point(t0, t1)),
                               [-9, 0, 9], [-9, 0, 9])

        Z0 = integral(lambda Zs: 1)
        mean = [integral(lambda Zs, i=i: Zs[i]) / Z0 for i in range(4)]
        cov = [[integral(lambda Zs, i=i, j=j: (Zs[i] - mean[i]) * (Zs[j] - mean[j])) / Z0
                for j in range(4)] for i in range(4)]
        return np.array([float(v) for v in mean]), np.array([[float(v) for v in r] for r in cov])


def _numpy_grid_moments(y, omega, V, c, activation, n=1601, width=9.0):
    """The same integrals as :func:`_mp_moments` by a dense trapezoid grid in numpy
    (vectorized, spec closed forms; trapezoid is spectrally accurate for these smooth
    Gaussian-weighted integrands)."""
    if activation == "softmax":
        a = np.log(y[0][0] / y[0][1])
        b = np.log(y[1][1] / y[1][0])
        s = np.sqrt(a + b)
        h0 = np.array([a / s, -b / s])
    else:
        h0 = np.array([np.sqrt(y[0][0]), np.sign(y[0][1]) * np.sqrt(y[1][1])])
    V = np.asarray(V)
    Vi = np.linalg.inv(V)
    om = np.asarray(omega)
    t = np.linspace(-width, width, n)
    T0, T1 = np.meshgrid(t, t, indexing="ij")
    z10 = om[0, 0] + np.sqrt(V[0, 0]) * T0
    z11 = om[0, 1] + np.sqrt(V[0, 0]) * T1
    if activation == "softmax":
        S11 = 1 / (1 + np.exp(z10 * z11 - z10**2))
        S22 = 1 / (1 + np.exp(z10 * z11 - z11**2))
        A = np.array([[c + S11, 1 - S11], [1 - S22, c + S22]])
    else:
        A = np.array([[c + z10**2, z10 * z11], [z10 * z11, c + z11**2]])
    det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
    ws, Zs = [], []
    for sgn in (1, -1):
        h = sgn * h0
        z20 = (A[1, 1] * h[0] - A[0, 1] * h[1]) / det
        z21 = (-A[1, 0] * h[0] + A[0, 0] * h[1]) / det
        q = 0
        for z1m, z2m, m in ((z10, z20, 0), (z11, z21, 1)):
            d0, d1 = z1m - om[0, m], z2m - om[1, m]
            q = q + Vi[0, 0] * d0 * d0 + 2 * Vi[0, 1] * d0 * d1 + Vi[1, 1] * d1 * d1
        ws.append(np.exp(-q / 2) / np.abs(det))
        Zs.append(np.stack([z10, z11, z20, z21]))
    W = np.stack(ws)
    Zs = np.stack(Zs)                     # (2 branches, 4, n, n)
    Z0 = W.sum()
    mean = np.einsum("bxy,bixy->i", W, Zs) / Z0
    D = Zs - mean[None, :, None, None]
    cov = np.einsum("bxy,bixy,bjxy->ij", W, D, D) / Z0
    return mean, cov


def _compare_with_independent(activation, c, seed, moments):
    m = deep_attention(2, 2, 1, c, activation=activation)
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((1, 2, 2))
    y = m.g(Z)
    V = np.array([[0.7, 0.1], [0.1, 0.5]])
    omega = 0.5 * rng.standard_normal((1, 2, 2))
    # Gauss-Hermite converges slowly for the linear mixing (T grows like |z1|^2): use
    # the uniform rule there (its grid is not nested in the reference grid)
    rule = (TensorRule("gauss-hermite", 80) if activation == "softmax"
            else TensorRule("uniform", 601, 8.0))
    g, dg = m.channel(rule=rule).gout(y.reshape(1, -1), omega, V)
    mean_i, cov_i = moments(y[0].tolist(), omega[0].tolist(), V.tolist(), c, activation)
    Vi = np.linalg.inv(V)
    g_i = Vi @ (mean_i.reshape(2, 2) - omega[0])
    C = cov_i.reshape(2, 2, 2, 2)
    dg_i = np.einsum("ac,cmek,eb->ambk", Vi, C, Vi) - np.einsum("ab,mk->ambk", Vi, np.eye(2))
    assert np.allclose(g[0], g_i, rtol=1e-6, atol=1e-6 * np.max(np.abs(g_i)))
    assert np.allclose(dg[0], dg_i, rtol=1e-6, atol=1e-6 * np.max(np.abs(dg_i)))


@pytest.mark.parametrize("activation,c,seed", [("softmax", 1.0, 0), ("softmax", 0.5, 1),
                                                ("softmax", 3.0, 3), ("linear", 1.0, 2)])
def test_attention_gout_against_brute_force_grid(activation, c, seed):
    """g_out, dg_out of the two-layer attention (generated inversion, Jacobians, Numba
    driver, Gauss-Hermite 80 / uniform 601) vs a dense numpy grid of the spec's closed forms: 1e-6
    relative."""
    _compare_with_independent(activation, c, seed, _numpy_grid_moments)


@pytest.mark.slow
@pytest.mark.parametrize("activation,c,seed", [("softmax", 1.0, 0), ("linear", 1.0, 2)])
def test_attention_gout_against_mpmath_quadrature(activation, c, seed):
    """The same against mpmath's 2-D tanh-sinh quadrature (~2.5 min per case)."""
    _compare_with_independent(activation, c, seed, _mp_moments)


def test_quadrature_rules_agree_on_the_reduced_integral(attention):
    """Gauss-Hermite 80 vs a uniform 401^2 grid on [-8, 8]^2 (a different rule): relative
    difference < 1e-6 on 50 samples (GH 60: 1.3e-6); the default GH 30 is within 1e-3
    (measured 1.4e-4)."""
    rng = np.random.default_rng(1)
    y = attention.g(rng.standard_normal((50, 2, 2))).reshape(50, -1)
    omega = 0.3 * rng.standard_normal((50, 2, 2))
    V = np.diag([0.8, 0.6])
    res = {rule: attention.channel(rule=rule).gout(y, omega, V)
           for rule in (TensorRule("gauss-hermite", 30), TensorRule("gauss-hermite", 80),
                        TensorRule("uniform", 401, 8.0))}
    (g30, dg30), (g80, dg80), (gu, dgu) = res.values()
    assert np.max(np.abs(g80 - gu)) <= 1e-6 * np.max(np.abs(gu))
    assert np.max(np.abs(dg80 - dgu)) <= 1e-6 * np.max(np.abs(dgu))
    assert np.max(np.abs(g30 - gu)) <= 1e-3 * np.max(np.abs(gu))


def test_gaussian_noise_channel_closed_form():
    """Linear tokens + Gaussian noise: g_out = (y - omega)/(Delta + V) exactly (GH is exact
    for this Gaussian-times-Gaussian integrand up to the rule's polynomial degree)."""
    m = linear_tokens(2)
    rng = np.random.default_rng(0)
    y = rng.standard_normal((5, 2))
    omega = rng.standard_normal((5, 1, 2))
    ch = m.channel(0.25, TensorRule("gauss-hermite", 40))
    g, dg = ch.gout(y, omega, np.array([[0.6]]))
    assert np.allclose(g[:, 0], (y - omega[:, 0]) / 0.85, atol=1e-10)
    assert np.allclose(dg[:, 0, 0, 0, 0], -1 / 0.85, atol=1e-10)


def test_seq2seq_and_untied_links_and_noisy_channel():
    """seq2seq (L = 1) outputs T_2 = c I + softmax_row(h^T h); untied attention with
    Gaussian output noise: the 4-D Gauss-Hermite channel respects the joint (K, Q) flip,
    g_out(y, 0, I) = 0, and agrees with a finer rule."""
    c = 0.7
    s2s = deep_attention(1, 2, 1, c, variant="seq2seq")
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((3, 1, 2))
    h = Z[:, 0, :]
    K = h[:, :, None] * h[:, None, :]
    e = np.exp(K - K.max(axis=2, keepdims=True))
    assert np.allclose(s2s.g(Z), c * np.eye(2) + e / e.sum(axis=2, keepdims=True), atol=1e-14)

    untied = deep_attention(1, 2, 1, 1.0, variant="untied")
    Z = rng.standard_normal((4, 2, 2))
    y = untied.g(Z).reshape(4, -1) + 0.1 * rng.standard_normal((4, 4))
    ch = untied.channel(0.05, TensorRule("gauss-hermite", 12))
    g0, _ = ch.gout(y, np.zeros((4, 2, 2)), np.eye(2))
    assert np.max(np.abs(g0)) < 1e-12
    omega = 0.3 * rng.standard_normal((4, 2, 2))
    V = np.array([[0.5, 0.1], [0.1, 0.4]])
    # accuracy of a GH tensor grid depends on the noise width: at Delta = 0.05 rules 12
    # and 16 differ by ~0.7%; at Delta = 0.5 the test requires < 0.1%
    g12, _ = untied.channel(0.5, TensorRule("gauss-hermite", 12)).gout(y, omega, V)
    g16, _ = untied.channel(0.5, TensorRule("gauss-hermite", 16)).gout(y, omega, V)
    assert np.max(np.abs(g12 - g16)) <= 1e-3 * np.max(np.abs(g16))


def test_derivation_script_checks_pass():
    """derivations/smi_attention_channel.py re-derives det T, the branches, the output
    Jacobian and the linear-activation pieces and compares them with smi.md's closed forms."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "derivations" / "smi_attention_channel.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    checks = [line for line in out.stdout.splitlines() if line.rstrip().endswith(("True", "False"))]
    assert len(checks) == 4 and all(c.rstrip().endswith("True") for c in checks), checks
