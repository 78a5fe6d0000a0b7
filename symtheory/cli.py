"""Command-line interface: ``symtheory <family> <task> ...``.

Examples::

    symtheory bsr theory --alpha-grid 0 1 101 --beta 2 --rho 0.5 --delta 0 --out results/bsr --plot
    symtheory bsr theory --alpha 0.3 --beta inf --rho 0.5 --precision 30
    symtheory smi se --model attention --depth 2 --seq-len 2 --skip 1.0 --alpha 0.4 0.6
    symtheory smi error --model-file phase_retrieval.py --overlap 0.5
    symtheory cache info

Every option is checked while the command line is parsed (``symtheory.core.cli_common``);
bad input ends with ``symtheory: error: <option> must be in <range>, got <value>`` and
exit status 2, before anything is computed, and never with a traceback.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from . import __version__
from .core.cli_common import Parser, UsageError, add_verbose, describe, summarized_warnings


DESCRIPTION = describe(
    "Exact theory of learning from long sequences of high-dimensional tokens: Bayes-optimal "
    "errors, state evolution, GAMP and baselines, per model family.",
    "`symtheory FAMILY TASK --help` lists a task's options with their valid ranges, its "
    "output columns and the family's normalization.  Bad input is refused before anything "
    "is computed: `symtheory: error: <option> must be in <range>, got <value>`, exit status "
    "2 (1 for an internal error).")


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
    """The whole command tree; imports no numerics (each command imports what it needs)."""
    p = Parser(prog="symtheory", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"symtheory {__version__}")
    sub = p.add_subparsers(dest="family", required=True,
                           help="a model family (each has tasks), or the kernel cache")

    from .bsr.cli import register as register_bsr

    register_bsr(sub)

    from .smi.cli import register as register_smi

    register_smi(sub)
    from .aim.cli import register as register_aim

    register_aim(sub)
    from .sweep.cli import register as register_sweep

    register_sweep(sub)

    c = sub.add_parser("cache", help="the generated-kernel cache")
    c.add_argument("action", choices=("info", "clear"))
    c.set_defaults(func=_cache)
    add_verbose(p)
    return p


def _report(parser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    """Run one command; return the exit status (0 ok, 2 bad input, 1 internal error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _report(exc.parser, exc.message)
    except SystemExit as exc:            # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    args.command_line = shlex.join(["symtheory", *argv])
    import logging

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    with summarized_warnings():
        try:
            return args.func(args)
        except ValueError as exc:        # ParameterError, or a value refused deeper down
            print(f"symtheory: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("symtheory: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:          # e.g. `symtheory ... | head`: the reader is gone
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except Exception as exc:
            if args.verbose:
                import traceback

                traceback.print_exc()
            print(f"symtheory: internal error: {type(exc).__name__}: {exc}"
                  + ("" if args.verbose else " (run with -v for the traceback)"), file=sys.stderr)
            return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
