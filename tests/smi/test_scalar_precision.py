"""The mpmath path of a noisy one-index link (issue 32, item 4): ``y = |z| + sqrt(delta) xi``.

SymPy writes the preimages of ``|z| = y`` as ``Piecewise((+-y, y >= 0), (nan, True))``;
both arithmetics drop the undefined branch through one test (``real_preimage``).  The
threshold at ``--precision P`` is checked against an independent mpmath computation
written by hand here, and a precision run that cannot produce its digits says so
(``converged=False``, exit status 1), never a ``nan`` with status 0.
"""
from __future__ import annotations

import csv
import io

import mpmath
import numpy as np
import pytest
import sympy as sp

from symtheory.glm import MultiIndexModel
from symtheory.glm.thresholds import weak_recovery as wr_module
from symtheory.glm.thresholds.expectations import real_preimage
from symtheory.glm.thresholds.weak_recovery import weak_recovery

#: float64 value of the issue (nested tanh-sinh, level 6), delta = 0.2
FLOAT_ALPHA = 0.7158943519285647
ABS_MODEL = '''\
import sympy as sp
from symtheory.glm import MultiIndexModel
z = sp.Symbol("z", real=True)
model = MultiIndexModel("abs", sp.Matrix([[z]]), sp.Matrix([[sp.Abs(z)]]),
                        description="y = |z| + noise")
'''


def abs_model():
    z = sp.Symbol("z0_0", real=True)
    return MultiIndexModel("abs", sp.Matrix([[z]]), sp.Matrix([[sp.Abs(z)]]))


def _hand_moments(y, delta):
    """``(p(y), E[z^2|y])`` for ``y = |z| + sqrt(delta) xi``, ``z ~ N(0, 1)``, by hand: on
    each half-line ``phi(z) phi_delta(y - |z|) = phi_{1+delta}(y) N(+-z; m, s^2)``,
    ``m = y/(1+delta)``, ``s^2 = delta/(1+delta)``, so with ``a = m/s`` the truncated
    Gaussian gives ``p = 2 phi_{1+delta}(y) Phi(a)`` and ``E[z^2|y] = m^2 + s^2 + m s
    phi(a)/Phi(a)`` (checked against direct quadrature in the tests below)."""
    m = y / (1 + delta)
    s = mpmath.sqrt(delta / (1 + delta))
    a = m / s
    Phi, phi = mpmath.ncdf(a), mpmath.npdf(a)
    p = 2 * mpmath.npdf(y, 0, mpmath.sqrt(1 + delta)) * Phi
    return p, m * m + s * s + m * s * phi / Phi


def independent_alpha(delta, dps):
    """``alpha_c = 1/T``, ``T = E_y[(E[z^2|y] - 1)^2]`` (Eq. 15 of arXiv:2502.00901 for one
    index: ``E[z|y] = 0`` by ``z -> -z``, and the Gaussian prior's slope is 1), the outer
    integral by ``mpmath.quad`` at ``dps`` digits, ``delta`` a decimal string."""
    with mpmath.workdps(dps):
        d = mpmath.mpf(delta)

        def integrand(y):
            p, second = _hand_moments(y, d)
            return p * (second - 1) ** 2
        return 1 / mpmath.quad(integrand, [-mpmath.inf, 0, 1, 3, mpmath.inf])


@pytest.mark.parametrize("y", ["-0.7", "0.3", "2.5"])
def test_hand_moments_against_direct_quadrature(y):
    """The hand formulas against mpmath.quad of ``z^k phi(z) phi_delta(y - |z|)`` split
    at ``0`` and ``+-y``, to 1e-35 (40 digits)."""
    with mpmath.workdps(40):
        yv, d = mpmath.mpf(y), mpmath.mpf("0.2")
        pts = [-mpmath.inf, -abs(yv), 0, abs(yv), mpmath.inf]

        def N(k):
            return mpmath.quad(lambda t: t ** k * mpmath.npdf(t) * mpmath.npdf(yv - abs(t), 0,
                                                                             mpmath.sqrt(d)), pts)
        p, second = _hand_moments(yv, d)
        assert abs(N(0) - p) <= mpmath.mpf(10) ** -35 * p
        assert abs(N(2) / N(0) - second) <= mpmath.mpf(10) ** -35 * second


def test_undefined_preimages_are_dropped():
    """SymPy's branches of ``|z| = y`` are nan for ``y < 0``: no preimage, in float64 and
    mpmath alike (a nan split point made the mpmath path run 65 min and print nan)."""
    z, y = sp.Symbol("z", real=True), sp.Symbol("y", real=True)
    branches = sp.solve(sp.Eq(sp.Abs(z), y), z)
    assert any(isinstance(b, sp.Piecewise) for b in branches)
    for mod, num in (("numpy", lambda v: np.complex128(v)), ("mpmath", mpmath.mpf)):
        fs = [sp.lambdify(y, b, mod) for b in branches]
        assert sorted(float(real_preimage(f(num(0.3)), 1e-12)) for f in fs) == [-0.3, 0.3]
        assert [real_preimage(f(num(-0.3)), 1e-12) for f in fs] == [None, None]
    assert real_preimage(mpmath.mpc(1, 1e-3), 1e-12) is None
    assert real_preimage(np.complex128(2 + 1e-16j), 1e-12) == 2.0
    assert real_preimage(float("inf"), 1e-12) is None


@pytest.mark.slow
@pytest.mark.ci_slow  # 6.6 s: the default tier stays under 5 min (CI runs ci_slow)
def test_precision_12_against_the_independent_path_and_float():
    """precision = 12 (runs at 22 and 34 digits): 12 digits confirmed, agreeing with the
    independent 40-digit value to 1e-12 (relative) and with float64 to 1e-14."""
    res = weak_recovery(abs_model(), noise_variance=0.2, precision=12)
    assert res.converged and res.digits_confirmed >= 12
    ref = independent_alpha("0.2", 40)
    with mpmath.workdps(40):
        assert abs(mpmath.mpf(res.alpha) - ref) / ref < mpmath.mpf(10) ** -12
    assert abs(float(res.alpha) - FLOAT_ALPHA) < 1e-14
    assert float(abs(res.details["value_rule"]["mass"] - 1)) < 1e-20


@pytest.mark.slow
def test_cli_precision_30_gives_30_confirmed_digits(tmp_path, capsys):
    """The issue's command: 30 digits, confirmed at 2 x 30 + 10, equal to the independent
    path's 30 digits (40-digit quad) and within 1e-14 of float64."""
    from symtheory.cli import main

    path = tmp_path / "abs.py"
    path.write_text(ABS_MODEL)
    code = main(["smi", "threshold", "--model-file", str(path), "--delta", "0.2",
                 "--precision", "30"])
    out = capsys.readouterr().out
    row = next(csv.DictReader(io.StringIO(out)))
    assert code == 0 and float(row["digits_confirmed"]) >= 30
    ref = independent_alpha("0.2", 40)
    assert row["alpha"] == mpmath.nstr(ref, 30)
    assert abs(float(row["alpha"]) - FLOAT_ALPHA) < 1e-14


def _patched(monkeypatch, operator):
    monkeypatch.setattr(wr_module, "_mp_operator", operator)


def test_nan_operator_is_refused_not_printed(monkeypatch, tmp_path, capsys):
    """A precision run whose operator is nan: converged False with the reason, and the
    command line exits 1 naming it (before: alpha = nan with exit status 0)."""
    from symtheory.cli import main

    def nan_operator(model, method, noise_variance, dps, n_gh, rule_digits):
        with mpmath.workdps(dps):
            return {(0, 0, 0, 0): mpmath.nan}, {(0, 0): mpmath.mpf(0)}, {}
    _patched(monkeypatch, nan_operator)
    res = weak_recovery(abs_model(), noise_variance=0.2, precision=10)
    assert not res.converged and res.digits_confirmed == 0
    assert "not finite" in res.message
    path = tmp_path / "abs.py"
    path.write_text(ABS_MODEL)
    code = main(["smi", "threshold", "--model-file", str(path), "--delta", "0.2",
                 "--precision", "10"])
    err = capsys.readouterr().err
    assert code == 1 and "--precision 10: digits not confirmed" in err and "not finite" in err


def test_disagreeing_runs_are_not_confirmed(monkeypatch):
    """The check run disagrees after 5 digits: converged False, digits_confirmed ~5, and
    the message says how many digits were confirmed."""
    def shifted(model, method, noise_variance, dps, n_gh, rule_digits):
        with mpmath.workdps(dps):
            T = mpmath.mpf(2) * (1 + (mpmath.mpf(10) ** -5 if dps > 30 else 0))
            return {(0, 0, 0, 0): T}, {(0, 0): mpmath.mpf(0)}, {}
    _patched(monkeypatch, shifted)
    res = weak_recovery(abs_model(), noise_variance=0.2, precision=12)
    assert not res.converged and 4.5 < res.digits_confirmed < 5.5
    assert "only 5.0 of 12 digits confirmed" in res.message


def test_a_rule_too_large_is_refused_by_name():
    """y = z^3 - z + sqrt(0.3) xi at 30 digits: the link's range over |z| <= z_max
    (+-3872) in units of the noise would take ~1.5e5 outer nodes: refused at once,
    naming the count and the ranges, instead of running for many minutes."""
    from symtheory.core.validate import ParameterError

    z = sp.Symbol("z0_0", real=True)
    cube = MultiIndexModel("cube", sp.Matrix([[z]]), sp.Matrix([[z ** 3 - z]]))
    with pytest.raises(ParameterError, match=r"would need \d+ outer nodes .*noise sd"):
        weak_recovery(cube, noise_variance=0.3, precision=30)
