"""``symtheory smi derive``: the printed derivation has its sections, its SymPy form reads
back to the derived expressions, its LaTeX is ``sp.latex`` of them, and the expressions
are the ones the numbers come from (checked against the channel and the threshold)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from symtheory.cli import main
from symtheory.glm.derive import derive, render
from symtheory.smi import registry
from symtheory.smi.model_file import load_model

MODELS = {
    "sign": (('z = sp.Symbol("z", real=True)\n'
              'model = MultiIndexModel("sign", sp.Matrix([z]), sp.Matrix([sp.sign(z)]), '
              'description="y = sign(z)")\n'), None),
    "abs": (('z = sp.Symbol("z", real=True)\n'
             'model = MultiIndexModel("absz", sp.Matrix([z]), sp.Matrix([sp.Abs(z)]), '
             'description="y = |z| + noise")\n'), 0.2),
    "prod": (('z1, z2 = sp.symbols("z1 z2", real=True)\n'
              'model = MultiIndexModel("prod", sp.Matrix([[z1], [z2]]), sp.Matrix([z1 * z2]), '
              'description="y = z1 z2 + noise")\n'), 0.1),
    "prod3": (('z1, z2, z3 = sp.symbols("z1 z2 z3", real=True)\n'
               'model = MultiIndexModel("prod3", sp.Matrix([[z1], [z2], [z3]]), '
               'sp.Matrix([z1 * z2 * z3]), description="y = z1 z2 z3 + noise")\n'), 0.1),
    "pairs3": (('z1, z2, z3 = sp.symbols("z1 z2 z3", real=True)\n'
                'model = MultiIndexModel("pairs3", sp.Matrix([[z1], [z2], [z3]]), '
                'sp.Matrix([z1 * z2 + z2 * z3 + z1 * z3]), description="y = e_2(z)")\n'), 0.1),
}
SECTIONS = ("Link", "Symmetry group", "Preimages / output cells",
            "Output channel: Z_out and the moments of g_out",
            "Linearized state evolution at the trivial point (Eq. 15)",
            "Threshold equation (Eq. 16)")
ATTENTION = ["--model", "attention", "--depth", "2", "--seq-len", "2"]


def _file(tmp_path, name):
    path = tmp_path / f"{name}.py"
    path.write_text("import sympy as sp\nfrom symtheory.glm import MultiIndexModel\n"
                    + MODELS[name][0])
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tmp_path_factory.mktemp("derive_models")


def _case(folder, name):
    """``(argv, derivation)`` of a test model (the CLI, run in this process, builds the same
    model object only for the registry model; a model file is loaded afresh)."""
    if name == "attention":
        model = registry.build_model("attention", {"depth": 2, "seq_len": 2, "skip": 1.0,
                                                   "inv_temp": 1.0})
        return ATTENTION, derive(model)
    path = _file(folder, name)
    noise = MODELS[name][1]
    argv = ["--model-file", str(path)] + ([] if noise is None else ["--noise", str(noise)])
    return argv, derive(load_model(path), noise)


def _run(argv, capsys, fmt):
    assert main(["smi", "derive", *argv, "--format", fmt]) == 0
    return capsys.readouterr().out


def _same(a, b) -> bool:
    """Equal after ``simplify`` (entrywise for matrices, argumentwise for tuples and
    equations)."""
    if a == b:
        return True
    if isinstance(a, sp.MatrixBase) and isinstance(b, sp.MatrixBase):
        return a.shape == b.shape and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, sp.Expr) and isinstance(b, sp.Expr):
        return sp.simplify(a - b) == 0
    return type(a) is type(b) and len(a.args) == len(b.args) and \
        all(_same(x, y) for x, y in zip(a.args, b.args))


#: two-layer attention (~20-30 s: dg_out is 16 quotients of 4-D integrals) and P = 3 run in
#: the slow tier; the default tier round-trips the three small links
SLOW = (pytest.mark.slow, pytest.mark.ci_slow)


@pytest.mark.parametrize("name", ["sign", "abs", "prod", pytest.param("prod3", marks=SLOW),
                                  pytest.param("attention", marks=SLOW)])
def test_sections_sympy_round_trip_and_latex(name, files, capsys):
    argv, d = _case(files, name)
    text = _run(argv, capsys, "sympy")
    assert text == render(d, "sympy")       # the command prints this derivation
    for title in SECTIONS:
        assert f"## {title}" in text
    ns = d.namespace()
    printed = dict(re.findall(r"^(\w+) = (.*)$", text, flags=re.MULTILINE))
    with_expr = [it for it in d.items() if it.expr is not None]
    assert set(printed) == {it.key for it in with_expr}
    for it in with_expr:
        back = sp.sympify(printed[it.key], locals=ns)
        assert _same(back, it.expr), it.key
    lines = render(d, "latex").splitlines()
    for it in with_expr:
        i = next(k for k, line in enumerate(lines) if line.startswith(f"% {it.key}:"))
        assert lines[i + 1] == rf"\[ {sp.latex(it.expr)} \]", it.key
    md = render(d, "markdown")
    assert all(f"## {t}" in md for t in SECTIONS) and md.count("$$") == 2 * len(with_expr)


@pytest.mark.slow
@pytest.mark.ci_slow  # 10 s: keeps the default tier under 5 min
def test_what_each_model_derives(files):
    _, d = _case(files, "sign")
    assert d.item("cells").expr == sp.Matrix([[1, 1], [-1, -1]])
    # z -> -z maps sign(z) to -sign(z): an odd symmetry, the group {1, -1}
    assert d.item("group_order").expr == 2 and "g -> -g" in d.item("symmetry_0").title
    _, d = _case(files, "abs")
    assert d.item("group_order").expr == 2
    y = sp.Symbol("y_obs", real=True)
    pre = d.item("preimages").expr
    assert {p.subs(y, 0.7) for p in pre} == {sp.Float(0.7), sp.Float(-0.7)}
    assert all(p.subs(y, -0.7) is sp.nan for p in pre)
    _, d = _case(files, "prod")
    pre = d.item("preimages")
    assert pre.expr is None and pre.note.startswith("not derivable")
    z2 = sp.Symbol("z2", real=True)
    assert d.item("kernel_mi_prod_affine").expr == sp.Matrix([z2, 0])   # g = z2 z1 + 0
    assert "numerical" in d.item("integration").note
    _, d = _case(files, "prod3")            # P = 3: a 6 x 6 operator, left unexpanded
    eq = d.item("threshold_equation")
    assert isinstance(eq.expr.lhs, sp.Determinant) and "unexpanded" in eq.note
    assert eq.expr.lhs.arg.shape == (6, 6)
    _, d = _case(files, "attention")
    keys = {i.key for i in d.items()}
    assert {"branch_0", "branch_1", "output_jacobian"} <= keys
    assert d.item("group_order").expr == 4
    assert "integrated numerically" in d.item("integration").note
    alpha = sp.Symbol("alpha", positive=True)
    assert sp.degree(d.item("threshold_equation").expr.lhs, alpha) == 3   # 3 = P(P+1)/2


def _numeric(expr, at):
    """``expr`` at ``at`` with every ``Integral`` over one variable evaluated by scipy
    (split at 0, the kink of |z|)."""
    return _compiled(expr, tuple(sorted(at, key=str)))(*[at[k] for k in sorted(at, key=str)])


_COMPILED = {}


def _compiled(expr, names):
    """A float function of ``names`` evaluating ``expr`` (each integrand lambdified once)."""
    key = (expr, names)
    if key not in _COMPILED:
        ints = sorted(expr.atoms(sp.Integral), key=str)
        holes = sp.symbols(f"I0:{len(ints)}")
        outer = sp.lambdify(names + holes, expr.xreplace(dict(zip(ints, holes))), "math")
        inner = [(sp.lambdify((I.limits[0][0],) + names, I.function, "math")) for I in ints]

        def f(*vals):
            parts = [sum(integrate.quad(g, a, b, args=vals, epsabs=1e-13, epsrel=1e-11)[0]
                         for a, b in ((-math.inf, 0.0), (0.0, math.inf))) for g in inner]
            return float(outer(*vals, *parts))
        _COMPILED[key] = f
    return _COMPILED[key]


def _with_likelihood(expr, d):
    lik = d.item("likelihood").expr
    return expr.replace(lik.lhs.func, sp.Lambda(lik.lhs.args, lik.rhs))


def test_printed_moments_are_the_channels(tmp_path):
    """g_out, dg_out as printed, integrated by scipy, against the channel's numbers
    (adaptive Gauss-Legendre, rtol 1e-10): 1e-7."""
    path = _file(tmp_path, "abs")
    model = load_model(path)
    d = derive(model, 0.2)
    ns = d.namespace()
    ch = model.channel(0.2, check=False)
    for yv, om, V in ((0.7, 0.3, 0.5), (1.9, -0.4, 0.9), (-0.2, 0.1, 0.3)):
        at = {ns["y_0_0"]: yv, ns["omega_0_0"]: om, ns["Vinv_0_0"]: 1 / V, ns["Delta"]: 0.2}
        g = _numeric(_with_likelihood(d.item("g_out").expr[0], d), at)
        dg = _numeric(_with_likelihood(d.item("dg_out").expr[0], d), at)
        gn, dgn = ch.gout(np.array([[yv]]), np.array([[[om]]]), np.array([[V]]))
        assert g == pytest.approx(float(gn.ravel()[0]), rel=1e-7, abs=1e-9)
        assert dg == pytest.approx(float(dgn.ravel()[0]), rel=1e-7, abs=1e-9)


def test_printed_threshold_equation_gives_the_threshold(files):
    """alpha_c = 1/T_0000 with T = int dy Z_out_0 J^2, integrated by scipy from the printed
    expressions, against the package's scalar quadrature for y = |z| + sqrt(0.2) xi
    (0.7158943519285647, float64 nested tanh-sinh): 1e-6."""
    _, d = _case(files, "abs")
    ns = d.namespace()
    Z0 = _with_likelihood(d.item("Z_out_0").expr, d)
    J = _with_likelihood(d.item("J").expr[0], d)
    y = ns["y_0_0"]

    def integrand(yv):
        at = {y: yv, ns["Delta"]: 0.2}
        return _numeric(Z0, at) * _numeric(J, at) ** 2

    # y in [-5, 14]: the density of y = |z| + sqrt(0.2) xi outside is below 1e-27
    T = sum(integrate.quad(integrand, a, b, epsabs=1e-12, epsrel=1e-10, limit=200)[0]
            for a, b in ((-5.0, 0.0), (0.0, 14.0)))
    (eq_T,) = d.item("operator_tensor").expr
    alpha_c = d.item("alpha_c").expr.xreplace({eq_T.lhs: T})
    assert float(alpha_c) == pytest.approx(0.7158943519285647, rel=1e-6)


def test_symbolic_operator_is_the_numeric_one():
    """The object-array path of tensor_from_jacobians / operator_matrix / prior_jacobian
    (what derive prints) against the float path at random numbers: 1e-12."""
    from symtheory.glm.factors.gaussian_prior import GaussianPrior
    from symtheory.glm.thresholds.operator import (
        operator_matrix,
        prior_jacobian,
        tensor_from_jacobians,
    )

    rng = np.random.default_rng(0)
    P, M = 2, 2
    syms = np.array(sp.symbols(f"j0:{(P * M) ** 2}"), dtype=object).reshape(1, P, M, P, M)
    vals = rng.standard_normal((P * M) ** 2)
    sub = dict(zip(syms.ravel(), vals))
    Ts = tensor_from_jacobians(syms, np.array([sp.S.One], dtype=object))
    T = tensor_from_jacobians(vals.reshape(1, P, M, P, M), np.ones(1))
    A_sym = operator_matrix(Ts)
    A = operator_matrix(T)
    got = np.array([[float(sp.sympify(v).xreplace(sub)) for v in row] for row in A_sym])
    np.testing.assert_allclose(got, A, rtol=1e-12, atol=1e-12)
    Jp = prior_jacobian(GaussianPrior(), P, exact=True).astype(float)
    np.testing.assert_allclose(Jp, prior_jacobian(GaussianPrior(), P), rtol=0, atol=1e-15)


def test_not_derivable_is_said_not_omitted(tmp_path):
    path = _file(tmp_path, "pairs3")
    d = derive(load_model(path))          # noiseless, 3 indices: no reduction, not discrete,
    #                                       separates in no index (no nested level set)
    assert d.item("preimages").note.startswith("not derivable")
    assert d.item("threshold_equation").expr is None
    text = render(d, "sympy")
    assert "# preimages: preimages -- not derivable" in text


def test_a_nested_level_set_shows_its_separation(tmp_path):
    """y = z1 z2 z3 noiseless: z1 (z2 z3), the inner level y' = y / z1, weight 1/|z1|."""
    d = derive(load_model(_file(tmp_path, "prod3")))
    z1, z2, z3 = sp.symbols("z1 z2 z3", real=True)
    a, h, y_in = d.item("level_set_separation").expr
    assert (a, h) == (z1, z2 * z3) and sp.simplify(y_in * z1).free_symbols.isdisjoint({z1})
    assert d.item("level_set_outer_weight").expr == 1 / sp.Abs(z1)
    (branch,) = d.item("level_set_branches").expr
    assert sp.simplify(branch * z1 * z3 - y_in * z1) == 0


def test_out_writes_the_file(tmp_path, capsys):
    out = tmp_path / "d.md"
    path = _file(tmp_path, "sign")
    assert main(["smi", "derive", "--model-file", str(path), "--out", str(out)]) == 0
    assert out.read_text().startswith("# Derivation: y = sign(z) (noiseless)")
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["--model-file", "no_such_file.py"], "--model-file no_such_file.py: no such file"),
    (["--model-file", "EMPTY"], "must define `model`"),
    (["--model-file", "SIGN", "--format", "html"], "--format"),
    (["--model-file", "SIGN", "--out", "/no/such/folder/d.md"], "--out"),
])
def test_bad_input_exits_2_naming_the_option(args, needle, tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    args = [str(empty) if a == "EMPTY" else str(_file(tmp_path, "sign")) if a == "SIGN" else a
            for a in args]
    assert main(["smi", "derive", *args]) == 2
    assert needle in capsys.readouterr().err
