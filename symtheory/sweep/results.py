"""Reading a store back: tables per block, status, export (CSV, JSON, Parquet), plots."""
from __future__ import annotations

import math
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.table import Table
from ..core.validate import ParameterError
from .store import Store

EXPORT_FORMATS = ("csv", "json", "parquet")
#: columns after the parameters and outputs, in this order
RECORD_COLUMNS = ("converged", "iterations", "residual", "message", "warnings", "status", "error",
                  "wall_time", "worker", "finished_at", "version", "source_hash", "point_key")


@dataclass
class Collected:
    """Rows of a store as tables: ``{block label: Table}``, plus the grid points that
    have no row (``missing``) and those stored only by other code (``other_code``)."""

    tables: dict
    missing: dict = field(default_factory=dict)
    other_code: dict = field(default_factory=dict)


def _flat(row: dict, label: str, order=()) -> dict:
    """One row as flat columns: parameters (in schema order), outputs, the record."""
    out = {"block": label, "computation": row["computation"]}
    params = row["params"]
    out.update({k: params[k] for k in order if k in params})
    out.update({k: v for k, v in params.items() if k not in out})
    out.update(row["outputs"] or {})
    conv = row["convergence"] or {}
    for k in RECORD_COLUMNS:
        out[k] = conv.get(k) if k in ("converged", "iterations", "residual", "message",
                                      "warnings") else row.get(k)
    return out


def _table(rows: list, meta: dict) -> Table:
    names = []
    for r in rows:
        for k in r:
            if k not in names:
                names.append(k)
    tail = [k for k in RECORD_COLUMNS if k in names]
    names = [k for k in names if k not in tail] + tail
    return Table({k: [r.get(k) for r in rows] for k in names}, meta)


def collect(store: Store, spec=None, *, source_hash: str | None = None,
            any_code: bool = False) -> Collected:
    """Stored results as tables.  With a spec: one table per block, its grid points in
    grid order, each from the code ``source_hash`` (default: the running code) or, with
    ``any_code``, from the latest code that stored it.  Without a spec: one table per
    computation of every row of that code (all rows with ``any_code``)."""
    from ..core.derive import package_digest

    from .registry import discover

    code = source_hash or package_digest()
    meta = {"store": str(store.path), "source_hash": None if any_code else code}
    schemas = discover()

    def params_of(name):
        return list(schemas[name].params) if name in schemas else []

    if spec is None:
        rows = store.rows(source_hash=None if any_code else code)
        by_comp = {}
        for r in rows:
            by_comp.setdefault(r["computation"], []).append(
                _flat(r, r["computation"], params_of(r["computation"])))
        return Collected({k: _table(v, dict(meta, block=k, computation=k, params=params_of(k)))
                          for k, v in by_comp.items()})
    keys = {p.key for b in spec.blocks for p in b.points}
    latest, current = {}, {}
    for r in store.rows(keys=keys):  # oldest first: later rows win
        latest[r["point_key"]] = r
        if r["source_hash"] == code:
            current[r["point_key"]] = r
    chosen = latest if any_code else current
    out = Collected({})
    for b in spec.blocks:
        order = params_of(b.computation)
        rows = [_flat(chosen[p.key], b.label, order) for p in b.points if p.key in chosen]
        out.missing[b.label] = sum(p.key not in chosen for p in b.points)
        out.other_code[b.label] = sum(p.key in latest and p.key not in current for p in b.points)
        out.tables[b.label] = _table(rows, dict(meta, block=b.label, spec=spec.name,
                                                computation=b.computation,
                                                params=params_of(b.computation)))
    return out


# ---------------------------------------------------------------------- export
def _csv_cell(v):
    return "" if v is None else v


def write_table(table: Table, fmt: str, path=None) -> str | None:
    """Write ``table`` as csv/json (to ``path`` or returned) or parquet (needs ``path``
    and pyarrow)."""
    if fmt not in EXPORT_FORMATS:
        raise ParameterError(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    if fmt == "csv":
        return Table({k: [_csv_cell(v) for v in c] for k, c in table.columns.items()},
                     table.meta).to_csv(path)
    if fmt == "json":
        return table.to_json(path)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ParameterError("format parquet needs pyarrow (pip install pyarrow); "
                             "csv and json need nothing") from None
    if path is None:
        raise ParameterError("format parquet writes a file: give --out FILE")
    pq.write_table(pa.Table.from_pylist(list(table.rows())), str(path))
    return None


def merged(tables: dict) -> Table:
    """All blocks in one table (columns: the union, ``None`` where a block lacks one)."""
    rows = [r for t in tables.values() for r in t.rows()]
    meta = dict(next(iter(tables.values())).meta) if tables else {}
    meta.pop("block", None)
    meta.pop("computation", None)
    return _table(rows, meta)


# ---------------------------------------------------------------------- status
def status_text(store: Store, spec=None) -> str:
    from ..core.derive import package_digest

    code = package_digest()
    lines = [f"store {store.path} (running code {code[:12]})"]
    if spec is not None:
        got = collect(store, spec, source_hash=code)
        for b in spec.blocks:
            t = got.tables[b.label]
            st = t.columns.get("status", [])
            ok, err = st.count("ok"), st.count("error")
            line = (f"  {b.label} ({b.computation}): {len(b.points)} points, {ok} done, "
                    f"{err} failed, {got.missing[b.label]} missing")
            if got.other_code[b.label]:
                line += f" ({got.other_code[b.label]} of them stored by other code)"
            lines.append(line)
    try:
        held = store.claims(code)
    except sqlite3.OperationalError:  # a store written before claims existed
        held = {}
    if held:
        owners = sorted({o for o, _ in held.values()})
        lines.append(f"  {len(held)} tasks in progress (claimed by {len(owners)} running run(s): "
                     + ", ".join(owners) + ")")
    lines.append("  rows by computation / code / status:")
    for comp, h, version, status, n, wall in store.counts():
        mark = " (running code)" if h == code else ""
        lines.append(f"    {comp}  {h[:12]}{mark} v{version}  {status}: {n}  "
                     f"({wall or 0:.1f} s of task time)")
    runs = store.runs()
    if runs:
        lines.append(f"  runs: {len(runs)}; last ones:")
        for r in runs[-5:]:
            s = r["summary"]
            if s is None:
                state = "interrupted (no summary: the driver was killed or is running)"
            else:
                state = (f"{s['computed']} computed, {s['failed']} failed, {s['lost']} lost "
                         f"in {s['seconds']:.1f} s")
            lines.append(f"    #{r['id']} {r['name']} {r['started_at']} [{r['executor']}]: {state}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- plot
def plot_table(table: Table, x: str, y: str, path, *, title: str = "") -> int:
    """``y`` vs ``x``, one line per combination of the other varying parameters; over
    ``seed`` the mean with its standard error.  Returns the number of plotted points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    for name in (x, y):
        if name not in table.columns:
            raise ParameterError(f"{'x' if name == x else 'y'}: no column {name!r}; columns: "
                                 + ", ".join(table.names))
    ok = [r for r in table.rows() if r.get("status") == "ok"
          and isinstance(r.get(y), (int, float)) and isinstance(r.get(x), (int, float))]
    if not ok:
        raise ParameterError(f"y: no stored result with numeric {x!r} and {y!r} to plot")
    params = [k for k in table.meta.get("params", []) if k not in (x, "seed")]
    varying = [k for k in params if len({repr(r.get(k)) for r in ok}) > 1]
    groups = {}
    for r in ok:
        groups.setdefault(tuple(r.get(k) for k in varying), []).append(r)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (gkey, rows) in enumerate(sorted(groups.items(), key=lambda kv: repr(kv[0]))):
        xs = sorted({r[x] for r in rows})
        means, errs = [], []
        for xv in xs:
            vals = np.array([r[y] for r in rows if r[x] == xv], dtype=float)
            means.append(vals.mean())
            errs.append(vals.std(ddof=1) / math.sqrt(vals.size) if vals.size > 1 else 0.0)
        label = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in zip(varying, gkey)) or None
        ax.errorbar(xs, means, yerr=errs if any(errs) else None, marker="o", ms=3, color=f"C{i % 10}",
                    label=label)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return len(ok)


def sniff_store(path) -> bool:
    """Whether ``path`` is an SQLite file (by its header)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def echo(text: str) -> None:
    print(text, file=sys.stderr)


def load_results(spec, *, store=None, any_code: bool = False):
    """The stored results of a spec (path, text, dict or Spec) as :class:`Collected`
    (``.tables``: ``{block label: Table}``)."""
    from .spec import load_spec

    spec = load_spec(spec, store=store)
    with Store(spec.store, readonly=True) as st:
        return collect(st, spec, any_code=any_code)
