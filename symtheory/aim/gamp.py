"""GAMP-RIE for the attention-indexed model and the quadratic network (aim.md 5).

The AIM is a GLM on the symmetric matrix ``S`` with ``K = T(T+1)/2`` unit sensing
matrices per sample (aim.md 2): ``u_k = Tr(G^k S)``.  This module runs it on the shared
GAMP loop :func:`symtheory.glm.gamp.loop.gamp` with

* the sensing operator ``A(S)_{mu k} = Tr(G^{mu k} S)`` and its adjoint applied from the
  tokens (``X S X^T`` and ``X^T diag(g) X``, cost ``O(n T d^2)``): the ``G`` matrices are
  never stored (:class:`IndexOperator`);
* coordinates ``x = sqrt(p/d) (S_ii, sqrt(2) S_ij (i < j))``, ``p = d(d+1)/2``: the
  operator has unit-variance rows, ``mean(x^2) = (1/d)||S||_F^2`` and the engine's
  ``mean((x - x*)^2)`` is the MSE ``(1/d)||S_hat - S||_F^2`` of aim.md 1.1;
* the engine's ``R = x + Phi^T g/A`` (noise ``1/A`` per coordinate) is the matrix
  ``S + sqrt(D) Z`` (``Z`` GOE) with ``D = d/((d + 1) A)``: the spec's
  ``R = S_hat + (2/(q_hat d)) A*(g)``, ``D = 1/q_hat``, with ``q_hat = (2/d^2) sum g^2``
  (the engine's ``"square"`` estimator, used for hardmax) or its expectation from the
  channel's exact derivative (``"derivative"``, the linear-rank channels);
* the symmetric RIE denoiser ``xi(x) = x - 2 D h(x)`` with the physical branch outside
  the bulk (:meth:`glm.factors.spectral_priors.SymmetricRIE.denoise`) and, as Onsager
  coefficient its exact divergence (Daleckii-Krein), ``V = div/(p A)`` in engine units --
  ``mmse(D)`` in the large-``d`` limit (Nishimori); ``V`` is damped with the messages
  (:func:`run_gamp`);
* output channels in u-space: the linear-rank closed form for softmax (any inverse
  temperature, optional noise) and the identity/QN link (aim.md 3.4), the bivariate
  orthant channel for hardmax ``T = 2`` (aim.md 3.5; ``variant="joint-density"`` is the
  published surrogate, for reproduction only);
* the scalar state evolution of the same model (aim.md 3.3) iterated alongside: the trace
  holds the GAMP error, its predicted variance and the SE prediction per iteration.

Initialisation (aim.md 5): ``S_hat = sqrt(rho) I`` (the prior mean), ``V = 1`` (its error).
"""
from __future__ import annotations

import math
import sys
import time
import warnings

import numpy as np

from ..core import validate
from ..core.journal import task_key
from ..core.solvers import ConvergenceWarning
from . import data as aim_data


class IndexOperator:
    """``A(S)_{mu k} = Tr(G^{mu k} S)`` for tokens ``X`` of shape ``(n, T, d)`` (aim.md 2, 5),
    in the u-space ordering ``k = (a, b), a <= b`` row-major, without storing ``G``.

    ``u_ab = x_a^T S x_b/sqrt(d)`` (a < b), ``u_aa = (x_a^T S x_a - Tr S)/sqrt(2 d)``;
    the adjoint is ``A*(g) = sum_mu X_mu^T C_mu X_mu - (sum g_aa/sqrt(2d)) I`` with
    ``C_ab = C_ba = g_ab/(2 sqrt d)``, ``C_aa = g_aa/sqrt(2 d)``.
    """

    def __init__(self, X: np.ndarray):
        X = np.asarray(X, dtype=float)
        if X.ndim != 3:
            raise validate.ParameterError(f"X must have shape (n, T, d), got {X.shape}")
        self.X = X
        self.n, self.T, self.d = X.shape
        self.rows, self.cols = np.triu_indices(self.T)
        self.diag = self.rows == self.cols
        self.K = len(self.rows)
        self.p = self.d * (self.d + 1) // 2
        self._iu = np.triu_indices(self.d, 1)
        self._flat = X.reshape(self.n * self.T, self.d)

    # ---------------------------------------------------------------- matrix form
    def forward(self, S: np.ndarray) -> np.ndarray:
        """``u`` of shape ``(n, K)``."""
        XS = (self._flat @ S).reshape(self.n, self.T, self.d)
        h = np.einsum("nad,nbd->nab", XS, self.X)
        u = h[:, self.rows, self.cols]
        u[:, self.diag] = (u[:, self.diag] - np.trace(S)) / math.sqrt(2 * self.d)
        u[:, ~self.diag] /= math.sqrt(self.d)
        return u

    def adjoint(self, g: np.ndarray) -> np.ndarray:
        """``A*(g) = sum_{mu, k} g_{mu k} G^{mu k}`` (a symmetric ``d x d`` matrix)."""
        g = np.asarray(g, dtype=float).reshape(self.n, self.K)
        C = np.zeros((self.n, self.T, self.T))
        off = g[:, ~self.diag] / (2 * math.sqrt(self.d))
        C[:, self.rows[~self.diag], self.cols[~self.diag]] = off
        C[:, self.cols[~self.diag], self.rows[~self.diag]] = off
        dg = g[:, self.diag] / math.sqrt(2 * self.d)
        C[:, self.rows[self.diag], self.cols[self.diag]] = dg
        CX = (C @ self.X).reshape(self.n * self.T, self.d)
        out = self._flat.T @ CX
        out[np.diag_indices(self.d)] -= dg.sum()
        return 0.5 * (out + out.T)

    # ---------------------------------------------------------------- coordinates
    def vec(self, S: np.ndarray) -> np.ndarray:
        """``x = sqrt(p/d) (S_ii, sqrt(2) S_ij (i < j))``: ``mean(x^2) = ||S||_F^2/d``."""
        return math.sqrt(self.p / self.d) * np.concatenate(
            [np.diag(S), math.sqrt(2.0) * S[self._iu]])

    def unvec(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float) * math.sqrt(self.d / self.p)
        S = np.zeros((self.d, self.d))
        S[self._iu] = x[self.d:] / math.sqrt(2.0)
        S = S + S.T
        S[np.diag_indices(self.d)] = x[:self.d]
        return S

    def row_operator(self) -> "IndexRows":
        """This operator on every row of GAMP's estimate (one row per layer)."""
        return IndexRows(self)


class IndexRows:
    """The row operator of :func:`symtheory.glm.gamp.loop.gamp` on coordinates (unit-
    variance entries): ``omega[:, l] = A(unvec W_l)``, ``Phi^T(g)_l = (d/p) vec(A*(g_l))``
    -- the same sensing for every layer ``l``."""

    def __init__(self, op: IndexOperator):
        self.op = op
        self.n, self.p, self.M = op.n, op.p, op.K

    def forward(self, W):
        return np.stack([self.op.forward(self.op.unvec(w)) for w in W], axis=1)

    def adjoint(self, g):
        scale = self.op.d / self.op.p
        return np.stack([scale * self.op.vec(self.op.adjoint(g[:, l, :]))
                         for l in range(g.shape[1])])


# ------------------------------------------------------------------ output channels
def softmax_preimage(y: np.ndarray, inv_temp: float) -> np.ndarray:
    """A preimage ``h* = h - h_TT J`` of row-softmax outputs ``y`` (``(n, T, T)``), aim.md
    3.4: ``h*_ab = phi_ab + phi_Ta`` with ``phi_ab = log(y_ab/y_aT)/inv_temp``."""
    phi = (np.log(y) - np.log(y[:, :, -1:])) / inv_temp
    return phi + np.swapaxes(phi[:, -1:, :], 1, 2)


def output_channel(data: aim_data.AIMData, hardmax_variant: str = "bayes"):
    """``(channel, observations)`` for GAMP (aim.md 3.4, 3.5): the linear-rank channel with
    the u-space preimages ``u* (n, K)`` of ``y``, or the hardmax orthant channel with the
    signs ``s_a = 2 y_aa - 1`` (``(n, 2)``)."""
    from ..glm.factors.linear_rank import LinearRankChannel
    from . import model as M
    from .hardmax import hardmax_channel
    from .theory import theory

    T = data.seq_len
    rows, cols = np.triu_indices(T)
    diag = rows == cols
    if data.link == "hardmax":
        if T != 2:
            raise validate.ParameterError(f"seq_len must be 2 for link='hardmax', got {T}")
        return hardmax_channel(hardmax_variant), 2.0 * data.y[:, [0, 1], [0, 1]] - 1.0
    noise = float(theory().noise(data.delta)[0])
    channel = LinearRankChannel.from_link(M.link_rank(T, data.link), noise)
    h_star = data.y if data.link == "identity" else softmax_preimage(data.y, data.inv_temp)
    u_star = h_star[:, rows, cols].copy()
    u_star[:, diag] /= math.sqrt(2.0)
    return channel, u_star


def se_engine(data: aim_data.AIMData, hardmax_variant: str = "bayes"):
    """The scalar spectral SE of the same model (aim.md 3.3) at the realised alpha."""
    from .hardmax import hardmax_engine
    from .theory import _engine

    if data.link == "hardmax":
        return hardmax_engine(data.alpha, data.rho, hardmax_variant)
    return _engine(data.alpha, data.rho, data.seq_len, data.link, data.delta)


# ------------------------------------------------------------------ the algorithm
def run_gamp(data: aim_data.AIMData, *, damping: float = 0.3, max_iter: int = 200,
             tol: float = 1e-9, hardmax_variant: str = "bayes", a_estimator: str | None = None,
             onsager: str = "divergence", restarts: int = 2, progress: bool = False):
    """GAMP-RIE on one AIM/QN data set (aim.md 5); returns the loop's
    :class:`~symtheory.glm.gamp.loop.GampResult` (``final_mse`` = ``(1/d)||S_hat - S||_F^2``;
    trace columns ``mse, variance, se_variance`` per iteration, row 0 the start, ``D`` the
    denoising noise) with ``S_hat``, ``damping`` (the one used) and ``seconds`` set as
    attributes.

    ``damping`` weighs the previous iterate in the messages, the estimate and -- here --
    the variance ``V``: undamped, ``V`` collapses faster than the error once the error is
    small (past alpha_PR), the step ``1/A`` vanishes and the run freezes (measured 0.045
    at d = 100, alpha = 0.25, softmax T = 2; 1e-5 with V damped).  ``a_estimator``
    (default: ``"derivative"``, exact for the linear-rank channels; ``"square"``, i.e.
    ``q_hat = (2/d^2) sum g^2`` of aim.md 5, for hardmax).  ``onsager``: ``"divergence"``
    (the RIE's exact divergence at this ``d``) or ``"mmse"`` (its large-``d`` value, as in
    aim.md 5).  A run that blows up (the engine's ``stopped``/``diverged``: at small
    ``alpha d`` the sensing noise is far from GOE) is restarted up to ``restarts`` times
    with damping ``(1 + damping)/2``; ``message`` lists every attempt."""
    from ..glm.factors.prior import DenoiserPrior
    from ..glm.gamp.loop import gamp
    from .theory import theory

    if data.rho >= 1e300:
        raise validate.ParameterError("rho must be finite for GAMP")
    damping = validate.real("damping", damping, low=0.0, high=1.0, high_open=True)
    max_iter = validate.integer("max_iter", max_iter, low=1)
    tol = validate.real("tol", tol, low=0.0, low_open=True)
    op = IndexOperator(data.X)
    channel, y_obs = output_channel(data, hardmax_variant)
    prior = theory().prior
    t = (math.sqrt(data.rho),)
    noise_ratio = op.d / (op.d + 1)         # engine noise 1/A -> matrix noise D
    restarts = validate.integer("restarts", restarts, low=0)
    if a_estimator is None:
        a_estimator = "square" if data.link == "hardmax" else "derivative"
    se = se_engine(data, hardmax_variant)
    S0 = math.sqrt(data.rho) * np.eye(op.d)
    t0 = time.perf_counter()
    history = []
    for _ in range(restarts + 1):
        Ds = []

        def denoiser(R, noise_var, Ds=Ds):
            noise_var = float(noise_var[0])
            D = noise_ratio * noise_var
            Ds.append(D)
            Rm = op.unvec(R[0])
            S_new = prior.denoise(Rm, t, D)
            if onsager == "mmse":
                v = prior.mmse(t, D)
            else:
                v = noise_var * prior.divergence(Rm, t, D) / op.p
            return op.vec(S_new)[None, :], v

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # V damped like the messages: it would collapse faster than the error
            res = gamp(op.row_operator(), y_obs, channel,
                       DenoiserPrior(denoiser, name="symmetric RIE"), V0=se.v_max, W0=op.vec(S0)[None, :], a_estimator=a_estimator,
                       damping=damping, damp_variance=True, max_iter=max_iter, tol=tol,
                       truth=op.vec(data.S)[None, :], se_map=se.error_map, restore_best=True,
                       progress=progress)
        res.trace["D"] = [math.nan] + Ds[:len(res.trace) - 1]
        res.damping = damping
        if not (res.stopped or res.diverged):
            break
        # a blow-up (finite d: the sensing noise is not yet GOE) -> restart, damped harder
        history.append(f"damping {damping:g}: {res.message}")
        damping = 1 - (1 - damping) / 2
    res.message = "; ".join(history + [f"damping {res.damping:g}: {res.message}"])
    if not res.converged:
        warnings.warn(f"AIM GAMP-RIE: {res.message}", ConvergenceWarning, stacklevel=2)
    res.S_hat = op.unvec(res.estimate)
    res.seconds = time.perf_counter() - t0
    return res


def se_mse(alpha, rho, seq_len, link, delta=0.0, hardmax_variant="bayes") -> float:
    """The state-evolution MSE the GAMP runs are compared to (aim.md 3.3-3.5)."""
    from .hardmax import hardmax_mse
    from .theory import solve_mse

    if link == "hardmax":
        return float(hardmax_mse(alpha, rho, hardmax_variant).value)
    return float(solve_mse(alpha, rho, seq_len, link, delta).value)


def gamp_curve(alphas, *, d: int = 200, rho: float = 0.5, seq_len: int = 2,
               link: str = "softmax", inv_temp: float = 1.0, delta: float = 0.0,
               seeds=(0,), damping: float = 0.5, max_iter: int = 100, tol: float = 1e-9,
               hardmax_variant: str = "bayes", progress: bool = False, journal=None):
    """GAMP-RIE runs over ``alphas`` x ``seeds`` (aim.md 5): ``(summary, trace)`` tables.

    ``journal``: a path (or :class:`~symtheory.core.journal.Journal`) where each run's
    rows are committed as the run ends; runs it already holds for the same parameters and
    code are not recomputed (an interrupted call keeps what it finished, and the same call
    again completes it, saying so on stderr).

    ``summary``: one row per run -- ``alpha`` (realised ``n/d^2``), ``seed``, ``n``,
    ``mse`` = ``(1/d)||S_hat - S||_F^2`` of the returned estimate, ``variance`` (the
    algorithm's own prediction of it), ``se_mse`` (the state evolution at this alpha; for
    hardmax also ``se_mse_joint_density``, the published surrogate), ``converged``,
    ``iterations``, ``residual`` (last ``(1/d)||S_t - S_{t-1}||_F^2``), ``stopped`` (the
    engine restored its best iterate after a blow-up, in the last attempt), ``damping``
    (the damping of the last attempt: :func:`run_gamp` restarts a blow-up damped harder),
    ``seconds``.  ``trace``: one row
    per iteration -- ``alpha, seed, iteration, mse, variance, se_variance, D``.
    """
    from ..core.progress import progress_bar
    from ..core.table import Table

    seeds = [validate.integer("seed", s, low=0) for s in np.atleast_1d(seeds)]
    alphas = [validate.real("alpha", a, low=0, low_open=True) for a in np.atleast_1d(alphas)]
    hardmax = link == "hardmax"
    rows: dict = {c: [] for c in ("alpha", "seed", "n", "mse", "variance", "se_mse")
                  + (("se_mse_joint_density",) if hardmax else ())
                  + ("converged", "iterations", "residual", "stopped", "damping", "seconds")}
    trace: dict = {c: [] for c in ("alpha", "seed", "iteration", "mse", "variance",
                                   "se_variance", "D")}
    jobs = [(a, s) for a in alphas for s in seeds]
    se_cache: dict = {}
    setting = dict(d=d, rho=rho, seq_len=seq_len, link=link, inv_temp=inv_temp, delta=delta,
                   damping=damping, max_iter=max_iter, tol=tol,
                   hardmax_variant=hardmax_variant if hardmax else None)
    with _journal(journal) as book:
        finished = book.done() if book is not None else {}
        keys = [task_key(dict(setting, alpha=a, seed=s)) for a, s in jobs]
        ahead = sum(k in finished for k in keys)
        if ahead:
            print(f"AIM GAMP: {ahead} of {len(jobs)} runs already done in {book.path}, not "
                  f"recomputed; computing {len(jobs) - ahead}", file=sys.stderr)
        for (a, s), key in progress_bar(list(zip(jobs, keys)), desc="AIM GAMP",
                                        enabled=progress):
            rec = finished.get(key)
            if rec is None:
                rec = _gamp_job(a, s, setting, se_cache)
                if book is not None:
                    book.put(key, rec)
            for c in rows:
                rows[c].append(rec["row"][c])
            for c in trace:
                trace[c].extend(rec["trace"][c])
    import symtheory

    meta = {"model": "aim", "algorithm": "GAMP-RIE (aim.md 5)",
            "quantity": "(1/d)||S_hat - S||_F^2, 1 for S_hat = sqrt(rho) I",
            "alpha_definition": "n/d^2", "d": d, "rho": rho, "seq_len": seq_len, "link": link,
            "inv_temp": inv_temp, "delta": delta, "damping": damping, "max_iter": max_iter,
            "tol": tol, "seeds": seeds,
            "hardmax_variant": hardmax_variant if hardmax else None,
            "symtheory": symtheory.__version__}
    return Table(rows, dict(meta)), Table(trace, dict(meta, table="per-iteration trace"))


def _journal(journal):
    from contextlib import closing, nullcontext

    from ..core.journal import Journal

    if journal is None or isinstance(journal, Journal):
        return nullcontext(journal)
    return closing(Journal(journal))


def _gamp_job(a, s, setting, se_cache) -> dict:
    """One run of :func:`gamp_curve`: ``{"row": summary row, "trace": its trace columns}``."""
    d, rho, seq_len, link, delta = (setting[k] for k in ("d", "rho", "seq_len", "link", "delta"))
    hardmax, hardmax_variant = link == "hardmax", setting["hardmax_variant"] or "bayes"
    data = aim_data.generate(d, a, rho=rho, seq_len=seq_len, link=link,
                             inv_temp=setting["inv_temp"], delta=delta, seed=s)
    res = run_gamp(data, damping=setting["damping"], max_iter=setting["max_iter"],
                   tol=setting["tol"], hardmax_variant=hardmax_variant)
    if data.alpha not in se_cache:
        se_cache[data.alpha] = [se_mse(data.alpha, rho, seq_len, link, delta, hardmax_variant)]
        if hardmax:
            se_cache[data.alpha].append(se_mse(data.alpha, rho, 2, link, 0.0,
                                               "joint-density"))
    se = se_cache[data.alpha]
    vals = dict(alpha=data.alpha, seed=s, n=data.n, mse=res.final_mse,
                variance=res.variance, se_mse=se[0], converged=res.converged,
                iterations=res.iterations, residual=res.residual, stopped=res.stopped,
                damping=res.damping, seconds=round(res.seconds, 3))
    if hardmax:
        vals["se_mse_joint_density"] = se[1]
    tr = res.trace
    steps = len(tr["iteration"])
    return {"row": vals, "trace": {
        "alpha": [data.alpha] * steps, "seed": [s] * steps,
        **{c: list(tr[c][:steps]) for c in ("iteration", "mse", "variance", "se_variance", "D")}}}


# ------------------------------------------------------------------ deep AIM (aim.md 3.7)
def run_deep_gamp(data: aim_data.DeepAIMData, *, damping: float = 0.5, max_iter: int = 60,
                  tol: float = 1e-7, progress: bool = False):
    """GAMP-RIE on deep AIM data (aim.md 3.7, :mod:`symtheory.aim.deep`): the one GAMP
    loop with one row per layer -- the sensing ``A(S_l)`` of every layer on the same
    tokens (:class:`IndexRows`), the joint output channel of :func:`deep.deep_aim_model`
    (its noisy-link rule; ``V = diag(V_l)``) and a symmetric RIE denoiser per layer with
    its own noise ``D_l`` and Onsager variance ``V_l`` (exact divergence, damped with the
    messages as in :func:`run_gamp`).  Starts from the prior means ``S_l = sqrt(rho) I``
    with ``V_l = 1``.

    Returns the loop's result with ``S_hat`` ``(L, d, d)``, ``layer_mse`` (final
    ``(1/d)||S_hat_l - S_l||_F^2`` per layer), ``trace["layer_mse"]`` (per iteration, row
    0 the start), ``channel_error`` (largest estimated channel error of the last
    iteration) and ``seconds``."""
    from ..glm.factors.prior import DenoiserPrior
    from ..glm.gamp.loop import gamp
    from .deep import deep_aim_model
    from .theory import theory

    damping = validate.real("damping", damping, low=0.0, high=1.0, high_open=True)
    max_iter = validate.integer("max_iter", max_iter, low=1)
    tol = validate.real("tol", tol, low=0.0, low_open=True)
    L, n, d = data.depth, data.n, data.d
    T = data.X.shape[1]
    model = deep_aim_model(L, T, data.skip, data.inv_temp)
    op = IndexOperator(data.X)
    p = op.p
    channel = model.channel(data.noise)
    prior, t = theory().prior, (math.sqrt(data.rho),)
    noise_ratio = d / (d + 1)
    layer_mse = []

    def denoiser(R, noise_var):
        out, v = np.empty_like(R), np.empty(L)
        for l in range(L):
            D = noise_ratio * noise_var[l]
            Rm = op.unvec(R[l])
            S_new = prior.denoise(Rm, t, D)
            v[l] = noise_var[l] * prior.divergence(Rm, t, D) / p
            out[l] = op.vec(S_new)
        layer_mse.append([aim_data.mse(op.unvec(out[l]), data.S[l]) for l in range(L)])
        return out, v

    W0 = np.stack([op.vec(math.sqrt(data.rho) * np.eye(d))] * L)
    truth = np.stack([op.vec(data.S[l]) for l in range(L)])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # per-call channel accuracy notes
        res = gamp(op.row_operator(), data.y.reshape(n, -1), channel,
                   DenoiserPrior(denoiser, name="symmetric RIE per layer"), V0=np.ones(L),
                   W0=W0, a_estimator="derivative", damping=damping, damp_variance=True,
                   max_iter=max_iter, tol=tol, truth=truth, restore_best=True,
                   progress=progress)
    res.S_hat = np.stack([op.unvec(w) for w in res.W])
    res.layer_mse = [aim_data.mse(res.S_hat[l], data.S[l]) for l in range(L)]
    res.trace["layer_mse"] = [[math.nan] * L] + layer_mse[:len(res.trace) - 1]
    res.channel_error = channel.last_error
    res.seconds = time.perf_counter() - t0
    return res
