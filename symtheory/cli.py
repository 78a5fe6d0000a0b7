"""Command-line interface: ``symtheory <model> <task> ...``.

Examples::

    symtheory bsr theory --alpha-grid 0 1 101 --beta 2 --rho 0.5 --delta 0 --out results/bsr --plot
    symtheory bsr theory --alpha 0.3 --beta inf --rho 0.5 --precision 30
    symtheory cache info
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import warnings
from pathlib import Path

from .core.validate import ParameterError

FORMATS = ("csv", "json")


def _float_arg(name):
    def conv(text):
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
    return conv


def _alphas(args):
    import numpy as np

    from .core import validate

    if args.alpha is not None and args.alpha_grid is not None:
        raise ParameterError("give either --alpha or --alpha-grid, not both")
    if args.alpha is not None:
        return [validate.real("alpha", a, low=0) for a in args.alpha]
    if args.alpha_grid is not None:
        start, stop, num = args.alpha_grid
        start = validate.real("alpha-grid START", start, low=0)
        stop = validate.real("alpha-grid STOP", stop, low=0)
        n = validate.integer("alpha-grid NUM", float(num) if float(num).is_integer() else num, low=1)
        return list(np.linspace(start, stop, n))
    raise ParameterError("give the sample ratios with --alpha A [A ...] or --alpha-grid START STOP NUM")


def _bsr_theory(args) -> int:
    from . import bsr
    from .bsr.theory import check_params

    fmt = args.format
    if fmt not in FORMATS:
        raise ParameterError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    beta, rho, delta = check_params(args.beta, args.rho, args.delta)
    alphas = _alphas(args)
    if args.precision is not None and args.precision < 1:
        raise ParameterError(f"precision must be an integer >= 1 (digits), got {args.precision}")
    table = bsr.bo_curve(alphas, beta, rho, delta, precision=args.precision,
                         progress=not args.quiet and len(alphas) > 1)
    if args.precision is not None:
        # the P-digit strings replace the float columns
        table.columns["mmse"] = table.columns.pop("mmse_str")
        table.columns["q"] = table.columns.pop("q_str")
    text = table.to_csv() if fmt == "csv" else table.to_json()
    if args.out is None and not args.plot:
        sys.stdout.write(text)
        return 0
    out = Path(args.out or ".")
    out.mkdir(parents=True, exist_ok=True)
    b = "inf" if math.isinf(beta) else f"{beta:g}"
    stem = f"bsr_bo_beta{b}_rho{rho:g}_delta{delta:g}"
    data_path = out / f"{stem}.{fmt}"
    data_path.write_text(text)
    table.meta["command"] = " ".join(["symtheory"] + sys.argv[1:])
    table.write_params(out / f"{stem}.params.json")
    written = [data_path, out / f"{stem}.params.json"]
    if args.plot:
        from .bsr.plots import plot_bo_curve

        if args.precision is not None:
            table.columns["mmse"] = [float(v) for v in table.columns["mmse"]]
        png = out / f"{stem}.png"
        plot_bo_curve(table, png)
        written.append(png)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    return 0


def _cache(args) -> int:
    from .core import cache

    if args.action == "clear":
        n = cache.clear_cache()
        print(f"removed {n} files from {cache.cache_dir()}")
    else:
        print(json.dumps(cache.cache_info(), indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="symtheory", description=__doc__.split("\n")[0])
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log kernel compilation/loading and derivations")
    sub = p.add_subparsers(dest="model", required=True)

    bsr = sub.add_parser("bsr", help="bilinear sequence regression (arXiv:2410.18858)")
    bsub = bsr.add_subparsers(dest="task", required=True)
    th = bsub.add_parser(
        "theory", help="Bayes-optimal error curve",
        description=("Bayes-optimal error of BSR, y = Tr[X S*]/sqrt(dL) + sqrt(delta) xi with "
                     "S* = U V^T/sqrt(r): beta = L/d (inf allowed), rho = r/min(d, L), "
                     "alpha = n/(dL).  Column mmse = 1 - q = per-entry error on S* (test error - "
                     "delta); ridge_mse = Bayes-optimal ridge on vectorized tokens; alpha_pr = "
                     "perfect-recovery threshold."))
    g = th.add_mutually_exclusive_group()
    g.add_argument("--alpha", nargs="+", type=_float_arg("alpha"), metavar="A",
                   help="sample ratios n/(dL)")
    g.add_argument("--alpha-grid", nargs=3, type=_float_arg("alpha-grid"),
                   metavar=("START", "STOP", "NUM"), help="NUM evenly spaced ratios")
    th.add_argument("--beta", type=_float_arg("beta"), required=True, help="L/d in (0, inf]")
    th.add_argument("--rho", type=_float_arg("rho"), required=True, help="r/min(d, L) > 0")
    th.add_argument("--delta", type=_float_arg("delta"), default=0.0, help="label noise >= 0")
    th.add_argument("--format", default="csv", help="csv (default) or json")
    th.add_argument("--out", help="folder for the table, its parameters and the plot")
    th.add_argument("--plot", action="store_true", help="write a PNG (BO, ridge, alpha_PR)")
    th.add_argument("--precision", type=int, metavar="DIGITS",
                    help="mmse and q to DIGITS significant digits with mpmath, "
                         "confirmed by a solve at 2*DIGITS")
    th.add_argument("--quiet", action="store_true", help="no progress bar")
    th.set_defaults(func=_bsr_theory)

    c = sub.add_parser("cache", help="the generated-kernel cache")
    c.add_argument("action", choices=("info", "clear"))
    c.set_defaults(func=_cache)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    warnings.simplefilter("default")
    try:
        return args.func(args)
    except ParameterError as exc:
        print(f"symtheory: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
