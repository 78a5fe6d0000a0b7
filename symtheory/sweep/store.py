"""The results store: one SQLite file, one row per finished task.

SQLite (standard library): a single file that survives the process that writes it --
each result is committed as it arrives, in WAL mode, so a driver killed at any moment
leaves every committed row intact and the file consistent (no server to run, readable
while a sweep writes it).  There is one writer, the driver; workers only return results.
``synchronous=NORMAL`` in WAL mode is durable against a killed process; only a power
loss can roll back the last commits, which a re-run recomputes.

A row holds the task's computation, parameters (JSON), outputs (JSON), convergence
report (JSON), seed, status (``ok`` or ``error`` with the error text), wall time, the
worker, the time it finished, and the package version and source hash
(:func:`symtheory.core.derive.package_digest`) of the code that produced it.  A point is
identified by ``(point_key, source_hash)``: a re-run skips what the same code stored;
changed code recomputes (older rows are kept, never overwritten).

Several runs may share a store: a run *claims* a task before computing it (table
``claims``: owner, lease expiry as Unix time), in the same transaction that checks the
task is not stored, and storing the result drops the claim.  Claims are leases: the run
renews its own while it lives (:meth:`Store.renew`), and a claim past its expiry, or
held by a process of this host that no longer exists, is retaken by the next run that
wants the task.  So two runs on one store compute each task once.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

from ..core.validate import ParameterError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY,
    computation TEXT NOT NULL,
    point_key TEXT NOT NULL,
    params TEXT NOT NULL,
    seed INTEGER,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    outputs TEXT,
    convergence TEXT,
    error TEXT,
    wall_time REAL,
    worker TEXT,
    finished_at TEXT NOT NULL,
    version TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    UNIQUE (point_key, source_hash)
);
CREATE TABLE IF NOT EXISTS claims (
    point_key TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (point_key, source_hash)
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    version TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    executor TEXT,
    summary TEXT
);
"""

_INSERT = (
    "INSERT INTO results (computation, point_key, params, seed, status, outputs, convergence, "
    "error, wall_time, worker, finished_at, version, source_hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (point_key, source_hash) DO UPDATE SET "
    "status = excluded.status, outputs = excluded.outputs, convergence = excluded.convergence, "
    "error = excluded.error, wall_time = excluded.wall_time, worker = excluded.worker, "
    "finished_at = excluded.finished_at, version = excluded.version "
    "WHERE results.status = 'error'")


def claim_owner(tag: str) -> str:
    """A claim owner id: ``host:pid:tag`` (the host and process let a run on the same host
    see that a claim's owner is gone)."""
    return f"{socket.gethostname()}:{os.getpid()}:{tag}"


def _alive(owner: str) -> bool:
    """False when ``owner`` names a process of this host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another host: only its lease tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by another user
        pass
    return True


def now() -> str:
    """UTC time stamp, milliseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _dumps(value) -> str:
    # repr-exact floats; NaN/inf as JSON's common extension (Python reads it back)
    return json.dumps(value, sort_keys=True, allow_nan=True)


class Store:
    """A results store at ``path`` (created if missing unless ``readonly``)."""

    def __init__(self, path, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        if readonly:
            if not self.path.is_file():
                raise ParameterError(f"store: no results store at {self.path}")
            # read through a read-write connection that refuses writes (query_only), so the
            # last one to close removes WAL's side files; mode=ro if the file is read-only
            uri = self.path.resolve().as_uri()
            try:
                self.db = sqlite3.connect(f"{uri}?mode=rw", uri=True, timeout=30)
                self.db.execute("PRAGMA query_only=ON")
                tables = self.db.execute("SELECT name FROM sqlite_master").fetchall()
            except sqlite3.OperationalError:
                self.db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30)
                tables = None
            except sqlite3.DatabaseError as exc:
                raise ParameterError(f"store: {self.path} is not a results store ({exc})") from None
            if tables is not None and ("results",) not in tables:
                raise ParameterError(f"store: {self.path} is not a results store (no results table)")
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, timeout=30)
            except (OSError, sqlite3.Error) as exc:
                raise ParameterError(f"store: cannot open {self.path}: {exc}") from None
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise ParameterError(f"store: {self.path} has schema version {version}; this "
                                     f"symtheory reads version {SCHEMA_VERSION}")
            with self.db:
                self.db.executescript(_SCHEMA)
                self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ writing
    def add(self, point, result: dict) -> bool:
        """Commit the result of ``point`` (a :class:`~symtheory.sweep.spec.Point`) now.

        ``result`` is what :func:`symtheory.sweep.runner.execute_point` returned.  An ``ok``
        row is never replaced; an ``error`` row is replaced by a new result of the same
        code (a retry).  Returns whether a row was written."""
        return self.add_many([(point, result)]) == 1

    def add_many(self, pairs) -> int:
        """Commit several ``(point, result)`` in one transaction (results that arrived
        together); returns the number of rows written."""
        written = 0
        with self.db:
            self.db.executemany("DELETE FROM claims WHERE point_key = ? AND source_hash = ?",
                                [(p.key, r["source_hash"]) for p, r in pairs])
            for point, result in pairs:
                written += self.db.execute(_INSERT, (
                    point.computation, point.key, _dumps(point.params), point.params.get("seed"),
                    result["status"], _dumps(result.get("outputs")),
                    _dumps(result.get("convergence")), result.get("error"),
                    result.get("wall_time"), result.get("worker"), now(), result["version"],
                    result["source_hash"])).rowcount
        return written

    # ------------------------------------------------------------------ claims
    def claim(self, keys, source_hash: str, owner: str, lease: float, *, redo=(),
              since: str = "") -> tuple[list, int]:
        """Claim the tasks ``keys`` of the code ``source_hash`` for ``owner`` until ``lease``
        seconds from now, in one transaction: a task is claimed when no row is stored for
        it (or its row's status is in ``redo`` and older than ``since``) and nobody else
        holds a live claim on it.  Returns ``(claimed keys, how many of them were taken
        over from an expired or dead owner)``."""
        now_s, got, taken = time.time(), [], 0
        self.db.execute("BEGIN IMMEDIATE")  # no other run reads between check and claim
        try:
            for key in keys:
                row = self.db.execute("SELECT status, finished_at FROM results WHERE "
                                      "point_key = ? AND source_hash = ?", (key, source_hash)).fetchone()
                if row is not None and not (row[0] in redo and row[1] < since):
                    continue
                held = self.db.execute("SELECT owner, expires FROM claims WHERE point_key = ? "
                                       "AND source_hash = ?", (key, source_hash)).fetchone()
                if held is not None and held[0] != owner:
                    if held[1] > now_s and _alive(held[0]):
                        continue
                    taken += 1
                self.db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                                (key, source_hash, owner, now_s + lease))
                got.append(key)
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        return got, taken

    def renew(self, owner: str, lease: float) -> None:
        """Extend every claim of ``owner`` to ``lease`` seconds from now (a heartbeat)."""
        with self.db:
            self.db.execute("UPDATE claims SET expires = ? WHERE owner = ?",
                            (time.time() + lease, owner))

    def release(self, owner: str, keys=None) -> None:
        """Drop the claims of ``owner`` (on ``keys``, or all of them)."""
        with self.db:
            if keys is None:
                self.db.execute("DELETE FROM claims WHERE owner = ?", (owner,))
            else:
                self.db.executemany("DELETE FROM claims WHERE owner = ? AND point_key = ?",
                                    [(owner, k) for k in keys])

    def claims(self, source_hash: str) -> dict:
        """``{point_key: (owner, expires)}`` of the live claims on tasks of ``source_hash``."""
        cur = self.db.execute("SELECT point_key, owner, expires FROM claims WHERE "
                              "source_hash = ? AND expires > ?", (source_hash, time.time()))
        return {k: (o, e) for k, o, e in cur if _alive(o)}

    def begin_run(self, name: str, spec: dict, version: str, source_hash: str, executor: str) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (name, spec, started_at, version, source_hash, executor) "
                "VALUES (?, ?, ?, ?, ?, ?)", (name, _dumps(spec), now(), version, source_hash, executor))
        return cur.lastrowid

    def end_run(self, run_id: int, summary: dict) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                            (now(), _dumps(summary), run_id))

    # ------------------------------------------------------------------ reading
    def statuses(self, source_hash: str) -> dict:
        """``{point_key: status}`` of the rows stored for the code ``source_hash``."""
        cur = self.db.execute("SELECT point_key, status FROM results WHERE source_hash = ?",
                              (source_hash,))
        return {k: s for k, s in cur}

    def rows(self, *, source_hash: str | None = None, keys=None, computation=None) -> list:
        """Stored rows as dicts (JSON fields decoded), oldest first; filtered by code,
        point keys and computation when given."""
        sql, args = "SELECT * FROM results WHERE 1", []
        if source_hash is not None:
            sql += " AND source_hash = ?"
            args.append(source_hash)
        if computation is not None:
            sql += " AND computation = ?"
            args.append(computation)
        out = []
        wanted = None if keys is None else set(keys)
        for r in self.db.execute(sql + " ORDER BY id", args):
            if wanted is not None and r["point_key"] not in wanted:
                continue
            d = dict(r)
            for k in ("params", "outputs", "convergence"):
                d[k] = json.loads(d[k]) if d[k] is not None else None
            out.append(d)
        return out

    def runs(self) -> list:
        rows = [dict(r) for r in self.db.execute("SELECT * FROM runs ORDER BY id")]
        for r in rows:
            r["summary"] = json.loads(r["summary"]) if r["summary"] else None
        return rows

    def counts(self) -> list:
        """``(computation, source_hash, version, status, count, wall time)`` per group."""
        return [tuple(r) for r in self.db.execute(
            "SELECT computation, source_hash, version, status, COUNT(*), SUM(wall_time) "
            "FROM results GROUP BY computation, source_hash, version, status "
            "ORDER BY computation, MAX(id)")]
