"""Grand-staircase thresholds of any depth from the state evolution itself (Eqs. (17)-(18) of
arXiv:2502.00901,
Eqs. 17-18; TDDZLK24).

For an even model (even models, arXiv:2502.00901) the rows not learned yet are an invariant
subspace: ``Q_UU = 0`` stays 0.  Stage ``k`` has learned the rows ``S_k`` (``S_0`` empty);
its fixed point ``Q*(alpha)`` is the SE fixed point with the rows ``U_k`` (all others)
pinned at 0 (:class:`~symtheory.glm.se.state_evolution.StateEvolution` ``pinned_rows``), and
the next subspace becomes learnable where that point turns unstable along ``U_k``:

    G_k(alpha) = alpha lambda_max( F'_prior(0) o F_{Q*(alpha)} restricted to Sym(U_k) ) - 1 = 0,
    F_{Q*}(Gamma)_ab = E[ sum_mn J_am,cn Gamma_cd J_bm,dn ],  J = dg_out/domega at Q*   (Eq. 15/17)

(``Q_hat_UU = 0`` at ``Q*``, so the prior map's Jacobian on the ``U`` block is its value at
0).  ``G_0`` is linear in alpha (``Q* = 0``): ``alpha_1 = 1/lambda_max`` is the weak
recovery threshold (Eq. (16) of arXiv:2502.00901).  Later stages are solved in the learned
overlaps, not in alpha (the channel does not depend on alpha; Eqs. (13)-(14) solved for
alpha, for one overlap): ``Q_S`` is the stage's fixed point at its threshold iff
``F_prior^{-1}(Q_S) = Q_hat(Q; alpha = 1)_S / lambda_U(Q)``, and then ``alpha_c =
1/lambda_U(Q)`` -- one map evaluation per trial point, no SE solve inside. The rows carrying
the top eigenvector at the root are learned next.

Error bar of each threshold (first order in the Monte-Carlo error, conservative): the
standard errors of ``lambda`` (per-sample spread of ``v^T A_s v``, which contains the
per-sample random error of a randomized channel rule) and of ``Q_hat`` move the root and
``lambda`` there (:func:`_root_sensitivity`, differences of the frozen-sample map); the
two contributions are added linearly (``std(X + Y) <= std X + std Y`` whatever their
correlation).

The order is checked by the SE itself: at ``alpha_c (1 +- delta)`` the map with only
the rows beyond the next subspace pinned is iterated from ``Q*`` plus a small overlap
along the top eigenvector; the next rows must grow above the threshold and decay
below it (:attr:`StaircaseStep.growth`).  That iteration uses the square estimator, a
second Monte-Carlo estimate of the slope ``lambda``, whose own error is measured (it is
often 2-3x that of ``lambda``): ``delta`` lies beyond 3 combined relative errors, and the
verdict is 'confirmed', 'inconclusive' (within the check's noise) or 'contradicted'
(:func:`_order_check`).
"""
from __future__ import annotations

import math
import time
import warnings
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np

from ...core.solvers import find_root
from ...core.validate import ParameterError
from ..factors.gaussian_prior import GaussianPrior
from ..se.state_evolution import StateEvolution
from .operator import (
    ThresholdResult,
    operator_matrix,
    prior_jacobian,
    sym_basis,
    tensor_from_jacobians,
    top_eigen,
)

__all__ = ["StaircaseStep", "grand_staircase", "subspace_instability"]

#: trace of the overlap the SE order check starts the next rows at: in the linear regime
#: (the prior map x/(1 + x) bends by ~1%) and 10x above 1e-3, where a randomized rule's
#: noise floor made the square-estimator slope twice as noisy (measured at depth 3,
#: third stage: +-22% at 1e-3, +-13% at 1e-2, 1000 samples)
CHECK_START = 1e-2


@dataclass
class StaircaseStep:
    """One stage: the threshold (a :class:`ThresholdResult`), the rows learned before it and
    the rows learned at it, the fixed point at the threshold, and the SE check
    ``growth = {alpha: ratio}`` of the next rows' overlap over ``checks`` iterations
    (> 1 above the threshold, < 1 below)."""

    threshold: ThresholdResult
    learned_before: tuple
    learned_at: tuple
    Q_star: np.ndarray
    growth: dict = field(default_factory=dict)

    def row(self):
        return {**self.threshold.row(), "learned_before": " ".join(map(str, self.learned_before)),
                "learned_at": " ".join(map(str, self.learned_at)),
                **{f"growth_at_{k}": v for k, v in self.growth.items()}}


def subspace_instability(se: StateEvolution, Q, rows):
    """``(lambda, stderr, G)``: the top eigenvalue of ``F'_prior(0) o F_Q`` on symmetric
    matrices supported on ``rows`` (Eq. 17), its Monte-Carlo standard error at fixed ``Q``
    and its PSD eigenvector (``P x P``, unit Frobenius norm), from the frozen samples of
    ``se`` (which must hold those rows at 0)."""
    rows = list(rows)
    P = se.model.P
    _, dg = se.gout_at(Q)
    J = dg[:, rows][:, :, :, rows].copy()
    # rows of different groups: flipping one pinned group alone (omega = 0 there, V block
    # diagonal) leaves the posterior invariant, so their cross-covariance vanishes sample by
    # sample (the block structure of even models); a randomized rule leaves noise there,
    # which would mix the groups' eigenvectors -- set it to its exact value
    group = {a: g for g in se.model.row_groups for a in g}
    J = _cross_group_zero(J, rows, group)
    n, u = len(J), len(rows)
    A_prior = prior_jacobian(se.prior, u)
    T = tensor_from_jacobians(J, np.full(n, 1.0 / n))
    Jf = None
    if se.estimator == "multilevel":
        # the slope from the fine rule's J: the coarse rule's bias of J (below 1% of lambda
        # at the depth-3 stage-2 point, docs/guide.md) corrected on the estimator's prefix
        from ..se.randomized_multilevel import fine_outputs, multilevel_mean_stderr, subset_size

        n1 = subset_size(se, n)
        Jf = _cross_group_zero(fine_outputs(se, Q, n1)[1][:, rows][:, :, :, rows], rows, group)
        w1 = np.full(n1, 1.0 / n1)
        T = T + tensor_from_jacobians(Jf, w1) - tensor_from_jacobians(J[:n1], w1)
    lam, G, _ = top_eigen(A_prior @ operator_matrix(T), u)
    # per-sample values of v^T A_s v: the Rayleigh quotient is stationary at v, so its
    # spread is the first-order error of lambda
    _, B = sym_basis(u)
    v = np.einsum("iab,ab->i", B, G)

    def rayleigh(Js):
        Gs = np.einsum("samcn,cd,sbmdn->sab", Js, G, Js, optimize=True)
        return np.einsum("i,ij,jab,sab->s", v, A_prior, B, Gs, optimize=True)

    per = rayleigh(J)
    if Jf is None:
        stderr = se.sample_mean_stderr(per)[1]
    else:
        stderr = multilevel_mean_stderr(per, rayleigh(Jf) - per[:len(Jf)],
                                        se.error_groups or len(Jf))[1]
    full = np.zeros((P, P))
    full[np.ix_(rows, rows)] = G
    return float(lam), float(stderr), full


def _cross_group_zero(J, rows, group):
    """``J`` with its entries between rows of different groups set to 0 (their exact
    value, see :func:`subspace_instability`)."""
    for i, a in enumerate(rows):
        for j, b in enumerate(rows):
            if group[a] != group[b]:
                J[:, i, :, j, :] = 0.0
    return J


def grand_staircase(model, *, samples=2048, seed=0, rule=None, prior=None,
                    sampling="rqmc",
                    q_grid=(0.02, 0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995,
                            0.998, 0.999),
                    xtol=1e-5, resid_tol=1e-3, check_delta=0.1, checks=4,
                    alpha_continuation="auto", log=None, estimator="auto"):
    """Return all thresholds of the grand staircase of an even model, from the first learnable subspace to the last row.

    Stage ``k >= 1`` is solved in the overlaps of the learned rows, not in alpha: the
    channel does not depend on alpha, so ``Q_S`` is a fixed point at the threshold iff

        Q_S = F_prior(Q_hat(Q; alpha = 1)_S / lambda_U(Q)),   alpha_c = 1 / lambda_U(Q),

    one map evaluation per trial ``Q`` (no SE solve inside).  One learned overlap: its
    sign change is bracketed on ``q_grid`` and solved by Brent (``xtol`` in ``q``); more:
    MINPACK's hybrid Powell (``scipy.optimize.root``) from the last stage's point with the
    new rows started at their own bracketed root (accepted when its largest residual,
    in overlap units, is below ``resid_tol``).  The point must be a stable fixed
    point of the stage's SE (spectral radius of its Jacobian < 1, checked); where it is
    not (``alpha_continuation='auto'``; ``'always'``: at every stage after the first;
    ``'never'``: flag it) the threshold is found on the SE's stable branch instead, by
    SE solves in alpha from the previous threshold (:func:`_alpha_continuation`, ~10
    solves: the costly path).

    ``samples``, ``seed``, ``sampling``, ``rule``: the SE's frozen samples (their design,
    :class:`~symtheory.glm.se.state_evolution.StateEvolution`) and channel rule (shared by every stage; a rule whose cost escalates per sample makes the map jump,
    so give a randomized rule a fixed number of points); ``check_delta``, ``checks``: the
    SE order check at ``alpha_c (1 +- delta)``, ``delta = max(check_delta, the 3-sigma
    multiple of the combined relative error of lambda and of the check's own slope)``
    (3 itself for Monte Carlo, the t quantile for RQMC: :meth:`~symtheory.glm.se.state_evolution.
    StateEvolution.tail_multiple`), with ``checks`` iterations
    of the map (the square estimator, proportional to the small overlap); a stage is
    ``converged`` when its fixed point is stable and the check does not contradict it
    (its verdict, 'confirmed' or 'inconclusive', is in the message and ``details``).
    ``log``: a callable receiving one line per evaluation (progress on long runs).
    Returns the list of :class:`StaircaseStep`.

    Parameters
    ----------
    model : MultiIndexModel
        An even model.
    samples : int, optional
        The SE's frozen samples.
    seed : int, optional
        Their seed.
    rule : optional
        The channel rule (shared by every stage).
    prior : Prior, optional
        Weight prior (default ``GaussianPrior``).
    sampling : {"rqmc", "monte-carlo"}, optional
        The design of the frozen samples.
    q_grid : tuple of float, optional
        Overlaps scanned to bracket a stage's root.
    xtol : float, optional
        Brent tolerance in ``q``.
    resid_tol : float, optional
        Largest residual (overlap units) of a multi-overlap root.
    check_delta : float, optional
        Smallest relative offset of the SE order check.
    checks : int, optional
        Iterations of the map in the order check.
    alpha_continuation : {"auto", "always", "never"}, optional
        When to find a threshold on the SE's stable branch by solves in alpha.
    log : callable, optional
        Receives one line per evaluation.
    estimator : str or MultilevelEstimator, optional
        The stages' SE estimator (:class:`~symtheory.glm.se.state_evolution.StateEvolution`);
        ``'multilevel'`` (a deep link) also corrects the slope ``lambda`` by the fine rule
        on the estimator's subset of the draws (:func:`subspace_instability`).  The order
        check keeps ``'square'``.

    Returns
    -------
    list of StaircaseStep
        One per stage: ``threshold`` (a ``ThresholdResult``), ``learned_before``,
        ``learned_at``, ``Q_star`` and the check's ``growth``.

    Examples
    --------
    Two-layer softmax attention: row 1 at the weak-recovery threshold, row 0 at the
    staircase (a small sample: ~20 s).

    >>> from symtheory import smi
    >>> from symtheory.glm import grand_staircase
    >>> steps = grand_staircase(smi.deep_attention(depth=2, seq_len=2), samples=32)
    >>> [(s.threshold.kind, s.learned_at, s.threshold.converged) for s in steps]
    [('weak', (1,), True), ('staircase', (0,), True)]
    """
    t_start = time.perf_counter()
    opts = _check_options(model, q_grid, xtol, check_delta, resid_tol, checks,
                          alpha_continuation)
    prior = prior or GaussianPrior()
    say = log or (lambda line: None)
    P = model.P
    learned: list[int] = []
    steps: list[StaircaseStep] = []
    Q_prev = np.zeros((P, P))

    def make(pinned, estimator=estimator):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return StateEvolution(model, 1.0, samples=samples, seed=seed, rule=rule,
                                  prior=prior, check_channel=False, pinned_rows=pinned,
                                  estimator=estimator, sampling=sampling)

    while len(learned) < P:
        step = _next_step(make, learned, Q_prev, steps, prior, opts, say, samples, t_start)
        steps.append(step)
        learned += list(step.learned_at)
        Q_prev = step.Q_star.copy()
    return steps


#: the validated options of :func:`grand_staircase` that every stage reads
_Options = namedtuple("_Options", "q_grid xtol resid_tol check_delta checks alpha_continuation")


def _next_step(make, learned, Q_prev, steps, prior, opts, say, samples, t_start):
    """The next stage of :func:`grand_staircase`: the threshold of the rows not yet
    learned (:func:`_stage_threshold`), the rows it learns and the SE order check."""
    U = [a for a in range(Q_prev.shape[0]) if a not in learned]
    stage = _Stage(make(U), U, prior, len(steps) + 1, say)
    at, alpha_c, err, lam_err, radius, how, extra = _stage_threshold(stage, make, Q_prev,
                                                                     steps, prior, opts, say)
    vec = at["vector"]
    nxt = tuple(a for a in U if abs(vec[a, a]) > 1e-3)
    # the check iterates the map's square estimator, a second Monte-Carlo estimate of
    # the slope lambda: it runs outside 3 combined relative errors of both, and its
    # verdict counts its own noise (_order_check)
    check = _order_check(make, at["Q"], vec, alpha_c, learned, nxt, opts.checks, prior,
                         lam_rel=at["lam_se"] / at["lam"], check_delta=opts.check_delta)
    stable = not stage.entries or radius < 1
    msg = _stage_message(learned, nxt, at, alpha_c, err, lam_err, how, radius, check,
                         opts.checks, stable)
    res = ThresholdResult(
        kind="weak" if not learned else "staircase", value=alpha_c, error=float(err),
        error_kind="stderr",
        method=f"grand staircase on the SE ({samples} frozen samples, "
        + (stage.se.feature_rule.describe() if stage.se.features is not None
           else "channel rule") + ")",
        subspace=vec, eigenvalue=at["lam"],
        converged=bool(check["verdict"] != "contradicted" and stable), message=msg,
        seconds=time.perf_counter() - t_start,
        details={"Q_star": at["Q"].tolist(), "lambda_stderr": at["lam_se"],
                 "lambda_error_at_root": lam_err,
                 "spectral_radius": radius, "evaluations": len(stage.cache),
                 "check": {k: v for k, v in check.items() if k != "growth"}, **extra})
    say(msg)
    return StaircaseStep(res, tuple(learned), nxt, at["Q"], check["growth"])


def _stage_threshold(stage, make, Q_prev, steps, prior, opts, say):
    """A stage's threshold and its error bar: the overlap-space root
    (:meth:`_Stage.root`), or, where that is not a stable fixed point of the stage's SE
    (``alpha_continuation``), the threshold on the SE's stable branch
    (:func:`_alpha_continuation`).  Returns ``(at, alpha_c, err, lam_err, radius, how,
    extra details)``."""
    U = stage.U
    at, how = stage.root(Q_prev, opts.q_grid, opts.xtol, opts.resid_tol)
    alpha_c = at["alpha"]
    # stability of Q* in the stage's SE at alpha_c, and the error bar
    se_at = make(U)
    se_at.alpha = alpha_c
    radius, via_q = 0.0, 0.0
    sens = 1.0
    if stage.entries:
        radius = se_at.spectral_radius(at["Q"])
        sens, via_q = _root_sensitivity(stage.evaluate, stage.se, prior, at)
    # first order: alpha_c = 1/lambda(x*(...)); lambda's own error moves alpha directly
    # and through the root x*, Q_hat's error only through x* (added linearly:
    # std(X + Y) <= std X + std Y whatever their correlation)
    lam_err = abs(sens) * at["lam_se"] + via_q
    err = alpha_c * lam_err / at["lam"]
    extra = {}
    if stage.entries and (opts.alpha_continuation == "always"
                          or opts.alpha_continuation == "auto" and not radius < 1):
        # the overlap-space root is a fixed point the SE does not reach (e.g. the
        # unstable branch of a fold); follow the stable branch in alpha instead
        say(f"stage {stage.number}: Q* at alpha {alpha_c:.5g} has spectral radius "
            f"{radius:.3g}; following the SE's stable branch in alpha")
        radius_root, alpha_root = radius, alpha_c
        cont = _alpha_continuation(make, U, Q_prev, steps[-1].threshold.alpha, alpha_c, say)
        at, alpha_c, err, lam_err, radius = (cont["at"], cont["alpha"], cont["error"],
                                             cont["lam_err"], cont["radius"])
        extra = {"alpha_overlap_root": alpha_root, "spectral_radius_overlap_root": radius_root,
                 "continuation_solves": cont["solves"]}
        how = (f"{how} gave alpha {alpha_root:.5g} at a fixed point of spectral radius "
               f"{radius_root:.3g}; then {cont['how']}")
    return at, alpha_c, err, lam_err, radius, how, extra


def _check_options(model, q_grid, xtol, check_delta, resid_tol, checks, alpha_continuation):
    """The options of :func:`grand_staircase`, checked (``q_grid`` as floats)."""
    if not model.is_even:
        raise ParameterError("the grand staircase needs a model even in every row group: "
                             "the unlearned rows must be an invariant subspace of the SE")
    q_grid = tuple(float(q) for q in q_grid)
    if not q_grid or any(not 0 < q < 1 for q in q_grid) or list(q_grid) != sorted(set(q_grid)):
        raise ParameterError(f"q_grid must be increasing values in (0, 1), got {q_grid}")
    for name, v in (("xtol", xtol), ("check_delta", check_delta), ("resid_tol", resid_tol)):
        if not (np.isfinite(v) and 0 < v < 1):
            raise ParameterError(f"{name} must be in (0, 1), got {v}")
    if int(checks) < 1:
        raise ParameterError(f"checks must be >= 1, got {checks}")
    if alpha_continuation not in ("auto", "always", "never"):
        raise ParameterError(f"alpha_continuation must be 'auto', 'always' or 'never', got "
                             f"{alpha_continuation!r}")
    return _Options(q_grid, xtol, resid_tol, check_delta, checks, alpha_continuation)


class _Stage:
    """One stage of the grand staircase: the SE with the unlearned rows ``U`` pinned at 0
    and its map at ``alpha = 1`` in the learned overlaps, each point evaluated once."""

    def __init__(self, se, U, prior, number, say):
        self.se, self.U, self.prior, self.number, self.say = se, U, prior, number, say
        self.entries = se._free_entries()
        self.cache = {}

    def evaluate(self, x):
        x = np.asarray(x, dtype=float).reshape(-1)
        key = x.tobytes()
        if key not in self.cache:
            t0 = time.perf_counter()
            se = self.se
            Q = se._from_free(x)
            lam, lam_se, G = subspace_instability(se, Q, self.U)
            qhat1, qhat1_se, _ = se.qhat(Q, alpha=1.0)
            resid = (_stage_residual(se, self.prior, Q, qhat1, lam) if self.entries
                     else np.zeros(0))
            self.cache[key] = {"Q": Q, "lam": lam, "lam_se": lam_se, "vector": G,
                               "alpha": 1.0 / lam, "resid": resid, "qhat1": qhat1,
                               "qhat1_se": qhat1_se}
            self.say(f"  stage {self.number}: Q diag {np.round(np.diag(Q), 5)}  lambda "
                     f"{lam:.5g} +- {lam_se:.2g}  alpha {1 / lam:.5g}  residual "
                     f"{np.round(resid, 5)}  ({time.perf_counter() - t0:.0f} s)")
        return self.cache[key]

    def root(self, Q_prev, q_grid, xtol, resid_tol):
        """The stage's point (an evaluation) and how it was found: ``Q* = 0`` for the
        first stage, else Brent along the new overlap bracketed on ``q_grid``, then hybrid
        Powell in all learned overlaps."""
        x_prev = self.se._to_free(Q_prev)
        if not self.entries:
            return self.evaluate(x_prev), "Q* = 0: alpha = 1/lambda"
        new = [i for i, (a, b) in enumerate(self.entries) if a == b and Q_prev[a, a] == 0]
        if len(new) != 1:
            raise ParameterError(f"stage {self.number} starts {len(new)} new diagonal "
                                 "overlaps; the grand staircase handles one at a time")
        i_new = new[0]

        def along(q):
            x = x_prev.copy()
            x[i_new] = q
            return x

        lo = hi = None
        for q in q_grid:
            if self.evaluate(along(q))["resid"][i_new] < 0:
                lo = q
            else:
                hi = q
                break
        if lo is None or hi is None:
            raise ParameterError(
                f"stage {self.number}: no sign change of the fixed-point residual along "
                f"the new overlap on q_grid {q_grid}")
        root = find_root(lambda q: self.evaluate(along(q))["resid"][i_new], lo, hi,
                         xtol=xtol, rtol=1e-12, name=f"grand staircase stage {self.number}")
        x = along(float(root.value))
        how = f"Brent in the new overlap on [{lo:g}, {hi:g}]"
        if len(self.entries) > 1:
            from scipy.optimize import root as mroot

            sol = mroot(lambda v: self.evaluate(np.clip(v, 0.0, 1 - 1e-12))["resid"], x,
                        method="hybr", options={"xtol": xtol})
            x = np.clip(sol.x, 0.0, 1 - 1e-12)
            worst = float(np.max(np.abs(self.evaluate(x)["resid"])))
            # a randomized rule's map is smooth only up to its noise: hybrid Powell may
            # stall there; its point is kept when the residual is below resid_tol
            if not (sol.success or worst <= resid_tol):
                raise ParameterError(f"stage {self.number}: hybrid Powell stopped with "
                                     f"residual {worst:.2g} > resid_tol: {sol.message}")
            how += f", then hybrid Powell in all {len(self.entries)} learned overlaps " \
                   f"({sol.nfev} evaluations)"
        return self.evaluate(x), how


def _stage_message(learned, nxt, at, alpha_c, err, lam_err, how, radius, check, checks,
                   stable):
    msg = (f"rows {tuple(learned)} learned (Q* diag {np.round(np.diag(at['Q']), 5)}); rows "
           f"{nxt} become unstable at alpha = {alpha_c:.6g} +- {err:.2g} (lambda "
           f"{at['lam']:.5g} +- {at['lam_se']:.2g} at fixed Q*; lambda at the root +- "
           f"{lam_err:.2g} with the root's own shift); {how}; spectral radius of the "
           f"stage's SE Jacobian {radius:.3g}; "
           "SE check: overlap of the next rows multiplied by " + ", ".join(
               f"{v:.3g} at alpha {k:.5g}" for k, v in check["growth"].items())
           + f" over {checks} iterations (square-estimator slope {check['slope']:.4g} +- "
           f"{check['slope_se']:.2g} at alpha = 1, i.e. threshold "
           f"{check['check_alpha']:.4g}): {check['verdict']}")
    if check["verdict"] == "contradicted":
        msg += "; WARNING: the SE check contradicts the threshold beyond its noise"
    if not stable:
        msg += "; WARNING: Q* is not a stable fixed point of the stage's SE"
    return msg


def _alpha_continuation(make, U, Q_prev, alpha_prev, alpha_guess, say, *,
                        rel_step=0.08, rtol=5e-3, max_solves=14):
    """Threshold of a stage on the SE's stable branch: ``G(alpha) = alpha lambda_U(Q*(alpha))
    - 1`` with ``Q*(alpha)`` the stage's SE fixed point (rows ``U`` pinned) -- the branch the
    SE reaches from below: each solve starts from the fixed point of the largest alpha
    already solved below it (the first from the previous stage's ``Q_prev`` plus 0.05 on
    the rows learned at ``alpha_prev``); the SE map is monotone in ``Q`` and in alpha, so
    the iterates increase to the smallest fixed point above that start.  Bracketed from
    ``alpha_guess`` (the overlap-space root) by steps of ``rel_step`` (growing 1.5x per
    step, never below ``alpha_prev``), then Brent to ``rtol`` relative (the Monte-Carlo
    error is larger).

    Error bar (first order, added linearly): ``lambda``'s standard error at fixed ``Q*``
    and its shift by ``Q*``'s propagated standard error (``d lambda/dQ`` by one-sided
    differences), divided by the slope ``d(alpha lambda)/d alpha`` of the bracket."""
    se = make(U)
    entries = se._free_entries()
    solved = {}
    floor = alpha_prev * (1 + 1e-3)

    def at_alpha(alpha):
        alpha = float(alpha)
        if alpha not in solved:
            if len(solved) >= max_solves:
                raise ParameterError(f"grand staircase (alpha continuation): no threshold of "
                                     f"the rows {tuple(U)} after {max_solves} SE solves at "
                                     f"alpha {sorted(solved)}")
            t0 = time.perf_counter()
            below = [a for a in solved if a < alpha]
            if below:
                Q0 = solved[max(below)]["Q"]
            else:
                Q0 = Q_prev.copy()
                for a, b in entries:
                    if a == b and Q0[a, a] == 0:
                        Q0[a, a] = 0.05
            se.alpha = alpha
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = se.solve(Q0, tol=1e-6, max_iter=200, stderr=False, warmup=None)
            lam, lam_se, G = subspace_instability(se, res.Q, U)
            solved[alpha] = {"Q": res.Q, "lam": lam, "lam_se": lam_se, "vector": G,
                             "g": alpha * lam - 1.0, "res": res}
            say(f"  continuation: alpha {alpha:.5g}  Q diag {np.round(np.diag(res.Q), 5)}  "
                f"lambda {lam:.5g} +- {lam_se:.2g}  alpha lambda - 1 = {alpha * lam - 1:+.4g}  "
                f"(SE {res.iterations} iterations, converged {res.converged}, stable "
                f"{res.stable}; {time.perf_counter() - t0:.0f} s)")
        return solved[alpha]

    step = rel_step
    a = max(float(alpha_guess), floor)
    if at_alpha(a)["g"] < 0:
        lo = a
        while at_alpha(a)["g"] < 0:
            lo, a, step = a, a * (1 + step), 1.5 * step
        hi = a
    else:
        hi = a
        while a > floor and at_alpha(a)["g"] >= 0:
            hi, a, step = a, max(a / (1 + step), floor), 1.5 * step
        if at_alpha(a)["g"] >= 0:
            raise ParameterError(f"grand staircase: the rows {tuple(U)} are already unstable "
                                 f"just above the previous threshold {alpha_prev:.5g}; the "
                                 "stages are not separated")
        lo = a
    root = find_root(lambda x: at_alpha(x)["g"], lo, hi, xtol=rtol * lo, rtol=1e-12,
                     maxiter=max_solves, f_lo=solved[lo]["g"], f_hi=solved[hi]["g"],
                     name="grand staircase (alpha continuation)")
    alpha_c = float(root.value)
    pt = at_alpha(alpha_c)
    # the fixed point's standard error and stability at the root
    se.alpha = alpha_c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fin = se.solve(pt["Q"], tol=1e-6, max_iter=50, warmup=None)
    radius = se.spectral_radius(fin.Q)
    lam, lam_se, G = subspace_instability(se, fin.Q, U)
    x = se._to_free(fin.Q)
    via_q = 0.0
    for i, (a, b) in enumerate(entries):
        xp = _overlap_difference(se, x, i)
        lam_i = subspace_instability(se, se._from_free(xp), U)[0]
        via_q += abs((lam_i - lam) / (xp[i] - x[i])) * float(fin.Q_stderr[a, b])
    lam_err = lam_se + via_q
    slope = (hi * solved[hi]["lam"] - lo * solved[lo]["lam"]) / (hi - lo)
    qhat1, qhat1_se, _ = se.qhat(fin.Q, alpha=1.0)
    # lambda as measured at the converged point (alpha_c lambda = 1 to Brent's tolerance)
    at = {"Q": fin.Q, "lam": lam, "lam_se": lam_se, "vector": G, "alpha": alpha_c,
          "qhat1": qhat1, "qhat1_se": qhat1_se}
    return {"at": at, "alpha": alpha_c, "error": alpha_c * lam_err / abs(slope),
            "lam_err": lam_err, "radius": radius, "solves": len(solved),
            "how": (f"alpha continuation on the SE's stable branch ({len(solved)} SE solves, "
                    f"bracket [{lo:.5g}, {hi:.5g}], Brent to {rtol:g} relative)")}


def _overlap_difference(se, x, i):
    """``x`` with its learned overlap ``i`` moved by a one-sided difference step inside
    ``(0, 1)``: ``1e-4`` of its distance to the nearer end (at least ``1e-7``), and at least
    ``se.difference_step`` (a randomized rule's map is smooth only to its adaptive
    decisions); backwards where the forward point would reach 1."""
    h = max(1e-4 * max(min(x[i], 1 - x[i]), 1e-3), se.difference_step)
    xp = x.copy()
    xp[i] += h if x[i] + h < 1 else -h
    return xp


def _stage_residual(se, prior, Q, qhat1, lam):
    """``Q_S - F_prior(Q_hat_1 / lambda)`` on the free entries (overlap units, bounded: a
    residual in ``F_prior^{-1}(Q)`` units is ~1e4 times steeper at ``q ~ 0.99``); negative
    eigenvalues of the Monte-Carlo ``Q_hat`` within noise are clipped as in the SE."""
    x = 0.5 * (qhat1 + qhat1.T) / lam
    w, O = np.linalg.eigh(x)
    return se._to_free(Q - prior.overlap_map((O * np.clip(w, 0.0, None)) @ O.T) * se.mask)


def _root_sensitivity(evaluate, se, prior, at):
    """First-order response of ``lambda`` at the root ``R(x*) = 0`` of the stage equations
    (:func:`_stage_residual`) to the Monte-Carlo errors of ``lambda`` and ``Q_hat_1``:
    ``dR/dx`` by one-sided differences of the frozen-sample map in each learned overlap
    (into ``(0, 1)``), ``dR/dlambda`` and ``dR/dQ_hat`` by differences of the residual
    formula alone.  Returns ``(s, e)``: ``d lambda_root = s d lambda + sum_i c_i
    dQ_hat_1,i`` with ``e = sum_i |c_i| stderr(Q_hat_1,i)``."""
    x = se._to_free(at["Q"])
    k = len(x)
    JR = np.empty((k, k))
    g = np.empty(k)
    for i in range(k):
        xp = _overlap_difference(se, x, i)
        h = xp[i] - x[i]
        ev = evaluate(xp)
        JR[:, i] = (ev["resid"] - at["resid"]) / h
        g[i] = (ev["lam"] - at["lam"]) / h
    Q, qhat1, lam = at["Q"], at["qhat1"], at["lam"]
    base = _stage_residual(se, prior, Q, qhat1, lam)
    hl = 1e-6 * lam
    dR_lam = (_stage_residual(se, prior, Q, qhat1, lam + hl) - base) / hl
    try:
        w = np.linalg.solve(JR.T, g)          # g^T JR^{-1}
    except np.linalg.LinAlgError:
        return np.inf, np.inf
    s_lam = 1.0 - float(w @ dR_lam)
    e_qhat = 0.0
    for (a, b), se_ab in zip(se._free_entries(), se._to_free(at["qhat1_se"])):
        hq = 1e-6 * max(abs(qhat1[a, b]), 1e-6)
        qp = qhat1.copy()
        qp[a, b] += hq
        if a != b:
            qp[b, a] += hq
        dR_q = (_stage_residual(se, prior, Q, qp, lam) - base) / hq
        e_qhat += abs(float(w @ dR_q)) * se_ab
    return s_lam, e_qhat


def _order_check(make, Q_star, vec, alpha_c, learned, nxt, checks, prior, *, lam_rel,
                 check_delta, start=CHECK_START):
    """The SE itself at ``alpha_c (1 -+ delta)``: only the rows beyond ``nxt`` pinned, from
    ``Q*`` plus ``start`` along the top eigenvector on ``nxt``; the trace of ``Q`` on
    ``nxt`` after/before ``checks`` iterations of the map.

    Square estimator (exactly proportional to a small overlap, where the Nishimori twin
    adds O(1) per-sample noise to an O(q) mean), minus its noise floor: the value of the
    map on ``nxt`` at the same ``Q`` with ``nxt`` at 0, which vanishes in exact
    arithmetic (even model) and is the ``err^2`` of a randomized channel rule there.

    Its own noise: the per-sample spread of that slope at ``Q*`` (first order: relative
    standard error ``r``; the same samples at every iteration, so the log-growth over
    ``checks`` iterations is known to ``sigma = checks r``).  ``delta = max(check_delta,
    k3 sqrt(lam_rel^2 + r^2))`` (capped at 0.9), ``k_n`` the n-sigma tail multiple of the
    SE's standard errors (:meth:`~symtheory.glm.se.state_evolution.StateEvolution.tail_multiple`).  Verdict: ``'confirmed'`` when the growth is
    below 1 at ``alpha_c (1 - delta)`` and above 1 at ``alpha_c (1 + delta)``; otherwise
    ``'contradicted'`` when the check's own threshold ``1/slope`` differs from ``alpha_c``
    by more than ``k2`` combined relative errors (in log), else ``'inconclusive'`` (the samples
    cannot tell).  Returns a dict
    with ``growth {alpha: ratio}``, ``verdict``, ``delta``, ``slope``, ``slope_se``,
    ``log_growth_se``."""
    P = Q_star.shape[0]
    rest = [a for a in range(P) if a not in learned and a not in nxt]
    se = make(rest, estimator="square")
    idx = np.ix_(nxt, nxt)
    nx = list(nxt)

    def zeroed(Q):
        Q0 = Q.copy()
        Q0[nx, :] = 0.0
        Q0[:, nx] = 0.0
        return Q0

    Q = Q_star.copy()
    Q[idx] += start * vec[idx] / np.trace(vec[idx])
    per = [np.einsum("sam,sam->s", g[:, nx], g[:, nx]) for g in
           (se.gout_at(Q)[0], se.gout_at(zeroed(Q))[0])]
    d = (per[0] - per[1]) / start
    slope, slope_se = float(d.mean()), float(se.sample_mean_stderr(d)[1])
    r = slope_se / abs(slope) if slope else math.inf
    sigma = checks * r
    delta = min(0.9, max(check_delta, se.tail_multiple(3.0) * math.hypot(lam_rel, r)))
    growth = {}
    for alpha in (alpha_c * (1 - delta), alpha_c * (1 + delta)):
        se.alpha = alpha
        Q = Q_star.copy()
        Q[idx] += start * vec[idx] / np.trace(vec[idx])
        first = float(np.trace(Q[idx]))
        for _ in range(checks):
            qhat = se.qhat(Q)[0]
            qhat[idx] -= se.qhat(zeroed(Q))[0][idx]
            lam, O = np.linalg.eigh(0.5 * (qhat + qhat.T))
            Q = prior.overlap_map((O * np.clip(lam, 0.0, None)) @ O.T) * se.mask
        growth[round(alpha, 6)] = float(np.trace(Q[idx])) / first
    below, above = (growth[k] for k in sorted(growth))
    # the check's own threshold 1/slope against alpha_c = 1/lambda, in combined errors
    mismatch = abs(math.log(slope * alpha_c)) if slope > 0 else math.inf
    if below < 1 < above:
        verdict = "confirmed"
    elif mismatch > se.tail_multiple(2.0) * math.hypot(lam_rel, r):
        verdict = "contradicted"
    else:
        verdict = "inconclusive"
    return {"growth": growth, "verdict": verdict, "delta": delta, "slope": slope,
            "slope_se": slope_se, "log_growth_se": sigma, "check_alpha": 1 / slope
            if slope > 0 else math.inf}
