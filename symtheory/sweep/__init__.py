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

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={"runner": ["run", "RunReport", "execute_point", "local_cluster"],
                  "spec": ["load_spec", "build_spec", "Spec"],
                  "store": ["Store"],
                  "registry": ["discover", "figures"],
                  "reproduce": ["reproduce_figure"],
                  "results": ["collect", "load_results"]})
