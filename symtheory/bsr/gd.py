"""Gradient descent and averaged GD on the factorized BSR student (bsr.md 13).

Student ``S = U V^T / sqrt(r)`` (``U`` d x r, ``V`` L x r), predictions
``yhat_mu = <Phi_mu, vec S>``, loss ``L(U, V) = (1/4) sum_mu (yhat_mu - y_mu)^2`` (a sum,
as in the paper's scripts), full-batch GD with step ``lr`` on ``(U, V)`` jointly.
``K`` independent runs on the same data are advanced together (one matrix product
per step for all runs, no Python loop over samples).  Averaged GD (AGD) reports the
error of the average of the final ``S`` over the runs, which approximates the
posterior mean when single runs behave like posterior samples (bsr.md 13).

Initializations: ``"prior"`` (i.i.d. N(0, 1) factors) or ``"small"`` (i.i.d. N(0, init_scale^2)).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..core import validate
from ..core.solvers import ConvergenceWarning
from .data import BSRData


@dataclass
class GDResult:
    steps: np.ndarray              # recorded step numbers
    train_error: np.ndarray        # (n_records, K): mean squared residual
    gen_error: np.ndarray          # (n_records, K): mean (S - S*)^2
    final_S: np.ndarray            # (K, d, L)
    diverged: np.ndarray           # (K,) bool
    averaged_error: float          # error of the average of the final S (non-diverged runs)
    params: dict = field(default_factory=dict)

    @property
    def final_gen_error(self) -> np.ndarray:
        return self.gen_error[-1]


def gradient_descent(data: BSRData, *, runs: int = 1, lr: float = 0.1, steps: int = 50_000,
                     init: str = "prior", init_scale: float = 1e-4, seed: int = 0,
                     record_every: int = 100, train_tol: float = 0.0,
                     progress: bool = False) -> GDResult:
    """Full-batch GD from ``runs`` independent initializations; see the module docstring.

    Stops early when every run's training error is below ``train_tol`` (0: never).
    A run whose parameters become non-finite is marked diverged and frozen.
    """
    runs = validate.integer("runs", runs, low=1)
    lr = validate.real("lr", lr, low=0, low_open=True)
    steps = validate.integer("steps", steps, low=1)
    record_every = validate.integer("record_every", record_every, low=1)
    if init not in ("prior", "small"):
        raise validate.ParameterError(f"init must be 'prior' or 'small', got {init!r}")
    init_scale = validate.real("init_scale", init_scale, low=0, low_open=True)
    d, L, r = data.d, data.L, data.r
    rng = np.random.default_rng(seed)
    scale = 1.0 if init == "prior" else init_scale
    U = scale * rng.standard_normal((runs, d, r))
    V = scale * rng.standard_normal((runs, L, r))
    Phi, y, S_true = data.Phi, data.y, data.S
    inv_sqrt_r = 1.0 / math.sqrt(r)
    diverged = np.zeros(runs, bool)
    rec_steps, rec_train, rec_gen = [], [], []

    def current_S():
        return np.einsum("kir,kar->kia", U, V) * inv_sqrt_r

    from ..core.progress import progress_bar

    for step in progress_bar(range(steps + 1), desc="GD", enabled=progress):
        S = current_S()
        resid = Phi @ S.reshape(runs, d * L).T - y[:, None]          # (n, K)
        if step % record_every == 0 or step == steps:
            train = np.mean(resid**2, axis=0)
            gen = np.mean((S - S_true) ** 2, axis=(1, 2))
            train[diverged] = np.nan
            gen[diverged] = np.nan
            rec_steps.append(step)
            rec_train.append(train)
            rec_gen.append(gen)
            if train_tol > 0 and np.all((train < train_tol) | diverged):
                break
        if step == steps:
            break
        grad_S = 0.5 * (Phi.T @ resid).T.reshape(runs, d, L)        # dL/dS
        gU = np.einsum("kia,kar->kir", grad_S, V) * inv_sqrt_r
        gV = np.einsum("kia,kir->kar", grad_S, U) * inv_sqrt_r
        U -= lr * gU
        V -= lr * gV
        bad = ~(np.isfinite(U).all(axis=(1, 2)) & np.isfinite(V).all(axis=(1, 2)))
        bad |= np.abs(U).max(axis=(1, 2)) > 1e100
        if bad.any():
            newly = bad & ~diverged
            diverged |= bad
            U[bad] = 0.0
            V[bad] = 0.0
            if newly.any():
                warnings.warn(f"GD: {int(newly.sum())} run(s) diverged at step {step} "
                              f"(lr={lr}); they are reported as NaN", ConvergenceWarning,
                              stacklevel=2)
    S = current_S()
    S[diverged] = np.nan
    ok = ~diverged
    avg_err = float(np.mean((S[ok].mean(axis=0) - S_true) ** 2)) if ok.any() else float("nan")
    params = {"runs": runs, "lr": lr, "steps": steps, "init": init, "init_scale": init_scale,
              "seed": seed, "d": d, "L": L, "r": r, "n": data.n, "delta": data.delta,
              "data_seed": data.seed}
    return GDResult(np.array(rec_steps), np.array(rec_train), np.array(rec_gen), S, diverged,
                    avg_err, params)
