"""Bad input on the command line: exit status 2, the option and its valid range named on
stderr, no traceback, no output file -- for every subcommand, before anything heavy runs.

Most cases run in-process (``symtheory.cli.main``); a few run as subprocesses to prove
that the installed entry point prints no traceback and imports no numerics to refuse.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from symtheory.cli import main
from symtheory.core import cli_common
from symtheory.core.validate import ParameterError

ROOT = Path(__file__).resolve().parents[1]

BSR_MODEL = ["--beta", "2", "--rho", "0.5"]
BSR_SIM = ["--d", "20", "--beta", "1", "--rho", "0.5", "--alpha", "0.3"]
SMI_LIGHT = ["--model", "outer-product"]          # builds in milliseconds
SMI_GAMP = ["--d", "20", "--alpha", "1"]

# (subcommand, arguments, what stderr must name: the option and its range)
CASES = [
    # ------------------------------------------------------------- bsr theory
    ("bsr theory", ["--alpha", "-0.1", *BSR_MODEL], ["--alpha", "[0, inf)"]),
    ("bsr theory", ["--alpha", "nan", *BSR_MODEL], ["--alpha", "[0, inf)"]),
    ("bsr theory", ["--alpha", "inf", *BSR_MODEL], ["--alpha", "[0, inf)"]),
    ("bsr theory", ["--alpha", "abc", *BSR_MODEL], ["--alpha", "[0, inf)"]),
    ("bsr theory", ["--alpha", "-1e-3", *BSR_MODEL], ["--alpha", "[0, inf)"]),
    ("bsr theory", ["--alpha", "0.1", "--beta", "-2", "--rho", "0.5"], ["--beta", "(0, inf]"]),
    ("bsr theory", ["--alpha", "0.1", "--beta", "nan", "--rho", "0.5"], ["--beta", "(0, inf]"]),
    ("bsr theory", ["--alpha", "0.1", "--beta", "-inf", "--rho", "0.5"], ["--beta", "(0, inf]"]),
    ("bsr theory", ["--alpha", "0.1", "--beta", "2", "--rho", "0"], ["--rho", "(0, inf)"]),
    ("bsr theory", ["--alpha", "0.1", "--beta", "2", "--rho", "inf"], ["--rho", "(0, inf)"]),
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL, "--delta", "-1"], ["--delta", "[0, inf)"]),
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL, "--delta", "inf"], ["--delta", "[0, inf)"]),
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL, "--format", "xml"], ["--format", "csv, json"]),
    ("bsr theory", ["--alpha-grid", "0", "1", "0", *BSR_MODEL], ["NUM", "[1, 10000]"]),
    ("bsr theory", ["--alpha-grid", "0", "1", "1e9", *BSR_MODEL], ["NUM", "[1, 10000]"]),
    ("bsr theory", ["--alpha-grid", "0", "1", "2.5", *BSR_MODEL], ["NUM", "[1, 10000]"]),
    ("bsr theory", ["--alpha-grid", "-1", "1", "5", *BSR_MODEL], ["START", "[0, inf)"]),
    ("bsr theory", ["--alpha-grid", "0", "nan", "5", *BSR_MODEL], ["STOP", "[0, inf)"]),
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL, "--precision", "0"], ["--precision", "[1, 1000]"]),
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL, "--precision", "2.5"], ["--precision", "[1, 1000]"]),
    ("bsr theory", ["--alpha", "0.1", "--alpha-grid", "0", "1", "3", *BSR_MODEL],
     ["--alpha-grid", "--alpha"]),
    ("bsr theory", BSR_MODEL, ["one of --alpha, --alpha-grid must be given"]),
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL, "--del", "0.1"],         # no abbreviations
     ["unrecognized arguments: --del"]),
    # ------------------------------------------------------------- bsr gamp
    ("bsr gamp", [*BSR_SIM, "--damping", "1"], ["--damping", "[0, 1)"]),
    ("bsr gamp", [*BSR_SIM, "--damping", "2"], ["--damping", "[0, 1)"]),
    ("bsr gamp", [*BSR_SIM, "--damping", "-0.1"], ["--damping", "[0, 1)"]),
    ("bsr gamp", [*BSR_SIM, "--seed", "-1"], ["--seed", ">= 0"]),
    ("bsr gamp", [*BSR_SIM, "--seeds", "0"], ["--seeds", ">= 1"]),
    ("bsr gamp", ["--d", "1", "--beta", "1", "--rho", "0.5", "--alpha", "0.3"], ["--d", ">= 2"]),
    ("bsr gamp", ["--d", "10.5", "--beta", "1", "--rho", "0.5", "--alpha", "0.3"], ["--d", ">= 2"]),
    ("bsr gamp", ["--d", "20", "--beta", "1", "--rho", "0.5", "--alpha", "0"], ["--alpha", "(0, inf)"]),
    ("bsr gamp", ["--d", "20", "--beta", "inf", "--rho", "0.5", "--alpha", "0.3"], ["--beta", "(0, inf)"]),
    ("bsr gamp", ["--d", "20", "--beta", "1", "--rho", "0.5", "--alpha-grid", "0", "1", "3"],
     ["START", "(0, inf)"]),
    ("bsr gamp", [*BSR_SIM, "--tol", "0"], ["--tol", "(0, inf)"]),
    ("bsr gamp", [*BSR_SIM, "--max-iter", "0"], ["--max-iter", ">= 1"]),
    ("bsr gamp", [*BSR_SIM, "--a-estimator", "mean"], ["--a-estimator", "derivative, square"]),
    ("bsr gamp", [*BSR_SIM, "--onsager", "none"], ["--onsager", "empirical, predicted"]),
    # ------------------------------------------------------------- bsr gd
    ("bsr gd", [*BSR_SIM, "--lr", "0"], ["--lr", "(0, inf)"]),
    ("bsr gd", [*BSR_SIM, "--lr", "inf"], ["--lr", "(0, inf)"]),
    ("bsr gd", [*BSR_SIM, "--steps", "0"], ["--steps", ">= 1"]),
    ("bsr gd", [*BSR_SIM, "--runs", "-3"], ["--runs", ">= 1"]),
    ("bsr gd", [*BSR_SIM, "--init", "zero"], ["--init", "prior, small"]),
    ("bsr gd", [*BSR_SIM, "--init-scale", "-1"], ["--init-scale", "(0, inf)"]),
    ("bsr gd", [*BSR_SIM, "--record-every", "0"], ["--record-every", ">= 1"]),
    ("bsr gd", [*BSR_SIM, "--seed", "-5"], ["--seed", ">= 0"]),
    # ------------------------------------------------------------- bsr mnne
    ("bsr mnne", [*BSR_SIM, "--samples", "0"], ["--samples", ">= 1"]),
    ("bsr mnne", ["--d", "0", "--beta", "1", "--rho", "0.5", "--alpha", "0.3"], ["--d", ">= 2"]),
    ("bsr mnne", [*BSR_SIM, "--rho", "-1"], ["--rho", "(0, inf)"]),
    ("bsr mnne", [*BSR_SIM, "--delta", "0.1"], ["--delta"]),        # noiseless only
    # ------------------------------------------------------------- bsr mnne-threshold
    ("bsr mnne-threshold", ["--beta", "2", "--rho", "-0.1"], ["--rho", "[0, inf)"]),
    ("bsr mnne-threshold", ["--beta", "inf", "--rho", "0.3"], ["--beta", "(0, inf)"]),
    ("bsr mnne-threshold", ["--beta", "0", "--rho", "0.3"], ["--beta", "(0, inf)"]),
    ("bsr mnne-threshold", ["--beta", "2", "--rho", "0.3", "--format", "tsv"], ["--format", "csv, json"]),
    # ------------------------------------------------------------- smi se
    ("smi se", [*SMI_LIGHT, "--alpha", "0"], ["--alpha", "(0, 1e+12]"]),
    ("smi se", [*SMI_LIGHT, "--alpha-grid", "0", "1", "5"], ["START", "(0, 1e+12]"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--samples", "10"], ["--samples", ">= 100"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--error-samples", "5"], ["--error-samples", ">= 100"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--damping", "1"], ["--damping", "[0, 1)"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--side-information", "-1"],
     ["--side-information", "[0, inf)"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--max-iter", "0"], ["--max-iter", ">= 1"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--start", "random"], ["--start", "uninformed, informed"]),
    ("smi se", ["--model", "transformer", "--alpha", "0.5"], ["--model", "attention, linear-attention"]),
    ("smi se", ["--depth", "0", "--alpha", "0.5"], ["--depth", "[1, 3]"]),
    ("smi se", ["--seq-len", "0", "--alpha", "0.5"], ["--seq-len", "[1, 6]"]),
    ("smi se", ["--skip", "0", "--alpha", "0.5"], ["--skip", "(0, inf)"]),
    ("smi se", ["--inv-temp", "-1", "--alpha", "0.5"], ["--inv-temp", "(0, inf)"]),
    ("smi se", ["--inv-temp", "nan", "--alpha", "0.5"], ["--inv-temp", "(0, inf)"]),
    ("smi se", ["--beta", "1", "--alpha", "0.5"], ["--beta"]),      # renamed: --inv-temp
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--noise", "0"], ["--noise", "(0, inf)"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--quadrature", "simpson"],
     ["--quadrature", "gauss-hermite, uniform"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--quadrature-nodes", "1"],
     ["--quadrature-nodes", "[4, 200]"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--quadrature-nodes", "1e9"],
     ["--quadrature-nodes", "[4, 200]"]),
    ("smi se", ["--model", "linear-tokens", "--alpha", "0.5"], ["--noise", "(0, inf)"]),
    ("smi se", [*SMI_LIGHT, "--depth", "3", "--alpha", "0.5"], ["--depth", "attention"]),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5", "--seed", "-1"], ["--seed", ">= 0"]),
    # ------------------------------------------------------------- smi error
    ("smi error", ["--overlap", "0,0;0"], ["--overlap", "eigenvalues in [0, 1]", "square"]),
    ("smi error", ["--overlap", "a,b;c,d"], ["--overlap", "eigenvalues in [0, 1]", "numbers"]),
    ("smi error", ["--overlap", "0,0.5;0.1,0"], ["--overlap", "symmetric"]),
    ("smi error", ["--overlap", "nan"], ["--overlap", "finite"]),
    ("smi error", [*SMI_LIGHT, "--overlap", "1.5"], ["--overlap", "eigenvalues in [0, 1]"]),
    ("smi error", [*SMI_LIGHT, "--overlap", "-0.1"], ["--overlap", "eigenvalues in [0, 1]"]),
    ("smi error", [*SMI_LIGHT, "--overlap", "0.5,0;0,0.5"], ["--overlap", "1 x 1"]),
    ("smi error", [*SMI_LIGHT, "--overlap", "0.5", "--kind", "mmse"], ["--kind", "bo, plugin"]),
    ("smi error", [*SMI_LIGHT, "--overlap", "0.5", "--samples", "99"], ["--samples", ">= 100"]),
    ("smi error", [*SMI_LIGHT], ["--overlap must be given"]),
    # ------------------------------------------------------------- smi gamp
    ("smi gamp", [*SMI_LIGHT, "--d", "1", "--alpha", "1"], ["--d", ">= 2"]),
    ("smi gamp", [*SMI_LIGHT, "--d", "20", "--alpha", "0"], ["--alpha", "(0, 1e+12]"]),
    ("smi gamp", [*SMI_LIGHT, "--d", "20", "--alpha", "inf"], ["--alpha", "(0, 1e+12]"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP, "--damping", "2"], ["--damping", "[0, 1)"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP, "--damping", "-0.5"], ["--damping", "[0, 1)"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP, "--max-iter", "0"], ["--max-iter", ">= 1"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP, "--init-scale", "0"], ["--init-scale", "(0, inf)"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP, "--side-information", "nan"],
     ["--side-information", "[0, inf)"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP, "--seed", "-2"], ["--seed", ">= 0"]),
    ("smi gamp", ["--model", "linear-tokens", *SMI_GAMP], ["--noise", "(0, inf)"]),
    # ------------------------------------------------------------- cache, families
    ("cache", ["purge"], ["action", "info, clear"]),
    ("cache", [], ["action must be given"]),
    ("bsr", ["simulate"], ["task", "theory"]),
    ("smi", [], ["task must be given"]),
    ("aim2", [], ["family", "bsr, smi"]),
]

# --model-file: (file content or None for a missing file, what stderr must name)
MODEL_FILES = [
    (None, "no such file"),
    ("x = 1\n", "must define `model`"),
    ("model = 3\n", "must be a MultiIndexModel, got int"),
    ("raise RuntimeError('broken declaration')\n", "RuntimeError: broken declaration"),
    ("def build_model(:\n", "syntax error at line 1"),
    ("def build_model():\n    return 1 / 0\n", "ZeroDivisionError"),
    ("import sys\nsys.exit(3)\n", "SystemExit"),
    ("import sympy as sp\nfrom symtheory.glm import MultiIndexModel\n"
     "z = sp.Symbol('z')\nmodel = MultiIndexModel('bad', sp.Matrix([[z]]), sp.Matrix([[z + sp.Symbol('q')]]))\n",
     "undeclared symbols"),
]
SUBCOMMAND_TAIL = {"se": ["--alpha", "0.5"], "error": ["--overlap", "0.5"], "gamp": SMI_GAMP}


def _check_refused(code, err, needles, out_dir):
    assert code == 2, err
    assert "Traceback" not in err
    assert "error:" in err
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"
    assert not out_dir.exists(), "an output folder was created for a refused command"


@pytest.mark.parametrize("command,args,needles", CASES,
                         ids=[f"{c}:{' '.join(a)}"[:80] for c, a, _ in CASES])
def test_bad_input_is_refused_naming_the_option_and_range(command, args, needles, tmp_path, capsys):
    out = tmp_path / "out"
    takes_out = len(command.split()) == 2 and command.split()[0] in ("bsr", "smi")
    argv = command.split() + list(args) + (["--out", str(out)] if takes_out else [])
    t0 = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - t0
    _check_refused(code, capsys.readouterr().err, needles, out)
    # refused before any computation: parsing, or at most building a small model (SymPy)
    assert elapsed < 20, f"refusing took {elapsed:.1f} s"


@pytest.mark.parametrize("content,needle", MODEL_FILES, ids=[n for _, n in MODEL_FILES])
@pytest.mark.parametrize("task", ["se", "error", "gamp"])
def test_bad_model_file_is_refused_naming_the_file(task, content, needle, tmp_path, capsys):
    path = tmp_path / "model_decl.py"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out"
    code = main(["smi", task, "--model-file", str(path), *SUBCOMMAND_TAIL[task], "--out", str(out)])
    err = capsys.readouterr().err
    _check_refused(code, err, ["--model-file", str(path), needle], out)


@pytest.mark.parametrize("argv", [
    ["smi", "error", "--model-file", "m.py", "--model", "attention", "--overlap", "0.5"],
    ["smi", "error", "--model-file", "m.py", "--depth", "3", "--overlap", "0.5"],
])
def test_model_file_excludes_the_shipped_model_options(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("raise AssertionError('must not be run')\n")
    code = main(argv + ["--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    _check_refused(code, err, ["--model-file"], tmp_path / "out")
    assert "must not be run" not in err


@pytest.mark.parametrize("command,args", [
    ("bsr theory", ["--alpha", "0.1", *BSR_MODEL]),
    ("bsr gamp", BSR_SIM),
    ("smi se", [*SMI_LIGHT, "--alpha", "0.5"]),
    ("smi gamp", [*SMI_LIGHT, *SMI_GAMP]),
])
def test_unwritable_out_is_refused_before_computing(command, args, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    out = blocker / "results"
    t0 = time.perf_counter()
    code = main(command.split() + args + ["--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert time.perf_counter() - t0 < 5          # parse-time refusal: nothing computed
    _check_refused(code, err, ["--out", "writable folder", str(out)], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_at_least_fifty_bad_inputs_over_every_subcommand():
    commands = {c for c, _, _ in CASES}
    assert {"bsr theory", "bsr gamp", "bsr gd", "bsr mnne", "bsr mnne-threshold", "smi se",
            "smi error", "smi gamp", "cache"} <= commands
    assert len(CASES) >= 50


# ----------------------------------------------------------------- no partial output
def test_a_failing_writer_leaves_no_file_and_no_folder(tmp_path):
    folder = tmp_path / "new" / "deeper"

    def fails(path):
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError, match="plot failed"):
        cli_common._write_all(folder, {"t.csv": lambda p: p.write_text("a\n1\n"), "t.png": fails})
    assert list(tmp_path.iterdir()) == []
    # an OSError while writing is a ParameterError naming --out, and cleans up entirely
    def oserror(path):
        raise OSError(28, "No space left on device")

    with pytest.raises(ParameterError, match="--out .* not writable: No space left"):
        cli_common._write_all(folder, {"t.csv": lambda p: p.write_text("a\n1\n"), "t.png": oserror})
    assert list(tmp_path.iterdir()) == []


def test_written_files_are_complete_and_not_private(tmp_path):
    folder = tmp_path / "res"
    paths = cli_common._write_all(folder, {"t.csv": lambda p: p.write_text("a\n1\n")})
    assert paths == [(folder / "t.csv").resolve()]
    assert (folder / "t.csv").read_text() == "a\n1\n"
    assert [p.name for p in folder.iterdir()] == ["t.csv"]      # no temporary left
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / "t.csv").stat().st_mode & 0o777 == 0o666 & ~umask


# ----------------------------------------------------------------- subprocess
def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "symtheory.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.parametrize("args,needle", [
    (["smi", "gamp", "--d", "20", "--alpha", "1", "--damping", "2"], "--damping must be in [0, 1)"),
    (["bsr", "gamp", *BSR_SIM, "--seed", "-1"], "--seed must be an integer >= 0"),
    (["smi", "error", "--overlap", "0,0;0"], "--overlap must be"),
    (["bsr", "theory", "--alpha-grid", "0", "1", "1e9", *BSR_MODEL], "NUM must be an integer in [1, 10000]"),
])
def test_entry_point_prints_no_traceback(args, needle):
    res = _run(*args)
    assert res.returncode == 2
    assert needle in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == ""


def test_refusing_imports_no_numerics():
    """The 1e9-point grid and the bad damping are refused by the parser alone."""
    code = ("import sys; from symtheory.cli import main; "
            "rc = [main(['bsr', 'theory', '--alpha-grid', '0', '1', '1e9', '--beta', '2', '--rho', '0.5']), "
            "main(['smi', 'gamp', '--d', '20', '--alpha', '1', '--damping', '1'])]; "
            "print(rc, [m for m in ('numpy', 'sympy', 'numba', 'scipy') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert res.stdout.strip() == "[2, 2] []", res.stdout + res.stderr


def test_model_file_error_through_the_entry_point(tmp_path):
    path = tmp_path / "decl.py"
    path.write_text("import nonexistent_module_xyz\n")
    res = _run("smi", "error", "--model-file", str(path), "--overlap", "0.5")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert str(path) in res.stderr and "ModuleNotFoundError" in res.stderr


# ----------------------------------------------------------------- gaps a newcomer found
# each ran silently for a minute or more, or failed deep inside without naming the option
GAPS = [
    (["smi", "se", "--seq-len", "7", "--alpha", "0.5"],
     ["--seq-len must be an integer in [1, 6], got 7"]),
    (["smi", "se", "--seq-len", "1000", "--alpha", "0.5"],
     ["--seq-len must be an integer in [1, 6], got 1000"]),
    (["smi", "se", "--depth", "50", "--alpha", "0.5"],
     ["--depth must be an integer in [1, 3], got 50"]),
    (["smi", "se", "--alpha", "1e300"],
     ["--alpha must be in (0, 1e+12], got 1e+300", "float64"]),
    (["smi", "se", "--samples", "1000000000", "--alpha", "0.5"],
     ["--samples 1000000000", "frozen samples need at least", "give --samples <="]),
    (["aim", "theory", "--rho", "inf", "--seq-len", "2", "--alpha", "0.1"],
     ["--rho inf", "softmax test error", "--no-gen-error"]),
    # the same bounds on every smi subcommand (one schema entry each)
    (["smi", "threshold", "--seq-len", "7"], ["--seq-len must be an integer in [1, 6], got 7"]),
    (["smi", "threshold", "--depth", "50"], ["--depth must be an integer in [1, 3], got 50"]),
    (["smi", "gamp", "--depth", "4", "--d", "20", "--alpha", "1"],
     ["--depth must be an integer in [1, 3], got 4"]),
    (["smi", "sgd", "--seq-len", "8"], ["--seq-len must be an integer in [1, 6], got 8"]),
    (["smi", "error", "--seq-len", "7", "--overlap", "0.5"],
     ["--seq-len must be an integer in [1, 6], got 7"]),
    # what the models cannot take is refused before any SymPy work
    (["smi", "se", "--seq-len", "6", "--alpha", "0.5"],
     ["--noise must be given, in (0, inf)", "seq_len = 6"]),
    (["smi", "se", "--seq-len", "1", "--noise", "0.1", "--alpha", "0.5"],
     ["--seq-len must be >= 2 for the softmax attention"]),
    (["smi", "threshold", "--seq-len", "3", "--weak-only"],
     ["--seq-len must be 2 for --model attention"]),
    (["aim", "theory", "--alpha", "0.1", "--rho", "0.5", "--seq-len", "9"],
     ["--seq-len must be an integer in [1, 8], got 9"]),
    (["aim", "gamp", "--alpha", "0.1", "--seq-len", "9"],
     ["--seq-len must be an integer in [1, 8], got 9"]),
    # refused, not ignored (it used to be silently dropped for softmax)
    (["aim", "threshold", "--rho", "0.5", "--seq-len", "2", "--precision", "30"],
     ["--precision applies to --link hardmax"]),
]


@pytest.mark.parametrize("argv,needles", GAPS, ids=[" ".join(a)[:60] for a, _ in GAPS])
def test_newcomer_gaps_are_refused_at_once(argv, needles, capsys, monkeypatch):
    """Named option, valid range, exit 2, no traceback, in under 2 s.  The memory check
    sees 16 GiB available (the frozen samples of 1e9 points need 119 GiB anywhere)."""
    from symtheory.core import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * 2 ** 30)
    t0 = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"
    assert elapsed < 2, f"refusing took {elapsed:.2f} s"


def test_memory_refusal_states_the_need_and_the_most_that_fits(capsys, monkeypatch):
    from symtheory.core import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * 2 ** 30)
    assert main(["smi", "se", "--samples", "1000000000", "--alpha", "0.5"]) == 2
    err = capsys.readouterr().err
    # attention, depth 2, seq_len 2: 2 P M = 8 coordinates, 8 bytes, twice (RQMC design)
    assert "119.2 GB (1000000000 x 128 bytes" in err and "only 16.0 GB" in err
    most = int(err.split("give --samples <= ")[1].split()[0])
    assert most == int(0.8 * 16 * 2 ** 30 // 128)


def test_gap_refusal_through_the_entry_point():
    res = _run("smi", "se", "--depth", "50", "--alpha", "0.5")
    assert res.returncode == 2 and res.stdout == ""
    assert "--depth must be an integer in [1, 3], got 50" in res.stderr
    assert "Traceback" not in res.stderr
