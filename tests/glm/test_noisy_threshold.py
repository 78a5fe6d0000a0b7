"""Weak recovery of a noisy two-index link by the output quadrature with the channel's
own adaptive rule (issue 32): y = z1^2 - z2^2 + sqrt(0.1) xi."""
import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special

from symtheory.core.quadrature import TensorRule
from symtheory.glm import MultiIndexModel
from symtheory.glm.checks.scalar import ChannelCheckError
from symtheory.glm.thresholds.expectations import choose_method

DELTA = 0.1


def _sqd(name="sqd"):
    z1, z2 = sp.symbols("z1 z2", real=True)
    return MultiIndexModel(name, sp.Matrix([[z1], [z2]]), sp.Matrix([[z1 ** 2 - z2 ** 2]]))


def test_adaptive_rule_passes_the_declaration_check_gauss_hermite_does_not():
    # a likelihood of width sqrt(0.1) / |2 z| on a hyperbola: the fixed GH 40 rule
    # misses dg_out by ~0.2 and is refused; the channel's default (adaptive) rule passes
    with pytest.raises(ChannelCheckError, match="dg_out"):
        _sqd("sqd_gh").channel(DELTA, TensorRule("gauss-hermite", 40))
    with pytest.warns(RuntimeWarning, match="missed the tolerance"):
        ch = _sqd().channel(DELTA)
    assert ch.check_report.checked and ch.check_report.max_discrepancy_dg < 1e-9
    assert choose_method(_sqd(), DELTA) == "output-quadrature"


def _reference_lambda():
    """E_y (E[z1^2|y] - 1)^2 by 1-D integrals: s = z1^2 - z2^2 has density K0(|s|/2)/(2 pi)
    and E[z1^2 delta(s - .)] = (|s|/2)(K1(|s|/2) +- K0(|s|/2))/(2 pi) (sign of s), each
    convolved with the noise N(0, DELTA) (u-integrals of the chi-square densities)."""
    sd = math.sqrt(DELTA)

    def p_s(s):
        return special.k0(abs(s) / 2) / (2 * math.pi)

    def h_s(s):
        a = abs(s) / 2
        return a * (special.k1(a) + math.copysign(1.0, s) * special.k0(a)) / (2 * math.pi)

    def conv(fun, y):
        lo, hi = y - 12 * sd, y + 12 * sd
        g = lambda s: fun(s) * math.exp(-0.5 * (y - s) ** 2 / DELTA) / math.sqrt(2 * math.pi * DELTA)
        return integrate.quad(g, lo, hi, points=[0.0] if lo < 0 < hi else None, epsabs=0,
                              epsrel=1e-13, limit=400)[0]

    def f(y):
        p = conv(p_s, y)
        return p * (conv(h_s, y) / p - 1) ** 2

    return sum(integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-12, limit=400)[0]
               for lo, hi in ((-80, -3), (-3, 0), (0, 3), (3, 80)))


def test_reference_closed_forms_against_direct_u_integrals():
    import mpmath

    with mpmath.workdps(30):
        f = lambda u: mpmath.exp(-u / 2) / mpmath.sqrt(2 * mpmath.pi * u)
        for s in (0.3, -0.3, 4.0):
            lo = max(0, s)
            hs = mpmath.quad(lambda u: u * f(u) * f(u - s), [lo, lo + 1, mpmath.inf])
            a = abs(s) / 2
            ref = a * (special.k1(a) + math.copysign(1.0, s) * special.k0(a)) / (2 * math.pi)
            assert abs(hs - ref) < 1e-13 * hs


@pytest.mark.slow
def test_threshold_against_one_dimensional_integrals():
    from symtheory.glm import weak_recovery

    with pytest.warns(RuntimeWarning):
        res = weak_recovery(_sqd(), noise_variance=DELTA)
    lam = _reference_lambda()          # 1.6316155397228602 (measured)
    assert res.method.startswith("output-quadrature")
    # the channel's rule is held to 1e-7: alpha agrees to ~2e-7 relative (measured 1.5e-7),
    # and the stated error covers the difference
    assert abs(res.value - 1 / lam) <= res.error
    assert abs(res.value * lam - 1) < 1e-6
    # E[z z^T|y] is diagonal: F(Gamma)_11 = E a^2 Gamma_11 (and 22), the top eigenspace
    # is the two diagonal directions
    assert res.details["multiplicity"] == 2
