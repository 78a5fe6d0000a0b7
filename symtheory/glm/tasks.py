"""glm computations and figures for sweeps and ``symtheory reproduce`` (declarations only).

Scalar generalized linear models ``y ~ P_out(. | x . w / sqrt(d))`` with a separable
prior: their first-order phase transitions (:func:`~symtheory.glm.thresholds.phases.
phase_transitions`), points of the state-evolution fixed-point curve
(:class:`~symtheory.glm.se.scalar_glm.ScalarGlmSE`) and GAMP on seeded teacher-student
instances (:func:`~symtheory.glm.gamp.loop.gamp`).  The models are named by a prior and a
channel:

* priors: ``rademacher`` (``w = +-1``), ``gauss-bernoulli`` (``w = 0`` with probability
  ``1 - rho``, else ``N(0, 1/rho)``: ``E w^2 = 1`` at every ``rho``), ``gaussian``;
* channels: ``sign`` (``y = sign(z)``, noiseless) and ``door`` (the symmetric door ``y =
  sign(|z| - K)``, ``K = Phi^{-1}(3/4)``: ``P(y = 1) = 1/2`` since ``E z^2 = E w^2 = 1``).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..core.tasks import (
    DAMPING,
    REQUIRED,
    SEED,
    Param,
    computation,
    convergence,
    register_figure,
)

PRIORS = ("rademacher", "gauss-bernoulli", "gaussian")
CHANNELS = ("sign", "door")

PRIOR = Param.choice(*PRIORS, default="rademacher",
                     doc="weight prior: rademacher (+-1), gauss-bernoulli (0 w.p. 1 - rho, "
                         "else N(0, 1/rho)), gaussian (N(0, 1)); E w^2 = 1 for all")
RHO = Param.real(low=0, high=1, low_open=True, default=1.0,
                 doc="density of the gauss-bernoulli prior (fraction of non-zero weights; "
                     "ignored by the other priors)",
                 why="a density: rho = 1 is the Gaussian prior")
CHANNEL = Param.choice(*CHANNELS, default="sign",
                       doc="output channel: sign (y = sign(z)) or door (y = sign(|z| - K), "
                           "K = Phi^-1(3/4)), both noiseless")
POINTS = Param.integer(low=10, high=1000, default=90,
                       doc="points of the fixed-point curve alpha(V) sampled before the "
                           "extrema and crossings are refined")
V_FRACTION = Param.real(low=0, high=1, low_open=True, high_open=True, metavar="F",
                        doc="error of the fixed point as a fraction of the prior variance, "
                            "V = F v_max")
D = Param.integer(low=10, high=20000, doc="dimension d of the weights (n = round(alpha d))",
                  why="the dense design is n x d float64")
ALPHA = Param.real(low=0, low_open=True, high=100, metavar="A", doc="sample ratio n/d")

THRESHOLDS = {"prior": PRIOR, "rho": RHO, "channel": CHANNEL, "points": POINTS}
CURVE = {"prior": PRIOR, "rho": RHO, "channel": CHANNEL, "v_fraction": V_FRACTION}
GAMP = {"prior": PRIOR, "rho": RHO, "channel": CHANNEL, "d": D, "alpha": ALPHA,
        "seed": SEED.with_default(REQUIRED, doc="seed of the instance (teacher, design, "
                                                "labels) and of GAMP's random start"),
        "damping": DAMPING.with_default(0.3, doc="damping of GAMP's messages (weight of the "
                                                 "previous iterate)"),
        "max_iter": Param.integer(low=1, high=100000, default=300, doc="iteration cap"),
        "init_scale": Param.real(low=0, low_open=True, default=1e-3,
                                 doc="standard deviation of the random start W0 (an "
                                     "uninformed start: its overlap with the teacher is "
                                     "O(init_scale / sqrt(d)))"),
        "restore_best": Param.flag(default=True,
                                   doc="stop when GAMP's measured noise blows up and return "
                                       "the iterate of least measured noise (chosen without "
                                       "the teacher)")}

#: added to GAMP's variance where the channel uses it: at exact recovery (a Rademacher
#: teacher above alpha_alg) V reaches 0, which the channel's Z_out(y; omega, V) refuses
VARIANCE_FLOOR = 1e-12


# ------------------------------------------------------------------ models
@functools.lru_cache(maxsize=None)
def make_prior(prior: str, rho: float):
    from .factors import separable_prior as S

    if prior == "rademacher":
        return S.rademacher()
    if prior == "gaussian":
        return S.gaussian()
    if rho >= 1:
        return S.gaussian()
    import sympy as sp

    r = sp.nsimplify(rho)
    return S.gauss_bernoulli(r, variance=1 / r)


@functools.lru_cache(maxsize=None)
def make_channel(channel: str):
    """``(channel, its parameter values)``."""
    from .factors.scalar import likelihood_channel, sign_channel

    if channel == "sign":
        return sign_channel(noise=False), ()
    import sympy as sp

    y, u = sp.symbols("y u", real=True)
    K = sp.Symbol("K", positive=True)
    lik = sp.Piecewise((sp.Heaviside(u - K) + sp.Heaviside(-u - K), sp.Eq(y, 1)),
                       (sp.Heaviside(K - u) * sp.Heaviside(u + K), sp.Eq(y, -1)), (0, True))
    # the declaration of tests/glm/test_phases.py (its channel checks pass there)
    ch = likelihood_channel("toy_door", lik, y, u, params=(K,), y_levels=(-1, 1),
                            check_ranges={K: (0.2, 2.0)})
    return ch, (float(door_half_width()),)


def door_half_width(p_outside=1 / 2):
    """The ``K`` with ``P(|z| > K) = p_outside`` for ``z ~ N(0, 1)``, solved by SymPy from
    ``2 int_K^inf N(z; 0, 1) dz = p_outside``: ``sqrt(2) erfcinv(p_outside)`` (exact)."""
    import sympy as sp

    p = sp.nsimplify(p_outside)
    if not (p.is_number and 0 < p < 1):
        raise ValueError(f"p_outside must be in (0, 1), got {p_outside}")
    z = sp.Symbol("z", real=True)
    K = sp.Symbol("K", positive=True)
    tail = 2 * sp.integrate(sp.exp(-z ** 2 / 2) / sp.sqrt(2 * sp.pi), (z, K, sp.oo))
    roots = sp.solve(sp.Eq(tail, p), K)
    if len(roots) != 1:
        raise ArithmeticError(f"expected one half-width for p_outside = {p}, got {roots}")
    return roots[0]


def make_se(prior, rho, channel):
    from .se.scalar_glm import ScalarGlmSE

    ch, params = make_channel(channel)
    return ScalarGlmSE(ch, make_prior(prior, rho), params)


def sample_prior(prior, rho, d, rng):
    if prior == "rademacher":
        return rng.choice([-1.0, 1.0], size=d)
    if prior == "gaussian" or rho >= 1:
        return rng.standard_normal(d)
    return (rng.random(d) < rho) * rng.standard_normal(d) / math.sqrt(rho)


# ------------------------------------------------------------------ computations
@computation("glm.phase_thresholds", params=THRESHOLDS,
             outputs=("alpha_c", "alpha_c_error", "alpha_alg", "alpha_alg_error", "alpha_it",
                      "alpha_it_error", "V_alg", "map_slope", "first_order", "perfect_recovery"))
def thresholds(prior, rho, channel, points):
    """The weak-recovery (``alpha_c``), algorithmic (spinodal ``alpha_alg``) and
    information-theoretic (``alpha_IT``) thresholds of a scalar GLM from its state-
    evolution fixed-point curve (:func:`~symtheory.glm.thresholds.phases.
    phase_transitions`); NaN where a threshold does not exist (no first-order transition:
    ``first_order`` false)."""
    from .thresholds.phases import phase_transitions

    rep = phase_transitions(make_se(prior, rho, channel), points=points)
    found = {t.kind: t for t in rep.transitions}

    def val(kind, attr="value"):
        t = found.get(kind)
        return math.nan if t is None else float(getattr(t, attr))

    return {"alpha_c": val("alpha_c"), "alpha_c_error": val("alpha_c", "error"),
            "alpha_alg": val("alpha_alg"), "alpha_alg_error": val("alpha_alg", "error"),
            "alpha_it": val("alpha_IT"), "alpha_it_error": val("alpha_IT", "error"),
            "V_alg": val("alpha_alg", "V"), "map_slope": val("alpha_alg", "map_slope"),
            "first_order": "alpha_IT" in found, "perfect_recovery": bool(rep.perfect_recovery),
            "convergence": convergence(converged=rep.converged, message="; ".join(
                m for m in (rep.method, rep.message) if m))}


@computation("glm.se_curve_point", params=CURVE,
             outputs=("V", "q", "alpha", "phi", "map_slope", "stable"))
def curve_point(prior, rho, channel, v_fraction):
    """The state-evolution fixed point with error ``V = v_fraction v_max``: the ``alpha``
    it belongs to (``alpha(V) = mmse^{-1}(V)/Psi(V)``), its overlap ``q``, free entropy
    ``phi`` and the SE map's slope ``T'(V)`` there (``stable``: slope < 1)."""
    se = make_se(prior, rho, channel)
    pt = se.point(v_fraction * se.v_max)
    slope = se.map_slope(pt["alpha"], pt["V"])
    return {"V": pt["V"], "q": pt["q"], "alpha": pt["alpha"], "phi": pt["phi"],
            "map_slope": slope, "stable": bool(slope < 1),
            "convergence": convergence(converged=True, message="point of the fixed-point "
                                       "curve: q_hat = mmse^-1(V) by Brent to 1e-15, "
                                       "quadrature rtol 1e-12")}


@computation("glm.gamp", params=GAMP,
             outputs=("n", "overlap", "mse", "stopped", "diverged"))
def gamp_point(prior, rho, channel, d, alpha, seed, damping, max_iter, init_scale,
               restore_best):
    """GAMP on one seeded teacher-student instance: i.i.d. standard Gaussian ``x``,
    teacher ``w`` from the prior, ``y`` from the channel at ``z = x . w / sqrt(d)``, a
    random start of scale ``init_scale``; the final overlap ``w_hat . w / d`` and error
    ``mean (w_hat - w)^2``.  The teacher is used for these two numbers only: the early
    stop of ``restore_best`` watches GAMP's own measured noise."""
    from .gamp.loop import DenseOperator, gamp

    rng = np.random.default_rng([seed, d, round(alpha * 1e6)])
    n = int(round(alpha * d))
    w = sample_prior(prior, rho, d, rng)
    Phi = rng.standard_normal((n, d)) / math.sqrt(d)
    ch, params = make_channel(channel)
    y = ch.sample(Phi @ w, rng, *params)
    with np.errstate(invalid="ignore", divide="ignore"):
        # at exact recovery g_out and A vanish together (0/0 in the measured noise, which
        # is then NaN and never the minimum): the run still stops by its change
        res = gamp(DenseOperator(Phi), y, ch, make_prior(prior, rho), channel_params=params,
                   max_iter=max_iter, damping=damping, restore_best=restore_best,
                   variance_floor=VARIANCE_FLOOR,
                   W0=init_scale * rng.standard_normal((1, d)), warn_unconverged=False)
    wh = res.estimate
    return {"n": n, "overlap": float(wh @ w / d), "mse": float(np.mean((wh - w) ** 2)),
            "stopped": bool(res.stopped), "diverged": bool(res.diverged),
            "convergence": convergence(converged=res.converged, iterations=res.iterations,
                                       residual=res.residual, message=res.message)}


# ------------------------------------------------------------------ figures
def _ok(table):
    return np.array([s == "ok" for s in table.columns["status"]])


def _col(table, name, mask=None):
    x = np.array([math.nan if v is None else v for v in table.columns[name]], dtype=float)
    return x if mask is None else x[mask]


PERCEPTRON = {"prior": "rademacher", "channel": "sign"}


def _perceptron_spec(quick: bool) -> dict:
    return {"name": "glm.perceptron_gamp", "run": [
        dict(PERCEPTRON, label="thresholds", computation="glm.phase_thresholds"),
        dict(PERCEPTRON, label="curve", computation="glm.se_curve_point",
             v_fraction={"geomspace": [0.7, 2e-3, 30 if quick else 150]}),
        dict(PERCEPTRON, label="gamp", computation="glm.gamp", d=400 if quick else 2000,
             alpha={"linspace": [1.0, 2.0, 6 if quick else 21]},
             seed={"range": [0, 1 if quick else 2]}, damping=0.3, max_iter=300,
             init_scale=1e-3, restore_best=True)]}


def _render_perceptron(tables, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thr, cur, gp = tables["thresholds"], tables["curve"], tables["gamp"]
    a_it, a_alg = float(_col(thr, "alpha_it")[0]), float(_col(thr, "alpha_alg")[0])
    ok = _ok(cur)
    a, q = _col(cur, "alpha", ok), _col(cur, "q", ok)
    stable = np.array(cur.columns["stable"], dtype=bool)[ok]
    V = _col(cur, "V", ok)
    lo, hi = 0.95, 2.05
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    ax.axvspan(a_it, a_alg, color="C1", alpha=0.18, lw=0,
               label=r"hard phase $[\alpha_{IT}, \alpha_{alg}]$")
    ax.axvline(a_it, color="C1", ls="--", lw=1)
    ax.axvline(a_alg, color="C3", ls="--", lw=1)
    ymin = 0.45
    ax.text(a_it, ymin + 0.01, rf" $\alpha_{{IT}} = {a_it:.4f}$", rotation=90, va="bottom",
            ha="right", fontsize=8, color="C1")
    ax.text(a_alg, ymin + 0.01, rf" $\alpha_{{alg}} = {a_alg:.4f}$", rotation=90, va="bottom",
            ha="right", fontsize=8, color="C3")
    unin = stable & (V > float(_col(thr, "V_alg")[0]) * 0.999)
    order = np.argsort(a[unin])
    ax.plot(a[unin][order], q[unin][order], color="C0", lw=2,
            label="SE: uninformed stable branch")
    uns = ~stable
    order = np.argsort(a[uns])
    ax.plot(a[uns][order], q[uns][order], color="gray", ls=":", lw=1.5,
            label="SE: unstable fixed points")
    ax.plot([lo, a_it], [1, 1], color="C2", ls="--", lw=1.5)
    ax.plot([a_it, hi], [1, 1], color="C2", lw=2,
            label="SE: informed branch (perfect recovery, $m = 1$;\n"
                  r"dashed: metastable below $\alpha_{IT}$)")
    okg = _ok(gp)
    ga, gm, gs = _col(gp, "alpha", okg), _col(gp, "overlap", okg), _col(gp, "seed", okg)
    d = int(_col(gp, "d")[0])
    for k, s in enumerate(sorted(set(gs.tolist()))):
        sel = gs == s
        ax.plot(ga[sel] + (k - 0.5) * 0.008, gm[sel], "o^sD"[k % 4], color="k",
                mfc="none" if k else "k", ms=5, ls="none",
                label=f"GAMP, d = {d}, seed {int(s)}")
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, 1.04)
    ax.set_xlabel(r"sample ratio $\alpha = n/d$")
    ax.set_ylabel(r"overlap $m = \hat w \cdot w^* / d$")
    ax.set_title("Binary perceptron, Rademacher teacher and prior, $y = $sign$(x\\cdot w/\\sqrt{d})$:"
                 "\nGAMP from a random start vs state evolution", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")
    fig.tight_layout()
    path = folder / "glm.perceptron_gamp.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return [path]


DOOR_RHOS = [0.02, 0.05, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 0.9]
SIGN_RHOS = [0.01, 0.05, 0.1, 0.3, 0.6]


def _sparse_spec(quick: bool) -> dict:
    runs = [{"label": "door", "computation": "glm.phase_thresholds", "prior": "gauss-bernoulli",
             "channel": "door", "rho": [0.1, 0.6] if quick else DOOR_RHOS}]
    if not quick:
        runs.append({"label": "sign", "computation": "glm.phase_thresholds",
                     "prior": "gauss-bernoulli", "channel": "sign", "rho": SIGN_RHOS})
    return {"name": "glm.sparse_phase_diagram", "run": runs}


def _render_sparse(tables, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = tables["door"]
    ok = _ok(t)
    order = np.argsort(_col(t, "rho", ok))
    rho = _col(t, "rho", ok)[order]
    a_c = _col(t, "alpha_c", ok)[order]
    a_it = _col(t, "alpha_it", ok)[order]
    a_alg = _col(t, "alpha_alg", ok)[order]
    first = np.array(t.columns["first_order"], dtype=bool)[ok][order]
    # no first-order transition: the hard phase has zero width, at alpha_c
    lower = np.where(first, a_it, a_c)
    upper = np.where(first, a_alg, a_c)
    top = 1.15 * float(np.nanmax(np.concatenate([upper, a_c])))
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    ax.fill_between(rho, 0, lower, color="0.8", lw=0)
    ax.fill_between(rho, lower, upper, color="C1", alpha=0.35, lw=0)
    ax.fill_between(rho, upper, top, color="C2", alpha=0.18, lw=0)
    ax.plot(rho[first], a_it[first], "o-", color="C1", ms=4, label=r"$\alpha_{IT}$")
    ax.plot(rho[first], a_alg[first], "s-", color="C3", ms=4, label=r"$\alpha_{alg}$ (spinodal)")
    ax.plot(rho, a_c, "^--", color="k", ms=4, lw=1,
            label=r"$\alpha_c$ (trivial fixed point unstable)")
    if (~first).any():
        ax.plot(rho[~first], a_c[~first], "x", color="C0", ms=8, mew=2,
                label="no first-order transition\n(hard phase of zero width)")
    xm = float(rho[len(rho) // 2]) if len(rho) > 2 else float(rho.mean())
    ax.text(0.97 * rho.max(), 0.5 * float(np.nanmin(lower)), "impossible",
            ha="right", fontsize=10)
    ax.text(0.97 * rho.max(), 0.5 * (float(np.nanmax(upper)) + top), "easy (AMP succeeds)",
            ha="right", fontsize=10)
    if first.any():
        k = int(np.argmax(upper - lower))
        ax.annotate("hard", xy=(rho[k], 0.5 * (lower[k] + upper[k])),
                    xytext=(rho[k] + 0.12, 0.5 * (lower[k] + upper[k]) - 0.25 * float(np.nanmin(lower))),
                    arrowprops=dict(arrowstyle="->", lw=0.8), fontsize=10)
    del xm
    sign = tables.get("sign")
    if sign is not None and len(sign):
        sok = _ok(sign)
        srho = _col(sign, "rho", sok)
        sfirst = np.array(sign.columns["first_order"], dtype=bool)[sok]
        none = ", ".join(f"{r:g}" for r in sorted(srho[~sfirst]))
        if none:
            ax.text(0.02, 0.02, f"y = sign(z): no first-order transition at rho = {none}",
                    transform=ax.transAxes, fontsize=7, color="0.3")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, top)
    ax.set_xlabel(r"density $\rho$ of the Gauss-Bernoulli prior ($w \sim (1-\rho)\,\delta_0"
                  r" + \rho\, N(0, 1/\rho)$)")
    ax.set_ylabel(r"sample ratio $\alpha = n/d$")
    ax.set_title(r"Sparse symmetric door $y = $sign$(|z| - K)$, $K = \Phi^{-1}(3/4)$:"
                 "\nBayes-optimal phases from state evolution", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="center right")
    fig.tight_layout()
    path = folder / "glm.sparse_phase_diagram.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return [path]


register_figure("glm.perceptron_gamp", title="Binary perceptron (Rademacher prior, y = sign(z)): "
                "GAMP overlap at d = 2000 (2 seeds) vs the SE branches, hard phase "
                "[alpha_IT, alpha_alg] shaded", spec=_perceptron_spec, render=_render_perceptron)
register_figure("glm.sparse_phase_diagram", title="Gauss-Bernoulli prior, symmetric door "
                "channel: alpha_c, alpha_IT, alpha_alg vs rho, impossible / hard / easy "
                "regions", spec=_sparse_spec, render=_render_sparse)
