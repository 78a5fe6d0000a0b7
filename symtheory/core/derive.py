"""Cache for symbolic derivations.

A derivation (a function returning SymPy objects) is memoized in-process and on disk
(``<cache>/derivations``), keyed by the SHA-256 of the source files it depends on,
the SymPy version and its arguments.  Editing any of those files invalidates the
entry, so a cached result is always what the current code would derive.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import pickle
import tempfile
import time
from pathlib import Path

import sympy as sp

from .cache import derivation_dir

log = logging.getLogger("symtheory.derivations")


def _files_digest(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(set(paths)):
        h.update(Path(p).read_bytes())
    h.update(sp.__version__.encode())
    return h.hexdigest()


def cached_derivation(*depends_on_modules):
    """Decorator: memoize a derivation on disk; ``depends_on_modules`` are module
    objects or file paths whose source (with the function's own file) keys the cache."""

    def deco(func):
        files = [inspect.getsourcefile(func)]
        for m in depends_on_modules:
            files.append(m if isinstance(m, (str, Path)) else inspect.getsourcefile(m))
        memo: dict = {}

        @functools.wraps(func)
        def wrapper(*args):
            if args in memo:
                return memo[args]
            key = hashlib.sha256(
                (_files_digest(files) + func.__qualname__ + repr(args)).encode()).hexdigest()[:24]
            path = derivation_dir() / f"{func.__name__}_{key}.pkl"
            result = None
            if path.exists():
                try:
                    with open(path, "rb") as fh:
                        result = pickle.load(fh)
                except Exception as exc:  # corrupt or incompatible pickle: re-derive
                    log.warning("ignoring unreadable derivation cache %s (%s)", path, exc)
            if result is None:
                t0 = time.perf_counter()
                result = func(*args)
                log.info("derived %s in %.2f s", func.__name__, time.perf_counter() - t0)
                fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump(result, fh)
                os.replace(tmp, path)
            memo[args] = result
            return result

        wrapper.uncached = func
        return wrapper

    return deco
