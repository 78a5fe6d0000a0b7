"""AIM teacher data and gradient descent (aim.md 1, 6, 8).

Data are checked against a literal numpy transcription of aim.md's formulas (explicit
``S``, a loop over token pairs, scipy's softmax), the noise and the normalisations by Monte
Carlo with their standard errors.  GD is checked against a float64 finite-difference
gradient of the loss written out here, and on its known behaviour: interpolation of
noiseless data, students as independent runs, averaging below single runs.  The slow test
is the acceptance run of aim.md 6 at d = 100 against the authors' state-evolution curve
(read from ``<repo>/../shared/reference/aim``; skipped when absent).
"""
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax

from symtheory.aim import data as aim_data
from symtheory.core.validate import ParameterError

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference" / "aim" / "BO_ExtensiveRankAttention" / "data"
needs_jax = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or importlib.util.find_spec("optax") is None,
    reason="JAX/optax not installed (pip install 'symtheory[gd]'; the test extra has them)")
needs_reference = pytest.mark.skipif(
    not REFERENCE.is_dir(), reason=f"AIM reference data not found at {REFERENCE} (read from "
    "<repo>/../shared/reference/aim; not vendored)")


# ----------------------------------------------------------------------- literal formulas
def literal_S(W):
    d, r = W.shape
    return W @ W.T / math.sqrt(r * d)


def literal_indices(X, S):
    """aim.md 1.1 as written: h_ab = (x_a^T S x_b - delta_ab Tr S)/sqrt(d), pair by pair."""
    n, T, d = X.shape
    h = np.empty((n, T, T))
    for mu in range(n):
        for a in range(T):
            for b in range(T):
                h[mu, a, b] = (X[mu, a] @ S @ X[mu, b] - (a == b) * np.trace(S)) / math.sqrt(d)
    return h


def literal_hardmax(h):
    y = np.zeros_like(h)
    for mu in range(h.shape[0]):
        for a in range(h.shape[1]):
            y[mu, a, np.argmax(h[mu, a])] = 1.0
    return y


def student_loss(W, X, y, link, inv_temp=1.0):
    """aim.md 6 loss in float64: sum_{mu,a,b} (f_W(X)_ab - y_ab)^2 / d."""
    d = X.shape[-1]
    S = literal_S(W)
    h = (np.einsum("nad,de,nbe->nab", X, S, X) - np.trace(S) * np.eye(X.shape[1])) / math.sqrt(d)
    f = softmax(inv_temp * h, axis=-1) if link == "softmax" else h
    return np.sum((f - y) ** 2) / d


# ----------------------------------------------------------------------- data
@given(d=st.integers(2, 12), T=st.integers(1, 4), width=st.integers(1, 24),
       n=st.integers(1, 12), link=st.sampled_from(aim_data.LINKS),
       inv_temp=st.floats(0.1, 5.0), seed=st.integers(0, 2**31))
def test_outputs_match_the_spec_formulas(d, T, width, n, link, inv_temp, seed):
    if T == 1:
        link = "identity"          # one-token softmax/hardmax are refused (tested below)
    D = aim_data.generate(d, n / d**2, rho=width / d, seq_len=T, link=link, inv_temp=inv_temp,
                          seed=seed)
    assert D.X.shape == (n, T, d) and D.W.shape == (d, width)
    S = literal_S(D.W)
    # the factored computation differs from the literal one by float64 rounding only
    np.testing.assert_allclose(D.S, S, rtol=1e-12, atol=1e-12)
    h = literal_indices(D.X, S)
    np.testing.assert_allclose(D.h, h, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(D.h, np.swapaxes(D.h, 1, 2), atol=1e-12)
    expected = {"identity": lambda: h, "softmax": lambda: softmax(inv_temp * h, axis=-1),
                "hardmax": lambda: literal_hardmax(h)}[link]()
    np.testing.assert_allclose(D.y, expected, rtol=1e-10, atol=1e-12)
    assert D.alpha == n / d**2 and D.rho == D.r / d


@given(d=st.integers(2, 10), n=st.integers(1, 10), delta=st.floats(0.0, 2.0),
       seed=st.integers(0, 2**31))
def test_quadratic_network_is_the_one_token_identity_model(d, n, delta, seed):
    """aim.md 8: y = (1/sqrt m) sum_k [(w_k.x)^2/d - |w_k|^2/d] + sqrt(delta) xi, m = r."""
    D = aim_data.generate(d, n / d**2, rho=0.5, seq_len=1, link="identity", delta=delta,
                          seed=seed)
    W, x, m = D.W, D.X[:, 0, :], D.r
    qn = ((x @ W) ** 2 / d - np.sum(W**2, axis=0) / d).sum(axis=1) / math.sqrt(m)
    np.testing.assert_allclose(D.h[:, 0, 0], qn, rtol=1e-10, atol=1e-10)
    if delta == 0:
        np.testing.assert_array_equal(D.y, D.h)


def test_noise_has_the_spec_covariance():
    """Symmetric noise of variance delta on the diagonal, delta/2 off it (aim.md 1.2),
    independent entries; Monte Carlo, 5 standard errors."""
    delta, T, n, d = 0.7, 3, 40_000, 2
    D = aim_data.generate(d, n / d**2, rho=0.5, seq_len=T, link="identity", delta=delta, seed=4)
    noise = D.y - D.h
    np.testing.assert_array_equal(noise, np.swapaxes(noise, 1, 2))
    for a in range(T):
        for b in range(a, T):
            v = noise[:, a, b]
            want = delta if a == b else delta / 2
            # sample variance of a Gaussian: standard error want * sqrt(2/n)
            assert abs(np.mean(v**2) - want) < 5 * want * math.sqrt(2 / n)
            assert abs(np.mean(v)) < 5 * math.sqrt(want / n)
    pairs = [((0, 0), (0, 1)), ((0, 1), (0, 2)), ((0, 1), (1, 2)), ((1, 1), (2, 2))]
    for (a, b), (c, e) in pairs:
        prod = noise[:, a, b] * noise[:, c, e]
        assert abs(prod.mean()) < 5 * prod.std() / math.sqrt(n)


@pytest.mark.parametrize("link", ["softmax", "hardmax"])
def test_noise_enters_before_the_link(link):
    """Same seed, same draws (W, X, noise): the softmax/hardmax data are g of the
    identity link's noisy indices."""
    kw = dict(rho=0.5, seq_len=3, inv_temp=1.7, delta=0.3, seed=11)
    noisy = aim_data.generate(8, 0.5, link="identity", **kw).y
    D = aim_data.generate(8, 0.5, link=link, **kw)
    want = softmax(1.7 * noisy, axis=-1) if link == "softmax" else literal_hardmax(noisy)
    np.testing.assert_allclose(D.y, want, rtol=1e-12, atol=1e-14)


def test_normalisations_of_the_tied_prior():
    """aim.md 1.1-2: at finite d, E (1/d)Tr S = sqrt(r/d), E (1/d)Tr S^2 = (d + r + 1)/d
    (Wishart moments; -> 1 + rho), so E mse(sqrt(rho) I, S) = 1 + 1/d; given S,
    Var h_ab = Tr S^2/d and Var h_aa = 2 Tr S^2/d.  Monte Carlo, 5 standard errors."""
    d, rho, K = 30, 0.5, 400
    tr1, tr2, triv = [], [], []
    for k in range(K):
        D = aim_data.generate(d, 1 / d**2, rho=rho, seq_len=2, seed=(7, k))
        tr1.append(np.trace(D.S) / d)
        tr2.append(np.trace(D.S @ D.S) / d)
        triv.append(aim_data.mse(math.sqrt(D.rho) * np.eye(d), D.S))
    r = round(rho * d)
    for vals, want in ((tr1, math.sqrt(r / d)), (tr2, (d + r + 1) / d), (triv, 1 + 1 / d)):
        vals = np.asarray(vals)
        assert abs(vals.mean() - want) < 5 * vals.std(ddof=1) / math.sqrt(K)

    n = 50_000
    D = aim_data.generate(d, n / d**2, rho=rho, seq_len=2, seed=8)
    q0 = np.trace(D.S @ D.S) / d
    for (a, b), want in (((0, 1), q0), ((0, 0), 2 * q0), ((1, 1), 2 * q0)):
        sq = D.h[:, a, b] ** 2
        assert abs(sq.mean() - want) < 5 * sq.std() / math.sqrt(n)


def test_mse_is_the_frobenius_error_per_dimension():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2, 3, 7, 7))
    np.testing.assert_allclose(aim_data.mse(A, B[0]),
                               [np.linalg.norm(a - B[0], "fro") ** 2 / 7 for a in A], rtol=1e-13)


def test_seeds_are_reproducible():
    kw = dict(rho=0.5, seq_len=3, link="softmax", delta=0.1)
    a, b = aim_data.generate(10, 0.2, seed=5, **kw), aim_data.generate(10, 0.2, seed=5, **kw)
    for name in ("X", "h", "y", "W", "S"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.seed == (5,)
    c = aim_data.generate(10, 0.2, seed=(5, 1), **kw)
    e = aim_data.generate(10, 0.2, seed=(5, 2), **kw)
    assert not np.allclose(a.W, c.W) and not np.allclose(c.W, e.W)
    assert c.seed == (5, 1)


@pytest.mark.parametrize("kwargs, name", [
    (dict(d=0), "d"), (dict(d=2.5), "d"), (dict(alpha=0.0), "alpha"),
    (dict(alpha=-0.1), "alpha"), (dict(alpha=float("nan")), "alpha"),
    (dict(alpha=1e-4), "alpha"),                      # round(alpha d^2) = 0 samples
    (dict(rho=0.0), "rho"), (dict(rho=0.01), "rho"),  # round(rho d) = 0
    (dict(rho=float("inf")), "rho"), (dict(seq_len=0), "seq_len"),
    (dict(link="relu"), "link"), (dict(inv_temp=0.0), "inv_temp"),
    (dict(delta=-1.0), "delta"), (dict(seed=-1), "seed"), (dict(seed=()), "seed"),
    (dict(seq_len=1, link="softmax"), "seq_len"), (dict(seq_len=1, link="hardmax"), "seq_len"),
])
def test_bad_data_input_names_the_parameter(kwargs, name):
    args = dict(d=10, alpha=0.1, rho=0.5, seq_len=2, link="softmax")
    args.update(kwargs)
    d, alpha = args.pop("d"), args.pop("alpha")
    with pytest.raises(ParameterError, match=rf"^{name} must"):
        aim_data.generate(d, alpha, **args)


# ----------------------------------------------------------------------- GD
def test_missing_jax_names_the_extra(monkeypatch):
    from symtheory.aim import gd

    monkeypatch.setitem(sys.modules, "optax", None)     # "import optax" now fails
    with pytest.raises(ImportError, match=r"symtheory\[gd\]"):
        gd.import_jax()


def test_modules_and_parser_import_no_jax():
    """Building the ``aim gd`` parser imports no numerics; importing the GD module does
    not import JAX (only running GD does)."""
    code = ("import sys, symtheory.aim.gd_cli as c\n"
            "from symtheory.core.cli_common import Parser\n"
            "p = Parser(); c.register_gd(p.add_subparsers())\n"
            "heavy = lambda: ','.join(m for m in ('jax', 'optax', 'numpy') if m in sys.modules)\n"
            "print(heavy())\n"
            "import symtheory.aim.gd\n"
            "print(heavy())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["", "numpy"]


@needs_jax
@pytest.mark.parametrize("link, T", [("softmax", 3), ("identity", 1)])
def test_first_step_is_adam_on_the_spec_loss(link, T):
    """The recorded initial loss is aim.md 6's loss (float64 here, float32 in JAX:
    rtol 1e-5 ~ 100 float32 epsilons); Adam's first step is lr * g/(|g| + 1e-8), so
    W0 - W1 = lr * sign(g) where the float64 central finite-difference gradient is not
    small (|g| > 1% of its largest entry; float32 rounding of |W1 - W0| <= 1e-6)."""
    from symtheory.aim.gd import run_gd

    d, r, lr = 8, 4, 0.05
    D = aim_data.generate(d, 20 / d**2, rho=r / d, seq_len=T, link=link, inv_temp=1.3, seed=2)
    W0 = np.random.default_rng(3).standard_normal((1, d, r)).astype(np.float32).astype(float)
    res = run_gd(D, W0=W0, steps=1, lr=lr)
    loss0 = student_loss(W0[0], D.X, D.y, link, 1.3)
    assert res.loss[0, 0] == pytest.approx(loss0, rel=1e-5)
    eps, grad = 1e-6, np.zeros((d, r))
    for i in range(d):
        for j in range(r):
            Wp, Wm = W0[0].copy(), W0[0].copy()
            Wp[i, j] += eps
            Wm[i, j] -= eps
            grad[i, j] = (student_loss(Wp, D.X, D.y, link, 1.3)
                          - student_loss(Wm, D.X, D.y, link, 1.3)) / (2 * eps)
    step = W0[0] - res.W[0]
    big = np.abs(grad) > 1e-2 * np.abs(grad).max()
    assert big.sum() > d * r // 2
    np.testing.assert_allclose(step[big], lr * np.sign(grad[big]), atol=1e-5)
    assert res.final_loss[0] < res.loss[0, 0]


#: one data shape and one trainer for the GD tests below: JAX compiles once per shape
#: (seconds), then each run of 8 students x 1000 steps takes about a second
SHAPE = dict(d=30, alpha=0.05, rho=0.5, seq_len=2)      # n = 45, r = 15
RUN = dict(students=8, steps=1000)


@pytest.fixture(scope="module")
def trained():
    from symtheory.aim.gd import run_gd

    D = aim_data.generate(SHAPE["d"], SHAPE["alpha"], rho=SHAPE["rho"],
                          seq_len=SHAPE["seq_len"], seed=1)
    return D, run_gd(D, **RUN, seed=2)


@needs_jax
def test_gd_interpolates_noiseless_data(trained):
    """n = 45 samples, d r = 450 parameters, noiseless: students interpolate.  The loss
    falls by 1e4 or more in 1000 Adam steps (measured ~1e-4 relative); the bound 1e-2
    leaves room for seeds, not for a run that stalls."""
    D, res = trained
    assert res.loss.shape == (1001, 8) and res.mse_history.shape == (1001, 8)
    assert np.all(res.final_loss < 1e-2 * res.loss[0])
    assert np.all(res.grad_norm < 1e-2) and not res.diverged.any()
    # the float32 error history ends at the float64 final errors
    np.testing.assert_allclose(res.mse_history[-1], res.mse_students, rtol=1e-4)
    assert res.mse_averaged_history[-1] == pytest.approx(res.mse_averaged, rel=1e-4)


@needs_jax
def test_students_are_independent_runs(trained):
    """Training M students on the summed loss equals M separate runs (each loss has its
    own parameters and Adam is coordinate-wise): student 0 ends where it ends when the
    other seven start elsewhere.  The batches differ by float32 rounding only (measured
    2e-6 after 200 steps between batched and single runs); a coupling (a shared Adam
    moment, a mixed gradient) would move W by O(lr) = 0.1 per step."""
    from symtheory.aim.gd import run_gd

    D, _ = trained
    W0 = np.random.default_rng(0).standard_normal((8, D.d, D.r))
    W0_other = W0.copy()
    W0_other[1:] = np.random.default_rng(1).standard_normal((7, D.d, D.r))
    a, b = run_gd(D, W0=W0, steps=RUN["steps"]), run_gd(D, W0=W0_other, steps=RUN["steps"])
    np.testing.assert_allclose(a.W[0], b.W[0], atol=1e-3)
    np.testing.assert_allclose(a.loss[:, 0], b.loss[:, 0], rtol=1e-3, atol=1e-6)
    assert not np.allclose(a.W[1], b.W[1])


@needs_jax
def test_gd_is_reproducible(trained):
    from symtheory.aim.gd import run_gd

    D, res = trained
    again = run_gd(D, **RUN, seed=2)
    np.testing.assert_array_equal(again.W, res.W)
    np.testing.assert_array_equal(again.loss, res.loss)
    other = run_gd(D, **RUN, seed=3)
    assert not np.allclose(other.W, res.W)


@needs_jax
def test_averaged_gd_beats_single_runs(trained):
    """Averaging M = 8 students: mean_m mse_m = mse(average) + mean_m (1/d)||S_m - S_bar||^2
    (exact), and the students disagree: if they were posterior samples the ratio
    single/averaged would be 2/(1 + 1/M) = 1.78 (measured 1.6-1.8 at d = 30-40); 1.3 fails
    for students that collapse onto one solution (ratio 1)."""
    _, res = trained
    spread = np.mean(aim_data.mse(res.S_students, res.S_averaged))
    assert res.mse_single == pytest.approx(res.mse_averaged + spread, rel=1e-10)
    assert res.mse_averaged < res.mse_single / 1.3


@needs_jax
def test_gd_against_the_bayes_curve_light(trained):
    """Light variant of the acceptance test below (d = 30, 8 students, alpha = 0.05; Bayes
    0.7237 from the package's SE).  Over four teachers at this size (seeds 1-4) single GD
    measured 1.77, 2.07, 1.93, 2.11 x Bayes (a posterior sample: 2 x) and the estimate for
    infinitely many students 0.689, 0.747, 0.856, 0.884: the bounds [1.5, 2.4] and
    |limit - Bayes| < 0.2 cover that teacher-to-teacher spread; students collapsing on one
    solution (ratio ~1) or failing to fit (error >~ 1.5) fail them."""
    from symtheory.aim.theory import solve_mse

    D, res = trained
    bayes = float(solve_mse(D.alpha, SHAPE["rho"], SHAPE["seq_len"]).value)
    assert bayes == pytest.approx(0.7236774222, abs=1e-9)      # aim.md 7, alpha_tilde = 0.2
    assert 1.5 < res.mse_single / bayes < 2.4
    assert abs(res.mse_averaged_limit - bayes) < 0.2


def test_averaged_limit_is_unbiased_for_infinitely_many_students():
    """mse_averaged - spread/(M - 1) estimates the error of the students' mean without
    bias: synthetic 'students' W_m = W_c + noise, K draws of M = 4, against the error of
    the mean of 10^5 draws; Monte Carlo, 5 standard errors."""
    from symtheory.aim.gd import GDResult

    rng = np.random.default_rng(0)
    d, r, M, K = 6, 3, 4, 2000
    S_true = aim_data.teacher_matrix(rng.standard_normal((d, r)))
    W_c = rng.standard_normal((d, r))
    draw = lambda m: W_c + 0.5 * rng.standard_normal((m, d, r))
    mean_S = np.mean(aim_data.teacher_matrix(draw(100_000)), axis=0)
    want = aim_data.mse(mean_S, S_true)
    est, plain = [], []
    for _ in range(K):
        W = draw(M)
        S = aim_data.teacher_matrix(W)
        res = GDResult(W=W, mse_students=aim_data.mse(S, S_true),
                       mse_averaged=float(aim_data.mse(S.mean(axis=0), S_true)),
                       loss=np.zeros((1, M)), mse_history=np.zeros((1, M)),
                       mse_averaged_history=np.zeros(1), grad_norm=np.zeros(M),
                       diverged=np.zeros(M, bool), seconds=0.0, compile_seconds=0.0)
        est.append(res.mse_averaged_limit)
        plain.append(res.mse_averaged)
    est, plain = np.asarray(est), np.asarray(plain)
    assert abs(est.mean() - want) < 5 * est.std(ddof=1) / math.sqrt(K)
    # the plain average of 4 students is biased upwards, by V/M: the test can tell
    assert plain.mean() - want > 5 * plain.std(ddof=1) / math.sqrt(K)


@needs_jax
@pytest.mark.parametrize("kwargs, name", [
    (dict(students=0), "students"), (dict(steps=0), "steps"), (dict(lr=0.0), "lr"),
    (dict(init_scale=-1.0), "init_scale"), (dict(W0=np.zeros((2, 5, 3))), "W0"),
    (dict(W0=np.full((1, 10, 5), np.nan)), "W0"),
])
def test_bad_gd_input_names_the_parameter(kwargs, name):
    from symtheory.aim.gd import run_gd

    D = aim_data.generate(10, 0.1, rho=0.5, seq_len=2, seed=0)
    with pytest.raises(ParameterError, match=rf"^{name} must"):
        run_gd(D, **kwargs)


def test_hardmax_is_refused_for_gd():
    from symtheory.aim.gd import run_gd

    D = aim_data.generate(10, 0.1, rho=0.5, seq_len=2, link="hardmax", seed=0)
    with pytest.raises(ParameterError, match=r"^link must be one of softmax, identity"):
        run_gd(D)


@needs_jax
def test_gd_curve_rows_and_seeds(trained):
    """Rows per (alpha, teacher) with their own seeds.  Both alphas give n = 45, the
    shape compiled above (a new shape costs a compilation)."""
    from symtheory.aim.gd import gd_curve

    alphas = [SHAPE["alpha"], SHAPE["alpha"] * 1.004]
    kw = dict(d=SHAPE["d"], rho=SHAPE["rho"], seq_len=SHAPE["seq_len"], teachers=2, seed=3,
              **RUN)
    t = gd_curve(alphas, **kw)
    assert len(t) == 4 and list(t["teacher"]) == [0, 1, 0, 1] and set(t["n"]) == {45}
    assert len(set(t.columns["mse_single"])) == 4          # four different data sets
    again = gd_curve(alphas[:1], **dict(kw, teachers=1))
    assert again.columns["mse_single"][0] == t.columns["mse_single"][0]
    assert np.all(t["mse_averaged"] <= t["mse_single"])
    with pytest.raises(ParameterError, match="^alpha must give at least one sample"):
        gd_curve([0.05, 1e-4], **kw)          # refused before the first run


# ----------------------------------------------------------------------- CLI
def _parser():
    from symtheory.aim.gd_cli import register_gd
    from symtheory.core.cli_common import Parser

    p = Parser(prog="symtheory")
    aim = p.add_subparsers(dest="family").add_parser("aim")
    register_gd(aim.add_subparsers(dest="task"))
    return p


def test_cli_links_are_the_trainable_links():
    from symtheory.aim.gd import TRAINABLE_LINKS
    from symtheory.aim.gd_cli import LINKS

    assert LINKS == TRAINABLE_LINKS


@pytest.mark.parametrize("argv, message", [
    (["--alpha", "0.1", "--d", "1"], "--d must be an integer >= 2"),
    (["--alpha", "0"], "--alpha must be in (0, inf)"),
    (["--alpha", "0.1", "--students", "0"], "--students must be an integer >= 1"),
    (["--alpha", "0.1", "--lr", "-1"], "--lr must be in (0, inf)"),
    (["--alpha", "0.1", "--rho", "nan"], "--rho must be"),
    (["--alpha", "0.1", "--link", "hardmax"], "--link must be one of softmax, identity"),
    (["--alpha", "0.1", "--delta", "-0.5"], "--delta must be in [0, inf)"),
    ([], "one of --alpha, --alpha-grid must be given"),
])
def test_cli_refuses_bad_options_while_parsing(argv, message):
    from symtheory.core.cli_common import UsageError

    with pytest.raises(UsageError) as exc:
        _parser().parse_args(["aim", "gd", *argv])
    assert exc.value.message.startswith(message), exc.value.message


@pytest.mark.parametrize("argv, message", [
    (["--alpha", "0.1", "--seq-len", "1"], "seq_len must be >= 2 for link='softmax'"),
    (["--alpha", "1e-4", "--d", "10"], "alpha must give at least one sample"),
])
def test_cli_refuses_bad_combinations_before_computing(argv, message):
    args = _parser().parse_args(["aim", "gd", *argv])
    with pytest.raises(ParameterError, match=f"^{message}"):
        args.func(args)


def test_cli_help_renders(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["aim", "gd", "--help"])
    text = capsys.readouterr().out
    assert "mse_averaged" in text and "symtheory[gd]" in text and "--students" in text


@needs_jax
def test_cli_writes_table_params_and_plot(tmp_path, trained):
    out = tmp_path / "gd"
    # the shape of the GD tests above (compiled once)
    args = _parser().parse_args(["aim", "gd", "--d", "30", "--alpha", "0.05", "--students", "8",
                                 "--teachers", "2", "--steps", "1000", "--quiet", "--out",
                                 str(out), "--plot"])
    assert args.func(args) == 0
    stem = "aim_gd_T2_softmax_rho0.5_d30"
    with open(out / f"{stem}.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2
    assert {"alpha", "mse_single", "mse_averaged", "grad_norm_max", "compile_seconds"} <= set(rows[0])
    assert all(float(r["mse_averaged"]) <= float(r["mse_single"]) for r in rows)
    params = json.loads((out / f"{stem}.params.json").read_text())
    assert params["students"] == 8 and params["lr"] == 0.1 and params["steps"] == 1000
    assert (out / f"{stem}.png").stat().st_size > 1000


# ----------------------------------------------------------------------- acceptance
def bayes_t2(alphas, rho=0.5):
    """The package's Bayes-optimal MSE (softmax, T = 2; aim.md 3.4), checked against the
    authors' SE file in tests/aim/test_aim_theory.py."""
    from symtheory.aim.theory import solve_mse

    return np.array([float(solve_mse(a, rho, 2, "softmax").value) for a in alphas])


def reference_gd_averaged_t2(alphas):
    """The authors' averaged GD (d = 200, 32 students, 16 teachers), T = 2, rho = 0.5."""
    path = REFERENCE / "GD_averaged" / "GD_softmax_D=200_rho=0.5_T=2_averages=32.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for a in alphas:
        hit = [float(r["mmse"]) for r in rows if math.isclose(float(r["alpha"]), a, rel_tol=1e-9)]
        out.append(hit[0])
    return np.asarray(out)


@pytest.mark.slow
@needs_jax
@needs_reference
def test_acceptance_gd_reproduces_the_papers_experiment():
    """aim.md 6 at d = 100, 16 students, softmax T = 2, rho = 0.5, Adam lr 0.1, 1000 steps,
    one teacher per alpha, at three points of the authors' grid: alpha = 0.0505, 0.103,
    0.210 (alpha_PR = 0.1875).  Bayes = the package's SE (aim.md 3.4): 0.7204, 0.3737, 0
    (the authors' SE file agrees, tests/aim/test_aim_theory.py).  Seed 0 measured (476 s on
    the shared 2-core machine): averaged 0.776, 0.467, 0.016; estimate for infinitely many
    students 0.741, 0.442, 0.014; single 1.303, 0.840, 0.042.

    * The authors' d = 200 averaged GD (32 students, mean of 16 teachers) is reproduced:
      0.781, 0.432, 0.015.  Bound 0.05: teacher-to-teacher std at d = 100 ~0.02 (two
      teachers at 0.103 gave 0.427 and 0.446, this one 0.467), V/16 - V/32 <= 0.025 with
      V = single - averaged, and finite d.
    * At small alpha the infinitely-many-students estimate is within 0.05 of Bayes
      (0.020); past alpha_PR plain averaged GD is (0.016).  At alpha = 0.103 it is not
      (0.068; with two other teachers 0.038): finite d, as in the authors' d = 200 data
      (0.058 above Bayes) -- the issue's "within 0.05 at three alphas" holds for 16
      students only past alpha_PR and at alpha <= 0.05 for the M -> infinity estimate.
    * Single GD is 1.81 x Bayes at alpha = 0.0505 (a posterior sample: 2 x); [1.6, 2.2].
    """
    from symtheory.aim.gd import gd_curve

    alphas = [float(a) for a in np.geomspace(0.0012, 0.3, 32)[[21, 25, 29]]]
    t = gd_curve(alphas, d=100, rho=0.5, seq_len=2, students=16, teachers=1, seed=0)
    bayes = bayes_t2(t["alpha"])
    authors = reference_gd_averaged_t2(alphas)
    print("alpha", t["alpha"], "\nbayes", bayes, "\naveraged", t["mse_averaged"],
          "\nlimit", t["mse_averaged_limit"], "\nsingle", t["mse_single"],
          "\nauthors d=200", authors, "\nseconds", t["seconds"])
    assert np.all(np.abs(t["mse_averaged"] - authors) < 0.05)
    assert abs(t["mse_averaged_limit"][0] - bayes[0]) < 0.05
    assert abs(t["mse_averaged"][2] - bayes[2]) < 0.05
    assert 1.6 < t["mse_single"][0] / bayes[0] < 2.2


@pytest.mark.slow
@needs_jax
@needs_reference
def test_averaged_gd_against_bayes_around_alpha_pr():
    """Issue 11's "averaged GD (d = 100, 16 students, softmax T = 2) within 0.05 of the
    Bayes curve at three alphas", measured where it is closest: around alpha_PR = 0.1875.
    Two teachers per alpha (seed 0; 9 min under load):
    alpha = 0.1758: averaged 0.097 / 0.094 against Bayes 0.037 (+0.060 / +0.057; two other
    teachers drawn by the CLI gave +0.047 / +0.037); 0.2101: +0.021 / +0.018 (Bayes 0);
    0.2511: +1.5e-4 / +1.1e-4.  So it holds past alpha_PR only.  Below it averaged GD sits
    +0.05 to +0.09 above Bayes at every alpha measured (0.0296: +0.053 over four teachers,
    0.0505: +0.054, 0.103: +0.06-0.09, 0.1471: +0.071), as do the authors' own d = 200
    averages of 32 students (+0.045 to +0.066 over 0.0296 ... 0.1758): the gap is GD's
    (its students are not posterior samples), not finite size or too few students.
    Asserted: within 0.05 of Bayes past alpha_PR; at 0.1758 within 0.05 of the authors'
    averaged GD (0.082) and above Bayes by less than 0.1 (seed-to-seed spread ~0.01)."""
    from symtheory.aim.gd import gd_curve

    alphas = [float(a) for a in np.geomspace(0.0012, 0.3, 32)[[28, 29, 30]]]
    t = gd_curve(alphas, d=100, rho=0.5, seq_len=2, students=16, teachers=2, seed=0)
    alpha = np.asarray(t["alpha"])
    bayes = bayes_t2(alpha)
    avg = np.asarray(t["mse_averaged"])
    print("alpha", alpha, "\nbayes", bayes, "\naveraged", avg)
    past = alpha > 0.1875
    assert np.all(np.abs(avg[past] - bayes[past]) < 0.05)
    below = ~past
    authors = reference_gd_averaged_t2(alpha[below])
    assert np.all(np.abs(avg[below] - authors) < 0.05)
    assert np.all((0 < avg[below] - bayes[below]) & (avg[below] - bayes[below] < 0.1))
    assert np.all(avg < np.asarray(t["mse_single"]))
