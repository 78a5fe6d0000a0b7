"""Matrix state evolution of sequence multi-index models (smi.md Eqs. 13-14, Sec. 6.1).

    Q_hat = alpha E_{xi, eta}[ sum_m g_out(y, omega, V)_{.m} g_out(...)_{.m}^T ],
        omega = Q^{1/2} xi,  Z = omega + (rho - Q)^{1/2} eta,  y = g(Z) (+ noise),  V = rho - Q,
    Q_new = F_prior(Q_hat + lambda I)       (lambda: side information, smi.md 6)

For the Gaussian prior N(0, I_P) ``F_prior`` is the matrix function of the scalar
overlap map ``qhat/(1 + qhat)`` *derived* from the prior's log-partition
(:func:`symtheory.glm.priors.gaussian_overlap_map`): the prior is rotation invariant,
so ``F(O diag(l) O^T) = O diag(F(l)) O^T`` (= ``Q_hat (I + Q_hat)^{-1}``).

The expectation is a Monte-Carlo average over ``samples`` draws of ``(xi, eta, noise)``
drawn **once** (common random numbers): the map is then a smooth deterministic function
of ``Q`` and the damped iteration converges to machine precision on it.  Reported
uncertainties: the standard error of ``Q_hat`` (per-sample spread / sqrt(samples)) and
of the fixed point, propagated through the linearized map ``(I - dF)^{-1}`` (estimated
by differencing the frozen-sample map), which grows near a threshold.

Structure: when the model is even in every row group (smi.md 2.2) the cross-group
blocks of ``Q`` vanish at every iteration in expectation; the engine then keeps them at
exactly zero (``structure='block'``) so Monte-Carlo noise cannot break the symmetry.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from ..core.linalg import psd_sqrt
from ..core.solvers import ConvergenceWarning
from .priors import GaussianPrior


@dataclass
class SEResult:
    Q: np.ndarray
    Qhat: np.ndarray
    converged: bool
    iterations: int
    residual: float
    Qhat_stderr: np.ndarray
    Q_stderr: np.ndarray
    nishimori_gap: float
    message: str
    trace: list = field(default_factory=list)

    def as_dict(self):
        return {"Q": self.Q.tolist(), "converged": self.converged, "iterations": self.iterations,
                "residual": self.residual, "Q_stderr": self.Q_stderr.tolist(),
                "nishimori_gap": self.nishimori_gap, "message": self.message}


class StateEvolution:
    """SE of an SMI model at sample complexity ``alpha`` (see the module docstring).

    Parameters: ``model`` (:class:`~symtheory.glm.multi_index.MultiIndexModel`), ``alpha > 0``,
    ``samples`` (Monte-Carlo draws, frozen), ``seed``, ``noise_variance`` (Gaussian
    output noise; ``None`` = noiseless), ``rule`` (quadrature of the channel),
    ``side_information`` lambda >= 0, ``structure`` ('auto', 'block', 'full'),
    ``regularization`` eps >= 0: use ``V = rho - Q + eps I`` for both the teacher and
    the channel, as the reference code (``BO_2w.py``, eps = 1e-3) -- only to reproduce
    it; it caps how sharply a learned layer is known (smi.md 11.4).
    ``estimator``: ``'square'`` averages ``sum_m g g^T``; ``'combined'`` (default when
    Bayes-optimal) averages it with its Nishimori twin ``-sum_m J_mm`` (same mean,
    smi.md 3) with the per-entry weights of minimal variance, measured on the frozen
    samples and then kept fixed -- about 3x lower variance for the attention channel
    (the ``g g^T`` samples are heavy-tailed, ``-J`` is bounded above).
    """

    def __init__(self, model, alpha, *, samples=20000, seed=0, noise_variance=None, rule=None,
                 side_information=0.0, structure="auto", prior=None, regularization=0.0,
                 estimator="auto"):
        if not (np.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be finite and > 0, got {alpha}")
        if int(samples) < 2:
            raise ValueError(f"samples must be >= 2, got {samples}")
        if not (np.isfinite(side_information) and side_information >= 0):
            raise ValueError(f"side_information must be finite and >= 0, got {side_information}")
        if structure not in ("auto", "block", "full"):
            raise ValueError(f"structure must be 'auto', 'block' or 'full', got {structure!r}")
        self.model = model
        self.alpha = float(alpha)
        self.samples = int(samples)
        self.seed = seed
        self.lam = float(side_information)
        self.channel = model.channel(noise_variance, rule)
        self.noise_variance = noise_variance
        self.prior = prior or GaussianPrior()
        P, M = model.P, model.M
        rng = np.random.default_rng(seed)
        self.xi = rng.standard_normal((self.samples, P, M))
        self.eta = rng.standard_normal((self.samples, P, M))
        n_out = model.link.rows * model.link.cols
        self.noise = rng.standard_normal((self.samples, n_out)) if noise_variance else None
        if structure == "auto":
            structure = "block" if model.is_even else "full"
        self.structure = structure
        self.mask = np.ones((P, P))
        if structure == "block":
            self.mask = np.zeros((P, P))
            for g in model.row_groups:
                self.mask[np.ix_(g, g)] = 1.0
        self.rho = self.prior.rho(P)
        if not (np.isfinite(regularization) and regularization >= 0):
            raise ValueError(f"regularization must be finite and >= 0, got {regularization}")
        self.regularization = float(regularization)
        if estimator == "auto":
            estimator = "square" if regularization > 0 else "combined"
        if estimator not in ("square", "combined"):
            raise ValueError(f"estimator must be 'auto', 'square' or 'combined', got {estimator!r}")
        if estimator == "combined" and regularization > 0:
            raise ValueError("the combined estimator relies on the Nishimori identity, which the "
                             "regularized (mismatched) channel breaks; use estimator='square'")
        self.estimator = estimator
        self.evaluations = 0
        self.psd_projections = 0

    # ------------------------------------------------------------------ map
    def _check_Q(self, Q):
        Q = np.asarray(Q, dtype=float)
        P = self.model.P
        if Q.shape != (P, P):
            raise ValueError(f"Q must be {P} x {P}, got {Q.shape}")
        Q = 0.5 * (Q + Q.T) * self.mask
        lam_V = np.linalg.eigvalsh(self.rho - Q)
        lam_Q = np.linalg.eigvalsh(Q)
        if lam_Q[0] < -1e-12 or lam_V[0] <= 0:
            raise ValueError(f"Q must satisfy 0 <= Q < rho (eigenvalues of Q in "
                             f"[{lam_Q[0]:.3g}, {lam_Q[-1]:.3g}], of rho - Q from {lam_V[0]:.3g})")
        return Q

    def sample_channel(self, Q):
        """``(y, omega, V)`` of the frozen samples at overlap ``Q``."""
        Q = self._check_Q(Q)
        V = self.rho - Q + self.regularization * np.eye(self.model.P)
        sq, sv = psd_sqrt(Q), psd_sqrt(V)
        omega = np.einsum("ab,sbm->sam", sq, self.xi)
        Z = omega + np.einsum("ab,sbm->sam", sv, self.eta)
        y = self.model.g(Z).reshape(self.samples, -1)
        if self.noise is not None:
            y = y + np.sqrt(self.noise_variance) * self.noise
        return y, omega, V, Z

    def qhat(self, Q, alpha=None):
        """``(Q_hat, stderr, nishimori_gap)`` at ``Q`` from the frozen samples."""
        alpha = self.alpha if alpha is None else alpha
        y, omega, V, _ = self.sample_channel(Q)
        g, dg = self.channel.gout(y, omega, V)
        bad = ~np.all(np.isfinite(g.reshape(len(g), -1)), axis=1)
        if bad.any():
            raise FloatingPointError(
                f"g_out is not finite for {bad.sum()} of {len(g)} samples at Q = {Q.tolist()} "
                "(channel quadrature failed; try a finer rule)")
        sq = np.einsum("sam,sbm->sab", g, g)
        tw = -np.einsum("sambm->sab", dg)
        if self.estimator == "combined":
            if getattr(self, "_weights", None) is None:
                C_ss = sq.var(axis=0)
                C_tt = tw.var(axis=0)
                C_st = ((sq - sq.mean(0)) * (tw - tw.mean(0))).mean(axis=0)
                den = C_ss + C_tt - 2 * C_st
                self._weights = np.where(den > 0, (C_tt - C_st) / np.where(den > 0, den, 1.0), 1.0)
            w = self._weights
            per = w * sq + (1 - w) * 0.5 * (tw + np.swapaxes(tw, 1, 2))
        else:
            per = sq
        Qhat = alpha * per.mean(axis=0)
        stderr = alpha * per.std(axis=0, ddof=1) / np.sqrt(self.samples)
        m_sq, m_tw = sq.mean(axis=0), tw.mean(axis=0)
        gap = float(np.max(np.abs(m_sq - m_tw)) / max(1e-300, np.max(np.abs(m_sq))))
        self.evaluations += 1
        return 0.5 * (Qhat + Qhat.T) * self.mask, stderr * self.mask, gap

    def psi_out(self, Q, *, include_jacobian=True):
        """``Psi_out(Q) = E_{xi, y} log Z_out(y; Q^{1/2} xi, rho - Q)`` on the frozen samples
        (density of ``y`` in the model's observed coordinates).  Returns ``(value, stderr)``.
        ``include_jacobian=False`` drops the y-only output Jacobian of deterministic
        channels: a Q-independent shift in expectation but a heavy-tailed one sample by
        sample, so derivatives in Q are far less noisy without it."""
        y, omega, V, _ = self.sample_channel(Q)
        if include_jacobian or not hasattr(self.channel, "branches"):
            logZ = self.channel.moments(y, omega, V)[0]
        else:
            logZ = self.channel.moments(y, omega, V, include_jacobian=False)[0]
        if not np.all(np.isfinite(logZ)):
            raise FloatingPointError("log Z_out is not finite on some samples")
        return float(logZ.mean()), float(logZ.std(ddof=1) / np.sqrt(len(logZ)))

    def free_entropy(self, Q):
        """Replica-symmetric free entropy at ``Q`` with ``Q_hat`` from the SE map (smi.md 4):
        ``Phi = -Tr(Q Q_hat)/2 + psi_P(Q_hat) + alpha Psi_out(Q)``.  Returns
        ``(Phi, stderr)`` (stderr of the Monte-Carlo term).  At a fixed point it is the
        value whose maximum over fixed points selects the Bayes-optimal one."""
        Q = self._check_Q(Q)
        Qhat = self.psd_qhat(Q) + self.lam * np.eye(self.model.P)
        po, se = self.psi_out(Q)
        phi = -0.5 * float(np.sum(Q * Qhat)) + self.prior.psi(Qhat) + self.alpha * po
        return phi, self.alpha * se

    def alpha_at_fixed_point(self, Q, entry=None):
        """The ``alpha`` at which ``Q`` is a fixed point along ``entry`` (smi.md 6.1 item 6):
        ``alpha = [F_prior^{-1}(Q)]_ee / E[g g^T]_ee`` (the channel does not depend on
        alpha).  Returns ``(alpha, stderr)``.  Exact for a one-parameter reduced SE (e.g.
        ``Q = diag(0, q2)`` below the layer-1 threshold)."""
        Q = self._check_Q(Q)
        if entry is None:
            i = int(np.argmax(np.abs(np.diag(Q))))
            entry = (i, i)
        a, b = entry
        target = self.prior.inverse_overlap_map(Q)[a, b] - self.lam * (a == b)
        Qhat1, se1, _ = self.qhat(Q, alpha=1.0)
        return target / Qhat1[a, b], target * se1[a, b] / Qhat1[a, b] ** 2

    def step(self, Q):
        P = self.model.P
        return self.prior.overlap_map(self.psd_qhat(Q) + self.lam * np.eye(P)) * self.mask

    def psd_qhat(self, Q):
        """``Q_hat`` at ``Q``, a vanishing eigenvalue pushed below 0 by noise projected out."""
        Qhat, se, _ = self.qhat(Q)
        lam, O = np.linalg.eigh(Qhat)
        if lam[0] < 0:
            # Q_hat is PSD in expectation; the combined estimator's Monte-Carlo noise can
            # push a vanishing eigenvalue slightly below 0.  Within 4 standard errors this
            # is projected out (and counted); beyond, it is an error.
            if -lam[0] > 4 * float(np.max(se)) + 1e-12:
                raise FloatingPointError(
                    f"Q_hat has eigenvalue {lam[0]:.3g}, beyond 4 Monte-Carlo standard errors "
                    f"({np.max(se):.3g}) of positive semidefiniteness")
            self.psd_projections += 1
            Qhat = (O * np.clip(lam, 0.0, None)) @ O.T
        return Qhat

    # ------------------------------------------------------------------ solve
    def solve(self, Q0=None, *, damping=0.5, tol=1e-8, max_iter=300, newton_below=1e-3,
              kick=0.05, max_kicks=3, progress=False, stderr=True) -> SEResult:
        """Stable fixed point of ``Q = F(Q)`` on the frozen samples, from ``Q0``.

        Damped iteration ``Q <- (1 - theta) F(Q) + theta Q`` follows the basin of the
        start (``Q0`` defaults to ``0.05 I``: a small symmetry-breaking overlap, the
        reference's start; pass e.g. ``0.99 I`` for an informed start).  Once the
        residual is below ``newton_below`` it is polished by Newton steps on the free
        entries (Jacobian by differencing the smooth frozen-sample map), accepted only
        when they reduce the residual -- this removes the critical slowing down near
        thresholds.  Converged when ``max |F(Q) - Q| <= tol``.

        Stability: an even model keeps ``Q_ll = 0`` exactly, so a layer that decayed
        while another was being learned can sit on an *unstable* fixed point (the
        staircase of smi.md 8.4), and Newton can land on one.  After convergence the
        map's Jacobian is checked; if an eigenvalue exceeds 1 the iteration restarts from
        the fixed point plus ``kick`` along the unstable direction (what vanishing side
        information does), at most ``max_kicks`` times; the message reports it.
        """
        P = self.model.P
        Q = self._check_Q(0.05 * np.eye(P) if Q0 is None else Q0)
        if not 0 <= damping < 1:
            raise ValueError(f"damping must be in [0, 1), got {damping}")
        trace = []
        converged = False
        res = np.inf
        kicks = 0
        total = 0
        from ..core.progress import progress_bar

        bar = progress_bar(range(max_iter * (max_kicks + 1)), desc=f"SE alpha={self.alpha:g}",
                           enabled=progress)
        bar_iter = iter(bar)
        while True:
            converged, Q, res, it = self._iterate(Q, damping, tol, max_iter, newton_below, trace,
                                                  bar_iter)
            total += it
            if not converged or kicks >= max_kicks:
                break
            Qk = self._escape_unstable(Q, kick)
            if Qk is None:
                break
            kicks += 1
            Q = Qk
        Qhat, se, gap = self.qhat(Q)
        Q_se = self._fixed_point_stderr(Q, se) if stderr else np.full((P, P), np.nan)
        msg = (f"converged in {total} iterations (residual {res:.2e})" if converged
               else f"not converged after {total} iterations (residual {res:.2e})")
        if kicks:
            msg += f"; left {kicks} unstable fixed point(s) along their unstable direction"
        if self.psd_projections:
            msg += (f"; {self.psd_projections} map evaluations projected Q_hat onto the PSD cone "
                    "(negative eigenvalue within 4 standard errors)")
        if not converged:
            warnings.warn(f"state evolution at alpha={self.alpha:g}: {msg}", ConvergenceWarning,
                          stacklevel=2)
        return SEResult(Q, Qhat, converged, total, res, se, Q_se, gap, msg, trace)

    def _iterate(self, Q, damping, tol, max_iter, newton_below, trace, bar_iter):
        FQ = self.step(Q)
        res = np.inf
        for it in range(1, max_iter + 1):
            next(bar_iter, None)
            res = float(np.max(np.abs(FQ - Q)))
            trace.append({"iteration": len(trace) + 1, "Q": Q.copy(), "residual": res})
            if res <= tol:
                # at perfect recovery F(Q) can round onto the boundary Q = rho; keep the
                # last interior iterate then (it is within tol of the fixed point)
                inside = np.linalg.eigvalsh(self.rho - FQ)[0] > 0
                return True, (FQ if inside else Q), res, it
            Qn = None
            if res < newton_below:
                Qn = self._newton_step(Q, FQ)
            if Qn is None:
                Qn = (1 - damping) * FQ + damping * Q
                if np.linalg.eigvalsh(self.rho - Qn)[0] <= 1e-12:
                    Qn = Q + 0.5 * (Qn - Q)
            Q = 0.5 * (Qn + Qn.T) * self.mask
            FQ = self.step(Q)
        return False, Q, res, max_iter

    def _escape_unstable(self, Q, kick):
        """``Q + kick v`` for the unstable eigenvector ``v`` of ``dF/dQ``, or ``None``."""
        try:
            J = self._map_jacobian(Q, self.step(Q))
        except ValueError:       # on the boundary of the domain: nothing to escape
            return None
        if J is None:
            return None
        lam, vecs = np.linalg.eig(J)
        k = int(np.argmax(lam.real))
        if lam[k].real <= 1.0 + 1e-6:
            return None
        v = vecs[:, k].real
        entries = self._free_entries()
        diag = [i for i, (a, b) in enumerate(entries) if a == b]
        if diag and np.sum(v[diag]) < 0:
            v = -v
        v = v / np.max(np.abs(v))
        for scale in (kick, kick / 4, kick / 16):
            Qk = Q.copy()
            for (a, b), x in zip(entries, v):
                Qk = self._with_entry(Qk, a, b, Qk[a, b] + scale * x)
            try:
                return self._check_Q(Qk)
            except ValueError:
                continue
        return None

    def _with_entry(self, Q, a, b, value):
        Qn = Q.copy()
        Qn[a, b] = Qn[b, a] = value
        return Qn

    def _map_jacobian(self, Q, FQ, h=1e-6):
        """``dF/dQ`` on the free entries by one-sided differences of the frozen-sample map
        (smooth in Q); ``None`` if a step leaves the domain."""
        entries = self._free_entries()
        J = np.zeros((len(entries), len(entries)))
        for j, (a, b) in enumerate(entries):
            step = h if Q[a, b] + h < 1 else -h
            try:
                Fp = self.step(self._with_entry(Q, a, b, Q[a, b] + step))
            except ValueError:
                return None
            J[:, j] = [(Fp[c, d] - FQ[c, d]) / step for c, d in entries]
        return J

    def _newton_step(self, Q, FQ):
        """Newton step for ``F(Q) - Q = 0``; ``None`` unless it lowers the residual."""
        entries = self._free_entries()
        r0 = np.array([FQ[a, b] - Q[a, b] for a, b in entries])
        J = self._map_jacobian(Q, FQ)
        if J is None:
            return None
        try:
            delta = np.linalg.solve(J - np.eye(len(entries)), -r0)
        except np.linalg.LinAlgError:
            return None
        Qn = Q.copy()
        for (a, b), dlt in zip(entries, delta):
            Qn = self._with_entry(Qn, a, b, Qn[a, b] + dlt)
        try:
            Fn = self.step(Qn)
        except ValueError:
            return None
        if np.max(np.abs(Fn - Qn)) < np.max(np.abs(r0)):
            return Qn
        return None

    def _free_entries(self):
        P = self.model.P
        return [(a, b) for a in range(P) for b in range(a, P) if self.mask[a, b]]

    def _fixed_point_stderr(self, Q, Qhat_se):
        """Standard error of the fixed point: ``(I - dF/dQ)^{-1} dF_prior/dQhat . stderr``
        (entries of ``Q_hat`` treated as independent)."""
        P = self.model.P
        entries = self._free_entries()
        k = len(entries)
        Qhat = self.psd_qhat(Q) + self.lam * np.eye(P)
        F0 = self.prior.overlap_map(Qhat)
        J = self._map_jacobian(Q, F0 * self.mask, h=1e-5)    # F0 masked = step(Q)
        if J is None:
            return np.full((P, P), np.nan)
        G = np.zeros((k, k))
        for j, (a, b) in enumerate(entries):
            Fp = self.prior.overlap_map(self._with_entry(Qhat, a, b, Qhat[a, b] + 1e-6))
            G[:, j] = [(Fp[c, d] - F0[c, d]) / 1e-6 for c, d in entries]
        s = np.array([Qhat_se[a, b] for a, b in entries])
        try:
            sens = np.linalg.solve(np.eye(k) - J, G)
        except np.linalg.LinAlgError:
            return np.full((P, P), np.inf)
        out = np.zeros((P, P))
        for (a, b), v in zip(entries, (sens ** 2) @ (s ** 2)):
            out[a, b] = out[b, a] = np.sqrt(v)
        return out
