"""Level sets of three indices: an outer index over a two-index level set.

A noiseless link of three indices that separates in one of them (SymPy decides,
:func:`nested_structure`),

    g(z) = a(z_o) h(z_r)     (product: ``z1 z2 z3``, ``z1 (z2^2 - z3^2)``), or
    g(z) = a(z_o) + h(z_r)   (sum: ``z1^2 + z2 z3``),

``z_r`` the other two indices, has the co-area integral (Federer's formula) nested:

    Z_out(y) = int dz_o N(z_o; omega_o, Sigma_oo) Z_h(y'(z_o) | z_o) J(z_o),

with ``y' = y / a(z_o)``, ``J = 1/|a(z_o)|`` for the product (``delta(y - a h) =
delta(h - y/a) / |a|``) and ``y' = y - a(z_o)``, ``J = 1`` for the sum; ``Z_h(y'|z_o)``
is the two-index level-set density of ``h`` under the conditional Gaussian of ``z_r``
given ``z_o`` (mean ``omega_r + Sigma_ro (z_o - omega_o) / Sigma_oo``, covariance the
Schur complement ``Sigma_rr - Sigma_ro Sigma_or / Sigma_oo``, the same at every ``z_o``).
The posterior moments are the same integral over the inner moments (Eq. (9)-(12) of
Troiani et al., arXiv:2502.00901, with ``P_out(y|Z) = delta(y - g(Z))``).

The inner integral is the Numba fixed-level rule of
:func:`~symtheory.glm.integrate.level_set.fixed_level_set_moments`, batched over every
(sample, outer node); the outer one is tanh-sinh on ``z_o`` cut where the integrand is
not smooth -- the zeros of ``a`` (the inner level runs off to infinity), the zeros of
``a'``, and the ``z_o`` where ``y'`` reaches a critical value of ``h`` (the inner level
set pinches: a log singularity of ``Z_h``) -- and at ``omega_o``; outer nodes whose
Gaussian factor is below ``e^-46`` (1e-20) of its peak are dropped.  Levels go up
together, ``(outer, inner) = (L, L + 1)`` (measured on ``z1 z2 z3``: stage (5, 6) agrees
with (6, 8) to 4e-15 where (4, 6) is 1e-7 off, so the outer level sets the error), until
two successive stages agree to ``rtol`` -- the reported error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from ...core.validate import ParameterError
from .level_set import (
    _SWITCHES,
    LevelSetStructure,
    _piece_nodes,
    _pieces,
    _smooth_structure,
    critical_values,
    fixed_level_set_moments,
    level_set_structure,
    link_critical_points,
    refine_by_levels,
)
from .link_structure import NotApplicable

#: outer tanh-sinh level of the first stage; the inner level is the outer + INNER_OFFSET
FIRST_OUTER_LEVEL, INNER_OFFSET = 3, 1
#: the last outer level of :func:`nested_moments`: stage (6, 7) costs ~40 ms per sample on
#: one core and leaves, on ``z1 z2 z3`` at the trivial point, < 1e-14 at |y| >= 1e-3 and
#: 3e-8 at |y| = 1e-9 (log-spread mass between |z1| ~ |y| and 1); stage 7 would cost 4x
MAX_OUTER_LEVEL = 6
#: outer nodes whose Gaussian factor is below exp(-PRUNE) of its peak are dropped
PRUNE = 46.0
#: samples integrated together (memory: samples x outer nodes x 9 doubles per stage)
CHUNK = 256


@dataclass
class NestedLevelSet:
    """``g = a(z_o) h(z_r)`` (``kind='product'``) or ``a(z_o) + h(z_r)`` (``'sum'``):
    ``outer`` and ``rest`` are positions in the flat indices; ``inner`` the
    :class:`~symtheory.glm.integrate.level_set.LevelSetStructure` of ``h`` in the order
    of ``rest``; ``inner_cuts`` the free coordinates of ``h``'s critical points."""

    outer: int
    rest: tuple
    kind: str
    factor: sp.Expr
    link: sp.Expr
    inner: object
    inner_cuts: tuple
    factor_fn: object        # numpy: z_o -> a(z_o)
    cut_fn: object           # numpy: y (n,) -> cuts in z_o (n, m), nan where absent

    def moments(self, y, omega, Sigma, *, rtol=1e-10, max_level=9):
        """:func:`nested_moments` (what :func:`~.level_set.level_set_moments` calls)."""
        return nested_moments(self, y, omega, Sigma, rtol=rtol, max_level=max_level)

    def describe(self) -> str:
        form = "a(z_o) h(z_r)" if self.kind == "product" else "a(z_o) + h(z_r)"
        return (f"level set nested over z[{self.outer}] ({form}, a = {self.factor}), inner "
                + self.inner.describe())


def link_level_set(link: sp.Matrix, indices: sp.Matrix, params: dict):
    """The level-set structure of a noiseless scalar link: two indices (or their sign
    orthants) by :func:`~.level_set.level_set_structure`, three by :func:`nested_structure`
    after the same refusals (a link constant on an open set, one that does not depend on
    the indices).  Raises :class:`NotApplicable` with the reason."""
    z = list(indices)
    if len(z) != 3:
        return level_set_structure(link, indices, params)
    try:
        level_set_structure(link, indices, params)
    except NotApplicable as exc:
        if "three indices" not in str(exc):
            raise
    g = sp.sympify(link[0, 0]).xreplace({k: sp.nsimplify(v) for k, v in params.items()})
    return nested_structure(g, z)


def _separation(g, zo, rest):
    """``(kind, a, h)`` if ``g = a(zo) h(rest)`` or ``a(zo) + h(rest)``, else None."""
    parts = sp.separatevars(g, symbols=[zo], dict=True)
    if parts is not None:
        a, h = parts[zo], parts["coeff"]
        if not a.free_symbols & set(rest) and not h.has(zo) and a.has(zo) \
                and h.free_symbols & set(rest):
            return "product", a, h
    h = g.xreplace({zo: sp.S.Zero})
    a = sp.simplify(g - h)
    if a.has(zo) and not a.free_symbols & set(rest) and h.free_symbols & set(rest):
        return "sum", a, h
    return None


def _real_solutions(expr, v):
    try:
        sols = sp.solve(expr, v)
    except (NotImplementedError, sp.PolynomialError, ValueError):
        return []
    return [s for s in sols if not s.has(v) and not s.has(sp.Piecewise)]


def nested_structure(g, z):
    """:class:`NestedLevelSet` of the smooth link ``g`` of the three indices ``z``: the
    first index in which ``g`` separates (product or sum) with a two-index rest that the
    level-set machinery solves on a Numba path.  Raises :class:`NotApplicable` with the
    reason otherwise."""
    if len(z) != 3:
        raise NotApplicable(f"a nested level set takes 3 indices, got {len(z)}")
    if g.has(*_SWITCHES):
        raise NotApplicable(f"the link {g} of three indices has switches (Abs, sign, ...): "
                            "not split into orthants over three indices yet")
    reasons = []
    for o, zo in enumerate(z):
        rest = [v for v in z if v is not zo]
        sep = _separation(g, zo, rest)
        if sep is None:
            reasons.append(f"not a(z{o + 1}) h(rest) or a(z{o + 1}) + h(rest)")
            continue
        kind, a, h = sep
        try:
            inner = _smooth_structure(sp.expand(h), rest, None)
        except NotApplicable as exc:
            reasons.append(f"over z[{o}]: {exc}")
            continue
        if not isinstance(inner, LevelSetStructure) or inner.complex_branches \
                or inner.unresolved_folds:
            reasons.append(f"over z[{o}]: the inner level set of {h} has no Numba path")
            continue
        hm, rm = sp.Matrix([[h]]), sp.Matrix(rest)
        inner_cuts = tuple(sorted({float(p[inner.free])
                                   for p in link_critical_points(hm, rm, {})}))
        t = sp.Dummy("t", real=True)
        y = sp.Dummy("y", real=True)
        const = _real_solutions(sp.diff(a, zo), zo)
        targets = []
        if kind == "product":
            const += _real_solutions(a, zo)
            targets = [y / c for c in critical_values(hm, rm, {}) if c != 0]
        else:
            targets = [y - c for c in critical_values(hm, rm, {})]
        level = _real_solutions(sp.Eq(a, t), zo) if targets else []
        cut_exprs = [sp.nsimplify(c) for c in const if c.is_real is not False]
        cut_exprs += [b.xreplace({t: tg}) for b in level for tg in targets]
        fn = sp.lambdify([y], cut_exprs, modules="numpy") if cut_exprs else None
        return NestedLevelSet(
            outer=o, rest=tuple(i for i in range(3) if i != o), kind=kind, factor=a,
            link=g, inner=inner, inner_cuts=inner_cuts,
            factor_fn=sp.lambdify([zo], a, modules="numpy"),
            cut_fn=_cut_function(fn))
    raise NotApplicable(f"the link {g} of three indices: " + "; ".join(reasons))


def _cut_function(fn):
    """``y (n,) -> (n, m)`` cuts in ``z_o`` from the lambdified SymPy cut expressions
    ``fn`` (evaluated in complex arithmetic: a cut is absent, nan, where it is not real)."""
    def cuts(y):
        y = np.asarray(y, dtype=float)
        if fn is None:
            return np.empty((y.size, 0))
        with np.errstate(all="ignore"):
            vals = [np.broadcast_to(np.asarray(v, dtype=complex), y.shape) for v in fn(y + 0j)]
        return np.stack([np.where(np.abs(v.imag) <= 1e-12 * (1 + np.abs(v.real)), v.real, np.nan)
                         for v in vals], axis=1)
    return cuts


def _checked(n, omega, Sigma):
    """``omega (n, 3)`` and a positive-definite ``Sigma (3, 3)``, or a ParameterError."""
    omega, Sigma = np.asarray(omega, dtype=float), np.asarray(Sigma, dtype=float)
    if omega.size != 3 * n:
        raise ParameterError(f"omega must hold 3 entries per sample ({n} samples), got shape "
                             f"{omega.shape}")
    if Sigma.shape != (3, 3) or not np.allclose(Sigma, Sigma.T) \
            or np.linalg.eigvalsh(Sigma).min() <= 0:
        raise ParameterError(f"Sigma must be a symmetric positive-definite 3 x 3 matrix, got "
                             f"{Sigma.tolist()}")
    return omega.reshape(n, 3), Sigma


def fixed_nested_moments(st: NestedLevelSet, y, omega, Sigma, outer_level, inner_level):
    """``(log Z, E[z|y] - omega, Cov(z|y) - Sigma)`` at fixed outer and inner tanh-sinh
    levels (module docstring): ``y (n,)``, ``omega (n, 3)``, ``Sigma (3, 3)``."""
    y = np.asarray(y, dtype=float).reshape(-1)
    n = y.size
    omega, Sigma = _checked(n, omega, Sigma)
    for name, lv in (("outer_level", outer_level), ("inner_level", inner_level)):
        if isinstance(lv, bool) or not isinstance(lv, (int, np.integer)) or not 1 <= lv <= 12:
            raise ParameterError(f"{name} must be an integer in [1, 12], got {lv!r}")
    o, r = st.outer, list(st.rest)
    so = float(Sigma[o, o])
    s_ro = Sigma[r, o]
    cond = Sigma[np.ix_(r, r)] - np.outer(s_ro, s_ro) / so
    slope = s_ro / so
    cuts = np.concatenate([st.cut_fn(y), omega[:, o:o + 1]], axis=1)
    bounds, _ = _pieces(cuts, np.full(cuts.shape, -1))
    x, w, _, _ = _piece_nodes(bounds[:, :-1], bounds[:, 1:], np.full(n, np.sqrt(so)),
                              outer_level)
    x, w = x.reshape(n, -1), w.reshape(n, -1)
    log_gauss = -0.5 * (x - omega[:, o:o + 1]) ** 2 / so
    a = st.factor_fn(x) * np.ones_like(x)
    keep = (w > 0) & (log_gauss > -PRUNE)
    if st.kind == "product":
        keep &= a != 0
    s_idx, j_idx = np.nonzero(keep)
    xo, ao = x[s_idx, j_idx], a[s_idx, j_idx]
    if st.kind == "product":
        y_in, log_jac = y[s_idx] / ao, -np.log(np.abs(ao))
    else:
        y_in, log_jac = y[s_idx] - ao, np.zeros(xo.size)
    om_in = omega[s_idx][:, r] + slope[None] * (xo - omega[s_idx, o])[:, None]
    logZ_in, m_in, c_in = fixed_level_set_moments(st.inner, y_in, om_in, cond, inner_level,
                                                  st.inner_cuts, t_max=None)
    with np.errstate(divide="ignore"):
        logW = (np.log(w[s_idx, j_idx]) + log_gauss[s_idx, j_idx] + log_jac + logZ_in
                - 0.5 * np.log(2 * np.pi * so))
    live = np.isfinite(logW)
    logW = np.where(live, logW, -np.inf)
    top = np.full(n, -np.inf)
    np.maximum.at(top, s_idx, logW)
    W = np.where(live, np.exp(logW - np.where(np.isfinite(top), top, 0.0)[s_idx]), 0.0)
    # moments about omega: z_o - omega_o and the inner conditional ones
    d = np.zeros((xo.size, 3))
    d[:, o] = xo - omega[s_idx, o]
    d[:, r] = np.where(live[:, None], om_in + m_in - omega[s_idx][:, r], 0.0)
    second = d[:, :, None] * d[:, None, :]
    inner_cov = np.where(live[:, None, None], c_in + cond[None], 0.0)
    for i, ri in enumerate(r):
        for j, rj in enumerate(r):
            second[:, ri, rj] += inner_cov[:, i, j]
    S0 = np.bincount(s_idx, W, n)
    S1 = np.stack([np.bincount(s_idx, W * d[:, i], n) for i in range(3)], axis=1)
    S2 = np.stack([np.bincount(s_idx, W * second[:, i, j], n)
                   for i in range(3) for j in range(3)], axis=1).reshape(n, 3, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        logZ = np.log(S0) + top
        mean = S1 / S0[:, None]
        cov = S2 / S0[:, None, None] - mean[:, :, None] * mean[:, None, :]
    dead = ~np.isfinite(logZ)
    logZ[dead], mean[dead], cov[dead] = -np.inf, np.nan, np.nan
    return logZ, mean, cov - Sigma[None]


def nested_moments(st: NestedLevelSet, y, omega, Sigma, *, rtol=1e-10, max_level=9):
    """``(log Z, E[z|y] - omega, Cov(z|y) - Sigma, error)``: stages ``(L, L + 1)`` from
    ``L = 3`` until two successive ones agree to ``rtol`` per sample (``log Z``; moments
    over the prior standard deviations and their products), or ``L`` reaches
    :data:`MAX_OUTER_LEVEL` or the inner level ``max_level``; ``error`` the last change
    (what the sample reached, reported, not hidden, when it is above ``rtol``)."""
    y = np.asarray(y, dtype=float).reshape(-1)
    omega, Sigma = _checked(y.size, omega, Sigma)
    if y.size > CHUNK:
        parts = [nested_moments(st, y[i:i + CHUNK], omega[i:i + CHUNK], Sigma, rtol=rtol,
                                max_level=max_level) for i in range(0, y.size, CHUNK)]
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(4))
    last = max(FIRST_OUTER_LEVEL + 1, min(MAX_OUTER_LEVEL, max_level - INNER_OFFSET))
    return refine_by_levels(
        lambda act, level: fixed_nested_moments(st, y[act], omega[act], Sigma, level,
                                                level + INNER_OFFSET),
        range(FIRST_OUTER_LEVEL, last + 1), y.size, np.sqrt(np.diag(Sigma)), rtol)
