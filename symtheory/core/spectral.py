"""Algebraic spectral laws: density, Hilbert transform, support and integrals.

A probability law ``mu`` on the real line is *algebraic* when its Stieltjes
transform ``G(z) = int mu(t)/(z - t) dt`` solves a polynomial equation
``P(G, z; params) = 0`` (derived symbolically, e.g. by :mod:`symtheory.core.freeprob`).
From ``P`` alone this module provides, for numeric parameter values,

* ``G(x - i0) = H(x) + i pi mu(x)`` on the real axis: inside the support the root
  with the largest imaginary part, outside it the unique real root between the
  values of ``G`` at the neighbouring edges (``G`` decreases on every gap);
* the support: edges are real roots of the symbolically factored discriminant
  (:func:`freeprob.edge_polynomial`), intervals are classified by the density at
  their midpoints and merged;
* integrals ``int f(x, mu(x), H(x)) dx`` of SymPy integrands over the support, by the
  nested midpoint-in-theta rule of :mod:`symtheory.core.quadrature` with an error
  estimate, and the same integrals in mpmath at any precision as an independent
  high-precision path: the edge rules of :func:`~symtheory.core.quadrature.integrate_edges_mp`
  (the square-root edges removed by ``x = m - h cos(theta)``), the law's root at each
  node by Newton in gmpy2 (MPFR) from the float64 root (``mpmath.polyroots`` where
  that fails), tanh-sinh where the edge rules do not converge.

Everything model-specific enters through ``P``; see :mod:`symtheory.bsr.model` for a
declaration.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import mpmath
import numpy as np
import sympy as sp

from . import _spectral_nb
from .codegen import JitModule, Kernel
from .quadrature import integrate_edges_mp
from .result import Result, alias
from .roots_mp import polynomial_roots_mp

#: the Numba routines, compiled lazily at first call: logged like the kernels
nb = JitModule(_spectral_nb)


#: a complex branch point z of the law is a cut point of its bulk [a, b] when the
#: angle theta* of z = m - h cos(theta*) has |Im theta*| below this: the edge rules
#: converge like exp(-2 n |Im theta*|) (n nodes), ~6 n digits per 100 nodes at this value
MP_CUT_IM_THETA = 0.07


class SpectralAccuracyWarning(UserWarning):
    """A spectral integral did not reach the requested tolerance."""


@dataclass
class Support:
    """Support of a law on the real line: disjoint bulks ``[a, b]``, sorted."""

    bulks: list
    edges: np.ndarray
    edge_G: dict = field(default_factory=dict)

    def contains(self, x: float) -> bool:
        return any(a < x < b for a, b in self.bulks)


@dataclass
class IntegralResult(Result):
    """Values of several spectral integrals (``value``, also ``values``) with error
    estimates (``error``, also ``errors``: the change between the last two tanh-sinh
    levels, which bounds the coarser one's error) and the ``nodes`` used (the
    ``iterations``); ``converged``: every change below ``rtol`` times its integral."""

    error_kind: str = field(default="estimate", kw_only=True)
    method: str = field(default="nested tanh-sinh", kw_only=True)

    values = alias("value", "The integrals (the value).")
    errors = alias("error", "Their error estimates (the error).")
    nodes = alias("iterations", "Quadrature nodes used (the iterations).")


class AlgebraicSpectralLaw:
    """Law whose Stieltjes transform solves ``P(G, z; *params) = 0``.

    Parameters
    ----------
    P, G, z:
        The polynomial and its two variables.
    params:
        Parameter symbols, in the order numeric values are passed.
    edge_poly:
        Polynomial in ``z`` containing all edges among its real roots (e.g.
        :func:`freeprob.edge_polynomial`).
    even:
        The law is symmetric (``mu(-x) = mu(x)``); only ``x >= 0`` is computed and
        integrals are doubled.
    name:
        Prefix of the generated kernels.
    """

    def __init__(self, P, G, z, params, edge_poly, *, even=False, name="law"):
        self.P, self.G, self.z = sp.expand(P), G, z
        self.params = tuple(params)
        self.even = even
        self.name = name
        poly = sp.Poly(self.P, G, z)
        K, J = poly.degree(G), poly.degree(z)
        A = sp.zeros(K + 1, J + 1)
        # factored coefficients keep structural zeros exact (e.g. (t**2 - 1)**4 at t = 1);
        # expanded forms cancel catastrophically near such parameters
        for (k, j), coeff in poly.terms():
            A[k, j] = sp.factor(coeff)
        self.coeff_kernel = Kernel(f"{name}_coeffs", self.params, A,
                                   doc=f"coefficients A[k, j] of G^k z^j in the polynomial of {name}")
        if even:
            w = sp.Symbol("w_")
            e = sp.expand(edge_poly)
            if sp.expand(e - e.subs(z, -z)) != 0:
                raise ValueError("edge polynomial of an even law must be even in z")
            epoly = sp.Poly(sp.expand(e.subs(z, sp.sqrt(w))), w)
        else:
            epoly = sp.Poly(sp.expand(edge_poly), z)
        self.edge_var_is_square = even
        coeffs = [sp.factor(c) for c in epoly.all_coeffs()]  # highest degree first
        self.edge_kernel = Kernel(f"{name}_edges", self.params, coeffs,
                                  doc=f"edge polynomial of {name} (highest degree first)")
        self._integrand_kernels: dict = {}

    # ------------------------------------------------------------- float path
    def coefficient_matrix(self, *params) -> np.ndarray:
        return self.coeff_kernel(*params)

    def _edge_candidates(self, *params) -> np.ndarray:
        c = self.edge_kernel(*params)
        nz = np.flatnonzero(c)
        if nz.size == 0:
            raise ValueError("edge polynomial vanishes identically at these parameters")
        c = c[nz[0]:]
        roots = np.roots(c) if c.size > 1 else np.empty(0)
        scale = max(np.max(np.abs(roots)), 1e-300) if roots.size else 1.0
        real = roots[np.abs(roots.imag) <= 1e-6 * (np.abs(roots.real) + 1e-8 * scale)].real
        # polish on the real axis (Newton on the edge polynomial)
        dc = np.polyder(c)
        for _ in range(4):
            d = np.polyval(dc, real)
            ok = d != 0
            real = np.where(ok, real - np.polyval(c, real) / np.where(ok, d, 1.0), real)
        if self.edge_var_is_square:
            real = np.sqrt(real[real >= 0])
        return np.unique(real)

    def support(self, *params) -> Support:
        """Bulks of the support (for an even law: the bulks with ``x >= 0``; a bulk
        symmetric about 0 is reported as ``(-b, b)``)."""
        A = self.coefficient_matrix(*params)
        cand = self._edge_candidates(*params)
        if self.even:
            pts = np.unique(np.concatenate([[0.0], cand[cand > 0]]))
        else:
            pts = np.unique(cand)
        if pts.size < 2:
            raise ValueError(f"{self.name}: fewer than two edge candidates; cannot locate the support")
        inside = []
        for lo, hi in zip(pts[:-1], pts[1:]):
            g = nb.upper_root(A, 0.5 * (lo + hi))
            inside.append(g.imag > 1e-9 * max(1.0, abs(g)))
        bulks = []
        start = None
        for (lo, hi), flag in zip(zip(pts[:-1], pts[1:]), inside):
            if flag and start is None:
                start = lo
            if not flag and start is not None:
                bulks.append((start, lo))
                start = None
        if start is not None:
            bulks.append((start, pts[-1]))
        if not bulks:
            raise ValueError(f"{self.name}: no bulk found at parameters {params}")
        if self.even and bulks[0][0] == 0.0:
            bulks[0] = (-bulks[0][1], bulks[0][1])
        edges = np.array(sorted({e for ab in bulks for e in ab}))
        edge_G = {float(e): float(nb.edge_value(A, e)) for e in edges}
        if self.even and bulks[0][0] > 0:
            edge_G[0.0] = 0.0
        return Support(bulks, edges, edge_G)

    def stieltjes(self, x, *params, support: Support | None = None) -> np.ndarray:
        """``G(x - i0)`` for real ``x`` (array), inside and outside the support."""
        A = self.coefficient_matrix(*params)
        sup = support or self.support(*params)
        x = np.atleast_1d(np.asarray(x, dtype=float))
        out = np.empty(x.shape, dtype=complex)
        for i, xi in enumerate(x):
            xa = abs(xi) if self.even else xi
            if sup.contains(xa):
                g = nb.upper_root(A, xa)
            else:
                lo_e, hi_e = self._gap_bounds(xa, sup)
                g = nb.real_root_between(A, xa, *sorted((lo_e, hi_e))) + 0j
            if self.even and xi < 0:
                g = -np.conj(g)  # G(-x - i0) = -conj(G(x - i0)) for an even law
            out[i] = g
        return out

    def _gap_bounds(self, x, sup: Support):
        """Values of G at the ends of the gap containing x (0 at +-infinity)."""
        keys = sorted(sup.edge_G)
        left = [e for e in keys if e <= x]
        right = [e for e in keys if e >= x]
        g_left = sup.edge_G[left[-1]] if left else 0.0
        g_right = sup.edge_G[right[0]] if right else 0.0
        return g_left, g_right

    def stieltjes_derivative(self, x, *params, G=None, support: Support | None = None):
        """``G'(x - i0) = -P_z/P_G`` at the root (implicit differentiation of ``P``)."""
        A = self.coefficient_matrix(*params)
        x = np.atleast_1d(np.asarray(x, dtype=float))
        if G is None:
            G = self.stieltjes(x, *params, support=support)
        K, J = A.shape
        k = np.arange(K)[:, None]
        j = np.arange(J)[None, :]
        Gp = G[:, None, None] ** np.maximum(k - 1, 0)[None]
        Gk = G[:, None, None] ** k[None]
        xp = x[:, None, None] ** np.maximum(j - 1, 0)[None]
        xj = x[:, None, None] ** j[None]
        P_G = np.sum(A[None] * k[None] * Gp * xj, axis=(1, 2))
        P_z = np.sum(A[None] * j[None] * Gk * xp, axis=(1, 2))
        return -P_z / P_G

    def density(self, x, *params) -> np.ndarray:
        return np.maximum(self.stieltjes(x, *params).imag, 0.0) / np.pi

    def hilbert(self, x, *params) -> np.ndarray:
        """``H(x) = P.V. int mu(t)/(x - t) dt = Re G(x - i0)``."""
        return self.stieltjes(x, *params).real

    def integrand_kernel(self, key, exprs, x, mu, H) -> Kernel:
        """Kernel evaluating integrands ``f(x, mu, H; params)`` (cached per key)."""
        k = self._integrand_kernels.get(key)
        if k is None:
            k = Kernel(f"{self.name}_{key}", (x, mu, H) + self.params, list(exprs),
                       vector_args=(x, mu, H),
                       doc=f"spectral integrands {key} of {self.name}",
                       packed=(3,))
            self._integrand_kernels[key] = k
        return k

    def integrate(self, kernel: Kernel, *params, rtol=1e-11, max_level=8,
                  support: Support | None = None, warn: bool = True) -> IntegralResult:
        """``int_R f_i(x, mu(x), H(x)) dx`` for every integrand of ``kernel``.

        Each bulk is split at the real parts of complex branch points lying close
        to it (near-singularities of ``mu``), and every piece is integrated by the
        nested tanh-sinh rule, refined until the change between levels of every
        integral is below ``rtol`` times its magnitude.  The change bounds the
        error of the coarser level; the returned finer value is more accurate.
        """
        A = self.coefficient_matrix(*params)
        sup = support or self.support(*params)
        pieces = self.pieces(*params, support=sup, half=self.even)
        total = np.zeros(kernel.n_out)
        err = np.zeros(kernel.n_out)
        nodes, converged = kernel.drivers(nb.build_integrate).integrate(
            A, np.asarray(pieces, dtype=float), np.array(params, dtype=float), float(rtol),
            int(max_level), total, err)
        if self.even:
            total *= 2.0
            err *= 2.0
        if not converged and warn:
            warnings.warn(f"{self.name}: spectral integrals not converged at tanh-sinh level "
                          f"{max_level}: estimated error {err} (rtol {rtol}) at {params}",
                          SpectralAccuracyWarning, stacklevel=2)
        return IntegralResult(value=total, error=err, iterations=nodes,
                              converged=bool(converged))

    def pieces(self, *params, support: Support | None = None, half: bool = False):
        """Integration pieces: bulks cut at 0 and at the real parts of nearby complex
        branch points.  ``half`` (even laws) keeps ``x >= 0``; otherwise the whole line."""
        sup = support or self.support(*params)
        near = self._near_singular_points(*params)
        if self.even:
            near = sorted(set(near + [-p for p in near] + [0.0]))
        bulks = []
        for a, b in sup.bulks:
            bulks.append((a, b))
            if self.even and a > 0 and not half:
                bulks.append((-b, -a))
        out = []
        for a, b in sorted(bulks):
            if half and a < 0:
                a = 0.0
            w = b - a
            cuts = [a] + [p for p in near if a + 1e-3 * w < p < b - 1e-3 * w] + [b]
            out += list(zip(cuts[:-1], cuts[1:]))
        return np.asarray(out, dtype=float)

    def _near_singular_points(self, *params):
        """Real parts of all branch points (roots of the edge polynomial, real or not).

        Those falling inside a bulk are near-singularities of the density (a complex
        pair close to the axis, or a cusp where two bulks almost merge); cutting the
        bulk there keeps each piece's integrand analytic up to its ends.
        """
        return sorted({float(r.real) for r in self._branch_points(*params)})

    def _branch_points(self, *params) -> np.ndarray:
        """All roots of the edge polynomial in ``x`` (float64; for an even law the
        principal square roots, ``Re >= 0``)."""
        c = self.edge_kernel(*params)
        nz = np.flatnonzero(c)
        if nz.size == 0 or c.size - nz[0] < 2:
            return np.empty(0, dtype=complex)
        roots = np.roots(c[nz[0]:]).astype(complex)
        if self.edge_var_is_square:
            roots = np.sqrt(roots)                 # principal root: Re >= 0
        return roots

    def _integrand_values(self, A, kernel, params, x):
        g = np.empty(x.shape[0], dtype=np.complex128)
        nb.upper_roots_continued(A, x, g)
        mu = np.maximum(g.imag, 0.0) / np.pi
        return kernel.vec(x, mu, g.real, *params)

    def log_energy(self, *params, level=5, support: Support | None = None):
        """Logarithmic energy ``Sigma = int int mu(x) mu(y) log|x - y|`` and
        ``int mu(x) log|x| dx``, each with an error estimate (levels ``level-1`` vs
        ``level`` of the nested tanh-sinh rule).  Returns ``((Sigma, err), (L, err))``.
        """
        A = self.coefficient_matrix(*params)
        bulks = self.pieces(*params, support=support)
        s1, l1 = nb.log_energy(A, bulks, level - 1)
        s2, l2 = nb.log_energy(A, bulks, level)
        return (s2, abs(s2 - s1)), (l2, abs(l2 - l1))

    # ------------------------------------------------------------- mpmath path
    def mp_support(self, *params, dps=30) -> list:
        """Bulks (as ``mpf`` pairs) computed at ``dps`` digits."""
        with mpmath.workdps(dps):
            A = self._mp_matrix(params)
            c = self.edge_kernel.mp(*params)
            while c and c[0] == 0:
                c = c[1:]
            # each edge relative to itself: an inner edge next to 0 (beta = 1 + 4e-16:
            # edge^2 = 6e-32) is below polyroots' absolute tolerance at dps digits
            roots = polynomial_roots_mp(c, digits=dps)
            tol = mpmath.mpf(10) ** (-dps // 2)
            # relative, with margin: a double edge from rounded coefficients splits into
            # a pair with |Im| ~ 10^(-dps/2) |r|; a spurious real point only splits an
            # interval (the midpoint test below decides what is bulk)
            real = sorted({mpmath.re(r) for r in roots
                           if abs(mpmath.im(r)) <= mpmath.mpf(10) ** (-dps // 3) * abs(r)})
            if self.edge_var_is_square:
                real = [mpmath.sqrt(r) for r in real if r >= 0]
            pts = sorted(set(([mpmath.mpf(0)] if self.even else []) + [r for r in real if (r > 0 or not self.even)]))
            upper = _UpperRootMP(self, A, self.coefficient_matrix(*[float(p) for p in params]))
            bulks, start = [], None
            for lo, hi in zip(pts[:-1], pts[1:]):
                g = upper((lo + hi) / 2)
                # relative to |g|: at Delta = 1e12 the density is ~1e-13 (dps 10 lost the
                # bulk against an absolute threshold and returned Delta for the MMSE)
                flag = mpmath.im(g) > tol * abs(g)
                if flag and start is None:
                    start = lo
                if not flag and start is not None:
                    bulks.append((start, lo))
                    start = None
            if start is not None:
                bulks.append((start, pts[-1]))
            if self.even and bulks and bulks[0][0] == 0:
                bulks[0] = (-bulks[0][1], bulks[0][1])
            return bulks

    def _mp_matrix(self, params):
        vals = self.coeff_kernel.mp(*params)
        K, J = self.coeff_kernel.shape
        return [vals[k * J:(k + 1) * J] for k in range(K)]

    def _mp_upper(self, A, x, A_float=None):
        """Upper root at ``x`` in mpmath: Newton from the float64 root, polyroots fallback."""
        c = []
        for row in A:
            acc = mpmath.mpf(0)
            for a in reversed(row):
                acc = acc * x + a
            c.append(acc)
        while c and c[-1] == 0:
            c.pop()
        if A_float is not None:
            g0 = complex(nb.upper_root(A_float, float(x)))
            # next to an edge the float root can be real (x rounds onto the edge): start
            # in the upper half-plane, or Newton on a real polynomial stays real
            g = mpmath.mpc(g0.real, max(g0.imag, 1e-8 * (abs(g0) + 1e-300)))
            eps = mpmath.mpf(2) ** (-mpmath.mp.prec + 4)

            def accept(root):
                # Newton keeps the float root's branch only if that root was right: a
                # float root that is real where the law has mass (x = 2.6e-16 next to an
                # inner edge at 2.5e-16) leads Newton to a real root with Im ~ 1e-52,
                # mu = 0 instead of 0.05.  Otherwise polyroots decides.
                return (g0.imag > 0 and mpmath.im(root) > 0
                        and abs(root - g0) <= 1e-3 * (abs(g0) + 1))

            for _ in range(120):
                p = dp = mpmath.mpc(0)
                bound = mpmath.mpf(0)
                ag = abs(g)
                for ck in reversed(c):
                    dp = dp * g + p
                    p = p * g + ck
                    bound = bound * ag + abs(ck)
                # backward-error stop: next to an edge (near-double root) the root is
                # only conditioned to eps/separation and steps stall above eps
                if abs(p) <= eps * bound:
                    if accept(g):
                        return g
                    break
                if dp == 0:
                    break
                step = p / dp
                g -= step
                if abs(step) <= eps * abs(g):
                    if accept(g):
                        return g
                    break
        try:
            roots = mpmath.polyroots(list(reversed(c)), maxsteps=200,
                                     extraprec=2 * mpmath.mp.dps)
        except mpmath.libmp.NoConvergence:
            # (Delta = 1e30 at 100 digits: coefficients over ~60 decades) -- the escalating
            # solver, each root relative to itself
            roots = polynomial_roots_mp(list(reversed(c)), digits=mpmath.mp.dps)
        return max(roots, key=lambda r: mpmath.im(r))

    def mp_integrate(self, kernel: Kernel, *params, dps=30, error=False, which=None,
                     rule="edge"):
        """The integrals of :meth:`integrate` in mpmath at ``dps`` digits.

        ``rule="edge"``: each bulk by :func:`~symtheory.core.quadrature.integrate_edges_mp`
        (the trapezoid rule in ``theta`` of ``x = m - h cos(theta)``, exponentially
        convergent for a density with square-root edges), every integral from the same
        nodes, the root at a node by :class:`_UpperRootMP`; a bulk with a branch point
        close to it is cut there into tanh-sinh pieces (:meth:`_mp_pieces`), and so is
        one the trapezoid rule does not resolve by its last level.
        ``rule="tanh-sinh"``: ``mpmath.quad`` on every piece cut at every branch point's
        real part, roots by Newton in mpmath (the earlier path, kept as a reference).
        ``which`` restricts the computation to some outputs (others are returned as 0).
        """
        if rule not in ("edge", "tanh-sinh"):
            raise ValueError(f"rule must be 'edge' or 'tanh-sinh', got {rule!r}")
        with mpmath.workdps(dps):
            bulks = self.mp_support(*params, dps=dps)
            A = self._mp_matrix(params)
            A_float = self.coefficient_matrix(*[float(p) for p in params])
            mp_f = kernel.mp
            if rule == "edge":
                upper = _UpperRootMP(self, A, A_float)
            else:
                def upper(x):
                    return self._mp_upper(A, x, A_float)
            cache: dict = {}

            def values(x):
                if x not in cache:
                    g = upper(x)
                    mu = max(mpmath.im(g), 0) / mpmath.pi
                    cache[x] = mp_f(x, mu, mpmath.re(g), *params)
                return cache[x]

            wanted = range(kernel.n_out) if which is None else \
                [i for i in range(kernel.n_out) if i in which]
            totals = [mpmath.mpf(0)] * kernel.n_out
            errs = [mpmath.mpf(0)] * kernel.n_out

            def mpmath_quad(a, b):
                # mpmath's own quadrature (its tanh-sinh) on one piece: not the float64
                # rule of core.quadrature
                for i in wanted:
                    v, e = mpmath.quad(lambda x: values(x)[i], [a, b], error=True)
                    totals[i] += v
                    errs[i] += e

            if rule == "edge":
                tol = mpmath.ldexp(1, -mpmath.mp.prec + 4)
                for a, b, kind in self._mp_pieces(bulks, params):
                    if kind != "tanh-sinh":
                        v, e, _, ok = integrate_edges_mp(values, a, b, tol=tol,
                                                         even=kind == "even")
                    if kind == "tanh-sinh" or not ok:
                        mpmath_quad(mpmath.mpf(0) if kind == "even" else a, b)
                        continue
                    for i in wanted:
                        totals[i] += v[i]
                        errs[i] += e[i]
            else:
                near = self._near_singular_points(*[float(p) for p in params])
                for a, b in bulks:
                    lo = mpmath.mpf(0) if (self.even and a < 0) else a
                    width = b - lo
                    cuts = [lo] + [mpmath.mpf(p) for p in near
                                   if lo + width / 1000 < p < b - width / 1000] + [b]
                    for ca, cb in zip(cuts[:-1], cuts[1:]):
                        mpmath_quad(ca, cb)
            if self.even:
                totals = [2 * t for t in totals]
                errs = [2 * e for e in errs]
            return (totals, errs) if error else totals

    def _mp_pieces(self, bulks, params):
        """``(a, b, kind)`` pieces of the mpmath bulks for :meth:`mp_integrate`: a bulk is
        one piece for :func:`~symtheory.core.quadrature.integrate_edges_mp`, ``"edges"``
        (an even law's bulk ``(-b, b)`` symmetric about 0: ``"even"``, its half ``[0, b]``
        integrated) unless a branch point ``z`` is near it (``|Im theta*| <``
        :data:`MP_CUT_IM_THETA`, ``z = m - h cos(theta*)``; real ones inside included):
        then the bulk (or its half ``[0, b]``) is cut at their real parts into
        ``"tanh-sinh"`` pieces (a singularity just off an end costs tanh-sinh a few
        nodes; the trapezoid in ``theta`` many)."""
        branch = self._branch_points(*[float(p) for p in params])
        out = []
        for a, b in bulks:
            m, h = float(a + b) / 2, float(b - a) / 2
            lo = mpmath.mpf(0) if (self.even and a < 0) else a
            w = float(b - lo)
            near = [z for z in branch
                    if abs(np.arccos((m - complex(z)) / h).imag) < MP_CUT_IM_THETA]
            cuts = sorted({float(z.real) for z in near
                           if float(lo) + w / 1000 < z.real < float(b) - w / 1000})
            if not cuts:
                out.append((a, b, "even" if lo != a else "edges"))
                continue
            ends = [lo] + [mpmath.mpf(c) for c in cuts] + [b]
            out += [(ca, cb, "tanh-sinh") for ca, cb in zip(ends[:-1], ends[1:])]
        return out


def _mpfr(v):
    """An ``mpf`` as a gmpy2 ``mpfr``, exactly (the context holds its bits)."""
    import gmpy2

    sign, man, exp, _ = v._mpf_
    if not man:
        return gmpy2.mpfr(mpmath.nstr(v, 1)) if v else gmpy2.mpfr(0)
    r = gmpy2.mul_2exp(gmpy2.mpfr(man), exp)
    return -r if sign else r


def _mpf(r):
    """A gmpy2 ``mpfr`` as an ``mpf`` (rounded to the working precision)."""
    if not r:
        return mpmath.mpf(0)
    return mpmath.mpf(tuple(int(k) for k in r.as_mantissa_exp()))


class _UpperRootMP:
    """``G(x - i0)`` inside the support at the working precision: Newton in gmpy2
    (MPFR/MPC, ~30x faster than mpmath's mpc in Python) from the float64 root, with the
    checks of :meth:`AlgebraicSpectralLaw._mp_upper`, which decides where they fail.

    Newton stops when the next step would be below the working precision (the error
    after a step ``s`` is ``|P''/(2 P')| s^2``), or at the backward-error stop next to an
    edge (``|P| <= eps sum |c_k||g|^k``, a near-double root).
    """

    def __init__(self, law, A, A_float):
        import gmpy2

        self.law, self.A, self.A_float = law, A, A_float
        self.prec = mpmath.mp.prec
        self.ctx = gmpy2.context(precision=self.prec + 10)
        with self.ctx:
            self.rows = [[_mpfr(a) for a in row] for row in A]
            self.eps = gmpy2.mul_2exp(gmpy2.mpfr(1), -self.prec + 4)

    def __call__(self, x):
        import gmpy2

        g0 = complex(nb.upper_root(self.A_float, float(x)))
        with self.ctx:
            xr = _mpfr(x)
            c = []
            for row in self.rows:
                acc = gmpy2.mpfr(0)
                for a in reversed(row):
                    acc = acc * xr + a
                c.append(acc)
            while c and not c[-1]:
                c.pop()
            absc = [abs(ck) for ck in c]
            g = gmpy2.mpc(g0.real, max(g0.imag, 1e-8 * (abs(g0) + 1e-300)))
            eps = self.eps
            root = None
            for _ in range(120):
                p = dp = ddp = gmpy2.mpc(0)
                bound = gmpy2.mpfr(0)
                ag = abs(g)
                for ck, ak in zip(reversed(c), reversed(absc)):
                    ddp = ddp * g + 2 * dp
                    dp = dp * g + p
                    p = p * g + ck
                    bound = bound * ag + ak
                if abs(p) <= eps * bound:
                    root = g
                    break
                if not dp:
                    break
                step = p / dp
                g = g - step
                ag = abs(g)
                astep = abs(step)
                if astep <= eps * ag or abs(ddp / (2 * dp)) * astep * astep <= eps * ag:
                    root = g
                    break
            ok = (root is not None and g0.imag > 0 and root.imag > 0
                  and abs(root - gmpy2.mpc(g0)) <= 1e-3 * (abs(g0) + 1))
        if not ok:
            return self.law._mp_upper(self.A, x)   # polyroots decides
        return mpmath.mpc(_mpf(root.real), _mpf(root.imag))
