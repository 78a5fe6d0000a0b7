"""Output channels of generalized linear models, symbolically, checked at declaration.

A channel ``P_out(y | z)`` (``z`` the pre-activation) enters message passing and state
evolution only through ``Z_out(y; omega, V) = E_{z ~ N(omega, V)} P_out(y | z)`` (Eq. (9) of
arXiv:2502.00901 with ``P = M = 1``; Erba et al., arXiv:2410.18858, Sec. 6).
:class:`ScalarChannel` takes ``log Z_out`` as a SymPy expression, rewrites it into stable
functions (:func:`symtheory.core.stable.stabilize`) and derives

    g_out  = d log Z_out / d omega,      dg_out = d g_out / d omega

by ``sp.diff`` (the stable functions differentiate into stable functions), compiled
into one vectorized kernel over samples ``y, omega``.

:func:`likelihood_channel` derives ``Z_out`` itself from a likelihood: SymPy
integrates ``N(z; omega, V) P(y | z)`` piece by piece between the discontinuities of
``Heaviside``/``sign``/``Piecewise`` (SymPy's whole-line integral of a step function
with ``conds="none"`` is wrong: ``int N Heaviside(y z) = 1``).  Gaussian noise before
the output (``y ~ P(y | z + sqrt(Delta) xi)``) is declared as ``noise_variance`` and
enters as the variance ``V + Delta`` of the same Gaussian integral.

Every channel runs the identity checks of :mod:`symtheory.glm.checks.scalar` when it is
declared (``Z_out`` against quadrature, ``g_out`` against an independent derivative,
normalization, Nishimori, tower) and measures its float64 accuracy against mpmath
(``accuracy``); a failing identity raises :class:`~symtheory.glm.checks.scalar.ChannelCheckError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy as sp

from ...core import special, stable
from ...core.codegen import Kernel
from ...core.derive import cached_derivation
from ...core.validate import ParameterError
from ...core.validate import real as _real
from ..integrate.moments import Moments
from .channel import Channel


@dataclass(frozen=True)
class Likelihood:
    """A declared likelihood ``P(y | u)``, kept for the checks and for sampling.

    ``u = z`` without output noise, ``u = z + sqrt(noise_variance) xi`` with it; the
    Gaussian integral defining ``Z_out`` then has variance ``V + noise_variance``.
    ``breakpoints`` are the discontinuities in ``u`` (SymPy expressions in the params).
    """

    expr: sp.Expr
    y: sp.Symbol
    u: sp.Symbol
    noise_variance: sp.Expr
    breakpoints: tuple

    def log_likelihood(self, params, level=None):
        """Scalar ``log P(y | u)`` as a Python function of ``(y, u, *params)`` (or of
        ``(u, *params)`` at a fixed ``level`` of ``y``); stable functions call their Numba
        twins, steps are conditionals (``log 0 = -inf``)."""
        expr = self.expr if level is None else self.expr.subs(self.y, level)
        steps = {sp.Heaviside: lambda x, *h0: sp.Piecewise((0, x < 0), (1, True)),
                 sp.sign: lambda x: sp.Piecewise((-1, x < 0), (1, True))}
        for f, rule in steps.items():
            expr = expr.replace(f, rule)
        log_p = sp.piecewise_fold(sp.expand_log(sp.log(expr), force=True))
        log_p = stable.stabilize(log_p).replace(lambda a: a in (sp.zoo, -sp.oo), lambda a: -sp.oo)
        args = ((self.y,) if level is None else ()) + (self.u,) + tuple(params)
        return _scalar_function(args, log_p)

    def probability(self, params):
        """Vectorized ``P(y | u)`` of ``(y, u, *params)`` (for sampling)."""
        from ...core import special_numba

        names = {cls.__name__: np.vectorize(getattr(special_numba, cls._numba_name))
                 for cls in special.ALL_STABLE_FUNCTIONS}
        return sp.lambdify((self.y, self.u) + tuple(params), self.expr, modules=[names, "numpy"])


def _scalar_function(args, expr):
    """``expr`` as a plain-Python function of floats (``math`` + the Numba special functions)."""
    import symtheory
    import symtheory.core.special_numba  # noqa: F401  (the printed names resolve through it)

    return sp.lambdify(args, expr, modules=[{"symtheory": symtheory}, "math"])


def _domain(sym):
    """Valid range of a parameter from its SymPy assumptions: (low, low_open)."""
    if sym.is_positive:
        return 0.0, True
    if sym.is_nonnegative:
        return 0.0, False
    return None, False


def _differentiate(expr, omega):
    """``d expr / d omega`` keeping a ``Piecewise``'s ``nan`` default branch ``nan``
    (``sp.diff`` turns it into 0, which would silently accept an invalid ``y``)."""
    if isinstance(expr, sp.Piecewise):
        return sp.Piecewise(*[(sp.nan if e is sp.nan else stable.stabilize(sp.diff(e, omega)), c)
                              for e, c in expr.args])
    return stable.stabilize(sp.diff(expr, omega))


class ScalarChannel(Channel):
    """GLM output channel from ``log Z_out(y; omega, V, *params)`` (see module docstring).

    ``g_out`` and ``dg_out`` are derived by ``sp.diff`` after rewriting into stable
    functions and compiled into one vectorized kernel; the identity checks of
    :mod:`symtheory.glm.checks.scalar` run at declaration (``check``).  Eq. (9) of
    arXiv:2502.00901 with ``P = M = 1``; Erba et al., arXiv:2410.18858, Sec. 6.

    Parameters
    ----------
    name : str
        Identifier (kernel names).
    log_Z : sympy.Expr
        ``log Z_out``; for discrete outputs either one expression valid at every level or
        a ``Piecewise`` in ``y``.
    y, omega, V : sympy.Symbol
        The symbols of the output, the prior mean and the prior variance.
    params : tuple of sympy.Symbol, optional
        The channel's parameters (their assumptions set their valid ranges).
    y_levels : list of float, optional
        The finitely many values of ``y`` (``None``: ``y`` is real-valued).
    likelihood : Likelihood, optional
        The likelihood the channel was derived from, if any (checks integrate it).
    sampler : callable, optional
        ``sampler(z, rng, *params) -> y`` for continuous outputs; discrete outputs with a
        likelihood sample from it.
    check_ranges : dict, optional
        ``{param: (low, high)}`` from which the declaration checks draw parameters
        (default ``(0.1, 2)`` for positive parameters, ``(-2, 2)`` otherwise).
    check : bool, optional
        Run :func:`symtheory.glm.checks.scalar.declaration_checks` now (default).

    Attributes
    ----------
    accuracy : float
        Measured float64 accuracy of the kernel against mpmath.
    checks : list
        The identity checks run and their discrepancies.

    Examples
    --------
    >>> import sympy as sp
    >>> from symtheory.glm import ScalarChannel
    >>> y, omega = sp.symbols("y omega", real=True)
    >>> V = sp.Symbol("V", positive=True)
    >>> probit = ScalarChannel("probit", sp.log(sp.erfc(-y * omega / sp.sqrt(2 * (V + 1))) / 2),
    ...                        y, omega, V, y_levels=[-1, 1])
    >>> probit.levels, probit.accuracy < 1e-10
    ((-1.0, 1.0), True)
    """

    def __init__(self, name, log_Z, y, omega, V, params=(), *, y_levels=None,
                 likelihood: Likelihood | None = None, sampler: Callable | None = None,
                 check_ranges=None, check: bool = True):
        self.name = name
        self.y, self.omega, self.V = y, omega, V
        self.params = tuple(params)
        self.levels = None if y_levels is None else tuple(float(v) for v in y_levels)
        self.likelihood = likelihood
        self._sampler = sampler
        self.check_ranges = {p: _default_range(p) for p in self.params}
        self.check_ranges.update(check_ranges or {})
        self.log_Z = self._stable_log_partition(sp.sympify(log_Z))
        self.g_out = _differentiate(self.log_Z, omega)
        self.dg_out = _differentiate(self.g_out, omega)
        self.kernel = Kernel(f"channel_{name}", (y, omega, V) + self.params,
                             [self.log_Z, self.g_out, self.dg_out], vector_args=(y, omega),
                             doc=f"log Z_out, g_out and d g_out/d omega of the {name} channel")
        self.accuracy = float("nan")
        self.checks: list = []
        self.check_seconds = self.check_cpu_seconds = 0.0
        if check:
            from ..checks.scalar import declaration_checks

            declaration_checks(self)

    def _stable_log_partition(self, log_Z):
        # no sp.simplify here: on the Gaussian log-partition it divides by V (a
        # cancellation for V << Delta); declarations pass log Z_out already simple
        if self.levels is None:
            return stable.stabilize(log_Z)
        branches = [(stable.stabilize(log_Z.subs(self.y, level)), sp.Eq(self.y, level))
                    for level in self.levels]
        return sp.Piecewise(*branches, (sp.nan, True))

    # ------------------------------------------------------------------ evaluation
    def _validated(self, y, omega, V, params):
        if len(params) != len(self.params):
            raise TypeError(f"channel {self.name!r} takes parameters "
                            f"{[str(p) for p in self.params]}, got {len(params)} values")
        V = _real("V", V, low=0.0, low_open=True)
        vals = []
        for p, v in zip(self.params, params):
            low, low_open = _domain(p)
            vals.append(_real(str(p), v, low=low, low_open=low_open))
        y, omega = np.broadcast_arrays(np.asarray(y, dtype=float), np.asarray(omega, dtype=float))
        if self.levels is not None and not np.all(np.isin(y, self.levels)):
            bad = y[~np.isin(y, self.levels)].ravel()[0]
            raise ParameterError(f"y must take values in {self.levels} for the {self.name} "
                                 f"channel, got {bad:g}")
        return y, omega, V, vals

    def _evaluate(self, y, omega, V, params):
        y, omega, V, vals = self._validated(y, omega, V, params)
        out = self.kernel.vec(y.ravel(), omega.ravel(), V, *vals)
        return out.reshape(y.shape + (3,))

    def moments(self, y, omega, V, *params) -> Moments:
        """Return the posterior moments from the derived ``g_out`` and ``dg_out``.

        Tweedie: ``E[z|y] - omega = V g_out``, ``Cov(z|y) - V = V^2 dg_out``.  ``V`` a
        scalar: ``y`` and ``omega`` broadcast elementwise (scalar layout).  ``V`` a ``1 x 1``
        matrix: the multi-index layout with ``P = M = 1``, ``omega`` of shape ``(n, 1, 1)``
        (or any shape holding ``n`` values) and ``y`` holding ``n`` values.

        Parameters
        ----------
        y : array_like
            Observations (in ``y_levels`` for a discrete channel).
        omega : array_like
            Prior means.
        V : float or array_like
            Prior variance (> 0), a number or a ``1 x 1`` matrix.
        *params : float
            The channel's parameters, in declaration order.

        Returns
        -------
        Moments
            ``log_partition``, ``mean_shift``, ``cov_shift``, ``omega``, ``V``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import sign_channel
        >>> channel = sign_channel()                  # y = sign(z + sqrt(delta) xi)
        >>> m = channel.moments(np.array([1.0, -1.0]), np.array([0.0, 0.0]), 0.5, 0.1)
        >>> g = np.sqrt(2 / np.pi) / np.sqrt(0.5 + 0.1)   # g_out(y = +-1, omega = 0) = +-2 phi(0)/sqrt(V + delta)
        >>> bool(np.allclose(m.log_partition, np.log(0.5))), bool(np.allclose(m.mean_shift, [0.5 * g, -0.5 * g]))
        (True, True)
        """
        if np.ndim(V) == 2:
            V = np.asarray(V, dtype=float)
            if V.shape != (1, 1):
                raise ParameterError(f"a scalar channel takes V as a number or a 1 x 1 matrix, "
                                     f"got shape {V.shape}")
            omega = np.asarray(omega, dtype=float).reshape(-1, 1, 1)
            y = np.asarray(y, dtype=float).reshape(omega.shape)
            out = self._evaluate(y, omega, V[0, 0], params)
            v = float(V[0, 0])
            return Moments(out[:, 0, 0, 0], v * out[..., 1], v * (v * out[..., 2]), omega, V)
        out = self._evaluate(y, omega, V, params)
        v = float(V)
        return Moments(out[..., 0], v * out[..., 1], v * (v * out[..., 2]),
                       np.broadcast_to(np.asarray(omega, dtype=float), out.shape[:-1]), v)

    def sample(self, z, rng, *params):
        """Draw ``y ~ P_out(. | z)`` for an array ``z``.

        Parameters
        ----------
        z : array_like
            Pre-activations.
        rng : numpy.random.Generator
            Source of randomness.
        *params : float
            The channel's parameters, in declaration order.

        Returns
        -------
        numpy.ndarray
            Outputs, the shape of ``z``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import sign_channel
        >>> channel = sign_channel()                  # y = sign(z + sqrt(delta) xi)
        >>> channel.sample(np.array([3.0, -3.0]), np.random.default_rng(0), 0.01)
        array([ 1., -1.])
        """
        z = np.asarray(z, dtype=float)
        if self._sampler is not None:
            return np.asarray(self._sampler(z, rng, *params), dtype=float)
        if self.likelihood is None or self.levels is None:
            raise NotImplementedError(
                f"channel {self.name!r} cannot sample: declare a likelihood with y_levels, "
                "or pass sampler=")
        lik = self.likelihood
        noise = float(lik.noise_variance.subs(dict(zip(self.params, params))))
        u = z + np.sqrt(noise) * rng.standard_normal(z.shape) if noise > 0 else z
        prob = self.likelihood.probability(self.params)
        p = np.stack([np.broadcast_to(prob(level, u, *params), u.shape).astype(float)
                      for level in self.levels], axis=-1)
        cdf = np.cumsum(p, axis=-1)
        index = (rng.random(u.shape)[..., None] * cdf[..., -1:] > cdf).sum(axis=-1)
        return np.asarray(self.levels)[index]

    def __repr__(self):
        return f"ScalarChannel({self.name!r}, log_Z={self.log_Z}, accuracy={self.accuracy:.2g})"


def _default_range(p):
    return (0.1, 2.0) if p.is_positive or p.is_nonnegative else (-2.0, 2.0)


# ---------------------------------------------------------------------- derivation
def _discontinuities(expr, u):
    """Real points in ``u`` where ``Heaviside``, ``sign`` or a ``Piecewise`` jumps."""
    args = [h.args[0] for h in expr.atoms(sp.Heaviside)]
    args += [s.args[0] for s in expr.atoms(sp.sign)]
    for pw in expr.atoms(sp.Piecewise):
        for _, cond in pw.args:
            for rel in cond.atoms(sp.core.relational.Relational):
                args.append(rel.lhs - rel.rhs)
    points = set()
    for a in args:
        if not a.has(u):
            continue
        for r in sp.solve(a, u):
            if r.is_real is not False and not r.has(sp.I):
                points.add(sp.simplify(r))
    try:
        return sorted(points, key=lambda r: sp.N(r, 30) if r.is_number else r)
    except TypeError:
        raise ParameterError(f"cannot order the discontinuities {sorted(map(str, points))} of "
                             "the likelihood: give the thresholds numbers or sign assumptions") from None


def _on_piece(expr, u, point):
    """``expr`` with every step function replaced by its value at ``u = point``."""
    def side(arg):
        v = sp.simplify(arg.subs(u, point))
        if v.is_positive:
            return 1
        if v.is_negative:
            return -1
        if v.is_number:
            # a number SymPy cannot order symbolically (e.g. erfinv): its value decides, when
            # clearly nonzero at 50 digits
            val = sp.N(v, 50)
            if val.is_real and abs(val) > sp.Float("1e-40"):
                return 1 if val > 0 else -1
        raise ParameterError(f"the sign of {arg} on the piece around u = {point} is undecided")

    expr = sp.sympify(expr).replace(sp.Heaviside,
                                    lambda arg, *h0: sp.Integer(1 if side(arg) > 0 else 0))
    expr = expr.replace(sp.sign, lambda arg: sp.Integer(side(arg)))

    def branch(*pairs):
        for e, cond in pairs:
            if cond.subs(u, point) == sp.true:
                return e
        raise ParameterError(f"no Piecewise branch holds at u = {point}")

    return expr.replace(sp.Piecewise, lambda *pairs: branch(*pairs))


def _gaussian_integral(likelihood, u, omega, variance, *, split):
    """``int N(u; omega, variance) likelihood du`` by SymPy (piecewise if ``split``).

    On a piece where the likelihood does not depend on ``u`` the integral is that
    constant times the difference of the Gaussian CDF (``sympy.stats``), which SymPy's
    ``integrate`` reaches too but in seconds and in a form with removable singularities
    (``1/(1 - omega)``)."""
    from sympy.stats import Normal, cdf

    gauss = sp.exp(-(u - omega) ** 2 / (2 * variance)) / sp.sqrt(2 * sp.pi * variance)
    if not split:
        return sp.integrate(gauss * likelihood, (u, -sp.oo, sp.oo), conds="none")
    gauss_cdf = cdf(Normal("u_", omega, sp.sqrt(variance)))
    cuts = [-sp.oo] + _discontinuities(likelihood, u) + [sp.oo]
    total = sp.Integer(0)
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        inside = (0 if lo is -sp.oo and hi is sp.oo else hi - 1 if lo is -sp.oo
                  else lo + 1 if hi is sp.oo else (lo + hi) / 2)
        piece = _on_piece(likelihood, u, inside)
        if piece == 0:
            continue
        if not piece.has(u):
            total += piece * (gauss_cdf(hi) - gauss_cdf(lo))
        else:
            total += sp.integrate(gauss * piece, (u, lo, hi), conds="none")
    return total


def _cancel_rational_part(expr):
    """Cancel the rational part of a sum: SymPy's Gaussian integrals come out as
    ``(Delta (omega - y)^2/(V + Delta) - (omega - y)^2)/(2 V)``, which is
    ``-(omega - y)^2/(2 (V + Delta))`` but loses ``log10(Delta/V)`` digits for small V."""
    if not expr.is_Add:
        return expr
    rational = [t for t in expr.args if t.free_symbols and t.is_rational_function()]
    rest = [t for t in expr.args if not (t.free_symbols and t.is_rational_function())]
    return sp.Add(sp.factor(sp.cancel(sp.Add(*rational))), *rest)


@cached_derivation(stable, special)
def _derive_log_partitions(likelihood_s, y_s, u_s, levels, noise_s, split):
    """``[(level, log Z_out)]`` (level ``None`` for real ``y``) from srepr strings
    (``srepr`` keeps SymPy assumptions, so the disk cache cannot confuse symbols)."""
    likelihood, y, u, noise = (sp.sympify(s) for s in (likelihood_s, y_s, u_s, noise_s))
    omega = sp.Symbol("omega", real=True)
    V = sp.Symbol("V", positive=True)
    out = []
    for level in (levels if levels is not None else (None,)):
        lik = likelihood if level is None else likelihood.subs(y, level)
        Z = _gaussian_integral(lik, u, omega, V + noise, split=split)
        if Z.has(sp.Integral):
            raise ValueError(f"SymPy could not integrate the likelihood against the Gaussian "
                             f"(level y = {level}): {Z}")
        # a sum of Gaussian interval probabilities is rewritten into its stable form as
        # SymPy returns it: simplify() first turns c (Phi(t) - Phi(s)) into a difference of
        # separate exponentials of LogNdtr, which cancels in the tails (a symbolic
        # threshold loses its interval); other integrals are simplified as before
        stable_Z = stable.stabilize(Z)
        Z = stable_Z if stable_Z.has(special.LogNdtrDiff) else sp.simplify(Z)
        out.append((level, stable.stabilize(_cancel_rational_part(
            sp.expand_log(sp.log(Z), force=True)))))
    return out, omega, V


def likelihood_channel(name, likelihood, y, z, params=(), *, y_levels=None, noise_variance=0,
                       split_discontinuities=True, sampler=None, check_ranges=None,
                       check=True) -> ScalarChannel:
    """Declare a channel from a likelihood: ``Z_out = int N(z; omega, V + noise_variance) P(y | z) dz``.

    ``likelihood`` is ``P(y | z)`` (a density in ``y``, or probabilities over
    ``y_levels``); with ``noise_variance = Delta`` it is the likelihood of
    ``u = z + sqrt(Delta) xi`` and the channel is ``y ~ P(. | z + sqrt(Delta) xi)``.
    SymPy integrates each level separately, splitting the real line at the
    discontinuities of step functions (``split_discontinuities=False`` trusts SymPy's
    whole-line integral -- wrong for steps, and then refused by the checks).  The
    result is verified numerically at declaration (``check``).

    Parameters
    ----------
    name : str
        Identifier (kernel names).
    likelihood : sympy.Expr
        ``P(y | z)``.
    y, z : sympy.Symbol
        The output and pre-activation symbols of ``likelihood``.
    params : tuple of sympy.Symbol, optional
        Parameters of the likelihood.
    y_levels : list of float, optional
        The values of a discrete ``y``.
    noise_variance : sympy.Expr or float, optional
        Gaussian noise ``Delta`` before the output.
    split_discontinuities : bool, optional
        Integrate piece by piece between the discontinuities.
    sampler : callable, optional
        ``sampler(z, rng, *params) -> y`` (continuous outputs).
    check_ranges : dict, optional
        Parameter ranges of the declaration checks.
    check : bool, optional
        Run the declaration checks.

    Returns
    -------
    ScalarChannel
        The derived channel.

    Examples
    --------
    >>> import sympy as sp
    >>> from symtheory.glm import likelihood_channel
    >>> y, z = sp.symbols("y z", real=True)
    >>> channel = likelihood_channel("noisy_sign", sp.Heaviside(y * z), y, z, y_levels=[-1, 1],
    ...                              noise_variance=sp.Rational(1, 10))
    >>> channel.log_Z.args[1]
    (LogNdtr(sqrt(10)*omega/sqrt(10*V + 1)), Eq(y, 1.0))
    """
    noise = sp.sympify(noise_variance)
    levels = None if y_levels is None else tuple(sp.nsimplify(v) for v in y_levels)
    branches, omega, V = _derive_log_partitions(
        sp.srepr(likelihood), sp.srepr(y), sp.srepr(z), levels, sp.srepr(noise),
        bool(split_discontinuities))
    if levels is None:
        log_Z = branches[0][1]
    else:
        log_Z = sp.Piecewise(*[(e, sp.Eq(y, lv)) for lv, e in branches], (sp.nan, True))
    lik = Likelihood(likelihood, y, z, noise, tuple(_discontinuities(likelihood, z)))
    return ScalarChannel(name, log_Z, y, omega, V, params, y_levels=y_levels, likelihood=lik,
                         sampler=sampler, check_ranges=check_ranges, check=check)


#: the former name of :func:`likelihood_channel`
gaussian_convolution_channel = likelihood_channel


def threshold_channel(name, thresholds, levels, *, noise=True) -> ScalarChannel:
    """Declare a quantized output ``y = levels[k]`` when ``t_k < z + sqrt(delta) xi <= t_(k+1)``.

    ``Z_out(levels[k]) = Phi(b) - Phi(a)``, ``a, b = (t_k - omega, t_(k+1) -
    omega)/sqrt(V + delta)``, is derived by integrating the Gaussian over each interval
    and rewritten into ``LogNdtr`` (half lines) and ``LogNdtrDiff`` (finite intervals).

    Parameters
    ----------
    name : str
        Identifier (kernel names).
    thresholds : list
        The ``K - 1`` increasing cut points between ``K`` levels (numbers or SymPy
        expressions in declared parameters).
    levels : list of float
        The ``K`` output values.
    noise : bool, optional
        Gaussian noise ``delta`` before the quantizer; ``False``: noiseless (``Z_out``
        then needs ``V > 0``).

    Returns
    -------
    ScalarChannel
        The derived channel; its parameters are ``delta`` (with ``noise``) and the
        thresholds' symbols.

    Examples
    --------
    >>> from symtheory.glm import threshold_channel
    >>> channel = threshold_channel("ternary", [-1, 1], [-1, 0, 1])
    >>> channel.levels, [str(p) for p in channel.params]
    ((-1.0, 0.0, 1.0), ['delta'])
    """
    thresholds = [sp.sympify(t) for t in thresholds]
    if len(levels) != len(thresholds) + 1:
        raise ParameterError(f"{len(thresholds)} thresholds need {len(thresholds) + 1} levels, "
                             f"got {len(levels)}")
    if any(not sp.simplify(b - a).is_positive for a, b in zip(thresholds[:-1], thresholds[1:])):
        raise ParameterError(f"thresholds must be increasing, got {thresholds}")
    y, u = sp.symbols("y u", real=True)
    delta = sp.Symbol("delta", positive=True)
    cuts = [None] + thresholds + [None]
    pieces = []
    for k, level in enumerate(levels):
        lo, hi = cuts[k], cuts[k + 1]
        ind = sp.Integer(1)
        if lo is not None:
            ind *= sp.Heaviside(u - lo)
        if hi is not None:
            ind *= sp.Heaviside(hi - u)
        pieces.append((ind, sp.Eq(y, level)))
    lik = sp.Piecewise(*pieces, (0, True))
    extra = sorted(set().union(*(t.free_symbols for t in thresholds)), key=str)
    params = ((delta,) if noise else ()) + tuple(extra)
    return likelihood_channel(name, lik, y, u, params, y_levels=levels,
                              noise_variance=delta if noise else 0)


def sign_channel(noise=True) -> ScalarChannel:
    """Declare the sign channel ``y = sign(z + sqrt(delta) xi)``: ``Z_out(y) = Phi(y omega / sqrt(V + delta))``.

    Parameters
    ----------
    noise : bool, optional
        With the noise ``delta`` (a parameter of the channel); ``False``: noiseless.

    Returns
    -------
    ScalarChannel
        The derived channel, outputs ``-1, 1``.

    Examples
    --------
    >>> from symtheory.glm import sign_channel
    >>> sign_channel().levels, sign_channel(noise=False).name
    ((-1.0, 1.0), 'sign_noiseless')
    """
    return threshold_channel("sign" if noise else "sign_noiseless", [0], [-1, 1], noise=noise)


def gaussian_noise_channel() -> ScalarChannel:
    """Declare the Gaussian channel ``y = z + sqrt(Delta) xi``: ``Z_out = N(y; omega, V + Delta)``, derived.

    Returns
    -------
    ScalarChannel
        The derived channel, parameter ``delta`` (the variance ``Delta``).

    Examples
    --------
    >>> import numpy as np
    >>> from symtheory.glm import gaussian_noise_channel
    >>> channel = gaussian_noise_channel()
    >>> m = channel.moments(np.array([0.3]), np.array([0.0]), 1.0, 0.5)
    >>> m.mean_shift.round(12)                   # E[z | y] = y V/(V + Delta)
    array([0.2])
    """
    y, z = sp.symbols("y z", real=True)
    delta = sp.Symbol("delta", positive=True)
    lik = sp.exp(-(y - z) ** 2 / (2 * delta)) / sp.sqrt(2 * sp.pi * delta)

    def sampler(zs, rng, d):
        return zs + np.sqrt(d) * rng.standard_normal(np.shape(zs))

    return likelihood_channel("gaussian_noise", lik, y, z, params=(delta,), sampler=sampler)
