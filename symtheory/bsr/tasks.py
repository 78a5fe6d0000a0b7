"""BSR computations and figures for sweeps and ``symtheory reproduce`` (declarations only).

Thin wrappers over the family's API (:func:`~symtheory.bsr.theory.bo_point`,
:func:`~symtheory.bsr.gamp.gamp_rie`, :func:`~symtheory.bsr.gd.gradient_descent`, the
thresholds); the schemas state the domains of bsr.md (notation: ``docs/theory/README.md``).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.tasks import computation, convergence, register_figure
from . import params as P


def _check_sizes(p):
    """The instance must have tokens, a rank and fit in memory (before anything runs)."""
    from ..core.memory import check_allocation
    from .data import sizes

    L, r, n = sizes(p["d"], p["beta"], p["rho"], p["alpha"])
    check_allocation(n * p["d"] * L * 8, f"the design of n={n} sequences of {p['d']}x{L} tokens")


# ------------------------------------------------------------------ computations
@computation("bsr.theory_point", params=P.THEORY,
             outputs=("mmse", "q", "alpha_pr", "ridge_mse", "alpha_lr", "mmse_str", "q_str",
                      "digits_confirmed"))
def theory_point(alpha, beta, rho, delta, precision):
    """Bayes-optimal error ``1 - q`` at one ``alpha`` (bsr.md 3, :func:`bsr.bo_point`)."""
    from .theory import bo_point

    pt = bo_point(alpha, beta, rho, delta, precision=precision)
    how = "exact (alpha = 0 or perfect recovery)" if pt.iterations == 0 else \
        "fixed point v = mmse_RIE((delta + v)/alpha) bracketed (bsr.md 3.1)"
    return {"mmse": pt.mmse, "q": pt.q, "alpha_pr": pt.alpha_pr, "ridge_mse": pt.ridge_mse,
            "alpha_lr": pt.alpha_lr, "mmse_str": pt.mmse_str, "q_str": pt.q_str,
            "digits_confirmed": pt.digits_confirmed,
            "convergence": convergence(converged=pt.converged, iterations=pt.iterations,
                                       residual=pt.residual, message=how)}


@computation("bsr.thresholds", params=P.THRESHOLDS,
             outputs=("alpha_pr", "alpha_mnne"))
def thresholds(beta, rho):
    """Perfect-recovery threshold alpha_PR (bsr.md 7) and the nuclear-norm threshold
    alpha_MNNE (bsr.md 11.2)."""
    from .baselines import mnne_threshold
    from .theory import alpha_pr

    return {"alpha_pr": alpha_pr(beta, rho) if rho > 0 else 0.0,
            "alpha_mnne": mnne_threshold(beta, rho),
            "convergence": convergence(converged=True, message="closed form and bracketed root")}


@computation("bsr.gamp", params=P.GAMP,
    outputs=("alpha_actual", "n", "mse", "se_mse", "bo_mse", "ridge_mse", "diverged", "stopped"),
    check=_check_sizes)
def gamp_run(d, beta, rho, alpha, delta, seed, damping, a_estimator, onsager, max_iter, tol):
    """GAMP-RIE on one seeded instance (bsr.md 6): final error, its state evolution, BO."""
    from .data import generate
    from .gamp import gamp_rie
    from .theory import ridge_mse

    data = generate(d, beta, rho, alpha, delta, seed=seed)
    res = gamp_rie(data, damping=damping, a_estimator=a_estimator, onsager=onsager,
                   max_iter=max_iter, tol=tol)
    tr = res.trace
    return {"alpha_actual": data.alpha, "n": data.n, "mse": res.final_mse,
            "se_mse": tr["se_variance"][-1] if tr["se_variance"] else math.nan,
            "bo_mse": tr["bo_mse"][-1] if tr["bo_mse"] else math.nan,
            "ridge_mse": ridge_mse(data.alpha, delta), "diverged": res.diverged,
            "stopped": res.stopped,
            "convergence": convergence(converged=res.converged, iterations=res.iterations,
                                       residual=tr["change"][-1] if tr["change"] else None,
                                       message=res.message)}


@computation("bsr.gd", params=P.GD,
    outputs=("alpha_actual", "gd_mean", "gd_std", "agd", "bo_mse", "train_mean", "diverged_runs"),
    check=_check_sizes)
def gd_run(d, beta, rho, alpha, delta, seed, runs, lr, steps, init, init_scale, record_every):
    """GD and averaged GD from ``runs`` initializations on one instance (bsr.md 13).
    A fixed number of steps: ``converged`` does not apply; ``residual`` is the final
    mean training error."""
    from .data import generate
    from .gd import gradient_descent
    from .theory import bo_point

    data = generate(d, beta, rho, alpha, delta, seed=seed)
    res = gradient_descent(data, runs=runs, lr=lr, steps=steps, init=init, init_scale=init_scale,
                           seed=seed + 1, record_every=record_every)
    fin = res.final_gen_error
    train = float(np.nanmean(res.train_error[-1])) if not res.diverged.all() else math.nan
    n_div = int(res.diverged.sum())
    return {"alpha_actual": data.alpha, "gd_mean": float(np.nanmean(fin)) if n_div < runs else math.nan,
            "gd_std": float(np.nanstd(fin)) if n_div < runs else math.nan,
            "agd": res.averaged_error, "bo_mse": bo_point(data.alpha, beta, rho, delta).mmse,
            "train_mean": train, "diverged_runs": n_div,
            "convergence": convergence(iterations=int(res.steps[-1]), residual=train,
                                       message=f"{int(res.steps[-1])} steps, {n_div} of {runs} "
                                               "runs diverged")}


def _check_mnne(p):
    """The convex program needs cvxpy and a problem the generic conic solver handles
    (:func:`~symtheory.bsr.baselines.mnne_fit`: d L <= 10^4), checked before anything runs."""
    import importlib.util

    from ..core.validate import ParameterError
    from .data import sizes

    _check_sizes(p)
    L, r, n = sizes(p["d"], p["beta"], p["rho"], p["alpha"])
    if p["d"] * L > 10_000:
        raise ParameterError(f"d: d*L = {p['d'] * L} must be <= 10000 for the nuclear-norm "
                             "program (keep max(d, L) <= 100)")
    if importlib.util.find_spec("cvxpy") is None:
        raise ParameterError("bsr.mnne needs cvxpy: pip install 'symtheory[convex]'")


@computation("bsr.mnne", params=P.MNNE,
    outputs=("alpha_actual", "n", "mse", "bo_mse"), check=_check_mnne)
def mnne_run(d, beta, rho, alpha, seed):
    """Minimal nuclear-norm estimate ``argmin |S|_* s.t. <X_mu, S> = y_mu`` (bsr.md 11.1)
    on one seeded noiseless instance: its error ``mean (S - S*)^2``; ``residual`` is the
    largest constraint violation ``max |<Phi_mu, S> - y_mu|`` relative to ``max |y|``."""
    from .baselines import mnne_fit
    from .data import generate
    from .theory import bo_point

    data = generate(d, beta, rho, alpha, 0.0, seed=seed)
    S = mnne_fit(data)
    viol = float(np.max(np.abs(data.Phi @ S.ravel() - data.y)) / max(np.max(np.abs(data.y)), 1e-300)) \
        if data.n else 0.0
    return {"alpha_actual": data.alpha, "n": data.n, "mse": float(np.mean((S - data.S) ** 2)),
            "bo_mse": bo_point(data.alpha, beta, rho, 0.0).mmse,
            "convergence": convergence(residual=viol, message="cvxpy: optimal (or optimal_"
                                       "inaccurate); residual = relative constraint violation")}


# ------------------------------------------------------------------ figures
FIG1_RHOS = [0.1, 0.2, 0.5, 1.0, 2.0]
FIG2_BETAS = [1.0, 2.0, 5.0, math.inf]


def _alpha_grid(quick: bool) -> dict:
    """The reference's grid alpha = 0:0.005:1 (quick: 0:0.1:1, a subset of it)."""
    return {"linspace": [0.0, 1.0, 11 if quick else 201]}


def _fig1_spec(quick: bool) -> dict:
    return {"name": "bsr.fig1", "run": [{
        "label": "theory", "computation": "bsr.theory_point", "alpha": _alpha_grid(quick),
        "beta": 1.0, "rho": FIG1_RHOS, "delta": 0.0}]}


def _fig2_spec(quick: bool) -> dict:
    return {"name": "bsr.fig2", "run": [{
        "label": "theory", "computation": "bsr.theory_point", "alpha": _alpha_grid(quick),
        "beta": FIG2_BETAS, "rho": 0.5, "delta": 0.0}]}


def _curves(ax, table, by, fmt):
    """One line of ``mmse`` vs ``alpha`` per value of ``by`` (rows sorted by alpha)."""
    keys = np.asarray(table.columns[by], dtype=float)
    alpha, mmse = table["alpha"], table["mmse"]
    for i, v in enumerate(sorted(set(keys.tolist()))):
        sel = keys == v
        order = np.argsort(alpha[sel])
        ax.plot(alpha[sel][order], mmse[sel][order], color=f"C{i}", label=fmt(v))
    return keys


def _finish(fig, ax, title, path, ylabel=r"MMSE $1 - q$ on $S^*$"):
    ax.set_xlabel(r"$\alpha = n/(dL)$")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7 if len(ax.get_legend_handles_labels()[1]) > 8 else 8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def paper_points(name: str) -> dict:
    """The paper's own points of figure ``name`` ("fig1" or "fig2"), shipped with the
    package (symtheory/bsr/data/README.md: source, and the rows left out as known wrong):
    ``{column: array}`` with columns ``beta, rho, delta, alpha, mmse``."""
    import csv
    from importlib.resources import files

    with files(__package__).joinpath("data", f"paper_{name}.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return {c: np.array([float(r[c]) for r in rows]) for c in rows[0]}


def _overlay(ax, table, points, by, fmt, folder, stem):
    """The paper's points as markers in the colour of our curve for the same ``by``, and
    alpha_PR (our ``alpha_pr`` column, bsr.md 7) as a labelled vertical line per distinct
    value (several ``by`` values sharing one line name them all).  Writes both series
    beside the figure (``STEM.paper_points.csv``, ``STEM.thresholds.csv``) and returns
    their paths.  BSR has no first-order transition (bsr.md 12: no hard phase), so there
    is no alpha_c to mark."""
    from ..core.table import Table

    values = sorted(set(np.asarray(table.columns[by], dtype=float).tolist()))
    for i, v in enumerate(values):
        sel = points[by] == v
        ax.plot(points["alpha"][sel], points["mmse"][sel], "o", ms=3.5, mfc="none",
                color=f"C{i}", label="paper (Erba et al., points)" if i == 0 else None)
    keys = np.asarray(table.columns[by], dtype=float)
    at = {}  # alpha_PR -> the by-values with it
    for v in values:
        at.setdefault(float(table["alpha_pr"][keys == v][0]), []).append(v)
    rows = {by: [], "threshold": [], "alpha": [], "label": []}
    for a, vs in sorted(at.items()):
        label = rf"$\alpha_{{PR}}={a:.4g}$ (" + ", ".join(fmt(v) for v in vs) + ")"
        ax.axvline(a, ls=":", lw=1.2, color=f"C{values.index(vs[0])}", label=label)
        for v in vs:
            rows[by].append(v)
            rows["threshold"].append("alpha_PR")
            rows["alpha"].append(a)
            rows["label"].append(label)
    shown = {by: [], "alpha": [], "mmse": []}
    for v in values:
        sel = points[by] == v
        for c in shown:
            shown[c].extend(points[c][sel].tolist() if c != by else [v] * int(sel.sum()))
    meta = {"source": "Erba et al., arXiv:2410.18858, data of SPOC-group/bilinear-sequence-"
                      "regression at 7de0afe (symtheory/bsr/data/README.md)"}
    written = []
    for suffix, cols in (("paper_points", shown), ("thresholds", rows)):
        path = folder / f"{stem}.{suffix}.csv"
        path.write_text(Table(cols, dict(meta)).to_csv())
        written.append(path)
    return written


def _fig_axes(tables, folder, name):
    """The figure ``name`` ("fig1", "fig2") drawn: ``(fig, ax, paths of the overlay
    series)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = tables["theory"]
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    if name == "fig1":
        by, fmt = "rho", (lambda v: rf"$\rho={v:g}$")
    else:
        by, fmt = "beta", (lambda v: r"$\beta=\infty$" if math.isinf(v) else rf"$\beta={v:g}$")
    _curves(ax, t, by, fmt)
    if name == "fig1":
        first = np.asarray(t.columns["rho"], dtype=float) == FIG1_RHOS[0]  # ridge: same for every rho
        order = np.argsort(t["alpha"][first])
        ax.plot(t["alpha"][first][order], t["ridge_mse"][first][order], ls="--", color="gray",
                label=r"ridge ($\lambda = \Delta$)")
    written = _overlay(ax, t, paper_points(name), by, fmt, folder, f"bsr.{name}")
    return fig, ax, written


def _render_fig(tables, folder, name, title):
    import matplotlib.pyplot as plt

    fig, ax, written = _fig_axes(tables, folder, name)
    path = folder / f"bsr.{name}.png"
    _finish(fig, ax, title, path)
    plt.close(fig)
    return [path, *written]


def _render_fig1(tables, folder):
    return _render_fig(tables, folder, "fig1", r"BSR Fig. 1: $\beta = 1$, $\Delta = 0$")


def _render_fig2(tables, folder):
    return _render_fig(tables, folder, "fig2", r"BSR Fig. 2: $\rho = 0.5$, $\Delta = 0$")


GAMP_SETTING = {"beta": 1.0, "rho": 0.5, "delta": 0.0}


def _gamp_spec(quick: bool) -> dict:
    return {"name": "bsr.gamp_vs_se", "run": [
        dict(GAMP_SETTING, label="theory", computation="bsr.theory_point",
             alpha={"linspace": [0.0, 1.0, 21 if quick else 101]}),
        dict(GAMP_SETTING, label="gamp", computation="bsr.gamp", d=30 if quick else 100,
             alpha=[0.2, 0.4, 0.6] if quick else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
             seed={"range": [0, 1 if quick else 3]})]}


def _render_gamp(tables, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    th, gp = tables["theory"], tables["gamp"]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    order = np.argsort(th["alpha"])
    ax.plot(th["alpha"][order], th["mmse"][order], color="C0",
            label="Bayes-optimal = SE fixed point")
    ok = np.array([s == "ok" for s in gp.columns["status"]])
    a, mse, se = gp["alpha"][ok], gp["mse"][ok], gp["se_mse"][ok]
    for i, x in enumerate(sorted(set(a.tolist()))):
        sel = a == x
        m = mse[sel]
        err = m.std(ddof=1) / math.sqrt(m.size) if m.size > 1 else 0.0
        ax.errorbar([x], [m.mean()], yerr=[err], fmt="o", color="C3", ms=5,
                    label=f"GAMP-RIE, d = {int(gp['d'][0])}" if i == 0 else None)
        ax.plot([x], [se[sel].mean()], "x", color="k", label="SE after the same iterations"
                if i == 0 else None)
    path = folder / "bsr.gamp_vs_se.png"
    _finish(fig, ax, r"BSR GAMP-RIE vs state evolution: $\beta=1$, $\rho=0.5$, $\Delta=0$", path)
    plt.close(fig)
    return [path]


GD_SETTING = {"beta": 1.0, "rho": 0.2, "delta": 0.0}  # bsr.md 13 (lr study) and 11.1


def _gd_spec(quick: bool) -> dict:
    """GD from ``runs`` prior initializations and MNNE (bsr.md 11.1, sizes of the
    reference's ``min_norm.py``) on seeded instances.  lr 0.3: bsr.md 13 finds the outcome
    lr-dependent and the paper's lr unrecoverable; at d = 50, alpha = 0.55 lr 0.5 (the
    numerics/bsr_gd_vs_bo.py setting, used there up to alpha = 0.45) leaves the training
    error at 0.24 after 6000 steps while lr 0.3 interpolates (exact recovery) by step 1000."""
    gd_steps = 2000 if quick else 5000
    return {"name": "bsr.gd", "run": [
        dict(GD_SETTING, label="theory", computation="bsr.theory_point",
             alpha={"linspace": [0.0, 0.8, 17 if quick else 81]}),
        {"label": "thresholds", "computation": "bsr.thresholds", "beta": GD_SETTING["beta"],
         "rho": GD_SETTING["rho"]},
        dict(GD_SETTING, label="gd", computation="bsr.gd", d=20 if quick else 50,
             alpha=[0.15, 0.3, 0.5] if quick else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
             seed={"range": [0, 1]}, runs=8 if quick else 64, lr=0.3,
             steps=gd_steps, init="prior", record_every=gd_steps),
        {"label": "mnne", "computation": "bsr.mnne", "d": 20 if quick else 50,
         "beta": GD_SETTING["beta"], "rho": GD_SETTING["rho"],
         "alpha": [0.3, 0.7] if quick else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
         "seed": {"range": [0, 1 if quick else 4]}}]}


def _mean_and_error(x, y):
    """Per distinct ``x``: the mean of ``y`` and its standard error (0 for one value)."""
    xs = sorted(set(x.tolist()))
    means, errs = [], []
    for v in xs:
        m = y[x == v]
        means.append(m.mean())
        errs.append(m.std(ddof=1) / math.sqrt(m.size) if m.size > 1 else 0.0)
    return np.array(xs), np.array(means), np.array(errs)


def _ok(table):
    return np.array([s == "ok" for s in table.columns["status"]])


def _render_gd(tables, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    th, thr, gd, mn = (tables[k] for k in ("theory", "thresholds", "gd", "mnne"))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    order = np.argsort(th["alpha"])
    a, bo = th["alpha"][order], th["mmse"][order]
    ax.plot(a, bo, "k-", label="Bayes-optimal")
    ax.plot(a, 2 * bo, "k--", label=r"$2\times$ Bayes-optimal")
    ok = _ok(gd)
    runs, d_gd = int(gd["runs"][0]), int(gd["d"][0])
    x, m, e = _mean_and_error(gd["alpha_actual"][ok], gd["gd_mean"][ok])
    # error bar: the spread of single runs (mean over seeds of their std)
    _, spread, _ = _mean_and_error(gd["alpha_actual"][ok], gd["gd_std"][ok])
    ax.errorbar(x, m, yerr=spread, fmt="o", color="C0", ms=5, capsize=3,
                label=f"GD, single runs (mean $\\pm$ std of {runs}), d = {d_gd}")
    x, m, e = _mean_and_error(gd["alpha_actual"][ok], gd["agd"][ok])
    ax.errorbar(x, m, yerr=e, fmt="s", color="C1", ms=5, capsize=3,
                label=f"averaged GD ({runs} runs)")
    ok = _ok(mn)
    x, m, e = _mean_and_error(mn["alpha_actual"][ok], mn["mse"][ok])
    ax.errorbar(x, m, yerr=e, fmt="D", color="C2", ms=5, capsize=3,
                label=f"min nuclear norm, d = {int(mn['d'][0])}")
    ax.axvline(float(thr["alpha_pr"][0]), color="C3", ls=":", label=r"$\alpha_{PR}$")
    ax.axvline(float(thr["alpha_mnne"][0]), color="C2", ls=":", label=r"$\alpha_{MNNE}$")
    ax.set_xlim(0, float(np.max(a)))
    path = folder / "bsr.gd.png"
    _finish(fig, ax, rf"BSR GD / averaged GD / MNNE: $\beta={GD_SETTING['beta']:g}$, "
            rf"$\rho={GD_SETTING['rho']:g}$, $\Delta=0$", path,
            ylabel=r"error $\mathrm{mean}\,(\hat S - S^*)^2$")
    plt.close(fig)
    return [path]


register_figure("bsr.fig1", title="BSR Fig. 1: Bayes-optimal MMSE vs alpha, beta = 1, "
                "rho in {0.1, 0.2, 0.5, 1, 2}, Delta = 0, with the paper's points and alpha_PR",
                spec=_fig1_spec, render=_render_fig1)
register_figure("bsr.fig2", title="BSR Fig. 2: Bayes-optimal MMSE vs alpha, rho = 0.5, "
                "beta in {1, 2, 5, inf}, Delta = 0, with the paper's points and alpha_PR",
                spec=_fig2_spec, render=_render_fig2)
register_figure("bsr.gamp_vs_se", title="BSR GAMP-RIE (finite d, seeds) vs its state evolution "
                "and the Bayes-optimal curve", spec=_gamp_spec, render=_render_gamp)
register_figure("bsr.gd", title="BSR GD from prior initializations (single runs vs 2 x BO, "
                "their average vs BO) and the minimal nuclear-norm estimator vs alpha, beta = 1, "
                "rho = 0.2", spec=_gd_spec, render=_render_gd)
