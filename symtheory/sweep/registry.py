"""Discovery of the families' declarations at run time.

Every subpackage ``symtheory.<family>`` with a ``tasks`` module is imported (pkgutil +
importlib), which registers its computations and figures in
:mod:`symtheory.core.tasks`.  Nothing here names a family: a new one is picked up
without changes, and the sweep layer imports no family statically (import-linter's
layers contract in pyproject.toml).
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil

_DISCOVERED = False


def family_task_modules() -> list:
    """Names of the ``symtheory.<family>.tasks`` modules present in the package."""
    import symtheory

    names = []
    for info in pkgutil.iter_modules(symtheory.__path__):
        if info.ispkg and importlib.util.find_spec(f"symtheory.{info.name}.tasks") is not None:
            names.append(f"symtheory.{info.name}.tasks")
    return sorted(names)


def _load() -> None:
    global _DISCOVERED
    if not _DISCOVERED:
        for name in family_task_modules():
            importlib.import_module(name)
        _DISCOVERED = True


def discover() -> dict:
    """All declared computations, ``{name: Computation}`` (imports the families once)."""
    from ..core import tasks

    _load()
    return tasks.computations()


def figures() -> dict:
    """All declared figures, ``{name: Figure}``."""
    from ..core import tasks

    _load()
    return tasks.figures()


def get(name: str):
    """The computation ``name`` (``KeyError`` naming the known ones otherwise)."""
    comps = discover()
    if name not in comps:
        raise KeyError(f"unknown computation {name!r}; known: {', '.join(sorted(comps))}")
    return comps[name]
