"""Randomized quasi-Monte Carlo design of the SE's frozen samples (glm/se.py docstring;
core.quadrature.scrambled_sobol_normals): unbiased, an honest standard error from the
spread over scramblings, and a lower variance than plain Monte Carlo."""
import math
import warnings

import numpy as np
import pytest

from symtheory.core.quadrature import scrambled_sobol_normals
from symtheory.core.validate import ParameterError
from symtheory.glm.se.sampling import DEFAULT_SAMPLES, DEFAULT_SCRAMBLES, tail_multiple
from symtheory.glm.se.state_evolution import StateEvolution
from symtheory.smi import outer_product


def test_scrambled_sobol_normals_reproducible_independent_and_exact_on_a_smooth_mean():
    x = scrambled_sobol_normals(3, 1000, 8, seed=5)
    assert x.shape == (8, 1000, 3) and np.all(np.isfinite(x))
    assert np.array_equal(x, scrambled_sobol_normals(3, 1000, 8, seed=5))
    assert not np.allclose(x[0], x[1])                       # independent scramblings
    # a prefix of n points is the same whatever n was asked for
    assert np.array_equal(scrambled_sobol_normals(3, 100, 8, seed=5), x[:, :100])
    # E exp(x1/2 + x2/3) = exp(1/8 + 1/18) exactly; the spread of the 8 scrambling means
    # is the error (Student t, 7 degrees of freedom: 99.9% quantile 5.41)
    est = np.exp(x[..., 0] / 2 + x[..., 1] / 3).mean(axis=1)
    exact = math.exp(1 / 8 + 1 / 18)
    se = est.std(ddof=1) / math.sqrt(len(est))
    assert abs(est.mean() - exact) < 5.41 * se
    # and far below the plain Monte-Carlo error at the same 8000 points (the QMC gain)
    mc_se = np.exp(x[..., 0] / 2 + x[..., 1] / 3).std() / math.sqrt(x[..., 0].size)
    assert se < mc_se / 5
    with pytest.raises(ParameterError, match="scrambles"):
        scrambled_sobol_normals(3, 10, 0, seed=1)
    with pytest.raises(ParameterError, match="dim must be an integer"):
        scrambled_sobol_normals(2.5, 10, 4, seed=1)          # not truncated to 2
    with pytest.raises(ParameterError, match="dim must be <= 21201"):
        scrambled_sobol_normals(30000, 2, 4, seed=1)


def _phase_retrieval_se(samples, seed, sampling, scrambles=16):
    return StateEvolution(outer_product(1), 1.0, samples=samples, seed=seed, sampling=sampling,
                          scrambles=scrambles)


def test_sample_mean_stderr_is_the_spread_of_the_scrambling_means():
    se = _phase_retrieval_se(64, 0, "rqmc", scrambles=4)
    v = np.arange(64.0) ** 2
    mean, err = se.sample_mean_stderr(v)
    groups = np.array([v[b::4].mean() for b in range(4)])     # sample s: scrambling s % 4
    assert mean == pytest.approx(v.mean()) and err == pytest.approx(groups.std(ddof=1) / 2)
    # a prefix too short for two points per scrambling: per-sample spread
    assert se.sample_mean_stderr(v[:7])[1] == pytest.approx(v[:7].std(ddof=1) / math.sqrt(7))
    mc = _phase_retrieval_se(64, 0, "monte-carlo")
    assert mc.sample_mean_stderr(v)[1] == pytest.approx(v.std(ddof=1) / 8)
    # the warm-up prefix holds every scrambling: the first 4 samples are point 0 of each
    x = scrambled_sobol_normals(2, 16, 4, seed=np.random.SeedSequence([0, 1]))
    assert np.allclose(se.xi[:4, 0, 0], x[:, 0, 0]) and np.allclose(se.eta[:4, 0, 0], x[:, 0, 1])


@pytest.mark.parametrize("kw, match", [({"sampling": "sobol"}, "sampling"),
                                       ({"scrambles": 3}, "scrambles"),
                                       ({"scrambles": True}, "scrambles"),
                                       ({"seed": np.random.default_rng(1)}, "seed must be"),
                                       ({"seed": -1}, "seed must be")])
def test_bad_sampling_options_are_refused_by_name(kw, match):
    with pytest.raises(ParameterError, match=match):
        StateEvolution(outer_product(1), 1.0, samples=64, **kw)


def test_default_samples_are_a_power_of_two_per_scrambling():
    per = DEFAULT_SAMPLES // DEFAULT_SCRAMBLES
    assert DEFAULT_SAMPLES % DEFAULT_SCRAMBLES == 0 and per & (per - 1) == 0
    assert StateEvolution(outer_product(1), 1.0).samples == DEFAULT_SAMPLES


@pytest.mark.parametrize("sigmas", [2.0, 3.0, 4.0])
@pytest.mark.parametrize("scrambles", [4, 16, 64])
def test_tail_multiple_matches_the_normal_tail(sigmas, scrambles):
    """The t-scaled multiple has the normal tail probability: checked against mpmath's
    regularized incomplete beta (P(|T_nu| > x) = I_{nu/(nu+x^2)}(nu/2, 1/2)) and the
    normal's erfc -- a path independent of scipy's t.isf."""
    import mpmath as mp

    x = tail_multiple(sigmas, scrambles)
    nu = scrambles - 1
    p_t = mp.betainc(nu / 2, 0.5, 0, nu / (nu + x * x), regularized=True)
    p_n = mp.erfc(sigmas / mp.sqrt(2))
    assert float(p_t / p_n) == pytest.approx(1.0, rel=1e-8)
    assert x > sigmas                       # a 15-dof estimate has heavier tails
    assert tail_multiple(sigmas, None) == sigmas
    with pytest.raises(ValueError, match="scrambles"):
        tail_multiple(sigmas, 1)


@pytest.mark.parametrize("sampling, projected", [("rqmc", True), ("monte-carlo", False)])
def test_psd_projection_allows_the_design_tail(monkeypatch, sampling, projected):
    """A Q_hat eigenvalue 5 standard errors below 0 is inside the 4-sigma tail of a
    16-scrambling estimate (5.48) but outside that of a Monte-Carlo one (4)."""
    se = StateEvolution(outer_product(1), 1.0, samples=64, sampling=sampling)
    monkeypatch.setattr(se, "qhat", lambda Q: (np.array([[-5e-3]]), np.array([[1e-3]]), 0.0))
    if projected:
        assert se.psd_qhat(np.array([[0.3]]))[0, 0] == 0.0 and se.psd_projections == 1
    else:
        with pytest.raises(FloatingPointError, match="4-sigma tail"):
            se.psd_qhat(np.array([[0.3]]))


def test_rqmc_standard_error_is_honest_and_below_monte_carlo():
    """48 independent seeds of Q_hat at a fixed Q (phase retrieval, 1024 samples).  The
    z-scores against the stated standard error are Student t with 15 degrees of freedom
    (variance 15/13); over 48 draws their sample variance has a standard deviation ~0.27,
    so [0.45, 2.2] is >= 2.6 of those either side -- and the per-sample spread, which
    overstates an RQMC error ~2x (measured), would give ~0.3 and fail.  The RQMC
    variance was 3.1x below plain Monte Carlo's on 30 seeds; the F(47, 47) 1% quantile
    ~0.5 makes 1.5 the bound."""
    Q = np.array([[0.5]])
    spread, zvar = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for sampling in ("rqmc", "monte-carlo"):
            vals, errs = [], []
            for seed in range(48):
                se = _phase_retrieval_se(1024, seed, sampling)
                se.estimate_channel_error = False
                Qh, err, _ = se.qhat(Q)
                vals.append(Qh[0, 0])
                errs.append(err[0, 0])
            vals, errs = np.array(vals), np.array(errs)
            spread[sampling] = vals.var(ddof=1)
            zvar[sampling] = np.var((vals - vals.mean()) / errs, ddof=1)
    assert 0.45 < zvar["rqmc"] < 2.2, zvar
    assert 0.45 < zvar["monte-carlo"] < 2.2, zvar
    assert spread["monte-carlo"] > 1.5 * spread["rqmc"], spread
