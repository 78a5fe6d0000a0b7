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
| ``Erfcx(x)`` | exp(x^2) erfc(x) | 2 x Erfcx(x) - 2/sqrt(pi) |
| ``LogNdtr(x)`` | log Phi(x) | sqrt(2/pi) / Erfcx(-x/sqrt 2) |
| ``Log1pExp(x)`` | log(1 + e^x) | Expit(x) |
| ``Expit(x)`` | 1/(1 + e^-x) | Expit(x) (1 - Expit(x)) |
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


def mp_log_ndtr(x):
    x = mpmath.mpf(x)
    with mpmath.extraprec(10):
        if x > 0:
            return +mpmath.log1p(-mpmath.ncdf(-x))
        return +mpmath.log(mpmath.ncdf(x))


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
    "_st_log_ndtr": mp_log_ndtr,
    "_st_log1pexp": mp_log1pexp,
    "_st_expit": mp_expit,
}


class _StableFunction(sp.Function):
    """Base: one real argument, opaque to SymPy's automatic rewriting."""

    nargs = 1
    _numba_module = _NUMBA_MODULE
    _numba_name: str = ""
    _mp_name: str = ""
    is_real = True

    @classmethod
    def _mp_impl(cls):
        return MPMATH_NAMESPACE[cls._mp_name]

    def _eval_evalf(self, prec):
        arg = self.args[0]._eval_evalf(prec)
        if arg is None or not arg.is_Number:
            return None
        with mpmath.workprec(prec):
            value = self._mp_impl()(mpmath.mpf(arg._to_mpmath(prec)))
        return sp.Float._new(value._mpf_, prec)

    def _pythoncode(self, printer):
        return f"{self._numba_module}.{self._numba_name}({printer._print(self.args[0])})"

    def _mpmathcode(self, printer):
        return f"{self._mp_name}({printer._print(self.args[0])})"

    # SymPy's lambdify uses the printer's method name "_mpmathcode"
    _print_mpmath = _mpmathcode


class Erfcx(_StableFunction):
    """Scaled complementary error function ``exp(x**2) * erfc(x)``."""

    _numba_name = "erfcx"
    _mp_name = "_st_erfcx"

    def fdiff(self, argindex=1):
        x = self.args[0]
        return 2 * x * Erfcx(x) - 2 / sp.sqrt(sp.pi)

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.exp(x**2) * sp.erfc(x)


class LogNdtr(_StableFunction):
    """``log Phi(x)``, Phi the standard normal cumulative distribution function."""

    _numba_name = "log_ndtr"
    _mp_name = "_st_log_ndtr"

    def fdiff(self, argindex=1):
        x = self.args[0]
        return sp.sqrt(2 / sp.pi) / Erfcx(-x / sp.sqrt(2))

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.log(sp.erfc(-x / sp.sqrt(2)) / 2)


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
        e = Expit(self.args[0])
        return e * (1 - e)

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return 1 / (1 + sp.exp(-x))


STABLE_FUNCTIONS = (Erfcx, LogNdtr, Log1pExp, Expit)
