"""Command-line interface: ``symtheory <model> <task> ...``.

Examples::

    symtheory bsr theory --alpha-grid 0 1 101 --beta 2 --rho 0.5 --delta 0 --out results/bsr --plot
    symtheory bsr theory --alpha 0.3 --beta inf --rho 0.5 --precision 30
    symtheory smi se --model attention --depth 2 --seq-len 2 --skip 1.0 --alpha 0.4 0.6
    symtheory cache info
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings

from .core.validate import ParameterError


def _cache(args) -> int:
    """``cache info`` prints what it finds (exit 0, a problem noted on stderr);
    ``cache clear`` exits 2 with a message saying what to do if it cannot clear."""
    from .core import cache

    if args.action == "clear":
        try:
            n = cache.clear_cache()
        except cache.CacheError as exc:
            print(f"symtheory: error: {exc}", file=sys.stderr)
            return 2
        print(f"removed {n} files from {cache.cache_dir()}")
    else:
        info = cache.cache_info()
        print(json.dumps(info, indent=1))
        if "problem" in info:
            print(f"symtheory: note: {info['problem']}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="symtheory", description=__doc__.split("\n")[0])
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log kernel compilation/loading and derivations")
    sub = p.add_subparsers(dest="model", required=True)

    from .bsr.cli import register as register_bsr

    register_bsr(sub)

    from .smi.cli import register as register_smi

    register_smi(sub)
    from .sweep.cli import register as register_sweep; register_sweep(sub)  # noqa: E702

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
