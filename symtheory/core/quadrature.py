"""Quadrature rules used across the package.

* :func:`tanh_sinh_nodes` -- double-exponential (tanh-sinh) rule on ``[a, b]``
  (Takahasi & Mori 1974).  Nodes cluster double-exponentially at the ends, so
  algebraic end singularities (square-root spectral edges) and singularities just
  off an end (a complex branch point next to a split point) cost a few extra nodes
  only.  Levels halve the step and nest, giving an a-posteriori error estimate.
  Distances to the ends are computed directly (``2 h/(1 + e^{2|u|})``), so nodes
  never collapse onto an end in floating point.
* :func:`gauss_hermite` -- probabilists' Gauss-Hermite rule for E over N(0, 1).
* :func:`gauss_legendre_mp` -- Gauss-Legendre nodes on ``[-1, 1]`` at any precision
  (mpmath), computed once per (size, precision) and mapped onto panels by the caller.
* :func:`integrate_adaptive` -- globally adaptive composite Gauss-Legendre for several
  integrands at once, every panel of a round evaluated in one vectorized call (a sharp
  front, e.g. ``tanh(q + sqrt(q) x)`` at large ``q``, gets panels where it sits; fixed
  rules and fixed ``+-k sigma`` grids do not follow it).
* :func:`scrambled_sobol_normals` -- independent randomizations of a scrambled Sobol
  sequence mapped to N(0, I) (randomized quasi-Monte Carlo; ``scipy.stats.qmc``, whose
  Owen-type linear-matrix scrambling plus digital shift keeps every point uniform, so
  averages stay unbiased and the spread over randomizations is their error).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .validate import ParameterError

#: |t| <= T_MAX: distance of the outermost node to an end ~ 1e-37 (b - a)
T_MAX = 4.0


def tanh_sinh_unit(level: int, only_new: bool = False):
    """Level-``level`` nodes on ``[-1, 1]``: side (-1/+1: nearer end), distance to that
    end, unit-step weight (``int_{-1}^{1} f = 2**-level sum w f``)."""
    step = 2.0 ** (-level)
    kmax = int(np.floor(T_MAX / step))
    k = np.arange(-kmax, kmax + 1)
    if only_new and level > 0:
        k = k[k % 2 != 0]
    t = k * step
    u = 0.5 * np.pi * np.sinh(t)
    e = np.exp(-2.0 * np.abs(u))
    cu = np.cosh(u)
    return np.where(u < 0, -1.0, 1.0), 2.0 * e / (1.0 + e), 0.5 * np.pi * np.cosh(t) / (cu * cu)


def tanh_sinh_nodes(a: float, b: float, level: int, only_new: bool = False):
    """Nodes ``x`` and *unit-step* weights ``w'`` of the tanh-sinh rule at ``level``.

    The rule is ``int_a^b f = step * sum w' f(x)`` with ``step = 2**-level``; with
    ``only_new`` (level >= 1) only the nodes absent from ``level - 1`` are returned.
    Nodes are sorted increasingly.
    """
    side, gap, w = tanh_sinh_unit(level, only_new)
    h = 0.5 * (b - a)
    x = np.where(side < 0, a + h * gap, b - h * gap)
    return x, h * w


def gauss_hermite(n: int):
    """Nodes and weights with ``sum w f(x) ~= E[f(Z)]``, ``Z ~ N(0, 1)`` (scipy's
    Golub-Welsch with asymptotic refinement: finite weights at any ``n``)."""
    from scipy.special import roots_hermitenorm

    x, w = roots_hermitenorm(int(n))
    return x, w / math.sqrt(2.0 * math.pi)


@functools.lru_cache(maxsize=32)
def gauss_legendre_mp(degree: int, dps: int):
    """``(nodes, weights)`` of the Gauss-Legendre rule on ``[-1, 1]`` with ``3 * 2**(degree
    - 1)`` nodes at ``dps`` digits (mpmath's ``GaussLegendre.calc_nodes``: Newton on the
    Legendre polynomial), sorted, as tuples of ``mpf``.  Cached: a high-precision
    integrand evaluated on many panels maps the same unit nodes every time, instead of
    one adaptive ``mpmath.quad`` per panel."""
    import mpmath
    from mpmath.calculus.quadrature import GaussLegendre

    if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= 12:
        raise ParameterError(f"degree must be an integer in [1, 12], got {degree!r}")
    if isinstance(dps, bool) or not isinstance(dps, int) or dps < 1:
        raise ParameterError(f"dps must be an integer >= 1, got {dps!r}")
    with mpmath.workdps(dps):
        nodes = sorted(GaussLegendre(mpmath.mp).calc_nodes(degree, mpmath.mp.prec))
    return tuple(x for x, _ in nodes), tuple(w for _, w in nodes)


#: largest dimension of scipy.stats.qmc.Sobol (its direction numbers)
SOBOL_MAX_DIM = 21201


def scrambled_sobol_normals(dim: int, n: int, scrambles: int, seed) -> np.ndarray:
    """``(scrambles, n, dim)`` standard normal points: the first ``n`` points of
    ``scrambles`` independently scrambled Sobol sequences in ``[0, 1)^dim`` through the
    normal quantile.  The randomizations come from ``np.random.SeedSequence(seed)``'s
    children (``seed``: an int or a SeedSequence), so they are reproducible and
    independent.  ``n`` need not be a power of 2: a prefix of a Sobol sequence is still
    low-discrepancy, only the net property of the full ``2^m`` block is lost."""
    from scipy.stats import norm, qmc

    for name, v in (("dim", dim), ("n", n), ("scrambles", scrambles)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
    if dim > SOBOL_MAX_DIM:
        raise ParameterError(f"dim must be <= {SOBOL_MAX_DIM} (scipy's Sobol directions), "
                             f"got {dim}")
    dim, n, scrambles = int(dim), int(n), int(scrambles)
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    m = max(0, math.ceil(math.log2(n)))
    out = np.empty((scrambles, n, dim))
    for r, child in enumerate(ss.spawn(scrambles)):
        sob = qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng(child))
        # scipy's points lie on a 2^-30 grid and can be exactly 0: clip half a grid step
        # in (the quantile of 2^-31 is -6.1 standard deviations, next to the grid's -6.0)
        out[r] = norm.ppf(np.clip(sob.random_base2(m)[:n], 2.0 ** -31, 1 - 2.0 ** -31))
    return out


def integrate_tanh_sinh(f, a: float, b: float, *, rtol: float = 1e-13, max_level: int = 10,
                        min_level: int = 3):
    """``int_a^b f`` for a vectorized ``f`` by the nested tanh-sinh rule.

    Returns ``(value, error_estimate, converged)``; the estimate is the change between
    the last two levels (it bounds the error of the coarser one).
    """
    x, w = tanh_sinh_nodes(a, b, 0)
    acc = np.asarray(w @ np.asarray(f(x), dtype=float), dtype=float)
    prev = acc.copy()
    cur = acc
    for level in range(1, max_level + 1):
        x, w = tanh_sinh_nodes(a, b, level, only_new=True)
        acc = acc + w @ np.asarray(f(x), dtype=float)
        cur = acc * 2.0 ** (-level)
        change = np.max(np.abs(cur - prev))
        if level >= min_level and change <= rtol * max(np.max(np.abs(cur)), 1e-300):
            return cur, change, True
        prev = cur
    return cur, change, False


#: Gauss-Legendre order of a panel of :func:`integrate_adaptive`
ADAPTIVE_ORDER = 10


def integrate_adaptive(f, a: float, b: float, *, rtol: float = 1e-12, atol: float = 0.0,
                       points=(), widths=None, max_panels: int = 20000):
    """``int_a^b f`` for a vectorized ``f: (N,) -> (N, k)`` (or ``(N,)``), adaptively.

    Each panel is integrated by Gauss-Legendre of order :data:`ADAPTIVE_ORDER` on itself
    and on its two halves; the difference is the error estimate of the whole-panel value
    (which it bounds for analytic integrands), the halves' sum is kept.  Panels whose
    estimate exceeds their share of ``max(atol, rtol |I|)`` (share = their width over
    ``b - a``, per integrand) are split, all of a round's panels in one call of ``f``.
    ``points``: known kinks, jumps or narrow features inside ``(a, b)`` (panel boundaries
    from the start).  ``widths`` (one per point, or None): the feature's scale there -- a
    front or a peak of that width; panel boundaries are then graded geometrically,
    ``point +- width/2 * 4^k``, up to the interval's size, so some panel has the feature's
    own scale (a feature far narrower than every panel falls between all nodes, and no
    error estimate can see it: the caller, who knows the integrand, must say where).
    A panel whose estimate is below its own rounding level (256 ulps of its ``|f|``
    integral) is accepted: float64 cannot resolve it further; and the run stops as soon
    as the summed estimate of all panels meets the tolerance.
    Returns ``(value (k,), error estimate (k,), converged)``; not converged when the
    panel budget ends first.  (``scipy.integrate.quad_vec`` adapts the same way but
    calls ``f`` one point at a time, ~100x slower on numba-vectorized integrands.)"""
    if not (np.isfinite(a) and np.isfinite(b) and a < b):
        raise ParameterError(f"the interval must be finite with a < b, got [{a}, {b}]")
    x0, w0 = np.polynomial.legendre.leggauss(ADAPTIVE_ORDER)
    cuts = np.unique(np.concatenate([[a], [p for p in _graded(points, widths, b - a)
                                           if a < p < b], [b]]))
    lo, hi = cuts[:-1], cuts[1:]
    total = None
    done_val = done_err = 0.0
    panels = 0
    while lo.size:
        panels += lo.size
        mid = 0.5 * (lo + hi)
        ends = np.stack([np.stack([lo, hi]), np.stack([lo, mid]), np.stack([mid, hi])])
        half = 0.5 * (ends[:, 1] - ends[:, 0])                     # (3, m)
        centre = 0.5 * (ends[:, 1] + ends[:, 0])
        nodes = centre[..., None] + half[..., None] * x0           # (3, m, order)
        vals = np.asarray(f(nodes.ravel()), dtype=float)
        vals = vals.reshape(nodes.shape + ((-1,) if vals.ndim > 1 else (1,)))
        integ = np.einsum("pmok,o->pmk", vals, w0) * half[..., None]
        whole, halves = integ[0], integ[1] + integ[2]
        err = np.abs(whole - halves)                                # (m, k)
        # a panel whose change is at its own rounding level (its |f| integral times a
        # few hundred ulps) is as accurate as float64 allows: refining it only chases noise
        floor = 256 * np.finfo(float).eps * (
            np.einsum("pmok,o->pmk", np.abs(vals[1:]), w0) * half[1:, :, None]).sum(axis=0)
        est = done_val + halves.sum(axis=0)
        total = est
        tol = np.maximum(atol, rtol * np.abs(est))
        ok = np.all((err <= tol * ((hi - lo) / (b - a))[:, None]) | (err <= floor), axis=1)
        if np.all(done_err + err.sum(axis=0) <= tol):
            # the whole estimate meets the tolerance (QUADPACK's global criterion): panels
            # whose share is below their rounding noise need not be split further
            return est, done_err + err.sum(axis=0), True
        done_val = done_val + halves[ok].sum(axis=0)
        done_err = done_err + err[ok].sum(axis=0)
        if panels > max_panels:
            err_left = err[~ok].sum(axis=0)
            return est, done_err + err_left, False
        lo, hi = np.concatenate([lo[~ok], mid[~ok]]), np.concatenate([mid[~ok], hi[~ok]])
    return total if total is not None else done_val, done_err, True


def _graded(points, widths, length):
    """``points`` and, for each given width, ``point +- width/2 * 4^k`` below ``length``."""
    points = list(points)
    if widths is None:
        return points
    widths = list(widths)
    if len(widths) != len(points) or not all(w > 0 for w in widths):
        raise ParameterError(f"widths must be one positive number per point, got {widths} "
                             f"for {len(points)} points")
    out = list(points)
    for p, w in zip(points, widths):
        d = 0.5 * w
        while d < length:
            out += [p - d, p + d]
            d *= 4.0
    return out


@dataclass(frozen=True)
class TensorRule:
    """Tensor quadrature for ``E f(t)``, ``t ~ N(0, I_dim)``.

    ``kind='gauss-hermite'``: probabilists' Gauss-Hermite with ``n`` nodes per axis
    (exact for polynomials of degree < 2n per axis).  ``kind='uniform'``: ``n``
    equispaced nodes on ``[-width, width]`` per axis with weights ``phi(t) dt`` (the
    trapezoidal rule, spectrally accurate for smooth integrands; truncation mass
    ``2 Phi(-width)`` per axis) -- robust when the integrand is much narrower than the
    Gaussian.
    """

    kind: str = "gauss-hermite"
    n: int = 30
    width: float = 6.0

    def __post_init__(self):
        if self.kind not in ("gauss-hermite", "uniform"):
            raise ParameterError(f"quadrature kind must be 'gauss-hermite' or 'uniform', got {self.kind!r}")
        if int(self.n) < 1:
            raise ParameterError(f"quadrature n must be >= 1, got {self.n}")
        if not self.width > 0:
            raise ParameterError(f"quadrature width must be > 0, got {self.width}")

    def one_dim(self):
        if self.kind == "gauss-hermite":
            return gauss_hermite(self.n)
        x = np.linspace(-self.width, self.width, int(self.n))
        dx = x[1] - x[0] if self.n > 1 else 1.0
        return x, np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * dx

    def nodes(self, dim: int):
        """``(nodes (K, dim), weights (K,))``; ``dim = 0`` gives the single empty node."""
        if dim == 0:
            return np.zeros((1, 0)), np.ones(1)
        x, w = self.one_dim()
        grids = np.meshgrid(*([x] * dim), indexing="ij")
        wgrids = np.meshgrid(*([w] * dim), indexing="ij")
        nodes = np.stack([g.ravel() for g in grids], axis=1)
        weights = np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)
        return np.ascontiguousarray(nodes), np.ascontiguousarray(weights)

    def refined(self, factor: float = 2.0):
        """A finer rule of the same kind with about ``factor`` times the nodes per axis
        (``2 n - 1`` for the nested uniform rule at the default factor): the difference
        to it estimates the error of this rule (a posteriori error estimate)."""
        factor = float(factor)
        if not (1.0 < factor < math.inf):
            raise ParameterError(f"factor must be finite and > 1, got {factor}")
        if self.kind == "uniform" and factor == 2.0:
            return TensorRule(self.kind, 2 * int(self.n) - 1, self.width)
        return TensorRule(self.kind, int(math.ceil(factor * int(self.n))), self.width)

    def coarsened(self):
        """A rule with about half the nodes per axis: the difference to it estimates
        (over-estimates, for a converging rule) the error of this one."""
        n = int(self.n)
        return TensorRule(self.kind, max(1, (n + 1) // 2 if self.kind == "uniform" else n // 2),
                          self.width)

    def describe(self) -> str:
        return f"tensor {self.kind} {self.n} per axis" + (
            f" on [-{self.width}, {self.width}]" if self.kind == "uniform" else "")


def composite_legendre(a: float, b: float, level: int, order: int):
    """Composite Gauss-Legendre on ``[a, b]``: ``2**level`` equal panels of ``order``
    nodes; returns ``(nodes, weights)`` with ``sum w f ~= int_a^b f``."""
    x, w = np.polynomial.legendre.leggauss(int(order))
    npan = 2 ** int(level)
    h = (b - a) / npan
    mids = a + (np.arange(npan) + 0.5) * h
    return (mids[:, None] + 0.5 * h * x[None]).ravel(), np.tile(0.5 * h * w, npan)


@dataclass(frozen=True)
class AdaptiveRule:
    """Integration refined per sample until a stated tolerance is met.

    ``rtol`` bounds the estimated change of the posterior moments between the last two
    refinements, in natural units (``log Z``; means over prior standard deviations;
    covariances over products of them).  Used by the multi-index channels for
    one-dimensional integrals (composite Gauss-Legendre with ``gauss_legendre`` nodes
    per panel, ``2**level`` panels per smooth piece, levels ``min_level..max_level``;
    nested tanh-sinh up to ``tanh_sinh_max_level`` for orthant integrals) and, in ``k >= 2``
    prior-whitened dimensions, for tensor products of the composite rule on
    ``[-box_half_width, box_half_width]^k`` (levels from ``box_min_level`` while the grid
    has at most ``max_tensor_nodes`` nodes).
    """

    rtol: float = 1e-10
    gauss_legendre: int = 8
    min_level: int = 4
    max_level: int = 11
    tanh_sinh_max_level: int = 9
    box_min_level: int = 2
    box_half_width: float = 8.0
    max_tensor_nodes: int = 300_000

    def __post_init__(self):
        if not (0 < self.rtol < 1):
            raise ParameterError(f"rtol must be in (0, 1), got {self.rtol}")
        if not (1 <= self.min_level < self.max_level <= 16):
            raise ParameterError(f"levels must satisfy 1 <= min_level < max_level <= 16, got "
                                 f"{self.min_level}, {self.max_level}")
        if int(self.gauss_legendre) < 2:
            raise ParameterError(f"gauss_legendre must be >= 2, got {self.gauss_legendre}")
        if not self.box_half_width > 0:
            raise ParameterError(f"box_half_width must be > 0, got {self.box_half_width}")

    def legendre(self):
        """Gauss-Legendre nodes and weights on ``[-1, 1]``."""
        return np.polynomial.legendre.leggauss(int(self.gauss_legendre))

    def box_levels(self, dim: int):
        """Levels of the ``dim``-dimensional box rule within the node budget (>= 2 levels
        so that a change can be measured)."""
        levels = []
        level = int(self.box_min_level)
        while (2 ** level * self.gauss_legendre) ** dim <= self.max_tensor_nodes or len(levels) < 2:
            levels.append(level)
            level += 1
        return levels

    def box_nodes(self, dim: int, level: int, half_width: float | None = None):
        """Tensor composite Gauss-Legendre for ``E f(t)``, ``t ~ N(0, I_dim)``, on the box
        (weights include the Gaussian density; the mass outside, ``<= 2 dim Q(T)``, is
        accounted for by the caller)."""
        T = self.box_half_width if half_width is None else half_width
        x, w = composite_legendre(-T, T, level, self.gauss_legendre)
        w = w * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        grids = np.meshgrid(*([x] * dim), indexing="ij")
        wgrids = np.meshgrid(*([w] * dim), indexing="ij")
        return (np.ascontiguousarray(np.stack([g.ravel() for g in grids], axis=1)),
                np.ascontiguousarray(np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)))

    def describe(self) -> str:
        return f"adaptive (rtol {self.rtol:g})"


def tanh_sinh_unit_levels(max_level: int):
    """Nested tanh-sinh nodes on ``[-1, 1]`` for levels ``0..max_level``, for Numba drivers.

    Returns ``(gap, side, weight, offsets)``: the nodes new at level ``l`` are
    ``offsets[l]:offsets[l + 1]``; a node is at distance ``gap * (b - a)/2`` from end
    ``a`` (``side < 0``) or ``b`` (``side > 0``) of ``[a, b]`` (no rounding onto an end);
    the level-``l`` rule is ``2**-l (b - a)/2 sum_{levels <= l} weight f``.
    """
    parts = [tanh_sinh_unit(level, True) for level in range(int(max_level) + 1)]
    offsets = np.cumsum([0] + [len(p[0]) for p in parts]).astype(np.int64)
    side, gap, weight = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return gap, side, weight, offsets


# ------------------------------------------------------------------ mpmath edge rules
#: node tables of :func:`mp_edge_nodes`, by (level, prec): computed once per working
#: precision and process
_MP_EDGE_NODES: dict = {}


def mp_edge_nodes(level: int, prec: int):
    """Nodes new at ``level`` of the trapezoid rule of step ``pi 2^-level`` in ``theta``,
    ``x = (a + b)/2 - (b - a)/2 cos(theta)``, at ``prec`` bits, cached.

    Returns ``(side, gap, weight)`` lists as :func:`tanh_sinh_unit` (``x = a + h gap`` for
    ``side < 0``, ``b - h gap`` for ``side > 0``, the midpoint for ``side = 0``;
    ``h = (b - a)/2``), ``gap = 2 sin^2`` of the angle to the nearer end (no cancellation
    next to an end), ``weight = sin(theta)``: ``int_a^b f = h pi 2^-level sum weight f``
    over the nodes of all levels up to ``level`` (the rule nests; the ends, where
    ``sin(theta) = 0``, are not nodes).
    """
    import mpmath

    key = (level, prec)
    if key not in _MP_EDGE_NODES:
        n = 2 ** level
        side, gap, weight = [], [], []
        with mpmath.workprec(prec + 20):
            for k in range(1, n, 2) if level > 0 else ():
                near = min(k, n - k) * mpmath.pi / n   # the angle to the nearer end, exact
                side.append((2 * k > n) - (2 * k < n))
                gap.append(2 * mpmath.sin(near / 2) ** 2)
                weight.append(mpmath.sin(near))
        with mpmath.workprec(prec):
            _MP_EDGE_NODES[key] = (side, [+g for g in gap], [+w for w in weight])
    return _MP_EDGE_NODES[key]


def integrate_edges_mp(f, a, b, *, tol, even: bool = False, min_level: int = 3,
                       max_level: int = 12):
    """``int_a^b f(x) dx`` (``f``: an ``mpf`` to a list of ``mpf``) in mpmath, for an
    integrand with square-root edges at ``a`` and ``b``: the trapezoid rule in ``theta``,
    ``x = (a + b)/2 - (b - a)/2 cos(theta)`` (:func:`mp_edge_nodes`).

    ``sqrt(x - a) = sqrt(b - a) sin(theta/2)``, so ``sqrt((x - a)(b - x)) g(x)`` with ``g``
    analytic (a spectral density, its powers) becomes an even, ``2 pi``-periodic, analytic
    function of ``theta``, where the trapezoid rule converges exponentially, like
    ``exp(-2 n |Im theta*|)`` with ``n`` steps and ``theta*`` the nearest singularity
    (Trefethen & Weideman, SIAM Rev. 56 (2014) 385, Sec. 3); its levels nest.  An end
    where the integrand is regular breaks the periodicity (the rule is then algebraic).
    ``even``: ``f(a + b - x) = f(x)`` (a bulk ``(-b, b)`` of an even law, ``a = -b``); only
    the nodes in ``[(a + b)/2, b)`` are evaluated (the midpoint itself ``2^-(prec/2 + 8) h``
    above it) and ``int_{(a+b)/2}^b f`` is returned.

    Levels are refined until every integral's change between the last two levels,
    times the ratio of the last two changes (the next change is smaller still under
    exponential convergence), is below ``tol`` times the integral of ``|f|``.  Returns
    ``(values, errors, nodes, converged)``; a non-finite value or a division by zero
    in ``f`` ends the refinement unconverged.
    """
    import mpmath

    prec = mpmath.mp.prec
    h = (b - a) / 2
    nodes = 0
    acc = absacc = None
    prev = None
    changes = []
    for level in range(1, max_level + 1):
        side, gap, weight = mp_edge_nodes(level, prec)
        for s, g, w in zip(side, gap, weight):
            if even:
                if s > 0:
                    continue       # the mirror of a node with s < 0
                if s == 0:
                    # half of the midpoint's weight, and f(m + d) = f(m) + O(d^2) with d^2
                    # below the rounding: m itself can be a degenerate point (the law's
                    # polynomial at x = 0 for an even law)
                    w, g = w / 2, 1 - mpmath.ldexp(1, -(prec // 2 + 8))
                s = 1
            try:
                vals = f(a + h * g if s < 0 else b - h * g)
            except ZeroDivisionError:
                return prev or [], [mpmath.inf] * len(prev or []), nodes, False
            if not all(mpmath.isfinite(v) for v in vals):
                return prev or [], [mpmath.inf] * len(prev or []), nodes, False
            if acc is None:
                acc = [mpmath.mpf(0)] * len(vals)
                absacc = [mpmath.mpf(0)] * len(vals)
            for i, v in enumerate(vals):
                acc[i] += w * v
                absacc[i] += w * abs(v)
            nodes += 1
        step = h * mpmath.pi * mpmath.ldexp(1, -level)
        cur = [step * v for v in acc]
        scale = [step * v for v in absacc]
        if prev is not None:
            d = [abs(c - p) for c, p in zip(cur, prev)]
            changes.append(max((di / si for di, si in zip(d, scale) if si), default=0))
            if level >= min_level and len(changes) >= 2:
                ratio = min(1, changes[-1] / changes[-2]) if changes[-2] else 1
                err = [di * ratio for di in d]
                if all(e <= tol * sc for e, sc in zip(err, scale)):
                    floor = mpmath.ldexp(1, -prec + 4)  # not below the sum's rounding
                    return cur, [max(e, floor * sc) for e, sc in zip(err, scale)], nodes, True
        prev = cur
    return prev, d, nodes, False
