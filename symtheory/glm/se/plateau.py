"""The SE map on a staircase plateau, integrated deterministically: nothing sampled.

On a plateau of an even reduced link every index row but one sits at ``Q_aa = 0`` (held
there by its sign symmetry: ``g_a = 0`` wherever ``omega_a = 0``), so the map is a scalar
one in the learned row's overlap ``q``:

    Q_hat_ll / alpha = E_omega E_{y|omega} [ sum_m g_l g_l ] ,   omega_l ~ N(0, q I_M),
    omega_a = 0 (a != l),  V = rho - Q,

(Eq. (13) of arXiv:2502.00901 at such a ``Q``).  With ``M = 2`` tokens and one solved row
(``r = 1``) both integrals are 2-D:

* given omega, ``y`` depends on the ``M r = 2`` coordinates of ``E = T(u) h^T``
  (:mod:`symtheory.glm.integrate.reduced_posterior`).  ``E[f(y)|omega] = int dE
  Z_out(y(E)) |det dy/dE| f / K`` over all of ``E``-space (``K`` preimages, all of which
  the posterior sums).  The rule is the midpoint rule on a box symmetric under ``E -> -E``,
  which is spectrally accurate for this smooth, Gaussian-tailed integrand (the thresholds'
  observation grid).  It covers ``|E_i| <= max_u |T(u) omega_h|_i + BOX_SIGMAS sd_i``, with
  the step a fixed fraction of the narrowest scale of ``E`` given ``u``;
* ``omega_l = sqrt(q) rho (cos t, sin t)``: the posterior's sign resolves over ``|omega_l|
  ~ 0.5`` (depth-2 attention: ``E[g g^T|omega]`` is 0 at ``omega_l = 0`` and ~8 by
  ``|omega_l| = 0.8``), a rise that Gauss-Hermite in Cartesian coordinates follows slowly
  (4-12 nodes per axis: 7.53 ... 6.90 against 6.732).  So the radius gets Gauss-Legendre on
  panels ``RADIAL_PANELS`` with weight ``rho exp(-rho^2 / 2)``, and the angle gets the
  trapezoid rule, folded by the row's sign flip ``t -> t + pi``.

Accuracy is the change against :meth:`PlateauRule.refined` (more nodes of every kind), and
the result says so.  ``E g g^T`` and its Nishimori twin ``E(-dg)`` agree
to the rule's accuracy, and the mass ``E[1]`` equals 1; both are reported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ...core.quadrature import TensorRule
from ...core.validate import ParameterError
from ..integrate.reduced_posterior import PeakTensorRule

#: radial panels in units of ``sqrt(q)`` (past 6.5 the weight ``rho e^{-rho^2/2}`` is
#: below 5e-9)
RADIAL_PANELS = (0.0, 0.5, 1.5, 3.0, 6.5)
#: half-width of the E box beyond the centres' range, in standard deviations of h given u
BOX_SIGMAS = 5.0
#: a plateau's pinned rows: Q_aa at most this (an even row decays geometrically to 0)
PINNED = 1e-6


@dataclass(frozen=True)
class PlateauRule:
    """Nodes of the plateau map: ``radial_nodes`` Gauss-Legendre per radial panel,
    ``angles`` trapezoid nodes on the circle (even: the sign flip folds them in half), the
    ``E``-grid step ``step`` in units of the narrowest standard deviation of ``E`` given
    ``u``, and ``posterior_nodes`` Gauss-Hermite nodes per axis of the free rows' posterior
    at each ``E`` node.  Measured on depth-2 attention at ``q = 0.771`` (``E g g^T =
    6.7324``): 6 -> 8 radial and 8 -> 12 angular nodes change it by 1.9e-4, step 1.5 -> 1.0
    by 8e-5, 20 -> 30 posterior nodes by 4e-5."""

    radial_nodes: int = 6
    angles: int = 8
    step: float = 1.5
    posterior_nodes: int = 20

    def __post_init__(self):
        if int(self.radial_nodes) != self.radial_nodes or not 2 <= self.radial_nodes <= 40:
            raise ParameterError(f"radial_nodes must be an integer in [2, 40], got "
                                 f"{self.radial_nodes!r}")
        if int(self.angles) != self.angles or self.angles < 4 or self.angles % 2:
            raise ParameterError(f"angles must be an even integer >= 4, got {self.angles!r}")
        if not 0.05 <= self.step <= 4.0:
            raise ParameterError(f"step must be in [0.05, 4], got {self.step!r}")
        if int(self.posterior_nodes) != self.posterior_nodes or \
                not 4 <= self.posterior_nodes <= 80:
            raise ParameterError(f"posterior_nodes must be an integer in [4, 80], got "
                                 f"{self.posterior_nodes!r}")

    def refined(self) -> "PlateauRule":
        """The rule the accuracy is measured against: 1.5x the radial and angular nodes,
        1.25x the grid density and the posterior nodes (~5x the cost); the change to it
        estimates this rule's error on a converging rule."""
        return replace(self, radial_nodes=int(math.ceil(1.5 * self.radial_nodes)),
                       angles=2 * int(math.ceil(0.75 * self.angles)), step=self.step / 1.25,
                       posterior_nodes=int(math.ceil(1.25 * self.posterior_nodes)))

    def tensor(self):
        from ...core.quadrature import TensorRule

        return TensorRule("gauss-hermite", self.posterior_nodes, 6.0)

    def describe(self) -> str:
        return (f"omega in polar coordinates (Gauss-Legendre {self.radial_nodes} on radial "
                f"panels {list(RADIAL_PANELS)} x sqrt(q), trapezoid {self.angles} in the "
                f"angle, folded by the sign flip) x E-grid (midpoint, step {self.step:g} sd) "
                f"x Gauss-Hermite {self.posterior_nodes} per axis over the free rows")


def plateau_row(se, Q):
    """The learned row of a plateau at ``Q`` (an int), or a string saying why the plateau
    map does not apply."""
    model, rp = se.model, se.features
    if rp is None:
        return "not a reduced noiseless link"
    if model.M != 2 or rp.r != 1:
        return f"needs M = 2 tokens and one solved row (here M = {model.M}, r = {rp.r})"
    if se.noise_variance is not None:
        return "output noise"
    if not np.allclose(se.rho, np.eye(model.P)):
        return "needs rho = I"
    if se.regularization > 0:
        return "the SE's regularization (V + reg I) is not the plateau map's posterior"
    if len(rp.free_rows) * model.M != 2:
        return (f"the free rows' posterior is {len(rp.free_rows) * model.M}-D; the plateau "
                "rule integrates a 2-D one")
    if not isinstance(se.feature_rule, (TensorRule, PeakTensorRule)):
        return (f"the SE integrates the free rows by {type(se.feature_rule).__name__}, not "
                "the exact posterior the plateau map integrates")
    diag = np.diag(Q)
    learned = [a for a in range(model.P) if diag[a] > PINNED]
    if learned != list(rp.solved_rows):
        return (f"not a plateau of the solved row: rows with Q_aa > {PINNED:g} are "
                f"{learned}, the solved row is {list(rp.solved_rows)}")
    off = Q - np.diag(diag)
    if np.max(np.abs(off)) > PINNED:
        return "off-diagonal overlaps are not 0"
    even = model.even_groups
    for a in rp.free_rows:
        if not any(even.get(g) and a in g for g in even):
            return f"row {a} is not in an even row group: Q_aa = 0 is not held by symmetry"
    return int(rp.solved_rows[0])


def _omega_nodes(q, rule):
    """``(omega_l (k, 2), weights (k,))`` of the polar rule, folded by the sign flip."""
    x, w = np.polynomial.legendre.leggauss(rule.radial_nodes)
    R, WR = [], []
    for a, b in zip(RADIAL_PANELS[:-1], RADIAL_PANELS[1:]):
        R.append(0.5 * (b - a) * x + 0.5 * (a + b))
        WR.append(0.5 * (b - a) * w)
    R, WR = np.concatenate(R), np.concatenate(WR)
    WR = WR * R * np.exp(-0.5 * R ** 2)
    half = rule.angles // 2
    t = (np.arange(half) + 0.5) * 2 * np.pi / rule.angles     # the flip maps t -> t + pi
    rr, tt = np.meshgrid(R, t, indexing="ij")
    W = np.outer(WR, np.full(half, 2.0 / rule.angles)).ravel()
    om = math.sqrt(q) * np.stack([rr.ravel() * np.cos(tt.ravel()),
                                  rr.ravel() * np.sin(tt.ravel())], axis=1)
    return om, W


def _conditional_sums(se, omega_l, V, row, rule, T_u):
    """``(E[sum_m g_l g_l | omega], E[-sum_m dg_ll | omega], mass)`` at one ``omega``."""
    from ..integrate.moments import Moments
    from ..integrate.reduced_posterior import offset_midpoint_axis

    rp, P = se.features, se.model.P
    sd = math.sqrt(V[row, row])
    centre = np.abs(np.einsum("smk,k->sm", T_u, omega_l)).max(axis=0)
    spread = np.sqrt(np.einsum("smk,smk->sm", T_u, T_u).max(axis=0)) * sd
    narrow = sd * float(np.min(np.linalg.svd(T_u, compute_uv=False)))
    step = rule.step * narrow
    half = centre + BOX_SIGMAS * spread
    # the thresholds' observation grid per axis, its node count set by the step
    axes = [offset_midpoint_axis(half[k], max(8, int(math.ceil(2 * half[k] / step))), k)
            for k in range(2)]
    cell = np.prod([2 * half[k] / len(axes[k]) for k in range(2)])
    G = np.meshgrid(*axes, indexing="ij")
    E = np.stack([g.ravel() for g in G], axis=1)
    Ebr, lw, valid, logdet0 = rp.branches(E)
    om = np.zeros((len(E), P, 2))
    om[:, row, :] = omega_l
    logZ, mean, cov, _ = rp.posterior(Ebr, lw, valid, om, V, rule.tensor())
    K = valid.sum(axis=1)
    with np.errstate(all="ignore"):
        w = np.exp(logdet0 + logZ) / np.maximum(K, 1) * cell
    ok = np.isfinite(w) & (K > 0)
    g, dg = Moments.from_posterior(np.where(ok, logZ, 0.0), np.where(ok[:, None, None], mean, 0.0),
                                   np.where(ok[:, None, None], cov, 0.0), om, V).output_functions()
    sq = np.einsum("sm,sm->s", g[:, row, :], g[:, row, :])
    tw = -np.einsum("smm->s", dg[:, row, :, row, :])
    w = np.where(ok & np.isfinite(sq) & np.isfinite(tw), w, 0.0)
    return float(w @ np.where(w > 0, sq, 0.0)), float(w @ np.where(w > 0, tw, 0.0)), float(w.sum())


def plateau_qhat(se, q, rule=PlateauRule()):
    """``(E sum_m g_l g_l, E(-sum_m dg_ll), mass)``: the learned row's ``Q_hat_ll /
    alpha`` by ``g g^T`` and by its Nishimori twin, and ``E[1]``, at ``Q = q e_l e_l^T``
    (module docstring).

    Examples
    --------
    >>> from symtheory.glm import StateEvolution
    >>> from symtheory.smi.registry import build_model
    >>> m = build_model("attention", {"depth": 2, "seq_len": 2, "skip": 1.0, "inv_temp": 1.0})
    >>> se = StateEvolution(m, 0.5, samples=2)
    >>> sq, tw, mass = plateau_qhat(se, 0.771, PlateauRule(4, 4, 2.0, 12))
    >>> bool(abs(sq - tw) < 0.05 * sq), bool(abs(mass - 1) < 1e-3)
    (True, True)
    """
    P = se.model.P
    if not isinstance(rule, PlateauRule):
        raise ParameterError(f"rule must be a PlateauRule, got {rule!r}")
    if not 0 < q < 1:
        raise ParameterError(f"q must be in (0, 1) (rho = 1), got {q!r}")
    Q = np.zeros((P, P))
    row = plateau_row(se, np.diag([q if a in se.features.solved_rows else 0.0
                                   for a in range(P)]))
    if isinstance(row, str):
        raise ParameterError(f"the plateau map does not apply: {row}")
    Q[row, row] = q
    V = se.rho - Q
    # T(u) over the free rows' prior nodes (omega_u = 0, V_uu = 1): the box's extent
    tn, tw_ = rule.tensor().nodes(len(se.features.free_rows) * 2)
    keep = tw_ > 1e-14 * tw_.max()
    T_u = se.features.mixing(tn[keep].reshape(-1, len(se.features.free_rows), 2))
    om, W = _omega_nodes(q, rule)
    out = np.zeros(3)
    for omega_l, w in zip(om, W):
        out += w * np.array(_conditional_sums(se, omega_l, V, row, rule, T_u))
    return tuple(float(v) for v in out)


def plateau_map(se, q, rule=PlateauRule()):
    """``(F_ll(q e_l e_l^T), E g g^T, E(-dg), mass)``: the prior's overlap map of the
    plateau's ``Q_hat = alpha E[sum_m g_l g_l] e_l e_l^T`` (``+ lambda I``), its learned entry."""
    sq, tw, mass = plateau_qhat(se, q, rule)
    P = se.model.P
    row = int(se.features.solved_rows[0])
    Qhat = np.zeros((P, P))
    Qhat[row, row] = se.alpha * sq
    F = se.prior.overlap_map(Qhat + se.lam * np.eye(P))
    return float(F[row, row]), sq, tw, mass


def solve_plateau(se, q0, rule=PlateauRule(), *, slope=None, tol=1e-9, max_evaluations=12,
                  first_evaluation=None):
    """Return the plateau's fixed point ``q = F_ll(q)`` by secant steps on the
    deterministic map, from ``q0`` (e.g. a sampled solve's value), as an
    :class:`~symtheory.glm.se.result.SEResult` whose error is an estimate.  The
    estimate is the change of the root under :meth:`PlateauRule.refined`,
    ``|F_refined(q*) - F(q*)| / (1 - F'(q*))`` with the secant slope.

    Stability along the learned row is checked (``F' < 1``). The pinned rows' stability is
    the staircase's condition ``alpha K_aa < 1``, and it is not checked here. The sampled
    solve that found the plateau checks it with its Jacobian.

    ``first_evaluation``: ``plateau_map(se, q0, rule)`` if already computed (it is reused,
    not recomputed).
    """
    from .result import SEResult

    if not 0 < q0 < 1:
        raise ParameterError(f"q0 must be in (0, 1), got {q0!r}")
    if not isinstance(rule, PlateauRule):
        raise ParameterError(f"rule must be a PlateauRule, got {rule!r}")
    if not tol > 0:
        raise ParameterError(f"tol must be > 0, got {tol!r}")
    if isinstance(max_evaluations, bool) or int(max_evaluations) != max_evaluations or \
            max_evaluations < 2:
        raise ParameterError(f"max_evaluations must be an integer >= 2, got {max_evaluations!r}")
    if slope is not None and not (np.isfinite(slope) and slope < 1):
        raise ParameterError(f"slope (an estimate of F' at q0) must be finite and < 1 (a "
                             f"stable root), got {slope!r}")
    row = int(se.features.solved_rows[0]) if se.features is not None else None
    P = se.model.P
    why = plateau_row(se, np.diag([q0 if a == row else 0.0 for a in range(P)]))
    if isinstance(why, str):
        raise ParameterError(f"the plateau map does not apply: {why}")
    xs, rs, last = [], [], None
    q = q0
    for k in range(max_evaluations):
        F, sq, tw, mass = (first_evaluation if k == 0 and first_evaluation is not None
                           else plateau_map(se, q, rule))
        last = (F, sq, tw, mass)
        xs.append(q)
        rs.append(F - q)
        if abs(rs[-1]) <= tol:
            break
        if len(xs) == 1:
            # a Newton step on the given slope, else one plain step: a second point
            q_new = q - rs[-1] / (slope - 1) if slope is not None and slope != 1 else F
        else:
            slope = (rs[-1] - rs[-2]) / (xs[-1] - xs[-2])
            q_new = xs[-1] - rs[-1] / slope if slope != 0 else F
        q = float(min(max(q_new, 0.5 * q), 0.5 * (1 + q)))   # stay inside (0, 1)
    converged = abs(rs[-1]) <= tol
    slope_F = 1 + ((rs[-1] - rs[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else math.nan)
    Fc = plateau_map(se, xs[-1], rule.refined())[0]
    change = abs(Fc - last[0])
    err = change / max(1 - slope_F, 1e-3) if np.isfinite(slope_F) else change
    F, sq, tw, mass = last
    Q = np.zeros((P, P))
    Q[row, row] = xs[-1]
    E = np.zeros((P, P))
    E[row, row] = err
    Qhat = np.zeros((P, P))
    Qhat[row, row] = se.alpha * sq
    gap = abs(sq - tw) * (1 - xs[-1])            # in units of V^-1 = 1 / (1 - q)
    stable = bool(slope_F < 1) if np.isfinite(slope_F) else None
    msg = ((f"converged in {len(xs)} evaluations" if converged else
            f"not converged in {len(xs)} evaluations (|F - q| = {abs(rs[-1]):.2e})") +
           f" of the plateau map (row {row}; every other row pinned at 0): {rule.describe()}; "
           f"error estimate {err:.2e} = change of F under the refined rule ({change:.2e}) / "
           f"(1 - F' = {1 - slope_F:.3g}); mass defect {abs(mass - 1):.1e}; "
           f"E g g^T - E(-dg) = {sq - tw:.1e}")
    return SEResult(value=Q, error=E, Qhat=Qhat, Qhat_stderr=None, converged=converged,
                    iterations=len(xs), residual=abs(rs[-1]), nishimori_gap=gap,
                    message=msg, trace=[{"q": x, "residual": r} for x, r in zip(xs, rs)],
                    stable=stable, channel_error=None, channel_qhat_error=None, samples=None,
                    observation="y integrated given omega on the plateau: " + rule.describe(),
                    observation_qhat_error=None, error_kind="estimate", method="plateau map")


#: evaluations of the plateau map a :func:`solve_plateau` costs, in units of one evaluation
#: of the default rule: ~5 secant steps plus the refined rule's check (~5x one).  Measured
#: on depth-2 attention at alpha 0.5 (2026-11-29): 5 evaluations + 1 refined in 72 s at
#: 7.1 s per evaluation, i.e. 10.1
PLATEAU_SOLVE_EVALUATIONS = 10


@dataclass
class PlateauChoice:
    """What :func:`plateau_route` decided: ``result`` (the plateau solve's, when taken),
    ``note`` (why not, or ``None`` off a plateau) and ``predicted`` (seconds of a plateau
    solve, once timed; ``inf`` after a plateau solve that was not usable), which the next
    round reuses instead of timing again."""

    result: object = None
    note: str | None = None
    predicted: float | None = None


def _seconds(t):
    return f"{t:.0f} s" if t >= 1 else "< 1 s"


def plateau_route(se, res, error, target_error, seconds, max_samples, *, predicted=None,
                  rule=PlateauRule(), progress=None) -> PlateauChoice:
    """The automatic choice of :meth:`~symtheory.glm.se.staged_solve.StagedSolve.solve_to_target`
    after a sampled round: the plateau map's fixed point (:func:`solve_plateau`, from
    the sampled fixed point ``res``) when ``res`` is a converged plateau, stable by its
    Jacobian (:func:`plateau_row`), and the plateau route is predicted to reach
    ``target_error`` sooner than more samples.

    Predictions: more samples cost ``seconds / samples`` per sample (the last round, which
    includes its warm-up stages, so an over-estimate) for ``samples (error /
    target_error)^2`` samples (the Monte-Carlo rate), impossible above ``max_samples``; the
    plateau route costs :data:`PLATEAU_SOLVE_EVALUATIONS` times one evaluation of its map,
    timed at the sampled fixed point (that evaluation is reused by the solve) unless
    ``predicted`` gives it from an earlier round.

    The plateau solve's result is used only if it converged, its learned row is not
    unstable, and its error estimate meets the target or no number of samples can;
    otherwise the note says why and ``predicted`` becomes ``inf`` (not tried again).
    ``progress``: a callable taking one line of text, called before the plateau solve.
    """
    import time

    if not target_error > 0:
        raise ParameterError(f"target_error must be > 0, got {target_error!r}")
    if not (np.isfinite(error) and error > 0):
        raise ParameterError(f"error (the sampled round's largest stderr) must be finite "
                             f"and > 0, got {error!r}")
    if not (np.isfinite(seconds) and seconds >= 0):
        raise ParameterError(f"seconds (the sampled round's time) must be finite and >= 0, "
                             f"got {seconds!r}")
    if not max_samples >= se.samples:
        raise ParameterError(f"max_samples must be >= samples ({se.samples}), got "
                             f"{max_samples!r}")
    row = plateau_row(se, res.Q)
    if isinstance(row, str):
        return PlateauChoice(predicted=predicted)
    if not res.converged or res.stable is not True:
        why = "not converged" if not res.converged else (
            "unstable by its Jacobian" if res.stable is False else "its stability unchecked")
        return PlateauChoice(note=f"plateau route not tried: the sampled plateau is {why}",
                             predicted=predicted)
    if predicted is not None and not math.isfinite(predicted):
        return PlateauChoice(predicted=predicted)
    q = float(res.Q[row, row])
    need = se.samples * (error / target_error) ** 2
    feasible = need <= max_samples
    sampled = seconds / se.samples * need if feasible else math.inf
    first = None
    try:
        if predicted is None:
            t0 = time.perf_counter()
            first = plateau_map(se, q, rule)
            predicted = (time.perf_counter() - t0) * PLATEAU_SOLVE_EVALUATIONS
        why = ((f"more samples predicted {_seconds(sampled)} ({need:.3g} samples)" if feasible
                else f"more samples cannot reach it ({need:.3g} samples > max_samples "
                     f"{max_samples})") + f", the plateau map predicted {_seconds(predicted)}")
        if predicted >= sampled:
            return PlateauChoice(note="plateau route not chosen: " + why, predicted=predicted)
        if progress is not None:
            progress(f"SE alpha={se.alpha:g}: plateau route ({why}); ETA {_seconds(predicted)}")
        out = solve_plateau(se, q, rule, first_evaluation=first)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        return PlateauChoice(note=f"plateau route failed ({type(exc).__name__}: {exc})",
                             predicted=math.inf)
    err = float(np.max(out.Q_stderr))
    unusable = ("not converged" if not out.converged else
                "unstable along its row" if out.stable is False else
                f"its error estimate {err:.2g} above the target" if err > target_error and
                feasible else None)
    if unusable:
        return PlateauChoice(note=f"plateau route tried and not used ({unusable}): "
                                  + out.message, predicted=math.inf)
    out.message = (f"plateau route chosen ({why}; sampled plateau {q:.6g} +- "
                   f"{float(res.Q_stderr[row, row]):.2g} on {se.samples} samples, stable by its "
                   f"Jacobian): {out.message}; the sampled round's report: {res.message}")
    return PlateauChoice(result=out, predicted=predicted)
