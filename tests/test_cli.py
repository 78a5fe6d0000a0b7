"""Command-line interface: tables, files, plots, precision, and bad input."""
import csv
import io
import json
import math
import subprocess
import sys

import pytest

from symtheory.cli import main

COLUMNS = {"alpha", "mmse", "q", "alpha_pr", "ridge_mse", "converged", "iterations", "residual"}


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_csv_table_has_the_required_columns(capsys):
    code, out, _ = run(["bsr", "theory", "--alpha", "0.1", "0.3", "0.7", "--beta", "2", "--rho",
                        "0.5", "--delta", "0", "--quiet"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert COLUMNS <= set(rows[0])
    assert [float(r["alpha"]) for r in rows] == [0.1, 0.3, 0.7]
    assert float(rows[1]["mmse"]) == pytest.approx(0.5902453914318666, abs=1e-12)
    assert float(rows[2]["mmse"]) == 0.0 and float(rows[2]["alpha_pr"]) == 0.625
    assert rows[0]["converged"] == "true"


def test_grid_json_and_beta_infinity(capsys):
    code, out, _ = run(["bsr", "theory", "--alpha-grid", "0", "0.4", "5", "--beta", "inf", "--rho",
                        "0.5", "--format", "json", "--quiet"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["meta"]["beta"] == "inf" or data["meta"]["beta"] == float("inf")
    mm = [r["mmse"] for r in data["rows"]]
    assert mm[3] == pytest.approx((1 - 0.3) * (0.5 - 0.3) / 0.5, abs=1e-12)


def test_out_folder_gets_table_parameters_and_plot(tmp_path, capsys):
    code, _, err = run(["bsr", "theory", "--alpha-grid", "0", "1", "11", "--beta", "1", "--rho",
                        "0.2", "--delta", "0.1", "--out", str(tmp_path), "--plot", "--quiet"], capsys)
    assert code == 0
    stem = "bsr_bo_beta1_rho0.2_delta0.1"
    assert (tmp_path / f"{stem}.csv").exists()
    params = json.loads((tmp_path / f"{stem}.params.json").read_text())
    assert params["rho"] == 0.2 and params["delta"] == 0.1 and "command" in params
    png = (tmp_path / f"{stem}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "wrote" in err


def test_precision_prints_the_requested_digits(capsys):
    code, out, _ = run(["bsr", "theory", "--alpha", "0.3", "--beta", "2", "--rho", "0.5",
                        "--precision", "20", "--quiet"], capsys)
    assert code == 0
    row = next(csv.DictReader(io.StringIO(out)))
    assert len(row["mmse"].split(".")[1]) == 20          # 20 significant digits (0.59...)
    assert row["mmse"].startswith("0.5902453914318674")
    assert float(row["digits_confirmed"]) >= 20
    assert_columns_described(["bsr", "theory"], list(row))


@pytest.mark.parametrize("args,needle", [
    (["--alpha", "-0.1", "--beta", "2", "--rho", "0.5"], "alpha"),
    (["--alpha", "0.1", "--beta", "-2", "--rho", "0.5"], "beta"),
    (["--alpha", "0.1", "--beta", "nan", "--rho", "0.5"], "beta"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0"], "rho"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0.5", "--delta", "-1"], "delta"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0.5", "--delta", "inf"], "delta"),
    (["--alpha", "0.1", "--beta", "2", "--rho", "0.5", "--format", "xml"], "format"),
    (["--alpha-grid", "0", "1", "0", "--beta", "2", "--rho", "0.5"], "NUM"),
    (["--beta", "2", "--rho", "0.5"], "alpha"),
])
def test_bad_input_exits_nonzero_naming_the_parameter(args, needle, capsys):
    code, _, err = run(["bsr", "theory", "--quiet"] + args, capsys)
    assert code == 2
    assert needle in err and "must" in err or "give" in err


def test_installed_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "symtheory.cli", "bsr", "theory", "--alpha", "0.2",
                          "--beta", "1", "--rho", "0.2", "--quiet"], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[0].startswith("alpha,")


# ------------------------------------------------------------------ conventions
def test_version(capsys):
    import symtheory

    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"symtheory {symtheory.__version__}"


@pytest.mark.parametrize("argv,verbose", [
    (["-v", "bsr", "mnne-threshold", "--beta", "2", "--rho", "0.3"], True),
    (["bsr", "-v", "mnne-threshold", "--beta", "2", "--rho", "0.3"], True),
    (["bsr", "mnne-threshold", "--beta", "2", "--rho", "0.3", "--verbose"], True),
    (["smi", "error", "--overlap", "0.5", "-v"], True),
    (["cache", "info", "-v"], True),
    (["bsr", "mnne-threshold", "--beta", "2", "--rho", "0.3"], False),
])
def test_verbose_before_or_after_the_subcommand(argv, verbose):
    from symtheory.cli import build_parser

    assert build_parser().parse_args(argv).verbose is verbose


def _subcommands(parser, path=()):
    import argparse

    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                yield from _subcommands(child, path + (name,))


def test_every_option_has_help_and_every_task_a_description():
    from symtheory.cli import build_parser

    missing = []
    for path, p in _subcommands(build_parser()):
        assert p.format_help()           # renders ('%' in a help text would raise here)
        if path[:1] == ("cache",):       # the cache subcommand belongs to the cache module
            continue
        for a in p._actions:
            if not a.help or not a.help.strip():
                missing.append(f"{' '.join(path)} {a.option_strings or a.dest}")
        if len(path) == 2:
            assert "Columns" in p.description and "alpha = n/" in p.description, path
    assert not missing, missing


def test_building_the_parser_imports_no_numerics():
    code = ("import sys, io, contextlib; from symtheory.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    codes = [main(['--help']), main(['bsr', 'theory', '--help']), "
            "main(['smi', 'se', '--help'])]\n"
            "print(codes, [m for m in ('numpy', 'sympy', 'numba', 'scipy', 'matplotlib') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[0, 0, 0] []", out.stdout + out.stderr


def test_bsr_help_states_the_normalization(capsys):
    code, out, _ = run(["bsr", "theory", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    assert "rho = r/d at every beta" in text and "alpha = n/(dL)" in text
    code, out, _ = run(["smi", "gamp", "--help"], capsys)
    text = " ".join(out.split())
    assert "alpha = n/d" in text and "weight t of the previous iterate" in text
    assert "--damping DAMPING damping: weight t of the previous iterate" in text and "[0, 1)" in text
    assert "--inv-temp" in text and "--beta" not in text


def _generic(column):
    """Q12 -> Qab, Q11_stderr -> Qaa_stderr, cosine1 -> cosine a, normalized_overlap1 ->
    normalized_overlap a: as the help
    names them."""
    import re

    column = re.sub(r"^([QMV])(\d)(\d)", lambda m: m[1] + ("aa" if m[2] == m[3] else "ab"), column)
    return re.sub(r"^(cosine|normalized_overlap)\d$", r"\1 a", column)


def assert_columns_described(argv, header):
    from symtheory.cli import build_parser

    parser = dict(_subcommands(build_parser()))[tuple(argv[:2])]
    text = " ".join(parser.description.split())
    missing = [c for c in header if _generic(c) not in text]
    assert not missing, f"columns not described in --help: {missing}"


@pytest.mark.parametrize("argv", [
    ["bsr", "theory", "--alpha", "0.3", "--beta", "2", "--rho", "0.5", "--quiet"],
    ["bsr", "mnne-threshold", "--beta", "2", "--rho", "0.3"],
    ["smi", "error", "--model", "outer-product", "--overlap", "0.5", "--samples", "1000"],
    pytest.param(["smi", "se", "--model", "outer-product", "--seq-len", "1", "--alpha", "0.5",
                  "--samples", "500", "--error-samples", "500", "--quiet"],
                 marks=pytest.mark.slow),
    pytest.param(["smi", "gamp", "--model", "outer-product", "--d", "50", "--alpha", "3",
                  "--max-iter", "3", "--quiet"], marks=pytest.mark.slow),
    pytest.param(["bsr", "gamp", "--d", "20", "--beta", "1", "--rho", "0.5", "--alpha", "0.3",
                  "--max-iter", "5", "--quiet"], marks=pytest.mark.slow),
    pytest.param(["bsr", "gd", "--d", "10", "--beta", "1", "--rho", "0.5", "--alpha", "0.5",
                  "--steps", "10", "--runs", "2", "--quiet"], marks=pytest.mark.slow),
])
def test_help_lists_every_output_column(argv, capsys):
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert_columns_described(argv, out.splitlines()[0].split(","))


def test_damping_zero_is_the_engines_undamped_run(capsys):
    """--damping 0 (weight of the previous iterate) must be the engine's default run."""
    from symtheory.core.quadrature import TensorRule
    from symtheory.glm.gamp.tokens import gamp_tokens
    from symtheory.smi import outer_product
    from symtheory.smi.data import generate

    code, out, err = run(["smi", "gamp", "--model", "outer-product", "--d", "100", "--alpha", "3",
                          "--max-iter", "5", "--damping", "0", "--quiet"], capsys)
    assert code == 0, err
    model = outer_product(2)
    data = generate(model, 100, 3.0, seed=0)
    channel = model.channel(None, TensorRule("gauss-hermite", 30, 6.0))   # the CLI's default
    res = gamp_tokens(data.X, data.y, channel, max_iter=5, seed=2, init_scale=0.1,
                      truth=data.W)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert not res.diverged and len(rows) == 6
    assert [float(r["cosine1"]) for r in rows] == [float(t["cosine"][0]) for t in res.trace]


# ------------------------------------------------------------------ model files
def test_model_file_example_is_phase_retrieval(tmp_path, capsys):
    """The --help example declares y = z^2: the same errors as outer_product(1), through
    `model` and through `build_model()`; the example text is what --help shows."""
    from symtheory.smi.model_file import EXAMPLE

    code, out, _ = run(["smi", "error", "--help"], capsys)
    assert EXAMPLE.strip() in out
    (tmp_path / "pr.py").write_text(EXAMPLE)
    body = "".join("    " + line + "\n" for line in EXAMPLE.splitlines())
    (tmp_path / "pr_factory.py").write_text(f"def build_model():\n{body}    return model\n")
    common = ["--overlap", "0.5", "--samples", "20000", "--seed", "3"]
    rows = []
    for model in (["--model-file", str(tmp_path / "pr.py")],
                  ["--model-file", str(tmp_path / "pr_factory.py")],
                  ["--model", "outer-product", "--seq-len", "1"]):
        code, out, err = run(["smi", "error", *model, *common], capsys)
        assert code == 0, err
        rows.append(next(csv.DictReader(io.StringIO(out))))
    ref = float(rows[2]["error"])
    assert 0 < ref < 3       # E y^2 = 3 bounds the error of y = z^2 (a finite, sane value)
    for r in rows[:2]:
        # same samples and the same link: equal up to the rounding of generated code
        assert float(r["error"]) == pytest.approx(ref, rel=1e-10)
        assert float(r["stderr"]) == pytest.approx(float(rows[2]["stderr"]), rel=1e-10)


def test_linear_tokens_without_noise_says_so(capsys):
    code, _, err = run(["smi", "se", "--model", "linear-tokens", "--alpha", "0.5"], capsys)
    assert code == 2 and "--noise must be given, in (0, inf)" in err


def test_inv_temp_reaches_the_model():
    from symtheory.cli import build_parser
    from symtheory.smi.cli import build_model

    args = build_parser().parse_args(["smi", "error", "--model", "linear-attention", "--depth",
                                      "1", "--inv-temp", "2.5", "--overlap", "0.5"])
    model = build_model(args)
    assert sorted(float(v) for v in model.params.values()) == [1.0, 2.5]   # skip c, inv_temp


# ------------------------------------------------------------------ output
def test_one_point_plot_draws_a_marker(tmp_path, capsys):
    """A single alpha must not give an empty frame: the point is drawn inside the axes."""
    import numpy as np

    from symtheory.bsr.plots import bo_curve_figure
    from symtheory.core.table import Table

    code, _, err = run(["bsr", "theory", "--alpha", "0.3", "--beta", "2", "--rho", "0.5", "--quiet",
                        "--plot", "--out", str(tmp_path)], capsys)
    assert code == 0 and (tmp_path / "bsr_bo_beta2_rho0.5_delta0.png").exists()
    table = Table({"alpha": [0.3], "mmse": [0.59], "ridge_mse": [0.7], "alpha_pr": [0.625]},
                  {"beta": 2.0, "rho": 0.5, "delta": 0.0})
    fig = bo_curve_figure(table)
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[::-1, :, :3].astype(float) / 255  # y up
    ax = fig.axes[0]
    a, leg = ax.get_window_extent(), ax.get_legend().get_window_extent()
    yy, xx = np.mgrid[:img.shape[0], :img.shape[1]]
    inside = ((xx > a.x0) & (xx < a.x1) & (yy > a.y0) & (yy < a.y1)
              & ~((xx >= leg.x0) & (xx <= leg.x1) & (yy >= leg.y0) & (yy <= leg.y1)))
    c0 = np.array([0x1F, 0x77, 0xB4]) / 255            # the mmse curve's colour
    blue = np.all(np.abs(img - c0) < 0.05, axis=2) & inside
    assert blue.sum() > 20, "the single point is not drawn"


def test_plot_without_out_goes_to_the_current_folder_and_says_where(tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["bsr", "theory", "--alpha", "0.3", "0.5", "--beta", "2", "--rho", "0.5",
                          "--quiet", "--plot"], capsys)
    png = tmp_path / "bsr_bo_beta2_rho0.5_delta0.png"
    assert code == 0 and out.startswith("alpha,")          # the table still goes to stdout
    assert f"wrote {png.resolve()}" in err and png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == [png.name]


def test_repeated_warnings_are_summarized_with_a_count():
    import warnings

    from symtheory.core.cli_common import summarized_warnings

    class SpectralLikeWarning(UserWarning):
        pass

    stream = io.StringIO()
    with summarized_warnings(stream):
        for i in range(18):
            warnings.warn(f"integral not converged at point {i}", SpectralLikeWarning)
        warnings.warn("once", RuntimeWarning)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert "point 0" in lines[0] and "once" in lines[1]
    assert "SpectralLikeWarning issued 18 times" in lines[2]


def test_smi_se_sampling_designs_agree_and_are_recorded(tmp_path, capsys):
    """--sampling rqmc (default) and monte-carlo: the same fixed point within their
    stated errors (5 combined standard errors), and the design is in the parameters."""
    rows = {}
    for sampling in ("rqmc", "monte-carlo"):
        out = tmp_path / sampling
        code, _, err = run(["smi", "se", "--model", "outer-product", "--seq-len", "1",
                            "--alpha", "0.8", "--samples", "1024", "--no-errors", "--quiet",
                            "--sampling", sampling, "--out", str(out)], capsys)
        assert code == 0, err
        [csv_path] = out.glob("*.csv")
        rows[sampling] = next(csv.DictReader(csv_path.open()))
        params = json.loads(next(out.glob("*.params.json")).read_text())
        assert params["sampling"] == sampling
        assert rows[sampling]["converged"] == "true"
        # the solver's own report of the point (stages, tolerance, error notes) is kept
        [report] = params["solver_reports"]
        assert report["alpha"] == 0.8 and report["report"].startswith("converged in ")
    a, b = rows["rqmc"], rows["monte-carlo"]
    diff = abs(float(a["Q11"]) - float(b["Q11"]))
    assert diff <= 5 * math.hypot(float(a["Q11_stderr"]), float(b["Q11_stderr"])), (a, b)
    assert 0.0 < float(a["Q11_stderr"])


# ------------------------------------------------------------------ one schema
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


PAPERS = {"bsr": "arXiv:2410.18858", "smi": "arXiv:2502.00901", "aim": "arXiv:2506.01582"}


def test_every_family_help_names_its_paper():
    from symtheory.cli import build_parser

    for path, p in _subcommands(build_parser()):
        if path[:1] and path[0] in PAPERS:
            assert PAPERS[path[0]] in " ".join(p.format_help().split()), path


def test_options_page_is_up_to_date():
    """docs/reference/options.md is generated from the schemas; regenerate it with
    `symtheory docs options > docs/reference/options.md`."""
    from symtheory.cli import options_page

    page = (ROOT / "docs" / "reference" / "options.md").read_text()
    assert page == options_page(), "regenerate: symtheory docs options > docs/reference/options.md"


def test_options_page_states_ranges_and_reasons():
    from symtheory.cli import options_page

    page = options_page()
    for needle in ("## `symtheory smi se`", "## `smi.se_point`", "an integer in [1, 6]",
                   "a real in (0, 1e+12]", "Grids: `--X-grid START STOP NUM`", "1 to 10000"):
        assert needle in page, needle


def _range(p):
    return (p.kind, p.low, p.high, p.low_open, p.high_open, p.allow_inf)


def _schema_options():
    """``{(family, task): {dest: Param}}`` of the options generated from schemas."""
    from symtheory.cli import build_parser

    out = {}
    for path, p in _subcommands(build_parser()):
        if len(path) == 2:
            out[path] = {a.dest: a.param for a in p._actions
                         if getattr(a, "param", None) is not None and not a.dest.endswith("_grid")}
    return out


#: command line -> the sweep computation running the same task
SAME_TASK = {("smi", "se"): "smi.se_point", ("smi", "gamp"): "smi.gamp", ("smi", "sgd"): "smi.sgd",
             ("aim", "theory"): "aim.theory_point", ("aim", "gamp"): "aim.gamp",
             ("aim", "gd"): "aim.gd", ("bsr", "theory"): "bsr.theory_point",
             ("bsr", "gamp"): "bsr.gamp", ("bsr", "gd"): "bsr.gd", ("bsr", "mnne"): "bsr.mnne",
             ("bsr", "mnne-threshold"): "bsr.thresholds"}
#: where one name has two ranges in one family, and why (each a separate declaration)
TWO_RANGES = {
    ("bsr", "alpha"): "theory: alpha = 0 allowed; a simulation needs n >= 1",
    ("bsr", "beta"): "theory: the beta -> inf limit; a simulation needs finite L",
    ("bsr", "rho"): "mnne-threshold: rank 0 allowed (both thresholds 0)",
    ("aim", "alpha"): "theory: alpha = 0 allowed; a simulation needs n >= 1",
    ("aim", "rho"): "theory/threshold: the limits rho = 0 and inf (closed forms); "
                    "simulations and sweeps need 0 < rho < inf",
}


def test_a_task_parameter_has_the_range_of_its_sweep_computation():
    """CLI option and sweep parameter of the same task are one schema entry: same range."""
    from symtheory.sweep.registry import discover

    comps, options = discover(), _schema_options()
    compared = 0
    for cmd, name in SAME_TASK.items():
        for dest, param in options[cmd].items():
            if dest in comps[name].params and (cmd[0], dest) not in TWO_RANGES:
                assert _range(param) == _range(comps[name].params[dest]), (cmd, dest)
                compared += 1
    assert compared >= 60


def test_one_range_per_option_name_within_a_family():
    seen = {}
    for (family, task), params in _schema_options().items():
        for dest, param in params.items():
            if (family, dest) in TWO_RANGES or dest == "link":   # link: gd offers a subset
                continue
            key = (family, dest)
            if key in seen:
                assert _range(param) == _range(seen[key][1]), (key, seen[key][0], task)
            else:
                seen[key] = (task, param)
    assert {("smi", "seq_len"), ("smi", "depth"), ("smi", "quadrature_nodes")} <= set(seen)


@pytest.mark.parametrize("name,shape", [
    ("attention", {"depth": 1, "seq_len": 2}), ("attention", {"depth": 2, "seq_len": 3}),
    ("linear-attention", {"depth": 2, "seq_len": 3}), ("outer-product", {"seq_len": 3}),
    ("linear-tokens", {"seq_len": 2}), ("phase-retrieval", {}), ("sign-product", {}),
])
def test_registry_knows_sizes_and_reductions_without_building(name, shape):
    """What the registry states before any SymPy work is what the built model has."""
    from symtheory.smi import registry
    from symtheory.smi.params import SHAPE_DEFAULTS

    values = {k: shape.get(k, SHAPE_DEFAULTS[k]) for k in registry.MODELS[name].shape}
    model = registry.build_model(name, values)
    v = dict(SHAPE_DEFAULTS, **values)
    assert registry.MODELS[name].sizes(v) == (model.P, model.M, model.link.rows * model.link.cols)
    assert registry.MODELS[name].reduced(v) == (model.reduction is not None)


def test_aim_links_are_declared_once():
    from symtheory.aim import data, gd, gd_cli, model, registry
    from symtheory.aim import params as P

    assert data.LINKS is registry.LINKS and gd.TRAINABLE_LINKS is registry.TRAINABLE_LINKS
    assert gd_cli.LINKS is registry.TRAINABLE_LINKS and P.LINK.choices == registry.LINKS
    assert set(model.LINKS) == set(registry.SYMBOLIC_LINKS)


def test_smi_models_are_declared_once():
    from symtheory.smi import params as P
    from symtheory.smi import registry, tasks

    assert tasks.MODEL_PARAMS["model"].choices == registry.names("se")
    assert P.THRESHOLD["model"].choices == registry.names("threshold")
    assert set(registry.names("threshold")) == {"attention", "outer-product", "phase-retrieval",
                                               "sign-product"}


# ------------------------------------------------------------------ aim rho = inf
def test_aim_rho_infinity_is_the_closed_form_line(capsys):
    """aim.md 4.2: noiseless mmse = 1 - alpha (T^2 + T - 2) on the rho = inf line; q
    diverges and is not printed; the softmax test error is refused, the identity's exact."""
    code, out, _ = run(["aim", "theory", "--rho", "inf", "--seq-len", "2", "--alpha", "0.05",
                        "0.3", "--no-gen-error"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert "q" not in rows[0] and "converged" not in rows[0]
    assert float(rows[0]["mmse"]) == pytest.approx(1 - 0.05 * 4, abs=1e-15)
    assert float(rows[1]["mmse"]) == 0.0
    assert rows[0]["method"] == "closed form (aim.md 4.2)"
    code, out, _ = run(["aim", "theory", "--rho", "inf", "--seq-len", "1", "--link", "identity",
                        "--alpha", "0.1"], capsys)
    assert code == 0
    row = next(csv.DictReader(io.StringIO(out)))
    assert math.isfinite(float(row["gen_error"])) and float(row["gen_error_stderr"]) == 0.0
    assert_columns_described(["aim", "theory"], list(row))
