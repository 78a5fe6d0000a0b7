"""Cache for symbolic derivations.

A derivation (a function returning SymPy objects) is memoized in-process and on disk
(``<cache>/derivations``), keyed by a hash of *every* ``.py`` file of the installed
``symtheory`` package (:func:`package_digest`), the SymPy version, the function's
module and qualified name and its arguments.  Editing any source file of the package
invalidates every entry, so a cached result is always what the current code would
derive -- no hand-written dependency list can go stale.  (A derivation defined outside
the package also keys on its own file.)

Each file holds the SHA-256 of its pickle, checked before unpickling: a damaged file
is re-derived with a :class:`~.cache.CacheWarning` instead of failing to unpickle.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import pickle
import time
import types
from pathlib import Path

import sympy as sp

from . import cache
from .cache import derivation_dir

log = logging.getLogger("symtheory.derivations")

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def tree_digest(root: Path) -> str:
    """SHA-256 over the relative paths and contents of every ``.py`` file under ``root``."""
    h = hashlib.sha256()
    root = Path(root)
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def package_digest() -> str:
    """Digest of the installed package's sources and the SymPy version (once per process;
    about 50 small files, a few milliseconds)."""
    return hashlib.sha256(
        f"{tree_digest(PACKAGE_ROOT)} sympy={sp.__version__}".encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _outside_package(func) -> str | None:
    """The source file of ``func`` when it is not part of the package, else None."""
    path = inspect.getsourcefile(func)
    if path is None:
        return None
    return None if Path(path).resolve().is_relative_to(PACKAGE_ROOT) else path


_MISSING = object()


def _read_entry(path: Path):
    """The cached result at ``path``; ``_MISSING`` if absent or damaged (then removed, warned)."""
    cache.seed("derivations", [path.name])
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return _MISSING
    digest, _, payload = blob.partition(b"\n")
    if digest.decode("ascii", "replace") != hashlib.sha256(payload).hexdigest():
        cache.warn(f"symtheory: damaged derivation cache {path} (checksum mismatch): "
                   f"re-deriving it")
        path.unlink(missing_ok=True)
        return _MISSING
    # the checksum matched and the key covers the package sources and SymPy's
    # version, so an unpickling error here is a real bug: let it propagate
    return pickle.loads(payload)


def _write_entry(path: Path, result) -> None:
    payload = pickle.dumps(result)
    try:
        cache.write_atomic(path, hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    except OSError as exc:  # disk full, directory removed and not re-creatable
        cache.warn(f"symtheory: could not store derivation {path} ({exc}); it will be "
                   f"derived again next time")


def cached_derivation(*args):
    """Decorator: memoize a derivation in-process and on disk.

    Usable bare (``@cached_derivation``) or called (``@cached_derivation()``).
    Positional arguments (module objects or paths, the former hand-written dependency
    list) are accepted for compatibility and ignored: the key covers every source file
    of the package (:func:`package_digest`).
    """
    if len(args) == 1 and callable(args[0]) and not isinstance(args[0], types.ModuleType):
        return _decorate(args[0])
    return _decorate


def cached_result(name: str, key: str, compute):
    """``compute()``'s result, stored on disk under ``name`` and keyed by ``key`` and
    :func:`package_digest` (an edited source file of the package invalidates it); a
    result is stored only when ``compute`` returns (a check that raises is run again next
    time).  For deterministic computations of a declaration (e.g. a channel's declaration
    check at fixed points): ``key`` must hold everything the result depends on outside
    the package's sources.  Every load and every computation is logged."""
    digest = hashlib.sha256("\0".join([package_digest(), name, key]).encode()).hexdigest()[:24]
    path = derivation_dir() / f"{name}_{digest}.pkl"
    result = _read_entry(path)
    if result is _MISSING:
        t0 = time.perf_counter()
        result = compute()
        log.info("computed %s in %.2f s", name, time.perf_counter() - t0)
        _write_entry(path, result)
    else:
        log.info("loaded %s from the cache (%s)", name, path.name)
    return result


def _decorate(func):
    memo: dict = {}
    outside = _outside_package(func)

    @functools.wraps(func)
    def wrapper(*args):
        if args in memo:
            return memo[args]
        parts = [func.__module__, func.__qualname__, repr(args)]
        if outside:
            parts.append(_file_digest(outside))
        result = cached_result(func.__name__, "\0".join(parts), lambda: func(*args))
        memo[args] = result
        return result

    wrapper.uncached = func
    return wrapper
