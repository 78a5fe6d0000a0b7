"""Location and maintenance of the on-disk cache (generated kernels, derivations).

The cache lives in the platform's user cache directory (``platformdirs``) unless
the environment variable ``SYMTHEORY_CACHE_DIR`` names another folder.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV_VAR = "SYMTHEORY_CACHE_DIR"


def cache_dir() -> Path:
    """Root of the symtheory cache (created on demand)."""
    override = os.environ.get(ENV_VAR)
    if override:
        root = Path(override).expanduser()
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("symtheory", appauthor=False))
    root.mkdir(parents=True, exist_ok=True)
    return root


def kernel_dir() -> Path:
    d = cache_dir() / "kernels"
    d.mkdir(parents=True, exist_ok=True)
    return d


def derivation_dir() -> Path:
    d = cache_dir() / "derivations"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_info() -> dict:
    """Number of files and bytes in each part of the cache."""
    info = {"path": str(cache_dir())}
    for name, d in (("kernels", kernel_dir()), ("derivations", derivation_dir())):
        files = [p for p in d.rglob("*") if p.is_file()]
        info[name] = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    return info


def clear_cache() -> int:
    """Remove every generated kernel, compiled object and cached derivation.

    Returns the number of files removed.
    """
    root = cache_dir()
    removed = 0
    for sub in ("kernels", "derivations"):
        d = root / sub
        if d.exists():
            removed += sum(1 for p in d.rglob("*") if p.is_file())
            shutil.rmtree(d)
    return removed
