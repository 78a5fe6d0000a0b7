"""What SymPy derives for a multi-index model, as expressions (``symtheory smi derive``).

Every expression here is taken from where the numbers come from, never retyped:

* the link and its symmetry group (``MultiIndexModel.even_groups``, one call site:
  :func:`symmetry_generators`);
* the preimages / output cells: a reduction's inversion branches and output Jacobian
  (the kernels of :class:`~symtheory.glm.factors.reduced.ReducedChannel` and of the
  observation grid, :class:`~symtheory.glm.integrate.reduced_posterior.ReducedPosterior`),
  a discrete link's sign forms and the link in their signs
  (:func:`~symtheory.glm.integrate.link_structure.discrete_structure`), a one-index
  link's preimages (:func:`~symtheory.glm.thresholds.expectations.scalar_preimages`);
* ``Z_out`` (Eq. 9 of Troiani et al., arXiv:2502.00901) as an integral, ``g_out`` and
  ``dg_out`` by ``sp.diff`` of its logarithm (Eq. 12), and the outputs of every kernel
  the channel generates (:class:`~symtheory.core.codegen.Kernel`);
* the linearized state evolution at the trivial point (Eq. 15) through the same
  functions that compute it in numbers (:func:`~symtheory.glm.thresholds.operator.
  tensor_from_jacobians`, ``operator_matrix``, ``prior_jacobian`` on object arrays) and
  the threshold equation ``det(I - alpha A) = 0`` (Eq. 16).

Where a piece has no closed form for the model (a noisy link has no preimages, a
reduction's integral over the free rows is numerical), the item carries no expression
and says why.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef

from ..core.codegen import Kernel
from ..core.validate import ParameterError
from .integrate.link_structure import NotApplicable

#: the largest operator matrix (P(P+1)/2 rows, P index rows) whose characteristic
#: polynomial is expanded: at P = 3 (6 x 6, entries sums of up to 4 symbols) the depth-3
#: attention derivation was still inside SymPy's determinant after 7.5 CPU minutes
#: (measured under load; unexpanded, the whole derivation took 156 s)
MAX_EXPANDED = 3
#: the symbols of the channel integral (real; ``Delta`` positive)
DELTA = sp.Symbol("Delta", positive=True)
ALPHA = sp.Symbol("alpha", positive=True)
P_OUT = sp.Function("P_out")


@dataclass
class Item:
    """One derived object: ``expr`` (SymPy) or, where nothing is derivable, ``None`` with
    the reason in ``note``."""

    key: str
    title: str
    expr: sp.Basic | None = None
    note: str = ""


@dataclass
class Section:
    key: str
    title: str
    items: list = field(default_factory=list)

    def add(self, key, title, expr=None, note=""):
        self.items.append(Item(key, title, expr, note))


@dataclass
class Derivation:
    """The sections of :func:`derive` for one model (``noise``: the output-noise variance
    the channel was derived for, None for a noiseless channel)."""

    model: str
    noise: float | None
    sections: list

    def items(self):
        return [it for s in self.sections for it in s.items]

    def item(self, key) -> Item:
        for it in self.items():
            if it.key == key:
                return it
        raise KeyError(key)

    def namespace(self) -> dict:
        """``{name: symbol or function}`` of every expression: what ``sp.sympify`` needs
        to read the printed SymPy form back (the symbols keep their assumptions)."""
        ns = {}
        for it in self.items():
            if it.expr is None:
                continue
            for s in it.expr.free_symbols:
                ns[s.name] = s
            for f in it.expr.atoms(AppliedUndef):
                ns[f.func.__name__] = f.func
            for s in it.expr.atoms(sp.Symbol):      # bound variables of integrals
                ns[s.name] = s
        return ns


# ---------------------------------------------------------------------- symmetry
def symmetry_generators(model):
    """The link's symmetry generators: signed row permutations ``S`` with
    ``g(S Z) = +-g(Z)``, joint flips across row groups included
    (:attr:`MultiIndexModel.symmetries`, derived from the SymPy link) -- the one place
    :func:`derive` reads the detected symmetries."""
    return list(model.symmetries)


# ---------------------------------------------------------------------- channel integral
def gaussian_symbols(model):
    """``(omega (P x M), Vinv (P x P, symmetric))``: the prior mean of the indices and the
    inverse of their covariance ``V`` (tokens independent: ``Cov(Z) = V (x) I_M``)."""
    P, M = model.P, model.M
    omega = sp.Matrix(P, M, lambda a, m: sp.Symbol(f"omega_{a}_{m}", real=True))
    Vinv = sp.Matrix(P, P, lambda a, b: sp.Symbol(f"Vinv_{min(a, b)}_{max(a, b)}", real=True))
    return omega, Vinv


def observed_outputs(model):
    """The outputs whose density ``Z_out`` is (the reduction's observed entries for a
    noiseless reduced link, else all), as symbols."""
    Y = model.output_symbols
    red = model.reduction
    return [Y[i, j] for i, j in red.observed] if red is not None else list(Y)


def likelihood(model, kind):
    """``P_out(y | Z)`` of the channel ``kind`` (``noise`` | ``reduced`` | ``level_set`` |
    ``discrete``): Gaussian output noise of variance :data:`DELTA`, a Dirac delta on the
    observed entries (on the scalar output of a level-set link), a Kronecker delta on the
    finitely many values."""
    Y, g = model.output_symbols, model.link
    if kind == "noise":
        return sp.Mul(*[sp.exp(-(Y[i] - g[i]) ** 2 / (2 * DELTA)) / sp.sqrt(2 * sp.pi * DELTA)
                        for i in range(len(g))])
    if kind == "reduced":
        return sp.Mul(*[sp.DiracDelta(Y[i, j] - g[i, j]) for i, j in model.reduction.observed])
    if kind == "level_set":
        return sp.DiracDelta(Y[0] - g[0])
    return sp.Mul(*[sp.KroneckerDelta(Y[i], g[i]) for i in range(len(g))])


def channel_integral(model):
    """``Z_out(y; omega, V) = int dZ prod_m N(z_{.m}; omega_{.m}, V) P_out(y | Z)``
    (Eq. 9 of arXiv:2502.00901) with ``P_out`` an undefined function of ``(y, Z)``."""
    P, M = model.P, model.M
    omega, Vinv = gaussian_symbols(model)
    Z = model.indices
    # a plain double sum: the matrix product leaves a Mul that is not canonical, which
    # would not read back from its printed form as the same tree
    quad = sum((Z[a, m] - omega[a, m]) * Vinv[a, b] * (Z[b, m] - omega[b, m])
               for m in range(M) for a in range(P) for b in range(P))
    dens = sp.sqrt(Vinv.det()) ** M / (2 * sp.pi) ** sp.Rational(P * M, 2) * sp.exp(-quad / 2)
    pout = P_OUT(*list(model.output_symbols), *list(Z))
    return sp.Integral(dens * pout, *[(z, -sp.oo, sp.oo) for z in Z])


def output_functions(model):
    """``(Z_out, g_out (P x M), dg_out (P M x P M))``: ``g_out = d log Z_out / d omega``
    and its derivative (Eq. 12 of arXiv:2502.00901) by ``sp.diff``; index ``a M + m``."""
    P, M = model.P, model.M
    omega, _ = gaussian_symbols(model)
    Zout = channel_integral(model)
    logZ = sp.log(Zout)
    g = sp.Matrix(P, M, lambda a, m: sp.diff(logZ, omega[a, m]))
    flat = list(omega)
    dg = sp.Matrix(P * M, P * M, lambda i, j: sp.diff(g[i // M, i % M], flat[j]))
    return Zout, g, dg


def at_trivial_point(expr, model):
    """``expr`` at ``omega = 0, V = I`` (the trivial fixed point, Eq. 15)."""
    omega, Vinv = gaussian_symbols(model)
    rep = {s: sp.S.Zero for s in omega}
    rep.update({Vinv[a, b]: sp.S.One if a == b else sp.S.Zero
                for a in range(model.P) for b in range(model.P)})
    return expr.xreplace(rep)


# ---------------------------------------------------------------------- the derivation
def _channel(model, noise):
    """``(kind, channel or None, why not)``; ``model.channel`` without its numerical
    declaration check (nothing is integrated here)."""
    kind = "noise" if noise is not None else ("reduced" if model.reduction is not None
                                              else "discrete")
    try:
        ch = model.channel(noise, check=False)
    except (ParameterError, NotApplicable, ValueError) as exc:
        return kind, None, str(exc)
    if getattr(ch, "structure", None) is not None and kind == "discrete":
        kind = "level_set"
    return kind, ch, ""


def _kernels(obj):
    return [v for v in vars(obj).values() if isinstance(v, Kernel)]


def _kernel_items(sec, owner, prefix):
    for k in _kernels(owner):
        sec.add(f"{prefix}_{k.name}", f"kernel {k.name}: {k.doc} (arguments "
                f"{', '.join(map(str, k.args))})", sp.Matrix(k.outputs))


#: derivations of this process, by model identity (the model is kept: its id stays unique)
_DERIVED: dict = {}


def derive(model, noise_variance=None, *, prior=None) -> Derivation:
    """The :class:`Derivation` of ``model`` with Gaussian output noise of variance
    ``noise_variance`` (printed as the symbol ``Delta``) or noiseless (None); once per
    process and model (``dg_out`` of a two-layer attention takes ~10 s)."""
    from .factors.gaussian_prior import GaussianPrior

    prior = prior or GaussianPrior()
    key = (id(model), noise_variance, id(prior) if type(prior) is not GaussianPrior else None)
    if key not in _DERIVED:
        _DERIVED[key] = (model, _derive(model, noise_variance, prior))
    return _DERIVED[key][1]


def _derive(model, noise_variance, prior) -> Derivation:
    kind, ch, why = _channel(model, noise_variance)
    gens = symmetry_generators(model)
    sections = [_link_section(model), _symmetry_section(model, gens),
                _preimage_section(model, kind, ch, why)]
    funcs = output_functions(model)
    mom, Jf, mu, ys, values = _moment_section(model, kind, ch, why, funcs)
    sections.append(mom)
    even = all(model.even_groups.values())
    sections += _threshold_sections(model, kind, ch, Jf, mu, ys, values, noise_variance, prior,
                                    funcs, even)
    return Derivation(model.description or model.name, noise_variance, sections)


def _link_section(model):
    sec = Section("link", "Link")
    sec.add("indices", f"indices Z ({model.P} x {model.M}: rows = index rows, columns = tokens)",
            sp.Matrix(model.indices))
    sec.add("link", "link y = g(Z) (the expression of the link kernel)", sp.Matrix(model.link))
    if model.params:
        sec.add("params", "parameters", sp.Tuple(*[sp.Eq(k, sp.sympify(v))
                                                   for k, v in model.params.items()]))
    return sec


def _symmetry_section(model, gens):
    sec = Section("symmetry", "Symmetry group")
    names = [str(model.indices[a, 0]) if model.M == 1 else f"row{a}" for a in range(model.P)]
    for i, gen in enumerate(gens):
        image = model.indices.xreplace(gen.substitution(model.indices))
        sec.add(f"symmetry_{i}", f"generator: Z -> S Z, {gen.describe(names)}", image)
    group = model.symmetry_group
    order = sp.Integer(len(group)) if group is not None else sp.nan
    sec.add("group_order", "order of the group generated", order,
            note="signed permutations of whole index rows (every token alike), found by "
                 "substituting into the SymPy link; flips of single tokens are not tried"
                 + ("" if group is not None else "; the group has more than 50,000 elements"))
    return sec


def _preimage_section(model, kind, ch, why):
    sec = Section("preimages", "Preimages / output cells")
    if ch is None:
        sec.add("preimages", "preimages", note=f"not derivable: no channel ({why})")
        return sec
    if kind == "reduced":
        red = model.reduction
        h = sp.Matrix([[model.indices[a, m] for m in range(model.M)] for a in model.solved_rows])
        sec.add("reduction", f"E = T(u) h^T with E = {list(red.E)}, h = rows "
                f"{list(model.solved_rows)}, u = rows {list(model.free_rows)}",
                sp.Matrix(ch.mixing_kernel.outputs).reshape(model.M, model.M) * h.T)
        Mr = model.M * ch.r
        outs = ch.branch_kernel.outputs
        for k in range(ch.n_branches):
            sec.add(f"branch_{k}", f"inversion branch E^({k})(y) of head(E) = y (SymPy "
                    "solve; a branch counts where it reproduces y)",
                    sp.Matrix(outs[k * Mr:(k + 1) * Mr]))
        sec.add("output_jacobian", "det d y_obs / d E (its modulus divides the density of y)",
                ch.head_kernel.outputs[-1])
        return sec
    if kind == "level_set":
        sheets = getattr(ch.structure, "sheets", None)
        z = list(model.indices)
        nested = getattr(ch.structure, "inner", None)
        if nested is not None:
            out = ch.structure
            y = model.output_symbols[0, 0]
            zo = z[out.outer]
            y_in = y / out.factor if out.kind == "product" else y - out.factor
            form = "a(z_o) h(z_r)" if out.kind == "product" else "a(z_o) + h(z_r)"
            sec.add("level_set_separation", f"the link as {form} over the outer index {zo} "
                    "(SymPy separatevars); the inner level set is h(z_r) = y'",
                    sp.Matrix([[out.factor, nested.link, y_in]]))
            if out.kind == "product":
                sec.add("level_set_outer_weight", "co-area weight of the outer index: "
                        "delta(y - a h) = delta(h - y/a) / |a|", 1 / sp.Abs(out.factor))
            rest = [z[i] for i in out.rest]
            sub = {nested.y: y_in}
            sec.add("level_set_branches", f"inner preimage branches {rest[nested.solved]} = "
                    f"h_k(y', {rest[nested.free]}) (SymPy solve)",
                    sp.Matrix(nested.branches).xreplace(sub))
            sec.add("level_set_jacobians", f"|dh/d{rest[nested.solved]}| at each branch",
                    sp.Matrix(nested.jacobians).xreplace(sub))
            sec.add("level_set_critical", f"inner critical points in {rest[nested.free]}",
                    sp.Matrix(nested.critical_points or [sp.nan]).xreplace(sub))
            sec.add("integration", "how Z_out is integrated", note=f"{ch.method}: numerical "
                    f"(tanh-sinh over {zo} around the inner tanh-sinh level set, no closed "
                    "form)")
            return sec
        for k, st in enumerate(sheets or (ch.structure,)):
            # a link with switches: one smooth piece per sign orthant
            tag, where = ("", "") if sheets is None else (f"_orthant_{k}",
                                                          f" on the orthant {st.signs}")
            ysub = {st.y: model.output_symbols[0, 0]}
            if sheets is not None:
                sec.add(f"level_set_link{tag}", f"the link{where} (SymPy: Abs, sign, "
                        "Heaviside, Piecewise resolved with the signs)", st.link)
            sec.add(f"level_set_branches{tag}", f"preimage branches {z[st.solved]} = "
                    f"h_k(y, {z[st.free]}) of g(Z) = y{where} (SymPy solve; the co-area "
                    "integral runs over the free index)", sp.Matrix(st.branches).xreplace(ysub))
            sec.add(f"level_set_jacobians{tag}", f"|dg/d{z[st.solved]}| at each branch (the "
                    "co-area weight 1/|dg/dz_s|)", sp.Matrix(st.jacobians).xreplace(ysub))
            sec.add(f"level_set_critical{tag}", f"critical points in {z[st.free]} (folds, "
                    "poles, orthant faces: the pieces of the tanh-sinh rule)",
                    sp.Matrix(st.critical_points or [sp.nan]).xreplace(ysub))
        sec.add("integration", "how Z_out is integrated", note=f"{ch.method}: numerical "
                "(tanh-sinh on the level set, no closed form)")
        return sec
    structure = getattr(ch, "discrete", None)
    if structure is not None:
        sec.add("sign_forms", "sign forms l_j(Z) (cells: the sign patterns of the l_j; each "
                "up to a positive factor)", sp.Matrix(structure.form_exprs))
        sec.add("link_in_signs", "the link in the signs s_j = sign(l_j(Z))",
                sp.Matrix(structure.in_signs))
        rows = [[sp.Integer(int(v)) for v in p]
                + list(structure.in_signs.xreplace(dict(zip(structure.sign_symbols,
                                                           map(int, p)))))
                for p in structure.patterns]
        sec.add("cells", "cells: sign pattern (s_0, ...) -> output value", sp.Matrix(rows))
        if kind == "noise":
            sec.items[-1].note = "the noise blurs the cells: Z_out = sum_k P(R_k) N(y; c_k, Delta)"
        return sec
    if model.P * model.M == 1 and len(model.link) == 1:
        from .thresholds.expectations import scalar_preimages

        _, _, sols = scalar_preimages(model)
        if sols is None:
            sec.add("preimages", "preimages z(y_obs)", note="not derivable: SymPy cannot solve "
                    "g(z) = y_obs")
        else:
            sec.add("preimages", "preimages z(y_obs) of g(z) = y_obs (SymPy solve; the split "
                    "points of the threshold's scalar quadrature)", sp.Tuple(*sols),
                    note="nan marks where a branch does not exist; with output noise the "
                         "channel itself does not use them: it integrates N(y; g(z), Delta) "
                         "over z")
        return sec
    sec.add("preimages", "preimages", note="not derivable: the link is neither reduced nor "
            "constant on sign cells, and with output noise the channel integrates "
            "N(y; g(Z), Delta) over Z, so no level set {g(Z) = y} is solved")
    return sec


def _moment_section(model, kind, ch, why, funcs):
    sec = Section("moments", "Output channel: Z_out and the moments of g_out")
    ys = observed_outputs(model) if kind == "reduced" else list(model.output_symbols)
    sec.add("likelihood", f"P_out(y | Z) ({kind} channel)",
            sp.Eq(P_OUT(*list(model.output_symbols), *list(model.indices)),
                  likelihood(model, kind)),
            note=(f"a density in the observed entries {[str(y) for y in ys]}; the other "
                  "outputs are functions of them" if kind == "reduced" else ""))
    Zout, g, dg = funcs
    sec.add("Z_out", "Z_out(y; omega, V) (Eq. 9; Vinv = V^-1)", Zout)
    sec.add("g_out", "g_out = d log Z_out / d omega (Eq. 12)", g)
    sec.add("dg_out", "dg_out = d g_out / d omega (index a M + m)", dg)
    values = None
    if ch is None:
        sec.add("integration", "how Z_out is integrated", note=f"not derivable: {why}")
        return sec, None, None, ys, values
    if kind == "reduced":
        rule = ch.rule.describe() if hasattr(ch.rule, "describe") else repr(ch.rule)
        free = list(model.free_rows)
        sec.add("integration", "how Z_out is integrated", note=(
            f"reduced to a sum over the inversion branches of an integral over the free rows "
            f"{free}, integrated numerically by {rule}: no closed form" if free else
            "a finite sum over the inversion branches (no free rows): closed form"))
    elif kind == "level_set":
        sec.add("integration", "how Z_out is integrated", note=(
            f"{ch.method}: the co-area integral over the free index, tanh-sinh split at the "
            "critical points (numerical, no closed form)"))
    elif kind == "discrete":
        sec.add("integration", "how Z_out is integrated", note=(
            f"{ch.method}: Gaussian orthant probabilities of the cells, exact up to 1-D "
            "integrals of two-form orthants"))
    else:
        structure = getattr(ch, "discrete", None)
        if structure is None and ch.R.size == 0:
            note = f"{ch.method}: closed form (Gaussian conjugacy)"
        elif structure is None:
            rule = ch.rule.describe() if hasattr(ch.rule, "describe") else repr(ch.rule)
            note = (f"{ch.method}: the integral over the non-affine indices is numerical "
                    f"({rule}), no closed form")
        else:
            note = f"{ch.method}: orthant mixture of the cells"
        sec.add("integration", "how Z_out is integrated", note=note)
    if kind == "discrete":
        st = ch.discrete
        vals = {tuple(st.in_signs.xreplace(dict(zip(st.sign_symbols, map(int, p)))))
                for p in st.patterns}
        values = sorted(vals, key=lambda v: [float(x) for x in v])
    _kernel_items(sec, ch, "kernel")
    Jf = sp.Matrix(model.P * model.M, model.P * model.M,
                   lambda i, j: sp.Function(f"J_{i}_{j}")(*ys))
    mu = sp.Matrix(model.P, model.M, lambda a, m: sp.Function(f"mu_{a}_{m}")(*ys))
    return sec, Jf, mu, ys, values


def _expect_y(expr, Zy, ys, values):
    """``E_y expr = int dy Z_out(y; 0, I) expr`` over the observed outputs, or the sum over
    the finitely many values of a discrete link."""
    if values is None:
        return sp.Integral(Zy * expr, *[(y, -sp.oo, sp.oo) for y in ys])
    return sp.Add(*[(Zy * expr).xreplace(dict(zip(ys, v))) for v in values])


def _threshold_sections(model, kind, ch, Jf, mu, ys, values, noise, prior, funcs, even):
    from .thresholds.expectations import choose_method
    from .thresholds.operator import (
        operator_matrix,
        prior_jacobian,
        tensor_from_jacobians,
    )

    op = Section("operator", "Linearized state evolution at the trivial point (Eq. 15)")
    th = Section("threshold", "Threshold equation (Eq. 16)")
    if ch is None:
        op.add("operator", "linearized operator", note="not derivable: the model has no channel")
        th.add("threshold_equation", "threshold", note="not derivable: the model has no channel")
        return [op, th]
    P, M = model.P, model.M
    Zout, g, dg = funcs
    Zy = sp.Function("Z_out_0")(*ys)
    op.add("Z_out_0", "Z_out_0(y) = Z_out(y; 0, I), the density of y at the trivial point",
           at_trivial_point(Zout, model))
    op.add("J", "J(y) = dg_out(y; 0, I) = Cov(Z|y) - I, the functions J_i_j (i, j = a M + m)",
           at_trivial_point(dg, model))
    op.add("mu", "mu(y) = g_out(y; 0, I) = E[Z|y], the functions mu_a_m",
           at_trivial_point(g, model))
    J5 = np.empty((1, P, M, P, M), dtype=object)
    for a in range(P):
        for m in range(M):
            for c in range(P):
                for n in range(M):
                    J5[0, a, m, c, n] = Jf[a * M + m, c * M + n]
    T = tensor_from_jacobians(J5, np.array([sp.S.One], dtype=object))
    Tsym = np.empty((P, P, P, P), dtype=object)
    defs = []
    for idx in np.ndindex(T.shape):
        Tsym[idx] = sp.Symbol("T_" + "_".join(map(str, idx)), real=True)
        defs.append(sp.Eq(Tsym[idx], _expect_y(T[idx], Zy, ys, values)))
    where = ("sum over the link's values" if values is not None else
             f"integral over the observed outputs {[str(y) for y in ys]}")
    op.add("operator_tensor", f"T_abcd = E_y sum_mn J_(am,cn) J_(bm,dn) (E_y: {where})",
           sp.Tuple(*defs))
    Gamma = sp.Matrix(P, P, lambda a, b: sp.Symbol(f"Gamma_{min(a, b)}_{max(a, b)}", real=True))
    F = sp.Matrix(P, P, lambda a, b: sum(Tsym[a, b, c, d] * Gamma[c, d]
                                         for c in range(P) for d in range(P)))
    op.add("operator", "F(Gamma)_ab = sum_cd T_abcd Gamma_cd", F)
    first = sp.Matrix(P, P, lambda a, b: _expect_y(sum(mu[a, m] * mu[b, m] for m in range(M)),
                                                   Zy, ys, values))
    op.add("first_moment", "E_y sum_m mu_am mu_bm (non-zero: that subspace is learnable at "
           "any alpha > 0, alpha_c = 0)", first,
           note=("every row group is even, so mu = 0 and this statistic vanishes" if even
                 else "some row group is not even: mu may be non-zero"))
    Fmat = operator_matrix(Tsym)
    Jp = prior_jacobian(prior, P, exact=True)
    A = sp.Matrix(Jp.tolist()) * sp.Matrix(Fmat.tolist())
    th.add("prior_jacobian", "prior Jacobian at Q_hat = 0 on the symmetric basis "
           "(F_prior'(0) rho . rho)", sp.Matrix(Jp.tolist()))
    th.add("operator_matrix", "A = prior Jacobian . F on the symmetric basis", A)
    char = sp.ImmutableMatrix(sp.eye(A.rows) - ALPHA * A)
    expanded = A.rows <= MAX_EXPANDED
    eq = sp.Eq(sp.expand(char.det()) if expanded else sp.Determinant(char), 0)
    th.add("threshold_equation", "alpha_c: the smallest positive root of det(I - alpha A) = 0 "
           "(alpha_c = 1/lambda_max(A))", eq,
           note="unless the first-moment statistic is non-zero (then alpha_c = 0)" + (
               "" if expanded else f"; the determinant ({A.rows} x {A.rows}) is left "
               "unexpanded: its polynomial in alpha has too many terms to print"))
    if A.rows == 1:
        th.add("alpha_c", "alpha_c", sp.solve(eq, ALPHA)[0])
    method = choose_method(model, noise)
    th.add("method", "how E_y is evaluated in numbers",
           note=f"method {method!r} (symtheory.glm.thresholds.expectations)")
    if method == "observation-grid":
        from .integrate.reduced_posterior import ReducedPosterior

        _kernel_items(th, ReducedPosterior(model), "grid_kernel")
    return [op, th]


# ---------------------------------------------------------------------- printing
FORMATS = ("markdown", "latex", "sympy")


def sympy_text(expr) -> str:
    """``str(expr)`` on one line (a matrix prints one row per line)."""
    return sp.sstr(expr).replace("\n", "")


def render(d: Derivation, fmt: str = "markdown") -> str:
    """The derivation as ``markdown`` (LaTeX and SymPy per item), ``latex`` or ``sympy``
    (``key = <str(expr)>`` lines, read back by ``sp.sympify(text, locals=d.namespace())``);
    notes and titles are comments in the latter two.  The LaTeX is ``sp.latex(expr)``."""
    if fmt not in FORMATS:
        raise ParameterError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    noise = "noiseless" if d.noise is None else f"output noise Delta = {d.noise:g}"
    out = []
    if fmt == "markdown":
        out += [f"# Derivation: {d.model} ({noise})", ""]
    else:
        c = "%" if fmt == "latex" else "#"
        out += [f"{c} Derivation: {d.model} ({noise})"]
    for sec in d.sections:
        if fmt == "markdown":
            out += [f"## {sec.title}", ""]
        else:
            out += ["", f"{c}{c} {sec.title}"]
        for it in sec.items:
            note = f" -- {it.note}" if it.note else ""
            if fmt == "markdown":
                out.append(f"**{it.title}** (`{it.key}`){note}")
                out.append("")
                if it.expr is not None:
                    out += ["$$", sp.latex(it.expr), "$$", "", "```python",
                            f"{it.key} = {sympy_text(it.expr)}", "```"]
                out.append("")
            else:
                out.append(f"{c} {it.key}: {it.title}{note}")
                if it.expr is not None:
                    out.append(f"\\[ {sp.latex(it.expr)} \\]" if fmt == "latex"
                               else f"{it.key} = {sympy_text(it.expr)}")
    return "\n".join(out) + "\n"
