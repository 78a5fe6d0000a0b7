"""Numerically stable special functions as SymPy functions.

SymPy rewrites stable forms into unstable ones when it can (``erfc(-x)`` becomes
``2 - erfc(x)``, ``log(1 + exp(x))`` overflows for large ``x``).  The functions here
are opaque SymPy ``Function`` classes with

* a derivative expressed again in stable functions (``fdiff``),
* an mpmath evaluation (``evalf`` and the mpmath printer; tails computed without
  cancellation),
* a pure-Numba implementation (:mod:`symtheory.core.special_numba`) that generated
  kernels call by fully qualified name,
* a rewrite to elementary/erfc form for checks (``f.rewrite(sp.erfc)``), never
  applied automatically.

| function | meaning | derivative |
|---|---|---|
| ``Erfcx(x)`` | exp(x^2) erfc(x) | -(2/sqrt pi) InvMillsPlusX(z)/InvMills(z), z = -sqrt(2) x |
| ``LogErfcx(x)`` | log(exp(x^2) erfc(x)) | -sqrt(2) InvMillsPlusX(-sqrt(2) x) |
| ``LogNdtr(x)`` | log Phi(x) | InvMills(x) |
| ``InvMills(x)`` | phi(x)/Phi(x) (inverse Mills ratio) | -InvMills(x) InvMillsPlusX(x) |
| ``InvMillsPlusX(x)`` | x + phi(x)/Phi(x) | 1 - InvMills(x) InvMillsPlusX(x) |
| ``LogNdtrDiff(a, b)`` | log(Phi(b) - Phi(a)), a < b | -phi(a)/(Phi(b)-Phi(a)), phi(b)/(Phi(b)-Phi(a)) |
| ``Log1pExp(x)`` | log(1 + e^x) | Expit(x) |
| ``Expit(x)`` | 1/(1 + e^-x) | Expit(x) Expit(-x) |

Why the derivatives are written this way: the textbook forms cancel in a tail.
``2 x Erfcx(x) - 2/sqrt(pi)`` loses ``log10(2 x^2)`` digits for large ``x``; the second
derivative of ``log Phi`` written as ``-M (x + M)`` with ``M = phi/Phi`` cancels in
``x + M`` for ``x -> -inf`` (``M ~ -x``).  ``InvMillsPlusX`` evaluates ``x + M`` from
Laplace's continued fraction there (no subtraction), so ``log Phi`` and its first two
derivatives -- ``log Z_out``, ``g_out`` and ``dg_out`` of a probit channel -- keep full
relative accuracy in both tails.  The third derivative (``d InvMillsPlusX``) is exact
but cancels for ``x -> -inf``; no channel quantity needs it.  ``1 - Expit(x)`` is
written ``Expit(-x)`` for the same reason.

These functions are what :mod:`symtheory.core.stable` rewrites ``erfc``/``erf``/
``log(1 + exp)`` into before code generation.
"""
from __future__ import annotations

import mpmath
import sympy as sp

_NUMBA_MODULE = "symtheory.core.special_numba"


# ----------------------------------------------------------------- mpmath versions
def mp_erfcx(x):
    x = mpmath.mpf(x)
    # a product, no cancellation; mpmath's erfc neither underflows nor loses digits
    with mpmath.extraprec(10):
        return +(mpmath.exp(x * x) * mpmath.erfc(x))


def mp_log_erfcx(x):
    with mpmath.extraprec(10):
        return +mpmath.log(mp_erfcx(x))


def mp_log_ndtr(x):
    x = mpmath.mpf(x)
    with mpmath.extraprec(10):
        if x > 0:
            return +mpmath.log1p(-mpmath.ncdf(-x))
        return +mpmath.log(mpmath.ncdf(x))


def mp_inv_mills(x):
    x = mpmath.mpf(x)
    with mpmath.extraprec(10):
        return +(mpmath.npdf(x) / mpmath.ncdf(x))


def mp_inv_mills_plus_x(x):
    x = mpmath.mpf(x)
    # x + phi/Phi cancels like 1/x^2 for x -> -inf: carry the lost bits explicitly
    lost = int(2 * mpmath.log(1 + abs(x), 2)) + 4
    with mpmath.extraprec(10 + lost):
        return +(x + mpmath.npdf(x) / mpmath.ncdf(x))


def mp_log_ndtr_diff(a, b):
    a, b = mpmath.mpf(a), mpmath.mpf(b)
    if a > b:
        return mpmath.nan
    if a == b:
        return mpmath.ninf
    with mpmath.extraprec(60):  # narrow intervals: Phi(b) - Phi(a) cancels
        if a > 0:  # both in the upper tail: Phi(-a) - Phi(-b) has no leading 1 - 1
            return +mpmath.log(mpmath.ncdf(-a) - mpmath.ncdf(-b))
        if b > 0:  # straddles 0: 1 - Phi(a) - Phi(-b), the two tails kept apart
            return +mpmath.log1p(-(mpmath.ncdf(a) + mpmath.ncdf(-b)))
        return +mpmath.log(mpmath.ncdf(b) - mpmath.ncdf(a))


def mp_log1pexp(x):
    x = mpmath.mpf(x)
    with mpmath.extraprec(10):
        if x > 0:
            return +(x + mpmath.log1p(mpmath.exp(-x)))
        return +mpmath.log1p(mpmath.exp(x))


def mp_expit(x):
    x = mpmath.mpf(x)
    with mpmath.extraprec(10):
        return +(1 / (1 + mpmath.exp(-x)))


MPMATH_NAMESPACE = {
    "_st_erfcx": mp_erfcx,
    "_st_log_erfcx": mp_log_erfcx,
    "_st_log_ndtr": mp_log_ndtr,
    "_st_inv_mills": mp_inv_mills,
    "_st_inv_mills_plus_x": mp_inv_mills_plus_x,
    "_st_log_ndtr_diff": mp_log_ndtr_diff,
    "_st_log1pexp": mp_log1pexp,
    "_st_expit": mp_expit,
}


class _StableFunction(sp.Function):
    """Base: real arguments (one unless ``nargs`` says otherwise), opaque to SymPy's
    automatic rewriting."""

    nargs = 1
    _numba_module = _NUMBA_MODULE
    _numba_name: str = ""
    _mp_name: str = ""
    is_real = True

    @classmethod
    def _mp_impl(cls):
        return MPMATH_NAMESPACE[cls._mp_name]

    def _eval_evalf(self, prec):
        args = [a._eval_evalf(prec) for a in self.args]
        if any(a is None or not a.is_Number for a in args):
            return None
        with mpmath.workprec(prec):
            value = self._mp_impl()(*(mpmath.mpf(a._to_mpmath(prec)) for a in args))
        return sp.Float._new(value._mpf_, prec)

    def _args_code(self, printer):
        return ", ".join(printer._print(a) for a in self.args)

    def _pythoncode(self, printer):
        return f"{self._numba_module}.{self._numba_name}({self._args_code(printer)})"

    def _mpmathcode(self, printer):
        return f"{self._mp_name}({self._args_code(printer)})"

    # SymPy's lambdify uses the printer's method name "_mpmathcode"
    _print_mpmath = _mpmathcode


class Erfcx(_StableFunction):
    """Scaled complementary error function ``exp(x**2) * erfc(x)``."""

    _numba_name = "erfcx"
    _mp_name = "_st_erfcx"

    def fdiff(self, argindex=1):
        # Erfcx(x) = sqrt(2/pi) / InvMills(z), z = -sqrt(2) x; the quotient rule with
        # InvMills' = -InvMills InvMillsPlusX avoids 2 x Erfcx(x) - 2/sqrt(pi)
        z = -sp.sqrt(2) * self.args[0]
        return -2 / sp.sqrt(sp.pi) * InvMillsPlusX(z) / InvMills(z)

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.exp(x**2) * sp.erfc(x)


class LogErfcx(_StableFunction):
    """``log(exp(x**2) erfc(x))``: finite where ``Erfcx`` overflows (``x < -26.7``)."""

    _numba_name = "log_erfcx"
    _mp_name = "_st_log_erfcx"

    def fdiff(self, argindex=1):
        # Erfcx'/Erfcx with Erfcx(x) = sqrt(2/pi)/InvMills(z), z = -sqrt(2) x (as in Erfcx):
        # no 2x - 2/(sqrt(pi) erfcx(x)) cancellation for large x
        return -sp.sqrt(2) * InvMillsPlusX(-sp.sqrt(2) * self.args[0])

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.log(sp.exp(x**2) * sp.erfc(x))


class LogNdtr(_StableFunction):
    """``log Phi(x)``, Phi the standard normal cumulative distribution function."""

    _numba_name = "log_ndtr"
    _mp_name = "_st_log_ndtr"

    def fdiff(self, argindex=1):
        return InvMills(self.args[0])

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.log(sp.erfc(-x / sp.sqrt(2)) / 2)


class InvMills(_StableFunction):
    """Inverse Mills ratio ``phi(x) / Phi(x)`` = d log Phi(x) / dx."""

    _numba_name = "inv_mills"
    _mp_name = "_st_inv_mills"

    def fdiff(self, argindex=1):
        x = self.args[0]
        return -InvMills(x) * InvMillsPlusX(x)

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.sqrt(2 / sp.pi) * sp.exp(-x**2 / 2) / sp.erfc(-x / sp.sqrt(2))


class InvMillsPlusX(_StableFunction):
    """``x + phi(x)/Phi(x)`` (positive), without the cancellation for ``x -> -inf``."""

    _numba_name = "inv_mills_plus_x"
    _mp_name = "_st_inv_mills_plus_x"

    def fdiff(self, argindex=1):
        # exact; cancels for x -> -inf (a third derivative of log Phi, unused by channels)
        x = self.args[0]
        return 1 - InvMills(x) * InvMillsPlusX(x)

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return x + InvMills(x).rewrite(sp.erfc)


class LogNdtrDiff(_StableFunction):
    """``log(Phi(b) - Phi(a))`` for ``a < b``: the log-probability of a Gaussian interval.

    Evaluated without the ``1 - 1`` cancellation when both ends lie in the same tail
    (``Phi(-a) - Phi(-b)`` for ``a > 0``; ``log Phi(b) + log(-expm1(log Phi(a) -
    log Phi(b)))`` for ``b < 0``).  ``nan`` for ``a > b``, ``-inf`` for ``a == b``.
    """

    nargs = 2
    _numba_name = "log_ndtr_diff"
    _mp_name = "_st_log_ndtr_diff"

    def fdiff(self, argindex=1):
        a, b = self.args
        end = self.args[argindex - 1]
        # phi(end) / (Phi(b) - Phi(a)) as one exponential: no overflow or underflow
        # of the separate factors in the tails
        ratio = sp.exp(-end**2 / 2 - sp.log(2 * sp.pi) / 2 - LogNdtrDiff(a, b))
        return ratio if argindex == 2 else -ratio

    def _eval_rewrite_as_erfc(self, a, b, **kwargs):
        return sp.log((sp.erfc(-b / sp.sqrt(2)) - sp.erfc(-a / sp.sqrt(2))) / 2)


class Log1pExp(_StableFunction):
    """``log(1 + exp(x))`` (softplus)."""

    _numba_name = "log1pexp"
    _mp_name = "_st_log1pexp"

    def fdiff(self, argindex=1):
        return Expit(self.args[0])

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return sp.log(1 + sp.exp(x))


class Expit(_StableFunction):
    """Logistic sigmoid ``1 / (1 + exp(-x))``."""

    _numba_name = "expit"
    _mp_name = "_st_expit"

    def fdiff(self, argindex=1):
        # 1 - Expit(x) = Expit(-x): no cancellation for large x
        return Expit(self.args[0]) * Expit(-self.args[0])

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return 1 / (1 + sp.exp(-x))


#: the one-argument stable functions
STABLE_FUNCTIONS = (Erfcx, LogErfcx, LogNdtr, InvMills, InvMillsPlusX, Log1pExp, Expit)
#: every stable function, by class name (for ``sympify``/``lambdify`` namespaces)
ALL_STABLE_FUNCTIONS = STABLE_FUNCTIONS + (LogNdtrDiff,)
