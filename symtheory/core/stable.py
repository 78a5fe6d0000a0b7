"""Rewrite SymPy expressions into numerically stable forms before code generation.

SymPy's own canonical forms are unstable in the tails: ``erfc(-x)`` is stored as
``2 - erfc(x)``, an integral of a Gaussian over a half-line comes out as
``1 - erfc(x)/2``, and ``log`` of either underflows to ``log(0)`` for ``x ~ -40``.
:func:`stabilize` maps such expressions onto the stable functions of
:mod:`symtheory.core.special` (Numba and mpmath twins, stable derivatives):

===================================  ======================================
input (any scaling, any argument)    output
===================================  ======================================
``erfc(x)``                          ``2 Phi(-sqrt(2) x)``
``erf(x)``                           ``1 - 2 Phi(-sqrt(2) x)``
``c - c Phi(t)``  (so ``2 - erfc``,   ``c Phi(-t)``
``1 + erf``, ``erfc(-x)``)
``c Phi(t) - c Phi(s)``, ``t > s``    ``c exp(LogNdtrDiff(s, t))``
``exp(E) Phi(t)**k``, E = k t^2/2 + R ``exp(R) (Erfcx(-t/sqrt 2)/2)**k``
                                      (so ``exp(x**2) erfc(x) -> Erfcx(x)``)
``Phi(t)``                           ``exp(LogNdtr(t))``
``log(1 + exp(x))``                  ``Log1pExp(x)``
``log(a exp(X) + b exp(Y))``          ``log a + X + Log1pExp(Y - X + log(b/a))``
                                     (``Erfcx(u)`` as ``exp(LogErfcx(u))``)
``1/(1 + exp(-x))``                  ``Expit(x)``
``r + k Expit(u)``, ``r + k`` cancels ``r Expit(-u) + (r + k) Expit(u)``
                                     (the chain rule of ``Log1pExp``: no
                                     ``r - r`` cancellation when ``Expit ~ 1``)
``log(exp(L) * ...)``                ``L + log(...)``  (``expand_log``)
===================================  ======================================

``Phi`` is an internal placeholder (the standard normal CDF) that SymPy cannot
"simplify" back; it never survives :func:`stabilize`.  The rules are identities;
``tests/glm/test_channels.py`` checks the rewritten expressions against the originals in
mpmath at high precision, and their float64 kernels in the tails.
"""
from __future__ import annotations

import sympy as sp

from .special import Erfcx, Expit, Log1pExp, LogErfcx, LogNdtr, LogNdtrDiff


class _Phi(sp.Function):
    """Placeholder for the standard normal CDF during rewriting (not printable)."""

    nargs = 1
    is_real = True
    is_positive = True


_SQRT2 = sp.sqrt(2)


def _phi_terms(add: sp.Add):
    """Split an Add into ``{t: coefficient}`` for its ``c * Phi(t)`` terms and the rest."""
    phis: dict = {}
    rest = []
    for term in add.args:
        coeff, factors = term.as_coeff_mul()
        phi = [f for f in factors if isinstance(f, _Phi)]
        others = [f for f in factors if not isinstance(f, _Phi)]
        if len(phi) == 1 and not any(f.has(_Phi) for f in others):
            c = coeff * sp.Mul(*others)
            t = phi[0].args[0]
            phis[t] = phis.get(t, 0) + c
        else:
            rest.append(term)
    return phis, rest


def _rewrite_add(e: sp.Add):
    if e.has(Expit):
        e = _rewrite_expit_complement(e)
        if not e.is_Add:
            return e
    phis, rest = _phi_terms(e)
    if not phis:
        return e
    constant = sp.Add(*[r for r in rest if not r.has(_Phi)])
    rest = [r for r in rest if r.has(_Phi)]
    out = []
    items = list(phis.items())
    used = set()
    # c - c Phi(t) = c Phi(-t): the complement without the 1 - 1 cancellation
    for i, (t, c) in enumerate(items):
        if constant != 0 and sp.simplify(constant + c) == 0:
            out.append(constant * _Phi(-t))
            constant = sp.Integer(0)
            used.add(i)
            break
    # c Phi(t) - c Phi(s), t > s: a Gaussian interval probability
    for i, (t, c) in enumerate(items):
        if i in used:
            continue
        for j, (s, d) in enumerate(items):
            if j in used or j == i or sp.simplify(c + d) != 0:
                continue
            if sp.simplify(t - s).is_positive:
                out.append(c * sp.exp(LogNdtrDiff(s, t)))
                used.update((i, j))
                break
    for i, (t, c) in enumerate(items):
        if i not in used:
            out.append(c * _Phi(t))
    return sp.Add(constant, *out, *rest)


def _rewrite_expit_complement(e: sp.Add):
    """``r + k Expit(u)`` -> ``r Expit(-u) + (r + k) Expit(u)`` when ``r + k`` cancels.

    The derivative of ``X + Log1pExp(Y - X)`` is ``X' + (Y' - X') Expit(Y - X)``: for
    ``Expit ~ 1`` it is ``Y'`` computed as ``X' - X' + Y'``, all digits lost when
    ``|Y'| << |X'|`` (the symmetric door's tail: 1e-23 from terms of 14).  Applied only
    if SymPy cancels ``r + k`` symbolically (it has fewer operations than ``k``)."""
    expits = {f for t in e.args for f in sp.Mul.make_args(t) if isinstance(f, Expit)}
    for ex in expits:
        k = e.coeff(ex)
        if k == 0 or k.has(ex):
            continue
        r = sp.expand(e - k * ex)
        if r == 0 or r.has(ex):
            continue
        total = sp.expand(r + k)
        if sp.count_ops(total) >= sp.count_ops(sp.expand(k)):
            continue
        return r * Expit(-ex.args[0]) + total * ex
    return e


def _rewrite_mul(e: sp.Mul):
    """``exp(E) Phi(t)**k`` with ``E = k t**2/2 + R`` -> ``exp(R) (Erfcx(-t/sqrt 2)/2)**k``.

    A huge exponential times a tiny CDF (or a tiny exponential over a tiny CDF, ``k <
    0``): the product is moderate but each factor over/underflows.  Applied only when
    ``R`` is simpler than ``E`` (the quadratic growth cancels)."""
    exps = [f for f in e.args if isinstance(f, sp.exp)]
    powers = [(f.base, f.exp) if f.is_Pow else (f, sp.Integer(1)) for f in e.args]
    phis = [(b, k) for b, k in powers if isinstance(b, _Phi) and k.is_integer]
    if len(phis) != 1:
        return e
    (phi, k), = phis
    t = phi.args[0]
    E = sp.Add(*[f.args[0] for f in exps])
    R = sp.simplify(E - k * t**2 / 2)
    if R != 0 and sp.count_ops(R) >= sp.count_ops(sp.expand(E)):
        return e
    keep = [f for f in e.args if not isinstance(f, sp.exp) and f is not phi
            and not (f.is_Pow and f.base is phi)]
    return sp.Mul(*keep) * sp.exp(R) * (Erfcx(-t / _SQRT2) / 2) ** k


def _rewrite_log(e: sp.log):
    arg = e.args[0]
    if arg.is_Add and len(arg.args) == 2:
        one, other = sorted(arg.args, key=lambda a: not a.is_Number)
        if one == 1 and isinstance(other, sp.exp):
            return Log1pExp(other.args[0])
        # log(a exp(X) + b exp(Y)) = log a + X + Log1pExp(Y - X + log(b/a)), a, b > 0:
        # a sum of two probabilities in logs, which underflows to log 0 (and its
        # derivative to 0/0) when both are below 1e-308; Erfcx(u) counts as
        # exp(LogErfcx(u)) (it overflows for u < -26.7)
        logs = [_log_of_positive_term(t) for t in arg.args]
        if len(logs) == 2 and None not in logs:
            X, Y = logs
            return X + Log1pExp(Y - X)
    return e


def _log_of_positive_term(t):
    """``log t`` for ``t = c exp(X)`` or ``c Erfcx(u)`` with ``c > 0`` (else None)."""
    c, x = t.as_independent(sp.exp, Erfcx, as_Add=False)
    if not c.is_positive:
        return None
    if isinstance(x, sp.exp):
        return sp.log(c) + x.args[0]
    if isinstance(x, Erfcx):
        return sp.log(c) + LogErfcx(x.args[0])
    return None


def _rewrite_pow(e: sp.Pow):
    # 1/(1 + exp(-x)) = Expit(x)
    if e.exp == -1 and e.base.is_Add and len(e.base.args) == 2:
        one, other = sorted(e.base.args, key=lambda a: not a.is_Number)
        if one == 1 and isinstance(other, sp.exp):
            return Expit(-other.args[0])
    return e


_RULES = {sp.Add: _rewrite_add, sp.Mul: _rewrite_mul, sp.log: _rewrite_log, sp.Pow: _rewrite_pow}


def _bottom_up(e):
    if not e.args or e.is_Atom:
        return e
    new = e.func(*[_bottom_up(a) for a in e.args])
    rule = _RULES.get(type(new)) or next((r for cls, r in _RULES.items()
                                         if isinstance(new, cls)), None)
    return rule(new) if rule is not None else new


def stabilize(expr):
    """``expr`` rewritten into the stable functions (see the module table).

    Works on any SymPy expression, ``Piecewise`` branches included; an expression with
    nothing to rewrite comes back unchanged (up to ``expand_log`` of logs of products
    that contain a stable function).
    """
    expr = sp.sympify(expr)
    if not expr.has(sp.erf, sp.erfc, sp.exp, sp.log, Expit):
        return expr
    e = expr.replace(sp.erf, lambda x: 1 - 2 * _Phi(-_SQRT2 * x))
    e = e.replace(sp.erfc, lambda x: 2 * _Phi(-_SQRT2 * x))
    e = _bottom_up(e)
    e = e.replace(_Phi, lambda t: sp.exp(LogNdtr(t)))
    # log(c exp(L)) -> log c + L; log(exp(L)) = L is automatic (L real)
    e = e.replace(lambda a: isinstance(a, sp.log) and a.has(LogNdtr, LogNdtrDiff),
                  lambda a: sp.expand_log(a, force=True))
    return _bottom_up(e) if e.has(sp.exp, sp.log) else e
