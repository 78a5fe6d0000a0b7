"""Gradient descent and averaged GD on same-architecture AIM students (aim.md 6).

Student ``W in R^{d x r}`` (``r`` = the teacher's width), ``S_W = W W^T / sqrt(r d)``, and
the teacher's own output function on the student's indices:

    f_W(X)_ab = g( (x_a^T S_W x_b - delta_ab Tr S_W) / sqrt(d) )             (aim.md 1.1, 6)

Loss ``L(W) = sum_{mu,a,b} (f_W(X^mu)_ab - y^mu_ab)^2 / d`` on the full batch, minimised with
Adam (``optax.adam``: betas 0.9/0.999, eps 1e-8, as torch's default used by the paper's
``GD_softmax_averaged.py``); the paper runs lr 0.1 for 1000 steps from ``W ~ N(0, 1)``
(``init_scale = 1``).  Averaged GD (AGD): ``M`` students from independent initialisations on
the same data; the error of the average of their ``S`` estimates the posterior mean when a
single run behaves like a posterior sample (single runs then sit near twice the Bayes error).

The ``M`` students are trained together on the summed loss.  The students' losses share no
parameter and Adam acts coordinate-wise, so this is exactly ``M`` independent Adam runs
(checked by a test).  Computations run in float32 on CPU; errors are taken in float64.

Needs JAX and optax (``pip install 'symtheory[gd]'``); they are imported on first use only.
"""
from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..core import validate
from ..core.validate import ParameterError
from . import data as aim_data
from .registry import TRAINABLE_LINKS  # hardmax is piecewise constant


def import_jax():
    """``(jax, jax.numpy, optax)``, or an ImportError that names the ``gd`` extra."""
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError as exc:
        raise ImportError(
            f"AIM gradient descent needs JAX and optax ({exc.name} is missing): install the "
            f"'gd' extra, e.g. pip install 'symtheory[gd]' (or: pip install 'jax[cpu]' optax)"
        ) from exc
    return jax, jnp, optax


@dataclass
class GDResult:
    """``M`` students trained on one teacher's data.

    Histories have ``steps + 1`` rows (the values before each step, then the final ones)
    and one column per student.
    """

    W: np.ndarray                 # (M, d, r) final student factors
    mse_students: np.ndarray      # (M,) (1/d)||S_m - S||^2 of each student
    mse_averaged: float           # (1/d)||mean_m S_m - S||^2 (non-diverged students)
    loss: np.ndarray              # (steps+1, M) training loss L(W)
    mse_history: np.ndarray       # (steps+1, M) student errors along the run (float32)
    mse_averaged_history: np.ndarray  # (steps+1,) error of the running average of S
    grad_norm: np.ndarray         # (M,) ||dL/dW||_F at the end (the residual of GD)
    diverged: np.ndarray          # (M,) bool: non-finite parameters
    seconds: float                # wall time of the training run
    compile_seconds: float        # wall time of tracing + compiling (~0 for a cached shape)
    params: dict = field(default_factory=dict)

    @property
    def students(self) -> int:
        return self.W.shape[0]

    @property
    def mse_single(self) -> float:
        """Mean single-student error (non-diverged students)."""
        ok = self.mse_students[~self.diverged]
        return float(np.mean(ok)) if ok.size else math.nan

    @property
    def mse_averaged_limit(self) -> float:
        """Unbiased estimate of the error of the average over infinitely many students on
        these data, ``mse_averaged - spread/(M - 1)`` with ``spread = mean_m (1/d)||S_m -
        S_bar||^2 = mse_single - mse_averaged``.  The students are i.i.d. given the data,
        so ``E mse_averaged = B + V/M`` and ``E spread = V (M - 1)/M`` (``B`` the error of
        their mean, ``V`` their variance); NaN for fewer than two students."""
        m = int(np.sum(~self.diverged))
        if m < 2:
            return math.nan
        return self.mse_averaged - (self.mse_single - self.mse_averaged) / (m - 1)

    @property
    def final_loss(self) -> np.ndarray:
        return self.loss[-1]

    @property
    def S_students(self) -> np.ndarray:
        return aim_data.teacher_matrix(self.W)

    @property
    def S_averaged(self) -> np.ndarray:
        return np.mean(self.S_students[~self.diverged], axis=0)


def check_gd(link, students, steps, lr, init_scale) -> tuple:
    """Validated ``(link, students, steps, lr, init_scale)``."""
    link = validate.choice("link", link, aim_data.LINKS)
    if link not in TRAINABLE_LINKS:
        raise ParameterError(f"link must be one of {', '.join(TRAINABLE_LINKS)} for gradient "
                             f"descent, got {link!r} (its output is piecewise constant in W: "
                             f"zero gradient almost everywhere)")
    return (link, validate.integer("students", students, low=1),
            validate.integer("steps", steps, low=1),
            validate.real("lr", lr, low=0.0, low_open=True),
            validate.real("init_scale", init_scale, low=0.0, low_open=True))


@functools.lru_cache(maxsize=16)
def _trainer(link: str, inv_temp: float, steps: int, lr: float):
    """A jitted ``run(W0, X, y, S_teacher)`` for one (link, inv_temp, steps, lr); shapes
    are traced per call (JAX caches one compilation per shape)."""
    jax, jnp, optax = import_jax()
    opt = optax.adam(lr)

    def student_loss(W, X, y):
        h = aim_data.attention_indices(X, W, xp=jnp)
        f = aim_data.apply_link(h, link, inv_temp, xp=jnp)
        return jnp.sum((f - y) ** 2) / W.shape[0]

    losses = jax.vmap(student_loss, in_axes=(0, None, None))

    def total_loss(Ws, X, y):
        per_student = losses(Ws, X, y)
        return jnp.sum(per_student), per_student

    grad = jax.value_and_grad(total_loss, has_aux=True)

    def errors(Ws, S_teacher):
        d, r = Ws.shape[-2:]
        S = Ws @ jnp.swapaxes(Ws, -1, -2) / math.sqrt(r * d)
        err = jnp.sum((S - S_teacher) ** 2, axis=(1, 2)) / d
        err_avg = jnp.sum((jnp.mean(S, axis=0) - S_teacher) ** 2) / d
        return err, err_avg

    @jax.jit
    def run(W0, X, y, S_teacher):
        def step(carry, _):
            Ws, state = carry
            (_, per_student), g = grad(Ws, X, y)
            err, err_avg = errors(Ws, S_teacher)
            updates, state = opt.update(g, state, Ws)
            return (optax.apply_updates(Ws, updates), state), (per_student, err, err_avg)

        (Ws, _), (loss, err, err_avg) = jax.lax.scan(step, (W0, opt.init(W0)), None,
                                                     length=steps)
        (_, last_loss), g = grad(Ws, X, y)
        last_err, last_avg = errors(Ws, S_teacher)
        grad_norm = jnp.sqrt(jnp.sum(g * g, axis=(1, 2)))
        return (Ws, jnp.concatenate([loss, last_loss[None]]),
                jnp.concatenate([err, last_err[None]]),
                jnp.concatenate([err_avg, last_avg[None]]), grad_norm)

    return run


def run_gd(data: aim_data.AIMData, *, students: int = 1, steps: int = 1000, lr: float = 0.1,
           init_scale: float = 1.0, seed=0, W0: np.ndarray | None = None) -> GDResult:
    """Adam on ``students`` same-architecture students from ``W ~ N(0, init_scale^2)``
    (drawn from ``seed``, an integer >= 0 or a sequence of them), or from the given
    initial factors ``W0`` of shape ``(M, d, r)``; see the module docstring."""
    link, students, steps, lr, init_scale = check_gd(data.link, students, steps, lr, init_scale)
    d, r = data.d, data.r
    if W0 is None:
        rng = np.random.default_rng(aim_data.seed_sequence(seed))
        W0 = init_scale * rng.standard_normal((students, d, r))
    else:
        W0 = np.asarray(W0, dtype=float)
        if W0.ndim != 3 or W0.shape[1:] != (d, r) or not np.all(np.isfinite(W0)):
            raise ParameterError(f"W0 must be a finite array of shape (M, {d}, {r}), got shape "
                                 f"{W0.shape}")
        students = W0.shape[0]
    _, jnp, _ = import_jax()
    run = _trainer(link, float(data.inv_temp), steps, lr)
    args = [jnp.asarray(a, dtype=jnp.float32) for a in (W0, data.X, data.y, data.S)]
    start = time.perf_counter()
    compiled = run.lower(*args).compile()     # cached by JAX per shape
    started = time.perf_counter()
    W, loss, err, err_avg, grad_norm = (np.asarray(a, dtype=float) for a in compiled(*args))
    seconds, compile_seconds = time.perf_counter() - started, started - start
    diverged = ~np.all(np.isfinite(W), axis=(1, 2))
    if diverged.any():
        warnings.warn(f"{int(diverged.sum())} of {students} GD students diverged (non-finite "
                      f"weights, lr={lr:g}); they are left out of the averages", RuntimeWarning,
                      stacklevel=2)
    S = aim_data.teacher_matrix(W)
    mse_students = aim_data.mse(S, data.S)
    mse_students[diverged] = math.nan
    mse_averaged = (float(aim_data.mse(np.mean(S[~diverged], axis=0), data.S))
                    if (~diverged).any() else math.nan)
    return GDResult(W=W, mse_students=mse_students, mse_averaged=mse_averaged, loss=loss,
                    mse_history=err, mse_averaged_history=err_avg, grad_norm=grad_norm,
                    diverged=diverged, seconds=seconds, compile_seconds=compile_seconds,
                    params={"students": students, "steps": steps, "lr": lr,
                            "init_scale": init_scale, "optimizer": "adam (optax)",
                            "seed": seed if W0 is None else "W0 given"})


def gd_curve(alphas, *, d: int = 100, rho: float = 0.5, seq_len: int = 2,
             link: str = "softmax", inv_temp: float = 1.0, delta: float = 0.0,
             students: int = 16, teachers: int = 1, steps: int = 1000, lr: float = 0.1,
             init_scale: float = 1.0, seed: int = 0, progress: bool = False):
    """Single and averaged GD errors against ``alpha = n/d^2``: one row per (alpha, teacher).

    Teacher ``j`` at the ``i``-th alpha draws its data from seed ``(seed, i, j, 0)`` and its
    students from ``(seed, i, j, 1)``.  Returns a :class:`symtheory.core.table.Table`.
    """
    from ..core.progress import progress_bar
    from ..core.table import Table

    alphas = [validate.real("alpha", a, low=0.0, low_open=True) for a in alphas]
    if not alphas:
        raise ParameterError("alphas must hold at least one sample ratio")
    seed = validate.integer("seed", seed, low=0)
    teachers = validate.integer("teachers", teachers, low=1)
    link, students, steps, lr, init_scale = check_gd(link, students, steps, lr, init_scale)
    for a in alphas:                      # refuse every bad size before any run
        aim_data.sizes(d, a, rho)
    aim_data.check_link(link, seq_len, inv_temp)
    import_jax()
    cols = {k: [] for k in ("alpha", "n", "teacher", "mse_single", "mse_single_std",
                            "mse_averaged", "mse_averaged_limit", "students", "final_loss_max",
                            "grad_norm_max", "diverged", "seconds", "compile_seconds")}
    runs = [(i, a, j) for i, a in enumerate(alphas) for j in range(teachers)]
    for i, a, j in progress_bar(runs, desc="GD", enabled=progress):
        data = aim_data.generate(d, a, rho=rho, seq_len=seq_len, link=link, inv_temp=inv_temp,
                                 delta=delta, seed=(seed, i, j, 0))
        res = run_gd(data, students=students, steps=steps, lr=lr, init_scale=init_scale,
                     seed=(seed, i, j, 1))
        ok = ~res.diverged
        for key, val in (("alpha", data.alpha), ("n", data.n), ("teacher", j),
                         ("mse_single", res.mse_single),
                         ("mse_single_std", float(np.std(res.mse_students[ok])) if ok.any()
                          else math.nan),
                         ("mse_averaged", res.mse_averaged),
                         ("mse_averaged_limit", res.mse_averaged_limit), ("students", students),
                         ("final_loss_max", float(np.max(res.final_loss))),
                         ("grad_norm_max", float(np.max(res.grad_norm))),
                         ("diverged", int(res.diverged.sum())), ("seconds", res.seconds),
                         ("compile_seconds", res.compile_seconds)):
            cols[key].append(val)
    meta = {"model": "aim", "method": "gradient descent (Adam, full batch), aim.md 6",
            "d": d, "rho": round(rho * d) / d, "seq_len": seq_len, "link": link,
            "inv_temp": inv_temp, "delta": delta, "students": students, "teachers": teachers,
            "steps": steps, "lr": lr, "init_scale": init_scale, "seed": seed,
            "seeds": "data (seed, i, j, 0), students (seed, i, j, 1) for alpha i, teacher j",
            "columns": "alpha = n/d^2 realised; mse_single = mean over students of "
                       "(1/d)||S_m - S||_F^2 (std over students in mse_single_std); "
                       "mse_averaged = (1/d)||mean_m S_m - S||_F^2; mse_averaged_limit = "
                       "unbiased estimate of it for infinitely many students; final_loss_max, "
                       "grad_norm_max = largest final training loss and gradient norm over "
                       "students; seconds = wall time of the training run, compile_seconds "
                       "= of its compilation (about 0 when the shape was compiled before)"}
    return Table(cols, meta)
