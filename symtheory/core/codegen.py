"""SymPy expressions -> cached Numba kernels (and the same expressions in mpmath).

Why a generated *file*: Numba's on-disk cache (``cache=True``) keys compiled code on
the defining source file, so ``numba.njit(sympy.lambdify(...))`` can never be cached.
A :class:`Kernel` therefore prints its expressions (SymPy's Python printer, fully
qualified ``math.``/module names, common-subexpression elimination) into a real
module ``<cache>/kernels/stk_<name>_<hash>.py`` whose name is a hash of the source
and of the SymPy/Numba/NumPy/Python versions; the module is imported, registered in
``sys.modules`` and its functions are compiled with ``numba.njit(signature,
cache=True)``.  A second process (or a second run) loads the machine code from the
cache instead of compiling it; each kernel reports which of the two happened.

Damaged cache entries heal themselves: the module file is compared with the source
it must contain (its name is a hash of that source) and rewritten if it differs,
and Numba entries that fail their checksum (:func:`cache.verify_entries`) or fail
to unpickle are deleted and recompiled, with one :class:`~.cache.CacheWarning`.

Drivers -- the Numba loops around a model's kernel -- are ordinary modules: a
factory ``build(kern, jit)`` defines them as closures over ``kern``, the kernel's
``<name>_packed`` wrapper (fixed array signature, declared by ``Kernel(packed=...)``),
and :meth:`Kernel.drivers` calls it once per kernel.  Numba cannot cache such closures
itself (its index key pickles the captured dispatcher, which differs in every
process), so ``jit`` gives each one a :class:`KeyedCache`: keyed by the kernel's digest
and the sources of the driver module and of every symtheory module it reaches, stored
beside the kernel's own entries (``symtheory cache info|clear``, checksums and the
read-only fallback cover them alike).

Functions compiled lazily at their first call (drivers, helper modules such as
:mod:`._spectral_nb`) go through :func:`logged_dispatcher` /
:class:`JitModule`, which time that first call and log "compiled" or "loaded" like
the kernels themselves (logger ``symtheory.kernels``, records in :data:`LOADED`).

The same expressions are available at arbitrary precision through
:meth:`Kernel.mp` (SymPy's mpmath printer), the independent path used by tests and
by high-precision solves.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import math
import pickle
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import sympy as sp
from sympy.printing.pycode import MpmathPrinter, PythonCodePrinter

from . import cache
from .cache import kernel_dir

log = logging.getLogger("symtheory.kernels")

CODEGEN_VERSION = "1"

#: every kernel loaded in this process: name -> KernelLoad
LOADED: dict[str, "KernelLoad"] = {}


@dataclass
class KernelLoad:
    """How a kernel became available in this process."""

    name: str
    module: str
    path: str
    status: str  # "compiled" (no usable cache entry) or "loaded" (machine code from cache)
    seconds: float  # module import; for a lazily compiled function its first call


#: What Numba raises when it reads a damaged index (.nbi) or data (.nbc) file, as
#: observed by truncating, zeroing and flipping bytes of real entries:
#: UnpicklingError/EOFError (truncated, zeroed), ValueError (UnicodeDecodeError,
#: "unsupported pickle protocol"), AttributeError (pickled class name damaged),
#: RuntimeError ("LLVM bitcode parsing error").  Caught only around a load that
#: had cache entries to blame, and retried once after deleting them.
DAMAGED_ENTRY_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, AttributeError,
                        RuntimeError)


def _numba_cache_path(py_file: Path) -> Path:
    """Where Numba keeps the cache of functions defined in ``py_file``: the user's
    ``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside it (kept writable by
    :func:`cache.kernel_dir`, so Numba never falls back to its user-wide directory)."""
    import numba
    from numba.core.caching import _CacheLocator

    if numba.config.CACHE_DIR:
        return Path(numba.config.CACHE_DIR) / _CacheLocator.get_suitable_cache_subpath(str(py_file))
    return py_file.parent / "__pycache__"


_WARNED_LOCATIONS: set = set()


def _check_location(label: str, py_file: Path, actual) -> None:
    """Warn once per directory when Numba caches ``label`` elsewhere than expected:
    its user-wide fallback, used when the directory beside the source is not
    writable, is invisible to ``symtheory cache info|clear``."""
    expected = _numba_cache_path(py_file)
    actual = Path(actual)
    if actual != expected and actual not in _WARNED_LOCATIONS:
        _WARNED_LOCATIONS.add(actual)
        cache.warn(f"Numba caches {label} in {actual} because {expected} is not writable; "
                   f"`symtheory cache clear` does not remove that directory")


def _cache_totals(dispatchers) -> tuple[int, int]:
    hits = sum(sum(d.stats.cache_hits.values()) for d in dispatchers)
    misses = sum(sum(d.stats.cache_misses.values()) for d in dispatchers)
    return hits, misses


def _retry_after_purge(call, directory: Path, prefix: str, repairs: list):
    """``call()``; if it raises what a damaged Numba entry raises and there were
    entries starting with ``prefix`` to blame, delete them (noted in ``repairs``) and
    call once more -- an error that persists is genuine and propagates."""
    try:
        return call()
    except DAMAGED_ENTRY_ERRORS as exc:
        purged = cache.purge_entries(directory, prefix)
        if not purged:
            raise
        repairs.append(f"{', '.join(purged)} ({type(exc).__name__}: {exc})")
    return call()


def _warn_repaired(what: str, where, repairs) -> None:
    cache.warn(f"symtheory: rebuilt damaged cache entries of {what} in {where}: "
               + "; ".join(repairs))


class LazyDispatcher:
    """A Numba dispatcher compiled at its first call, with that call timed and logged.

    Before the first call the function's cache entries are checked
    (:func:`cache.verify_entries`); a damaged entry that still fails to load is
    deleted and the call retried once.  The outcome -- "compiled" (cache miss) or
    "loaded" (machine code from the cache) and the time of the first call, which
    includes its run time -- goes to logger ``symtheory.kernels`` and :data:`LOADED`.
    Later calls are forwarded; :func:`logged_dispatcher` hands out the raw dispatcher
    once the first call is done, so hot loops pay nothing.
    """

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        py_func = dispatcher.py_func
        self._file = Path(py_func.__code__.co_filename)
        keyed = getattr(dispatcher, "_cache", None)
        # a driver's KeyedCache names its files and chose their directory itself
        self._keyed = hasattr(keyed, "prefix")
        if self._keyed:
            self._label, self._prefix = keyed.label, keyed.prefix
        else:
            self._label = f"{self._file.stem}.{py_func.__qualname__}"
            self._prefix = f"{self._label}-{py_func.__code__.co_firstlineno}."

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)

    def __call__(self, *args, **kwargs):
        disp = self.dispatcher
        if disp in _FIRST_CALLED:
            return disp(*args, **kwargs)
        call = functools.partial(disp, *args, **kwargs)
        where = disp.stats.cache_path  # None: a dispatcher without cache=True
        directory = Path(where) if where else None
        repairs = []
        if directory is not None:
            if not self._keyed:
                _check_location(self._label, self._file, directory)
            repairs = cache.verify_entries(directory, self._prefix)
        n_overloads = len(disp.overloads)
        hits0, misses0 = _cache_totals([disp])
        t0 = time.perf_counter()
        result = call() if directory is None else _retry_after_purge(
            call, directory, self._prefix, repairs)
        seconds = time.perf_counter() - t0
        _FIRST_CALLED.add(disp)
        hits, misses = _cache_totals([disp])
        if misses > misses0 or (hits == hits0 and len(disp.overloads) > n_overloads):
            status = "compiled"
        elif hits > hits0:
            status = "loaded"
        else:  # compiled earlier in this process, e.g. as a callee of another function
            log.debug("jit %s already in memory (first call %.3f s)", self._label, seconds)
            status = None
        if status:
            if directory is not None:
                cache.record_entries(directory, self._prefix)
            LOADED[self._label] = KernelLoad(disp.py_func.__qualname__, disp.py_func.__module__,
                                             str(self._file), status, seconds)
            log.info("jit %s %s in %.3f s (first call, %s)", self._label, status, seconds,
                     directory or "not cached on disk")
        if repairs:
            _warn_repaired(f"function {self._label}", directory, repairs)
        return result


#: dispatchers whose first call went through a LazyDispatcher
_FIRST_CALLED: set = set()


def logged_dispatcher(dispatcher):
    """``dispatcher`` wrapped to log its first call (see :class:`LazyDispatcher`);
    the raw dispatcher itself once that call is done."""
    if dispatcher in _FIRST_CALLED:
        return dispatcher
    return LazyDispatcher(dispatcher)


class JitModule:
    """A module seen through :func:`logged_dispatcher`: its jitted functions log their
    first call; other attributes are the module's.  After a function's first call the
    raw dispatcher is stored on the instance, so attribute access costs nothing more."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        from numba.extending import is_jitted

        value = getattr(self._module, name)
        if not is_jitted(value):
            setattr(self, name, value)
            return value
        wrapped = logged_dispatcher(value)
        if wrapped is value:
            setattr(self, name, value)
        return wrapped


class DriverJit:
    """The ``jit`` a driver factory ``build(kern, jit)`` receives (:meth:`Kernel.drivers`):
    ``@jit(**options)`` compiles a closure like ``numba.njit(**options)``, cached by a
    :class:`~.keyed_cache.KeyedCache` under ``<tag>.<function name>`` in ``directory``
    and keyed by ``key``."""

    def __init__(self, tag: str, key: str, directory: Path):
        self.tag, self.key, self.directory = tag, key, directory

    def __call__(self, **options):
        if "cache" in options:
            raise TypeError("driver closures are always cached (by a KeyedCache); "
                            "do not pass cache=")
        from .keyed_cache import keyed_njit

        return functools.partial(keyed_njit, tag=self.tag, key=self.key,
                                 directory=self.directory, **options)


#: drivers built in this process: (kernel module, factory module) -> JitModule
_DRIVERS: dict = {}


class KernelPrinter(PythonCodePrinter):
    """Python printer with fully qualified names, suitable for ``numba.njit``."""

    def _print_Pi(self, expr):  # pragma: no cover - trivial
        return "math.pi"

    def _print_Exp1(self, expr):  # pragma: no cover - trivial
        return "math.e"


def _versions() -> str:
    import numba

    return (
        f"codegen={CODEGEN_VERSION} sympy={sp.__version__} numba={numba.__version__} "
        f"numpy={np.__version__} python={sys.version_info[0]}.{sys.version_info[1]}"
    )


_MODULE_HASHES: dict = {}


def _module_source_hash(module: str) -> str:
    if module not in _MODULE_HASHES:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            raise ImportError(f"generated kernels import {module!r}, which cannot be found")
        with open(spec.origin, "rb") as fh:
            _MODULE_HASHES[module] = hashlib.sha256(fh.read()).hexdigest()
    return _MODULE_HASHES[module]


_DRIVER_DIGESTS: dict = {}


def _reached_modules(module: str) -> list[str]:
    """``module`` and every module of symtheory or of ``module``'s own top-level package
    reachable through module globals (a module, or the module of a function, class or
    dispatcher), transitively."""
    import types

    roots = {"symtheory", module.split(".", 1)[0]}
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for value in vars(sys.modules[name]).values():
            if isinstance(value, types.ModuleType):
                ref = value.__name__
            else:
                ref = getattr(getattr(value, "py_func", value), "__module__", None)
            if isinstance(ref, str) and ref.split(".", 1)[0] in roots and ref in sys.modules:
                todo.append(ref)
    return sorted(seen)


def _driver_digest(module: str) -> str:
    """Hash of the sources of a driver module and of the modules it reaches
    (:func:`_reached_modules`): Numba's cache does not notice when a jitted callee
    changes, and a hand-written list of helpers could go stale."""
    if module not in _DRIVER_DIGESTS:
        h = hashlib.sha256()
        for name in _reached_modules(module):
            h.update(f"{name} {_module_source_hash(name)}\n".encode())
        _DRIVER_DIGESTS[module] = h.hexdigest()[:20]
    return _DRIVER_DIGESTS[module]


def _identifier(sym: sp.Symbol, i: int) -> str:
    name = str(sym)
    return name if name.isidentifier() and not name.startswith("_") else f"arg{i}"


class Kernel:
    """A numeric kernel generated from SymPy expressions.

    Parameters
    ----------
    name:
        Python identifier of the kernel (also part of the module name).
    args:
        Scalar float64 input symbols, in call order.
    outputs:
        SymPy expressions (any iterable, flattened in order; a ``Matrix`` is
        flattened row-major and ``shape`` records its shape).
    vector_args:
        Subset of ``args`` over which the companion ``<name>_vec`` kernel loops
        (1-D float64 arrays of a common length ``n``; output ``(n, n_out)``).
    doc:
        One line saying what the kernel computes (written into the module).
    packed:
        Shape of the leading arguments read from one array: adds ``<name>_packed(x,
        pars, out)`` (``x`` float64 of that rank, row-major, ``pars`` the remaining
        arguments), the fixed signature through which drivers call the kernel
        (:meth:`drivers`).

    Calling the kernel, ``k(*args)`` returns a float64 array of the outputs
    (reshaped to ``shape``); ``k.vec(*args)`` evaluates the vectorized companion;
    ``k.func``/``k.vec_func``/``k.packed_func`` are the Numba dispatchers for use
    inside other jitted code; ``k.mp(*args, dps=50)`` evaluates the same expressions in
    mpmath.
    """

    def __init__(self, name: str, args: Sequence[sp.Symbol], outputs, *,
                 vector_args: Sequence[sp.Symbol] = (), doc: str = "",
                 packed: tuple[int, ...] | None = None):
        if not name.isidentifier():
            raise ValueError(f"kernel name must be a Python identifier, got {name!r}")
        if isinstance(outputs, sp.MatrixBase):
            self.shape = tuple(outputs.shape)
            outputs = list(outputs)
        else:
            outputs = list(outputs)
            self.shape = (len(outputs),)
        self.name = name
        self.args = tuple(args)
        self.outputs = [sp.sympify(e) for e in outputs]
        self.vector_args = tuple(vector_args)
        unknown = [a for a in self.vector_args if a not in self.args]
        if unknown:
            raise ValueError(f"vector_args {unknown} are not among the kernel arguments")
        free = set().union(*(e.free_symbols for e in self.outputs)) if self.outputs else set()
        missing = free - set(self.args)
        if missing:
            raise ValueError(
                f"kernel {name!r}: outputs depend on symbols {sorted(map(str, missing))} "
                f"that are not arguments {[str(a) for a in self.args]}")
        self.doc = doc
        if packed is not None:
            packed = tuple(int(n) for n in packed)
            if not packed or min(packed) < 0 or math.prod(packed) > len(self.args):
                raise ValueError(f"kernel {name!r}: packed shape {packed} does not fit its "
                                 f"{len(self.args)} arguments")
        self.packed = packed
        #: modules of the special functions the outputs call (their ``_numba_module``)
        self.imports = self._special_imports()
        self._source: str | None = None
        self._module = None
        self._mp_func = None

    # ------------------------------------------------------------------ source
    def _special_imports(self) -> tuple[str, ...]:
        mods = set()
        for e in self.outputs:
            for f in e.atoms(sp.Function):
                mod = getattr(type(f), "_numba_module", None)
                if mod:
                    mods.add(mod)
        return tuple(sorted(mods))

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = self._generate()
        return self._source

    def _generate(self) -> str:
        printer = KernelPrinter({"fully_qualified_modules": True, "standard": "python3"})
        names = [_identifier(a, i) for i, a in enumerate(self.args)]
        sub = {a: sp.Symbol(n) for a, n in zip(self.args, names)}
        exprs = [e.xreplace(sub) for e in self.outputs]
        tmp = sp.numbered_symbols("t_")
        replacements, reduced = sp.cse(exprs, symbols=tmp, optimizations="basic")
        body = [f"    {printer.doprint(s)} = {printer.doprint(v)}" for s, v in replacements]
        for i, e in enumerate(reduced):
            body.append(f"    out[{i}] = {printer.doprint(e)}")
        if not reduced:
            body.append("    pass")
        sig_args = ", ".join(["float64"] * len(names))
        sep = ", " if names else ""
        lines = [
            "# Generated by symtheory.core.codegen -- do not edit; regenerated from SymPy.",
            f"# kernel: {self.name}",
            f"# {self.doc}" if self.doc else "#",
            f"# inputs: {', '.join(names)}",
            f"# outputs: {len(exprs)} values, shape {self.shape}",
            "import math",
            "import numba",
            "import numpy",
        ]
        lines += [f"import {m}" for m in self.imports]
        lines += [
            "",
            "",
            f'@numba.njit("void({sig_args}{sep}float64[:])", cache=True, error_model="numpy")',
            f"def {self.name}({', '.join(names)}{sep}out):",
            *body,
        ]
        if self.vector_args:
            vec_names = [n for a, n in zip(self.args, names) if a in self.vector_args]
            vsig = ", ".join("float64[:]" if a in self.vector_args else "float64" for a in self.args)
            call = ", ".join(f"{n}[i]" if n in vec_names else n for n in names)
            lines += [
                "",
                "",
                f'@numba.njit("void({vsig}, float64[:, :])", cache=True, error_model="numpy")',
                f"def {self.name}_vec({', '.join(names)}, out):",
                f"    for i in range({vec_names[0]}.shape[0]):",
                f"        {self.name}({call}{sep}out[i])",
            ]
        if self.packed is not None:
            lines += self._packed_lines(names)
        return "\n".join(lines) + "\n"

    def _packed_lines(self, names) -> list[str]:
        n_x = math.prod(self.packed)
        call = ([f"x[{', '.join(map(str, i))}]" for i in np.ndindex(*self.packed)]
                + [f"pars[{j}]" for j in range(len(names) - n_x)] + ["out"])
        rank = ", ".join([":"] * len(self.packed))
        return [
            "",
            "",
            f'@numba.njit("void(float64[{rank}], float64[:], float64[:])", cache=True, '
            'error_model="numpy", _nrt=False)',
            f"def {self.name}_packed(x, pars, out):",
            f"    {self.name}({', '.join(call)})",
        ]

    def drivers(self, build):
        """The drivers that ``build(kern, jit)`` (a driver module's factory, one per
        module) defines for this kernel, built once per process; their jitted attributes
        log their first call (:class:`JitModule`).

        ``kern`` is the ``<name>_packed`` wrapper (declare ``packed``); ``jit`` is a
        :class:`DriverJit` keyed by :attr:`digest` and the digest of the driver sources,
        storing its entries beside the kernel's, under the kernel's module name."""
        if self.packed is None:
            raise ValueError(f"kernel {self.name!r} has no packed wrapper for drivers: "
                             f"declare it with packed=(shape of the array arguments)")
        key = (self.module_name, build.__module__)
        drivers = _DRIVERS.get(key)
        if drivers is None:
            kern = self.packed_func
            stem = build.__module__.rsplit(".", 1)[-1]
            directory = _numba_cache_path(kernel_dir() / f"{self.module_name}.py")
            jit = DriverJit(f"{self.module_name}.{stem}",
                            f"{self.digest}:{_driver_digest(build.__module__)}", directory)
            drivers = _DRIVERS[key] = JitModule(build(kern, jit))
        return drivers

    @property
    def digest(self) -> str:
        """Hash of the source, the library versions and every imported helper module.

        Numba's cache does not notice when a jitted function called from the
        generated module changes, so the helpers' sources are part of the key.
        """
        h = hashlib.sha256()
        h.update(self.source.encode())
        h.update(_versions().encode())
        for mod in self.imports:
            h.update(_module_source_hash(mod).encode())
        return h.hexdigest()[:20]

    @property
    def module_name(self) -> str:
        return f"stk_{self.name}_{self.digest}"

    # ------------------------------------------------------------------ loading
    def _load(self):
        """Import the generated module, writing or repairing its file first.

        The file must hold exactly :attr:`source` (its name is a hash of it); a
        truncated, emptied or edited file is rewritten.  Numba entries are checked
        against their recorded checksums, and entries that still fail to load are
        deleted and the import retried once.  Repairs are reported by one warning.
        """
        if self._module is not None:
            return self._module
        modname = self.module_name
        if modname in sys.modules:
            self._module = sys.modules[modname]
            return self._module
        kdir = kernel_dir()
        cache.seed("kernels", [f"{modname}.py", f"__pycache__/{modname}.*"])
        path = kdir / f"{modname}.py"
        source = self.source.encode()
        repairs = []
        try:
            on_disk = path.read_bytes()
        except FileNotFoundError:
            on_disk = None
        if on_disk != source:
            if on_disk is not None:
                # Numba's entries stay: they are stamped with the source's hash
                # same length or not, the file is not this kernel's source: say so plainly
                repairs.append(f"{path.name} (content mismatch: {len(on_disk)} bytes on disk, "
                               f"{len(source)} expected)" if len(on_disk) != len(source)
                               else f"{path.name} (checksum mismatch: same length, other bytes)")
            cache.write_atomic(path, source)
        pycache = _numba_cache_path(path)
        repairs += cache.verify_entries(pycache, f"{modname}.")
        t0 = time.perf_counter()
        module = _retry_after_purge(lambda: self._exec(modname, path), pycache,
                                    f"{modname}.", repairs)
        seconds = time.perf_counter() - t0
        disp = [getattr(module, self.name)]
        if self.vector_args:
            disp.append(getattr(module, f"{self.name}_vec"))
        hits, misses = _cache_totals(disp)
        status = "loaded" if hits and not misses else "compiled"
        _check_location(f"kernel {self.name}", path, disp[0].stats.cache_path)
        cache.record_entries(pycache, f"{modname}.")
        LOADED[modname] = KernelLoad(self.name, modname, str(path), status, seconds)
        log.info("kernel %s %s in %.3f s (%s)", self.name, status, seconds, path)
        if repairs:
            _warn_repaired(f"kernel {self.name}", kdir, repairs)
        self._module = module
        return module

    def _exec(self, modname: str, path: Path):
        """Execute :attr:`source` as module ``modname`` backed by ``path``.

        Compiled from the verified source rather than through the import system, so
        no ``.pyc`` (another file that could be damaged) is read or written.
        """
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        code = compile(self.source, str(path), "exec")
        sys.modules[modname] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            del sys.modules[modname]
            raise
        return module

    @property
    def status(self) -> str | None:
        """'compiled' or 'loaded' once the kernel is available, else None."""
        rec = LOADED.get(self.module_name) if self._module is not None else None
        return rec.status if rec else None

    @property
    def load_record(self) -> KernelLoad | None:
        return LOADED.get(self.module_name) if self._module is not None else None

    @property
    def func(self):
        """Numba dispatcher ``f(*args, out)`` (scalar args, ``out`` float64[n_out])."""
        return getattr(self._load(), self.name)

    @property
    def vec_func(self):
        if not self.vector_args:
            raise AttributeError(f"kernel {self.name!r} was declared without vector_args")
        return getattr(self._load(), f"{self.name}_vec")

    @property
    def packed_func(self):
        """Numba dispatcher ``f(x, pars, out)`` of the ``packed`` wrapper (see there)."""
        if self.packed is None:
            raise AttributeError(f"kernel {self.name!r} was declared without packed")
        return getattr(self._load(), f"{self.name}_packed")

    @property
    def n_out(self) -> int:
        return len(self.outputs)

    def __call__(self, *args) -> np.ndarray:
        if len(args) != len(self.args):
            raise TypeError(f"kernel {self.name!r} takes {len(self.args)} arguments "
                            f"({', '.join(map(str, self.args))}), got {len(args)}")
        out = np.empty(self.n_out)
        self.func(*(float(a) for a in args), out)
        return out.reshape(self.shape)

    def vec(self, *args) -> np.ndarray:
        """Evaluate over arrays for the ``vector_args``; returns ``(n, n_out)``."""
        conv = []
        n = None
        for a, v in zip(self.args, args):
            if a in self.vector_args:
                arr = np.ascontiguousarray(v, dtype=np.float64)
                if not arr.flags.writeable:     # a broadcast view: the signature wants float64[:]
                    arr = arr.copy()
                if arr.ndim != 1:
                    raise ValueError(f"vector argument {a} must be 1-D")
                n = arr.shape[0] if n is None else n
                if arr.shape[0] != n:
                    raise ValueError("vector arguments must have a common length")
                conv.append(arr)
            else:
                conv.append(float(v))
        out = np.empty((n, self.n_out))
        self.vec_func(*conv, out)
        return out

    # ------------------------------------------------------------------ mpmath
    def mp(self, *args, dps: int | None = None):
        """The same expressions evaluated by mpmath (list of ``mpf``), at ``dps`` digits."""
        import mpmath

        if self._mp_func is None:
            from . import special

            printer = MpmathPrinter({"fully_qualified_modules": False})
            self._mp_func = sp.lambdify(self.args, self.outputs,
                                        modules=[special.MPMATH_NAMESPACE, "mpmath"],
                                        printer=printer)
        if dps is None:
            return [mpmath.mpf(v) if not isinstance(v, mpmath.mpc) else v
                    for v in self._mp_func(*[mpmath.mpf(a) if not isinstance(a, mpmath.mpf) else a
                                             for a in args])]
        with mpmath.workdps(dps):
            return [mpmath.mpf(v) if not isinstance(v, mpmath.mpc) else v
                    for v in self._mp_func(*[mpmath.mpf(a) for a in args])]


@dataclass
class KernelSet:
    """A named group of kernels (e.g. everything a model needs), for reporting."""

    kernels: dict = field(default_factory=dict)

    def add(self, kernel: Kernel) -> Kernel:
        self.kernels[kernel.name] = kernel
        return kernel

    def report(self) -> list[KernelLoad]:
        return [k.load_record for k in self.kernels.values() if k.load_record]


def loaded_kernels() -> list[KernelLoad]:
    """Every kernel made available in this process, with compile/load status and time."""
    return list(LOADED.values())
