"""``symtheory sweep ...`` and ``symtheory reproduce ...`` (docs/sweep.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.validate import ParameterError

ACTIONS = ("run", "status", "export", "plot", "list")

SWEEP_HELP = """\
symtheory sweep [run] SPEC.toml      run the grid (skips what the store holds for this code)
symtheory sweep status SPEC|STORE    points done / failed / missing, runs so far
symtheory sweep export SPEC|STORE    results as csv (default), json or parquet
symtheory sweep plot SPEC|STORE --x alpha --y mmse --out fig.png
symtheory sweep list                 computations and their parameters

The store defaults to SPEC.sqlite beside the spec (or the spec's `store` key).  Bad specs
(unknown computation or parameter, value out of range, empty grid) exit with status 2
before anything runs; a sweep with failed or lost tasks exits with status 1.  Runs may
share a store: each task is claimed before it is computed, so a second run computes only
the tasks nobody claimed, then waits for the others' (or, with --no-wait, reports them as
in progress); the claims of a run that died are retaken (at once on the same host, after
a lease of 2 minutes elsewhere)."""


def _positive_int(name):
    def conv(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {v}")
        return v
    return conv


def _execution_args(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="a running Dask scheduler, e.g. tcp://10.0.0.1:8786 (default: a local "
                        "cluster on 127.0.0.1)")
    g.add_argument("--serial", action="store_true", help="run in this process, without Dask")
    p.add_argument("--workers", type=_positive_int("workers"), default=None,
                   help="worker processes of the local cluster (default: one per core)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _target(args):
    """``(spec or None, store path)`` from the positional words."""
    from .results import sniff_store
    from .spec import load_spec

    if args.target is None:
        raise ParameterError(f"{args.action}: give a spec (.toml) or a store (.sqlite)")
    path = Path(args.target)
    if path.suffix != ".toml" and sniff_store(path):
        return None, path
    spec = load_spec(path, store=args.store)
    return spec, spec.store


def _cmd_sweep(args) -> int:
    words = list(args.words)
    if words and words[0] in ACTIONS:
        args.action = words.pop(0)
    else:
        args.action = "run"
    if len(words) > 1:
        raise ParameterError(f"sweep {args.action}: one spec or store expected, got {' '.join(words)}")
    args.target = words[0] if words else None
    return {"run": _run, "status": _status, "export": _export, "plot": _plot,
            "list": _list}[args.action](args)


def _run(args) -> int:
    from .runner import run
    from .spec import load_spec

    if args.target is None:
        raise ParameterError("run: give the spec file, e.g. symtheory sweep run grid.toml")
    spec = load_spec(args.target, store=args.store)  # every error surfaces before a task runs
    report = run(spec, scheduler=args.scheduler, workers=args.workers, serial=args.serial,
                 retry_failed=args.retry_failed, progress=not args.quiet,
                 max_in_flight=args.max_in_flight, batch=args.batch, wait=not args.no_wait)
    print(report.summary(), file=sys.stderr)
    for e in report.errors[:5]:
        print(f"  failed: {e['params']}: {e['error']}", file=sys.stderr)
    # --no-wait: tasks another run is computing are not a failure of this one
    done = report.ok_at_end + report.in_progress == report.total and report.lost == 0
    return 0 if done else 1


def _status(args) -> int:
    from .results import status_text
    from .store import Store

    spec, store = _target(args)
    with Store(store, readonly=True) as st:
        print(status_text(st, spec))
    return 0


def _collected(args):
    from .results import collect
    from .store import Store

    spec, store = _target(args)
    with Store(store, readonly=True) as st:
        got = collect(st, spec, any_code=args.any_code)
    if args.block is not None:
        if args.block not in got.tables:
            raise ParameterError(f"block: no block {args.block!r}; blocks: {', '.join(got.tables)}")
        got.tables = {args.block: got.tables[args.block]}
    missing = sum(got.missing.values())
    if missing:
        print(f"note: {missing} grid points have no stored result"
              + ("" if args.any_code else " from the running code (--any-code: any code)"),
              file=sys.stderr)
    return got


def _export(args) -> int:
    from .results import merged, write_table

    got = _collected(args)
    if not got.tables:
        print("note: the store holds no results of the running code", file=sys.stderr)
        return 0
    table = merged(got.tables)
    text = write_table(table, args.format, args.out)
    if args.out is None:
        sys.stdout.write(text)
    else:
        print(f"wrote {args.out} ({len(table)} rows)", file=sys.stderr)
    return 0


def _plot(args) -> int:
    from .results import plot_table

    if not args.x or not args.y:
        raise ParameterError("plot: give the axes, e.g. --x alpha --y mmse")
    got = _collected(args)
    if len(got.tables) != 1:
        raise ParameterError("block: the store has several blocks/computations; choose one with "
                             f"--block ({', '.join(got.tables) or 'none'})")
    label, table = next(iter(got.tables.items()))
    out = args.out or f"{label}_{args.y}_vs_{args.x}.png"
    n = plot_table(table, args.x, args.y, out, title=f"{label}: {args.y} vs {args.x}")
    print(f"wrote {out} ({n} points)", file=sys.stderr)
    return 0


def _list(args) -> int:
    from .registry import discover, figures

    for name, comp in sorted(discover().items()):
        first = " ".join(comp.doc.strip().split("\n\n")[0].split())
        print(f"{name}: {first}")
        for k, p in comp.params.items():
            default = "" if p.required else f" = {p.default!r}"
            print(f"    {k}: {p.describe()}{default}{'  -- ' + p.doc if p.doc else ''}")
    print("figures (symtheory reproduce NAME):")
    for name, fig in sorted(figures().items()):
        print(f"    {name}: {fig.title}")
    return 0


# ---------------------------------------------------------------------- reproduce
def _cmd_reproduce(args) -> int:
    from .registry import figures
    from .reproduce import reproduce_figure

    if args.names == ["list"]:
        for name, fig in sorted(figures().items()):
            print(f"{name}: {fig.title}")
        return 0
    if args.out is not None and len(args.names) > 1:
        raise ParameterError("out: one folder per figure; give one NAME with --out")
    code = 0
    for name in args.names:
        report, written = reproduce_figure(name, quick=args.quick, out=args.out,
                                           scheduler=args.scheduler, workers=args.workers,
                                           serial=args.serial, progress=not args.quiet)
        print(report.summary(), file=sys.stderr)
        for p in written:
            print(f"wrote {p}", file=sys.stderr)
        code = max(code, 0 if report.complete else 1)
    return code


def register(sub) -> None:
    sw = sub.add_parser("sweep", help="grids of computations on Dask, resumable SQLite store",
                        description=SWEEP_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sw.add_argument("words", nargs="*", metavar="[ACTION] SPEC|STORE",
                    help=f"action ({', '.join(ACTIONS)}; default run) and the spec or store")
    sw.add_argument("--store", help="results store (default: from the spec)")
    _execution_args(sw)
    sw.add_argument("--no-wait", action="store_true",
                    help="run: when only tasks claimed by another run sharing the store are "
                    "left, report them as in progress and return instead of waiting")
    sw.add_argument("--retry-failed", action="store_true",
                    help="run: recompute points stored with an error by the same code")
    sw.add_argument("--max-in-flight", type=_positive_int("max-in-flight"), default=None,
                    help="run: tasks submitted and not yet stored (default 4 per worker thread); "
                         "a killed driver loses at most these")
    sw.add_argument("--batch", type=_positive_int("batch"), default=None,
                    help="run: grid points per Dask task (default: sized so a Dask task lasts "
                         "~0.5 s; each point is still its own row)")
    sw.add_argument("--format", default="csv", help="export: csv (default), json or parquet")
    sw.add_argument("--out", help="export: output file (default stdout); plot: PNG path")
    sw.add_argument("--any-code", action="store_true",
                    help="export/plot: also rows stored by other code (latest per point)")
    sw.add_argument("--block", help="export/plot: only this block (label)")
    sw.add_argument("--x", help="plot: column on the x axis")
    sw.add_argument("--y", help="plot: column on the y axis")
    sw.set_defaults(func=_cmd_sweep)

    rp = sub.add_parser("reproduce", help="the papers' figures via the sweep engine "
                        "(symtheory reproduce list)",
                        description="symtheory reproduce list | NAME [NAME ...] [--quick]: runs "
                        "the figure's sweep into a store in the output folder (resumable), "
                        "writes CSV per block, params.json and the PNG.")
    rp.add_argument("names", nargs="+", metavar="list|NAME",
                    help="figure names to reproduce, or `list` to print the available ones")
    rp.add_argument("--quick", action="store_true", help="small grids (seconds to minutes)")
    rp.add_argument("--out", help="output folder (default results/reproduce/NAME[-quick])")
    _execution_args(rp)
    rp.set_defaults(func=_cmd_reproduce)
