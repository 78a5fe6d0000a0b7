"""Generalized approximate message passing: one loop for every model of the package.

The estimate is a matrix ``W`` of ``P`` rows (index rows, layers, or one row) over ``p``
coordinates; a linear *row operator* maps it to the indices ``omega (n, P, M)`` of ``n``
samples with ``M`` tokens each (the same operator on every row: a dense ``Phi``, the
tokens of a sequence model, the sensing matrices of an attention-indexed model).  The
output channel is any :class:`~symtheory.glm.factors.channel.Channel` (its ``g_out``
derived from its posterior moments) and the prior any
:class:`~symtheory.glm.factors.prior.Prior` (its input functions).  One iteration
(Rangan, ISIT 2011; Algorithm 1 of Troiani et al., arXiv:2502.00901), with damping
``theta`` (weight of the previous iterate, ``[0, 1)``; 0 = undamped)::

    omega = Phi(W) - V g_bar_prev                       # Onsager term, V (P x P)
    g, dg = g_out, d g_out/d omega (y, omega, V)        # the channel
    A     = -(1/p) sum_{mu, m} dg[mu, ., m, ., m]  ("derivative")
            or (1/p) sum_{mu, m} g g^T               ("square")
    g_bar = theta g_bar + (1 - theta) g                 # damped output messages ...
    A_bar = theta A_bar + (1 - theta) A                 # ... and their precision
    W_bar = theta W_bar + (1 - theta) W                 # damped estimate
    B     = Phi^T(g_bar) + A_bar W_bar
    W, V  = f_in(A_bar, B), its variance                # the prior's input functions

For a separable prior (a denoiser per row) ``f_in`` is the denoiser of ``R = B / A``
at noise ``1/A`` (:class:`~symtheory.glm.factors.prior.DenoiserPrior`, which reads
the diagonal of ``A``); for the Gaussian prior it is ``(I + A)^{-1} B``.

Damping follows Rangan, Schniter & Fletcher ("On the convergence of approximate message
passing with arbitrary matrices", ISIT 2014, Alg. 2) and Vila et al. ("Adaptive damping
and mean removal for the generalized approximate message passing algorithm", ICASSP
2015, Alg. 1): every message is damped together with the quantity its Onsager correction
was computed from, so a fixed point of the damped iteration is one of the undamped
iteration.  Damping only the estimate and its variance keeps that set of fixed points
but breaks the Onsager correction along the way (on phase retrieval such a run never
leaves the uninformative region).

Monitoring without the truth: the measured variance of the undamped update
``Phi^T(g)/A``, ``(1/p) sum g^2 / A^2`` per row, equals the predicted ``1/A`` while state
evolution holds (Nishimori: ``E g^2 = -E dg``).  At finite size the error reaches a floor
while the predicted variance keeps shrinking (e.g. above perfect recovery), the
denoiser gets overconfident and the iteration blows up.  With ``restore_best`` the run
stops when the measured noise exceeds 10 times its minimum and 1.5 times the predicted
one (transients at small alpha reach ~2x and recover; a blow-up grows geometrically) and
returns the iterate of minimal measured noise (said in ``message``).

The state evolution ``V <- se_map(V)`` may run alongside, undamped: it predicts the
undamped iteration, whose fixed point the damped one shares.  The trace has one row per
iteration, row 0 the start: ``change`` (mean squared change of ``W``), ``variance``
(the diagonal of ``V``), ``A``, ``noise``, ``mse`` (with the truth), ``se_variance``
(with ``se_map``) and what a ``monitor`` adds.  Non-finite values, a precision the
prior cannot take or an estimate whose mean square exceeds ``divergence_bound`` stop the
run, reported as diverged, never silently.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ...core.progress import progress_bar
from ...core.result import Result, alias
from ...core.solvers import ConvergenceWarning, check_damping


class MessageDamping:
    """Damped GAMP messages (module docstring; Vila et al. 2015, Alg. 1).

    ``damped(name, new)`` returns ``theta old + (1 - theta) new`` for the message
    ``name`` and remembers it; the first value of a message is taken undamped (there is
    no previous iterate to weigh).  ``theta`` = weight of the previous iterate, [0, 1).
    """

    def __init__(self, theta: float):
        self.theta = check_damping(theta)
        self._last: dict = {}

    def damped(self, name: str, new):
        old = self._last.get(name)
        value = new if old is None else self.theta * old + (1.0 - self.theta) * new
        self._last[name] = value
        return value


class GampTrace(list):
    """One row (a dict) per iteration, row 0 the start; ``trace["name"]`` is a column
    (a list over the rows) and assigning one adds it to every row."""

    def __getitem__(self, key):
        if isinstance(key, str):
            return [row[key] for row in self]
        return super().__getitem__(key)

    def __setitem__(self, key, values):
        if not isinstance(key, str):
            return super().__setitem__(key, values)
        values = list(values)
        if len(values) != len(self):
            raise ValueError(f"column {key!r} needs {len(self)} values, got {len(values)}")
        for row, v in zip(self, values):
            row[key] = v

    def get(self, key, default=None):
        return self[key] if self and key in self[0] else default


@dataclass
class GampResult(Result):
    """A GAMP run: ``value`` the estimate ``W`` (``P x p``), ``V`` its predicted
    variance, ``residual`` the last mean squared change, ``diverged``, ``stopped`` (an
    early stop that restored the best iterate) and the :class:`GampTrace`."""

    V: np.ndarray | None = None
    diverged: bool = False
    stopped: bool = False
    trace: GampTrace = field(default_factory=GampTrace)
    final_estimate_mse: float | None = None
    method: str = "GAMP"

    W = alias("value", "The estimate, ``P x p``.")

    @property
    def estimate(self) -> np.ndarray:
        """The estimate as one vector (rows concatenated)."""
        return np.ravel(self.value)

    @property
    def variance(self):
        """Predicted variance per row (a number for one row)."""
        d = np.diag(self.V).copy()
        return float(d[0]) if d.size == 1 else d

    @property
    def final_mse(self) -> float:
        """Error of the returned estimate (the restored iterate after an early stop)."""
        if self.final_estimate_mse is not None:
            return self.final_estimate_mse
        mse = self.trace.get("mse")
        return mse[-1] if mse else math.nan


# ---------------------------------------------------------------------- operators
class DenseOperator:
    """``omega[:, a, 0] = Phi @ W[a]`` for a matrix (or ``scipy.sparse.linalg``
    LinearOperator) ``Phi`` of shape ``(n, p)`` with entries of variance ``1/p``."""

    M = 1

    def __init__(self, Phi):
        self.Phi = Phi
        self.n, self.p = Phi.shape

    def forward(self, W):
        return np.asarray(self.Phi @ np.asarray(W).T).reshape(self.n, -1, 1)

    def adjoint(self, g):
        return np.asarray(self.Phi.T @ np.asarray(g)[:, :, 0]).T


class RowwiseOperator:
    """One dense operator per row: ``omega[:, a, 0] = Phis[a] @ W[a]`` (rows with their
    own sensing, e.g. independent problems run side by side)."""

    M = 1

    def __init__(self, Phis):
        self.Phis = list(Phis)
        shapes = {np.shape(P) for P in self.Phis}
        if len(shapes) != 1:
            raise ValueError(f"every row's operator must have one shape (n, p), got {shapes}")
        self.n, self.p = shapes.pop()

    def forward(self, W):
        return np.stack([P @ w for P, w in zip(self.Phis, W)], axis=1)[:, :, None]

    def adjoint(self, g):
        return np.stack([P.T @ g[:, a, 0] for a, P in enumerate(self.Phis)])


class TokenOperator:
    """``omega_mu = W x_mu / sqrt(D)`` for data ``X (n, D, M)`` (sequence models)."""

    def __init__(self, X):
        self.X = np.asarray(X, dtype=float)
        if self.X.ndim != 3:
            raise ValueError(f"X must have shape (n, D, M), got {self.X.shape}")
        self.n, self.p, self.M = self.X.shape
        self._scale = 1.0 / math.sqrt(self.p)

    def forward(self, W):
        return np.einsum("pd,sdm->spm", W, self.X) * self._scale

    def adjoint(self, g):
        return np.einsum("spm,sdm->pd", g, self.X) * self._scale


# ---------------------------------------------------------------------- the loop
@dataclass
class _State:
    """The iterate and what the run has seen."""

    W: np.ndarray
    V: np.ndarray
    v_se: np.ndarray | None
    g: np.ndarray
    best: tuple
    trace: GampTrace
    converged: bool = False
    diverged: bool = False
    stopped: bool = False
    message: str = ""


def gamp(operator, y, channel, prior, *, channel_params=(), a_estimator="derivative",
         damping=0.0, damp_variance=False, max_iter=200, tol=1e-9, W0=None, V0=None,
         variance_floor=0.0, truth=None, se_map=None, divergence_bound=1e3,
         restore_best=False, monitor=None, callback=None, warn_unconverged=True,
         progress=False) -> GampResult:
    """Run GAMP (module docstring) and return a :class:`GampResult`.

    ``operator``: a row operator (``n``, ``p``, ``M``, ``forward(W) -> (n, P, M)``,
    ``adjoint(g) -> (P, p)``; :class:`DenseOperator`, :class:`TokenOperator`, or a
    family's own); ``y`` as the channel takes it; ``channel_params`` passed to the channel
    after ``V``.  ``W0 (P, p)`` the start (default 0) and ``V0`` its error covariance
    (``P x P``, or a number or per-row values: diagonal; default ``I``);
    ``variance_floor`` adds ``eps I`` to ``V`` where the channel and the Onsager term use
    it (a regularization of reference codes; default 0).
    ``damp_variance``: damp ``V`` with the messages (a denoiser whose variance collapses
    faster than its error, e.g. a spectral one past perfect recovery).  ``truth (P, p)``
    adds the ``mse`` column; ``se_map(v)`` (per-row variances) the ``se_variance``
    column; ``monitor(W, V) -> dict`` further columns; ``callback(row)`` sees each row
    with the iterate ``row["W"]``.  ``warn_unconverged``: a run that ends unconverged
    warns (a divergence always warns)."""
    if a_estimator not in ("derivative", "square"):
        raise ValueError(f"a_estimator must be 'derivative' or 'square', got {a_estimator!r}")
    damp = MessageDamping(damping)
    W = np.zeros((1, operator.p)) if W0 is None else np.array(W0, dtype=float, ndmin=2)
    P = W.shape[0]
    if W.shape != (P, operator.p):
        raise ValueError(f"W0 must have shape (P, {operator.p}), got {W.shape}")
    V = _start_variance(V0, P)
    if truth is not None and np.shape(truth) != W.shape:
        raise ValueError(f"truth must have the estimate's shape {W.shape}, got {np.shape(truth)}")
    if not (np.isfinite(variance_floor) and variance_floor >= 0):
        raise ValueError(f"variance_floor must be finite and >= 0, got {variance_floor}")
    st = _State(W, V, None if se_map is None else np.diag(V).copy(),
                np.zeros((operator.n, P, operator.M)), (np.inf, W.copy(), V.copy(), 0),
                GampTrace())
    _record(st, 0, math.nan, math.nan, math.nan, truth, monitor, callback)
    it = 0
    for it in progress_bar(range(1, max_iter + 1), desc="GAMP", enabled=progress):
        _iterate(st, it, operator, y, channel, channel_params, prior, damp, a_estimator,
                 damp_variance, variance_floor, restore_best, se_map, truth, monitor, callback)
        if st.diverged or st.stopped:
            break
        if float(np.mean(st.W * st.W)) > divergence_bound:
            st.diverged = True
            st.message = (f"iteration {it}: mean square of the estimate "
                          f"{np.mean(st.W * st.W):.3g} exceeds {divergence_bound:g}")
            break
        if st.trace[-1]["change"] < tol:
            st.converged = True
            st.message = f"converged in {it} iterations (change {st.trace[-1]['change']:.2e})"
            break
    else:
        st.message = (f"not converged in {max_iter} iterations (last change "
                      f"{st.trace[-1]['change']:.2e})")
    if st.diverged:
        warnings.warn(f"GAMP diverged: {st.message}", ConvergenceWarning, stacklevel=2)
    elif not (st.converged or st.stopped) and warn_unconverged:
        warnings.warn(f"GAMP {st.message}", ConvergenceWarning, stacklevel=2)
    res = GampResult(value=st.W, V=st.V, converged=st.converged, diverged=st.diverged,
                     stopped=st.stopped, iterations=it, message=st.message, trace=st.trace,
                     residual=st.trace[-1]["change"] if len(st.trace) > 1 else math.nan)
    if st.stopped:  # the reported estimate is the restored one
        res.final_estimate_mse = (float(np.mean((st.W - truth) ** 2)) if truth is not None
                                  else math.nan)
    return res


def _start_variance(V0, P):
    if V0 is None:
        return np.eye(P)
    V0 = np.asarray(V0, dtype=float)
    if V0.ndim == 2:
        if V0.shape != (P, P):
            raise ValueError(f"V0 must be {P} x {P}, got {V0.shape}")
        return V0.copy()
    return np.diag(np.broadcast_to(V0, (P,))).astype(float)


def _per_row(x):
    """What the trace shows of a per-row quantity: a number for one row."""
    x = np.asarray(x, dtype=float)
    return float(x[0]) if x.size == 1 else x.copy()


def _record(st, it, change, A, noise, truth, monitor, callback):
    row = {"iteration": it, "change": change, "variance": _per_row(np.diag(st.V)),
           "A": A if it == 0 else _per_row(np.diag(A)), "noise": noise,
           "mse": float(np.mean((st.W - truth) ** 2)) if truth is not None else math.nan,
           "se_variance": _per_row(st.v_se) if st.v_se is not None else math.nan}
    if monitor is not None:
        row.update(monitor(st.W, st.V))
    st.trace.append(row)
    if callback is not None:
        callback(dict(row, W=st.W))


def _iterate(st, it, operator, y, channel, channel_params, prior, damp, a_estimator,
             damp_variance, variance_floor, restore_best, se_map, truth, monitor, callback):
    """One iteration (module docstring); sets ``st.diverged``/``st.stopped`` with the
    reason in ``st.message``."""
    p = operator.p
    V = st.V + variance_floor * np.eye(len(st.V)) if variance_floor else st.V
    omega = operator.forward(st.W) - np.einsum("ab,sbm->sam", V, st.g)
    g, dg = channel.gout(y, omega, V, *channel_params)
    if not (np.all(np.isfinite(g)) and (a_estimator == "square" or np.all(np.isfinite(dg)))):
        bad = int(np.sum(~np.isfinite(g.reshape(len(g), -1)).all(axis=1)))
        st.diverged, st.message = True, f"iteration {it}: g_out not finite for {bad} samples"
        return
    if a_estimator == "square":
        A = np.einsum("sam,sbm->ab", g, g) / p
    else:
        A = -np.einsum("sambm->ab", dg) / p
    A = 0.5 * (A + A.T)
    diag_A = np.diag(A)
    if not np.all(np.isfinite(A)) or (getattr(prior, "positive_precision", False)
                                     and not np.all(diag_A > 0)):
        st.diverged, st.message = True, (f"iteration {it}: A = {_per_row(diag_A)} (must be "
                                         "positive and finite)")
        return
    noise = np.einsum("sam,sam->a", g, g) / p / diag_A ** 2   # measured noise per row
    if restore_best and _blew_up(st, it, noise, diag_A):
        return
    g = damp.damped("g_out", g)                  # the Onsager term of the next omega uses it
    A_bar = damp.damped("A", A)
    B = operator.adjoint(g) + A_bar @ damp.damped("estimate", st.W)
    try:
        W_new, V_new = prior.input_functions(A_bar, B)
    except ValueError as exc:
        st.diverged, st.message = True, f"iteration {it}: {exc}"
        return
    if not (np.all(np.isfinite(W_new)) and np.all(np.isfinite(V_new))):
        st.diverged, st.message = True, f"iteration {it}: the prior returned non-finite values"
        return
    if damp_variance:          # keeps V from collapsing faster than the error
        V_new = damp.damped("variance", V_new)
    if se_map is not None:
        st.v_se = np.broadcast_to(np.asarray(se_map(_per_row(st.v_se)), dtype=float),
                                  st.v_se.shape).copy()
    change = float(np.mean((W_new - st.W) ** 2))
    st.W, st.V, st.g = W_new, V_new, g
    _record(st, it, change, A_bar, _per_row(noise), truth, monitor, callback)


def _blew_up(st, it, noise, diag_A) -> bool:
    """Track the iterate of least measured noise; restore it when the noise blows up."""
    worst = float(np.max(noise))
    if worst < st.best[0]:
        st.best = (worst, st.W.copy(), st.V.copy(), it - 1)
    if worst > 10 * st.best[0] and np.any(noise > 1.5 / diag_A) and it > 2:
        st.stopped = True
        st.message = (f"stopped at iteration {it}: measured noise {worst:.3g} rose above "
                      f"10x its minimum {st.best[0]:.3g} (predicted "
                      f"{float(np.min(1 / diag_A)):.3g}); returned the iterate of iteration "
                      f"{st.best[3]}")
        st.W, st.V = st.best[1], st.best[2]
        return True
    return False
