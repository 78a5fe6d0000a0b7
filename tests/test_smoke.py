"""Everything a reader runs by hand, run here so none of it rots unseen (marker ``smoke``):
the derivation scripts, the tutorial notebooks of the docs site (docs/tutorials/, executed
with nbclient), every numerics script
with ``--quick`` (into a temporary folder), and the Python snippets of README.md and docs/guide.md."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the one place notebooks live: the docs site's tutorials (executed again by its build)
NOTEBOOKS = ROOT / "docs" / "tutorials"
pytestmark = pytest.mark.smoke


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")


def _run(args, cwd, timeout):
    out = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "derivations").glob("*.py")))
def test_derivation_runs(script):
    _run([str(ROOT / "derivations" / script)], ROOT, 600)


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "numerics").glob("*.py")
                                          if not p.name.startswith("_")))
def test_numerics_quick_runs(script, tmp_path):
    _run([str(ROOT / "numerics" / script), "--quick", "--out", str(tmp_path)], ROOT, 900)
    written = [p for p in tmp_path.rglob("*") if p.suffix in (".csv", ".png")]
    assert written, f"{script} --quick wrote no CSV or PNG"
    assert list(tmp_path.rglob("params.json")), f"{script} --quick wrote no params.json"


@pytest.mark.parametrize("notebook", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_executes(notebook, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


#: the pages whose Python blocks a reader would run: the README and the long-form guide
SNIPPET_PAGES = ("README.md", "docs/guide.md")


def _python_blocks():
    return [(page, i, code) for page in SNIPPET_PAGES
            for i, code in enumerate(re.findall(r"```python\n(.*?)```",
                                                (ROOT / page).read_text(), flags=re.S))]


@pytest.mark.parametrize("page,index,code", _python_blocks(),
                         ids=[f"{p}#{i}" for p, i, _ in _python_blocks()])
def test_readme_python_snippet_runs(page, index, code, tmp_path):
    _run(["-c", code], tmp_path, 600)
