"""SMI computations and figures for sweeps and ``symtheory reproduce`` (declarations only).

Thin wrappers over :class:`~symtheory.glm.se.StateEvolution` (smi.md Eqs. 13-14),
:func:`~symtheory.glm.errors.bayes_error` / :func:`~symtheory.glm.errors.plugin_error`
and :func:`~symtheory.glm.gamp_tokens.gamp_tokens` (Algorithm 1) on the declared models
(:func:`~symtheory.smi.deep_attention`, :func:`~symtheory.smi.outer_product`,
:func:`~symtheory.smi.linear_tokens`).  Outputs name overlap entries ``Q{a}{b}``
(1-based, ``a <= b``), so their number depends on the model's ``P``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..core.tasks import Param, computation, convergence, register_figure

MODELS = ("attention", "linear-attention", "outer-product", "linear-tokens")

#: the model and its channel: the parameters every SMI computation shares
MODEL_PARAMS = {
    "model": Param.choice(*MODELS, default="attention"),
    "depth": Param.integer(low=1, default=2, doc="attention layers (attention models)"),
    "seq_len": Param.integer(low=1, default=2, doc="tokens per sequence M"),
    "skip": Param.real(low=0, low_open=True, default=1.0, doc="skip strength c"),
    "inv_temp": Param.real(low=0, low_open=True, default=1.0, doc="softmax inverse temperature"),
    "noise": Param.real(low=0, low_open=True, default=None, nullable=True,
                        doc="Gaussian output-noise variance (none: noiseless)"),
    "quadrature": Param.choice("gauss-hermite", "uniform", default="gauss-hermite"),
    "quadrature_nodes": Param.integer(low=2, default=30, doc="nodes per axis"),
}


@functools.lru_cache(maxsize=None)
def build_model(model, depth, seq_len, skip, inv_temp):
    """The declared model (built once per process: its channel is derived symbolically)."""
    from . import deep_attention, linear_tokens, outer_product

    if model in ("attention", "linear-attention"):
        return deep_attention(depth, seq_len, 1, skip, inv_temp,
                              "softmax" if model == "attention" else "linear")
    return outer_product(seq_len) if model == "outer-product" else linear_tokens(seq_len)


def _model_and_rule(p):
    from ..core.quadrature import TensorRule

    model = build_model(p["model"], p["depth"], p["seq_len"], p["skip"], p["inv_temp"])
    return model, TensorRule(p["quadrature"], p["quadrature_nodes"], 6.0)


def _model_keys(params):
    return {k: params[k] for k in MODEL_PARAMS}


@computation("smi.se_point", params=dict(MODEL_PARAMS, **{
    "alpha": Param.real(low=0, low_open=True, doc="n/d"),
    "samples": Param.integer(low=100, default=20000, doc="frozen Monte-Carlo samples"),
    "seed": Param.integer(low=0, default=0),
    "side_information": Param.real(low=0, default=0.0),
    "start": Param.choice("uninformed", "informed", default="uninformed",
                          doc="Q0 = 0.05 I or 0.99 I"),
    "damping": Param.real(low=0, high=1, high_open=True, default=0.2, doc="weight of the old iterate"),
    "max_iter": Param.integer(low=1, default=300),
    "errors": Param.flag(default=True, doc="Bayes-optimal and plug-in errors at the fixed point"),
    "error_samples": Param.integer(low=100, default=200000)}))
def se_point(model, depth, seq_len, skip, inv_temp, noise, quadrature, quadrature_nodes, alpha,
             samples, seed, side_information, start, damping, max_iter, errors, error_samples):
    """State-evolution fixed point at one alpha (smi.md 6.1), its free entropy (smi.md 4)
    and the Bayes-optimal (Eq. 11) and plug-in errors there."""
    from ..glm.errors import bayes_error, plugin_error
    from ..glm.se import StateEvolution

    m, rule = _model_and_rule(locals())
    se = StateEvolution(m, alpha, samples=samples, seed=seed, noise_variance=noise, rule=rule,
                        side_information=side_information)
    P = m.P
    res = se.solve((0.05 if start == "uninformed" else 0.99) * np.eye(P), damping=damping,
                   max_iter=max_iter)
    out = {f"Q{a + 1}{b + 1}": float(res.Q[a, b]) for a in range(P) for b in range(a, P)}
    out.update({f"Q{a + 1}{a + 1}_stderr": float(res.Q_stderr[a, a]) for a in range(P)})
    nan = math.nan
    bo = pl = None
    if errors:
        Qs = 0.5 * (res.Q + res.Q.T)
        bo = bayes_error(m, Qs, samples=error_samples, seed=seed)
        pl = plugin_error(m, Qs, samples=error_samples, seed=seed)
    phi, phi_se = se.free_entropy(res.Q)
    out.update(bo_error=bo.error if bo else nan, bo_stderr=bo.stderr if bo else nan,
               plugin_error=pl.error if pl else nan, plugin_stderr=pl.stderr if pl else nan,
               free_entropy=phi, free_entropy_stderr=phi_se, nishimori_gap=res.nishimori_gap)
    out["convergence"] = convergence(converged=res.converged, iterations=res.iterations,
                                     residual=res.residual, message=res.message)
    return out


@computation("smi.gamp", params=dict(MODEL_PARAMS, **{
    "d": Param.integer(low=2, doc="token dimension"),
    "alpha": Param.real(low=0, low_open=True, doc="n/d (n = round(alpha d))"),
    "seed": Param.integer(low=0, doc="seed of the teacher data; the start uses seed + 2"),
    "damping": Param.real(low=0, high=1, low_open=True, default=1.0, doc="weight of the new iterate"),
    "max_iter": Param.integer(low=1, default=40),
    "tol": Param.real(low=0, low_open=True, default=1e-6),
    "init_scale": Param.real(low=0, low_open=True, default=0.1, doc="std of the random start"),
    "side_information": Param.real(low=0, default=0.0)}))
def gamp_run(model, depth, seq_len, skip, inv_temp, noise, quadrature, quadrature_nodes, d,
             alpha, seed, damping, max_iter, tol, init_scale, side_information):
    """GAMP (Algorithm 1) on seeded teacher data: final teacher overlaps ``M{l}{l}``,
    self overlaps ``Q{l}{l}`` and cosines per index row (smi.md 5)."""
    from ..glm.gamp_tokens import gamp_tokens
    from .data import generate

    m, rule = _model_and_rule(locals())
    data = generate(m, d, alpha, seed=seed, noise_variance=noise or 0.0)
    S = None
    if side_information > 0:  # side observation S = sqrt(lambda) W* + Xi (as `smi gamp`)
        rng = np.random.default_rng(seed + 1)
        S = np.sqrt(side_information) * data.W + rng.standard_normal(data.W.shape)
    res = gamp_tokens(data.X, data.y, m.channel(noise, rule), damping=damping, max_iter=max_iter,
                      tol=tol, seed=seed + 2, init_scale=init_scale,
                      side_information=side_information, side_observation=S, truth=data.W)
    last = res.trace[-1]
    out = {"n": int(data.X.shape[0])}
    for a in range(m.P):
        out[f"M{a + 1}{a + 1}"] = float(last["M"][a, a])
        out[f"Q{a + 1}{a + 1}"] = float(last["Q"][a, a])
        out[f"cosine{a + 1}"] = float(last["cosine"][a])
    out["diverged"] = bool(res.diverged)
    out["convergence"] = convergence(converged=res.converged, iterations=res.iterations,
                                     residual=last["change"], message=res.message)
    return out


# ------------------------------------------------------------------ figures
def _se_gamp_spec(quick: bool) -> dict:
    """Two-layer tied softmax attention (M = 2, c = 1), the setting of smi.md Figs. 1-2.
    ``quick`` shrinks everything (Monte-Carlo samples, quadrature, d, grids) to run in
    the test suite; its overlaps carry visible Monte-Carlo and finite-size error."""
    se = {"label": "se", "computation": "smi.se_point", "depth": 2, "seq_len": 2,
          "alpha": [0.3, 0.8, 1.2] if quick else [round(0.1 * k, 4) for k in range(1, 17)],
          "samples": 300 if quick else 5000, "quadrature_nodes": 12 if quick else 30,
          "errors": not quick, "max_iter": 100 if quick else 300}
    gamp = {"label": "gamp", "computation": "smi.gamp", "depth": 2, "seq_len": 2,
            "d": 100 if quick else 1000,
            "alpha": [0.8, 1.2] if quick else [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4],
            "seed": {"range": [0, 1 if quick else 3]}, "quadrature_nodes": 12 if quick else 30,
            "max_iter": 30 if quick else 40}
    return {"name": "smi.se_gamp", "run": [se, gamp]}


def _render_se_gamp(tables, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    se, gp = tables["se"], tables["gamp"]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    order = np.argsort(se["alpha"])
    for i, q in enumerate(("Q11", "Q22")):
        ax.errorbar(se["alpha"][order], se[q][order], yerr=se[q + "_stderr"][order], color=f"C{i}",
                    marker="o", ms=3, label=f"SE ${q[0]}_{{{q[1:]}}}$ (layer {i + 1})")
        a = gp["alpha"]
        for j, x in enumerate(sorted(set(a.tolist()))):
            sel = a == x
            # |M|: the model is even in each layer, so GAMP learns W* up to a sign per layer
            m = np.abs(gp[f"M{i + 1}{i + 1}"][sel])
            err = m.std(ddof=1) / math.sqrt(m.size) if m.size > 1 else 0.0
            ax.errorbar([x], [m.mean()], yerr=[err], fmt="s", mfc="none", color=f"C{i}", ms=6,
                        label=f"GAMP $|M_{{{i + 1}{i + 1}}}|$, d = {int(gp['d'][0])}"
                        if j == 0 else None)
    ax.set_xlabel(r"$\alpha = n/d$")
    ax.set_ylabel("overlap")
    ax.set_title("SMI: two-layer tied softmax attention, SE and GAMP", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = folder / "smi.se_gamp.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return [path]


register_figure("smi.se_gamp", title="SMI two-layer attention: SE overlaps on a grid of alpha "
                "with GAMP points at finite d", spec=_se_gamp_spec, render=_render_se_gamp)
