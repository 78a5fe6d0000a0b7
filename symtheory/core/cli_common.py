"""Option parsing, validation and output shared by every family's subcommands.

One meaning per option name across the package:

* ``--alpha A [A ...]`` / ``--alpha-grid START STOP NUM`` -- the sample ratios (what ``n``
  is divided by is the family's convention, stated in each subcommand's help);
  ``NUM <= MAX_GRID``;
* ``--format csv|json``, ``--out DIR`` (table + ``<stem>.params.json`` + optional PNG,
  written only after everything succeeded), ``--plot``, ``--quiet`` (no progress bars);
* ``--seed`` an integer >= 0; ``--damping`` the weight of the previous iterate in
  ``[0, 1)``, 0 = undamped;
* ``-v/--verbose`` before or after the subcommand.

Every option is checked while the command line is parsed (typed converters built on
:mod:`symtheory.core.validate`), so bad input is refused before anything is computed,
with ``<option> must be in <range>, got <value>``.  This module imports nothing heavy:
building the parser must stay instant.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import textwrap
import warnings
from contextlib import contextmanager
from pathlib import Path

from . import validate
from .validate import ParameterError

FORMATS = ("csv", "json")
#: largest ``NUM`` of ``--alpha-grid`` (refused before anything is allocated)
MAX_GRID = 10_000
WIDTH = 88


# ----------------------------------------------------------------------- parser
class UsageError(Exception):
    """A command-line error found by argparse; ``main`` prints it with the usage."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser
        self.message = message


# argparse takes "-1e-3" or "-inf" for an option flag (its pattern knows only "-1" and
# "-.5"), so "--alpha -1e-3" would fail with "expected one argument" instead of naming
# the range; a number-shaped token is a value.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$",
                              re.IGNORECASE)
_ARG_PREFIX = re.compile(r"^argument (?P<names>[^:]+): (?P<rest>.*)$", re.DOTALL)
_REQUIRED = re.compile(r"^the following arguments are required: (?P<names>.*)$")
_ONE_OF = re.compile(r"^one of the arguments (?P<names>.*) is required$")
_INVALID_CHOICE = re.compile(r"^invalid choice: (?P<got>.*) \(choose from (?P<opts>.*)\)$",
                             re.DOTALL)


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` that raises :class:`UsageError` instead of exiting, keeps
    pre-wrapped descriptions, takes no abbreviated options and reads negative numbers
    as values."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)   # "--de" must not quietly mean --delta
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message):
        raise UsageError(self, _reword(message))


def _reword(message: str) -> str:
    """argparse's messages in the package's wording: ``<option> must ...``."""
    if m := _REQUIRED.match(message):
        return f"{m['names']} must be given (required)"
    if m := _ONE_OF.match(message):
        return f"one of {', '.join(m['names'].split())} must be given"
    if m := _ARG_PREFIX.match(message):
        names, rest = m["names"].split("/"), m["rest"]
        if c := _INVALID_CHOICE.match(rest):
            return f"{names[-1]} must be one of {c['opts'].replace(chr(39), '')}, got {c['got']}"
        if any(rest.startswith(n + " ") for n in names):
            return rest                  # our converters already name the option
    return message


def describe(*paragraphs: str, example: str | None = None) -> str:
    """A subcommand description: wrapped paragraphs, then a verbatim example."""
    text = "\n\n".join(textwrap.fill(" ".join(p.split()), WIDTH) for p in paragraphs)
    if example:
        text += "\n\n" + textwrap.dedent(example).strip("\n")
    return text


def converter(check, metavar: str):
    """argparse ``type=`` from a :mod:`validate` check (its message becomes the error)."""
    def convert(text):
        try:
            return check(text)
        except ParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = metavar
    return convert


def real_arg(option: str, **bounds):
    """``type=`` for a real option, ``bounds`` as in :func:`validate.real`."""
    return converter(lambda t: validate.real(option, t, **bounds), "real")


def int_arg(option: str, *, low=None, high=None):
    """``type=`` for an integer option (``1e3`` accepted), inside ``[low, high]``."""
    return converter(lambda t: validate.integer(option, t, low=low, high=high), "integer")


def num(name):
    """A plain real-number converter (no range); prefer :func:`real_arg`."""
    return converter(lambda t: validate.real(name, t, allow_inf=True), "real")


def out_dir(option: str = "--out"):
    """``type=`` for an output folder: it, or its nearest existing ancestor, must be a
    writable folder (refused at parse time, so nothing is computed for nothing)."""
    def check(text):
        if not text.strip():
            raise ParameterError(f"{option} must be a folder path, got {text!r}")
        path = Path(text).expanduser()
        probe = path
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            raise ParameterError(f"{option} must be a writable folder, got {text!r} "
                                 f"({probe} is not a folder)")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise ParameterError(f"{option} must be a writable folder, got {text!r} "
                                 f"({probe} is not writable)")
        return path
    return converter(check, "folder")


class _AlphaGrid(argparse.Action):
    """``START STOP NUM`` -> checked triple; NUM is capped before any allocation."""

    def __init__(self, *args, positive=False, **kwargs):
        self.positive = positive
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, _checked_grid(*values, positive=self.positive))
        except ParameterError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


def _checked_grid(start, stop, n, *, positive=False):
    bounds = dict(low=0.0, low_open=positive)
    return (validate.real("--alpha-grid START", start, **bounds),
            validate.real("--alpha-grid STOP", stop, **bounds),
            validate.integer("--alpha-grid NUM", n, low=1, high=MAX_GRID))


def add_alpha(p, *, what: str, positive: bool = False, many: bool = True,
              required: bool = True) -> None:
    """``--alpha`` (one or several) or ``--alpha-grid START STOP NUM`` (exclusive)."""
    bounds = dict(low=0.0, low_open=positive)
    rng = validate.interval(**bounds)
    if not many:
        p.add_argument("--alpha", type=real_arg("--alpha", **bounds), required=required,
                       metavar="A", help=f"sample ratio alpha = {what}, in {rng}")
        return
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--alpha", nargs="+", type=real_arg("--alpha", **bounds), metavar="A",
                   help=f"sample ratios alpha = {what}, each in {rng}")
    g.add_argument("--alpha-grid", nargs=3, action=_AlphaGrid, positive=positive,
                   metavar=("START", "STOP", "NUM"),
                   help=f"NUM evenly spaced ratios from START to STOP (both in {rng}, "
                        f"1 <= NUM <= {MAX_GRID})")


def add_seed(p, help: str = "random seed, an integer >= 0", default: int = 0) -> None:
    p.add_argument("--seed", type=int_arg("--seed", low=0), default=default,
                   help=f"{help} (default {default})")


def add_damping(p, *, default: float, what: str) -> None:
    """``--damping``: the weight of the previous iterate, ``new = (1-t) F(old) + t old``."""
    p.add_argument("--damping", type=real_arg("--damping", low=0.0, high=1.0, high_open=True),
                   default=default,
                   help=f"damping of {what}: weight of the previous iterate in [0, 1), "
                        f"0 = undamped (default {default:g})")


def add_output(p, *, plot: str | None = None, quiet: bool = True) -> None:
    """``--format``, ``--out``, ``--quiet`` and (if ``plot`` describes one) ``--plot``."""
    p.add_argument("--format", choices=FORMATS, default="csv",
                   help="table format: csv (default) or json")
    p.add_argument("--out", type=out_dir("--out"), metavar="DIR",
                   help="write the table, its parameters (<stem>.params.json) and the plot "
                        "into folder DIR (created if needed) instead of printing the table")
    if quiet:
        p.add_argument("--quiet", action="store_true", help="no progress bars or progress lines")
    if plot:
        p.add_argument("--plot", action="store_true",
                       help=f"also write a PNG ({plot}) into --out, or into the current "
                            "folder without --out (the path is printed)")


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` on ``parser`` and on every subcommand below it (so it may be
    given before or after the subcommand)."""
    def walk(p, top):
        if not any("--verbose" in a.option_strings for a in p._actions):
            # below the top, SUPPRESS keeps a subcommand from resetting a -v given earlier
            p.add_argument("-v", "--verbose", action="store_true",
                           default=False if top else argparse.SUPPRESS,
                           help="log kernel compilation/loading and derivations; show the "
                                "traceback of an internal error")
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for child in a.choices.values():
                    walk(child, False)
    walk(parser, True)


# ----------------------------------------------------------------------- values
def alphas_from_args(args):
    """The sample ratios of ``--alpha`` or ``--alpha-grid`` (same points as
    ``numpy.linspace``), checked again for callers that built their own options."""
    alpha, grid = getattr(args, "alpha", None), getattr(args, "alpha_grid", None)
    if alpha is not None and grid is not None:
        raise ParameterError("give either --alpha or --alpha-grid, not both")
    if alpha is not None:
        alpha = alpha if isinstance(alpha, (list, tuple)) else [alpha]
        return [validate.real("--alpha", a, low=0) for a in alpha]
    if grid is not None:
        start, stop, n = _checked_grid(*grid)
        if n == 1:
            return [start]
        step = (stop - start) / (n - 1)
        return [start + i * step for i in range(n - 1)] + [stop]
    raise ParameterError("give the sample ratios with --alpha A [A ...] or --alpha-grid START STOP NUM")


def check_format(args):
    return validate.choice("--format", args.format, FORMATS)


# ----------------------------------------------------------------------- output
def _write_all(folder: Path, writers: dict, where: str = "--out") -> list:
    """Run ``writers[name](tmp_path)`` for every file, then rename all into ``folder``:
    on any error nothing is left behind (temporary files and created folders removed);
    an ``OSError`` becomes a :class:`ParameterError` naming ``where``."""
    import tempfile

    created = []
    probe = folder
    while not probe.exists():
        created.append(probe)
        probe = probe.parent
    temps = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, write in writers.items():
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=Path(name).suffix)
            os.close(fd)
            os.chmod(tmp, 0o666 & ~umask)    # mkstemp's 0600 -> what open() would give
            temps.append((Path(tmp), folder / name))
            write(Path(tmp))
        for tmp, final in temps:
            os.replace(tmp, final)
    except BaseException as exc:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        for d in created:                # the folders this call made, deepest first
            try:
                d.rmdir()
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise ParameterError(f"{where} {folder} is not writable: {exc.strerror or exc}") from None
        raise
    return [final.resolve() for _, final in temps]


def emit(table, args, stem: str, plot=None) -> int:
    """Print the table, or write it (+ parameters, + plot) into ``--out``.

    ``plot(table, path)`` draws the PNG when ``--plot`` is given; without ``--out`` the
    table goes to stdout and the PNG into the current folder.  Every path written is
    printed on stderr.
    """
    fmt = check_format(args)
    want_plot = plot is not None and getattr(args, "plot", False)
    out = getattr(args, "out", None)
    table.meta.setdefault("command", getattr(args, "command_line", None)
                          or shlex.join(["symtheory"] + sys.argv[1:]))
    writers = {}
    if out is None:
        sys.stdout.write(table.to_csv() if fmt == "csv" else table.to_json())
        folder, where = Path.cwd(), "the current folder (no --out given)"
    else:
        folder, where = Path(out), "--out"
        writers[f"{stem}.{fmt}"] = table.to_csv if fmt == "csv" else table.to_json
        writers[f"{stem}.params.json"] = table.write_params
    if want_plot:
        writers[f"{stem}.png"] = lambda path: plot(table, path)
    if writers:
        for path in _write_all(folder, writers, where):
            print(f"wrote {path}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------- warnings
@contextmanager
def summarized_warnings(stream=None):
    """Show each warning once per place it is issued from; at the end, one line per
    place that warned again, with the count (a sweep can warn at every point)."""
    stream = stream or sys.stderr
    counts = {}

    def show(message, category, filename, lineno, file=None, line=None):
        key = (category, filename, lineno)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] == 1:
            print(f"symtheory: warning: {category.__name__}: {message}", file=stream)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            yield counts
        finally:
            for (category, filename, lineno), n in counts.items():
                if n > 1:
                    print(f"symtheory: warning: {category.__name__} issued {n} times in all "
                          f"({Path(filename).name}:{lineno}; the first is shown above)",
                          file=stream)


# ----------------------------------------------------------------------- model files
def load_declaration(path, *, option: str, name: str, factory: str, expected: type):
    """Run the Python file ``path`` and return its ``name`` object, or the result of
    its ``factory()`` function, checked to be an ``expected`` instance.

    Every failure (missing file, syntax error, exception inside the file, neither or
    both names defined, wrong type) is a :class:`ParameterError` naming the file.
    """
    import runpy

    p = Path(path).expanduser()
    where = f"{option} {path}"
    if not p.is_file():
        raise ParameterError(f"{where}: no such file (give a Python file defining `{name}` "
                             f"or `{factory}()`)")
    try:
        ns = runpy.run_path(str(p), run_name="__symtheory_declaration__")
    except SyntaxError as exc:
        raise ParameterError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:   # user code (even sys.exit()): report, do not crash
        raise ParameterError(f"{where}: running it raised {type(exc).__name__}: {exc}") from None
    has_obj, has_factory = name in ns, factory in ns
    if has_obj and has_factory:
        raise ParameterError(f"{where} defines both `{name}` and `{factory}`; keep one")
    if not (has_obj or has_factory):
        raise ParameterError(f"{where} must define `{name}` (a {expected.__name__}) or a "
                             f"function `{factory}()` returning one")
    if has_obj:
        obj = ns[name]
    else:
        if not callable(ns[factory]):
            raise ParameterError(f"{where}: `{factory}` must be a function")
        try:
            obj = ns[factory]()
        except Exception as exc:
            raise ParameterError(f"{where}: {factory}() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, expected):
        what = f"`{name}`" if has_obj else f"`{factory}()`"
        raise ParameterError(f"{where}: {what} must be a {expected.__name__}, got "
                             f"{type(obj).__name__}")
    return obj
