"""Separable weight priors declared in SymPy: point masses, Gaussians, any 1-D density
SymPy can integrate against a Gaussian, and mixtures of them.

A weight ``w ~ P`` is seen by GAMP and the state evolution through the scalar Gaussian
input channel ``exp(B w - A w^2/2)`` (Rangan, ISIT 2011): its log-partition

    log Z(B, A) = log int dP(w) exp(B w - A w^2/2),

the input function ``f_in = d log Z/dB`` (the posterior mean), its variance
``d f_in/dB`` and, over ``w0 ~ P``, ``B = A w0 + sqrt(A) xi``, the state evolution's
prior map ``q = E[f_in^2]`` and free-entropy term ``psi(A) = E[log Z]`` (Sec. 4 of
Troiani et al., arXiv:2502.00901; Barbier et al., PNAS 116 (2019) for the scalar GLM).

A prior is a mixture ``sum_k p_k P_k`` of components whose log-partitions SymPy derives:
a point mass ``delta_v`` (``B v - A v^2/2``), a Gaussian ``N(m, s^2)`` (its Gaussian
integral) or a density ``p(w)`` (``sympy.integrate`` of ``p(w) exp(B w - A w^2/2)``).  The
mixture's input functions combine the components' derived ``log Z_k``, ``d_B log Z_k``,
``d_B^2 log Z_k`` by the posterior component weights ``softmax_k(log p_k + log Z_k)``,
computed with the maximum shifted out (no overflow at any ``B``); so ``f_in`` of the
Rademacher prior is ``tanh(B)`` to rounding, with no cancellation.

Declarations are checked (:meth:`SeparablePrior.check`): weights non-negative and
summing to 1, each density normalized with a finite second moment, ``log Z(0, 0) = 0``,
``f_in`` and its variance against central differences of ``log Z`` and ``f_in``, and the
Nishimori identity ``E[f_in^2] = E[w0 f_in]``; a failure is refused by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

from ...core import special, stable
from ...core.codegen import Kernel
from ...core.quadrature import integrate_adaptive
from ...core.validate import ParameterError
from .prior import Prior

B, A = sp.symbols("B A", real=True)
S, XI, W0 = sp.symbols("s xi w0", real=True)
W = sp.Symbol("w", real=True)
#: |xi| up to this in Gaussian expectations: the standard normal density below ~1e-322 beyond
XI_MAX = 38.5


@dataclass(frozen=True)
class Component:
    """One component of a separable prior: its weight, a description and the SymPy
    log-partition ``log Z_k(B, A)`` with its mean and second moment (for checks)."""

    weight: sp.Expr
    kind: str
    log_partition: sp.Expr
    mean: sp.Expr
    second_moment: sp.Expr


def point_mass(value, weight=1) -> Component:
    v = sp.nsimplify(value)
    return Component(sp.nsimplify(weight), f"delta({v})", B * v - A * v ** 2 / 2, v, v ** 2)


def gaussian_component(mean=0, variance=1, weight=1) -> Component:
    m, s2 = sp.nsimplify(mean), sp.nsimplify(variance)
    if not (s2.is_number and s2 > 0):
        raise ParameterError(f"a Gaussian component needs variance > 0, got {variance}")
    # log int N(w; m, s2) exp(B w - A w^2/2) dw, by SymPy (completing the square)
    Z = sp.integrate(sp.exp(-(W - m) ** 2 / (2 * s2) + B * W - A * W ** 2 / 2)
                     / sp.sqrt(2 * sp.pi * s2), (W, -sp.oo, sp.oo), conds="none")
    logZ = sp.expand_log(sp.log(sp.simplify(Z)), force=True)
    return Component(sp.nsimplify(weight), f"N({m}, {s2})", logZ, m, s2 + m ** 2)


def density_component(density, w=None, weight=1) -> Component:
    """A component with density ``density(w)`` (a SymPy expression in ``w``); refused by
    name when it does not normalize, when its second moment diverges, or when SymPy
    cannot integrate it against a Gaussian."""
    w = w if w is not None else next(iter(sp.sympify(density).free_symbols))
    p = sp.sympify(density).subs(w, W)
    norm = sp.integrate(p, (W, -sp.oo, sp.oo), conds="none")
    if not (norm.is_number and abs(float(norm) - 1) < 1e-12):
        raise ParameterError(f"the density {density} does not normalize: its integral is {norm}")
    m2 = sp.integrate(W ** 2 * p, (W, -sp.oo, sp.oo), conds="none")
    if not (m2.is_number and m2.is_finite):
        raise ParameterError(f"the density {density} has a divergent second moment ({m2})")
    Z = sp.integrate(p * sp.exp(B * W - A * W ** 2 / 2), (W, -sp.oo, sp.oo), conds="none")
    if Z.has(sp.Integral) or not Z.free_symbols <= {A, B}:
        raise ParameterError(f"SymPy cannot integrate the density {density} against "
                             "exp(B w - A w^2/2); declare it as a mixture of point masses and "
                             "Gaussians")
    mean = sp.integrate(W * p, (W, -sp.oo, sp.oo), conds="none")
    return Component(sp.nsimplify(weight), f"density {density}",
                     sp.expand_log(sp.log(sp.simplify(Z)), force=True), mean, m2)


def _centred(c: Component) -> sp.Expr:
    """``log Z_k(s^2 w0 + s xi, s^2) - (s^2 w0^2/2 + s xi w0)``: the log-partition of a
    component at the state evolution's field, relative to the planted value's own term.
    The log-partition is first written in the stable functions (core.stable); its rational
    part is then cancelled against the subtracted term and factored by SymPy, so for point
    masses and Gaussians no two O(A) numbers are subtracted in floating point (the free
    entropy stays exact at ``A -> inf``).  A density's special-function part (e.g.
    ``LogErfcx``) keeps a relative rounding of ``~1e-16 A``."""
    stable_lz = stable.stabilize(c.log_partition)
    transcendental = sp.Add(*[t for t in sp.Add.make_args(stable_lz)
                              if t.has(sp.log, *special.ALL_STABLE_FUNCTIONS)])
    rest = stable_lz - transcendental
    field = {B: S ** 2 * W0 + S * XI, A: S ** 2}
    rest = sp.factor(sp.cancel(sp.together(sp.expand(rest.subs(field)
                                                     - (S ** 2 * W0 ** 2 / 2 + S * XI * W0)))))
    return rest + transcendental.subs(field)


class SeparablePrior(Prior):
    """An i.i.d. prior on the weights, a mixture of :class:`Component` (module docstring).

    ``input_functions(A, B)`` takes GAMP's ``1 x 1`` precision and ``1 x p`` field;
    ``overlap_map``, ``psi`` and ``inverse_overlap_map`` the state evolution's ``1 x 1``
    ``Q_hat``; ``rho(1)`` is ``E[w^2]``.  The expectations over ``w0 ~ P`` and
    ``xi ~ N(0, 1)`` are exact sums over point masses and adaptive quadrature
    (:func:`~symtheory.core.quadrature.integrate_adaptive`) over ``xi`` and over the
    densities, to ``rtol`` (Sec. 4 of Troiani et al., arXiv:2502.00901).

    Parameters
    ----------
    name : str
        Identifier (kernel names).
    components : list of Component
        The mixture's components (:func:`point_mass`, :func:`gaussian_component`,
        :func:`density_component`); weights non-negative, summing to 1.
    rtol : float, optional
        Relative tolerance of the expectations.
    check : bool, optional
        Run :meth:`check` now (its report is kept as ``report``).

    Attributes
    ----------
    mean, second_moment : float
        ``E w`` and ``E w^2``.
    report : dict or None
        The discrepancies measured by :meth:`check`.

    Examples
    --------
    >>> from symtheory.glm import SeparablePrior
    >>> from symtheory.glm.factors.separable_prior import point_mass
    >>> prior = SeparablePrior("rademacher", [point_mass(1, 0.5), point_mass(-1, 0.5)])
    >>> prior.mean, prior.second_moment, bool(prior.report["nishimori"] < 1e-12)
    (0.0, 1.0, True)
    """

    def __init__(self, name: str, components, *, rtol: float = 1e-12, check: bool = True):
        if not str(name).isidentifier():
            raise ParameterError(f"prior name must be an identifier, got {name!r}")
        self.name, self.components, self.rtol = name, list(components), float(rtol)
        weights = [c.weight for c in self.components]
        if not self.components or any(not (w.is_number and w >= 0) for w in weights):
            raise ParameterError(f"prior {name!r}: weights must be non-negative numbers, got "
                                 f"{[str(w) for w in weights]}")
        if abs(float(sum(weights)) - 1) > 1e-14:
            raise ParameterError(f"prior {name!r}: weights must sum to 1, got {float(sum(weights))}")
        self.log_weights = np.log(np.array([float(w) for w in weights]))
        outs = []
        for c in self.components:
            # the stable special functions (core.stable) before differentiating: a density's
            # log Z from sympy.integrate holds exp(x^2) erfc(x), which overflows
            lz = stable.stabilize(c.log_partition)
            d1 = stable.stabilize(sp.diff(lz, B))
            outs += [lz, d1, stable.stabilize(sp.diff(d1, B))]
        self.kernel = Kernel(f"prior_{name}", (B, A), outs, vector_args=(B, A),
                             doc=f"log Z_k, d_B log Z_k, d_B^2 log Z_k of the {name} prior")
        self.centred_kernel = Kernel(
            f"prior_{name}_centred", (S, XI, W0), [_centred(c) for c in self.components],
            vector_args=(S, XI, W0),
            doc=f"log Z_k(A w0 + sqrt(A) xi, A) - (A w0^2/2 + sqrt(A) xi w0) of the {name} "
                "prior, s = sqrt(A), the O(A) terms cancelled symbolically")
        self.mean = float(sum(c.weight * c.mean for c in self.components))
        self.second_moment = float(sum(c.weight * c.second_moment for c in self.components))
        if not math.isfinite(self.second_moment):
            raise ParameterError(f"prior {name!r}: the second moment diverges")
        self.report = self.check() if check else None

    def __repr__(self):
        parts = " + ".join(f"{c.weight} {c.kind}" for c in self.components)
        return f"SeparablePrior({self.name!r}: {parts})"

    # ------------------------------------------------------------------ input channel
    def log_partition_terms(self, Bv, Av):
        """Return ``(log Z, f_in, variance)`` of the scalar input channel at ``B``, ``A``.

        The mixture's terms from the components' derived ``log Z_k`` by the posterior weights
        (module docstring); no overflow at any ``B``.

        Parameters
        ----------
        Bv : array_like
            Fields ``B``.
        Av : array_like
            Precisions ``A`` (broadcast against ``Bv``).

        Returns
        -------
        tuple of numpy.ndarray
            ``log Z``, ``f_in = d log Z/dB`` and its variance ``d f_in/dB``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> logz, f, v = prior.log_partition_terms(np.array([0.5]), 1.0)
        >>> round(float(f[0]), 12) == round(float(np.tanh(0.5)), 12)      # f_in = tanh(B)
        True
        """
        Bv, Av = np.broadcast_arrays(np.asarray(Bv, float), np.asarray(Av, float))
        out = self.kernel.vec(Bv.ravel(), Av.ravel()).reshape(Bv.shape + (-1, 3))
        logw = self.log_weights + out[..., 0]
        lse, post = _logsumexp(logw)
        mean = np.sum(post * out[..., 1], axis=-1)
        # law of total variance, centred per component: no cancellation of E w^2 - f_in^2
        var = np.sum(post * (out[..., 2] + (out[..., 1] - mean[..., None]) ** 2), axis=-1)
        return lse, mean, var

    def input_functions(self, A_mat, B_mat):
        """Return GAMP's input functions ``(f_in, variance)`` for one row (``P = 1``).

        Parameters
        ----------
        A_mat : array_like
            The ``1 x 1`` precision (finite).
        B_mat : array_like
            The ``1 x p`` fields.

        Returns
        -------
        tuple of numpy.ndarray
            ``f_in (1, p)`` and the mean posterior variance ``(1, 1)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> f, v = prior.input_functions(np.array([[1.0]]), np.array([[0.5, -0.5]]))
        >>> bool(np.allclose(f, np.tanh([[0.5, -0.5]]), rtol=0, atol=1e-14))   # f_in = tanh B
        True
        """
        a = float(np.asarray(A_mat).reshape(-1)[0])
        if np.shape(A_mat) != (1, 1) or np.shape(B_mat)[0] != 1:
            raise ParameterError(f"the separable prior {self.name!r} has one row (P = 1); "
                                 f"got A of shape {np.shape(A_mat)}")
        if not math.isfinite(a):
            raise ValueError(f"A = {a} (must be finite)")
        _, f, v = self.log_partition_terms(np.asarray(B_mat, float)[0], a)
        return f[None, :], np.array([[float(np.mean(v))]])

    def rho(self, P):
        """Return the second moment ``E[w^2]`` as a ``1 x 1`` matrix.

        Parameters
        ----------
        P : int
            Number of rows (must be 1).

        Returns
        -------
        numpy.ndarray
            ``[[E w^2]]``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> prior.rho(1)
        array([[1.]])
        """
        if P != 1:
            raise ParameterError(f"the separable prior {self.name!r} is a prior on one row")
        return np.array([[self.second_moment]])

    # ------------------------------------------------------------------ state evolution
    def expectation(self, fn, qhat, atol=1e-300, *, components=None):
        """Return ``E_(w0 ~ P, xi)[fn(log Z, f_in, var, w0, xi)]`` at ``A = qhat``, with its error.

        ``B = qhat w0 + sqrt(qhat) xi``; ``fn`` may be vector-valued.

        Parameters
        ----------
        fn : callable
            ``fn(log Z, f_in, var, w0, xi) -> list of arrays``.
        qhat : float
            Precision (finite, >= 0).
        atol : float or array_like, optional
            Absolute floor of the relative tolerance (one per entry of ``fn``).
        components : list of int, optional
            Indices of the components ``w0`` is drawn from (default all; the sum is then over
            those only, each with its weight).

        Returns
        -------
        tuple
            ``(value, error estimate)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> val, err = prior.expectation(lambda lz, f, v, w0, xi: [f * f, w0 * f], 1.0)
        >>> bool(abs(val[0] - val[1]) < 1e-12)                # Nishimori: E f^2 = E w0 f
        True
        """
        if not (math.isfinite(qhat) and qhat >= 0):
            raise ParameterError(f"q_hat must be finite and >= 0, got {qhat}")
        s = math.sqrt(qhat)
        total, err = 0.0, 0.0
        for k, (lw, c) in enumerate(zip(self.log_weights, self.components)):
            if not np.isfinite(lw) or (components is not None and k not in components):
                continue
            if c.kind.startswith("delta"):
                w0 = float(c.mean)

                def integrand(x, w0=w0):
                    lz, f, v = self.log_partition_terms(qhat * w0 + s * x, qhat)
                    dens = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
                    return np.asarray(fn(lz, f, v, np.full_like(x, w0), x)).T * dens[:, None]

                val, e, ok = integrate_adaptive(integrand, -XI_MAX, XI_MAX, rtol=self.rtol,
                                                atol=atol, points=self._switches(qhat, w0))
            else:
                val, e, ok = self._density_expectation(c, fn, qhat, atol)
            if not ok:
                raise ArithmeticError(f"prior {self.name!r}: the expectation at q_hat = {qhat} "
                                      f"did not reach rtol {self.rtol:g}")
            total, err = total + math.exp(lw) * val, err + math.exp(lw) * e
        return total, err

    def _switches(self, qhat, w0):
        """The ``xi`` where the posterior moves from one point mass to another (their
        log-partitions equal: ``B = A (v_k + v_l)/2``) and where ``B = 0``: the integrand's
        fronts, of width ``1/sqrt(A)``, given to the adaptive rule as panel boundaries (at
        large ``A`` a front sits far in the Gaussian tail, where no panel of a uniform
        start would see it)."""
        vals = [float(c.mean) for c in self.components if c.kind.startswith("delta")]
        mids = {0.5 * (a + b) for i, a in enumerate(vals) for b in vals[i + 1:]} | {0.0}
        s = math.sqrt(qhat)
        return sorted(s * (m - w0) for m in mids)

    def _density_expectation(self, c, fn, qhat, atol):
        """Over ``w0 ~ P_k`` (a density) and ``xi``: nested adaptive quadrature, ``w0`` on
        ``mean +- 38.5 sd`` of the component."""
        m = float(c.mean)
        sd = math.sqrt(max(float(c.second_moment) - m * m, 1e-300))
        pdf = _component_pdf(c)
        s = math.sqrt(qhat)

        def outer(w0s):
            # every outer node's inner integral over xi in one adaptive run: the integrand
            # of all (xi, w0) pairs evaluated at once, one column per node and quantity
            nw = len(w0s)

            def inner(x):
                X = np.repeat(x, nw)
                Wn = np.tile(w0s, len(x))
                lz, f, v = self.log_partition_terms(qhat * Wn + s * X, qhat)
                vals = np.asarray(fn(lz, f, v, Wn, X)).T          # (len(x) nw, k)
                dens = np.exp(-0.5 * X * X) / math.sqrt(2 * math.pi)
                return (vals * dens[:, None]).reshape(len(x), -1)

            cols_atol = atol if np.ndim(atol) == 0 else np.tile(atol, nw)   # (node, quantity)
            val = integrate_adaptive(inner, -XI_MAX, XI_MAX, rtol=self.rtol, atol=cols_atol)[0]
            return val.reshape(nw, -1) * pdf(w0s)[:, None]

        return integrate_adaptive(outer, m - XI_MAX * sd, m + XI_MAX * sd, rtol=self.rtol,
                                  atol=atol)

    def error_terms(self, qhat):
        """Return ``(mmse, psi_c)`` at ``q_hat`` with their error estimates.

        The prior's MMSE ``E[Var(w0|B)] = rho - q`` (computed as the mean posterior variance:
        no cancellation as it vanishes) and the centred free-entropy term ``psi_c = psi(q_hat)
        - q_hat rho / 2`` (``E log sum_k p_k exp(centred_k)``, exact at any ``q_hat``).

        Parameters
        ----------
        qhat : float
            Precision ``q_hat`` (>= 0).

        Returns
        -------
        tuple
            ``((mmse, psi_c), (mmse_error, psi_c_error))``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> (mmse, psi_c), _ = prior.error_terms(1.0)
        >>> x, w = np.polynomial.hermite_e.hermegauss(160)  # q = E tanh(Qh + sqrt(Qh) z)
        >>> q = float(w @ np.tanh(1.0 + x) / w.sum())
        >>> bool(abs(mmse - (1 - q)) < 1e-12)
        True
        """
        if qhat <= 0:
            return (self.second_moment - self.mean ** 2, 0.0), (0.0, 0.0)
        s = math.sqrt(qhat)

        def fn(lz, f, v, w0, xi):
            cen = self.centred_kernel.vec(np.full_like(xi, s), xi, w0)
            return [v, _logsumexp(self.log_weights + cen)[0]]

        # mmse relative (it is the SE's variable, however small); psi_c to an absolute
        # 1e-15: it enters phi = O(1), and its integrand, O(sqrt(q_hat)) with a mean of
        # O(q_hat), carries absolute rounding ~1e-16 per point
        atol = np.array([1e-300, 1e-15])
        gauss = [k for k, c in enumerate(self.components)
                 if c.kind.startswith("N(") and np.isfinite(self.log_weights[k])]
        rest = [k for k in range(len(self.components)) if k not in gauss]
        val, err = (self.expectation(fn, qhat, atol=atol, components=rest) if rest
                    else (np.zeros(2), np.zeros(2)))
        val, err = np.array(val, dtype=float), np.array(err, dtype=float)
        for k in gauss:
            v, e = self._gaussian_error_terms(k, qhat, atol)
            val, err = val + math.exp(self.log_weights[k]) * v, err + math.exp(self.log_weights[k]) * e
        return (float(val[0]), float(val[1])), (float(err[0]), float(err[1]))

    def _gaussian_error_terms(self, g, qhat, atol):
        """``(mmse, psi_c)`` over ``w0`` drawn from the Gaussian component ``g``
        (``N(m, s2)``), as one-dimensional integrals: ``B = A w0 + sqrt(A) xi`` is then
        Gaussian, ``B = A m + sqrt(A c) t`` with ``c = 1 + A s2``, ``t ~ N(0, 1)``, and
        both terms depend on ``(w0, xi)`` through ``B`` only once the planted term
        ``Q = A w0^2/2 + sqrt(A) xi w0`` (common to all components) is replaced by its
        conditional mean given ``B``.  Exactly,
        ``log Z_g(B) - E[Q | B] = A s2 (1 - t^2)/(2c) - log(c)/2`` (no O(A) numbers
        subtracted), so ``psi_c = log p_g - log(c)/2 + E_t log sum_k exp(r_k)`` with
        ``r_k = log p_k + log Z_k - log p_g - log Z_g`` (0 for ``k = g``), and ``mmse =
        E_t Var(w0 | B)``.  The posterior's switches between components (``r_k = 0``) are
        located and given to the adaptive rule with their widths."""
        c_g = self.components[g]
        m = float(c_g.mean)
        s2 = float(c_g.second_moment) - m * m
        A = float(qhat)
        sB = math.sqrt(A * (1.0 + A * s2))
        lwg = self.log_weights[g]

        def parts(t):
            Bv = A * m + sB * t
            out = self.kernel.vec(Bv, np.full_like(Bv, A)).reshape(len(Bv), -1, 3)
            lw = self.log_weights + out[..., 0]
            r = lw - lw[:, g:g + 1]
            r[:, g] = 0.0
            _, _, var = self.log_partition_terms(Bv, np.full_like(Bv, A))
            return r, var

        def integrand(t):
            r, var = parts(t)
            dens = np.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
            return np.stack([var, _logsumexp(r)[0]], axis=1) * dens[:, None]

        points, widths = self._gaussian_switches(parts, g)
        val, err, ok = integrate_adaptive(integrand, -XI_MAX, XI_MAX, rtol=self.rtol,
                                          atol=atol, points=points, widths=widths)
        if not ok:
            raise ArithmeticError(f"prior {self.name!r}: the expectation at q_hat = {qhat} "
                                  f"did not reach rtol {self.rtol:g}")
        val = np.array(val, dtype=float)
        val[1] += lwg - 0.5 * math.log1p(A * s2)
        return val, np.asarray(err, dtype=float)

    @staticmethod
    def _gaussian_switches(parts, g):
        """The ``t`` where some ``r_k`` (k != g) changes sign, from a scan geometric in
        ``|t|`` refined by Brent, with the front's width ``1/|dr_k/dt|`` there."""
        from scipy.optimize import brentq

        mag = np.geomspace(1e-12, XI_MAX, 600)
        ts = np.concatenate([-mag[::-1], [0.0], mag])
        r, _ = parts(ts)
        points, widths = [], []
        for k in range(r.shape[1]):
            if k == g:
                continue
            sgn = np.sign(r[:, k])
            for i in np.nonzero(sgn[:-1] * sgn[1:] < 0)[0]:
                t0 = brentq(lambda t: parts(np.array([t]))[0][0, k], ts[i], ts[i + 1],
                            xtol=1e-300, rtol=1e-13)
                h = max(abs(t0) * 1e-6, 1e-300)
                slope = (parts(np.array([t0 + h]))[0][0, k]
                         - parts(np.array([t0 - h]))[0][0, k]) / (2 * h)
                points.append(t0)
                widths.append(1.0 / abs(slope) if slope else abs(t0))
        return points, (widths or None)

    def overlap_map(self, Qhat):
        """Return ``q = F(q_hat) = E[f_in^2]`` as a ``1 x 1`` matrix.

        Parameters
        ----------
        Qhat : array_like
            The ``1 x 1`` ``q_hat``.

        Returns
        -------
        numpy.ndarray
            ``[[q]]``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> x, w = np.polynomial.hermite_e.hermegauss(160)  # q = E tanh(Qh + sqrt(Qh) z)
        >>> q = float(w @ np.tanh(1.0 + x) / w.sum())
        >>> bool(abs(prior.overlap_map([[1.0]])[0, 0] - q) < 1e-12)
        True
        """
        qhat = float(np.asarray(Qhat).reshape(-1)[0])
        if qhat <= 0:
            return np.array([[self.mean ** 2]])
        val, _ = self.expectation(lambda lz, f, v, w0, xi: [f * f], qhat)
        return np.array([[float(val[0])]])

    def psi(self, Qhat):
        """Return the free-entropy term ``psi(q_hat) = E log Z``.

        Parameters
        ----------
        Qhat : array_like
            The ``1 x 1`` ``q_hat``.

        Returns
        -------
        float
            ``psi`` (0 at ``q_hat = 0``).

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> x, w = np.polynomial.hermite_e.hermegauss(160)  # E log cosh(Qh + sqrt(Qh) z) - Qh/2
        >>> closed = float(w @ np.log(np.cosh(1.0 + x)) / w.sum()) - 0.5
        >>> bool(abs(prior.psi([[1.0]]) - closed) < 1e-12)
        True
        """
        qhat = float(np.asarray(Qhat).reshape(-1)[0])
        if qhat <= 0:
            return 0.0
        val, _ = self.expectation(lambda lz, f, v, w0, xi: [lz], qhat)
        return float(val[0])

    def inverse_overlap_map(self, Q):
        """Return ``q_hat = F^(-1)(q)`` by Brent's method.

        Parameters
        ----------
        Q : array_like
            The ``1 x 1`` ``q`` in ``[mean^2, E w^2)``.

        Returns
        -------
        numpy.ndarray
            ``[[q_hat]]``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> prior.inverse_overlap_map(prior.overlap_map([[1.0]])).round(8)
        array([[1.]])
        """
        from scipy.optimize import brentq

        q = float(np.asarray(Q).reshape(-1)[0])
        if not self.mean ** 2 <= q < self.second_moment:
            raise ValueError(f"Q must be in [mean^2, E w^2) = [{self.mean ** 2}, "
                             f"{self.second_moment}), got {q}")
        hi = 1.0
        while self.overlap_map([[hi]])[0, 0] < q:
            hi *= 4.0
        return np.array([[brentq(lambda x: self.overlap_map([[x]])[0, 0] - q, 0.0, hi,
                                 xtol=1e-14, rtol=1e-14)]])

    # ------------------------------------------------------------------ declaration checks
    def _check_integrals(self):
        """A density's log-partition, from ``sympy.integrate`` (which can return a wrong
        closed form), against adaptive quadrature at four ``(B, A)``: worst absolute error
        (of ``log Z``, i.e. relative of ``Z``); a discrepancy above 1e-9 is refused."""
        worst = 0.0
        for k, c in enumerate(self.components):
            if not c.kind.startswith("density"):
                continue
            for b, a in [(0.3, 0.5), (-1.2, 2.0), (2.5, 0.1), (0.0, 7.0)]:
                got = float(self.kernel.vec(np.array([b]), np.array([a]))[0, 3 * k])
                ref = _quadrature_log_partition(c, b, a)
                worst = max(worst, abs(got - ref)) if math.isfinite(got) else math.inf
                if not abs(got - ref) <= 1e-9:
                    raise ParameterError(f"prior {self.name!r}: the derived log-partition of "
                                         f"{c.kind} is {got} at B = {b}, A = {a}, quadrature "
                                         f"gives {ref}")
        return worst


    def check(self) -> dict:
        """Run the identity checks of the module docstring and return the discrepancies.

        Normalization, the log-partition against quadrature, ``f_in`` and its variance against
        central differences, and the Nishimori identity; a failure raises
        :class:`~symtheory.core.validate.ParameterError` naming the identity.

        Returns
        -------
        dict
            The measured discrepancy of each identity.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> sorted(prior.check())
        ['f_in vs d log Z/dB', 'log Z vs quadrature', 'nishimori', 'normalization', 'variance vs d f_in/dB']
        """
        out = {}
        # normalization: log Z(0, a) = -a E w^2/2 + O(a^2) at a small a (a density's closed
        # form is singular at A = 0 itself); a = 1e-8/E w^2 keeps the O(a^2 E w^4) term
        # below 1e-15 for a kurtosis below 1e6, against a tolerance of 1e-12
        a0 = 1e-8 / max(1.0, self.second_moment)
        lz0 = float(self.log_partition_terms(0.0, a0)[0])
        out["normalization"] = abs(lz0 + a0 * self.second_moment / 2)
        if not out["normalization"] <= 1e-12:
            raise ParameterError(f"prior {self.name!r} fails normalization: log Z(0, {a0:.2g}) "
                                 f"= {lz0}, expected -A E w^2/2 = {-a0 * self.second_moment / 2}")
        out["log Z vs quadrature"] = self._check_integrals()
        eps = 1e-5
        worst_f = worst_v = 0.0
        for b, a in [(0.3, 0.5), (-1.2, 2.0), (2.5, 0.1), (0.0, 7.0)]:
            lz, f, v = self.log_partition_terms(np.array([b - eps, b, b + eps]), a)
            worst_f = max(worst_f, abs(f[1] - (lz[2] - lz[0]) / (2 * eps)) / (1 + abs(f[1])))
            worst_v = max(worst_v, abs(v[1] - (f[2] - f[0]) / (2 * eps)) / (1 + abs(v[1])))
        out["f_in vs d log Z/dB"], out["variance vs d f_in/dB"] = worst_f, worst_v
        # central differences: truncation ~eps^2 ~ 1e-10, rounding ~1e-16/eps ~ 1e-11
        if worst_f > 1e-7 or worst_v > 1e-7:
            raise ParameterError(f"prior {self.name!r} fails the derivative check: f_in off by "
                                 f"{worst_f:.2g}, its variance by {worst_v:.2g}")
        val, err = self.expectation(lambda lz, f, v, w0, xi: [f * f, w0 * f], 1.0)
        out["nishimori"] = abs(val[0] - val[1])
        if abs(val[0] - val[1]) > 1e-9 * max(1.0, abs(val[1])) + 10 * float(np.max(err)):
            raise ParameterError(f"prior {self.name!r} fails Nishimori: E f_in^2 = {val[0]} but "
                                 f"E w0 f_in = {val[1]} at q_hat = 1")
        return out


def _quadrature_log_partition(c, b, a):
    """``log int p(w) exp(b w - a w^2/2) dw`` of a density component by
    ``scipy.integrate.quad`` (adaptive, 1e-13), around the integrand's own peak."""
    from scipy import integrate

    pdf = _component_pdf(c)
    logs = np.linspace(-60, 60, 4001)
    peak = logs[np.argmax(np.log(np.maximum(pdf(logs), 1e-300)) + b * logs - a * logs ** 2 / 2)]
    shift = math.log(max(pdf(peak), 1e-300)) + b * peak - a * peak ** 2 / 2

    def f(w):
        return math.exp(math.log(max(pdf(w), 1e-300)) + b * w - a * w * w / 2 - shift)
    val = sum(integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-13, limit=200)[0]
              for lo, hi in ((-np.inf, peak), (peak, np.inf)))
    return math.log(val) + shift


def _logsumexp(lw):
    """``(log sum_k exp(lw_k), softmax_k(lw))`` over the last axis: the largest term
    factored out (it is 1) and the others through ``log1p``."""
    top = np.max(lw, axis=-1, keepdims=True)
    r = np.exp(lw - top)
    first = np.argmax(lw, axis=-1)[..., None] == np.arange(lw.shape[-1])
    others = np.sum(np.where(first, 0.0, r), axis=-1)
    return top[..., 0] + np.log1p(others), r / (1.0 + others)[..., None]


def _component_pdf(c):
    """The density of a Gaussian or density component as a numpy function of ``w0``."""
    if c.kind.startswith("N("):
        m = float(c.mean)
        s2 = float(c.second_moment) - m * m
        return lambda w: np.exp(-(w - m) ** 2 / (2 * s2)) / math.sqrt(2 * math.pi * s2)
    expr = sp.sympify(c.kind.removeprefix("density "))
    sym = next(iter(expr.free_symbols))
    return sp.lambdify(sym, expr, "numpy")


# ---------------------------------------------------------------------- declarations
def gaussian(variance=1) -> SeparablePrior:
    return SeparablePrior("gaussian", [gaussian_component(0, variance)])


def rademacher() -> SeparablePrior:
    """``w = +-1`` with probability 1/2 each."""
    return SeparablePrior("rademacher", [point_mass(1, sp.Rational(1, 2)),
                                         point_mass(-1, sp.Rational(1, 2))])


def gauss_bernoulli(rho, variance=1) -> SeparablePrior:
    """``w = 0`` with probability ``1 - rho``, else ``N(0, variance)``: density ``rho``,
    second moment ``rho variance``."""
    rho = sp.nsimplify(rho)
    if not (rho.is_number and 0 < rho <= 1):
        raise ParameterError(f"rho must be in (0, 1], got {rho}")
    comps = [gaussian_component(0, variance, rho)]
    if rho < 1:
        comps.insert(0, point_mass(0, 1 - rho))
    tag = str(float(rho)).replace(".", "p").replace("-", "m")
    return SeparablePrior(f"gauss_bernoulli_{tag}", comps)


def discrete(law: dict, name: str = "discrete") -> SeparablePrior:
    """A discrete law ``{value: probability}`` (SymPy numbers)."""
    return SeparablePrior(name, [point_mass(v, p) for v, p in law.items()])
