"""AIM / QN computations and figures for sweeps and ``symtheory reproduce`` (declarations only).

Thin wrappers over :func:`symtheory.aim.theory.bo_point` / :func:`~symtheory.aim.hardmax.hardmax_mse`
(aim.md 3.3-3.5, 3.8), :func:`symtheory.aim.gamp.run_gamp` (GAMP-RIE, aim.md 5) and
:func:`symtheory.aim.gd.run_gd` (single and averaged GD, aim.md 6; needs the ``gd`` extra).
The figures follow the AIM paper's pattern: MSE vs alpha for T = 2..6 with AMP and GD
points, the collapse on alpha (T^2 + T - 2), hardmax corrected vs published.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.tasks import computation, convergence, register_figure
from ..core.validate import ParameterError
from . import params as P

#: the model: the parameters every AIM computation shares (aim.md 1; package notation)
MODEL_PARAMS = P.MODEL_PARAMS
HARDMAX_VARIANT = P.HARDMAX_VARIANT


def _check_model(p):
    from .data import check_link

    check_link(p["link"], p["seq_len"], p["inv_temp"])
    if p["link"] == "hardmax" and (p["seq_len"] != 2 or p["delta"] > 0):
        raise ParameterError("link='hardmax' needs seq_len = 2 and delta = 0")


def _check_finite(p):
    _check_model(p)
    from .data import sizes

    sizes(p["d"], p["alpha"], p["rho"])


def _check_gd(p):
    from .registry import TRAINABLE_LINKS

    if p["link"] not in TRAINABLE_LINKS:
        raise ParameterError(f"link must be one of {', '.join(TRAINABLE_LINKS)} for gradient "
                             f"descent (hardmax is piecewise constant), got {p['link']!r}")
    _check_finite(p)


@computation("aim.theory_point", params=P.THEORY_POINT, check=_check_model)
def theory_point(rho, seq_len, link, inv_temp, delta, alpha, hardmax_variant, gen_samples):
    """Bayes-optimal MSE on S (aim.md 3.3-3.5) and test error (3.8) at one alpha."""
    from . import theory as th

    if link == "hardmax":
        from .hardmax import hardmax_mse

        res = hardmax_mse(alpha, rho, hardmax_variant)
        mse = float(res.value)
        return {"mmse": mse, "q": 1 + rho - mse, "gen_error": math.nan,
                "alpha_tilde": math.nan, "alpha_pr": math.inf,
                "convergence": convergence(converged=res.converged, iterations=res.iterations,
                                           residual=res.residual, message=res.message)}
    pt = th.bo_point(alpha, rho, seq_len, link, inv_temp, delta, gen_samples=gen_samples)
    return {"mmse": pt.mmse, "q": pt.q, "gen_error": pt.gen_error, "alpha_tilde": pt.alpha_tilde,
            "alpha_pr": pt.alpha_pr,
            "convergence": convergence(converged=pt.converged, iterations=pt.iterations,
                                       residual=pt.residual)}


@computation("aim.gamp", params=P.GAMP, check=_check_finite)
def gamp_point(rho, seq_len, link, inv_temp, delta, d, alpha, seed, damping, max_iter, tol,
               hardmax_variant):
    """GAMP-RIE (aim.md 5) on seeded teacher data: its MSE on S, its own predicted variance
    and the state evolution at the realised alpha."""
    from . import data as aim_data
    from .gamp import run_gamp, se_mse

    data = aim_data.generate(d, alpha, rho=rho, seq_len=seq_len, link=link, inv_temp=inv_temp,
                             delta=delta, seed=seed)
    res = run_gamp(data, damping=damping, max_iter=max_iter, tol=tol,
                   hardmax_variant=hardmax_variant)
    return {"n": data.n, "alpha_realised": data.alpha, "mse": res.final_mse,
            "variance": res.variance,
            "se_mse": se_mse(data.alpha, rho, seq_len, link, delta, hardmax_variant),
            "stopped": bool(res.stopped), "diverged": bool(res.diverged),
            "damping_used": res.damping,
            "convergence": convergence(converged=res.converged, iterations=res.iterations,
                                       residual=res.residual, message=res.message)}


@computation("aim.gd", params=P.GD, check=_check_gd)
def gd_point(rho, seq_len, link, inv_temp, delta, d, alpha, seed, students, steps, lr):
    """Single and averaged GD (aim.md 6): mean student error, error of the students' mean
    and its unbiased estimate for infinitely many students."""
    from . import data as aim_data
    from .gd import run_gd

    data = aim_data.generate(d, alpha, rho=rho, seq_len=seq_len, link=link, inv_temp=inv_temp,
                             delta=delta, seed=(seed, 0))
    res = run_gd(data, students=students, steps=steps, lr=lr, seed=(seed, 1))
    return {"n": data.n, "alpha_realised": data.alpha, "mse_single": res.mse_single,
            "mse_averaged": res.mse_averaged,
            "mse_averaged_limit": res.mse_averaged_limit if students > 1 else math.nan,
            "final_loss_max": float(np.max(res.final_loss)),
            "convergence": convergence(iterations=steps, residual=float(np.max(res.grad_norm)),
                                       message=f"{steps} Adam steps")}


# ------------------------------------------------------------------ figures
def _curve_spec(quick: bool) -> dict:
    """MSE vs alpha for T = 2..6 (softmax, rho = 0.5): SE, GAMP-RIE and GD points."""
    Ts = [2, 3] if quick else [2, 3, 4, 5, 6]
    se = {"label": "theory", "computation": "aim.theory_point", "rho": 0.5, "seq_len": Ts,
          "alpha": {"linspace": [0.0, 0.2, 21 if quick else 101]}}
    gamp = {"label": "gamp", "computation": "aim.gamp", "rho": 0.5, "seq_len": Ts,
            "d": 50 if quick else 200, "alpha": [0.03, 0.08] if quick else
            [0.01, 0.02, 0.04, 0.06, 0.09, 0.13, 0.18],
            "seed": {"range": [0, 1 if quick else 3]}, "max_iter": 40 if quick else 150}
    gd = {"label": "gd", "computation": "aim.gd", "rho": 0.5, "seq_len": Ts,
          "d": 30 if quick else 100, "alpha": [0.05] if quick else [0.02, 0.05, 0.1, 0.15],
          "seed": {"range": [0, 1 if quick else 2]}, "students": 4 if quick else 16,
          "steps": 300 if quick else 1000}
    return {"name": "aim.mse_vs_alpha", "run": [se, gamp, gd]}


def _mean_points(ax, table, key, x, sel, color, marker, label):
    xs = table["alpha_realised"][sel] if x is None else x[sel]
    vals = table[key][sel]
    for j, a in enumerate(sorted(set(np.round(xs, 12).tolist()))):
        m = vals[np.isclose(xs, a)]
        m = m[np.isfinite(m)]
        if m.size == 0:
            continue
        err = m.std(ddof=1) / math.sqrt(m.size) if m.size > 1 else 0.0
        ax.errorbar([a], [m.mean()], yerr=[err], fmt=marker, mfc="none", color=color, ms=5,
                    label=label if j == 0 else None)


def _axes_finish(fig, ax, xlabel, title, path):
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(r"MSE $\frac{1}{d}\|\hat S - S\|_F^2$")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return [path]


def _collapse_factor(T):
    return T * T + T - 2


def _render_curves(tables, folder, *, collapse: bool):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    th = tables["theory"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    Ts = sorted(set(th["seq_len"].astype(int).tolist()))
    for i, T in enumerate(Ts):
        scale = _collapse_factor(T) if collapse else 1
        sel = th["seq_len"] == T
        order = np.argsort(th["alpha"][sel])
        ax.plot(th["alpha"][sel][order] * scale, th["mmse"][sel][order], color=f"C{i}",
                label=f"SE T={T}")
        for name, key, marker, what in (("gamp", "mse", "o", "GAMP-RIE"),
                                        ("gd", "mse_averaged", "s", "averaged GD"),
                                        ("gd", "mse_single", "^", "single GD")):
            if name not in tables:
                continue
            t = tables[name]
            ok = np.array([s == "ok" for s in t.columns["status"]])
            sel = ok & (t["seq_len"] == T)
            if sel.any():
                _mean_points(ax, t, key, t["alpha_realised"] * scale, sel, f"C{i}", marker,
                             f"{what} d={int(t['d'][0])}" if i == 0 else None)
    if collapse:
        return _axes_finish(fig, ax, r"$\alpha\,(T^2+T-2)$",
                            "AIM softmax, rho = 0.5: collapse on alpha (T^2 + T - 2)",
                            folder / "aim.collapse.png")
    return _axes_finish(fig, ax, r"$\alpha = n/d^2$", "AIM softmax, rho = 0.5: MSE on S",
                        folder / "aim.mse_vs_alpha.png")


def _collapse_spec(quick: bool) -> dict:
    spec = _curve_spec(quick)
    return {"name": "aim.collapse", "run": spec["run"]}


def _hardmax_spec(quick: bool) -> dict:
    """Hardmax T = 2, rho = 0.5: the corrected (Bayes) SE, the published joint-density SE,
    and GAMP-RIE with the Bayes g_out (aim.md 3.5)."""
    base = {"computation": "aim.theory_point", "rho": 0.5, "link": "hardmax",
            "alpha": [0.0, 0.3, 0.9] if quick else {"linspace": [0.0, 1.0, 51]}}
    return {"name": "aim.hardmax", "run": [
        dict(base, label="bayes"), dict(base, label="published", hardmax_variant="joint-density"),
        {"label": "gamp", "computation": "aim.gamp", "rho": 0.5, "link": "hardmax",
         "d": 30 if quick else 100, "alpha": [0.3] if quick else [0.1, 0.3, 0.6],
         "seed": {"range": [0, 1 if quick else 2]}, "max_iter": 30 if quick else 150}]}


def _render_hardmax(tables, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for label, style, text in (("bayes", "k-", "SE, Bayes g_out (corrected)"),
                               ("published", "r--", "SE, authors' joint-density g_out")):
        t = tables[label]
        order = np.argsort(t["alpha"])
        ax.plot(t["alpha"][order], t["mmse"][order], style, label=text)
    gp = tables["gamp"]
    ok = np.array([s == "ok" for s in gp.columns["status"]])
    _mean_points(ax, gp, "mse", None, ok, "C0", "o", f"GAMP-RIE (Bayes g_out), d={int(gp['d'][0])}")
    return _axes_finish(fig, ax, r"$\alpha = n/d^2$", "AIM hardmax T = 2, rho = 0.5",
                        folder / "aim.hardmax.png")


register_figure("aim.mse_vs_alpha", title="AIM softmax MSE on S vs alpha for T = 2..6: SE, "
                "GAMP-RIE and GD points", spec=_curve_spec,
                render=lambda tables, folder: _render_curves(tables, folder, collapse=False))
register_figure("aim.collapse", title="AIM softmax: the curves of T = 2..6 collapse on "
                "alpha (T^2 + T - 2)", spec=_collapse_spec,
                render=lambda tables, folder: _render_curves(tables, folder, collapse=True))
register_figure("aim.hardmax", title="AIM hardmax T = 2: corrected SE vs the published "
                "(joint-density) SE, with GAMP-RIE", spec=_hardmax_spec, render=_render_hardmax)
