"""Location and maintenance of the on-disk cache (generated kernels, derivations).

The cache lives in the platform's user cache directory (``platformdirs``) unless
the environment variable ``SYMTHEORY_CACHE_DIR`` names another folder.

*Where* and *use* are separate: :func:`cache_dir` only says where the cache is
configured and has no side effects (``symtheory cache info|clear`` rely on that),
while :func:`kernel_dir` and :func:`derivation_dir` return directories this process
can write, creating them on first use.  When the configured cache cannot be written
(a read-only mount, another user's directory, a path that is a file), the process
works in a private temporary directory instead and warns once, naming both paths:
entries already in the configured cache are copied in on demand (:func:`seed`), so
a warm read-only cache is *loaded*, not recompiled; new entries are discarded at exit.
Without this, Numba would silently compile every kernel into its own user-wide
fallback directory, which ``cache info|clear`` do not know about.

Numba's cache files (``__pycache__/*.nbi`` index, ``*.nbc`` machine code) are not
protected against damage: a truncated file raises while unpickling, and a damaged
byte inside the machine code can crash the process (segfault, LLVM abort) on every
later run.  :func:`record_entries` therefore stores the SHA-256 of every data file
next to it once it has been written or successfully loaded, :func:`verify_entries`
checks them before Numba reads them, and :func:`purge_entries` removes a function's
entries so that it is recompiled.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "SYMTHEORY_CACHE_DIR"
SUBDIRS = ("kernels", "derivations")

log = logging.getLogger("symtheory.cache")


class CacheWarning(UserWarning):
    """The cache is used differently from its configuration, or a damaged entry was rebuilt."""


class CacheError(OSError):
    """The cache cannot be used or maintained; the message names the path and what to do."""


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warn(message: str) -> None:
    """Issue a :class:`CacheWarning` attributed to the first caller outside symtheory
    (the depth of the call inside the package varies)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, CacheWarning, stacklevel=level + 1)


# ---------------------------------------------------------------------- where
def cache_dir() -> Path:
    """Configured root of the symtheory cache (nothing is created or checked)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("symtheory", appauthor=False))


# ------------------------------------------------------------------------ use
def _writable(path: Path) -> bool:
    """Whether this process can create files in the existing directory ``path``.

    Tested by creating a file, as Numba's locators do (``os.access`` is wrong under
    ACLs and for root).  Tests monkeypatch this to simulate a read-only cache.
    """
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError:  # PermissionError, read-only file system, not a directory
        return False
    return True


def _make_temp_dir() -> str:
    """A fresh private directory for a process that cannot write the configured cache."""
    return tempfile.mkdtemp(prefix="symtheory-cache-")


def _unusable_reason(root: Path) -> str | None:
    """Why ``root`` cannot hold the cache for this process (None: it can; dirs are created)."""
    for d in (root, root / "kernels", root / "kernels" / "__pycache__", root / "derivations"):
        try:
            d.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            return f"{d} is not a directory"
        except OSError as exc:  # PermissionError, NotADirectoryError (a parent is a file), EROFS
            return f"cannot create {d} ({exc.strerror or exc})"
        if not _writable(d):
            return f"{d} is not writable"
    return None


@dataclass(frozen=True)
class Workspace:
    """Where this process reads and writes cache entries.

    ``root`` is the configured cache when it is writable, else a temporary copy-on-
    demand directory (``configured`` is then only read, through :func:`seed`).
    """

    configured: Path
    root: Path

    @property
    def is_temporary(self) -> bool:
        return self.root != self.configured


_WORKSPACES: dict[Path, Workspace] = {}


def workspace() -> Workspace:
    """The workspace of the configured cache for this process (decided once per root)."""
    configured = cache_dir()
    ws = _WORKSPACES.get(configured)
    if ws is None:
        ws = _WORKSPACES[configured] = _open_workspace(configured)
    return ws


def _open_workspace(configured: Path) -> Workspace:
    reason = _unusable_reason(configured)
    if reason is None:
        return Workspace(configured, configured)
    try:
        tmp = Path(_make_temp_dir())
        for sub in ("kernels/__pycache__", "derivations"):
            (tmp / sub).mkdir(parents=True)
    except OSError as exc:
        raise CacheError(
            f"the symtheory cache {configured} cannot be used ({reason}) and no temporary "
            f"directory could be created as a fallback ({exc}); set {ENV_VAR} to a writable "
            f"directory") from exc
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    reuse = ("its entries are used read-only and anything new is"
             if _kind(configured / "kernels") == "dir" else "kernels are")
    warn(f"the symtheory cache {configured} cannot be written ({reason}); {reuse} compiled "
         f"into the temporary directory {tmp}, deleted at exit.  Make {configured} writable "
         f"or set {ENV_VAR} to a writable directory to keep compiled kernels.")
    return Workspace(configured, tmp)


def _subdir(sub: str) -> Path:
    d = workspace().root / sub
    # cheap, and survives `symtheory cache clear` run by another process meanwhile
    d.mkdir(parents=True, exist_ok=True)
    return d


def kernel_dir() -> Path:
    """Writable directory of generated kernel modules for this process (created)."""
    return _subdir("kernels")


def derivation_dir() -> Path:
    """Writable directory of cached derivations for this process (created)."""
    return _subdir("derivations")


def seed(sub: str, patterns) -> int:
    """Copy entries matching the glob ``patterns`` (relative to ``<cache>/<sub>``) from
    a read-only configured cache into this process's temporary workspace, where they
    can be loaded (Numba's source stamp is a content hash, so copies stay valid).

    A no-op when the configured cache is writable.  Returns the number of files copied.
    """
    ws = workspace()
    if not ws.is_temporary:
        return 0
    src, dst = ws.configured / sub, ws.root / sub
    copied = 0
    for pattern in patterns:
        try:
            matches = sorted(src.glob(pattern))
        except OSError as exc:  # unreadable directory: nothing to seed from
            log.info("cannot read %s (%s); compiling instead", src, exc)
            return copied
        for p in matches:
            target = dst / p.relative_to(src)
            if target.exists() or not p.is_file():
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, target)
            except OSError as exc:  # unreadable file (another user's, mode 0600): recompiled
                log.info("cannot copy %s (%s); it will be rebuilt in %s", p, exc, dst)
                continue
            copied += 1
    return copied


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    The temporary file is created by ``open`` (mode from the umask, unlike
    ``mkstemp``'s 0600), so a cache prepared by one user can be read by others.
    """
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ------------------------------------------------------- Numba cache entries
# Numba names a function's files "<module stem>.<qualname>-<first line>.py<ver>.nbi"
# (index) and "....py<ver>.<n>.nbc" (data); a prefix "<stem>." selects a module's
# files, "<stem>.<qualname>-<line>." one function's.
def _manifest_path(directory: Path, stem: str) -> Path:
    return directory / f"{stem}.nbc-sha256.json"


def _read_manifest(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:  # unreadable, or damaged JSON: start afresh
        log.info("ignoring unreadable checksum file %s (%s)", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    # entries are [size, mtime_ns, sha256]; anything else is damage, dropped
    return {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 3}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def purge_entries(directory: Path, prefix: str) -> list[str]:
    """Delete the Numba cache files in ``directory`` whose names start with ``prefix``
    (and their checksums); returns the names removed."""
    removed = []
    try:
        files = sorted(p for p in Path(directory).iterdir() if p.name.startswith(prefix))
    except FileNotFoundError:
        return removed
    except OSError as exc:  # unreadable directory: nothing can be purged
        warn(f"cannot inspect the Numba cache {directory} ({exc}); if loading fails, "
             f"delete the files starting with {prefix!r} there")
        return removed
    for p in files:
        try:
            p.unlink()
        except FileNotFoundError:  # removed concurrently
            continue
        except OSError as exc:  # PermissionError, read-only file system
            warn(f"damaged cache entry {p} could not be deleted ({exc}); delete it by hand")
            continue
        removed.append(p.name)
    stem = prefix.split(".", 1)[0]
    manifest = _manifest_path(Path(directory), stem)
    sums = _read_manifest(manifest)
    if any(name.startswith(prefix) for name in sums):
        _write_manifest(manifest, {k: v for k, v in sums.items() if not k.startswith(prefix)})
    return removed


def _write_manifest(path: Path, sums: dict) -> None:
    try:
        write_atomic(path, json.dumps(sums, sort_keys=True).encode())
    except OSError as exc:  # e.g. Numba's cache dir for a read-only package: unprotected
        log.info("cannot record checksums in %s (%s)", path, exc)


def verify_entries(directory: Path, prefix: str) -> list[str]:
    """Check the recorded checksums of the Numba data files starting with ``prefix``;
    purge every function whose data changed since it was recorded.

    Returns one description per purged function (empty: nothing damaged found).
    """
    directory = Path(directory)
    stem = prefix.split(".", 1)[0]
    sums = _read_manifest(_manifest_path(directory, stem))
    bad = {}
    for name, (_, _, digest) in sums.items():
        if not name.startswith(prefix):
            continue
        path = directory / name
        try:
            ok = _sha256(path) == digest
        except FileNotFoundError:
            continue
        except OSError as exc:  # unreadable: Numba cannot load it either, and will recompile
            log.info("cannot verify %s (%s)", path, exc)
            continue
        if not ok:
            function_prefix = name.split("-", 1)[0] + "-"
            bad[function_prefix] = name
    repairs = []
    for function_prefix, name in bad.items():
        if purge_entries(directory, function_prefix):
            repairs.append(f"{directory / name} (checksum mismatch)")
    return repairs


def record_entries(directory: Path, prefix: str) -> None:
    """Record the SHA-256 of the Numba data files starting with ``prefix`` (call after
    they were written or loaded successfully; unchanged files are not re-hashed)."""
    directory = Path(directory)
    stem = prefix.split(".", 1)[0]
    manifest = _manifest_path(directory, stem)
    sums = _read_manifest(manifest)
    new = dict(sums)
    try:
        files = [p for p in directory.iterdir()
                 if p.name.startswith(prefix) and p.name.endswith(".nbc")]
    except OSError:  # missing or unreadable: nothing to protect
        return
    for p in files:
        try:
            st = p.stat()
            old = sums.get(p.name)
            if old and old[:2] == [st.st_size, st.st_mtime_ns]:
                continue
            new[p.name] = [st.st_size, st.st_mtime_ns, _sha256(p)]
        except FileNotFoundError:  # replaced concurrently; recorded by its writer
            continue
        except OSError as exc:  # unreadable: left unprotected
            log.info("cannot record checksum of %s (%s)", p, exc)
            continue
    if new != sums:
        _write_manifest(manifest, new)


# ---------------------------------------------------------------- maintenance
def _kind(path: Path) -> str:
    """'missing', 'dir', 'file' or 'unreachable (<reason>)' -- without raising
    (``Path.exists``/``is_dir`` raise PermissionError for an untraversable parent)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:  # PermissionError on a parent, ELOOP
        return f"unreachable ({exc.strerror or exc})"
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def _tree_stats(d: Path) -> dict:
    files = nbytes = 0
    errors: list[str] = []
    for dirpath, _, filenames in os.walk(d, onerror=lambda e: errors.append(str(e))):
        for name in filenames:
            try:
                nbytes += os.stat(os.path.join(dirpath, name)).st_size
            except OSError as exc:  # removed meanwhile, or unreadable
                errors.append(str(exc))
                continue
            files += 1
    out = {"files": files, "bytes": nbytes}
    if errors:
        out["unreadable"] = errors[:5]
    return out


def cache_info() -> dict:
    """What the cache holds: per part, files and bytes; creates nothing and never raises
    for an unusable location (``problem`` then says what is wrong and what to do)."""
    root = cache_dir()
    info: dict = {"path": str(root)}
    kind = _kind(root)
    if kind == "missing":
        info["exists"] = False
        info["note"] = "no cache yet (created on first use)"
        return info
    info["exists"] = True
    if kind != "dir":
        what = "not a directory" if kind == "file" else kind
        info["problem"] = (f"{root} is {what}: set {ENV_VAR} to a directory you can write "
                           f"(or unset it) for kernels to be cached")
        return info
    info["writable"] = _writable(root)
    for sub in SUBDIRS:
        d = root / sub
        sub_kind = _kind(d)
        if sub_kind == "dir":
            info[sub] = _tree_stats(d)
        elif sub_kind == "missing":
            info[sub] = {"files": 0, "bytes": 0}
        else:
            info[sub] = {"problem": f"{d} is {'not a directory' if sub_kind == 'file' else sub_kind}"}
    if not info["writable"]:
        info["problem"] = (f"{root} is not writable: its kernels are loaded read-only and new "
                           f"ones are compiled into a temporary directory per process; make it "
                           f"writable or set {ENV_VAR} to a writable directory")
    ws = _WORKSPACES.get(root)
    if ws is not None and ws.is_temporary:
        info["temporary"] = str(ws.root)
    return info


def clear_cache() -> int:
    """Remove every generated kernel, compiled object and cached derivation.

    Returns the number of files removed; raises :class:`CacheError` (after removing
    what it could) when something cannot be removed or the path is not a directory.
    """
    root = cache_dir()
    _WORKSPACES.pop(root, None)
    kind = _kind(root)
    if kind == "missing":
        return 0
    if kind != "dir":
        what = "not a directory" if kind == "file" else kind
        raise CacheError(f"{root} is {what}, so there is no symtheory cache to clear there; "
                         f"set {ENV_VAR} to a directory you can write (or unset it)")
    removed = 0
    failed: list[OSError] = []
    for sub in SUBDIRS:
        d = root / sub
        if _kind(d) != "dir":
            continue
        for dirpath, dirnames, filenames in os.walk(d, topdown=False, onerror=failed.append):
            for name in filenames:
                try:
                    os.unlink(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                except OSError as exc:  # PermissionError, read-only file system
                    failed.append(exc)
                    continue
                removed += 1
            try:
                os.rmdir(dirpath)
            except OSError as exc:  # not empty because something above failed
                if not failed:
                    failed.append(exc)
    if failed:
        raise CacheError(
            f"removed {removed} files, but {len(failed)} entries of {root} could not be "
            f"removed (first: {failed[0]}); ask the owner of {root} to clear it, or set "
            f"{ENV_VAR} to a directory of your own")
    return removed
