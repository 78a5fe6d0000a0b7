"""Option parsing and output shared by every family's subcommands.

Conventions (one meaning per option name across the package): ``--alpha A [A ...]`` /
``--alpha-grid START STOP NUM`` the sample ratios, ``--format csv|json``, ``--out DIR``
(table + ``<stem>.params.json`` + optional PNG), ``--quiet`` (no progress bars).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from . import validate
from .table import Table
from .validate import ParameterError

FORMATS = ("csv", "json")


def num(name):
    def conv(text):
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
    return conv


def alphas_from_args(args):
    if getattr(args, "alpha", None) is not None and getattr(args, "alpha_grid", None) is not None:
        raise ParameterError("give either --alpha or --alpha-grid, not both")
    if getattr(args, "alpha", None) is not None:
        return [validate.real("alpha", a, low=0) for a in args.alpha]
    if getattr(args, "alpha_grid", None) is not None:
        start, stop, n = args.alpha_grid
        start = validate.real("alpha-grid START", start, low=0)
        stop = validate.real("alpha-grid STOP", stop, low=0)
        n = validate.integer("alpha-grid NUM", float(n) if float(n).is_integer() else n, low=1)
        return list(np.linspace(start, stop, n))
    raise ParameterError("give the sample ratios with --alpha A [A ...] or --alpha-grid START STOP NUM")


def check_format(args):
    if args.format not in FORMATS:
        raise ParameterError(f"format must be one of {', '.join(FORMATS)}, got {args.format!r}")
    return args.format


def emit(table: Table, args, stem: str, plot=None) -> int:
    """Print the table, or write it (+ parameters, + plot) into ``--out``."""
    fmt = check_format(args)
    text = table.to_csv() if fmt == "csv" else table.to_json()
    if getattr(args, "out", None) is None and not getattr(args, "plot", False):
        sys.stdout.write(text)
        return 0
    out = Path(args.out or ".")
    out.mkdir(parents=True, exist_ok=True)
    data_path = out / f"{stem}.{fmt}"
    data_path.write_text(text)
    table.meta["command"] = " ".join(["symtheory"] + sys.argv[1:])
    table.write_params(out / f"{stem}.params.json")
    written = [data_path, out / f"{stem}.params.json"]
    if getattr(args, "plot", False) and plot is not None:
        png = out / f"{stem}.png"
        plot(table, png)
        written.append(png)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    return 0
