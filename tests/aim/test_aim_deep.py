"""Deep AIM (aim.md 1.3, 3.7): declaration, data, layer-wise prior, block GAMP, SE vs GAMP.

Independent paths: the SymPy-declared link against a literal numpy transcription of
aim.md 1.3 (``aim.data.deep_outputs``) and of the u-space map of aim.md 2; the layer-wise
prior map against the single-layer denoising MMSE; the block GAMP engine against two
separate single-block runs (a separable problem: blocks must not interact); the state
evolution against a finite-size GAMP simulation (slow).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symtheory.aim import data as aim_data
from symtheory.core.validate import ParameterError


def _u_to_h(u, T):
    """aim.md 2: u_ab = h_ab (a < b), u_aa = h_aa/sqrt(2), row-major a <= b."""
    h = np.zeros(u.shape[:-1] + (T, T))
    k = 0
    for a in range(T):
        for b in range(a, T):
            v = u[..., k] * (math.sqrt(2) if a == b else 1.0)
            h[..., a, b] = h[..., b, a] = v
            k += 1
    return h


@pytest.fixture(scope="module")
def model():
    from symtheory.aim.deep import deep_aim_model
    return deep_aim_model(2, 2, skip=0.7, inv_temp=1.3)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(0.1, 3.0))
def test_declared_link_is_the_literal_formula(model, seed, scale):
    """The declared model's g(Z) equals aim.md 1.3 written out in numpy (to rounding)."""
    rng = np.random.default_rng(seed)
    Z = scale * rng.standard_normal((5, 2, 3))
    h = np.stack([_u_to_h(Z[:, l, :], 2) for l in range(2)])
    want = aim_data.deep_outputs(h, 0.7, 1.3)
    got = model.g(Z).reshape(5, 2, 2)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-14)


def test_deep_data_follow_the_model():
    """Indices are the u-space images of each layer's S (IndexOperator.forward, aim.md 2),
    outputs the literal formula plus noise of the stated variance (Monte Carlo, 5 sigma)."""
    from symtheory.aim.gamp import IndexOperator

    D = aim_data.generate_deep(12, 2.0, rho=0.5, depth=2, seq_len=2, skip=1.0, noise=0.04,
                               seed=3)
    op = IndexOperator(D.X)
    for l in range(2):
        assert np.allclose(_u_to_h(op.forward(D.S[l]), 2), D.h[l], atol=1e-12)
    resid = D.y - aim_data.deep_outputs(D.h, 1.0, 1.0)
    var = resid.var()
    assert abs(var - 0.04) < 5 * 0.04 * math.sqrt(2 / resid.size)
    again = aim_data.generate_deep(12, 2.0, rho=0.5, depth=2, seq_len=2, skip=1.0, noise=0.04,
                                   seed=3)
    assert np.array_equal(again.y, D.y)


@pytest.mark.parametrize("kwargs, name", [
    (dict(depth=1), "depth"), (dict(noise=0.0), "noise"), (dict(skip=-1.0), "skip"),
    (dict(seq_len=1), "seq_len")])
def test_deep_data_reject_bad_input(kwargs, name):
    args = dict(d=10, alpha=1.0, rho=0.5, depth=2, seq_len=2, skip=1.0, noise=0.1)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=name):
        aim_data.generate_deep(args.pop("d"), args.pop("alpha"), **args)


def test_layerwise_prior_is_the_single_layer_map_per_layer():
    """q_l = Q0 - mmse(1/(2 Q_hat_ll)) per layer (aim.md 3.3, 3.7), off-diagonal the known
    m_l m_m; the small-signal expansion joins the spectral map at SMALL_SNR: its
    O(q_hat^2) remainder there is ~1e-16, and the spectral mmse is computed to relative
    accuracy 1e-11 (mmse ~ 1 there; measured jump 5e-12), hence the bound 2e-11."""
    from symtheory.aim.deep import layer_prior
    from symtheory.aim.denoising import mmse_denoising

    prior = layer_prior(2, 0.5)
    assert np.allclose(prior.rho(2), [[1.5, 0.5], [0.5, 1.5]])
    assert np.allclose(prior.uninformed(), 0.5)
    F = prior.overlap_map(np.array([[0.3, 0.1], [0.1, 2.0]]))
    assert F[0, 0] == pytest.approx(1.5 - mmse_denoising(0.5, 1 / 0.6), abs=1e-13)
    assert F[1, 1] == pytest.approx(1.5 - mmse_denoising(0.5, 1 / 4.0), abs=1e-13)
    assert F[0, 1] == F[1, 0] == pytest.approx(0.5)
    s = prior.SMALL_SNR
    below, above = prior.layer_overlap(0, s * (1 - 1e-9)), prior.layer_overlap(0, s)
    assert abs(below - above) < 2e-11
    assert prior.layer_overlap(0, 0.0) == pytest.approx(0.5, abs=1e-15)   # sqrt(rho)^2
    with pytest.raises(ValueError, match="q_hat"):
        prior.layer_overlap(0, -1.0)
    with pytest.raises(NotImplementedError, match="free-entropy term"):
        prior.psi(np.eye(2))
    for bad in (0.0, math.inf, -1.0):
        with pytest.raises(ParameterError, match="rho"):
            layer_prior(2, bad)
    from symtheory.glm.factors.spectral_priors import LayerwiseMatrixPrior, SpectralPrior
    with pytest.raises(ValueError, match="at least one layer"):
        LayerwiseMatrixPrior([])
    with pytest.raises(ValueError, match="Q0 > mean"):
        SpectralPrior(abs, 1.0, 1.0)
    with pytest.raises(ValueError, match="SpectralPrior"):
        LayerwiseMatrixPrior([abs])


@pytest.mark.parametrize("kwargs, name", [(dict(samples=1), "samples"), (dict(seed=-1), "seed"),
                                          (dict(noise=0.0), "noise"), (dict(rho=0.0), "rho")])
def test_deep_se_point_rejects_bad_input(kwargs, name):
    from symtheory.aim.deep import deep_se_point

    args = dict(rho=0.5, noise=0.1, samples=100, seed=0)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=name):
        deep_se_point(0.3, **args)


def test_gamp_rows_equal_separate_runs():
    """Two independent linear-Gaussian problems run as two rows of one GAMP (each row its
    own sensing matrix) give exactly the two single-row runs (per-row V, A, noise,
    denoiser): rows of a separable prior must not interact."""
    from symtheory.glm.factors.channel import Channel
    from symtheory.glm.factors.prior import DenoiserPrior
    from symtheory.glm.factors.scalar import gaussian_noise_channel
    from symtheory.glm.gamp.loop import DenseOperator, RowwiseOperator, gamp
    from symtheory.glm.integrate.moments import Moments

    rng = np.random.default_rng(0)
    p, n, delta = 60, 90, 0.1
    Phis = [rng.standard_normal((n, p)) / math.sqrt(p) for _ in range(2)]
    xs = [rng.standard_normal(p) for _ in range(2)]
    ys = [Phis[b] @ xs[b] + math.sqrt(delta) * rng.standard_normal(n) for b in range(2)]
    ch = gaussian_noise_channel()

    class TwoRows(Channel):   # the same Gaussian channel on each row, V = diag(V_0, V_1)
        P, M = 2, 1

        def moments(self, y, omega, V):
            n = len(omega)
            logZ, shift, cshift = np.zeros(n), np.empty((n, 2, 1)), np.zeros((n, 2, 2))
            for a in range(2):
                m = ch.moments(y[:, a], omega[:, a, 0], V[a, a], delta)
                logZ += m.log_partition
                shift[:, a, 0], cshift[:, a, a] = m.mean_shift, m.cov_shift
            return Moments(logZ, shift, cshift, omega, V)

    gauss = DenoiserPrior(lambda R, s: (R / (1 + s[:, None]), s / (1 + s)))
    kw = dict(damping=0.2, max_iter=30, tol=1e-30, restore_best=False)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single = [gamp(DenseOperator(Phis[b]), ys[b], ch, gauss, channel_params=(delta,),
                       truth=xs[b][None], **kw) for b in range(2)]
        rows = gamp(RowwiseOperator(Phis), np.stack(ys, axis=1), TwoRows(), gauss,
                    W0=np.zeros((2, p)), truth=np.stack(xs), **kw)
    for b in range(2):
        assert np.allclose(rows.W[b], single[b].W[0], atol=1e-12)
    assert np.allclose(rows.variance, [single[0].variance, single[1].variance], atol=1e-14)


def test_rowwise_operator_rejects_rows_of_different_shapes():
    from symtheory.glm.gamp.loop import RowwiseOperator

    with pytest.raises(ValueError, match="one shape"):
        RowwiseOperator([np.eye(4), np.eye(3)])


def test_se_samples_have_the_law_of_aim_md_3_7():
    """With the layer-wise prior, the SE's omega = Q^{1/2} xi has covariance Q (the
    shared known part sqrt(rho_l rho_m) between layers, q_l on the diagonal) and the
    indices Z = omega + V^{1/2} eta covariance rho = [[Q0, rho], [rho, Q0]]: aim.md 3.7's
    omega^(l) = sqrt(rho) zeta + sqrt(q_l - rho) eta^(l).  Monte Carlo over 40,000 x 3
    draws per entry, bound 5 standard errors (~0.02 for these variances)."""
    from symtheory.aim.deep import deep_aim_model, layer_prior
    from symtheory.glm.se.state_evolution import StateEvolution

    prior = layer_prior(2, 0.5)
    se = StateEvolution(deep_aim_model(2, 2), 0.5, samples=40000, seed=1, noise_variance=0.1,
                        prior=prior, structure="full", check_channel=False)
    Q = prior.uninformed() + np.diag([0.3, 0.8])
    _, omega, V, Z = se.sample_channel(Q)
    assert np.allclose(V, np.diag([0.7, 0.2]))
    for sample, want in ((omega, Q), (Z, prior.rho(2))):
        x = np.moveaxis(sample, 2, 1).reshape(-1, 2)       # (samples x tokens, layers)
        cov = x.T @ x / len(x)
        assert np.allclose(cov, want, atol=5 * 1.6 * np.sqrt(2 / len(x)))


def test_cli_deep_refuses_bad_options():
    import subprocess
    import sys

    for argv, msg in ((["--alpha", "0.3"], "--noise"),
                      (["--alpha", "0.3", "--noise", "0.1", "--depth", "1"], "--depth"),
                      (["--alpha", "-1", "--noise", "0.1"], "--alpha"),
                      (["--alpha", "0.3", "--noise", "0.1", "--gamp-d", "2"], "--gamp-d")):
        out = subprocess.run([sys.executable, "-m", "symtheory.cli", "aim", "deep", *argv],
                             capture_output=True, text=True)
        assert out.returncode == 2 and msg in out.stderr, out.stderr


@pytest.mark.slow
def test_deep_se_against_gamp():
    """Deep AIM, depth 2, T = 2, rho = 0.5, skip 1, noise 0.1, alpha = 0.6: GAMP-RIE at
    d = 40 (n = 960; seeds 0, 1; damping 0.6; 25 iterations -- settled by ~20) against the
    SE on 400 frozen samples.  Measured: SE mmse (0.660, 0.270) +- (0.013, 0.009); GAMP
    after 25 iterations (0.716, 0.230) and (0.666, 0.308), mean (0.691, 0.269) (after 50:
    (0.715, 0.231), (0.648, 0.308): seed 1's layer 1 alternates between the two); at
    d = 60 seed 0 ends at (0.685, 0.282), at d = 30 layer 1 diverges.  Bound 0.06 on the seed mean
    per layer: the seed-to-seed spread is ~0.035 per layer (so ~0.025 on a mean of two),
    plus the SE's Monte-Carlo error (<= 0.013) and the finite-d bias, which for the
    verified one-layer softmax AIM at the same d is +0.0 to +0.09 (d = 40, 4 seeds).
    ~15 min on 2 cores."""
    import warnings

    from symtheory.aim.deep import deep_se_point
    from symtheory.aim.gamp import run_deep_gamp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, se = deep_se_point(0.6, rho=0.5, noise=0.1, samples=400)
        assert res.converged and np.all(np.diag(res.Q_stderr) < 0.02)
        runs = [run_deep_gamp(aim_data.generate_deep(40, 0.6, rho=0.5, depth=2, seq_len=2,
                                                     skip=1.0, noise=0.1, seed=s),
                              damping=0.6, max_iter=25) for s in (0, 1)]
    gamp = np.mean([r.layer_mse for r in runs], axis=0)
    print("SE", se, "GAMP", [r.layer_mse for r in runs])
    assert np.all(np.abs(gamp - se) < 0.06)
    # the layer learned first is the last one (layer 2), as in deep attention
    assert se[1] < se[0] and gamp[1] < gamp[0]


@pytest.mark.slow
def test_cli_deep_writes_a_plain_table(tmp_path):
    """A short end-to-end run (100 samples, 2 SE iterations, GAMP at d = 10 for 2
    iterations; ~1-2 min with the channel kernel compiled): plain numbers in the CSV,
    parameters and plot written, every column present."""
    import csv
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "symtheory.cli", "aim", "deep", "--alpha", "0.3",
                          "--noise", "0.1", "--samples", "100", "--max-iter", "2", "--gamp-d",
                          "10", "--gamp-iter", "2", "--quiet", "--plot", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    stem = tmp_path / "aim_deep_L2_T2_rho0.5_noise0.1"
    rows = list(csv.DictReader(open(f"{stem}.csv")))
    assert len(rows) == 1
    for key in ("mmse_1", "mmse_2", "mmse_1_stderr", "gamp_mmse_1", "gamp_mmse_2",
                "channel_error", "residual"):
        assert math.isfinite(float(rows[0][key])), (key, rows[0][key])
    assert rows[0]["converged"] in ("true", "false")
    assert (tmp_path / f"{stem.name}.params.json").is_file()
    assert (tmp_path / f"{stem.name}.png").is_file()
