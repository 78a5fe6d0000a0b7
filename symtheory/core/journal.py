"""A task journal: the result of each finished task of a command, committed as it ends.

A command that loops over independent tasks (``symtheory aim gamp`` over alphas x seeds)
writes each task's result here when the task finishes, so an interrupted run keeps what
it finished and a re-run with the same output folder and parameters skips it.  The file
is SQLite in WAL mode with ``synchronous=NORMAL``, as the sweep store
(:mod:`symtheory.sweep.store`): a process killed at any moment leaves every committed
row intact.  A task is identified by its key (a JSON of everything that determines its
result) and the package's source hash (:func:`symtheory.core.derive.package_digest`):
changed code recomputes.  The sweep store holds grids of registered computations for
Dask; this journal is the single-process form a command below the sweep layer can use.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from .validate import ParameterError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    key TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    record TEXT NOT NULL,
    finished_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (key, source_hash)
);
"""


def task_key(params: dict) -> str:
    """The key of a task: its parameters as canonical JSON (repr-exact floats)."""
    return json.dumps(params, sort_keys=True, allow_nan=True)


def _plain(value):
    """JSON-able copy of ``value`` (NumPy scalars and arrays to Python numbers and lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    return _plain(tolist()) if tolist is not None and not isinstance(value, str) else value


class Journal:
    """The journal at ``path`` (created with its folder if missing)."""

    def __init__(self, path):
        from .derive import package_digest

        self.path = Path(path)
        self.code = package_digest()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            with self.db:
                self.db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ParameterError(f"journal: cannot use {self.path} as a task journal: {exc}") from None

    def done(self) -> dict:
        """``{key: record}`` of the tasks this code finished."""
        cur = self.db.execute("SELECT key, record FROM tasks WHERE source_hash = ?", (self.code,))
        return {k: json.loads(r) for k, r in cur}

    def put(self, key: str, record: dict) -> None:
        """Commit the record of a finished task now."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO tasks (key, source_hash, record) VALUES (?, ?, ?)",
                            (key, self.code, json.dumps(_plain(record), allow_nan=True)))

    def close(self) -> None:
        self.db.close()
