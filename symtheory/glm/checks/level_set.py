"""Declaration check of noiseless level-set channels (:mod:`symtheory.glm.factors.level_set`).

A delta likelihood has no brute-force integrand over ``Z``; two identities of the output
density check the co-area weights and the posterior moments instead, at the trivial
point (``omega = 0``, ``V = I``) and two random ones (``V`` random, and ten times
smaller):

* **tower** -- ``int dy Z_out(y) (1, E[Z|y], E[Z Z^T|y]) = (1, omega, V + omega omega^T)``:
  the density is normalized and the posterior moments average back to the prior's (a
  wrong co-area weight, a missed branch or a fold integrated wrong breaks it).  The
  ``y`` integral is tanh-sinh split at the link's critical values (SymPy: ``g`` at the
  zeros of its gradient), where ``Z_out`` has its log singularities, refined to 1e-8;
* **derivative** -- ``E[Z|y] - omega = V d log Z_out / d omega`` (Eq. (12) of
  arXiv:2502.00901) by a fourth-order central difference of ``log Z_out``, which involves
  none of the moment integrals.

Tolerance :data:`LEVEL_SET_RTOL` relative to the size of each quantity.
"""
from __future__ import annotations

import time

import numpy as np

from ..integrate.level_set import critical_values
from .multi_index import CheckReport
from .scalar import ChannelCheckError

#: agreement required of both identities (the channel integrates to ``rtol`` 1e-10; the
#: y-quadrature of the tower is asked for 1e-10 and the difference stencil is ~1e-10)
LEVEL_SET_RTOL = 1e-6


def _tower(channel, omega, V, cuts, scale):
    """``int dy Z_out(y) (1, E[Z|y], E[ZZ^T|y])`` (tanh-sinh in ``y``, to 1e-8: two
    orders below :data:`LEVEL_SET_RTOL`)."""
    from ..integrate.level_set_output import output_nodes

    Sigma = np.kron(V, np.eye(channel.M))
    w, mean, cov, _ = output_nodes(channel.structure, omega.reshape(-1), Sigma, cuts, scale,
                                   rtol=1e-8, levels=(4, 8))
    second = cov + mean[:, :, None] * mean[:, None, :]
    return np.concatenate([[w.sum()], w @ mean, np.einsum("k,kij->ij", w, second).ravel()])


def check_level_set_channel(channel, *, seed: int = 20240601) -> CheckReport:
    """Both identities at three points; :class:`ChannelCheckError` naming the one missed."""
    t0 = time.perf_counter()
    model = channel.model
    P, M = model.P, model.M
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((P, P))
    V_rand = A @ A.T / P + 0.3 * np.eye(P)
    points = [(np.zeros((P, M)), np.eye(P)), (0.7 * rng.standard_normal((P, M)), V_rand),
              (0.7 * rng.standard_normal((P, M)), 0.1 * V_rand)]
    cuts = critical_values(model.link, model.indices, model.params)
    y_scale = float(np.sqrt(np.mean(model.g(rng.standard_normal((256, P, M))) ** 2))) or 1.0
    worst_tower = worst_deriv = 0.0
    for k, (om, V) in enumerate(points):
        Sigma = np.kron(V, np.eye(M))
        flat = om.reshape(-1)
        want = np.concatenate([[1.0], flat, (Sigma + np.outer(flat, flat)).ravel()])
        got = _tower(channel, om, V, cuts, y_scale)
        scale = np.concatenate([[1.0], np.full(flat.size, max(1.0, np.abs(flat).max())),
                                np.full(flat.size ** 2, max(1.0, np.abs(want[1 + flat.size:]).max()))])
        e_tower = float(np.max(np.abs(got - want) / scale))
        # derivative identity at a y drawn from the model at this point
        Z = om + np.linalg.cholesky(V) @ rng.standard_normal((P, M))
        y = model.g(Z[None])[0].reshape(1, 1)
        m = channel.moments(y, om[None], V)
        grad = np.zeros(P * M)
        sd = np.sqrt(np.diag(Sigma))
        for i in range(P * M):
            h = 1e-3 * sd[i]
            vals = []
            for s in (-2, -1, 1, 2):
                o = flat.copy()
                o[i] += s * h
                vals.append(float(channel.moments(y, o.reshape(1, P, M), V).log_partition[0]))
            grad[i] = (vals[0] - 8 * vals[1] + 8 * vals[2] - vals[3]) / (12 * h)
        shift = Sigma @ grad
        e_deriv = float(np.max(np.abs(shift - m.mean_shift.reshape(-1)) / sd))
        worst_tower, worst_deriv = max(worst_tower, e_tower), max(worst_deriv, e_deriv)
        if not e_tower <= LEVEL_SET_RTOL:
            raise ChannelCheckError(
                f"level-set channel of {model.name!r}: tower identity failed at point {k}: "
                f"int Z_out (1, E[Z|y], E[ZZ^T|y]) dy misses (1, omega, V + omega omega^T) by "
                f"{e_tower:.2e} (tolerance {LEVEL_SET_RTOL:g})")
        if not e_deriv <= LEVEL_SET_RTOL:
            raise ChannelCheckError(
                f"level-set channel of {model.name!r}: derivative identity failed at point {k} "
                f"(y = {float(y[0, 0]):.4g}): E[Z|y] - omega differs from V grad log Z_out by "
                f"{e_deriv:.2e} prior sd (tolerance {LEVEL_SET_RTOL:g})")
    return CheckReport(True, len(points), worst_deriv, worst_tower, LEVEL_SET_RTOL,
                       time.perf_counter() - t0,
                       "tower and derivative identities (max_discrepancy_g: derivative, "
                       "max_discrepancy_dg: tower)")
