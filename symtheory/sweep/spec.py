"""Sweep specifications: TOML (standard library ``tomllib``) or the same structure as a dict.

::

    name = "bsr-demo"                    # optional; default: the file's stem
    store = "bsr-demo.sqlite"            # optional; default: <spec stem>.sqlite beside the spec

    [[run]]                              # one block per computation and grid
    computation = "bsr.theory_point"     # `symtheory sweep list` shows them all
    label = "theory"                     # optional; names the block in exports and figures
    alpha = { linspace = [0.0, 1.0, 41] }   # inclusive, numpy.linspace
    beta = [1.0, 2.0, inf]               # a list of values
    rho = 0.5                            # a scalar is fixed
    # { geomspace = [start, stop, num] }, { range = [start, stop] } / [start, stop, step]
    # (integers, Python's range: seeds)

    [[run]]
    computation = "bsr.gamp"
    d = 30
    alpha = [0.2, 0.4, 0.6]
    seed = [0, 1, 2]
    beta = 1.0
    rho = 0.5
    zip = [["alpha", "seed"]]            # zipped groups (equal lengths); all else: product

Every grid point is one task.  :func:`load_spec` validates everything before anything
runs -- unknown keys, unknown computations or parameters, values outside their valid
range (the computation's schema: the same :class:`~symtheory.core.tasks.Param` as the
command-line option), empty grids, an axis of more than ``MAX_GRID`` (10,000) values (the
cap of ``--alpha-grid NUM``), a spec of more than ``MAX_POINTS`` points -- and raises
:class:`~symtheory.core.validate.ParameterError` naming the key (``run[1].alpha``) and
the valid values.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..core.tasks import GRID_NUM, MAX_GRID, MAX_POINTS
from ..core.validate import ParameterError

TOP_KEYS = ("name", "store", "description", "run")
BLOCK_KEYS = ("computation", "label", "zip")
GRID_FORMS = ("linspace", "geomspace", "range")


@dataclass(frozen=True)
class Point:
    """One task: a computation at complete, canonical parameters; ``key`` identifies it."""

    computation: str
    params: dict
    key: str
    label: str


@dataclass
class Block:
    label: str
    computation: str
    points: list


@dataclass
class Spec:
    name: str
    blocks: list
    source: dict = field(default_factory=dict)
    path: Path | None = None
    store: Path | None = None

    def points(self) -> list:
        """The distinct tasks, in grid order (a point listed by two blocks runs once)."""
        seen, out = set(), []
        for b in self.blocks:
            for p in b.points:
                if p.key not in seen:
                    seen.add(p.key)
                    out.append(p)
        return out


def point_key(computation: str, params: dict) -> str:
    """SHA-256 of the computation and its canonical parameters (floats by ``repr``, so
    exact; defaults included, so an omitted default and the explicit value agree)."""
    text = json.dumps([computation, params], sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _axis(where: str, value) -> list:
    """The values of one parameter: a scalar, a list or a ``{form = [...]}`` range."""
    import numpy as np

    if isinstance(value, list):
        if not value:
            raise ParameterError(f"{where}: empty grid (an empty list of values)")
        if len(value) > MAX_GRID:
            raise ParameterError(f"{where}: a list of {len(value)} values; a grid axis takes at "
                                 f"most {MAX_GRID} (as --alpha-grid NUM)")
        return value
    if not isinstance(value, dict):
        return [value]
    if len(value) != 1 or next(iter(value)) not in GRID_FORMS:
        raise ParameterError(f"{where}: a grid is a list or one of "
                             + ", ".join(f"{{ {f} = [...] }}" for f in GRID_FORMS)
                             + f", got {value!r}")
    form, args = next(iter(value.items()))
    if form == "range":
        if not (isinstance(args, list) and len(args) in (2, 3)
                and all(isinstance(a, int) and not isinstance(a, bool) for a in args)):
            raise ParameterError(f"{where}.range must be [start, stop] or [start, stop, step] "
                                 f"(integers), got {args!r}")
        if len(args) == 3 and args[2] == 0:
            raise ParameterError(f"{where}.range step must be a nonzero integer, got 0")
        values = range(*args)
        if not values:
            raise ParameterError(f"{where}: empty grid (range{tuple(args)} has no values)")
        if len(values) > MAX_GRID:
            raise ParameterError(f"{where}.range{tuple(args)} has {len(values)} values; a grid "
                                 f"axis takes at most {MAX_GRID} (as --alpha-grid NUM)")
        return list(values)
    if not (isinstance(args, list) and len(args) == 3):
        raise ParameterError(f"{where}.{form} must be [start, stop, num], got {args!r}")
    start, stop, num = args
    for name, v in (("start", start), ("stop", stop)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ParameterError(f"{where}.{form} {name} must be a finite number, got {v!r}")
    if isinstance(num, bool) or not isinstance(num, int):
        raise ParameterError(f"{where}.{form} num must be an integer in [1, {MAX_GRID}], got "
                             f"{num!r}")
    if num == 0:
        raise ParameterError(f"{where}.{form} num must be an integer in [1, {MAX_GRID}], got 0 "
                             "(empty grid)")
    GRID_NUM.check(f"{where}.{form} num", num)
    if form == "geomspace" and (start <= 0 or stop <= 0):
        raise ParameterError(f"{where}.geomspace start and stop must be > 0, got {start}, {stop}")
    fun = np.linspace if form == "linspace" else np.geomspace
    return [float(v) for v in fun(start, stop, num)]


def _expand(where: str, grid: dict, zips, budget: int = MAX_POINTS) -> list:
    """Grid points of one block: zipped groups, then the product of all axes."""
    axes = {k: _axis(f"{where}.{k}", v) for k, v in grid.items()}
    groups, grouped = [], set()
    if zips is not None:
        if not (isinstance(zips, list) and all(isinstance(g, list) and g for g in zips)):
            raise ParameterError(f"{where}.zip must be a list of lists of parameter names, "
                                 f"e.g. [[\"alpha\", \"seed\"]], got {zips!r}")
        for g in zips:
            for k in g:
                if k not in axes:
                    raise ParameterError(f"{where}.zip: {k!r} is not a parameter of this block "
                                         f"(given: {', '.join(axes)})")
                if k in grouped:
                    raise ParameterError(f"{where}.zip: {k!r} appears in two groups")
                grouped.add(k)
            lengths = {k: len(axes[k]) for k in g}
            if len(set(lengths.values())) > 1:
                raise ParameterError(f"{where}.zip: zipped grids must have equal lengths, got "
                                     + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
            groups.append(g)
    group_of = {k: tuple(g) for g in groups for k in g}
    factors, placed = [], set()  # (names, value tuples), in the order the keys were written
    for k in axes:
        names = group_of.get(k, (k,))
        if names not in placed:
            placed.add(names)
            factors.append((names, list(zip(*(axes[n] for n in names)))))
    total = math.prod(len(vals) for _, vals in factors)
    if total > budget:
        raise ParameterError(f"{where}: the grid has {total} points (the product of its axes); "
                             f"a spec takes at most {MAX_POINTS} points in all")
    points = []
    for combo in itertools.product(*(vals for _, vals in factors)):
        p = {}
        for (names, _), values in zip(factors, combo):
            p.update(zip(names, values))
        points.append(p)
    return points


def build_spec(data: dict, *, path: Path | None = None, store=None) -> Spec:
    """Validate a spec (the dict form of the TOML) and expand its grids."""
    from .registry import discover

    if not isinstance(data, dict):
        raise ParameterError(f"a spec is a table of keys, got {type(data).__name__}")
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise ParameterError(f"{unknown[0]}: unknown top-level key; valid: {', '.join(TOP_KEYS)}")
    runs = data.get("run")
    if isinstance(runs, dict):
        runs = [runs]
    if not isinstance(runs, list) or not runs:
        raise ParameterError("run: a spec needs at least one [[run]] block naming a computation")
    registry = discover()
    blocks, labels = [], set()
    n_points = 0
    for i, block in enumerate(runs):
        where = f"run[{i}]"
        if not isinstance(block, dict):
            raise ParameterError(f"{where}: a run block is a table, got {block!r}")
        name = block.get("computation")
        if name is None:
            raise ParameterError(f"{where}.computation: missing; known computations: "
                                 + ", ".join(sorted(registry)))
        if name not in registry:
            raise ParameterError(f"{where}.computation: unknown computation {name!r}; known: "
                                 + ", ".join(sorted(registry)))
        comp = registry[name]
        label = block.get("label", name)
        if not isinstance(label, str) or not label:
            raise ParameterError(f"{where}.label must be a non-empty string, got {label!r}")
        if label in labels:
            raise ParameterError(f"{where}.label: {label!r} names two blocks; give each a label")
        labels.add(label)
        grid = {k: v for k, v in block.items() if k not in BLOCK_KEYS}
        for k in grid:  # unknown parameters first: clearer than a range error on another key
            if k not in comp.params:
                raise ParameterError(
                    f"{where}.{k}: unknown parameter of {name}; valid parameters: "
                    + "; ".join(f"{n} ({p.describe()})" for n, p in comp.params.items()))
        points = []
        for raw in _expand(where, grid, block.get("zip"), MAX_POINTS - n_points):
            params = comp.validate(raw, where)
            points.append(Point(name, params, point_key(name, params), label))
        blocks.append(Block(label, name, points))
        n_points += len(points)
    spec_name = data.get("name") or (path.stem if path is not None else None)
    if not isinstance(spec_name, str) or not spec_name:
        raise ParameterError("name: give the sweep a name (a string)")
    if store is None and data.get("store") is not None:
        store = Path(data["store"])
        if path is not None and not store.is_absolute():
            store = path.parent / store
    elif store is None and path is not None:
        store = path.with_suffix(".sqlite")
    return Spec(spec_name, blocks, data, path, None if store is None else Path(store))


def load_spec(source, *, store=None) -> Spec:
    """A :class:`Spec` from a TOML file path, TOML text (``str`` with newlines), a dict or
    a :class:`Spec` (returned as is, with ``store`` if given)."""
    import tomllib

    if isinstance(source, Spec):
        if store is not None:
            source.store = Path(store)
        return source
    if isinstance(source, dict):
        return build_spec(source, store=store)
    if isinstance(source, str) and "\n" in source:
        try:
            return build_spec(tomllib.loads(source), store=store)
        except tomllib.TOMLDecodeError as exc:
            raise ParameterError(f"spec: not valid TOML: {exc}") from None
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ParameterError(f"spec: cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"spec: {path} is not valid TOML: {exc}") from None
    return build_spec(data, path=path, store=store)
