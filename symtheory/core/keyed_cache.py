"""Numba's on-disk cache for driver closures, keyed by what they were built from.

A driver built by a factory ``build(kern, jit)`` (see :mod:`.codegen`) is a closure over
the model's kernel dispatcher.  Numba's own :class:`~numba.core.caching.FunctionCache`
never loads such a function in a new process: its index key hashes the pickled closure
cells, and a pickled dispatcher carries a per-process uuid (numba issue #6264, open in
0.68).  :class:`KeyedCache` replaces that part of the key with a stable string (the
kernel's digest and the driver sources' digest) and files the entries under the
kernel's module name, beside the kernel's own entries, so that each model has its own
index and data files.

Uses Numba internals (``Dispatcher._cache``, ``IndexDataCacheFile``), pinned by
``numba>=0.68,<0.69``; tests/core/test_cache.py checks the load in a second process.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys

import numba
from numba.core.caching import (CompileResultCacheImpl, FunctionCache, IndexDataCacheFile,
                                _CacheLocator)

log = logging.getLogger("symtheory.kernels")


class _Locator(_CacheLocator):
    """A fixed directory, with the stable key as the source stamp: an edited driver or
    helper makes the whole index stale (Numba then overwrites it)."""

    def __init__(self, py_file: str, directory: str, stamp: str, lineno: int):
        self._py_file = py_file  # named in Numba's "cannot cache" warnings
        self._directory = directory
        self._stamp = stamp
        self._lineno = lineno

    def get_cache_path(self):
        return self._directory

    def get_source_stamp(self):
        return self._stamp

    def get_disambiguator(self):
        return str(self._lineno)


class _Impl(CompileResultCacheImpl):
    # the parent's __init__ searches Numba's locators (which may create __pycache__
    # beside the package); this one is given its locator and file name
    def __init__(self, py_func, locator: _Locator, fullname: str):
        self._lineno = py_func.__code__.co_firstlineno
        self._locator = locator
        self._filename_base = self.get_filename_base(fullname, getattr(sys, "abiflags", ""))


class KeyedCache(FunctionCache):
    """Cache of ``py_func`` in ``directory`` under ``<fullname>-<line>.pyXY.*``, keyed by
    signature, target, bytecode and ``key`` (instead of the pickled closure cells).

    ``label`` names the function in logs and :data:`.codegen.LOADED`; ``prefix`` selects
    its files (for :func:`.cache.verify_entries` / :func:`.cache.purge_entries`)."""

    def __init__(self, py_func, *, key: str, directory, fullname: str):
        # what FunctionCache.__init__ does, with this locator
        self._name = repr(py_func)
        self._py_func = py_func
        lineno = py_func.__code__.co_firstlineno
        locator = _Locator(py_func.__code__.co_filename, os.fspath(directory), key, lineno)
        self._impl = _Impl(py_func, locator, fullname)
        self._cache_path = locator.get_cache_path()
        self._cache_file = IndexDataCacheFile(cache_path=self._cache_path,
                                              filename_base=self._impl.filename_base,
                                              source_stamp=key)
        self._stable_key = key
        self.label = fullname
        self.prefix = f"{fullname}-{lineno}."
        self.enable()

    def _index_key(self, sig, codegen):
        code = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
        return (sig, codegen.magic_tuple(), (code, self._stable_key))

    def _save_overload(self, sig, data):
        try:
            super()._save_overload(sig, data)
        except OSError as exc:  # e.g. the directory was removed or made read-only meanwhile
            log.info("jit %s not saved to %s (%s): compiled again next time", self.label,
                     self._cache_path, exc)


def keyed_njit(fn, *, tag: str, key: str, directory, **options):
    """``numba.njit(**options)(fn)`` cached by :class:`KeyedCache` as ``<tag>.<name>``.

    ``fn``'s qualified name becomes ``<tag>.<name>`` too, so that the machine code of
    two models' closures carries different symbol names."""
    fullname = f"{tag}.{fn.__name__}"
    fn.__qualname__ = fullname
    disp = numba.njit(**options)(fn)
    disp._cache = KeyedCache(disp.py_func, key=key, directory=directory, fullname=fullname)
    return disp
