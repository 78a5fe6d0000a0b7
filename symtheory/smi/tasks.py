"""SMI computations and figures for sweeps and ``symtheory reproduce`` (declarations only).

Thin wrappers over :class:`~symtheory.glm.se.state_evolution.StateEvolution` (smi.md Eqs. 13-14),
:func:`~symtheory.glm.se.errors.bayes_error` / :func:`~symtheory.glm.se.errors.plugin_error`
and :func:`~symtheory.glm.gamp.tokens.gamp_tokens` (Algorithm 1) on the declared models
(:func:`~symtheory.smi.deep_attention`, :func:`~symtheory.smi.outer_product`,
:func:`~symtheory.smi.linear_tokens`).  Outputs name overlap entries ``Q{a}{b}``
(1-based, ``a <= b``), so their number depends on the model's ``P``.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.tasks import computation, convergence, register_figure
from . import params as P
from . import registry

#: the model and its channel: the parameters every SMI computation shares
MODEL_PARAMS = P.MODEL_PARAMS
_SHAPE = ("depth", "seq_len", "skip", "inv_temp")
_SHAPE_DEFAULTS = {k: MODEL_PARAMS[k].default for k in _SHAPE}


def build_model(model, depth, seq_len, skip, inv_temp):
    """The declared model (built once per process: its channel is derived symbolically;
    :func:`symtheory.smi.registry.build_model`)."""
    return registry.build_model(model, {"depth": depth, "seq_len": seq_len, "skip": skip,
                                        "inv_temp": inv_temp})


def _check_model(p, task="se", *, channel=True):
    """The model's shape, checked before anything is built (:mod:`.registry`): a shape
    parameter set away from its default for a model it does not shape, a shape the model
    cannot take, and (``channel``) a noiseless link without a reduction are refused."""
    given = {k: p[k] for k in _SHAPE if p[k] != _SHAPE_DEFAULTS[k]}
    values = registry.shape_values(p["model"], given, _SHAPE_DEFAULTS, task=task, spell=str)
    if channel:
        registry.require_noise(p["model"], values, p["noise"], option="noise")
    return registry.MODELS[p["model"]].sizes(dict(_SHAPE_DEFAULTS, **values))


def _check_se(p):
    """The model, then the memory of the frozen samples (before anything is drawn)."""
    registry.check_se_memory(p["samples"], _check_model(p), noise=p["noise"] is not None,
                             sampling=p["sampling"], option="samples")


def _check_teacher(p, task="gamp", *, channel=True):
    """The model, then the teacher data's memory (``n = round(alpha d)`` sequences of
    ``d x M`` tokens and their products, 16 bytes an entry, as :func:`.data.generate`
    checks), before anything runs."""
    from ..core.memory import check_allocation

    M = _check_model(p, task, channel=channel)[1]
    n = max(1, int(round(p["alpha"] * p["d"])))
    check_allocation(n * p["d"] * M * 16,
                     f"alpha x d: the teacher data (n = {n}, d = {p['d']}, M = {M})")


def _model_and_rule(p):
    from ..core.quadrature import TensorRule

    model = build_model(p["model"], p["depth"], p["seq_len"], p["skip"], p["inv_temp"])
    return model, TensorRule(p["quadrature"], p["quadrature_nodes"], 6.0)


def _model_keys(params):
    return {k: params[k] for k in MODEL_PARAMS}


@computation("smi.se_point", params=P.SE, check=_check_se)
def se_point(model, depth, seq_len, skip, inv_temp, noise, quadrature, quadrature_nodes, alpha,
             samples, seed, side_information, start, damping, max_iter, errors, error_samples,
             sampling="auto", target_error=None, observation="auto",
             omega_nodes=P.DEFAULT_OMEGA_NODES):
    """State-evolution fixed point at one alpha (smi.md 6.1), its free entropy (smi.md 4)
    and the Bayes-optimal (Eq. 11) and plug-in errors there."""
    from ..glm.se.errors import bayes_error, plugin_error
    from ..glm.se.state_evolution import StateEvolution

    m, rule = _model_and_rule(locals())
    se = StateEvolution(m, alpha, samples=samples, seed=seed, noise_variance=noise, rule=rule,
                        side_information=side_information, sampling=sampling,
                        observation=observation, omega_nodes=omega_nodes)
    P = m.P
    Q0 = (0.05 if start == "uninformed" else 0.99) * np.eye(P)
    if target_error is None:
        res = se.solve(Q0, damping=damping, max_iter=max_iter)
    else:
        res = se.solve_to_target(target_error, Q0, damping=damping, max_iter=max_iter)
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
               free_entropy=phi, free_entropy_stderr=phi_se, nishimori_gap=res.nishimori_gap,
               method=res.method)
    out["convergence"] = convergence(converged=res.converged, iterations=res.iterations,
                                     residual=res.residual, message=res.message)
    return out


GAMP_PARAMS = P.GAMP


def _teacher(p):
    """The model, its quadrature rule and the seeded teacher data of the parameters ``p``
    (the keys of :data:`GAMP_PARAMS`)."""
    from .data import generate

    m, rule = _model_and_rule(p)
    return m, rule, generate(m, p["d"], p["alpha"], seed=p["seed"],
                             noise_variance=p["noise"] or 0.0)


def _run_gamp(p, callback=None):
    """GAMP (Algorithm 1, smi.md 5) on :func:`_teacher` data: ``(model, data, result)``;
    ``callback(model, data)`` makes the per-row callback (or returns None)."""
    from ..glm.gamp.tokens import gamp_tokens

    m, rule, data = _teacher(p)
    noise, lam, seed = p["noise"], p["side_information"], p["seed"]
    S = None
    if lam > 0:  # side observation S = sqrt(lambda) W* + Xi (as `smi gamp`)
        rng = np.random.default_rng(seed + 1)
        S = np.sqrt(lam) * data.W + rng.standard_normal(data.W.shape)
    res = gamp_tokens(data.X, data.y, m.channel(noise, rule), damping=p["damping"],
                      max_iter=p["max_iter"], tol=p["tol"], seed=seed + 2,
                      init_scale=p["init_scale"], side_information=lam, side_observation=S,
                      truth=data.W, callback=callback and callback(m, data))
    return m, data, res


def _gamp_convergence(res):
    return convergence(converged=res.converged, iterations=res.iterations,
                       residual=res.trace[-1]["change"], message=res.message)


@computation("smi.gamp", params=GAMP_PARAMS, check=_check_teacher)
def gamp_run(model, depth, seq_len, skip, inv_temp, noise, quadrature, quadrature_nodes, d,
             alpha, seed, damping, max_iter, tol, init_scale, side_information):
    """GAMP (Algorithm 1) on seeded teacher data: final teacher overlaps ``M{l}{l}``,
    self overlaps ``Q{l}{l}``, cosines and normalized overlaps ``normalized_overlap{l} =
    W_l . W*_l / |W*_l|^2`` per index row (smi.md 5)."""
    m, data, res = _run_gamp(locals())
    last = res.trace[-1]
    out = {"n": int(data.X.shape[0])}
    for a in range(m.P):
        out[f"M{a + 1}{a + 1}"] = float(last["M"][a, a])
        out[f"Q{a + 1}{a + 1}"] = float(last["Q"][a, a])
        out[f"cosine{a + 1}"] = float(last["cosine"][a])
        # the share of the teacher row recovered: what the SE's Q_ll / rho_ll predicts
        # (M_ll carries the teacher's own norm, rho_ll within rho_ll sqrt(2/d))
        out[f"normalized_overlap{a + 1}"] = float(last["normalized_overlap"][a])
    out["diverged"] = bool(res.diverged)
    out["convergence"] = _gamp_convergence(res)
    return out


@computation("smi.gamp_trace", params=P.GAMP_TRACE, check=_check_teacher)
def gamp_trace(model, depth, seq_len, skip, inv_temp, noise, quadrature, quadrature_nodes, d,
               alpha, seed, damping, max_iter, tol, init_scale, side_information, test_samples):
    """GAMP's trajectory (smi.md 15, Fig. 2 left): per iteration the cosine similarity
    ``|M_ll| / sqrt(Q_ll)`` of each index row with the teacher and the plug-in test error
    ``mean ||g(W* x / sqrt d) - g(W_hat x / sqrt d)||_F^2`` of the iterate on
    ``test_samples`` fresh sequences (the convention of smi.md 10.5, empirical).  Outputs
    ``trace``: JSON ``{"iteration": [...], "cosine1": [...], ..., "test_error": [...]}``
    (a sweep output is a scalar: the trajectory travels as one string); ``cosine{l}``,
    ``test_error``: the last iterate."""
    import json

    errors = []

    def test_error_of_iterates(m, data):
        if not test_samples:
            return None
        rng = np.random.default_rng([seed, 7])  # the test set: its own stream, fixed by seed
        X_test = rng.standard_normal((test_samples, d, m.M))
        y_test = m.g(np.einsum("pd,sdm->spm", data.W, X_test) / np.sqrt(d))

        def record(row):
            y_hat = m.g(np.einsum("pd,sdm->spm", row["W"], X_test) / np.sqrt(d))
            diff = (y_test - y_hat).reshape(test_samples, -1)
            errors.append(float(np.mean(np.sum(diff * diff, axis=1))))
        return record

    m, data, res = _run_gamp(locals(), callback=test_error_of_iterates)
    trace = {"iteration": [int(r["iteration"]) for r in res.trace]}
    for a in range(m.P):
        trace[f"cosine{a + 1}"] = [float(r["cosine"][a]) for r in res.trace]
        trace[f"M{a + 1}{a + 1}"] = [float(r["M"][a, a]) for r in res.trace]
    trace["test_error"] = errors if test_samples else []
    out = {"n": int(data.X.shape[0]), "trace": json.dumps(trace, separators=(",", ":")),
           "test_error": errors[-1] if errors else math.nan, "diverged": bool(res.diverged)}
    out.update({f"cosine{a + 1}": trace[f"cosine{a + 1}"][-1] for a in range(m.P)})
    out["convergence"] = _gamp_convergence(res)
    return out


SGD_PARAMS = P.SGD


def _check_sgd(p):
    import importlib.util

    from ..core.validate import ParameterError

    _check_teacher(p, "sgd", channel=False)      # SGD needs no channel
    if importlib.util.find_spec("jax") is None:
        raise ParameterError("smi.sgd needs JAX: pip install 'symtheory[gd]'")


@computation("smi.sgd", params=SGD_PARAMS, check=_check_sgd)
def sgd_run(model, depth, seq_len, skip, inv_temp, noise, d, alpha, seed, epochs, lr,
            weight_decay_d, batch, repeats, init_scale, record_every, test_samples):
    """Minibatch SGD on a same-architecture student (smi.md 15, Fig. 2 right;
    :func:`symtheory.smi.sgd.sgd_layerwise`): final signed cosine ``cosine{l}`` per layer,
    ``learned{l}`` = first recorded epoch with ``|cos_l| >= 0.8`` (none: never), the test
    error, and ``trace``: JSON ``{"epoch": [...], "cosine1": [...], ..., "test_error":
    [...], "train_loss": [...]}``.  A fixed number of epochs: ``converged`` does not apply;
    ``residual`` is the final training error per sequence."""
    import json

    from .sgd import epoch_learned, sgd_layerwise

    m = build_model(model, depth, seq_len, skip, inv_temp)
    res = sgd_layerwise(m, d, alpha, seed=seed, epochs=epochs, lr=lr,
                        weight_decay=weight_decay_d / d, batch=batch, repeats=repeats,
                        init_scale=init_scale, record_every=record_every,
                        test_samples=test_samples, noise_variance=noise or 0.0)
    trace = {"epoch": res.epochs.tolist()}
    for a in range(m.P):
        trace[f"cosine{a + 1}"] = res.cosine[:, a].tolist()
    trace["test_error"] = res.test_error.tolist()
    trace["train_loss"] = res.train_loss.tolist()
    out = {"n": res.params["n"], "trace": json.dumps(trace, separators=(",", ":")),
           "test_error": float(res.test_error[-1]), "diverged": res.diverged}
    learned = epoch_learned(res, 0.8)
    for a in range(m.P):
        out[f"cosine{a + 1}"] = float(res.cosine[-1, a])
        out[f"learned{a + 1}"] = learned[a]
    out["convergence"] = convergence(iterations=int(res.epochs[-1]),
                                     residual=float(res.train_loss[-1]), message=res.message)
    return out


# ------------------------------------------------------------------ figures
def _save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


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
    path = _save(plt, fig, folder / "smi.se_gamp.png")
    return [path]


def _gamp_trace_spec(quick: bool) -> dict:
    """GAMP trajectories at alpha = 1.2 (smi.md 15, Fig. 2 left: d = 1000, the reference's
    ``AMP_BO_2w`` runs), two seeds.  ``quick``: d = 300 with 20 quadrature nodes per axis
    -- at d <= 200 (12-16 nodes) layer 1 is not found within 40 iterations."""
    return {"name": "smi.gamp_trace", "run": [{
        "label": "trace", "computation": "smi.gamp_trace", "depth": 2, "seq_len": 2,
        "alpha": 1.2, "d": 300 if quick else 1000, "seed": {"range": [0, 2]},
        "quadrature_nodes": 20 if quick else 30, "max_iter": 40 if quick else 60,
        "test_samples": 500 if quick else 1000}]}


def trace_rows(table, x: str, path) -> list:
    """The ``trace`` JSON of the ``ok`` rows of ``table`` (``smi.gamp_trace``: ``x =
    "iteration"``, ``smi.sgd``: ``"epoch"``) as one row per (seed, ``x``), also written as
    the CSV ``path``."""
    import json

    from ..core.table import Table

    rows = []
    for r in table.rows():
        if r.get("status") != "ok":
            continue
        tr = json.loads(r["trace"])
        keys = [k for k in tr if k != x and len(tr[k]) == len(tr[x])]
        for i, step in enumerate(tr[x]):
            rows.append(dict({"d": r["d"], "alpha": r["alpha"], "seed": r["seed"], x: step},
                             **{k: tr[k][i] for k in keys}))
    Table({k: [r.get(k) for r in rows] for k in rows[0]}).to_csv(path)
    return rows


def _trace_figure(table, x, path_csv):
    """The long CSV of the trajectories, a two-panel figure and the rows per seed:
    ``(plt, fig, ax, ax_err, rows, [(seed, its rows, its x values), ...])``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = trace_rows(table, x, path_csv)
    fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    per_seed = []
    for seed in sorted({r["seed"] for r in rows}):
        sel = [r for r in rows if r["seed"] == seed]
        per_seed.append((seed, sel, [r[x] for r in sel]))
    return plt, fig, ax, ax_err, rows, per_seed


def _render_gamp_trace(tables, folder):
    path_csv = folder / "smi.gamp_trace.iterations.csv"
    plt, fig, ax, ax_err, rows, per_seed = _trace_figure(tables["trace"], "iteration", path_csv)
    for j, (seed, sel, it) in enumerate(per_seed):
        for layer in (1, 2):
            ax.plot(it, [r[f"cosine{layer}"] for r in sel], color=f"C{layer - 1}",
                    ls=("-", "--", ":")[j % 3], marker="o", ms=2.5,
                    label=f"layer {layer}, seed {seed}")
        if "test_error" in sel[0]:
            ax_err.semilogy(it, [r["test_error"] for r in sel], color="k", ls=("-", "--", ":")[j % 3],
                            marker="o", ms=2.5, label=f"seed {seed}")
    d, alpha = int(rows[0]["d"]), float(rows[0]["alpha"])
    ax.set_xlabel("GAMP iteration")
    ax.set_ylabel(r"cosine similarity $|M_{ll}|/\sqrt{Q_{ll}}$")
    ax.set_title(rf"two-layer tied softmax attention, $\alpha={alpha:g}$, d = {d}", fontsize=9)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax_err.set_xlabel("GAMP iteration")
    ax_err.set_ylabel(r"plug-in test error $\|g(Z) - g(\hat Z)\|_F^2$")
    ax_err.set_title("on fresh sequences (smi.md 10.5)", fontsize=9)
    ax_err.grid(alpha=0.3)
    ax_err.legend(fontsize=7)
    path = _save(plt, fig, folder / "smi.gamp_trace.png")
    return [path_csv, path]


def _sgd_spec(quick: bool) -> dict:
    """smi.md 15 (GD_2w.ipynb): d = 500, alpha = 15, 1700 epochs, lr 15, weight decay
    0.07/d, batches of 200 used 3 times, init 0.9 N(0, 1); 4 seeds (the notebook: 8).
    ``quick``: d = 100, 40 epochs, 2 seeds."""
    return {"name": "smi.sgd_layerwise", "run": [{
        "label": "sgd", "computation": "smi.sgd", "depth": 2, "seq_len": 2, "skip": 1.0,
        "d": 100 if quick else 500, "alpha": 15.0, "epochs": 40 if quick else 1700,
        "seed": {"range": [0, 2 if quick else 4]}, "record_every": 1,
        "test_samples": 500 if quick else 1000}]}


def _render_sgd(tables, folder):
    path_csv = folder / "smi.sgd_layerwise.epochs.csv"
    plt, fig, ax, ax_err, rows, per_seed = _trace_figure(tables["sgd"], "epoch", path_csv)
    for j, (seed, sel, ep) in enumerate(per_seed):
        for layer in (1, 2):
            # the model is even in each layer: W_l and -W_l are equally good
            ax.plot(ep, [abs(r[f"cosine{layer}"]) for r in sel], color=f"C{layer - 1}", lw=1,
                    alpha=0.8, label=f"layer {layer}" if j == 0 else None)
        ax_err.plot(ep, [r["test_error"] for r in sel], color="k", lw=1, alpha=0.8,
                    label="test" if j == 0 else None)
        ax_err.plot(ep, [r["train_loss"] for r in sel], color="0.6", lw=1, alpha=0.8,
                    label="train" if j == 0 else None)
    d, alpha = int(rows[0]["d"]), float(rows[0]["alpha"])
    for a in (ax, ax_err):
        a.set_xscale("symlog", linthresh=1)
        a.set_xlabel("epoch")
        a.grid(alpha=0.3)
    ax.set_ylabel(r"$|\cos_l| = |W_l \cdot W^*_l| / (\sqrt{d}\, \|W_l\|)$")
    # the notebook's cosine divides by |W_l| only (|W*_l|^2/d = 1 +- sqrt(2/d)): may pass 1
    ax.set_ylim(0, max(1.02, max(abs(r[f"cosine{k}"]) for r in rows for k in (1, 2)) + 0.02))
    ax.set_title(rf"SGD, two-layer tied softmax attention, d = {d}, $\alpha={alpha:g}$, "
                 f"{len(per_seed)} seeds", fontsize=9)
    ax.legend(fontsize=8)
    ax_err.set_yscale("log")
    ax_err.set_ylabel(r"error $\|g(\hat Z) - y\|_F^2$ per sequence")
    ax_err.legend(fontsize=8)
    path = _save(plt, fig, folder / "smi.sgd_layerwise.png")
    return [path_csv, path]


register_figure("smi.se_gamp", title="SMI two-layer attention: SE overlaps on a grid of alpha "
                "with GAMP points at finite d", spec=_se_gamp_spec, render=_render_se_gamp)
register_figure("smi.gamp_trace", title="SMI two-layer attention: GAMP cosine similarity per "
                "layer and test error vs iteration at alpha = 1.2, two seeds",
                spec=_gamp_trace_spec, render=_render_gamp_trace)
register_figure("smi.sgd_layerwise", title="SMI two-layer attention trained by minibatch SGD "
                "(smi.md 15, Fig. 2 right): cosine similarity per layer vs epoch",
                spec=_sgd_spec, render=_render_sgd)
