"""Deep attention-indexed models (aim.md 1.3, 3.7), declared for the multi-index machinery.

**Unverified against any paper**: aim.md 3.7 derives the state evolution but no paper
table or code exists for it (the authors' repository has depth 1 only).  What checks it
here is a GAMP simulation at finite ``d`` (``tests/aim/test_aim_deep.py``).

Model (aim.md 1.3, trace-subtracted indices): ``depth`` = L layers with independent
priors ``S_l = W_l W_l^T/sqrt(r d)`` (``rho = r/d`` for every layer), indices
``h^(l)_ab = (x_a^T S_l x_b - delta_ab Tr S_l)/sqrt(d)`` and

    M_0 = I,   M_l = (c I + softmax_beta(M_{l-1} h^(l) M_{l-1}^T)) M_{l-1},
    y = softmax_beta(M_{L-1} h^(L) M_{L-1}^T) + sqrt(noise) xi,

row-wise softmax at inverse temperature ``beta`` (``inv_temp``), skip strength ``c``
(``skip``) and Gaussian noise of variance ``noise`` on each of the ``T^2`` outputs
(required: the noiseless observation is not invertible, ``T^2 - T`` numbers against
``L T(T+1)/2`` indices, aim.md 3.7).  For ``L = 2``: ``y = softmax(M_1 h^(2) M_1^T)``
with ``M_1 = c I + softmax(h^(1))``.

As a multi-index model (:class:`symtheory.glm.factors.multi_index.MultiIndexModel`) the rows are
the layers and the "tokens" the ``K = T(T+1)/2`` isotropic u-space coordinates of each
index matrix (aim.md 2: ``u_ab = h_ab``, ``u_aa = h_aa/sqrt(2)``).  The prior channel is
:class:`symtheory.glm.factors.spectral_priors.LayerwiseMatrixPrior` (per-layer matrix denoising,
known means ``sqrt(rho)``, ``Q0 = 1 + rho``, two measurements per parameter).  Nothing
here computes: the state evolution is :class:`symtheory.glm.se.state_evolution.StateEvolution` and the
channel integral its noisy-link rule.
"""
from __future__ import annotations

import math

import sympy as sp

from ..core.validate import ParameterError, integer, real
from ..glm.factors.multi_index import MultiIndexModel
from .model import index_symbols, softmax_rows

SKIP, BETA = sp.symbols("c beta", positive=True)


def deep_aim_model(depth: int = 2, seq_len: int = 2, skip: float = 1.0,
                   inv_temp: float = 1.0) -> MultiIndexModel:
    """The deep AIM link as a multi-index model (``P = depth`` rows of ``K`` u-space
    indices); see the module docstring."""
    L = integer("depth", depth, low=2)
    T = integer("seq_len", seq_len, low=2)
    c = real("skip", skip, low=0.0)
    b = real("inv_temp", inv_temp, low=0.0, low_open=True)
    if not math.isfinite(c) or not math.isfinite(b):
        raise ParameterError(f"skip and inv_temp must be finite, got {c}, {b}")
    u, h_of_u, _ = index_symbols(T)
    K = len(u)
    Z = sp.Matrix(L, K, lambda l, k: sp.Symbol(f"z{l}_{k}", real=True))
    mixing = sp.eye(T)
    y = None
    for l in range(L):
        h = h_of_u.subs(dict(zip(u, Z[l, :])), simultaneous=True)
        scores = mixing * h * mixing.T
        if l < L - 1:
            mixing = (SKIP * sp.eye(T) + softmax_rows(scores, BETA)) * mixing
        else:
            y = softmax_rows(scores, BETA)
    return MultiIndexModel(f"deep_aim_L{L}_T{T}", Z, y, params={SKIP: c, BETA: b},
                           row_groups=[(l,) for l in range(L)],
                           description=f"deep AIM, depth {L}, seq_len {T}, skip c={c:g}, "
                                       f"inv_temp={b:g}")


def layer_prior(depth: int, rho: float):
    """The prior channel of :func:`deep_aim_model`: ``depth`` independent tied priors of
    width ratio ``rho`` (aim.md 3.1: ``Q0 = 1 + rho``, mean ``sqrt(rho) I``, both from the
    derived prior law's moments), two measurements per parameter."""
    from ..glm.factors.spectral_priors import LayerwiseMatrixPrior
    from .theory import SAMPLE_FACTOR, check_params, spectral_prior

    L = integer("depth", depth, low=2)
    rho = check_params(rho, 2)[0]
    if not 0 < rho < math.inf:
        raise ParameterError(f"rho must be in (0, inf) for the deep AIM state evolution, "
                             f"got {rho}")
    return LayerwiseMatrixPrior([spectral_prior(rho)] * L, measurements=SAMPLE_FACTOR)


def deep_se_point(alpha, *, rho: float = 0.5, depth: int = 2, seq_len: int = 2,
                  skip: float = 1.0, inv_temp: float = 1.0, noise: float, samples: int = 2048,
                  seed: int = 0, sampling: str = "rqmc", damping: float = 0.3, max_iter: int = 200, progress=False):
    """State evolution of deep AIM at ``alpha = n/d^2`` (aim.md 3.7) from the uninformed
    point ``q_l = rho``: :class:`symtheory.glm.se.state_evolution.StateEvolution` on
    :func:`deep_aim_model` with :func:`layer_prior`, output noise ``noise`` and
    ``samples`` frozen draws of design ``sampling`` (``'rqmc'`` or ``'monte-carlo'``, as for
    :class:`~symtheory.glm.se.state_evolution.StateEvolution`).  Returns ``(result, mmse)``: the SE result
    (``Q``, its standard errors ``Q_stderr``, ``converged``, ``channel_error``, ...) and
    the per-layer ``mmse_l = Q0 - q_l = (1/d)||S_hat_l - S_l||_F^2`` (1 at ``alpha = 0``)."""
    import numpy as np

    from ..glm.se.state_evolution import StateEvolution

    noise = real("noise", noise, low=0.0, low_open=True)
    samples = integer("samples", samples, low=2)
    seed = integer("seed", seed, low=0)
    model = deep_aim_model(depth, seq_len, skip, inv_temp)
    prior = layer_prior(depth, rho)
    se = StateEvolution(model, alpha, samples=samples, seed=seed, noise_variance=noise,
                        prior=prior, structure="full", sampling=sampling)
    res = se.solve(prior.uninformed(), damping=damping, max_iter=max_iter, progress=progress)
    return res, prior.Q0 - np.diag(res.Q)
