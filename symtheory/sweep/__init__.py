"""Sweeps that outgrow one machine: a spec of computations and grids, a resumable SQLite
results store, execution on Dask distributed, and ``symtheory reproduce``.

>>> from symtheory import sweep
>>> report = sweep.run("demo.toml")                # local Dask cluster, one worker per core
>>> report = sweep.run("demo.toml", serial=True)   # in this process
>>> tables = sweep.load_results("demo.toml").tables     # {block label: Table}

The layer sits between the command line and the families: it imports no family; the
families' ``tasks`` modules are discovered at run time (:mod:`.registry`).
See docs/sweep.md.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "run": "runner", "RunReport": "runner", "execute_point": "runner", "local_cluster": "runner",
    "load_spec": "spec", "build_spec": "spec", "Spec": "spec",
    "Store": "store",
    "discover": "registry", "figures": "registry",
    "reproduce_figure": "reproduce",
    "collect": "results",
}

__all__ = sorted(_EXPORTS) + ["load_results"]


def load_results(spec, *, store=None, any_code: bool = False):
    """The stored results of a spec (path, text, dict or Spec) as
    :class:`~symtheory.sweep.results.Collected` (``.tables``: ``{block label: Table}``)."""
    from .results import collect
    from .spec import load_spec
    from .store import Store

    spec = load_spec(spec, store=store)
    with Store(spec.store, readonly=True) as st:
        return collect(st, spec, any_code=any_code)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
