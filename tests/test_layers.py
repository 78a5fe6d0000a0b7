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
            if pat.search(line) or re.search(r"from\s+\.\.(" + "|".join(FAMILIES) + r")\b", line):
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
