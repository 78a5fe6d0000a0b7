"""``symtheory reproduce``: the papers' figures, computed by the sweep engine.

Each family declares its figures in its ``tasks`` module
(:func:`symtheory.core.tasks.register_figure`): a sweep spec (full or ``--quick``) and a
renderer.  Reproducing runs the spec into a store inside the output folder -- so an
interrupted reproduction resumes where it stopped -- then writes one CSV per block, the
parameters (``params.json``: the spec, the code's version and source hash, the run) and
the PNG.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..core.validate import ParameterError
from .results import collect, write_table
from .runner import run
from .spec import build_spec
from .store import Store


def figure(name: str):
    from .registry import figures

    figs = figures()
    if name not in figs:
        raise ParameterError(f"figure: unknown figure {name!r}; known: {', '.join(sorted(figs))}")
    return figs[name]


def default_folder(name: str, quick: bool) -> Path:
    return Path("results") / "reproduce" / (f"{name}-quick" if quick else name)


def reproduce_figure(name: str, *, quick: bool = False, out=None, scheduler=None, client=None,
              workers=None, serial: bool = False, progress: bool = True):
    """Reproduce the figure ``name``; returns ``(run report, written paths)``."""
    import symtheory
    from ..core.derive import package_digest

    fig = figure(name)
    data = fig.spec(quick)
    folder = Path(out) if out is not None else default_folder(name, quick)
    spec = build_spec(data, store=folder / f"{name}.sqlite")
    report = run(spec, scheduler=scheduler, client=client, workers=workers, serial=serial,
                 progress=progress)
    written = []
    with Store(spec.store, readonly=True) as st:
        got = collect(st, spec)
    for label, table in got.tables.items():
        path = folder / f"{name}.{label}.csv"
        write_table(table, "csv", path)
        written.append(path)
    params = {"figure": name, "title": fig.title, "quick": quick, "spec": data,
              "symtheory": symtheory.__version__, "source_hash": package_digest(),
              "command": " ".join(["symtheory"] + sys.argv[1:]),
              "run": {k: v for k, v in report.as_dict().items() if k != "errors"},
              "missing": got.missing}
    (folder / "params.json").write_text(json.dumps(params, indent=1, default=str) + "\n")
    written.append(folder / "params.json")
    if all(len(t) for t in got.tables.values()):
        written += [Path(p) for p in fig.render(got.tables, folder)]
    return report, written
