"""The layer rule: families -> glm -> core (import-linter's layers contract in
pyproject.toml), and no family name in the code of the lower layers."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("bsr", "smi", "aim", "attention", "qn")


def test_import_contract_is_kept():
    try:
        import importlinter  # noqa: F401
    except ImportError:
        pytest.fail("import-linter is missing: install the test extras")
    # the console script may lack a shim (pyenv) on a fresh machine: call its entry point
    cmd = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
           "sys.exit(lint_imports_command())", "--config", str(ROOT / "pyproject.toml")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize("layer", ["core", "glm"])
def test_lower_layers_name_no_family(layer):
    """Definitions, kernel names and module names below the families are generic."""
    pat = re.compile(r"(^\s*(def|class)\s+\w*|Kernel\(\s*f?[\"'])(" + "|".join(FAMILIES) + r")",
                     re.IGNORECASE)
    bad = []
    for path in sorted((ROOT / "symtheory" / layer).rglob("*.py")):
        if any(f in path.stem.lower() for f in FAMILIES):
            bad.append(str(path.relative_to(ROOT)))
        for i, line in enumerate(path.read_text().splitlines(), 1):
            # glm and core cite the papers' equations, not a family's spec (docs/theory/*.md)
            if pat.search(line) or re.search(r"from\s+\.\.(" + "|".join(FAMILIES) + r")\b", line) \
                    or re.search(r"\b(bsr|smi|aim)\.md\b", line):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "family names in a lower layer:\n" + "\n".join(bad)


def test_import_symtheory_stays_light():
    """``import symtheory`` loads no numerics (sympy, numba, scipy) until asked."""
    code = ("import sys, symtheory; heavy = [m for m in ('sympy', 'numba', 'scipy', 'numpy') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


# ----------------------------------------------------------------------- import cycles
# The graph is read from the source (AST), not by importing: an edge A -> B for every
# ``import B`` / ``from B import x`` in A (``from pkg import sub`` -> pkg.sub), plus B's
# parent packages (importing B runs their __init__).  Imports under ``if TYPE_CHECKING:``
# are left out.  Module-level imports and function-level imports (inside a def, run when
# called) are counted separately: the module-level graph must have no cycle at all; the
# graph with the function-level imports added must have none either.
import ast  # noqa: E402

def _modules(root: Path) -> dict:
    mods = {}
    for path in (root / "symtheory").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _is_type_checking(node) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree):
    """``(node, in_function)`` of every import statement outside ``if TYPE_CHECKING:``."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit_one(other, in_function)
                continue
            visit_one(child, in_function)

    def visit_one(child, in_function):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append((child, in_function))
        visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda)))

    visit(tree, False)
    return found


def import_graph(root: Path, *, function_level: bool) -> dict:
    """``{module: set of modules it imports}`` within the package at ``root``."""
    mods = _modules(root)
    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        base = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node, in_function in _imports(ast.parse(path.read_text())):
            if in_function and not function_level:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                pkg = base
                for _ in range(max(node.level - 1, 0)):
                    pkg = pkg.rpartition(".")[0]
                target = (pkg + ("." + node.module if node.module else "")) if node.level \
                    else node.module
                targets = [target] + [f"{target}.{a.name}" for a in node.names
                                      if f"{target}.{a.name}" in mods]
            for t in targets:
                while t:                      # the module and the packages it runs
                    if t in mods and t != mod:
                        graph[mod].add(t)
                    t = t.rpartition(".")[0]
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_import_cycle_at_module_level():
    assert cycles(import_graph(ROOT, function_level=False)) == []


def test_no_import_cycle_with_function_level_imports():
    found = cycles(import_graph(ROOT, function_level=True))
    assert found == [], f"import cycles: {[sorted(c) for c in found]}"
    # the family cycles that were broken stay broken
    graph = import_graph(ROOT, function_level=True)
    for a, b in (("aim.cli", "aim.gamp_cli"), ("smi.cli", "smi.thresholds_cli"),
                 ("smi.sgd", "smi.tasks")):
        a, b = f"symtheory.{a}", f"symtheory.{b}"
        assert not (b in graph[a] and a in graph[b]), (a, b)


def test_the_cycle_finder_finds_cycles(tmp_path):
    """The graph reader sees module-level, function-level and parent-package edges and
    leaves TYPE_CHECKING imports out."""
    pkg = tmp_path / "symtheory"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from . import d\n")
    (pkg / "d.py").write_text("from . import c\n")
    assert cycles(import_graph(tmp_path, function_level=False)) == []
    assert cycles(import_graph(tmp_path, function_level=True)) == [
        {"symtheory.a", "symtheory.sub.b"}]
