"""Declaration check of multi-index channels against a brute-force quadrature.

The raw integrand of Eq. (9) of arXiv:2502.00901 -- ``prod_m N(z_m; omega_m, V) P_out(y | Z)`` times
``(1, Z - omega, (Z - omega)(Z - omega)^T)`` -- is integrated by
``scipy.integrate.cubature`` (Gauss-Kronrod 21 product rule with adaptive
subdivision, vector-valued, ``rtol`` :data:`BRUTE_RTOL`) in coordinates
``u = F (Z - omega)`` whose first axes are the link's linear switch forms, on the
boxes between the jumps (so every jump is a box face); links without alignable jumps
are integrated in prior-whitened coordinates.  The box ``|u_i| <= T sd(u_i)`` grows
until the neglected prior mass times ``sup P_out`` is below ``BRUTE_RTOL * Z_out``.
Nothing of the channel's own integration is reused (the link is evaluated by SymPy's
``lambdify``, not by the generated kernels).

At three fixed points -- the trivial point (``omega = 0``, ``V = I``), a random one and
a random one with ``V`` ten times smaller -- ``g_out`` and ``dg_out`` must agree within
:data:`CHECK_RTOL` relative to the size of the quantity (floor: 1% of
``||V^{-1}||^{1/2}`` resp. ``||V^{-1}||``); otherwise :class:`ChannelCheckError`.  Only
for ``P M <= 2`` (the cubature's cost grows exponentially with the dimension); larger
channels are reported unchecked (``check_report.checked = False``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp
from scipy.integrate import cubature

from ..integrate.link_structure import NotApplicable, linear_factors, switch_arguments
from .scalar import ChannelCheckError

#: required agreement of g_out and dg_out with the brute force (relative to their size)
CHECK_RTOL = 1e-6
#: relative tolerance of the brute-force quadrature (a margin far below CHECK_RTOL: a
#: nested tanh-sinh at 1e-9 was measured 4e-7 off on a covariance)
BRUTE_RTOL = 1e-11
#: largest P M checked at declaration
MAX_CHECK_DIM = 2


@dataclass
class CheckReport:
    checked: bool
    points: int
    max_discrepancy_g: float
    max_discrepancy_dg: float
    tolerance: float
    seconds: float
    note: str = ""


def _raw_link(model):
    """The link as a vectorized numpy function of the flat indices (SymPy ``lambdify``)."""
    modules = [{"sign": np.sign, "Heaviside": lambda x, h0=0.5: np.heaviside(x, h0)}, "numpy"]
    f = sp.lambdify(list(model.indices), list(model.link.subs(model.params)), modules=modules)

    def g(z):                       # z: (d, ...) -> (n_out, ...)
        out = f(*z)
        return np.stack([np.broadcast_to(np.asarray(v, dtype=float), z[0].shape) for v in out])
    return g


def _linear_forms(model):
    """``[(a (d,), c)]`` of the linear factors of every switch argument (others skipped)."""
    forms = []
    link = sp.Matrix(list(model.link.subs(model.params)))
    for _, arg, _ in switch_arguments(link):
        try:
            _, facs = linear_factors(arg, list(model.indices))
        except NotApplicable:
            continue
        forms.extend((a, c) for a, c, _, _ in facs)
    return forms


def _aligned_coordinates(model, d):
    """Rows of an invertible ``F`` whose first rows are the (distinct, independent)
    linear switch forms of the link, so that in ``u = F (Z - omega)`` every jump lies on
    a coordinate plane; the rest completes an orthonormal basis.  Also the forms'
    offsets ``(a, c)``."""
    forms = []
    for a, c in _linear_forms(model):
        a = np.asarray(a, dtype=float)
        unit, off = a / np.linalg.norm(a), c / np.linalg.norm(a)
        if any(abs(abs(unit @ f) - 1) < 1e-12 for f, _ in forms):
            continue
        forms.append((unit, off))
    if forms and (len(forms) > d or np.linalg.matrix_rank(np.array([f for f, _ in forms])) < len(forms)):
        return None, []            # jumps not alignable: whitened coordinates, no splits
    rows = [f for f, _ in forms]
    q, _ = np.linalg.qr(np.array(rows + [np.eye(d)[i] for i in range(d)]).T)
    for i in range(len(rows), d):
        rows.append(q[:, i])
    return np.array(rows), forms


def brute_force_moments(model, noise_variance, y, omega, V, *, shift=0.0, T0=9.0,
                        rtol=BRUTE_RTOL):
    """``(log Z_out, mean (d,), cov (d, d))`` by adaptive cubature (``P M <= 2``):
    ``scipy.integrate.cubature`` (Gauss-Kronrod 21 product rule, adaptive subdivision,
    vector-valued: all moments from the same evaluations) over the boxes between the
    link's jumps, in coordinates where the jumps are coordinate planes.  ``rtol``: of the
    cubature and of the neglected mass outside the box; ``shift`` ~ ``log Z_out`` scales
    the integrand to O(1) so that the absolute floor ``1e-2 rtol`` means something."""
    P, M = model.P, model.M
    d = P * M
    if d > MAX_CHECK_DIM:
        raise ValueError(f"brute force is limited to P M <= {MAX_CHECK_DIM}, got {d}")
    g = _raw_link(model)
    y = np.asarray(y, dtype=float).ravel()
    om = np.asarray(omega, dtype=float).reshape(d)
    Sigma = np.kron(V, np.eye(M))
    F, forms = _aligned_coordinates(model, d)
    if F is None:
        F = np.linalg.inv(np.linalg.cholesky(Sigma))
    Finv = np.linalg.inv(F)
    Cu = F @ Sigma @ F.T
    Lu = np.linalg.cholesky(0.5 * (Cu + Cu.T))
    su = np.sqrt(np.diag(Cu))
    log_norm = -0.5 * d * math.log(2 * math.pi) - float(np.sum(np.log(np.diag(Lu))))
    jumps = [-(f @ om + c) for f, c in forms]          # u_j = f . (Z - omega) = -(f . omega + c)
    iu = np.triu_indices(d)
    log_sup = 0.0 if noise_variance is None else -0.5 * y.size * math.log(2 * math.pi * noise_variance)

    def integrand(u):                # u: (N, d) -> (N, n_comp)
        x = u @ Finv.T               # Z - omega
        gz = g((om + x).T)
        if noise_variance is None:
            logl = np.where(np.all(np.abs(gz.T - y) <= 1e-9 * (1 + np.abs(y)), axis=1), 0.0, -np.inf)
        else:
            logl = -0.5 * np.sum((gz.T - y) ** 2, axis=1) / noise_variance + log_sup
        v = np.linalg.solve(Lu, u.T)
        w = np.exp(logl - shift - 0.5 * np.sum(v * v, axis=0) + log_norm)
        return np.concatenate([w[:, None], w[:, None] * x,
                               w[:, None] * (x[:, :, None] * x[:, None, :])[:, iu[0], iu[1]]], axis=1)

    def integrate(T):
        edges = []
        for i in range(d):
            cuts = [jumps[i]] if i < len(jumps) and abs(jumps[i]) < T * su[i] else []
            edges.append([-T * su[i]] + cuts + [T * su[i]])
        total = 0.0
        ok = True
        for box in np.ndindex(*[len(e) - 1 for e in edges]):
            lo = [edges[i][box[i]] for i in range(d)]
            hi = [edges[i][box[i] + 1] for i in range(d)]
            # the weights are scaled by exp(-shift) ~ 1/Z_out: components that vanish by
            # symmetry need an absolute floor, far below what the check resolves
            res = cubature(integrand, lo, hi, rtol=rtol, atol=1e-2 * rtol,
                           max_subdivisions=20000)
            ok &= res.status == "converged"
            total = total + res.estimate
        return total, ok

    T = T0
    while True:
        res, converged = integrate(T)
        logZ = math.log(res[0]) + shift
        T_need = math.sqrt(2.0 * max(0.0, log_sup - logZ - math.log(rtol)))
        if T_need <= T or T >= 38.0:
            break
        T = min(T_need + 0.5, 38.0)
    if not converged:
        raise ChannelCheckError("the brute-force quadrature of the declaration check did not "
                                "converge; the channel cannot be checked")
    mean_x = res[1:1 + d] / res[0]
    second = np.zeros((d, d))
    second[iu] = res[1 + d:] / res[0]
    second = second + np.triu(second, 1).T
    return logZ, om + mean_x, second - np.outer(mean_x, mean_x)


def _check_points(model, noise_variance, rng):
    P, M = model.P, model.M
    A = rng.standard_normal((P, P))
    V_rand = A @ A.T / P + 0.3 * np.eye(P)
    pts = [(np.zeros((P, M)), np.eye(P)),
           (0.7 * rng.standard_normal((P, M)), V_rand),
           (0.7 * rng.standard_normal((P, M)), 0.1 * V_rand)]
    out = []
    for om, V in pts:
        Z = om + np.linalg.cholesky(V) @ rng.standard_normal((P, M))
        y = model.g(Z[None])[0].ravel()
        if noise_variance is not None:
            y = y + math.sqrt(noise_variance) * rng.standard_normal(y.shape)
        out.append((y, om, V))
    return out


def discrepancy(ours, ref, floor):
    return float(np.max(np.abs(ours - ref)) / max(float(np.max(np.abs(ref))), floor))


def check_channel(channel, *, seed: int = 20240601) -> CheckReport:
    """Compare ``channel`` (configured) with the brute force; raise on a miss."""
    import time

    from ..integrate.moments import Moments

    model = channel.model
    d = model.P * model.M
    if d > MAX_CHECK_DIM:
        return CheckReport(False, 0, math.nan, math.nan, CHECK_RTOL, 0.0,
                           f"not checked: P M = {d} > {MAX_CHECK_DIM} (brute force too costly)")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    worst_g = worst_dg = 0.0
    points = _check_points(model, channel.noise_variance, rng)
    for k, (y, om, V) in enumerate(points):
        ours = channel.moments(y[None], om[None], V)
        g, dg = ours.output_functions()
        logZ_b, mean_b, cov_b = brute_force_moments(model, channel.noise_variance, y, om, V,
                                                    shift=float(ours.log_partition[0]))
        g_b, dg_b = Moments.from_posterior(logZ_b, mean_b[None], cov_b[None], om[None],
                                           V).output_functions()
        lam = float(np.linalg.norm(np.linalg.inv(V), 2))
        eg = discrepancy(g, g_b, 1e-2 * math.sqrt(lam))
        edg = discrepancy(dg, dg_b, 1e-2 * lam)
        worst_g, worst_dg = max(worst_g, eg), max(worst_dg, edg)
        if not (eg <= CHECK_RTOL and edg <= CHECK_RTOL):
            raise ChannelCheckError(
                f"channel of {model.name!r} ({channel.last_accuracy.method}): brute-force "
                f"moments check failed at point {k} (y = {np.round(y, 4).tolist()}): g_out differs "
                f"from the brute-force quadrature by {eg:.2e}, dg_out by {edg:.2e} (relative; "
                f"tolerance {CHECK_RTOL:g}); use a finer rule")
    return CheckReport(True, len(points), worst_g, worst_dg, CHECK_RTOL,
                       time.perf_counter() - t0)
