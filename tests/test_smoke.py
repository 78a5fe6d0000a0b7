"""Everything a reader runs by hand, run here so none of it rots unseen (marker ``smoke``):
the derivation scripts, the tutorial notebooks of the docs site (docs/tutorials/, executed
with nbclient), every numerics script with ``--quick`` (into a temporary folder), the Python
snippets of README.md and docs/guide.md, and every command of README.md's bash blocks,
timed against the time stated next to it."""
import os
import re
import subprocess
import sys
import time
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


# ------------------------------------------------------------------ README commands
#: a command may take this many times the time README.md states next to it: the smoke
#: tier runs on two xdist workers (-n auto on 2 cores), so a command timed on 2 idle
#: cores may get half the machine.  SYMTHEORY_TIME_FACTOR scales it on a shared machine
#: (as the timed tests of tests/smi do)
LOAD_FACTOR = 2.0 * float(os.environ.get("SYMTHEORY_TIME_FACTOR", "1"))
#: a time as the README states it: "(12 s)", "3 s:", "(< 1 s)", "(1 min 30 s)"
_TIME = re.compile(r"(?:(\d+(?:\.\d+)?)\s*min)?\s*(?:(\d+(?:\.\d+)?)\s*s)\b")


def _stated_seconds(text):
    """The first time stated in ``text`` (seconds), or None."""
    for m in _TIME.finditer(text):
        if m.group(1) or m.group(2):
            return 60 * float(m.group(1) or 0) + float(m.group(2) or 0)
    return None


def readme_commands(text):
    """``[(command, stated seconds)]`` of every bash block of a README.

    A command's time is the one stated in its own comment, else in the comment lines just
    above it, else (the set-up block) the first one in the paragraph after the block.  The
    set-up commands ``python3 -m pip install ... && X`` run only ``X`` (the install is
    what CI itself does), and ``python3 -m pytest`` is the default tier CI runs itself."""
    out = []
    for m in re.finditer(r"```bash\n(.*?)```\n(.*?)(?:\n\n|$)", text, flags=re.S):
        after = _stated_seconds(m.group(2))
        above = None
        for line in m.group(1).replace("\\\n", " ").splitlines():
            code, _, comment = line.partition("#")
            if not code.strip():
                above = _stated_seconds(comment) or above
                continue
            code = re.sub(r"^python3 -m pip install \S+( \S+)* && ", "", code.strip())
            if code == "python3 -m pytest":
                continue
            stated = _stated_seconds(comment) or above or after
            out.append((code, stated))
            above = None
    return out


def test_readme_commands_are_parsed():
    text = ("```bash\npython3 -m pip install -e . && symtheory a --out x\n"
            "python3 -m pip install -e \".[test]\" && python3 -m pytest\n```\n\n"
            "The first (CSV; 8 s on 2 cores once installed).\n\n"
            "```bash\n# one (12 s)\nsymtheory b --alpha 0.3 \\\n    --beta 2\n"
            "symtheory c   # 3 s: alpha_c\nsymtheory d   # list (< 1 s)\n"
            "# a long one (1 min 30 s)\nsymtheory e\n```\n")
    assert readme_commands(text) == [("symtheory a --out x", 8.0),
                                     ("symtheory b --alpha 0.3      --beta 2", 12.0),
                                     ("symtheory c", 3.0), ("symtheory d", 1.0),
                                     ("symtheory e", 90.0)]


README_COMMANDS = readme_commands((ROOT / "README.md").read_text())


def _link_inputs(command, folder):
    """Link into ``folder`` the repository paths the command reads (not its --out)."""
    words = command.split()
    for prev, word in zip([""] + words, words):
        head = word.split("/")[0]
        if prev != "--out" and "/" in word and (ROOT / word).exists() and \
                not (folder / head).exists():
            (folder / head).symlink_to(ROOT / head)


def _timed_shell(command, folder):
    t0 = time.perf_counter()
    out = subprocess.run(["bash", "-e", "-c", command], cwd=folder, env=_env(),
                         capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - t0
    assert out.returncode == 0, f"{command} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return seconds


@pytest.mark.parametrize("command,stated", README_COMMANDS,
                         ids=[c.split(" --")[0] for c, _ in README_COMMANDS])
def test_readme_command_runs_in_its_stated_time(command, stated, tmp_path):
    """Every command README.md shows runs (outputs into a temporary folder) within
    LOAD_FACTOR x the time it states.  A run over it is repeated once: the first run of a
    model compiles its kernels (the README states warm-cache times), the second is timed."""
    assert stated is not None, f"README.md states no time for {command!r}"
    _link_inputs(command, tmp_path)
    seconds = _timed_shell(command, tmp_path)
    if seconds > LOAD_FACTOR * stated:
        cold, seconds = seconds, _timed_shell(command, tmp_path)
        print(f"{command}: {cold:.1f} s with compilation, then", end=" ")
    print(f"{command}: {seconds:.1f} s (README: {stated:g} s)")
    assert seconds <= LOAD_FACTOR * stated, \
        f"{command} took {seconds:.1f} s; README.md states {stated:g} s (limit x{LOAD_FACTOR:g})"
