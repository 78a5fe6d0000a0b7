"""A small column table for results, written as CSV or JSON with its parameters."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path


class Table:
    """Ordered columns of equal length plus a ``meta`` dict (the run's parameters)."""

    def __init__(self, columns: dict, meta: dict | None = None):
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns have different lengths: { {k: len(v) for k, v in columns.items()} }")
        self.columns = {k: list(v) for k, v in columns.items()}
        self.meta = dict(meta or {})

    def __len__(self):
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, key):
        import numpy as np

        col = self.columns[key]
        try:
            return np.asarray(col, dtype=float)
        except (TypeError, ValueError):
            return col

    @property
    def names(self):
        return list(self.columns)

    def rows(self):
        names = self.names
        for i in range(len(self)):
            yield {n: self.columns[n][i] for n in names}

    @staticmethod
    def _fmt(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        return str(v)

    def to_csv(self, path=None) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.names)
        for row in self.rows():
            w.writerow([self._fmt(v) for v in row.values()])
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_json(self, path=None) -> str:
        def clean(v):
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            return v

        data = {"meta": self.meta, "rows": [{k: clean(v) for k, v in r.items()} for r in self.rows()]}
        text = json.dumps(data, indent=1, default=str)
        if path is not None:
            Path(path).write_text(text)
        return text

    def write_params(self, path) -> None:
        """Write ``meta`` next to an output file (reproducibility)."""
        Path(path).write_text(json.dumps(self.meta, indent=1, default=str) + "\n")
