"""The package's shape, checked: one factor interface (exactly one Channel, Prior, Result
base, GAMP loop, fixed-point engine, tanh-sinh rule and softmax), modules and functions of
a readable size, no import circle."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

import symtheory

ROOT = Path(symtheory.__file__).resolve().parent
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120


def _sources():
    """Every Python source and template of the package, with its dotted module name."""
    for path in sorted(ROOT.rglob("*")):
        if path.suffix in (".py", ".tmpl") and "__pycache__" not in path.parts:
            rel = path.relative_to(ROOT.parent).with_suffix("")
            yield ".".join(rel.parts).removesuffix(".__init__").removesuffix(".py"), path


def _trees():
    for name, path in _sources():
        if path.suffix == ".py":
            yield name, path, ast.parse(path.read_text())


def _modules():
    return [importlib.import_module(m.name)
            for m in pkgutil.walk_packages(symtheory.__path__, "symtheory.")]


def _classes():
    seen = set()
    for mod in _modules():
        for obj in vars(mod).values():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__ and obj not in seen:
                seen.add(obj)
                yield obj


# ---------------------------------------------------------------------- sizes
def test_no_module_over_800_lines():
    """Every line counts, docstrings included: a module too long to read is too long
    whatever its lines are made of."""
    big = {str(p.relative_to(ROOT)): n for _, p in _sources()
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_no_function_over_120_lines():
    big = []
    for _, path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n})")
    assert not big, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(big)


# ---------------------------------------------------------------------- one of each
def test_only_channel_defines_gout_and_every_channel_is_a_channel():
    from symtheory.glm.factors.channel import Channel

    defines = [f"{name}.{node.name}" for name, _, tree in _trees() for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef)
               and any(isinstance(f, ast.FunctionDef) and f.name == "gout" for f in node.body)]
    assert defines == ["symtheory.glm.factors.channel.Channel"], defines
    factor_channels = [c for c in _classes() if c.__module__.startswith("symtheory.glm.factors")
                       and "moments" in vars(c)]
    assert factor_channels and all(issubclass(c, Channel) for c in factor_channels), \
        [c for c in factor_channels if not issubclass(c, Channel)]


def test_every_prior_is_a_prior():
    from symtheory.glm.factors.prior import Prior

    priors = [c for c in _classes() if "input_functions" in vars(c) or "overlap_map" in vars(c)]
    assert priors and all(issubclass(c, Prior) for c in priors), \
        [c for c in priors if not issubclass(c, Prior)]


def test_every_report_is_a_result():
    """A public class that reports ``converged`` is a Result (the sweep store, the CLI and
    notebooks read one interface); a private iteration state is not a report."""
    from symtheory.core.result import Result

    reports = [c for c in _classes() if is_dataclass(c) and not c.__name__.startswith("_")
               and "converged" in {f.name for f in fields(c)}]
    assert reports and all(issubclass(c, Result) for c in reports), \
        [c.__qualname__ for c in reports if not issubclass(c, Result)]


@pytest.mark.parametrize("what, where", [
    # the GAMP iteration: the one function that calls a prior's input functions from a
    # channel's g_out
    ("gamp loop", "symtheory.glm.gamp.loop._iterate"),
    ("fixed point", "symtheory.core.solvers.fixed_point"),
    ("tanh-sinh", "symtheory.core.quadrature.tanh_sinh_unit"),
    ("softmax", "symtheory.core.softmax"),
])
def test_exactly_one(what, where):
    hits = []
    for name, _, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = {c.func.attr if isinstance(c.func, ast.Attribute) else
                         getattr(c.func, "id", "") for c in ast.walk(node)
                         if isinstance(c, ast.Call)}
                found = {
                    "gamp loop": "gout" in calls and "input_functions" in calls,
                    "fixed point": node.name == "fixed_point",
                    # the rule's nodes are built where sinh meets the tanh-sinh name
                    "tanh-sinh": "tanh_sinh" in node.name and "sinh" in calls,
                    "softmax": node.name.startswith("softmax") and "preimage" not in node.name,
                }[what]
                if found:
                    hits.append(f"{name}.{node.name}")
    hits = sorted(set(hits))
    if what == "softmax":
        assert hits == ["symtheory.core.softmax.softmax", "symtheory.core.softmax.softmax_rows"]
    else:
        assert hits == [where], hits


def test_tanh_sinh_is_defined_in_quadrature_only():
    """Compiled code calls core.quadrature's rule (compiled), and a local helper that
    integrates by another tanh-sinh (mpmath.quad) says so in its name."""
    outside = [f"{name}.{node.name}" for name, _, tree in _trees() for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and "tanh_sinh" in node.name and name != "symtheory.core.quadrature"]
    assert not outside, outside


# ---------------------------------------------------------------------- imports
def _module_imports(name, tree, modules):
    """Modules imported at module level (not inside functions or TYPE_CHECKING)."""
    package = name if (ROOT.parent / name.replace(".", "/") / "__init__.py").exists() \
        else name.rpartition(".")[0]
    out = set()
    for node in tree.body:
        stmts = [node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        if isinstance(node, (ast.Try, ast.If)):
            stmts = list(ast.walk(node))
        for st in stmts:
            if isinstance(st, ast.Import):
                out |= {a.name for a in st.names}
            elif isinstance(st, ast.ImportFrom):
                base = st.module or ""
                if st.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - st.level + 1]
                    base = ".".join(parts + ([st.module] if st.module else []))
                for a in st.names:
                    full = f"{base}.{a.name}"
                    out.add(full if full in modules else base)
    return {m for m in out if m in modules and m != name}


def test_no_import_circle():
    trees = {name: tree for name, _, tree in _trees()}
    graph = {name: _module_imports(name, tree, trees) for name, tree in trees.items()}
    state, stack, cycles = {}, [], []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)
