"""Scalar GLM channels: declaration, stable forms, identity checks (glm/channels.py,
glm/checks.py, core/stable.py).

Every reference here is computed independently of the channel code: mpmath quadrature
of the likelihood at 20+ digits, mpmath's own normal CDF, or Monte Carlo with its
standard error.
"""
import math
import time
import warnings

import mpmath
import numpy as np
import pytest
import sympy as sp
from conftest import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st
from sympy.printing.pycode import MpmathPrinter

from symtheory.core import special
from symtheory.core.codegen import Kernel
from symtheory.core.stable import stabilize
from symtheory.core.validate import ParameterError
from symtheory.glm.checks import scalar as checks
from symtheory.glm.factors.scalar import (Channel,
    ScalarChannel,
    gaussian_convolution_channel,
    gaussian_noise_channel,
    likelihood_channel,
    sign_channel,
    threshold_channel)
from symtheory.glm.checks.scalar import ChannelCheckError


def declare_probit():
    """The acceptance declaration: y = sign(z + sqrt(delta) xi), no numerics of our own."""
    y, z = sp.symbols("y z", real=True)
    delta = sp.Symbol("delta", positive=True)
    return likelihood_channel("probit", sp.Heaviside(y * z), y, z, (delta,), y_levels=(-1, 1),
                              noise_variance=delta)


@pytest.fixture(scope="module")
def probit():
    return declare_probit()


@pytest.fixture(scope="module")
def gaussian():
    return gaussian_noise_channel()


# ---------------------------------------------------------------- independent references
def probit_reference(y, omega, V, delta, dps=20):
    """``g_out, dg_out`` of ``P(y|z) = Phi(y z/sqrt(delta))``, ``z ~ N(omega, V)``, by
    mpmath quadrature of the likelihood and its z-derivatives (integration by parts:
    ``d_omega Z = int N P'``, ``d_omega^2 Z = int N P''``), each integrand scaled by its own
    peak (mpmath's error control is absolute).  This is the *likelihood* form of the
    probit, not the noisy-sign declaration the channel integrates.  The quadrature error
    estimates are ~1e-19 relative at 20 digits; the cancellation in ``dg = Z''/Z - g^2``
    is at most ~x^2 ~ 1e5 here, leaving >= 14 correct digits."""
    with mpmath.workdps(dps):
        y, omega, V, delta = (mpmath.mpf(v) for v in (y, omega, V, delta))
        s = mpmath.sqrt(delta)
        log_gauss = lambda z: -(z - omega) ** 2 / (2 * V)  # noqa: E731
        dlog = lambda z: -(z - omega) / V + y * mpmath.npdf(y * z / s) / (s * mpmath.ncdf(y * z / s))  # noqa: E731
        step = mpmath.mpf(1)  # log N P is concave: bracket its mode on the y side of omega
        while dlog(omega + y * step) * y > 0:
            step *= 2
        # the mode only places breakpoints and the scale: no need to verify its digits
        mode = mpmath.findroot(dlog, (omega, omega + y * step), solver="anderson", verify=False)
        c2 = omega * delta / (V + delta)  # where N(z; omega, V) phi(z/s) peaks
        w1, w2 = mpmath.sqrt(V), mpmath.sqrt(V * delta / (V + delta))
        around = lambda c, w: [-mpmath.inf] + [c + k * w for k in (-30, -6, 0, 6, 30)] + [mpmath.inf]  # noqa: E731
        L1 = log_gauss(mode) + mpmath.log(mpmath.ncdf(y * mode / s))
        L2 = log_gauss(c2) + mpmath.log(mpmath.npdf(y * c2 / s))
        Z = mpmath.quad(lambda z: mpmath.exp(log_gauss(z) - L1) * mpmath.ncdf(y * z / s),
                        around(mode, w1))
        phi = lambda z: mpmath.exp(log_gauss(z) + mpmath.log(mpmath.npdf(y * z / s)) - L2)  # noqa: E731
        d1 = mpmath.quad(phi, around(c2, w2))
        d2 = mpmath.quad(lambda z: z * phi(z), around(c2, w2))
        r = mpmath.exp(L2 - L1) / Z
        g = d1 * r * y / s
        return g, d2 * r * (-y / s) ** 3 - g * g


def close(got, ref, rtol, atol=0.0):
    """Relative agreement (plus ``atol``); a reference below 1e-290 (not representable to
    rtol in float64: subnormals) only asks the float to have underflowed as well."""
    if abs(ref) < mpmath.mpf("1e-290") and atol == 0.0:
        return abs(got) < 1e-280
    return abs(got - ref) <= rtol * abs(ref) + atol


# ---------------------------------------------------------------- acceptance: probit
# Tolerance 1e-10 relative: the kernel evaluates LogNdtr, InvMills and InvMillsPlusX
# (each within 16 eps (1 + cond) of mpmath, tests/core/test_special.py) of x = y omega/s; the
# rounding of x is amplified by the condition number of g, dg in x, at most x^2 ~ 1.5e3
# where the values are representable (x > 38.6 underflows) -- below 1e-12 in all.
# The reference is good to ~1e-14.  1e-10 leaves a margin of ~100.
PROBIT_RTOL = 1e-10


def _probit_property(ch, y, omega, V, delta):
    g, dg = ch.gout(np.array([y]), np.array([omega]), V, delta)
    g_ref, dg_ref = probit_reference(y, omega, V, delta)
    assert close(g[0], g_ref, PROBIT_RTOL), (g[0], g_ref)
    assert close(dg[0], dg_ref, PROBIT_RTOL), (dg[0], dg_ref)


probit_points = dict(y=st.sampled_from([-1.0, 1.0]), omega=st.floats(-40, 40),
                     V=st.floats(0.01, 3.0), delta=st.floats(0.01, 3.0))


@given(**probit_points)
def test_probit_matches_mpmath_quadrature_of_the_likelihood(probit, y, omega, V, delta):
    _probit_property(probit, y, omega, V, delta)


@pytest.mark.slow
@settings(THOROUGH)
@given(**probit_points)
def test_probit_matches_mpmath_quadrature_thorough(probit, y, omega, V, delta):
    _probit_property(probit, y, omega, V, delta)


@pytest.mark.parametrize("omega", [-40.0, -20.0, -5.0, 5.0, 20.0, 40.0])
def test_probit_tails(probit, omega):
    """The user's failing points (omega = -5, -20, -40: exact 5.19, 20.05, 40.02 at V = 1,
    delta = 0) and their mirror images, at a small delta."""
    for y in (-1.0, 1.0):
        _probit_property(probit, y, omega, 1.0, 1e-2)
    g, _ = probit.gout([1.0], [omega], 1.0, 1e-12)
    if omega < 0:
        assert abs(g[0] - {-40.0: 40.02, -20.0: 20.05, -5.0: 5.19}[omega]) < 0.01


def test_probit_kernel_is_stable_by_construction(probit):
    """log Phi, its derivative and second derivative are the stable functions (no erfc,
    no exp of a square, no difference x + M in the printed kernel)."""
    src = probit.kernel.source
    assert "log_ndtr(" in src and "inv_mills(" in src and "inv_mills_plus_x(" in src
    assert "erfc" not in src and "math.exp" not in src
    assert all(r.passed for r in probit.checks)
    assert probit.accuracy < 1e-11
    assert isinstance(probit, Channel)


# ---------------------------------------------------------------- refusal of a wrong form
def test_broken_heaviside_declaration_is_refused():
    """SymPy's whole-line integral of N(z) Heaviside(y z) with conds='none' is 1 for both
    signs of y; the declaration that trusts it is refused by the Z_out identity."""
    y, z = sp.symbols("y z", real=True)
    delta = sp.Symbol("delta", positive=True)
    with pytest.raises(ChannelCheckError, match=r"Z_out check failed: SymPy's integral differs "
                       r"from quadrature .* at y=.*, omega=.*, V=.*, delta="):
        likelihood_channel("probit_wholeline", sp.Heaviside(y * z), y, z, (delta,),
                           y_levels=(-1, 1), noise_variance=delta, split_discontinuities=False)


def test_wrong_typed_log_partition_is_refused():
    """A log Z_out typed by hand without its y-dependence is not normalized over y."""
    y, omega = sp.symbols("y omega", real=True)
    V, delta = sp.symbols("V delta", positive=True)
    wrong = sp.log(1 + sp.erf(omega / sp.sqrt(2 * (V + delta)))) - sp.log(2)
    with pytest.raises(ChannelCheckError, match="normalization check failed"):
        ScalarChannel("probit_no_y", wrong, y, omega, V, (delta,), y_levels=(-1, 1))


def test_typed_log_partition_is_stabilized_and_checked(probit):
    """The same probit typed as log((1 + erf(...))/2): rewritten into LogNdtr, its g_out
    checked against mpmath.diff (no likelihood given), equal to the derived channel."""
    y, omega = sp.symbols("y omega", real=True)
    V, delta = sp.symbols("V delta", positive=True)
    typed = sp.log(1 + sp.erf(y * omega / sp.sqrt(2 * (V + delta)))) - sp.log(2)
    ch = ScalarChannel("probit_typed", typed, y, omega, V, (delta,), y_levels=(-1, 1))
    assert ch.log_Z.has(special.LogNdtr) and not ch.log_Z.has(sp.erf, sp.erfc)
    assert {r.identity for r in ch.checks} == {"g_out", "normalization", "Nishimori", "tower"}
    ys = np.array([1.0, -1.0, 1.0, -1.0])
    om = np.array([-40.0, -40.0, 3.0, 0.1])
    for a, b in zip(ch.gout(ys, om, 0.7, 0.2), probit.gout(ys, om, 0.7, 0.2)):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-300)


# ---------------------------------------------------------------- Gaussian noise channel
def test_gaussian_noise_channel_checks_at_declaration(gaussian):
    assert {r.identity for r in gaussian.checks} == {"Z_out", "g_out", "normalization",
                                                     "Nishimori", "tower"}
    assert all(r.passed and r.discrepancy <= r.tolerance for r in gaussian.checks)
    assert gaussian.accuracy < 1e-12
    assert gaussian_convolution_channel is likelihood_channel


def test_gaussian_noise_channel_exact_at_small_V(gaussian):
    """g = (y - omega)/(V + delta), dg = -1/(V + delta) to rounding, also for V << delta
    (SymPy's raw integral divides by V; the derivation cancels it)."""
    y = np.array([0.3, -2.0, 5.0])
    om = np.array([0.1, 1.0, -3.0])
    for V in (1e-12, 1e-3, 1.0):
        g, dg = gaussian.gout(y, om, V, 0.5)
        np.testing.assert_allclose(g, (y - om) / (V + 0.5), rtol=4e-16)
        np.testing.assert_allclose(dg, -1 / (V + 0.5), rtol=4e-16)
    assert "/V" not in gaussian.kernel.source.replace(" ", "")


def test_redeclaration_is_cached_and_fast(gaussian):
    """The declaration checks are cached by the kernel's and likelihood's hash."""
    t0 = time.perf_counter()
    again = gaussian_noise_channel()
    seconds = time.perf_counter() - t0
    assert again.checks_cached and again.checks == gaussian.checks
    assert again.check_seconds < 0.5 and seconds < 5.0


# ---------------------------------------------------------------- threshold channels
def interval_log_probability(lo, hi, omega, s):
    """log P(lo < u <= hi), u ~ N(omega, s^2), by mpmath's normal CDF (tails kept apart)."""
    a = (mpmath.mpf(lo) - omega) / s if lo is not None else -mpmath.inf
    b = (mpmath.mpf(hi) - omega) / s if hi is not None else mpmath.inf
    if a > 0:
        return mpmath.log(mpmath.ncdf(-a) - mpmath.ncdf(-b))
    return mpmath.log(mpmath.ncdf(b) - mpmath.ncdf(a))


@pytest.fixture(scope="module")
def ternary():
    with warnings.catch_warnings():
        warnings.simplefilter("error", checks.AccuracyWarning)
        return threshold_channel("ternary", [-1, 1], [-1, 0, 1])


# Tolerance: for the finite interval dg_out = d^2/domega^2 log(Phi(b) - Phi(a)) is printed
# from the derivatives of LogNdtrDiff, phi(end)/(Phi(b) - Phi(a)) = exp(-end^2/2 - L):
# each factor carries ~eps x^2 from the exponent, and the terms of dg cancel by ~x^2;
# with |x| <= 12/sqrt(0.1) ~ 38 here, eps x^4 ~ 5e-10.  1e-8 leaves a margin of 20.
# For the middle level g and dg are differences of two O(1/s), O(1/s^2) terms (zero at
# omega = 0): their rounding, ~eps/s and ~eps/s^2, is an absolute floor (1e-14 allowed).
TERNARY_RTOL = 1e-8
TERNARY_ATOL = 1e-14


def _ternary_property(ch, level, omega, V, delta):
    lo, hi = {-1.0: (None, -1), 0.0: (-1, 1), 1.0: (1, None)}[level]
    logz, g, dg = ch._evaluate(np.array([level]), np.array([omega]), V, [delta])[0]
    with mpmath.workdps(30):
        s = mpmath.sqrt(mpmath.mpf(V) + delta)
        f = lambda w: interval_log_probability(lo, hi, w, s)  # noqa: E731
        ref = f(mpmath.mpf(omega))
        g_ref = mpmath.diff(f, mpmath.mpf(omega), 1)
        dg_ref = mpmath.diff(f, mpmath.mpf(omega), 2)
    assert abs(logz - ref) <= 1e-12 * max(1.0, abs(float(ref)))
    s = math.sqrt(V + delta)
    assert close(g, g_ref, TERNARY_RTOL, TERNARY_ATOL / s), (g, g_ref)
    assert close(dg, dg_ref, TERNARY_RTOL, TERNARY_ATOL / s**2), (dg, dg_ref)


ternary_points = dict(level=st.sampled_from([-1.0, 0.0, 1.0]), omega=st.floats(-12, 12),
                      V=st.floats(0.05, 2.0), delta=st.floats(0.05, 2.0))


@given(**ternary_points)
def test_threshold_channel_matches_mpmath(ternary, level, omega, V, delta):
    _ternary_property(ternary, level, omega, V, delta)


@pytest.mark.slow
@settings(THOROUGH)
@given(**ternary_points)
def test_threshold_channel_matches_mpmath_thorough(ternary, level, omega, V, delta):
    _ternary_property(ternary, level, omega, V, delta)


def test_threshold_channel_form(ternary):
    assert ternary.log_Z.has(special.LogNdtr, special.LogNdtrDiff)
    assert all(r.passed for r in ternary.checks)
    with pytest.raises(ParameterError, match="increasing"):
        threshold_channel("bad", [1, -1], [0, 1, 2])
    with pytest.raises(ParameterError, match="levels"):
        threshold_channel("bad", [0], [0, 1, 2])


# ---------------------------------------------------------------- sampling
def test_sign_channel_samples_its_likelihood():
    """P(y = 1 | z) = Phi(z/sqrt(delta)): frequencies within 5 binomial standard errors."""
    ch = sign_channel()
    rng = np.random.default_rng(1)
    n = 40000
    for z0, delta in ((0.3, 0.5), (-1.0, 2.0), (2.0, 0.1)):
        y = ch.sample(np.full(n, z0), rng, delta)
        assert set(np.unique(y)) <= {-1.0, 1.0}
        p = float(mpmath.ncdf(z0 / math.sqrt(delta)))
        assert abs(np.mean(y == 1.0) - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_gaussian_channel_samples():
    ch = gaussian_noise_channel()
    rng = np.random.default_rng(2)
    y = ch.sample(np.full(50000, 1.5), rng, 0.25)
    se = math.sqrt(0.25 / 50000)
    assert abs(y.mean() - 1.5) < 5 * se
    assert abs(y.var() - 0.25) < 5 * 0.25 * math.sqrt(2 / 50000)


# ---------------------------------------------------------------- identities at more points
@pytest.mark.parametrize("name", ["probit", "gaussian"])
def test_identities_at_more_points(name, probit, gaussian):
    ch = {"probit": probit, "gaussian": gaussian}[name]
    results = checks.run_checks(ch, n_points=8, seed=123)
    for r in results:
        assert r.passed, r.message()
        assert r.discrepancy < 1e-9, r.message()  # the quadratures reach ~1e-12


def test_checks_fail_on_a_perturbed_kernel(gaussian):
    """Each identity can fail: a channel whose g_out is off by 1e-3 fails the g_out,
    Nishimori and tower checks (the log-partition itself is right)."""
    y, omega = sp.symbols("y omega", real=True)
    V, delta = sp.symbols("V delta", positive=True)
    ch = ScalarChannel("gauss_perturbed", gaussian.log_Z, y, omega, V, (delta,), check=False,
                       likelihood=gaussian.likelihood)
    bad = gaussian.g_out * (1 + sp.Rational(1, 1000))
    ch.kernel = Kernel("channel_gauss_perturbed", ch.kernel.args, [ch.log_Z, bad, ch.dg_out],
                       vector_args=(y, omega))
    results = {r.identity: r for r in checks.run_checks(ch)}
    assert results["Z_out"].passed and results["normalization"].passed
    for name in ("g_out", "Nishimori", "tower"):
        assert not results[name].passed, results[name].message()


def test_prior_overlap_check():
    from symtheory.glm.factors.gaussian_prior import GaussianPrior

    prior = GaussianPrior()
    res = checks.check_prior_overlap(prior, qhats=(0.2, 4.0))
    assert res.passed and res.discrepancy < 1e-9, res.message()

    class Scaled(GaussianPrior):  # an overlap map 1e-5 too large
        def overlap_map(self, Qhat):
            return (1 + 1e-5) * super().overlap_map(Qhat)

    bad = checks.check_prior_overlap(Scaled(), qhats=(1.0,))
    assert not bad.passed and "prior overlap" in bad.message()


# ---------------------------------------------------------------- validation
def test_gout_rejects_bad_input(probit):
    with pytest.raises(ParameterError, match="V must be"):
        probit.gout([1.0], [0.0], 0.0, 0.5)
    with pytest.raises(ParameterError, match="delta must be"):
        probit.gout([1.0], [0.0], 1.0, -0.5)
    with pytest.raises(ParameterError, match=r"y must take values in \(-1.0, 1.0\)"):
        probit.gout([0.5], [0.0], 1.0, 0.5)
    with pytest.raises(TypeError, match="parameters"):
        probit.gout([1.0], [0.0], 1.0)


# ---------------------------------------------------------------- stable rewrite rules
x = sp.Symbol("x", real=True)
REWRITES = [
    (sp.erfc(-x), special.LogNdtr),
    (2 - sp.erfc(x), special.LogNdtr),
    (1 + sp.erf(x), special.LogNdtr),
    (sp.log(sp.erfc(x)), special.LogNdtr),
    (sp.log(1 + sp.erf(x)), special.LogNdtr),
    (sp.exp(x**2) * sp.erfc(x), special.Erfcx),
    (sp.exp(-x**2) / sp.erfc(x), special.Erfcx),
    (sp.log(1 + sp.exp(x)), special.Log1pExp),
    # two probabilities both below 1e-308 at |x| = 30
    (sp.log(2 * sp.exp(-x**2) + 3 * sp.exp(-2 * x**2 + x)), special.Log1pExp),
    (1 / (1 + sp.exp(-x)), special.Expit),
    # a Laplace prior's log-partition: exp(900) erfc(-30) overflows at x = -30
    (sp.log(sp.exp(x**2) * sp.erfc(x) + sp.exp((x - 1)**2) * sp.erfc(-x + 1)), special.LogErfcx),
    (sp.log(sp.erf(x + 1) - sp.erf(x)), special.LogNdtrDiff),
]


def _mp_eval(expr, value, dps=50):
    f = sp.lambdify([x], expr, modules=[special.MPMATH_NAMESPACE, "mpmath"],
                    printer=MpmathPrinter({"fully_qualified_modules": False}))
    with mpmath.workdps(dps):
        return f(mpmath.mpf(value))


@pytest.mark.parametrize("expr,target", REWRITES)
def test_stabilize_is_an_identity_and_uses_the_stable_function(expr, target):
    out = stabilize(expr)
    assert out.has(target) and not out.has(sp.erf, sp.erfc), out
    for x0 in (-3.7, -0.4, 0.0, 0.9, 2.5):
        a, b = _mp_eval(expr, x0), _mp_eval(out, x0)
        assert abs(a - b) <= mpmath.mpf(10) ** -40 * (1 + abs(a)), (x0, a, b)


@pytest.mark.parametrize("expr,target", REWRITES)
def test_stabilized_kernel_is_accurate_in_the_tails(expr, target):
    """float64 kernel of the rewritten form vs mpmath of the original, at +-30 where the
    original underflows or overflows (log(erfc(30)) = log(0)).  Tolerance 1e-12: the
    stable functions are within 16 eps (1 + cond) and cond <= 2 x^2 = 1800 here."""
    k = Kernel(f"test_stable_{REWRITES.index((expr, target))}", [x], [stabilize(expr)])
    for x0 in (-30.0, -12.0, 12.0, 30.0):
        ref = _mp_eval(expr, x0)
        if not mpmath.isfinite(ref) or abs(ref) > 1e300 or abs(ref) < 1e-290:
            continue  # not representable in float64
        assert abs(k(x0)[0] - ref) <= 1e-12 * abs(ref), (x0, k(x0)[0], ref)


def test_log1pexp_chain_rule_is_rewritten_without_cancellation():
    """d/dx [X + Log1pExp(Y - X)] = X' + (Y' - X') Expit(Y - X) loses every digit of a
    small Y' when Expit = 1 in float64; the rewrite X' Expit(X - Y) + Y' Expit(Y - X)
    keeps them.  An identity at 50 digits, and at x = 30 (X' = -27, Y' = -6e-29,
    Expit(Y - X) = 1 - 1e-163) the float64 kernel has the true -6e-29 (naive: 0)."""
    X, Y = -(x - 3) ** 2 / 2, -x ** 2 / sp.Integer(10) ** 30 + 10
    derivative = sp.diff(X + special.Log1pExp(Y - X), x)
    out = stabilize(derivative)
    assert out != derivative and out.has(special.Expit)
    for x0 in (-3.7, 0.0, 0.9, 2.5, 9.0):
        a, b = _mp_eval(derivative, x0), _mp_eval(out, x0)
        assert abs(a - b) <= mpmath.mpf(10) ** -40 * (1 + abs(a)), (x0, a, b)
    k = Kernel("test_stable_expit_complement", [x], [out])
    for x0 in (30.0, -20.0, 3.0):
        ref = _mp_eval(derivative, x0, dps=400)
        assert abs(k(x0)[0] - ref) <= 1e-14 * abs(ref), (x0, k(x0)[0], ref)


@pytest.mark.parametrize("y_out", [1.0, -1.0])
@pytest.mark.parametrize("omega", [-6.0, -3.32426, -1.0, 0.3, 3.32426, 6.0])
def test_symmetric_door_moments_in_the_tails(door, y_out, omega):
    """g_out and its derivative of the symmetric door against mpmath derivatives of
    log Z_out at 400 digits, where y = +1 is a 1e-23 difference of terms of 14 (found
    by the declaration check at omega = 3.32426, V = 0.0755894: g_out was 0).  Tolerances:
    g_out 1e-13 (a few ulps times the stable functions' condition); its derivative 1e-10
    (for y = -1 at |omega| = 6 it is -13.2 from terms g_out^2 ~ 5e3, cancellation 4e2)."""
    ch, (K,) = door
    V = 0.0755894
    s = mpmath.sqrt(mpmath.mpf(V))

    def log_z(w):
        a, b = mpmath.ncdf((w - K) / s), mpmath.ncdf((-w - K) / s)
        if y_out == 1:
            return mpmath.log(a + b)
        return mpmath.log(mpmath.ncdf((K - w) / s) - mpmath.ncdf((-K - w) / s))

    with mpmath.workdps(400):
        g, dg = mpmath.diff(log_z, omega), mpmath.diff(log_z, omega, 2)
    m = ch.moments(y_out, omega, V, K)
    assert abs(m.mean_shift / V - g) <= 1e-13 * abs(g), (m.mean_shift / V, g)
    assert abs(m.cov_shift / V ** 2 - dg) <= 1e-10 * abs(dg), (m.cov_shift / V ** 2, dg)


def test_declaration_seed_depends_on_the_declaration_only(probit, monkeypatch):
    """The check points do not move with an edit of the package's source (the cached
    verdict's key does): a verdict must not flip with an unrelated change."""
    seed, key = checks._declaration_seed(probit), checks._declaration_key(probit)
    monkeypatch.setattr(checks, "_source_digest", lambda ch: "an edited package")
    assert checks._declaration_seed(probit) == seed
    assert checks._declaration_key(probit) != key


def test_stabilize_leaves_other_expressions_alone():
    e = x**2 + sp.sin(x)
    assert stabilize(e) == e


def test_accuracy_measure_confirms_a_cancelling_reference_at_twice_the_digits():
    """g_out = 0 at a symmetric point: the 30-digit reference is rounding (5e-32 of O(0.05)
    terms); the float 0 is exact, a float 1e-3 is wrong, and a plain error stays relative."""
    from symtheory.glm.checks.scalar import _float_error
    r30, r60 = mpmath.mpf("-4.93e-32"), mpmath.mpf(0)
    assert _float_error(0.0, r30, False, lambda: r60, 30) == 0.0
    assert _float_error(1e-3, r30, False, lambda: r60, 30) > 1e-3
    exact = mpmath.mpf("0.25")
    assert _float_error(0.25 * (1 + 1e-9), exact, False, lambda: exact, 30) == \
        pytest.approx(1e-9, rel=1e-6)
