"""Generalized approximate message passing with a (possibly non-separable) denoiser.

For ``y_mu ~ P_out(. | <Phi_mu, x*>)``, ``Phi`` of shape ``(n, p)`` with i.i.d. entries
of variance ``1/p`` and ``alpha = n/p``, one iteration reads (e.g. bsr.md 6.1)::

    omega = Phi x - V g_prev                     # Onsager-corrected pre-activations
    g, dg = g_out(y, omega, V), d g_out/d omega  # symbolic channel (glm.channels)
    A     = -alpha mean(dg)   ("derivative")  or  alpha mean(g^2)  ("square")
    R     = x + Phi^T g / A                      # ~ x* + N(0, 1/A) entrywise
    x, V  = denoiser(R, 1/A)                     # estimate and its predicted variance

Monitoring without the truth: the measured variance of the update ``Phi^T g / A``,
``alpha mean(g^2)/A^2``, equals the predicted ``1/A`` while state evolution holds
(Nishimori: E g^2 = -E dg).  At finite size the error reaches a floor while the
predicted variance keeps shrinking (e.g. above perfect recovery), the denoiser gets
overconfident and the iteration blows up.  With ``restore_best`` the run stops when
the measured noise exceeds 10 times its minimum and 1.5 times the predicted one
(transients at small alpha reach ~2x and recover; a blow-up grows geometrically), and
returns the iterate of minimal measured noise (reported in ``message``).

with optional damping of ``(x, V)``.  The matching state evolution ``V <- se_map(V)``
is run alongside with the same damping; the per-iteration trace records the actual
MSE (when the truth is given), the predicted variance and the SE prediction.  A run
that produces non-finite values or an estimate whose norm exceeds
``divergence_bound`` stops and is reported as diverged, never silently.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.solvers import ConvergenceWarning


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
    def final_mse(self) -> float:
        """Error of the returned estimate (the restored iterate after an early stop)."""
        if self.final_estimate_mse is not None:
            return self.final_estimate_mse
        return self.trace["mse"][-1] if self.trace.get("mse") else float("nan")


def gamp(Phi: np.ndarray, y: np.ndarray, *, channel, channel_params=(), denoiser: Callable,
         v0: float = 1.0, a_estimator: str = "derivative", damping: float = 0.0,
         max_iter: int = 200, tol: float = 1e-9, truth: np.ndarray | None = None,
         se_map: Callable | None = None, divergence_bound: float = 1e3,
         restore_best: bool = True, progress: bool = False) -> GampResult:
    """Run GAMP; see the module docstring.  ``denoiser(R, noise_var) -> (x, V)``."""
    if a_estimator not in ("derivative", "square"):
        raise ValueError(f"a_estimator must be 'derivative' or 'square', got {a_estimator!r}")
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    n, p = Phi.shape
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    alpha = n / p
    x = np.zeros(p)
    v = float(v0)
    v_se = float(v0)
    g = np.zeros(n)
    cols = ("iteration", "mse", "variance", "se_variance", "A", "noise", "change")
    trace = {c: [] for c in cols}
    converged = diverged = stopped = False
    message = ""
    best = (np.inf, x.copy(), v, 0)
    from ..core.progress import progress_bar

    it = 0
    for it in progress_bar(range(1, max_iter + 1), desc="GAMP", enabled=progress):
        omega = Phi @ x - v * g
        g, dg = channel.gout(y, omega, v, *channel_params)
        g2 = float(np.mean(g * g))
        A = alpha * g2 if a_estimator == "square" else -alpha * float(np.mean(dg))
        if not (np.isfinite(A) and A > 0):
            diverged, message = True, f"iteration {it}: A = {A} (must be positive and finite)"
            break
        noise = alpha * g2 / A**2  # measured variance of Phi^T g / A
        if noise < best[0]:
            best = (noise, x.copy(), v, it - 1)
        if restore_best and noise > 10 * best[0] and noise > 1.5 / A and it > 2:
            x, v = best[1], best[2]
            stopped = True
            message = (f"stopped at iteration {it}: measured noise {noise:.3g} rose above "
                       f"10x its minimum {best[0]:.3g} (predicted {1 / A:.3g}); returned the "
                       f"iterate of iteration {best[3]}")
            break
        R = x + (Phi.T @ g) / A
        x_new, v_new = denoiser(R, 1.0 / A)
        if not (np.all(np.isfinite(x_new)) and np.isfinite(v_new)):
            diverged, message = True, f"iteration {it}: denoiser returned non-finite values"
            break
        x_new = damping * x + (1 - damping) * x_new
        v_new = damping * v + (1 - damping) * float(v_new)
        if se_map is not None:
            v_se = damping * v_se + (1 - damping) * float(se_map(v_se))
        change = float(np.mean((x_new - x) ** 2))
        x, v = x_new, v_new
        trace["iteration"].append(it)
        trace["mse"].append(float(np.mean((x - truth) ** 2)) if truth is not None else float("nan"))
        trace["variance"].append(v)
        trace["se_variance"].append(v_se if se_map is not None else float("nan"))
        trace["A"].append(A)
        trace["noise"].append(noise)
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
    res = GampResult(x, v, converged, diverged, it, message, trace)
    res.stopped = stopped
    if stopped:  # the reported estimate is the restored one
        res.final_estimate_mse = float(np.mean((x - truth) ** 2)) if truth is not None else float("nan")
    return res
