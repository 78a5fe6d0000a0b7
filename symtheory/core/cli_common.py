"""Option parsing, validation and output shared by every family's subcommands.

The options of a task are generated from its schema (:func:`add_params`; the schema is a
``{name: Param}`` of :mod:`symtheory.core.tasks`), so an option has the range, default
and meaning of its parameter, stated in its help text and checked while the command line
is parsed.  One meaning per option name across the package:

* ``--alpha A [A ...]`` / ``--alpha-grid START STOP NUM`` -- the sample ratios (what ``n``
  is divided by is the family's convention, stated in each subcommand's help);
  ``NUM <= MAX_GRID`` (any ``--X-grid``, and a sweep spec's grids);
* ``--format csv|json``, ``--out DIR`` (table + ``<stem>.params.json`` + optional PNG,
  written only after everything succeeded), ``--plot``, ``--quiet`` (no progress bars);
* ``--seed`` an integer >= 0; ``--damping`` the weight of the previous iterate in
  ``[0, 1)``, 0 = undamped (:data:`symtheory.core.tasks.SEED`, ``DAMPING``);
* ``-v/--verbose`` before or after the subcommand.

Bad input is refused before anything is computed, with ``<option> must be <valid
values>, got <value>`` (and the reason for the range where one is declared).
:func:`options_markdown` renders the option tables of ``docs/reference/options.md``.
This module imports nothing heavy: building the parser must stay instant.
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
from .tasks import GRID_NUM, MAX_GRID, Param
from .validate import ParameterError

FORMATS = ("csv", "json")
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
    """argparse ``type=`` from a check raising :class:`ParameterError` (its message
    becomes the error)."""
    def convert(text):
        try:
            return check(text)
        except ParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = metavar
    return convert


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


def option_name(name: str) -> str:
    """The command-line spelling of a schema parameter: ``seq_len`` -> ``--seq-len``."""
    return "--" + name.replace("_", "-")


def param_type(option: str, param: Param):
    """``type=`` checking a word against ``param`` (the message names ``option``)."""
    return converter(lambda text: param.check(option, text), param.kind)


def _help(param: Param, shown_default) -> str:
    """``<doc>, <valid values> [(why)] (default X)``: the range is always stated."""
    text = param.doc
    if param.kind != "flag":
        text = f"{text}, {param.describe()}" if text else param.describe()
        if param.why:
            text += f" ({param.why})"
        if shown_default is not None:
            text += f" (default {shown_default})"
    return text.replace("%", "%%")


class _Grid(argparse.Action):
    """``START STOP NUM`` -> checked triple; ``NUM`` is capped at :data:`MAX_GRID` before
    anything is allocated; START and STOP obey the parameter's range."""

    def __init__(self, *args, param=None, **kwargs):
        self.param = param
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, checked_grid(self.option_strings[0], self.param, *values))
        except ParameterError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


def checked_grid(option: str, param: Param, start, stop, num):
    """``(start, stop, num)`` of ``option START STOP NUM``: both ends in the range of
    ``param``, ``1 <= num <= MAX_GRID``."""
    return (param.check(f"{option} START", start), param.check(f"{option} STOP", stop),
            GRID_NUM.check(f"{option} NUM", num))


def add_params(p, params: dict, *, many=(), grid=(), defaults=None, unset=(), required=(),
               group=None) -> None:
    """Command-line options generated from a task's schema ``{name: Param}``.

    Each parameter ``name`` becomes ``--name`` (underscores as dashes), typed and checked
    by its :class:`Param` while parsing, with a help text stating the valid range and
    the default; a flag defaulting to true becomes ``--no-name``.  ``many``: names that
    take several values; ``grid``: names that also get ``--name-grid START STOP NUM``
    (exclusive with ``--name``); ``defaults``: the command's own defaults (a default
    belongs to the task); ``unset``: names parsed as ``None`` unless given (the command
    must tell a given option from its default), the help still stating the default;
    ``required``: names the command requires although the schema has a default.  The
    generated actions carry their ``param`` (the docs tables read it)."""
    defaults = dict(defaults or {})
    for name, param in params.items():
        opt = option_name(name)
        default = defaults.get(name, param.default)
        must = name in required or (param.required and name not in defaults
                                    and name not in unset)
        shown = None if must else param.show_default(default)
        parsed_default = None if (must or name in unset) else default
        target = group or p
        if param.kind == "flag":
            if default is True:
                action = target.add_argument(f"--no-{opt[2:]}", dest=name, action="store_false",
                                             help=f"do not {param.doc}".replace("%", "%%"))
            else:
                action = target.add_argument(opt, dest=name, action="store_true",
                                             help=param.doc.replace("%", "%%"))
            action.param = param
            continue
        kwargs = dict(dest=name, default=parsed_default, help=_help(param, shown))
        if param.metavar:
            kwargs["metavar"] = param.metavar
        if param.kind == "choice":
            kwargs["choices"] = param.choices
        else:
            kwargs["type"] = param_type(opt, param)
        if name in many:
            kwargs["nargs"] = "+"
        if name in grid:
            g = target.add_mutually_exclusive_group(required=must)
            action = g.add_argument(opt, **kwargs)
            grid_action = g.add_argument(
                f"{opt}-grid", nargs=3, action=_Grid, param=param, dest=f"{name}_grid",
                metavar=("START", "STOP", "NUM"),
                help=f"NUM evenly spaced values of {opt} from START to STOP (each "
                     f"{param.describe()}; 1 <= NUM <= {MAX_GRID})".replace("%", "%%"))
            grid_action.param = param
        else:
            action = target.add_argument(opt, required=must, **kwargs)
        action.param = param
        action.shown_default = "required" if must else shown


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
def grid_values(args, name: str = "alpha") -> list:
    """The values of ``--name`` (one or several) or ``--name-grid START STOP NUM`` (the
    points of ``numpy.linspace``), as parsed and checked by :func:`add_params`."""
    values, grid = getattr(args, name, None), getattr(args, f"{name}_grid", None)
    opt = option_name(name)
    if values is not None and grid is not None:
        raise ParameterError(f"give either {opt} or {opt}-grid, not both")
    if values is not None:
        return list(values) if isinstance(values, (list, tuple)) else [values]
    if grid is not None:
        start, stop, n = grid
        if n == 1:
            return [start]
        step = (stop - start) / (n - 1)
        return [start + i * step for i in range(n - 1)] + [stop]
    raise ParameterError(f"give {opt} V [V ...] or {opt}-grid START STOP NUM")


def alphas_from_args(args):
    """The sample ratios of ``--alpha`` or ``--alpha-grid`` (:func:`grid_values`)."""
    return grid_values(args, "alpha")


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


# ----------------------------------------------------------------------- docs tables
def _cell(text) -> str:
    return " ".join(str(text).replace("%%", "%").replace("|", "\\|").split())


def _subcommands(parser, path=()):
    """``(path, parser)`` of every leaf subcommand below ``parser``."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for a in subs:
        for name, child in a.choices.items():
            yield from _subcommands(child, path + (name,))


def options_markdown(parser, prog: str = "symtheory") -> list:
    """Lines of a markdown page: one table of options per subcommand of ``parser``.

    Options generated from a task's schema (:func:`add_params`) show the valid values and
    the reason for the range from their :class:`Param`; the others (output, files) show
    their help text."""
    lines = []
    for path, p in _subcommands(parser):
        lines += ["", f"## `{prog} {' '.join(path)}`", "",
                  "| option | valid values | default | meaning |", "| --- | --- | --- | --- |"]
        for a in p._actions:
            if isinstance(a, argparse._HelpAction) or "--verbose" in a.option_strings:
                continue
            names = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest}`"
            param = getattr(a, "param", None)
            if param is not None and not isinstance(a, _Grid) and param.kind != "flag":
                values = param.describe() + (f" ({param.why})" if param.why else "")
                if a.nargs == "+":
                    values = "one or more: " + values
                default = "required" if a.required else getattr(a, "shown_default", "")
                meaning = param.doc
            elif isinstance(a, _Grid):
                values = f"START, STOP: {param.describe()}; NUM: {GRID_NUM.describe()}"
                default, meaning = "-", a.help
            elif a.nargs == 0:
                values, default, meaning = "flag", "off", a.help
            else:
                values = ("one of " + ", ".join(map(str, a.choices))) if a.choices else \
                    (a.metavar if isinstance(a.metavar, str) else "text")
                default = "required" if a.required else (
                    "none" if a.default is None or a.default is argparse.SUPPRESS else a.default)
                meaning = a.help
            lines.append(f"| {names} | {_cell(values)} | {_cell(default)} | {_cell(meaning)} |")
    return lines
