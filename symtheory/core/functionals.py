"""Linear functionals of a spectral law, reduced symbolically and evaluated numerically.

A model often needs ``int f(x, mu(x), H(x)) dx`` for integrands that are polynomial
in ``H`` and Laurent polynomials in ``x``, times ``mu``.  Many such integrals have
closed values for *every* probability density (with ``H`` its Hilbert transform
``P.V. int mu(t)/(x - t) dt``):

* ``int mu = 1``;  ``int x^k mu`` = the k-th moment (from the large-z expansion of
  the law's polynomial, :func:`freeprob.large_z_moments`);
* ``int H mu = 0`` and ``int x H mu = 1/2`` (antisymmetrize the double integral);
* ``int H^2 mu = (pi^2/3) int mu^3`` (Tricomi's identity for the finite Hilbert
  transform, cf. the rectangular RIE paper, Troiani et al. arXiv:2203.07752);
* for even laws, ``int x^(2k+1) mu = 0`` and ``int H mu / x = 0``.

:func:`reduce_integral` applies them and leaves the remaining integrals as symbols;
:class:`LinearSpectralFunctional` then evaluates the reduced expression with a
generated kernel, computing only the integrals whose coefficient is non-zero at the
given parameters (so ``(beta - 1)^2 int mu/x^2`` is never evaluated as ``0 * inf``).
Each identity is checked numerically in ``tests/bsr/test_spectral.py``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from .codegen import Kernel
from .result import Result, alias


def _integral_symbol(integrand, x, mu, H):
    name = str(integrand).replace("**", "^").replace("*", "").replace(" ", "")
    return sp.Symbol(f"I[{name}]")


def reduce_integral(integrand, x, mu, H, *, moments=(), even=False):
    """Rewrite ``int integrand dx`` with the identities above.

    Returns ``(expr, remaining)`` where ``remaining`` maps each new integral symbol
    to its integrand.
    """
    e = sp.expand(integrand)
    result = sp.Integer(0)
    remaining: dict = {}
    for term in sp.Add.make_args(e):
        coeff, rest = term.as_independent(x, mu, H, as_Add=False)
        powers = rest.as_powers_dict()
        a = sp.sympify(powers.get(x, 0))
        b = sp.sympify(powers.get(H, 0))
        c = sp.sympify(powers.get(mu, 0))
        if set(powers) - {x, mu, H} or c != 1 or not (a.is_integer and b.is_integer) or b < 0:
            raise ValueError(f"cannot reduce term {term}: need mu * x^a * H^b")
        if even and b == 0 and a % 2 == 1:
            continue
        if b == 0 and a >= 0:
            if a >= len(moments):
                raise ValueError(f"moment {a} not supplied")
            result += coeff * moments[a]
            continue
        if b == 1 and a == 0:
            continue
        if b == 1 and a == 1:
            result += coeff * sp.Rational(1, 2)
            continue
        if b == 1 and a == -1 and even:
            continue
        if b == 2 and a == 0:
            sym = _integral_symbol(mu**3, x, mu, H)
            remaining[sym] = mu**3
            result += coeff * sp.pi**2 / 3 * sym
            continue
        sym = _integral_symbol(rest, x, mu, H)
        remaining[sym] = rest
        result += coeff * sym
    return sp.simplify(result), remaining


@dataclass
class FunctionalValue(Result):
    """A functional's ``value`` with ``error`` (``"estimate"``: ``sum_i |coefficient_i| *``
    the error estimate of ``integral_i``), the ``integrals`` and their ``errors`` by
    symbol, the quadrature ``nodes`` (the ``iterations``); ``converged``: ``error <= rtol
    |value|`` (+ a floor of 1e-300)."""

    integrals: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    error_kind: str = field(default="estimate", kw_only=True)
    method: str = field(default="tanh-sinh quadrature of the reduced integrals", kw_only=True)

    nodes = alias("iterations", "Quadrature nodes used (the iterations).")


class LinearSpectralFunctional:
    """``expr(params, I_1..I_k)`` with ``I_j = int f_j(x, mu, H) dx`` over a law.

    ``expr`` must be linear in the integral symbols; an integral whose coefficient
    vanishes at the given parameters is not computed (its value is reported as 0).
    """

    def __init__(self, law, name, expr, integrals: dict, x, mu, H, extra_params=()):
        self.law = law
        self.name = name
        self.expr = sp.sympify(expr)
        self.integral_symbols = list(integrals)
        self.integrands = [integrals[s] for s in self.integral_symbols]
        for s in self.integral_symbols:
            if sp.diff(self.expr, s, 2) != 0:
                raise ValueError(f"{name}: expression is not linear in {s}")
        params = tuple(law.params) + tuple(extra_params)
        self.params = params
        self.extra_params = tuple(extra_params)
        ivars = [sp.Symbol(f"I{j}") for j in range(len(self.integral_symbols))]
        self._ivars = ivars
        sub = dict(zip(self.integral_symbols, ivars))
        expanded = sp.expand(self.expr.xreplace(sub))
        # factored coefficients vanish exactly where they should (e.g. (t**2 - 1)**2 at t = 1)
        coeffs = [sp.factor(expanded.coeff(v)) for v in ivars]
        rest = sp.factor(sp.expand(expanded - sum(c * v for c, v in zip(coeffs, ivars))))
        body = rest + sum(c * v for c, v in zip(coeffs, ivars))
        self.value_kernel = Kernel(f"{law.name}_{name}_value", params + tuple(ivars), [body],
                                   doc=f"{name} from its spectral integrals")
        self.coeff_kernel = Kernel(f"{law.name}_{name}_coeffs", params, coeffs,
                                   doc=f"coefficients of the integrals in {name}")
        self.x, self.mu, self.H = x, mu, H

    def integrand_kernel_for(self, which=None):
        """Kernel of the integrands with indices ``which`` (all by default)."""
        which = tuple(range(len(self.integrands))) if which is None else tuple(which)
        key = self.name if len(which) == len(self.integrands) else \
            f"{self.name}_{'_'.join(map(str, which))}"
        return self.law.integrand_kernel(key, [self.integrands[i] for i in which],
                                         self.x, self.mu, self.H)

    @property
    def integrand_kernel(self):
        return self.integrand_kernel_for(None)

    def evaluate(self, law_params, extra=(), rtol=1e-11, support=None) -> FunctionalValue:
        """Value, propagated error estimate and integrals at the given parameters.

        Integrals are refined to ``rtol`` each; convergence is judged on the error
        propagated to the functional (an integral multiplied by a tiny coefficient
        need not be known to ``rtol``).  A :class:`SpectralAccuracyWarning` is issued
        when the propagated error exceeds ``100 * rtol`` times the value.
        """
        params = tuple(law_params) + tuple(extra)
        coeffs = self.coeff_kernel(*params)
        needed = coeffs != 0
        ints = np.zeros(len(self.integral_symbols))
        errs = np.zeros(len(self.integral_symbols))
        nodes = 0
        converged = True
        if needed.any():
            which = np.flatnonzero(needed)
            res = self.law.integrate(self.integrand_kernel_for(which), *law_params, rtol=rtol,
                                     support=support, warn=False)
            ints[which] = res.values
            errs[which] = res.errors
            nodes = res.nodes
        value = float(self.value_kernel(*params, *ints)[0])
        error = float(np.sum(np.abs(coeffs) * errs))
        converged = error <= rtol * abs(value) + 1e-300
        if error > 100 * rtol * abs(value) + 1e-300:
            from .spectral import SpectralAccuracyWarning

            warnings.warn(f"{self.name}: estimated error {error:.3g} of value {value:.6g} at "
                          f"{params} exceeds 100 x rtol", SpectralAccuracyWarning, stacklevel=2)
        return FunctionalValue(value=value, error=error,
                               integrals=dict(zip(map(str, self.integral_symbols), ints)),
                               errors=dict(zip(map(str, self.integral_symbols), errs)),
                               iterations=nodes, converged=converged)

    def evaluate_mp(self, law_params, extra=(), dps=30, rule="edge"):
        """The value in mpmath, to about ``dps`` significant digits (``rule``: the
        quadrature of :meth:`AlgebraicSpectralLaw.mp_integrate
        <symtheory.core.spectral.AlgebraicSpectralLaw.mp_integrate>`).

        The value ``rest + sum_i c_i I_i`` can cancel: BSR's mmse_RIE at Delta = 1e6 is
        ~1 from terms of ~1e6, so 20 digits gave 13.  The digits lost,
        ``log10((|rest| + sum_i |c_i I_i|) / |value|)``, are measured, and the evaluation
        is repeated with the working precision raised by them (plus a guard of 5) until
        the digits lost at the precision used are covered by it.
        """
        import mpmath

        params = tuple(law_params) + tuple(extra)

        def at(work):
            with mpmath.workdps(work):
                coeffs = self.coeff_kernel.mp(*params)
                which = [i for i, c in enumerate(coeffs) if c != 0]
                vals = self.law.mp_integrate(self.integrand_kernel_for(which), *law_params,
                                             dps=work, rule=rule)
                ints = [mpmath.mpf(0)] * len(coeffs)
                for i, val in zip(which, vals):
                    ints[i] = val
                value = self.value_kernel.mp(*params, *ints)[0]
                rest = self.value_kernel.mp(*params, *([mpmath.mpf(0)] * len(coeffs)))[0]
                size = abs(rest) + sum(abs(c * v) for c, v in zip(coeffs, ints))
                if size == 0:
                    return value, 0
                if value == 0:
                    return value, work
                return value, max(0, int(mpmath.ceil(mpmath.log10(size / abs(value)))))

        value, lost = at(dps)
        work, passes = dps, 1
        # repeated until the precision used covers the digits lost at it: a value that
        # lost all its digits is itself wrong, and so is the loss measured from it (Delta =
        # 1e30 at 30 digits: -2e21 measured 9 lost digits, 44 digits gave 1 + 1.6e-10; the
        # loss is 30 digits)
        # (an exact 0 is recomputed once, at more than twice the digits, and then kept)
        while lost > 2 and dps + lost + 5 > work and not (value == 0 and passes > 1):
            if passes == 9:
                raise ArithmeticError(f"the functional cancels more digits at every precision "
                                      f"(last: {lost} lost at {work} digits)")
            work = dps + lost + 5
            value, lost = at(work)
            passes += 1
        with mpmath.workdps(dps):
            return +value
