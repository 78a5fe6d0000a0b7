"""Noiseless links of any form: the posterior on the level set ``{Z : g(Z) = y}``.

For a deterministic scalar link ``y = g(z)`` of ``d`` indices the output density is the
co-area integral (Federer's formula) of the Gaussian over the level set,

    Z_out(y; omega, Sigma) = int dz N(z; omega, Sigma) delta(y - g(z))
                           = int dx sum_k N((h_k(y, x), x); omega, Sigma) / |d_s g|,

where one index ``z_s`` is solved, ``z_s = h_k(y, x)`` (the SymPy preimage branches),
``x`` are the other ``d - 1`` indices and ``d_s g = dg/dz_s`` at the preimage.  Posterior
moments are the same integral with ``z`` and ``z z^T`` inserted (Eq. (9)-(12) of Troiani
et al., arXiv:2502.00901, with ``P_out(y|Z) = delta(y - g(Z))``).

What SymPy derives here (:func:`level_set_structure`): the solved index, its preimage
branches, the Jacobian ``|d_s g|`` at each branch, and the *critical points* in ``x``
where the integrand is not smooth -- zeros of the radicands of the branches (folds of
the level set: ``1/sqrt`` singularities of ``1/|d_s g|``), zeros of ``d_s g`` and poles
of the branches.  Integration (:func:`level_set_moments`) follows the integrand:
tanh-sinh on the pieces between the critical points (its double-exponential clustering
at the ends integrates the ``1/sqrt`` folds to full accuracy), infinite pieces mapped
to ``[0, 1]``, every piece split at the integrand's mode (so a level set much narrower
than the prior is resolved at any scale), levels doubled until two successive levels
agree to the tolerance (the reported error).

Links with switches on the coordinate hyperplanes (``|z1| - |z2|``, ``max(z1, 0) +
z2``: ``Abs``, ``sign``, ``Heaviside``, ``Piecewise``, ``Max``, ``Min``) are split into
their sign orthants (:func:`orthant_links`: SymPy with ``z_i = s_i u_i``, ``u_i > 0``),
each a smooth link whose level set is masked to its orthant, the orthant's faces and
the zeros of the preimage being cuts; ``Z_out`` and the moments are the sums over the
orthants (:func:`_sum_sheets`).

One free index is integrated here (``d <= 2``, e.g. ``z1^2 - z2^2``, ``z1 z2``,
``z1 / (1 + z2^2)``); a link of three indices that separates in one of them (``z1 z2
z3``, ``z1^2 + z2 z3``) nests an outer index over this two-index rule
(:mod:`.nested_level_set`); other links of more indices raise
:class:`~symtheory.glm.integrate.link_structure.NotApplicable` with the reason.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import sympy as sp

from ...core.quadrature import tanh_sinh_unit
from .link_structure import NotApplicable

#: first and last tanh-sinh level of :func:`level_set_moments` (level L: ~ 6 2**L nodes
#: per piece)
FIRST_LEVEL, MAX_LEVEL = 3, 9
#: level of the pass that locates the integrand's mode on each piece
MODE_LEVEL = 4


@dataclass
class LevelSetStructure:
    """Preimages of ``g(z) = y`` solved for index ``solved`` (position in the flat
    indices) as functions of ``(y, x, *params)``, ``x`` the other index (``free``)."""

    solved: int
    free: int
    y: sp.Symbol
    branches: tuple          # SymPy expressions h_k(y, x)
    jacobians: tuple         # |d g / d z_solved| at each branch, SymPy
    critical_points: tuple   # SymPy expressions c(y) of x
    branch_fn: object        # numpy: (y, x, *params) -> [h_k]
    jacobian_fn: object      # numpy: (y, x, *params) -> [|d_s g|]
    critical_fn: object      # numpy: (y, *params) -> [c]
    complex_branches: bool = False  # branches written with I (Cardano): evaluate in complex
    link_fn: object = None   # numpy: (z_solved, x) -> (g, d g / d z_solved), for Newton polishing
    local_fns: tuple = ()    # per critical point c: numpy (y, delta) -> ([h_k], [|d_s g|]) at x = c + delta
    unresolved_folds: int = 0  # critical points whose radicands SymPy could not cancel
    signs: tuple = None      # orthant s_i z_i > 0 the level set is restricted to (None: all)
    link: object = None      # the smooth link g (SymPy) on that orthant
    local_exprs: tuple = ()  # per critical point: ([h_k], [|d_s g|]) of (y, delta), SymPy
    delta: sp.Symbol = None  # the offset symbol of local_exprs
    x: sp.Symbol = None      # the free index's symbol in branches and jacobians

    def describe(self) -> str:
        return (f"level set: z[{self.solved}] solved ({len(self.branches)} branches), "
                f"{len(self.critical_points)} critical points")


@dataclass
class OrthantLevelSet:
    """A link with switches at ``z_i = 0`` (``|z1| - |z2|``): one smooth
    :class:`LevelSetStructure` per sign orthant (``sheets``), ``Z_out`` their sum."""

    sheets: tuple

    def describe(self) -> str:
        return (f"level set on {len(self.sheets)} sign orthants, "
                + "; ".join(f"{s.signs}: {s.describe()[11:]}" for s in self.sheets))


def _radicands(expr):
    """Arguments of the non-integer powers in ``expr`` (where a branch turns complex)."""
    out = []
    for p in expr.atoms(sp.Pow):
        if p.exp.is_Rational and not p.exp.is_integer:
            out.append(p.base)
    return out


def _real_roots_in(expr, x):
    """SymPy solutions of ``expr = 0`` for ``x`` (empty when SymPy cannot solve)."""
    try:
        sols = sp.solve(sp.Eq(expr, 0), x)
    except (NotImplementedError, sp.PolynomialError, ValueError):
        return []
    return [s for s in sols if not s.has(x)]


def _local_forms(branches, jacobians, crit, x, y, mods):
    """Branches and Jacobians at ``x = c + delta`` with the radicands expanded, so that
    ``y + c(y)^2`` cancels symbolically: ``sqrt(y + x^2)`` at ``x = sqrt(-y) + delta``
    is ``sqrt(2 sqrt(-y) delta + delta^2)``, exact down to ``delta = 1e-300`` where the
    global form has lost every digit at ``delta < 1e-16 |c|`` (an error ``~ sqrt(eps)``
    on the integral of the fold's ``1/sqrt`` singularity).  Returns the lambdified forms
    and how many critical points SymPy could not cancel."""
    delta = sp.Dummy("delta", real=True)
    out, exprs, unresolved = [], [], 0
    for c in crit:
        def local(e, c=c):          # called in this iteration: bind c
            e = e.xreplace({x: c + delta})
            return e.replace(lambda a: a.is_Pow and a.exp.is_Rational and not a.exp.is_integer,
                             lambda a: sp.Pow(sp.expand(a.base), a.exp))
        hs = [local(h) for h in branches]
        js = [local(j) for j in jacobians]
        at_zero = [r.xreplace({delta: 0}) for h in hs for r in _radicands(h) if r.has(delta)]
        if any(sp.simplify(r) != 0 for r in at_zero) or not at_zero:
            unresolved += bool(at_zero)
        out.append(sp.lambdify([y, delta], [hs, js], modules=mods))
        exprs.append((tuple(hs), tuple(js)))
    return tuple(out), unresolved, tuple(exprs), delta


_SWITCHES = (sp.sign, sp.Heaviside, sp.Abs, sp.Piecewise, sp.Max, sp.Min)


def orthant_links(g, z):
    """``[(signs, g_s)]``: the link on each sign orthant ``s_i z_i > 0`` with its switches
    resolved by SymPy (``z_i = s_i u_i``, ``u_i`` positive), orthants where ``g_s`` still
    switches raise :class:`NotApplicable` (e.g. ``|z1 - z2|``: not an orthant switch)."""
    out = []
    u = [sp.Dummy(f"u{i}", positive=True) for i in range(len(z))]
    for signs in itertools.product((1, -1), repeat=len(z)):
        gs = g.xreplace({zi: s * ui for zi, s, ui in zip(z, signs, u)})
        gs = sp.piecewise_fold(sp.refine(gs, sp.And(*[sp.Q.positive(ui) for ui in u])))
        gs = sp.simplify(gs).xreplace({ui: s * zi for zi, s, ui in zip(z, signs, u)})
        if gs.has(*_SWITCHES):
            raise NotApplicable(f"the link {g} still switches on the orthant {signs} "
                                f"({gs}): only switches at z_i = 0 are split")
        if not gs.free_symbols & set(z):
            raise NotApplicable(f"the link {g} is constant ({gs}) on the orthant {signs}: "
                                "y has an atom there, not a density")
        out.append((signs, sp.expand(gs)))
    return out


#: prior draws of :func:`flat_fraction` (an atom of mass m is missed with probability
#: (1 - m)^256: 1e-6 at m = 5%)
FLAT_DRAWS = 256


def flat_fraction(g, z) -> float:
    """Fraction of ``FLAT_DRAWS`` standard normal draws of ``z`` (fixed seed) at which the
    SymPy gradient of ``g`` is exactly zero (jumps' ``DiracDelta`` dropped, ``Heaviside``
    as a step): positive only when ``g`` is constant on a set of positive measure (the
    gradient of a non-constant analytic piece vanishes on a null set)."""
    grads = [sp.diff(g, s).replace(sp.DiracDelta, lambda *a: sp.S.Zero) for s in z]
    modules = [{"Heaviside": lambda x, h0=0.5: np.heaviside(x, h0), "sign": np.sign}, "numpy"]
    f = sp.lambdify(z, grads, modules=modules)
    pts = np.random.default_rng(20240601).standard_normal((len(z), FLAT_DRAWS))
    with np.errstate(all="ignore"):
        vals = np.stack([np.broadcast_to(np.asarray(v, dtype=float), (FLAT_DRAWS,))
                         for v in f(*pts)])
    return float(np.mean(np.all(vals == 0, axis=0)))


def level_set_structure(link: sp.Matrix, indices: sp.Matrix, params: dict):
    """Solve ``g(z) = y`` for one index (the first that SymPy solves in closed form).

    A link with switches at ``z_i = 0`` (``Abs``, ``sign``, ``Heaviside``, ``Piecewise``)
    is split into its sign orthants (:func:`orthant_links`), each a smooth link
    restricted to its orthant: an :class:`OrthantLevelSet` of the pieces.

    A link of three indices raises :class:`NotApplicable`: it is nested over the index it
    separates in by :func:`~.nested_level_set.link_level_set`, the entry point of both.

    Raises :class:`NotApplicable` if the link has more than one output, more than three
    indices, switches away from the coordinate hyperplanes, or no index SymPy can solve
    for (on some orthant)."""
    if link.shape != (1, 1):
        raise NotApplicable(f"the level-set channel needs one output, the link has {link.shape}")
    z = list(indices)
    if len(z) > 3:
        raise NotApplicable(f"level sets of {len(z) - 1} > 2 free indices are not integrated "
                            "yet (declare output noise or a DeterministicReduction)")
    g = sp.sympify(link[0, 0]).xreplace({k: sp.nsimplify(v) for k, v in params.items()})
    if g.has(sp.DiracDelta):
        raise NotApplicable("the link contains a DiracDelta")
    flat = flat_fraction(g, z)
    if flat > 0:
        raise NotApplicable(
            f"the link {g} is constant on an open set (its gradient vanishes at {flat:.0%} of "
            "prior draws): y has an atom there, so the level set {g = y} has measure zero "
            "for other y but positive prior mass at that value -- neither a density in y "
            "(level-set channel, co-area formula) nor a link constant on sign cells "
            "(discrete channel); declare output noise")
    if not g.free_symbols & set(z):
        raise NotApplicable("the link does not depend on the indices")
    if len(z) == 3:
        raise NotApplicable("a link of three indices nests an outer index over a two-index "
                            "level set: nested_level_set.link_level_set builds it")
    if g.has(*_SWITCHES):
        sheets = tuple(_smooth_structure(gs, z, signs) for signs, gs in orthant_links(g, z))
        return OrthantLevelSet(sheets)
    return _smooth_structure(g, z, None)


def _smooth_structure(g, z, signs):
    """:class:`LevelSetStructure` of the smooth link ``g``; ``signs``: restrict to the
    orthant ``signs_i z_i > 0`` (its faces become critical points of the free index: the
    integrand jumps to 0 there)."""
    y = sp.Dummy("y", real=True)
    for s_pos, s in enumerate(z):
        if not g.has(s):
            continue
        try:
            sols = sp.solve(sp.Eq(g, y), s)
        except (NotImplementedError, sp.PolynomialError, ValueError):
            continue
        sols = [h for h in sols if not h.has(s) and not h.has(sp.Piecewise)]
        if not sols:
            continue
        ds = sp.diff(g, s)
        rest = [t for t in z if t is not s]
        x = rest[0] if rest else sp.Dummy("x", real=True)
        jac = tuple(sp.Abs(sp.simplify(ds.xreplace({s: h}))) for h in sols)
        crit = []
        for h, j in zip(sols, jac):
            inner = j.args[0] if isinstance(j, sp.Abs) else j
            for e in _radicands(h) + [sp.denom(sp.together(h)), inner]:
                crit += _real_roots_in(e, x)
            if signs is not None:
                crit += _real_roots_in(h, x)          # the solved index leaves its orthant
        if signs is not None and rest:
            crit.append(sp.S.Zero)                    # the free index leaves its orthant
        crit = tuple(dict.fromkeys(sp.simplify(c) for c in crit if not c.has(x)))
        mods = [{"Abs": np.abs}, "numpy"]
        local, unresolved, local_exprs, delta = _local_forms(sols, jac, crit, x, y, mods)
        return LevelSetStructure(
            solved=s_pos, free=1 - s_pos, y=y, branches=tuple(sols), jacobians=jac,
            critical_points=crit,
            branch_fn=sp.lambdify([y, x], list(sols), modules=mods),
            jacobian_fn=sp.lambdify([y, x], list(jac), modules=mods),
            critical_fn=sp.lambdify([y], list(crit), modules=mods) if crit else None,
            complex_branches=any(h.has(sp.I) for h in sols),
            link_fn=sp.lambdify([s, x], [g, ds], modules=mods),
            local_fns=local, unresolved_folds=unresolved, signs=signs, link=g,
            local_exprs=local_exprs, delta=delta, x=x)
    where = "" if signs is None else f" on the orthant {signs}"
    raise NotApplicable(f"SymPy solves g(z) = y for none of the indices ({g}){where}")


def critical_values(link, indices, params) -> list[float]:
    """Real values of the scalar link at the real zeros of its gradient (SymPy): where
    the output density has its singularities (``log|y|`` for a saddle, e.g. ``z1 z2``).
    A link with switches at ``z_i = 0`` adds, per orthant, the critical values of its
    restriction to every face ``{z_i = 0, i in F}`` (where the density has kinks: ``y = 0``
    for ``|z1| - |z2|``)."""
    g = sp.sympify(link[0, 0]).xreplace(params)
    z = list(indices)
    if not g.has(*_SWITCHES):
        return _gradient_zeros(g, z)
    out = set()
    for _, gs in orthant_links(g, z):
        for face in itertools.product((False, True), repeat=len(z)):
            g_face = gs.xreplace({v: sp.S.Zero for v, f in zip(z, face) if f})
            out.update(_gradient_zeros(g_face, [v for v, f in zip(z, face) if not f]))
    return sorted(out)


def _gradient_zeros(g, z) -> list[float]:
    """Real values of ``g`` at the real zeros of its gradient in ``z``."""
    if not g.free_symbols & set(z):
        v = complex(sp.N(g)) if not g.free_symbols else 1j
        return [v.real] if abs(v.imag) < 1e-12 else []
    try:
        sols = sp.solve([sp.diff(g, v) for v in z], z, dict=True)
    except (NotImplementedError, ValueError):
        return []
    out = []
    for sol in sols:
        val = g.xreplace(sol)
        if val.free_symbols:
            continue                       # a critical manifold with varying value: skip
        v = complex(sp.N(val))
        if abs(v.imag) < 1e-12:
            out.append(v.real)
    return sorted(set(out))


# ---------------------------------------------------------------------- integration
def _pieces(cuts, ids):
    """Sorted piece boundaries ``(n, K + 1)`` of the real line cut at the per-sample
    ``cuts (n, m)`` (nan: absent, moved to +inf = an empty piece) and the id of each
    boundary (``ids (n, m)``: the critical point it is, -1 for none)."""
    n = cuts.shape[0]
    b = np.concatenate([np.full((n, 1), -np.inf), cuts, np.full((n, 1), np.inf)], axis=1)
    i = np.concatenate([np.full((n, 1), -1), ids, np.full((n, 1), -1)], axis=1)
    i = np.where(np.isnan(b), -1, i)
    b = np.where(np.isnan(b), np.inf, b)
    order = np.argsort(b, axis=1, kind="stable")
    return np.take_along_axis(b, order, axis=1), np.take_along_axis(i, order, axis=1)


def _piece_nodes(a, b, scale, level):
    """Nodes ``x (n, K, N)`` and weights of tanh-sinh on the pieces ``[a, b]`` (``n, K``),
    infinite ends mapped by ``x = a + scale u / (1 - u)`` (gaps kept exact at the ends)."""
    side, gap, w = tanh_sinh_unit(level)
    step = 2.0 ** -level
    q = 0.5 * gap                        # distance of u in [0, 1] to its nearer end
    near_lo = side < 0
    a, b, sc = a[..., None], b[..., None], scale[:, None, None]
    fin = np.isfinite(a) & np.isfinite(b)
    lo_inf, hi_inf = ~np.isfinite(a), ~np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        length = np.where(fin, b - a, 0.0)
        x_fin = np.where(near_lo, a + length * q, b - length * q)
        # [a, inf): u = q near a, 1 - u = q near infinity; (-inf, b] mirrored
        t_hi = np.where(near_lo, q / (1 - q), (1 - q) / q)
        dt_hi = np.where(near_lo, 1 / (1 - q) ** 2, 1 / q ** 2)
        t_lo = np.where(near_lo, (1 - q) / q, q / (1 - q))
        dt_lo = np.where(near_lo, 1 / q ** 2, 1 / (1 - q) ** 2)
        x_hi = a + sc * t_hi
        x_lo = b - sc * t_lo
        x = np.where(fin, x_fin, np.where(hi_inf & ~lo_inf, x_hi, np.where(lo_inf & ~hi_inf, x_lo, 0.0)))
        jac = np.where(fin, length, np.where(hi_inf & ~lo_inf, sc * dt_hi,
                                             np.where(lo_inf & ~hi_inf, sc * dt_lo, 0.0)))
        # signed distance from the nearer finite end (the exact offset of a fold)
        dist = np.where(fin, length * q, np.where(hi_inf & ~lo_inf, sc * t_hi, sc * t_lo))
        delta = np.where(near_lo, dist, -dist)
    weight = 0.5 * step * w * jac
    weight = np.where((b > a) & np.isfinite(weight), weight, 0.0)
    return np.where(np.isfinite(x), x, 0.0), weight, np.where(np.isfinite(delta), delta, 0.0), \
        np.broadcast_to(near_lo, x.shape)


def _as_real(v, shape, tol=1e-12):
    v = np.broadcast_to(np.asarray(v, dtype=complex), shape)
    return np.where(np.abs(v.imag) <= tol * (1 + np.abs(v.real)), v.real, np.nan)


def _polish(structure, h, x, y):
    """Two Newton steps on ``g(h, x) = y``: closed-form roots (Cardano) cancel, and a
    real root computed in complex arithmetic keeps an imaginary residue (accepted up to
    1e-7 relative, then made exact here)."""
    for _ in range(2):
        val, der = structure.link_fn(h, x)
        step = (np.asarray(val) - y) / np.asarray(der)
        h = np.where(np.isfinite(step) & (np.abs(step) < 1e-4 * (1 + np.abs(h))), h - step, h)
    return h


def _branches_at(structure, y, x, delta, end_id):
    """``([h_k], [|d_s g|])`` at the nodes: the global forms, and the local forms of the
    critical point ``end_id`` (>= 0) at the nodes next to it."""
    yb = y[:, None, None]
    if structure.complex_branches:
        raw = structure.branch_fn(yb.astype(complex), x.astype(complex))
        hs = [_polish(structure, _as_real(h, x.shape, 1e-7), x, yb) for h in raw]
    else:                       # real radicals: a negative radicand gives nan (no branch)
        hs = [np.broadcast_to(np.asarray(h, dtype=float), x.shape)
              for h in structure.branch_fn(yb, x)]
    js = [np.abs(structure.link_fn(h, x)[1]) * np.ones(x.shape) for h in hs]
    for c, fn in enumerate(structure.local_fns):
        at = end_id == c
        if not at.any():
            continue
        lh, lj = fn(yb, delta)
        hs = [np.where(at, np.asarray(v, dtype=float), h) for v, h in zip(lh, hs)]
        js = [np.where(at, np.abs(np.asarray(v, dtype=float)), j) for v, j in zip(lj, js)]
    return hs, js


def _log_integrand(structure, y, nodes, omega, prec, logdet):
    """``[(z (n, K, N, 2), log f)]`` per branch: the Gaussian on the level set over the
    Jacobian (``-inf`` where the branch is not real)."""
    x, _, delta, end_id = nodes
    out = []
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        hs, js = _branches_at(structure, y, x, delta, end_id)
        for h, j in zip(hs, js):
            z = np.empty(x.shape + (2,))
            z[..., structure.solved], z[..., structure.free] = h, x
            d = z - omega[:, None, None, :]
            quad = np.einsum("...i,ij,...j->...", d, prec, d)
            logf = -0.5 * quad - np.log(2 * np.pi) - 0.5 * logdet - np.log(j)
            ok = np.isfinite(logf) & np.isfinite(h)
            if structure.signs is not None:       # the piece of the level set in its orthant
                ok &= np.all(z * np.asarray(structure.signs, dtype=float) >= 0, axis=-1)
            out.append((np.where(ok[..., None], z, 0.0), np.where(ok, logf, -np.inf)))
    return out


def _nodes(bounds, ids, scale, level):
    """Nodes of every piece with, per node, the id of the critical point it is next to."""
    return _piece_list_nodes((bounds[:, :-1], bounds[:, 1:], ids[:, :-1], ids[:, 1:]),
                             scale, level)


def _piece_list_nodes(pieces, scale, level):
    """:func:`_nodes` of the pieces ``(a, b, id_a, id_b)``, each ``(n, K)``."""
    a, b, ida, idb = pieces
    x, w, delta, near_lo = _piece_nodes(a, b, scale, level)
    end_id = np.where(near_lo, ida[..., None], idb[..., None])
    return x, w, delta, end_id


def _live_pieces(structure, y, bounds, ids, omega, prec, logdet, scale):
    """The pieces of an orthant sheet where the integrand is not identically 0, packed
    to the left (``(a, b, id_a, id_b)``, dead columns empty): the orthant's faces and the
    zeros of the solved index are cuts, so a piece is either inside the orthant or
    outside it, and one in :data:`FIRST_LEVEL` nodes all outside means all of it is.
    Saves the refinement of the pieces that carry nothing (most of them: an orthant
    holds one or two of the ~8 pieces)."""
    pieces = (bounds[:, :-1], bounds[:, 1:], ids[:, :-1], ids[:, 1:])
    if structure.signs is None:
        return pieces
    nodes = _piece_list_nodes(pieces, scale, FIRST_LEVEL)
    terms = _log_integrand(structure, y, nodes, omega, prec, logdet)
    live = np.any(np.isfinite(np.stack([t[1] for t in terms])) & (nodes[1] > 0), axis=(0, 3))
    order = np.argsort(~live, axis=1, kind="stable")
    keep = max(int(live.sum(axis=1).max()), 1)
    packed = [np.take_along_axis(p, order, axis=1)[:, :keep] for p in pieces]
    alive = np.take_along_axis(live, order, axis=1)[:, :keep]
    packed[1] = np.where(alive, packed[1], packed[0])        # dead: an empty piece
    return tuple(packed)


def _split_at_modes(structure, y, bounds, ids, omega, prec, logdet, scale):
    """Insert each piece's interior mode (argmax node, refined by a parabola in log f)."""
    a, b = bounds[:, :-1], bounds[:, 1:]
    nodes = _nodes(bounds, ids, scale, MODE_LEVEL)
    x, w = nodes[0], nodes[1]
    terms = _log_integrand(structure, y, nodes, omega, prec, logdet)
    logf = np.logaddexp.reduce(np.stack([t[1] for t in terms]), axis=0)
    logf = np.where(w > 0, logf, -np.inf)
    k = np.argmax(logf, axis=-1)
    N = x.shape[-1]
    kk = np.clip(k, 1, N - 2)

    def take(arr, i):
        return np.take_along_axis(arr, i[..., None], axis=-1)[..., 0]

    x0, x1, x2 = take(x, kk - 1), take(x, kk), take(x, kk + 1)
    f0, f1, f2 = take(logf, kk - 1), take(logf, kk), take(logf, kk + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        num = (x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)
        den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
        vertex = x1 - 0.5 * num / den
    interior = (k > 0) & (k < N - 1) & np.isfinite(f1)
    mode = np.where(interior & np.isfinite(vertex) & (vertex > x0) & (vertex < x2), vertex,
                    np.where(interior, x1, np.nan))
    mode = np.where((mode > a) & (mode < b), mode, np.nan)
    return _pieces(np.concatenate([bounds[:, 1:-1], mode], axis=1),
                   np.concatenate([ids[:, 1:-1], np.full(mode.shape, -1)], axis=1))


#: samples integrated together by :func:`level_set_moments` (memory: samples x pieces x
#: nodes per array; 64 x 8 x 3000 doubles at the last level is 12 MB)
CHUNK = 64


def level_set_moments(structure: LevelSetStructure, y, omega, Sigma, *,
                      rtol=1e-10, max_level=MAX_LEVEL):
    """:func:`_level_set_moments_chunk` over chunks of :data:`CHUNK` samples (and over
    the orthants of an :class:`OrthantLevelSet`, :func:`_sum_sheets`)."""
    y = np.asarray(y, dtype=float).reshape(-1)
    if hasattr(structure, "moments"):     # a nested level set (.nested_level_set)
        return structure.moments(y, omega, Sigma, rtol=rtol, max_level=max_level)
    omega = np.asarray(omega, dtype=float).reshape(y.size, 2)
    if isinstance(structure, OrthantLevelSet):
        return _sum_sheets([level_set_moments(sh, y, omega, Sigma, rtol=rtol,
                                              max_level=max_level)
                            for sh in structure.sheets], Sigma)
    if y.size <= CHUNK:
        return _level_set_moments_chunk(structure, y, omega, Sigma, rtol=rtol,
                                        max_level=max_level)
    parts = [_level_set_moments_chunk(structure, y[i:i + CHUNK], omega[i:i + CHUNK], Sigma,
                                      rtol=rtol, max_level=max_level)
             for i in range(0, y.size, CHUNK)]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(4))


def _sum_sheets(parts, Sigma):
    """Moments of the union of disjoint level-set pieces from each piece's ``(log Z,
    E[z|y] - omega, Cov - Sigma, error)``: ``Z = sum Z_k`` and the second moments about
    ``omega`` add with the weights ``Z_k / Z``; the error is the largest weighted one."""
    logZs = np.stack([p[0] for p in parts])
    logZ = np.logaddexp.reduce(logZs, axis=0)
    with np.errstate(invalid="ignore"):
        w = np.where(np.isfinite(logZs), np.exp(logZs - logZ), 0.0)
    d = np.stack([np.nan_to_num(p[1]) for p in parts])
    second = np.stack([np.nan_to_num(p[2]) + Sigma + p[1][:, :, None] * p[1][:, None, :]
                       for p in parts])
    second = np.nan_to_num(second)
    mean = np.einsum("kn,kni->ni", w, d)
    cov = np.einsum("kn,knij->nij", w, second) - mean[:, :, None] * mean[:, None, :] - Sigma
    err = np.max(w * np.stack([p[3] for p in parts]), axis=0)
    dead = ~np.isfinite(logZ)
    mean[dead], cov[dead] = np.nan, np.nan
    return logZ, mean, cov, err


def _level_set_moments_chunk(structure: LevelSetStructure, y, omega, Sigma, *,
                             rtol=1e-10, max_level=MAX_LEVEL):
    """``log Z_out``, ``E[z|y] - omega`` and ``Cov(z|y) - Sigma`` on the level set.

    ``y (n,)``, ``omega (n, 2)``, ``Sigma (2, 2)`` the prior covariance of the two flat
    indices.  Returns ``(log_Z (n,), mean_shift (n, 2), cov_shift (n, 2, 2), error (n,))``,
    ``error`` the change between the last two tanh-sinh levels (``log Z``; the moments
    in units of the prior standard deviations).  ``log_Z = -inf`` where ``y`` is not a
    value of the link (then the moments are nan)."""
    y = np.asarray(y, dtype=float).reshape(-1)
    omega = np.asarray(omega, dtype=float).reshape(y.size, 2)
    Sigma = np.asarray(Sigma, dtype=float)
    prec = np.linalg.inv(Sigma)
    logdet = float(np.linalg.slogdet(Sigma)[1])
    sd = np.sqrt(np.diag(Sigma))
    # the free index's conditional scale sets the map of the infinite pieces
    scale = np.full(y.size, 1.0 / np.sqrt(prec[structure.free, structure.free]))
    if structure.critical_fn is not None:
        with np.errstate(invalid="ignore"):
            cuts = np.stack([_as_real(c, y.shape) for c in structure.critical_fn(y)], axis=1)
    else:
        cuts = np.empty((y.size, 0))
    ids = np.broadcast_to(np.arange(cuts.shape[1]), cuts.shape)
    # the free index's prior mean splits the real line when nothing else does
    cuts = np.concatenate([cuts, omega[:, structure.free:structure.free + 1]], axis=1)
    ids = np.concatenate([ids, np.full((y.size, 1), -1)], axis=1)
    bounds, ids = _pieces(cuts, ids)
    bounds, ids = _split_at_modes(structure, y, bounds, ids, omega, prec, logdet, scale)
    pieces = _live_pieces(structure, y, bounds, ids, omega, prec, logdet, scale)
    floor = np.sqrt(np.finfo(float).eps) if structure.unresolved_folds else 0.0
    # a fold SymPy did not cancel: its 1/sqrt end is lost below sqrt(eps) (the floor)
    return refine_by_levels(
        lambda act, level: _level_sums(structure, y[act], tuple(p[act] for p in pieces),
                                       omega[act], prec, logdet, scale[act], level, Sigma),
        range(FIRST_LEVEL, max_level + 1), y.size, sd, rtol, floor)


def refine_by_levels(stage, levels, n, sd, rtol, floor=0.0):
    """Per sample, the first of ``levels`` that agrees with the one before to ``rtol``:
    ``stage(active, level)`` gives ``(log Z, mean shift, cov shift)`` of the samples
    ``active``; only those not yet converged are refined.  The change is measured in
    ``log Z`` and in the moments over the prior standard deviations ``sd`` (and their
    products), at least ``floor``; the last level is taken whatever it reached.  Returns
    ``(log Z, mean shift, cov shift, change)``."""
    d = sd.size
    out = (np.full(n, -np.inf), np.full((n, d), np.nan), np.full((n, d, d), np.nan),
           np.zeros(n))
    levels = list(levels)
    active = np.arange(n)
    prev = None
    for level in levels:
        cur = stage(active, level)
        if prev is not None:
            with np.errstate(invalid="ignore"):   # -inf - -inf: y off this (orthant) piece
                err = np.maximum.reduce([
                    np.abs(cur[0] - prev[0]),
                    np.max(np.abs(cur[1] - prev[1]) / sd, axis=1),
                    np.max(np.abs(cur[2] - prev[2]) / np.outer(sd, sd), axis=(1, 2))])
            err = np.maximum(np.where(np.isfinite(cur[0]), err, 0.0), floor)
            done = (err <= rtol) | (level == levels[-1])
            for k in range(3):
                out[k][active[done]] = cur[k][done]
            out[3][active[done]] = err[done]
            active, cur = active[~done], tuple(c[~done] for c in cur)
            if active.size == 0:
                break
        prev = cur
    return out


def _level_sums(structure, y, pieces, omega, prec, logdet, scale, level, Sigma):
    """``(log Z, E[z|y] - omega, Cov - Sigma)`` at one tanh-sinh level on the pieces
    ``(a, b, id_a, id_b)``."""
    nodes = _piece_list_nodes(pieces, scale, level)
    w = nodes[1]
    terms = _log_integrand(structure, y, nodes, omega, prec, logdet)
    with np.errstate(divide="ignore"):
        logw = [np.log(w) + lf for _, lf in terms]
    top = np.max(np.stack([lw.max(axis=(1, 2)) for lw in logw]), axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    s0 = np.zeros(y.size)
    s1 = np.zeros((y.size, 2))
    s2 = np.zeros((y.size, 2, 2))
    for (z, _), lw in zip(terms, logw):
        e = np.exp(lw - top[:, None, None])
        d = z - omega[:, None, None, :]
        ed = e[..., None] * d
        s0 += e.sum(axis=(1, 2))
        s1 += ed.sum(axis=(1, 2))
        s2 += np.einsum("nkji,nkjl->nil", ed, d, optimize=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        logZ = np.log(s0) + top
        mean = s1 / s0[:, None]
        cov = s2 / s0[:, None, None] - mean[:, :, None] * mean[:, None, :]
    return logZ, mean, cov - Sigma[None]


# ------------------------------------------------------------ fixed rule (state evolution)
def link_critical_points(link, indices, params) -> list[np.ndarray]:
    """Real zeros of the gradient of the scalar link (SymPy), as points ``z``: where the
    level sets through them pinch (``z = 0`` of ``z1^2 - z2^2`` and ``z1 z2``)."""
    g = sp.sympify(link[0, 0]).xreplace(params)
    z = list(indices)
    try:
        sols = sp.solve([sp.diff(g, v) for v in z], z, dict=True)
    except (NotImplementedError, ValueError):
        return []
    out = []
    for sol in sols:
        pt = [complex(sp.N(sol.get(v, sp.nan))) for v in z]
        if all(np.isfinite(p) and abs(p.imag) < 1e-12 for p in pt):
            out.append(np.array([p.real for p in pt]))
    return out


#: tanh-sinh half-range of the fixed rules (the adaptive one runs to T_MAX = 4): beyond
#: |t| = 3.2 a node lies within e^{-pi sinh 3.2} = 3e-17 (relative) of its piece's end,
#: where a fold's 1/sqrt integrates to ~sqrt(3e-17) = 6e-9 of the piece; in y beyond
#: |t| = 3 (2e-14 of the scale from a cut, where a log singularity holds ~1e-12, or
#: 5e13 scales out, where the density is 0); 20-25% fewer nodes
FIXED_T_MAX, OUTPUT_T_MAX = 3.2, 3.0


def _trimmed_unit(level, t_max):
    """:func:`tanh_sinh_unit` without the nodes beyond ``|t| = t_max``, and the mask of
    those kept (node ``j`` is ``t = (j - kmax) 2^-level``)."""
    side, gap, w = tanh_sinh_unit(level)
    kmax = (side.size - 1) // 2
    keep = np.abs(np.arange(side.size) - kmax) * 2.0 ** -level <= t_max
    return side[keep], gap[keep], w[keep], keep


def fixed_level_set_moments(structure: LevelSetStructure, y, omega, Sigma, level, cuts=(),
                            t_max=FIXED_T_MAX):
    """``(log Z, E[z|y] - omega, Cov(z|y) - Sigma)`` by tanh-sinh at one fixed ``level``.

    The pieces are cut at the level set's critical points, at the free index's prior mean
    and at ``cuts`` (constants: the free coordinates of the link's critical points, where
    a level set ``y -> critical value`` pinches: ``1/sqrt(y + x^2)`` of ``z1^2 - z2^2`` at
    ``y -> 0+`` has width ``sqrt(y)`` around ``x = 0``).  Unlike :func:`level_set_moments`
    no mode is located and no level chosen per sample, so the nodes move smoothly with
    ``omega`` and ``Sigma``: the result is a smooth function of them (a state-evolution
    map differenced by Newton); its accuracy is checked by the caller against ``level - 1``.
    ``t_max``: the half-range of the unit rule (:data:`FIXED_T_MAX`; ``None`` keeps every
    node, to ``T_MAX = 4``: no fold end is dropped, so the change to ``level - 1`` is the
    whole error estimate -- what :class:`~symtheory.glm.factors.level_set.LevelSetChannel`
    uses per sample).
    """
    y = np.asarray(y, dtype=float).reshape(-1)
    omega = np.asarray(omega, dtype=float).reshape(y.size, 2)
    Sigma = np.asarray(Sigma, dtype=float)
    prec = np.linalg.inv(Sigma)
    logdet = float(np.linalg.slogdet(Sigma)[1])
    scale = np.full(y.size, 1.0 / np.sqrt(prec[structure.free, structure.free]))
    if structure.critical_fn is not None:
        with np.errstate(invalid="ignore"):
            crit = np.stack([_as_real(c, y.shape) for c in structure.critical_fn(y)], axis=1)
    else:
        crit = np.empty((y.size, 0))
    ids = np.broadcast_to(np.arange(crit.shape[1]), crit.shape)
    extra = np.concatenate([omega[:, structure.free:structure.free + 1],
                            np.broadcast_to(np.asarray(cuts, float), (y.size, len(cuts)))], axis=1)
    # a constant cut equal to a critical point would make an empty piece: drop it there
    for j in range(1, extra.shape[1]):
        extra[:, j] = np.where(np.any(crit == extra[:, j:j + 1], axis=1), np.nan, extra[:, j])
    bounds, ids = _pieces(np.concatenate([crit, extra], axis=1),
                          np.concatenate([ids, np.full(extra.shape, -1)], axis=1))
    drive = _driver(structure)
    if drive is None:
        # Cardano branches (written with I): the numpy path, complex arithmetic, every node
        pieces = (bounds[:, :-1], bounds[:, 1:], ids[:, :-1], ids[:, 1:])
        return _level_sums(structure, y, pieces, omega, prec, logdet, scale, level, Sigma)
    if t_max is None:
        side, gap, wunit = tanh_sinh_unit(level)
    else:
        side, gap, wunit, _ = _trimmed_unit(level, t_max)
    logZ, mean, cov = np.empty(y.size), np.empty((y.size, 2)), np.empty((y.size, 2, 2))
    nb = len(structure.branches)
    drive.fixed(y, omega, prec, logdet, np.ascontiguousarray(bounds),
                np.ascontiguousarray(ids, dtype=np.int64), scale, side, gap, wunit,
                2.0 ** -level, structure.solved, structure.free, nb,
                2 * nb * (1 + len(structure.critical_points)), logZ, mean, cov)
    return logZ, mean, cov - Sigma[None]


def level_set_kernel(structure: LevelSetStructure):
    """The generated kernel of ``v = (y, x, delta)``: the branches and Jacobians in
    global form, then at ``x = c_j + delta`` for each critical point (the local forms
    of :func:`_local_forms`), for :mod:`.drivers.level_set`."""
    import hashlib

    from ...core.codegen import Kernel

    outs = list(structure.branches) + list(structure.jacobians)
    for hs, js in structure.local_exprs:
        outs += list(hs) + list(js)
    tag = hashlib.sha256(sp.srepr(outs).encode()).hexdigest()[:12]
    return Kernel(f"level_set_{tag}", [structure.y, structure.x, structure.delta], outs,
                  doc="level set: branches h_k(y, x), |d_s g| at them; local forms at folds",
                  packed=(3,))


def _driver(structure):
    """The Numba driver of a real-branch level set (None for Cardano branches written
    with I, which the numpy path evaluates in complex arithmetic and polishes)."""
    if structure.complex_branches or structure.x is None:
        return None
    if getattr(structure, "_drivers", None) is None:
        from .drivers import level_set as ls_drivers

        structure._drivers = level_set_kernel(structure).drivers(ls_drivers.build)
    return structure._drivers


def output_rule(cuts, scale, level):
    """Tanh-sinh nodes in ``y`` on the real line cut at ``cuts`` (the link's critical
    values), per sample: infinite pieces mapped with ``scale (n,)``.  Returns ``(y (n, K),
    w (n, K), coarse (K,) bool)``, ``coarse`` the nodes of ``level - 1`` (every other
    node of each piece: their sum with doubled weights is that level's rule).  Nodes of
    weight 0 at every sample (beyond the double-exponential tails) are dropped."""
    scale = np.asarray(scale, dtype=float).reshape(-1)
    n = scale.size
    cuts = np.sort(np.asarray(cuts, dtype=float).reshape(-1))
    if cuts.size == 0:
        cuts = np.zeros(1)
    b = np.concatenate([[-np.inf], cuts, [np.inf]])
    a_, b_ = np.broadcast_to(b[:-1], (n, b.size - 1)), np.broadcast_to(b[1:], (n, b.size - 1))
    x, w, _, _ = _piece_nodes(a_, b_, scale, level)
    N = x.shape[-1]
    # node j of a piece is k = j - kmax of tanh_sinh_unit; kmax is even for level >= 1
    in_range = np.broadcast_to(_trimmed_unit(level, OUTPUT_T_MAX)[3], x.shape[1:])
    w = np.where(in_range[None], w, 0.0)
    sub = np.broadcast_to(np.arange(N) % 2 == 0, x.shape[1:])
    x, w, sub = x.reshape(n, -1), w.reshape(n, -1), sub.reshape(-1)
    keep = np.any(w > 0, axis=0)
    return x[:, keep], w[:, keep], sub[keep]
