"""The Numba moment kernels every posterior rule ends in (symtheory.core._moments_nb),
against an independent path: mpmath at 50 digits, hypothesis drawing the inputs."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symtheory.core._moments_nb import gaussian_conjugate, lu_solve_logdet, weighted_moments


def _mp_moments(logw, zs):
    mpmath.mp.dps = 50
    w = [mpmath.e ** mpmath.mpf(float(v)) for v in logw]
    tot = mpmath.fsum(w)
    d = zs.shape[1]
    mean = [mpmath.fsum(wi * mpmath.mpf(float(z[a])) for wi, z in zip(w, zs)) / tot
            for a in range(d)]
    cov = [[mpmath.fsum(wi * (mpmath.mpf(float(z[a])) - mean[a]) * (mpmath.mpf(float(z[b])) - mean[b])
                        for wi, z in zip(w, zs)) / tot for b in range(d)] for a in range(d)]
    return mpmath.log(tot), mean, cov


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), d=st.integers(1, 5),
       spread=st.floats(-12, 0), shift=st.floats(-3, 3), logw_scale=st.floats(0, 300))
def test_weighted_moments_against_mpmath(seed, n, d, spread, shift, logw_scale):
    """log-weights over up to 300 nats, points offset by 10^shift with a spread of
    10^spread (a nearly known coordinate: the case where a one-pass sum of squares
    cancels).  West's update is backward stable: the covariance error is a few ulps of
    |x| |x - mean| under the weights, i.e. of |x| times the weighted sd, not of the
    points' spread (a dominant point makes the weighted sd far smaller).  Tolerance:
    1e-12 sd_a sd_b + 1e-14 |x| sqrt(sd_a sd_b)."""
    rng = np.random.default_rng(seed)
    logw = rng.uniform(-logw_scale, 0, n)
    zs = 10.0 ** shift + 10.0 ** spread * rng.standard_normal((n, d))
    mean, cov = np.empty(d), np.empty((d, d))
    lz = weighted_moments(logw, zs, n, mean, cov)
    mlz, mmean, mcov = _mp_moments(logw, zs)
    assert abs(lz - float(mlz)) <= 1e-13 * (1 + abs(float(mlz)))
    sd = np.sqrt(np.maximum(np.diag(np.array(mcov, dtype=float)), 0.0))
    scale = 10.0 ** spread
    for a in range(d):
        assert abs(mean[a] - float(mmean[a])) <= 1e-14 * abs(float(mmean[a])) + 1e-13 * scale
        for b in range(d):
            tol = 1e-12 * sd[a] * sd[b] + 1e-14 * 10.0 ** shift * math.sqrt(sd[a] * sd[b]) \
                + 1e-300
            assert abs(cov[a, b] - float(mcov[a][b])) <= tol
            assert cov[a, b] == cov[b, a]


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_weighted_moments_with_a_dominant_point(order):
    """Weights e^-40 and 1 on the points 0 and 1: Cov = e^-40/(1 + e^-40)^2 = 4.25e-18 in
    either order.  West's factor written 1 - w/total rounded to 0 when the heavy point
    came last (the result was 0.0)."""
    logw = np.array([-40.0, 0.0])[list(order)]
    zs = np.array([[0.0], [1.0]])[list(order)]
    mean, cov = np.empty(1), np.empty((1, 1))
    weighted_moments(logw, zs, 2, mean, cov)
    exact = math.exp(-40) / (1 + math.exp(-40)) ** 2
    assert cov[0, 0] == pytest.approx(exact, rel=1e-12)


def test_weighted_moments_without_weight_is_nan():
    mean, cov = np.empty(2), np.empty((2, 2))
    assert weighted_moments(np.full(3, -np.inf), np.ones((3, 2)), 3, mean, cov) == -math.inf
    assert np.isnan(mean).all() and np.isnan(cov).all()
    assert weighted_moments(np.zeros(3), np.ones((3, 2)), 0, mean, cov) == -math.inf


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), M=st.integers(1, 5), r=st.integers(1, 3),
       exponent=st.floats(-200, 200))
def test_lu_solve_logdet_against_mpmath(seed, M, r, exponent):
    """log|det T| (one log of the running pivot product, folded before it leaves the
    normal range) and the solve, for matrices scaled by 10^exponent (determinants
    from 1e-1000 to 1e1000).  Tolerance: a few hundred ulps times the condition number
    (partial pivoting)."""
    rng = np.random.default_rng(seed)
    T = rng.standard_normal((M, M)) * 10.0 ** exponent
    E = rng.standard_normal((M, r))
    X = np.empty((M, r))
    ld = lu_solve_logdet(T.copy(), E.copy(), X)
    mpmath.mp.dps = 50
    Tm = mpmath.matrix(T.tolist())
    ref = mpmath.log(abs(mpmath.det(Tm)))
    cond = np.linalg.cond(T)
    assert abs(ld - float(ref)) <= 1e-13 * (1 + abs(float(ref))) + 1e-14 * cond
    Xref = np.array([[float(v) for v in mpmath.lu_solve(Tm, mpmath.matrix(E[:, j].tolist()))]
                     for j in range(r)]).T
    assert np.allclose(X, Xref, rtol=1e-11 * cond, atol=1e-11 * cond * np.abs(Xref).max())


@pytest.mark.parametrize("pivots", [(1e-140, 1e-200), (1e140, 1e200), (1e-300, 1e300),
                                    (1e200, 1e-200, 1e150, 1e-10)])
def test_lu_solve_logdet_with_pivots_of_mixed_scale(pivots):
    """A diagonal T with pivots far apart: the running product must not over- or
    underflow (1e-140 * 1e-200 gave -inf, i.e. 'singular')."""
    T = np.diag(pivots)
    X = np.empty((len(pivots), 1))
    ld = lu_solve_logdet(T.copy(), np.ones((len(pivots), 1)), X)
    assert ld == pytest.approx(sum(math.log(p) for p in pivots), rel=1e-14, abs=1e-12)
    np.testing.assert_allclose(X[:, 0], 1 / np.array(pivots), rtol=1e-15)


def test_lu_solve_logdet_singular():
    X = np.empty((2, 1))
    assert lu_solve_logdet(np.zeros((2, 2)), np.ones((2, 1)), X) == -math.inf


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_out=st.integers(1, 4), nS=st.integers(0, 3),
       log_delta=st.floats(-3, 1))
def test_gaussian_conjugate_against_mpmath(seed, n_out, nS, log_delta):
    """log N(y; A m + b, A C A^T + delta I) and the conjugate posterior of x ~ N(m, C),
    including the fast path with nothing affine (nS = 0: S = delta I), against mpmath at
    50 digits.  Tolerance 1e-9: S = A C A^T + delta I with delta >= 1e-3 and O(1) entries
    has condition number <= ~1e4, so float64 Cholesky is good to ~1e-12 relative."""
    rng = np.random.default_rng(seed)
    delta = 10.0 ** log_delta
    A = rng.standard_normal((n_out, nS))
    b, y, m = rng.standard_normal(n_out), rng.standard_normal(n_out), rng.standard_normal(nS)
    G = rng.standard_normal((nS, nS))
    C = G @ G.T + 0.5 * np.eye(nS)
    post_mean, post_cov = np.empty(nS), np.empty((nS, nS))
    logl = gaussian_conjugate(A, b, y, m, C, delta, post_mean, post_cov, np.empty((n_out, nS)),
                              np.empty((n_out, n_out)), np.empty((3, n_out)))
    mpmath.mp.dps = 50
    Am, Cm = mpmath.matrix(A.tolist()) if nS else None, mpmath.matrix(C.tolist()) if nS else None
    S = mpmath.eye(n_out) * mpmath.mpf(delta)
    r = mpmath.matrix((y - b).tolist())
    if nS:
        S += Am * Cm * Am.T
        r -= Am * mpmath.matrix(m.tolist())
    Si = mpmath.inverse(S)
    quad = (r.T * Si * r)[0]
    ref = -quad / 2 - mpmath.log(mpmath.det(S)) / 2 - n_out * mpmath.log(2 * mpmath.pi) / 2
    assert logl == pytest.approx(float(ref), rel=1e-9, abs=1e-9)
    if nS:
        K = Cm * Am.T * Si
        ref_mean = mpmath.matrix(m.tolist()) + K * r
        ref_cov = Cm - K * Am * Cm
        for i in range(nS):
            assert post_mean[i] == pytest.approx(float(ref_mean[i]), rel=1e-9, abs=1e-9)
            for j in range(nS):
                assert post_cov[i, j] == pytest.approx(float(ref_cov[i, j]), rel=1e-9, abs=1e-9)


def test_gaussian_conjugate_without_noise_and_nothing_affine_is_minus_infinity():
    """delta = 0 with nothing affine: S = 0 is singular, the density does not exist."""
    out = gaussian_conjugate(np.empty((2, 0)), np.zeros(2), np.ones(2), np.empty(0),
                             np.empty((0, 0)), 0.0, np.empty(0), np.empty((0, 0)),
                             np.empty((2, 0)), np.empty((2, 2)), np.empty((3, 2)))
    assert out == -math.inf
