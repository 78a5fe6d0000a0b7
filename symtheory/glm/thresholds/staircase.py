"""The next threshold of the staircase (Eqs. 17-18 of Troiani et al., arXiv:2502.00901;
Troiani et al., arXiv:2405.15480): the fixed point ``Q*(alpha)`` on the learned rows, the
linearized operator at that point restricted to the remaining rows, and the ``alpha``
at which it becomes unstable.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...core.quadrature import TensorRule
from ...core.solvers import find_root
from ...core.validate import ParameterError
from ..factors.gaussian_prior import GaussianPrior
from ..integrate.reduced_posterior import ReducedPosterior
from .operator import (
    ThresholdResult,
    operator_matrix,
    prior_jacobian,
    sym_basis,
    tensor_from_jacobians,
    top_eigen,
)
from .weak_recovery import weak_recovery


# ---------------------------------------------------------------------- staircase
class StaircaseMap:
    """The two ingredients of the staircase (Eqs. (17)-(18) of arXiv:2502.00901) at ``Q = q e_s
    e_s^T``
    (row ``s`` learned, the others not), on frozen samples:

    * ``alpha(q)``: the sample ratio at which ``q`` is a fixed point of the one-parameter
      reduced SE, ``alpha(q) = [F_prior^{-1}(Q)]_ss / E[sum_m g_sm^2]`` (Eqs. (13)-(14)
      solved for alpha);
    * the operator at that fixed point restricted to the other rows ``U``:
      ``F_Q(Gamma)_{ab} = E sum J*_{am,cn} Gamma_cd J*_{bm,dn}``, ``J* = dg_out/domega``
      at ``(y, omega*, rho - Q)``, ``omega* = Q^{1/2} xi`` (Eq. 17), composed with the
      prior Jacobian on the ``U`` block (``F'(0)``: that block of ``Q_hat*`` is 0).

    The instability condition is ``G(q) = alpha(q) lambda_max(q) - 1 = 0``; on the stable
    branch ``q -> alpha(q)`` is increasing, so the root in ``q`` gives the threshold
    ``alpha_c(U) = alpha(q*)`` (checked by the caller).

    Samples: ``xi_s`` (M) and ``eta`` (P M) from ``batches`` independent scrambled Sobol
    sequences (randomized quasi-Monte Carlo, ``scipy.stats.qmc``) -- the spread of the
    batch means is an honest error bar even for the heavy-tailed per-sample values.

    Posterior moments (the free rows ``u`` integrated, App. E.1 of arXiv:2502.00901): when
    row ``s`` is nearly known (``v = 1 - q -> 0``) the integrand over ``u`` concentrates on
    the discrete preimages of ``u -> T(u)^{-1} E`` with widths ``~ sqrt(v)`` (prefer nodes
    that follow them), and the 30-node Gauss-Hermite rule over the prior of ``u`` is off by
    ~10% in ``E||g_s||^2`` at ``q = 0.995``.  The default rule follows that width: the
    trapezoid rule on ``|u| <= width`` with spacing ``sqrt(v) / nodes_per_sd``, i.e. ``n =
    max(41, ceil(2 width nodes_per_sd / sqrt(v)))`` (odd) nodes per axis; the trapezoid
    error of a Gaussian peak of standard deviation ``s`` at spacing ``h`` is ``~ exp(-2 pi^2
    s^2 / h^2)``.  Measured per sample against a brute-force 601^2 grid on ``[-7, 7]^2``
    (agreeing with 301^2 to 2e-8), 16 samples, c = 1, largest relative error of ``K_11`` /
    ``||g_2||^2``: spacing ``1.86 sqrt(v)`` (n = 41 at q = 0.95, 99 at 0.995): 2e-3 / 4e-3
    at 0.95, 3e-3 / 2e-2 at 0.995; spacing ``sqrt(v) / 1.5`` (the default; n = 89, 161,
    277): <= 6e-7 at q = 0.95, 0.985, 0.995.  Gauss-Hermite 30^2 over the prior: 6e-2 / 0.14
    (q = 0.95), 0.23 / 5.7 (0.985), 0.23 / 330 (0.995). ``max_peaks > 0`` selects the
    peak-following mixture of :mod:`symtheory.glm.integrate.posterior_rules` with this
    trapezoid rule on each component instead (around Newton-located maxima, power-2 shares,
    prior weight 0.01; at q = 0.95 / 0.985 / 0.995, learned row 1, 4096 samples: alpha(q)
    and lambda_max within 1.6e-7 relative of the default rule, where the balance-heuristic
    shares with prior weight 0.1 it had until 2026-11-27 were 0.3-0.9% off; kept as an
    option)."""

    def __init__(self, model, learned_row, *, samples=4096, batches=8, seed=0, rule=None,
                 max_peaks=0, prior=None, nodes_per_sd=1.5, width=6.5):
        from scipy.stats import norm, qmc

        self.model = model
        self.rp = ReducedPosterior(model)
        self.prior = prior or GaussianPrior()
        P, M = model.P, model.M
        self.s = int(learned_row)
        if not 0 <= self.s < P:
            raise ParameterError(f"learned_row must be in [0, {P - 1}], got {learned_row}")
        self.U = [a for a in range(P) if a != self.s]
        self.fixed_rule = rule
        self.nodes_per_sd, self.width = float(nodes_per_sd), float(width)
        self.max_peaks = int(max_peaks)
        if int(batches) < 2:
            raise ParameterError(f"batches must be >= 2, got {batches}")
        per = max(16, int(samples) // int(batches))
        m = int(math.ceil(math.log2(per)))
        rng = np.random.default_rng(seed)
        blocks = []
        for _ in range(int(batches)):
            sob = qmc.Sobol(d=M + P * M, scramble=True, seed=rng)
            u = sob.random_base2(m)
            blocks.append(norm.ppf(np.clip(u, 1e-16, 1 - 1e-16)))
        x = np.concatenate(blocks)
        self.batches, self.per_batch = int(batches), 2 ** m
        self.n = len(x)
        self.xi = x[:, :M]
        self.eta = x[:, M:].reshape(self.n, P, M)
        self.Jp_U = prior_jacobian(self.prior, len(self.U))
        self.evaluations = 0
        # starting points for the peak search: the true free rows and their flips for the
        # even free groups that carry no side field (unlearned), a symmetry of the posterior
        self.flip_groups = [g for g, even in model.even_groups.items()
                            if even and self.s not in g and set(g) <= set(model.free_rows)]

    def sample(self, q, batches=None):
        """``(omega, Z, V)`` of the frozen samples (the first ``batches`` batches)."""
        P, M = self.model.P, self.model.M
        n = self.n if batches is None else int(batches) * self.per_batch
        omega = np.zeros((n, P, M))
        omega[:, self.s] = math.sqrt(q) * self.xi[:n]
        Z = self.eta[:n].copy()
        Z[:, self.s] = omega[:, self.s] + math.sqrt(1.0 - q) * self.eta[:n, self.s]
        V = np.eye(P)
        V[self.s, self.s] = 1.0 - q
        return omega, Z, V

    def rule(self, q, scale=1.0):
        """The inner rule at overlap ``q`` (class docstring); ``scale`` < 1 coarsens it."""
        if self.fixed_rule is not None:
            r = self.fixed_rule
            return TensorRule(r.kind, max(4, int(round(scale * r.n))), r.width)
        n = max(41, int(math.ceil(2.0 * self.width * self.nodes_per_sd / math.sqrt(1.0 - q))))
        n = int(round(scale * n)) | 1
        return TensorRule("uniform", n, self.width)

    def evaluate(self, q, rule=None, max_peaks=None, batches=None):
        """``dict``: ``alpha``, ``lam``, ``G`` (all samples, or the first ``batches``
        batches) and per batch ``alpha_b``, ``lam_b`` (``v^T F_b v`` at the top
        eigenvector ``v``, control variates applied), ``G_b``, plus the Nishimori gap of
        the learned entry and the mean number of peaks found."""
        if not 0 < q < 1:
            raise ParameterError(f"q must be in (0, 1), got {q}")
        rule = rule or self.rule(q)
        max_peaks = self.max_peaks if max_peaks is None else max_peaks
        P, M = self.model.P, self.model.M
        B = self.batches if batches is None else min(int(batches), self.batches)
        omega, Z, V = self.sample(q, B)
        n = len(Z)
        rp = self.rp
        E = rp.E_of_Z(Z)
        Ebr, lw, valid, _ = rp.branches(E)
        free = list(rp.free_rows)
        u_true = Z[:, free, :]
        starts = [u_true]
        for g in self.flip_groups:
            flipped = u_true.copy()
            for a in g:
                flipped[:, free.index(a)] *= -1
            starts.append(flipped)
        starts = np.stack([s.reshape(n, -1) for s in starts], axis=1)
        logZ, mean, cov, peaks = rp.posterior(Ebr, lw, valid, omega, V, rule, starts=starts,
                                              max_peaks=max_peaks)
        bad = ~np.isfinite(logZ)
        if bad.any():
            raise FloatingPointError(f"posterior normalizer not finite on {bad.sum()} samples at q={q}")
        Vinv = np.linalg.inv(V)
        g = np.einsum("ab,sbm->sam", Vinv, mean - omega)
        C = cov.reshape(n, P, M, P, M)
        J = np.einsum("ac,scmdn,db->sambn", Vinv, C, Vinv) \
            - np.einsum("ab,mn->ambn", Vinv, np.eye(M))[None]
        sq = np.sum(g[:, self.s] ** 2, axis=1)
        # Nishimori twin of E[sum_m g_sm^2] (Eq. (12) of arXiv:2502.00901): same mean,
        # bounded above by M/v, 2.8x smaller relative spread than the square at q = 0.97 (c
        # = 1)
        twin = -np.einsum("smm->s", J[:, self.s, :, self.s, :])
        U = self.U
        JU = J[:, U][:, :, :, U]
        target = float(self.prior.inverse_overlap_map(np.diag(
            [q if a == self.s else 0.0 for a in range(P)]))[self.s, self.s])
        n_b = self.per_batch
        A_b = twin.reshape(B, n_b).mean(axis=1)
        T = tensor_from_jacobians(JU, np.full(n, 1.0 / n))
        lam, G_U, _ = top_eigen(self.Jp_U @ operator_matrix(T), len(U))
        # per-sample v^T (Jp F_i) v along the top eigenvector, with the entries of J_UU as
        # control variates: E[J_UU] = Cov(z_U) - E[E[z_U|y] E[z_U|y]^T] - I = 0 because the
        # unlearned even rows have E[z_U | y, omega] = 0 (variance / 3.8 at q = 0.97, c = 1)
        _, Bs = sym_basis(len(U))
        v = np.einsum("iab,ab->i", Bs, G_U)
        Gam = np.einsum("i,iab->ab", self.Jp_U @ v, Bs)
        per = np.einsum("ab,samcn,cd,sbmdn->s", G_U, JU, Gam, JU)
        X = JU.reshape(n, -1)
        Xc = X - 0.0
        beta = np.linalg.lstsq(Xc, per - per.mean(), rcond=None)[0]
        per_cv = per - Xc @ beta
        lam_b = per_cv.reshape(B, n_b).mean(axis=1)
        lam_cv = lam - float(np.mean(Xc @ beta))
        alpha = target / A_b.mean()
        alpha_b = target / A_b
        self.evaluations += 1
        return {"q": q, "alpha": alpha, "lam": lam_cv, "lam_plain": lam,
                "G": alpha * lam_cv - 1.0, "alpha_b": alpha_b,
                "lam_b": lam_b, "G_b": alpha_b * lam_b - 1.0, "subspace": G_U,
                "nishimori_gap": float(abs(sq.mean() - twin.mean()) / twin.mean()),
                "nishimori_gap_stderr": float((sq - twin).std(ddof=1) / math.sqrt(n) / twin.mean()),
                "peaks": float(peaks.mean())}


def staircase(model, *, learned_row=None, samples=4096, batches=8, seed=0, rule=None,
              max_peaks=0, prior=None, q_grid=(0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995,
                                               0.998),
              xtol=1e-3, nodes_per_sd=1.0):
    """Return the staircase threshold of the rows not learned first (Eqs. (17)-(18) of arXiv:2502.00901).

    ``learned_row``: the row learned at the weak-recovery threshold (default: from
    :func:`weak_recovery`, the row carrying its PSD eigenvector; needs an even model
    whose eigenvector is one row, e.g. ``e_2 e_2^T`` for the two-layer attention).  The
    root ``q*`` of ``G(q) = alpha(q) lambda_max(q) - 1`` (:class:`StaircaseMap`) is
    bracketed on ``q_grid`` and solved by Brent on the frozen samples with the inner
    rule fixed at the bracket's upper end (``G`` is then smooth in ``q``); ``alpha_c =
    alpha(q*)``.  Error bar: standard error over the ``batches`` independent randomized
    QMC sequences of the linearized per-batch threshold ``alpha_b + alpha'(q*) (-G_b /
    G'(q*))`` (batch means: robust to the heavy-tailed per-sample values) plus the
    change when the inner rule is coarsened to 3/4 of its nodes per axis (an upper
    estimate of the quadrature error).  The SE stability of the branch is checked:
    ``alpha(q)`` must increase over the scanned grid and at ``q*``.

    ``nodes_per_sd = 1`` (spacing ``sqrt(1 - q*)``, 2.25x fewer nodes than the accuracy
    default of :class:`StaircaseMap`): its quadrature error, ~1e-4 per sample at worst and
    measured by the coarsened rule as part of the error bar, stays far below the
    statistical error that sets the cost (1.5e-6 vs 1.2e-2 at c = 1 with 1024 samples).

    Parameters
    ----------
    model : MultiIndexModel
        An even model with a deterministic reduction.
    learned_row : int, optional
        The row learned at the weak-recovery threshold (default from
        :func:`~symtheory.glm.thresholds.weak_recovery.weak_recovery`).
    samples : int, optional
        Frozen RQMC samples in all.
    batches : int, optional
        Independent RQMC sequences (the error bar's batch means).
    seed : int, optional
        Seed of the sequences.
    rule : optional
        Quadrature over the free rows (default: the trapezoid rule that follows the
        posterior's width, ``StaircaseMap``).
    max_peaks : int, optional
        ``> 0`` selects the peak-following mixture rule instead.
    prior : Prior, optional
        Weight prior (default ``GaussianPrior``).
    q_grid : tuple of float, optional
        Overlaps of the learned row scanned to bracket ``q*``.
    xtol : float, optional
        Brent tolerance in ``q``.
    nodes_per_sd : float, optional
        Trapezoid nodes per posterior standard deviation (above).

    Returns
    -------
    ThresholdResult
        ``value`` (``alpha_c``, in ``alpha = n/D``), ``error`` (statistical + quadrature), ``subspace``,
        ``converged`` and ``details`` (``q_star``, the scan, the per-batch thresholds).

    Examples
    --------
    Two-layer softmax attention (Eq. 6 of arXiv:2502.00901): row 1 is learned first, row 0 at the staircase
    (a small sample: ~10 s).

    >>> from symtheory import smi
    >>> from symtheory.glm import staircase
    >>> res = staircase(smi.deep_attention(depth=2, seq_len=2), samples=64, batches=4)
    >>> res.details["learned_row"], res.converged, bool(0.6 < res.value < 0.9)
    (1, True, True)
    """
    t0 = time.perf_counter()
    _check_model(model)
    if learned_row is None:
        learned_row = _first_learned_row(model)
    smap = StaircaseMap(model, learned_row, samples=samples, batches=batches, seed=seed,
                        rule=rule, max_peaks=max_peaks, prior=prior, nodes_per_sd=nodes_per_sd)
    scan, lo, hi = _scan(smap, q_grid)
    alphas = [e["alpha"] for e in scan]
    monotone = all(b > a for a, b in zip(alphas, alphas[1:]))
    solve_rule = smap.rule(hi["q"])
    ev_at = _evaluations(smap, solve_rule)
    lo_q, hi_q, lo_f, hi_f = _bracket_on_all_samples(ev_at, q_grid, lo["q"], hi["q"])
    root = find_root(lambda q: ev_at(q)["G"], lo_q, hi_q, f_lo=lo_f["G"], f_hi=hi_f["G"],
                     xtol=xtol, rtol=1e-12, name="staircase instability")
    qs = float(root.value)
    at = ev_at(qs)
    dG, dalpha = _slopes(ev_at, qs, lo_q)
    alpha_b = at["alpha_b"] + dalpha * (-at["G_b"] / dG)
    stat = float(alpha_b.std(ddof=1)) / math.sqrt(len(alpha_b))
    alpha_c = at["alpha"] + dalpha * (-at["G"] / dG)
    coarse_rule = smap.rule(hi_q, scale=0.75) if rule is None else \
        TensorRule(rule.kind, max(4, int(round(0.75 * rule.n))), rule.width)
    quad = _quadrature_error(smap, coarse_rule, qs, at, dG, dalpha)
    err = stat + quad
    stable = monotone and dalpha > 0
    msg = (f"row {learned_row} learned first (fixed point q* = {qs:.6f}); rows {smap.U} "
           f"become unstable at alpha = {alpha_c:.6g} +- {err:.2g} (statistical {stat:.2g}, "
           f"quadrature {quad:.2g}); G'(q*) = {dG:.4g}, alpha'(q*) = {dalpha:.4g}; "
           f"{smap.evaluations} map evaluations on {smap.n} samples ({smap.batches} RQMC batches)")
    if not stable:
        msg += "; WARNING: alpha(q) is not increasing on the scanned grid (unstable branch?)"
    details = {"q_star": qs, "scan": [{k: v for k, v in e.items() if not k.endswith("_b")}
                                      for e in scan],
               "dG_dq": dG, "dalpha_dq": dalpha, "stat_error": stat, "quadrature_error": quad,
               "alpha_batches": alpha_b.tolist(), "nishimori_gap": at["nishimori_gap"],
               "rule": f"{solve_rule.kind} {solve_rule.n}",
               "coarse_rule": f"{coarse_rule.kind} {coarse_rule.n}", "learned_row": learned_row,
               "K_next": at["lam"], "alpha_at_q": at["alpha"]}
    G_full = np.zeros((model.P, model.P))
    G_full[np.ix_(smap.U, smap.U)] = at["subspace"]
    return ThresholdResult(kind="staircase", value=alpha_c, error=err, error_kind="stderr",
                           method=f"staircase (RQMC {smap.n} samples, {solve_rule.kind} "
                           f"{solve_rule.n}^{len(model.free_rows) * model.M} inner rule, "
                           "Brent in q)", subspace=G_full, eigenvalue=at["lam"],
                           converged=bool(root.converged and stable), message=msg,
                           seconds=time.perf_counter() - t0, details=details)


def _evaluations(smap, solve_rule):
    """``ev_at(q, rule=solve_rule)``: the map on all samples, each point evaluated once."""
    cache = {}

    def ev_at(q, r=solve_rule):
        key = (q, r.n)
        if key not in cache:
            cache[key] = smap.evaluate(q, rule=r)
        return cache[key]

    return ev_at


def _scan(smap, q_grid):
    """``(scan, lo, hi)``: the evaluations along ``q_grid`` on a quarter of the samples up
    to the first with ``G >= 0`` (``hi``), ``lo`` the last before it with ``G < 0``."""
    scan = []
    lo = hi = None
    scan_batches = max(2, smap.batches // 4)
    for q in q_grid:
        ev = smap.evaluate(q, batches=scan_batches)       # bracketing: a quarter of the samples
        scan.append(ev)
        if ev["G"] < 0:
            lo = ev
        else:
            hi = ev
            break
    if lo is None or hi is None:
        raise ParameterError(
            f"no sign change of alpha(q) lambda(q) - 1 on q in {list(q_grid)}: values "
            f"{[round(e['G'], 4) for e in scan]}")
    return scan, lo, hi


def _bracket_on_all_samples(ev_at, q_grid, lo_q, hi_q):
    """``(lo_q, hi_q, ev_at(lo_q), ev_at(hi_q))``: the scan's bracket checked with all
    samples (``ev_at``), moved along ``q_grid`` until ``G`` changes sign on it."""
    lo_f, hi_f = ev_at(lo_q), ev_at(hi_q)
    k = q_grid.index(hi_q)
    while not (lo_f["G"] < 0 < hi_f["G"]):
        # all samples can move the sign change by one grid point
        if lo_f["G"] >= 0 and q_grid.index(lo_q) > 0:
            hi_q, hi_f = lo_q, lo_f
            lo_q = q_grid[q_grid.index(lo_q) - 1]
            lo_f = ev_at(lo_q)
        elif hi_f["G"] <= 0 and k + 1 < len(q_grid):
            k += 1
            lo_q, lo_f = hi_q, hi_f
            hi_q = q_grid[k]
            hi_f = ev_at(hi_q)
        else:
            raise ParameterError("no sign change of alpha(q) lambda(q) - 1 with all samples; "
                                 "refine q_grid")
    return lo_q, hi_q, lo_f, hi_f


def _slopes(ev_at, qs, lo_q):
    """``(G'(q*), alpha'(q*))`` by central differences on the frozen samples."""
    # Brent may return the bracket's end itself (its best iterate when G(hi) is the
    # smallest value seen): the difference step may reach past it (G is smooth in q on
    # the frozen samples with the rule fixed), never past the lower end or q = 1
    h = min(2e-3, 0.5 * (qs - lo_q), 0.5 * (1.0 - qs))
    plus, minus = ev_at(qs + h), ev_at(qs - h)
    return (plus["G"] - minus["G"]) / (2 * h), (plus["alpha"] - minus["alpha"]) / (2 * h)


def _quadrature_error(smap, coarse_rule, qs, at, dG, dalpha):
    """The change of the linearized threshold at ``q*`` when the inner rule is coarsened
    to ``coarse_rule`` (an upper estimate of the quadrature error)."""
    coarse = smap.evaluate(qs, rule=coarse_rule)
    return abs(coarse["alpha"] - at["alpha"] + dalpha * (-(coarse["G"] - at["G"]) / dG))


def _check_model(model):
    if model.reduction is None:
        raise ParameterError("the staircase needs a noiseless link with a DeterministicReduction")
    if not model.is_even:
        raise ParameterError("the staircase needs an even model (its rows must be an invariant "
                             "subspace of the SE)")


def _first_learned_row(model) -> int:
    """The row learned at the weak-recovery threshold (the row carrying its PSD
    eigenvector)."""
    wr = weak_recovery(model, outer_nodes=32, rule=TensorRule("gauss-hermite", 24))
    lam_G, vec = np.linalg.eigh(wr.subspace)
    rows = [a for a in range(model.P) if abs(vec[a, -1]) > 1e-6]
    if len(rows) != 1 or np.sum(lam_G > 1e-8) != 1:
        raise ParameterError("the first learnable subspace is not a single row; give learned_row")
    return rows[0]
