"""Figures for BSR results (matplotlib, file output only)."""
from __future__ import annotations

import math


def bo_curve_figure(table):
    """BO error 1-q and the ridge baseline vs alpha, alpha_PR marked (bsr.md 3, 7, 8).

    Few points are drawn with markers: a single point draws no line segment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = table.meta
    alpha = table["alpha"]
    marker = "o" if len(alpha) < 30 else None
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(alpha, table["mmse"], lw=2, marker=marker, label="Bayes-optimal $1-q$")
    ax.plot(alpha, table["ridge_mse"], ls="--", color="gray", marker=marker,
            label=r"ridge on vectorized tokens ($\lambda=\Delta$)")
    apr = float(table["alpha_pr"][0])
    if meta.get("delta", 0) == 0:
        ax.axvline(apr, color="C3", ls=":", label=rf"$\alpha_{{PR}}={apr:.4g}$")
    beta = meta.get("beta")
    beta_s = r"\infty" if beta is not None and math.isinf(beta) else f"{beta:g}"
    ax.set_title(rf"BSR: $\beta={beta_s}$, $\rho={meta.get('rho'):g}$, "
                 rf"$\Delta={meta.get('delta'):g}$")
    ax.set_xlabel(r"$\alpha = n/(dL)$")
    ax.set_ylabel(r"error on $S^*$ (test error $-\,\Delta$)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_bo_curve(table, path) -> None:
    """Write :func:`bo_curve_figure` as a PNG to ``path``."""
    import matplotlib.pyplot as plt

    fig = bo_curve_figure(table)
    fig.savefig(path, dpi=130, format="png")
    plt.close(fig)
