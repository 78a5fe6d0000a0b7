"""Shared plumbing for the numerics scripts: --quick, output folder, parameters file."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.strip().split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, a couple of minutes")
    p.add_argument("--out", help="output folder (default: numerics/out/<script name>)")
    return p


def output_dir(script: str, args) -> Path:
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "out" / Path(script).stem
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_params(out: Path, params: dict) -> None:
    import symtheory

    params = dict(params, command=" ".join([sys.executable] + sys.argv),
                  date=time.strftime("%Y-%m-%d %H:%M:%S"),
                  symtheory_version=symtheory.__version__)
    (out / "params.json").write_text(json.dumps(params, indent=1, default=str) + "\n")


def write_csv(path: Path, rows: list[dict]) -> None:
    import csv

    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}", file=sys.stderr)


def save_figure(fig, axes, path: Path, *, legend_size: int = 8) -> None:
    """Grid + legend on every axis, tight layout, write the PNG and say so."""
    import numpy as np

    for ax in np.atleast_1d(axes):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"wrote {path}", file=sys.stderr)
