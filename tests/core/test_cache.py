"""The on-disk cache: self-healing entries, read-only caches, ``cache info|clear``,
derivation keys and logging of lazily compiled dispatchers.

Kernels here are tiny (compiled in about a second) and every test has its own cache
directory.  Read-only directories are simulated for real where possible: as root,
``chmod`` alone does not stop writes, so the subprocess drops CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (``setpriv --bounding-set``) and the permission bits apply.
"""
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from tiny_drivers import drivers

from symtheory.core import cache, codegen, derive
from symtheory.core.cache import CacheError, CacheWarning
from symtheory.core.codegen import Kernel, LazyDispatcher

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent
x, a = sp.symbols("x a")
XS = np.linspace(0.0, 1.0, 5)
PARS = np.array([2.0])


def tiny(name, variant=0):
    """``(a sin x, x^2)`` (variant 0) or ``(a cos x, x^3)``, with a vectorized companion and
    a packed wrapper for the drivers of tests/core/tiny_drivers (:func:`total`)."""
    outs = [a * sp.sin(x), x**2] if variant == 0 else [a * sp.cos(x), x**3]
    return Kernel(name, [x, a], outs, vector_args=[x], packed=(1,))


def total(k):
    """tiny_drivers' lazily compiled, keyed-cached driver ``total(XS, PARS)`` for ``k``."""
    return k.drivers(drivers.build).total(XS, PARS)


def expected(xv, av):
    return np.array([av * np.sin(xv), xv**2])


def tiny_total(variant, factor=2.0, sign=1.0):
    """What tiny_drivers' ``total(XS, PARS)`` computes (``factor``: its helper's scale)."""
    first, second = (np.sin(XS), XS**2) if variant == 0 else (np.cos(XS), XS**3)
    return float(np.sum(factor * PARS[0] * first + sign * second))


def fresh(name):
    """The same kernel as a new process would see it (module dropped from sys.modules, its
    drivers from the per-process table)."""
    k = tiny(name)
    sys.modules.pop(k.module_name, None)
    for key in [key for key in codegen._DRIVERS if key[0] == k.module_name]:
        del codegen._DRIVERS[key]
    return k


def unique(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _numba_uses_the_package_locator(monkeypatch):
    """A user's NUMBA_CACHE_DIR sends every Numba index elsewhere (Numba's own locator wins);
    these tests are about the package's locator, so they run without it."""
    import numba

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV_VAR, str(root))
    return root


def cache_warnings(record):
    return [w for w in record if issubclass(w.category, CacheWarning)]


def pycache_files(root, k, pattern="*"):
    return sorted((root / "kernels" / "__pycache__").glob(f"{k.module_name}.{pattern}"))


# ------------------------------------------------------------------ corruption
def _truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _empty(p):
    p.write_bytes(b"")


def _flip(p):
    b = bytearray(p.read_bytes())
    b[len(b) // 5] ^= 0xFF
    p.write_bytes(bytes(b))


def _zero(p):
    p.write_bytes(bytes(p.stat().st_size))


CORRUPTIONS = {
    # file of the kernel (glob relative to the kernel dir), damage, expected in warning
    "truncated .py": ("{mod}.py", _truncate, ".py ("),
    "emptied .py": ("{mod}.py", _empty, "0 bytes"),
    # same length, other bytes: named as such (it read "407 bytes instead of 407")
    "flipped .py": ("{mod}.py", _flip, "checksum mismatch"),
    "truncated .nbi": ("__pycache__/{mod}.{name}-*.nbi", _truncate, "UnpicklingError"),
    "emptied .nbi": ("__pycache__/{mod}.{name}-*.nbi", _empty, "EOFError"),
    "zeroed .nbc": ("__pycache__/{mod}.{name}-*.nbc", _zero, "checksum mismatch"),
    # a flipped byte inside the machine code can segfault: caught before loading
    "flipped .nbc": ("__pycache__/{mod}.{name}_vec-*.nbc", _flip, "checksum mismatch"),
    # a driver closure's KeyedCache entry (a flipped driver .nbc:
    # test_damaged_driver_entry_is_rebuilt)
    "driver .nbi": ("__pycache__/{mod}.drivers.total-*.nbi", _truncate, "UnpicklingError"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_damaged_entry_is_rebuilt_with_one_warning(cache_root, case):
    pattern, damage, message = CORRUPTIONS[case]
    name = unique("tc_heal")
    k = tiny(name)
    np.testing.assert_allclose(k(0.3, 2.0), expected(0.3, 2.0))
    assert total(k) == pytest.approx(tiny_total(0))
    [target] = (cache_root / "kernels").glob(pattern.format(mod=k.module_name, name=name))
    damage(target)

    k2 = fresh(name)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        np.testing.assert_allclose(k2(0.3, 2.0), expected(0.3, 2.0))
        assert total(k2) == pytest.approx(tiny_total(0))
    [w] = cache_warnings(record)
    assert message in str(w.message) and "rebuilt damaged cache entries" in str(w.message)
    assert str(cache_root / "kernels") in str(w.message)
    # the repaired module file is exactly the source again
    assert (cache_root / "kernels" / f"{k.module_name}.py").read_text() == k.source
    if case.endswith(".py"):
        assert k2.status == "loaded"  # Numba's entries were kept: stamped by source hash

    # and the next "process" loads everything without a word
    k3 = fresh(name)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        k3(0.3, 2.0)
        total(k3)
    assert not cache_warnings(record)
    assert k3.status == "loaded"
    assert codegen.LOADED[f"{k3.module_name}.drivers.total"].status == "loaded"


def test_damaged_data_without_checksums_is_caught_on_load(cache_root):
    """Entries from before checksums existed: the unpickling error triggers the repair."""
    name = unique("tc_nosum")
    k = tiny(name)
    k(0.3, 2.0)
    for p in pycache_files(cache_root, k, "nbc-sha256.json"):
        p.unlink()
    [nbc] = pycache_files(cache_root, k, f"{name}-*.nbc")
    _truncate(nbc)
    k2 = fresh(name)
    with pytest.warns(CacheWarning, match="UnpicklingError"):
        np.testing.assert_allclose(k2(0.5, 1.0), expected(0.5, 1.0))
    assert k2.status == "compiled"


def test_genuine_errors_are_not_swallowed(cache_root, monkeypatch):
    """A kernel that fails for a reason other than its cache raises, unchanged: its
    generated module raises a ValueError (one of the errors a damaged entry raises) after
    its kernel was compiled and cached, so the error outlives a purge and a retry."""
    k = Kernel(unique("tc_bad"), [x], [x])
    monkeypatch.setattr(k, "_source", k.source + "raise ValueError('not the cache')\n")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="not the cache"):
            k(1.0)
    assert not cache_warnings(record)


# ------------------------------------------------------------ lazy dispatchers
def test_lazy_driver_logs_compiled_then_loaded_in_a_second_process(cache_root):
    script = textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
        sys.path.insert(0, {str(TESTS)!r})
        from test_cache import tiny, total
        from symtheory.core.codegen import loaded_kernels
        total(tiny("tc_lazy"))
        print("STATUS", {{r.name: r.status for r in loaded_kernels()}})
    """)
    driver = f"{tiny('tc_lazy').module_name}.drivers.total"
    runs = [_run(script, cache_root) for _ in range(2)]
    for run, status in zip(runs, ("compiled", "loaded")):
        assert run.returncode == 0, run.stderr
        assert f"kernel tc_lazy {status} in" in run.stdout
        assert f"jit {driver} {status} in" in run.stdout  # the lazy driver, with its time
        assert f"'{driver}': '{status}'" in run.stdout


def test_drivers_are_raw_dispatchers_after_the_first_call(cache_root):
    k = tiny(unique("tc_fast"))
    first = k.drivers(drivers.build).total
    assert isinstance(first, LazyDispatcher)
    first(XS, PARS)
    second = k.drivers(drivers.build).total
    assert second is first.dispatcher  # no wrapper on the hot path


def test_jit_module_logs_lazy_helpers(tmp_path, caplog):
    """Module-level helpers (like symtheory.core._spectral_nb) get the same treatment."""
    src = tmp_path / f"{unique('tc_helpers')}.py"
    src.write_text("import numba\n\n\n@numba.njit(cache=True)\ndef twice(v):\n    return 2 * v\n"
                   "\n\nSCALE = 3\n")
    spec = importlib.util.spec_from_file_location(src.stem, src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nb = codegen.JitModule(mod)
    assert nb.SCALE == 3
    with caplog.at_level(logging.INFO, logger="symtheory.kernels"):
        assert nb.twice(2.5) == 5.0
    assert f"jit {src.stem}.twice compiled in" in caplog.text
    assert codegen.LOADED[f"{src.stem}.twice"].status == "compiled"
    assert nb.twice is mod.twice  # raw dispatcher from now on


# ------------------------------------------------------------ driver closures
DRIVE_SCRIPT = textwrap.dedent(f"""
    import sys
    sys.path[:0] = [sys.argv[1], {str(TESTS)!r}]
    from test_cache import tiny, total
    from symtheory.core.codegen import LOADED
    for spec in sys.argv[2:]:
        name, variant = spec.split(":")
        k = tiny(name, int(variant))
        value = total(k)
        print("RESULT", name, value.hex(), LOADED[k.module_name + ".drivers.total"].status)
""")


def _drive(root, *specs, path=TESTS):
    """Run tiny_drivers' ``total`` for kernels ``name:variant`` in a new process:
    {name: (value, status)}."""
    run = _run(None, root, args=["-c", DRIVE_SCRIPT, str(path), *specs])
    assert run.returncode == 0, run.stderr
    rows = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("RESULT")]
    return {name: (float.fromhex(value), status) for name, value, status in rows}


def test_drivers_load_in_a_second_process_without_cross_talk(cache_root):
    """Two models' closures of one driver module, compiled in separate processes, are
    loaded side by side by a third, each from entries of its own (named by its kernel
    module); ``cache clear`` removes them with the kernels."""
    a_name, b_name = unique("td_a"), unique("td_b")
    first = _drive(cache_root, f"{a_name}:0")
    second = _drive(cache_root, f"{b_name}:1")
    both = _drive(cache_root, f"{a_name}:0", f"{b_name}:1")
    assert first[a_name][1] == "compiled" and second[b_name][1] == "compiled"
    assert both == {a_name: (first[a_name][0], "loaded"), b_name: (second[b_name][0], "loaded")}
    assert first[a_name][0] == pytest.approx(tiny_total(0), rel=1e-14)
    assert second[b_name][0] == pytest.approx(tiny_total(1), rel=1e-14)
    for name, variant in ((a_name, 0), (b_name, 1)):
        k = tiny(name, variant)
        assert len(pycache_files(cache_root, k, "drivers.total-*.nbi")) == 1
    assert cache.clear_cache() > 0 and not list(cache_root.rglob("*.nb?"))


def test_editing_a_driver_or_its_helper_recompiles(cache_root, tmp_path):
    """Numba's cache does not notice an edited callee: the key covers the sources of the
    driver module and of every module of its package it reaches."""
    pkg = tmp_path / "pkgs" / "tiny_drivers"
    shutil.copytree(TESTS / "tiny_drivers", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    name = unique("td_edit")
    spec = f"{name}:0"
    assert _drive(cache_root, spec, path=pkg.parent) == {name: (pytest.approx(tiny_total(0)),
                                                                "compiled")}
    helper = pkg / "helper.py"
    helper.write_text(helper.read_text().replace("2.0 * v", "3.0 * v"))
    assert _drive(cache_root, spec, path=pkg.parent) == {
        name: (pytest.approx(tiny_total(0, factor=3.0)), "compiled")}
    drv = pkg / "drivers.py"
    drv.write_text(drv.read_text().replace("+ out[1]", "- out[1]"))
    edited = {name: (pytest.approx(tiny_total(0, factor=3.0, sign=-1.0)), "compiled")}
    assert _drive(cache_root, spec, path=pkg.parent) == edited
    edited[name] = (edited[name][0], "loaded")
    assert _drive(cache_root, spec, path=pkg.parent) == edited


def test_damaged_driver_entry_is_rebuilt(cache_root):
    name = unique("td_heal")
    k = tiny(name)
    assert total(k) == pytest.approx(tiny_total(0))
    [nbc] = pycache_files(cache_root, k, "drivers.total-*.nbc")
    _flip(nbc)
    k2 = fresh(name)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert total(k2) == pytest.approx(tiny_total(0))
    [w] = cache_warnings(record)
    assert nbc.name in str(w.message) and "checksum mismatch" in str(w.message)
    assert codegen.LOADED[f"{k2.module_name}.drivers.total"].status == "compiled"


def test_drivers_need_a_packed_kernel(cache_root):
    with pytest.raises(ValueError, match="packed"):
        Kernel(unique("tc_unpacked"), [x, a], [a * sp.sin(x)]).drivers(drivers.build)


# ----------------------------------------------------------- read-only caches
def test_readonly_warm_cache_is_loaded_from_a_temporary_copy(cache_root, monkeypatch):
    name = unique("tc_ro")
    k = tiny(name)
    k(0.3, 2.0)
    total(k)
    before = sorted(p.relative_to(cache_root) for p in cache_root.rglob("*"))
    cache._WORKSPACES.clear()
    monkeypatch.setattr(cache, "_writable", lambda path: False)

    k2 = fresh(name)
    with pytest.warns(CacheWarning, match="cannot be written") as record:
        np.testing.assert_allclose(k2(0.3, 2.0), expected(0.3, 2.0))
    msg = str(record[0].message)
    assert str(cache_root) in msg and cache.workspace().is_temporary
    assert str(cache.workspace().root) in msg
    assert k2.status == "loaded"
    assert total(k2) == pytest.approx(tiny_total(0))
    assert codegen.LOADED[f"{k2.module_name}.drivers.total"].status == "loaded"
    assert sorted(p.relative_to(cache_root) for p in cache_root.rglob("*")) == before
    assert "temporary" in cache.cache_info()


def test_unwritable_fallback_is_a_clear_error(cache_root, monkeypatch):
    def no_temp():
        raise PermissionError(13, "Permission denied", "/nowhere")

    monkeypatch.setattr(cache, "_writable", lambda path: False)
    monkeypatch.setattr(cache, "_make_temp_dir", no_temp)
    with pytest.raises(CacheError, match=f"{cache_root}.*no temporary directory.*{cache.ENV_VAR}"):
        tiny(unique("tc_nowhere"))(0.1, 1.0)


def _readonly_prefix():
    """Command prefix under which permission bits bind this process, or skip."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a directory read-only")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    probe = subprocess.run(prefix + ["true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode()[:200]}")
    return prefix


def _run(script, root, prefix=(), args=None):
    env = {"SYMTHEORY_CACHE_DIR": str(root), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    cmd = [*prefix, sys.executable] + (["-c", script] if args is None else args)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _make_readonly(path):
    for p in [path, *path.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)


def _make_writable(path):
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


RO_SCRIPT = textwrap.dedent(f"""
    import sys, warnings
    sys.path.insert(0, {str(TESTS)!r})
    warnings.simplefilter("always")
    from test_cache import tiny, total
    from symtheory.core.codegen import LOADED
    k = tiny("tc_real_ro")
    v = k(0.3, 2.0)
    s = total(k)
    print("RESULT", k.status, LOADED[k.module_name + ".drivers.total"].status, v, s)
""")


def test_real_readonly_cache(cache_root):
    prefix = _readonly_prefix()
    warm = _run(RO_SCRIPT, cache_root)
    assert "RESULT compiled" in warm.stdout, warm.stderr
    _make_readonly(cache_root)
    try:
        before = sorted(cache_root.rglob("*"))
        ro = _run(RO_SCRIPT, cache_root, prefix)
        assert ro.returncode == 0, ro.stderr
        assert "RESULT loaded loaded" in ro.stdout  # no recompilation
        assert ro.stderr.count("CacheWarning") == 1 and "cannot be written" in ro.stderr
        assert sorted(cache_root.rglob("*")) == before

        info = _run(None, cache_root, prefix, ["-m", "symtheory.cli", "cache", "info"])
        assert info.returncode == 0 and json.loads(info.stdout)["writable"] is False
        assert "not writable" in info.stderr and "Traceback" not in info.stderr
        clear = _run(None, cache_root, prefix, ["-m", "symtheory.cli", "cache", "clear"])
        assert clear.returncode == 2 and "Traceback" not in clear.stderr
        assert "could not be removed" in clear.stderr and cache.ENV_VAR in clear.stderr
        assert sorted(cache_root.rglob("*")) == before
    finally:
        _make_writable(cache_root)


def test_real_readonly_empty_or_missing_cache_works_with_a_warning(tmp_path):
    prefix = _readonly_prefix()
    empty = tmp_path / "empty"
    empty.mkdir()
    _make_readonly(tmp_path)
    try:
        for root in (empty, empty / "missing"):
            run = _run(RO_SCRIPT, root, prefix)
            assert run.returncode == 0, run.stderr
            assert "RESULT compiled compiled" in run.stdout
            assert run.stderr.count("CacheWarning") == 1 and str(root) in run.stderr
        assert list(empty.iterdir()) == []
    finally:
        _make_writable(tmp_path)


# -------------------------------------------------------- cache info / clear
def _cli(args, capsys):
    from symtheory.cli import main

    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_info_and_clear_on_a_missing_path_create_nothing(cache_root, capsys):
    code, out, _ = _cli(["cache", "info"], capsys)
    assert code == 0 and json.loads(out)["exists"] is False
    code, out, _ = _cli(["cache", "clear"], capsys)
    assert code == 0 and "removed 0 files" in out
    assert not cache_root.exists()


def test_info_and_clear_on_a_file(cache_root, capsys):
    cache_root.write_text("not a cache")
    code, out, err = _cli(["cache", "info"], capsys)
    assert code == 0 and "not a directory" in json.loads(out)["problem"]
    assert "not a directory" in err
    code, out, err = _cli(["cache", "clear"], capsys)
    assert code == 2 and "not a directory" in err and cache.ENV_VAR in err
    assert cache_root.read_text() == "not a cache"


def test_info_under_a_file_and_when_readonly(cache_root, capsys, monkeypatch):
    monkeypatch.setenv(cache.ENV_VAR, str(cache_root / "below"))
    cache_root.write_text("x")
    code, out, _ = _cli(["cache", "info"], capsys)
    assert code == 0 and json.loads(out)["exists"] is False

    cache_root.unlink()
    monkeypatch.setenv(cache.ENV_VAR, str(cache_root))
    (cache_root / "kernels").mkdir(parents=True)
    (cache_root / "kernels" / "k.py").write_text("# k\n")
    monkeypatch.setattr(cache, "_writable", lambda path: False)
    code, out, err = _cli(["cache", "info"], capsys)
    info = json.loads(out)
    assert code == 0 and info["writable"] is False and info["kernels"]["files"] == 1
    assert info["derivations"] == {"files": 0, "bytes": 0}
    assert "not writable" in err
    assert not (cache_root / "derivations").exists()


def test_clear_removes_everything_and_counts(cache_root, capsys):
    k = tiny(unique("tc_clear"))
    k(0.1, 1.0)
    n = sum(1 for p in cache_root.rglob("*") if p.is_file())
    code, out, _ = _cli(["cache", "clear"], capsys)
    assert code == 0 and f"removed {n} files" in out
    assert not any(p.is_file() for p in cache_root.rglob("*"))
    # this process keeps working after the clear
    np.testing.assert_allclose(tiny(unique("tc_clear"))(0.1, 1.0), expected(0.1, 1.0))


# ------------------------------------------------------------- derivations
calls = []


def _square(n):
    calls.append(n)
    return sp.Symbol("t") ** n


def test_derivation_cache_is_keyed_by_package_sources(cache_root, monkeypatch):
    calls.clear()
    f = derive.cached_derivation(derive)(_square)  # the old call form still works
    assert f(3) == sp.Symbol("t") ** 3 and f(3) == f(3) and calls == [3]
    assert derive.cached_derivation()(_square)(3) == f(3) and calls == [3]  # from disk
    assert derive.cached_derivation(_square)(3) == f(3) and calls == [3]    # bare form
    # editing any package file changes the digest, which invalidates the entry
    monkeypatch.setattr(derive, "package_digest", lambda: "edited")
    assert derive.cached_derivation()(_square)(3) == f(3) and calls == [3, 3]


def test_tree_digest_sees_every_source_file(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("X = 1\n")
    (pkg / "data.txt").write_text("ignored")
    d0 = derive.tree_digest(pkg)
    (pkg / "data.txt").write_text("still ignored")
    assert derive.tree_digest(pkg) == d0
    (pkg / "sub" / "deep.py").write_text("X = 2\n")
    d1 = derive.tree_digest(pkg)
    assert d1 != d0
    (pkg / "sub" / "new.py").write_text("")
    assert derive.tree_digest(pkg) != d1
    assert derive.package_digest() == derive.package_digest()  # computed once


def test_damaged_derivation_is_rederived(cache_root):
    calls.clear()
    derive.cached_derivation()(_square)(4)
    [entry] = (cache_root / "derivations").glob("_square_*.pkl")
    _flip(entry)
    with pytest.warns(CacheWarning, match="damaged derivation cache"):
        assert derive.cached_derivation()(_square)(4) == sp.Symbol("t") ** 4
    assert calls == [4, 4]
    assert derive.cached_derivation()(_square)(4) == sp.Symbol("t") ** 4 and calls == [4, 4]


def test_numba_fallback_location_is_not_silent(tmp_path, monkeypatch):
    """If Numba had to cache a function in its user-wide fallback, say so once."""
    src = tmp_path / f"{unique('tc_where')}.py"
    src.write_text("import numba\n\n\n@numba.njit(cache=True)\ndef inc(v):\n    return v + 1\n")
    spec = importlib.util.spec_from_file_location(src.stem, src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # simulate the mismatch: Numba uses <tmp>/__pycache__, we pretend to expect another dir
    expected_dir = tmp_path / "expected"
    monkeypatch.setattr(codegen, "_numba_cache_path", lambda py_file: expected_dir)
    with pytest.warns(CacheWarning, match=f"in {tmp_path / '__pycache__'} because {expected_dir}"):
        assert codegen.JitModule(mod).inc(1) == 2


def test_dispatcher_without_disk_cache_is_logged_too(caplog):
    import numba

    @numba.njit
    def plus_one(v):
        return v + 1

    with caplog.at_level(logging.INFO, logger="symtheory.kernels"):
        assert codegen.logged_dispatcher(plus_one)(1) == 2
    assert "plus_one compiled in" in caplog.text and "not cached on disk" in caplog.text
    assert codegen.logged_dispatcher(plus_one) is plus_one


def test_cached_result_stores_only_what_returned_and_keys_on_the_declaration(cache_root, caplog):
    """core.derive.cached_result: computed once, then loaded (both logged); another key is
    computed anew; a computation that raises stores nothing (a failed declaration check
    runs again next time)."""
    import logging

    from symtheory.core.derive import cached_result

    calls = []

    def compute(v):
        calls.append(v)
        return {"value": v}

    name = unique("tc_result")
    with caplog.at_level(logging.INFO, logger="symtheory.derivations"):
        assert cached_result(name, "link A", lambda: compute(1)) == {"value": 1}
        assert cached_result(name, "link A", lambda: compute(2)) == {"value": 1}
        assert cached_result(name, "link B", lambda: compute(3)) == {"value": 3}
    assert calls == [1, 3]
    assert any("loaded " + name in r.getMessage() for r in caplog.records)
    assert any("computed " + name in r.getMessage() for r in caplog.records)

    def fails():
        calls.append("failed")
        raise ValueError("identity missed")

    for _ in range(2):
        with pytest.raises(ValueError, match="identity missed"):
            cached_result(name, "link C", fails)
    assert calls.count("failed") == 2
