"""Phase diagram of the two-layer tied softmax attention (M = 2, r = 1): the thresholds
alpha_1(c) (weak recovery, layer 2 learned first) and alpha_2(c) (grand staircase, layer 1)
vs the skip strength c -- Fig. 1 right of Troiani et al. (ICML 2025), recomputed.

alpha_1 from the deterministic observation grid of the linearized SE (smi.md 8, 10.4;
error from two resolutions), alpha_2 from the staircase instability (smi.md 8.4, Eqs.
17-18; randomized-QMC error bar), the bound 1/(M(M+1)) = 1/6 (smi.md 8.3) and the
published alpha_critical.csv points (columns named by layer, smi.md 10.4) overlaid.

Writes smi_phase_diagram.csv + .png + params.json into numerics/out/smi_phase_diagram/
(or --out).  ``--quick``: 3 skip values, alpha_2 only at c = 1 with 512 samples
(error ~0.02; the full run: 4096 samples, ~0.005).
Same computation as ``symtheory smi phase-diagram --skip-grid START STOP NUM``.

Each skip value's row is kept in ``<out>/rows/skip_<c>.csv`` with its parameters in
``skip_<c>.json``; a rerun reuses a row whose parameters match (the full grid takes 1-30
min per skip value on one core, growing with c), so an interrupted run resumes.
``symtheory smi phase-diagram --skip-grid C C 1 --format csv`` with the same options
writes the same row (its CSV output, plus a JSON of the parameters below, can be placed
there).
"""
from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import output_dir, parser, write_csv, write_params  # noqa: E402

from symtheory.core.table import Table  # noqa: E402
from symtheory.smi.thresholds_cli import phase_diagram, plot_phase_diagram  # noqa: E402

#: the published skip values (alpha_critical.csv) inside [0.1, 4]
FULL_GRID = [0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0]


def main():
    p = parser(__doc__)
    p.add_argument("--skips", type=float, nargs="+", default=None, help="skip strengths c")
    p.add_argument("--staircase-samples", type=int, default=None)
    p.add_argument("--staircase-skips", type=float, nargs="+", default=None,
                   help="skip values at which alpha_2 is computed (default: all)")
    args = p.parse_args()
    out = output_dir(__file__, args)
    quick = args.quick
    skips = args.skips or ([0.5, 1.0, 4.0] if quick else FULL_GRID)
    stair_skips = args.staircase_skips or ([1.0] if quick else skips)
    samples = args.staircase_samples or (512 if quick else 4096)
    outer, inner = (32, 24) if quick else (48, 40)
    target = 1e-2 if quick else 1e-4        # absolute error wanted on alpha_1
    params = dict(model="two-layer tied softmax attention, M = 2, r = 1", skips=skips,
                  staircase_skips=stair_skips, staircase_samples=samples, outer_nodes=outer,
                  inner_nodes=inner, seed=0, alpha_1_target_error=target)
    write_params(out, params)
    t0 = time.perf_counter()
    rows_dir = out / "rows"
    rows_dir.mkdir(exist_ok=True)
    cols = None
    for c in skips:
        row_params = dict(skip=float(c), seq_len=2, staircase_samples=samples,
                          outer_nodes=outer, inner_nodes=inner, seed=0,
                          with_staircase=c in stair_skips, target_error=target)
        one, how = _cached_row(rows_dir, row_params), "reused"
        if one is None:
            one = phase_diagram([c], staircase_samples=samples, outer_nodes=outer,
                                inner_nodes=inner, with_staircase=c in stair_skips,
                                target_error=target)
            _store_row(rows_dir, row_params, one)
            how = "computed"
        cols = one if cols is None else {k: cols[k] + one[k] for k in cols}
        print(f"[{time.perf_counter() - t0:7.1f} s] c = {c:g} ({how}): alpha_1 = "
              f"{one['alpha_1'][0]:.6f} +- {one['alpha_1_error'][0]:.1g}, alpha_2 = "
              f"{one['alpha_2'][0]:.4f} +- {one['alpha_2_error'][0]:.1g}",
              file=sys.stderr, flush=True)
    table = Table(cols, params)
    write_csv(out / "smi_phase_diagram.csv", [dict(zip(cols, r)) for r in zip(*cols.values())])
    plot_phase_diagram(table, out / "smi_phase_diagram.png")
    print(f"wrote {out / 'smi_phase_diagram.png'}", file=sys.stderr)


def _row_paths(rows_dir: Path, skip: float) -> tuple[Path, Path]:
    return rows_dir / f"skip_{skip:g}.csv", rows_dir / f"skip_{skip:g}.json"


def _cached_row(rows_dir: Path, params: dict):
    """The stored columns of one skip value if its parameters equal ``params``, else None."""
    csv_path, json_path = _row_paths(rows_dir, params["skip"])
    if not (csv_path.exists() and json_path.exists()):
        return None
    stored = json.loads(json_path.read_text())
    if any(stored.get(k) != v for k, v in params.items()):
        return None
    with open(csv_path) as fh:
        rows = list(csv.DictReader(fh))
    if len(rows) != 1:
        return None
    return {k: [v == "true" if k == "staircase_converged" else float(v)]
            for k, v in rows[0].items()}


def _store_row(rows_dir: Path, params: dict, one: dict) -> None:
    from symtheory import __version__

    csv_path, json_path = _row_paths(rows_dir, params["skip"])
    flags = {True: "true", False: "false"}
    write_csv(csv_path, [{k: flags.get(v[0], v[0]) if isinstance(v[0], bool) else v[0]
                          for k, v in one.items()}])
    json_path.write_text(json.dumps(
        dict(params, version=__version__, date=time.strftime("%Y-%m-%d %H:%M:%S")),
        indent=1) + "\n")


if __name__ == "__main__":
    main()
