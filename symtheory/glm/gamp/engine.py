"""Generalized approximate message passing with a (possibly non-separable) denoiser.

For ``y_mu ~ P_out(. | <Phi_mu, x*>)``, ``Phi`` of shape ``(n, p)`` with i.i.d. entries
of variance ``1/p`` and ``alpha = n/p``, one iteration reads (e.g. bsr.md 6.1), with
damping ``theta`` (weight of the previous iterate, ``[0, 1)``; 0 = undamped)::

    omega = Phi x - V g_bar_prev                 # Onsager term: the damped g it was built from
    g, dg = g_out(y, omega, V), d g_out/d omega  # symbolic channel (glm.factors.scalar)
    A     = -alpha mean(dg)   ("derivative")  or  alpha mean(g^2)  ("square")
    g_bar = theta g_bar + (1 - theta) g          # damped output messages ...
    A_bar = theta A_bar + (1 - theta) A          # ... and their precision
    x_bar = theta x_bar + (1 - theta) x          # damped estimate
    R     = x_bar + Phi^T g_bar / A_bar          # ~ x* + N(0, 1/A_bar) entrywise
    x, V  = denoiser(R, 1/A_bar)                 # estimate and its predicted variance

This is the damping of Rangan, Schniter & Fletcher ("On the convergence of approximate
message passing with arbitrary matrices", ISIT 2014, Alg. 2) and Vila et al.
("Adaptive damping and mean removal for the generalized approximate message passing
algorithm", ICASSP 2015, Alg. 1): every message is damped together with the quantity
its Onsager correction was computed from (``x`` in ``omega`` is paired with the
``g_bar`` that built its ``R``; ``x_bar`` in ``R`` with ``g_bar``), so a fixed point
of the damped iteration (``g_bar = g``, ``A_bar = A``, ``x_bar = x``) is a fixed point
of the undamped one.  Damping only the estimate and its variance, as this module did
before, keeps that set of fixed points but breaks the Onsager correction along the
way: on phase retrieval the damped run then never leaves the uninformative region.

Monitoring without the truth: the measured variance of the undamped update ``Phi^T g / A``,
``alpha mean(g^2)/A^2``, equals the predicted ``1/A`` while state evolution holds
(Nishimori: E g^2 = -E dg).  At finite size the error reaches a floor while the
predicted variance keeps shrinking (e.g. above perfect recovery), the denoiser gets
overconfident and the iteration blows up.  With ``restore_best`` the run stops when
the measured noise exceeds 10 times its minimum and 1.5 times the predicted one
(transients at small alpha reach ~2x and recover; a blow-up grows geometrically), and
returns the iterate of minimal measured noise (reported in ``message``).

The state evolution ``V <- se_map(V)`` is run alongside, undamped: it is the prediction
of the undamped iteration, whose fixed point the damped one shares (with damping the
transient differs).  The per-iteration trace records the actual MSE (when the truth is
given), the predicted variance and the SE prediction.  A run that produces non-finite
values or an estimate whose norm exceeds ``divergence_bound`` stops and is reported as
diverged, never silently.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

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


@dataclass
class GampResult:
    estimate: np.ndarray
    variance: float
    converged: bool
    diverged: bool
    iterations: int
    message: str
    trace: dict = field(default_factory=dict)  # column -> list over iterations

    stopped: bool = False
    final_estimate_mse: float | None = None

    @property
    def value(self) -> np.ndarray:
        return self.estimate

    @property
    def residual(self) -> float:
        """Last change ``mean((x_t - x_{t-1})^2)`` (the stopping criterion)."""
        return self.trace["change"][-1] if self.trace.get("change") else float("nan")

    @property
    def final_mse(self) -> float:
        """Error of the returned estimate (the restored iterate after an early stop)."""
        if self.final_estimate_mse is not None:
            return self.final_estimate_mse
        return self.trace["mse"][-1] if self.trace.get("mse") else float("nan")


def gamp(Phi: np.ndarray, y: np.ndarray, *, channel, channel_params=(), denoiser: Callable,
         v0: float = 1.0, x0: np.ndarray | None = None, a_estimator: str = "derivative", damping: float = 0.0,
         max_iter: int = 200, tol: float = 1e-9, truth: np.ndarray | None = None,
         se_map: Callable | None = None, divergence_bound: float = 1e3,
         restore_best: bool = True, progress: bool = False, blocks=None) -> GampResult:
    """Run GAMP; see the module docstring.  ``denoiser(R, noise_var) -> (x, V)``;
    ``damping`` = weight of the previous iterate in [0, 1) (0: undamped).  ``Phi`` may be
    any linear operator with ``shape``, ``Phi @ x`` and ``Phi.T @ g`` (e.g. a
    :class:`scipy.sparse.linalg.LinearOperator`: the matrix need not be stored).  ``x0``
    (default 0) is the first estimate, ``v0`` its error variance (the prior's mean and
    variance for a prior that is not centred).

    ``blocks = (output_block, input_block)``: integer block labels ``0..B-1`` of the
    outputs (length ``n``) and coordinates (length ``p``) of a block-diagonal ``Phi``
    (e.g. the layers of a deep model: block ``b``'s outputs see only block ``b``'s
    coordinates, each with unit-variance rows).  Then ``V``, ``A`` and the noise are one
    number per block (``alpha_b = n_b/p_b``): the channel gets ``V`` as a length-``B``
    array (block ``b``'s outputs have variance ``V_b``), the denoiser gets the
    per-block noise variances and returns per-block ``V``; ``v0`` may be a scalar or a
    length-``B`` array; ``y`` goes to the channel as it is (a joint channel of the
    blocks' outputs need not have one observation per output).  Without ``blocks`` (one
    block) both get floats, as before."""
    if a_estimator not in ("derivative", "square"):
        raise ValueError(f"a_estimator must be 'derivative' or 'square', got {a_estimator!r}")
    damp = MessageDamping(damping)
    n, p = Phi.shape
    if blocks is None and y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    if blocks is None:
        out_b, in_b = np.zeros(n, dtype=int), np.zeros(p, dtype=int)
    else:
        out_b, in_b = (np.asarray(b) for b in blocks)
        if out_b.shape != (n,) or in_b.shape != (p,) or not (
                np.issubdtype(out_b.dtype, np.integer) and np.issubdtype(in_b.dtype, np.integer)):
            raise ValueError(f"blocks must be two integer label arrays of lengths ({n}, {p})")
        if out_b.min() < 0 or in_b.min() < 0:
            raise ValueError("blocks must label blocks 0, 1, ..., B-1 (a label is negative)")
    B = int(max(out_b.max(), in_b.max())) + 1
    n_b, p_b = np.bincount(out_b, minlength=B), np.bincount(in_b, minlength=B)
    if np.any(n_b == 0) or np.any(p_b == 0):
        raise ValueError(f"every block needs outputs and coordinates, got {n_b}, {p_b}")
    alpha = n_b / p_b

    def per_block(values):            # mean over each block's outputs
        return np.bincount(out_b, weights=values, minlength=B) / n_b

    def outward(arr):                 # what the channel / denoiser / trace see
        return float(arr[0]) if blocks is None else arr.copy()

    x = np.zeros(p) if x0 is None else np.array(x0, dtype=float)
    if x.shape != (p,):
        raise ValueError(f"x0 must have shape ({p},), got {x.shape}")
    v = np.broadcast_to(np.asarray(v0, dtype=float), (B,)).copy()
    v_se = v.copy()
    g = np.zeros(n)
    cols = ("iteration", "mse", "variance", "se_variance", "A", "noise", "change")
    trace = {c: [] for c in cols}
    converged = diverged = stopped = False
    message = ""
    best = (np.inf, x.copy(), v, 0)
    from ...core.progress import progress_bar

    it = 0
    for it in progress_bar(range(1, max_iter + 1), desc="GAMP", enabled=progress):
        omega = Phi @ x - v[out_b] * g
        g, dg = channel.gout(y, omega, outward(v), *channel_params)
        g2 = per_block(g * g)
        dg = np.broadcast_to(dg, np.shape(g))      # a channel may return one derivative
        A = alpha * g2 if a_estimator == "square" else -alpha * per_block(np.ravel(dg))
        if not np.all(np.isfinite(A) & (A > 0)):
            diverged, message = True, (f"iteration {it}: A = {outward(A)} (must be positive "
                                       f"and finite)")
            break
        noise_b = alpha * g2 / A**2  # measured variance of Phi^T g / A, per block
        noise = float(np.max(noise_b))
        if noise < best[0]:
            best = (noise, x.copy(), v.copy(), it - 1)
        if (restore_best and noise > 10 * best[0] and np.any(noise_b > 1.5 / A)
                and it > 2):
            x, v = best[1], best[2]
            stopped = True
            message = (f"stopped at iteration {it}: measured noise {noise:.3g} rose above "
                       f"10x its minimum {best[0]:.3g} (predicted {float(np.min(1 / A)):.3g}); returned the "
                       f"iterate of iteration {best[3]}")
            break
        g = damp.damped("g_out", g)        # the Onsager term of the next omega uses it
        A_bar = damp.damped("A", A)
        R = damp.damped("estimate", x) + (Phi.T @ g) / A_bar[in_b]
        x_new, v_new = denoiser(R, outward(1.0 / A_bar))
        v_new = np.broadcast_to(np.asarray(v_new, dtype=float), (B,)).copy()
        if not (np.all(np.isfinite(x_new)) and np.all(np.isfinite(v_new))):
            diverged, message = True, f"iteration {it}: denoiser returned non-finite values"
            break
        if se_map is not None:
            v_se = np.broadcast_to(np.asarray(se_map(outward(v_se)), dtype=float), (B,)).copy()
        change = float(np.mean((x_new - x) ** 2))
        x, v = x_new, v_new
        trace["iteration"].append(it)
        trace["mse"].append(float(np.mean((x - truth) ** 2)) if truth is not None else float("nan"))
        trace["variance"].append(outward(v))
        trace["se_variance"].append(outward(v_se) if se_map is not None else float("nan"))
        trace["A"].append(outward(A_bar))
        trace["noise"].append(outward(noise_b))
        trace["change"].append(change)
        if float(np.mean(x * x)) > divergence_bound:
            diverged, message = True, (f"iteration {it}: mean square of the estimate "
                                       f"{np.mean(x * x):.3g} exceeds {divergence_bound:g}")
            break
        if change < tol:
            converged, message = True, f"converged in {it} iterations (change {change:.2e})"
            break
    else:
        message = f"not converged in {max_iter} iterations (last change {trace['change'][-1]:.2e})"
    if stopped:
        pass
    elif diverged:
        warnings.warn(f"GAMP diverged: {message}", ConvergenceWarning, stacklevel=2)
    elif not converged:
        warnings.warn(f"GAMP {message}", ConvergenceWarning, stacklevel=2)
    res = GampResult(x, outward(v), converged, diverged, it, message, trace)
    res.stopped = stopped
    if stopped:  # the reported estimate is the restored one
        res.final_estimate_mse = float(np.mean((x - truth) ** 2)) if truth is not None else float("nan")
    return res
