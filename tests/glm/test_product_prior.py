"""Product priors (P > 1 rows, each a declared separable prior) against independent
paths: the rows' SymPy-derived 1-D log-partitions at a diagonal precision, direct
numerical integration over w at a coupled one, their own derivatives, and the Gaussian
prior's closed-form overlap map Q (I + Q)^{-1}."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from symtheory.core.validate import ParameterError
from symtheory.glm.factors import separable_prior as S
from symtheory.glm.factors.gaussian_prior import gaussian_overlap_map
from symtheory.glm.factors.product_prior import ProductPrior

A_COUPLED = np.array([[1.3, -0.6], [-0.6, 0.9]])
B_FIELDS = np.array([[0.4, -1.1, 2.0], [0.7, 0.2, -0.5]])


@pytest.fixture(scope="module")
def mixed():
    """Row 1 Gauss-Bernoulli (rho 0.3, a point mass and a Gaussian), row 2 Rademacher."""
    return ProductPrior([S.gauss_bernoulli(sp.Rational(3, 10)), S.rademacher()])


def test_diagonal_precision_is_the_rows_own_input_functions(mixed):
    """At a diagonal A the closed form over component combinations (forced) equals the
    rows' SymPy-derived 1-D terms (the default path there), to rounding."""
    A = np.diag([1.7, 0.4])
    lz, f, cov = mixed.log_partition_terms(A, B_FIELDS)
    lz2, f2, cov2 = mixed._coupled_terms(A, B_FIELDS)
    np.testing.assert_allclose(lz2, lz, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(f2, f, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(cov2, cov, rtol=1e-12, atol=1e-15)


def _direct_log_partition(A, b):
    """log int dP1(w1) dP2(w2) exp(b.w - w^T A w/2): the Rademacher row summed, the
    Gauss-Bernoulli row's atom summed and its Gaussian integrated by adaptive quadrature
    (scipy.integrate.quad, 1e-13)."""
    total = 0.0
    for w2 in (-1.0, 1.0):
        def e(w1):
            w = np.array([w1, w2])
            return math.exp(b @ w - 0.5 * w @ A @ w)
        gauss = integrate.quad(lambda w1: e(w1) * math.exp(-w1 * w1 / 2) / math.sqrt(2 * math.pi),
                               -np.inf, np.inf, epsabs=0, epsrel=1e-13)[0]
        total += 0.5 * (0.7 * e(0.0) + 0.3 * gauss)
    return math.log(total)


def test_coupled_precision_against_direct_integration(mixed):
    """At a coupled A: log Z against direct integration (1e-11: quad's 1e-13 plus the
    sum's rounding), f_in against the gradient of log Z and the covariance against the
    Jacobian of f_in (central differences, eps 1e-5: truncation ~1e-10, rounding ~1e-11;
    tolerance 1e-7)."""
    lz, f, cov = mixed.log_partition_terms(A_COUPLED, B_FIELDS)
    eps = 1e-5
    for j in range(B_FIELDS.shape[1]):
        b = B_FIELDS[:, j]
        assert lz[j] == pytest.approx(_direct_log_partition(A_COUPLED, b), abs=1e-11)
        for k in range(2):
            e = np.zeros((2, 1))
            e[k] = eps
            lp, fp, _ = mixed.log_partition_terms(A_COUPLED, b[:, None] + e)
            lm, fm, _ = mixed.log_partition_terms(A_COUPLED, b[:, None] - e)
            assert f[k, j] == pytest.approx((lp[0] - lm[0]) / (2 * eps), abs=1e-7)
            np.testing.assert_allclose(cov[j, :, k], (fp[:, 0] - fm[:, 0]) / (2 * eps), atol=1e-7)


def test_gaussian_rows_reproduce_the_closed_form_overlap_map():
    """Two N(0, 1) rows: F(Q_hat) = Q_hat (I + Q_hat)^{-1} at a coupled Q_hat (the tensor
    Gauss-Hermite rule is exact there: f_in is linear in B) and at a diagonal one (the
    rows' adaptive quadrature, 1e-12)."""
    prior = ProductPrior([S.gaussian(), S.gaussian()])
    F = sp.lambdify(sp.Symbol("qhat", nonnegative=True), gaussian_overlap_map())  # derived, scalar
    for Q in (A_COUPLED, np.diag([0.5, 3.0])):
        ev, U = np.linalg.eigh(Q)                  # the matrix function of the scalar map
        np.testing.assert_allclose(prior.overlap_map(Q), (U * F(ev)) @ U.T, atol=1e-11)
    # psi = (tr Q_hat - log det(I + Q_hat)) / 2 for N(0, I)
    Q = A_COUPLED
    ref = 0.5 * (np.trace(Q) - math.log(np.linalg.det(np.eye(2) + Q)))
    assert prior.psi(Q) == pytest.approx(ref, abs=1e-11)


def test_coupled_overlap_map_is_continuous_with_the_diagonal_one(mixed):
    """Off-diagonal 1e-9: the Gauss-Hermite path must agree with the exact decoupled one
    to its tolerance 1e-10 plus the O(1e-9) coupling."""
    D = np.diag([2.0, 0.8])
    near = D + 1e-9 * np.array([[0, 1], [1, 0]])
    np.testing.assert_allclose(mixed.overlap_map(near), mixed.overlap_map(D), atol=5e-9)
    assert mixed.psi(near) == pytest.approx(mixed.psi(D), abs=5e-9)


def test_bad_input_is_refused_by_name(mixed):
    laplace = S.SeparablePrior("laplace2", [S.density_component(
        sp.exp(-sp.Abs(sp.Symbol("w", real=True))) / 2)])
    dens = ProductPrior([laplace, S.rademacher()])
    dens.log_partition_terms(np.diag([1.0, 2.0]), B_FIELDS)   # decoupled: fine
    with pytest.raises(ParameterError, match="density component"):
        dens.log_partition_terms(A_COUPLED, B_FIELDS)
    with pytest.raises(ParameterError, match="P = 2"):
        mixed.log_partition_terms(np.eye(3), np.zeros((3, 2)))
    with pytest.raises(ParameterError, match="SeparablePrior"):
        ProductPrior([S.rademacher(), "gaussian"])
