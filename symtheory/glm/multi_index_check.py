"""Declaration check of multi-index channels against a brute-force quadrature.

The raw integrand of smi.md Eq. 9 -- ``prod_m N(z_m; omega_m, V) P_out(y | Z)`` times
``(1, Z - omega, (Z - omega)(Z - omega)^T)`` -- is integrated by nested
``scipy.integrate.tanhsinh`` (vectorized, error-controlled, ``rtol`` :data:`BRUTE_RTOL`) in
prior-whitened coordinates ``Z = omega + chol(V (x) I_M) t``, split at the link's
jumps: for every linear factor ``a . Z + c`` of a switch argument the inner
coordinate's breakpoint ``t_2 = -(a . omega + c + alpha_1 t_1)/alpha_2`` (or, when the
form does not involve ``t_2``, the outer breakpoint).  The domain ``|t_i| <= T`` grows
until the neglected prior mass times ``sup P_out`` is below ``BRUTE_RTOL * Z_out``.
Nothing of the channel's own integration is reused (the link is evaluated by SymPy's
``lambdify``, not by the generated kernels).

At three fixed points -- the trivial point (``omega = 0``, ``V = I``), a random one and
a random one with ``V`` ten times smaller (likelihood relatively wider) -- ``g_out``
and ``dg_out`` must agree within :data:`CHECK_RTOL` relative to the size of the
quantity (floor: 1% of ``||V^{-1}||^{1/2}`` resp. ``||V^{-1}||``); otherwise
:class:`ChannelCheckError`.  Only for ``P M <= 2`` (cost grows like ``(~100)^{P M}``
evaluations); larger channels are reported unchecked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp
from scipy.integrate import tanhsinh

from .link_analysis import NotApplicable, linear_factors, switch_arguments

#: required agreement of g_out and dg_out with the brute force (relative to their size)
CHECK_RTOL = 1e-6
#: relative tolerance of the brute-force quadrature
BRUTE_RTOL = 1e-9
#: largest P M checked at declaration
MAX_CHECK_DIM = 2


class ChannelCheckError(ValueError):
    """A channel failed its declaration check (the message names check and discrepancy)."""


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
        forms.extend((a, c) for a, c, _ in facs)
    return forms


def _pieces(a, b, points):
    """Limits of the pieces of ``[a, b]`` cut at ``points`` (last axis), clipped."""
    cuts = np.sort(np.clip(points, a[..., None], b[..., None]), axis=-1)
    edges = np.concatenate([a[..., None], cuts, b[..., None]], axis=-1)
    return edges[..., :-1], edges[..., 1:]


def brute_force_moments(model, noise_variance, y, omega, V, *, shift=0.0, T0=9.0):
    """``(log Z_out, mean (d,), cov (d, d))`` by nested adaptive quadrature (``P M <= 2``):
    ``scipy.integrate.tanhsinh`` (vectorized, error-controlled) on every piece between
    jumps, one integral per moment component."""
    P, M = model.P, model.M
    d = P * M
    if d > MAX_CHECK_DIM:
        raise ValueError(f"brute force is limited to P M <= {MAX_CHECK_DIM}, got {d}")
    g = _raw_link(model)
    y = np.asarray(y, dtype=float).ravel()
    om = np.asarray(omega, dtype=float).reshape(d)
    L = np.linalg.cholesky(np.kron(V, np.eye(M)))
    iu = np.triu_indices(d)
    # component k of the integrand: 1, x_i, x_i x_j (x = Z - omega)
    powers = [()] + [(i,) for i in range(d)] + list(zip(*iu))
    n_comp = len(powers)
    if noise_variance is None:
        log_sup = 0.0
    else:
        log_sup = -0.5 * y.size * math.log(2 * math.pi * noise_variance)

    def integrand(t, comp):         # t: (d, ...) prior-whitened, comp: (...) component index
        x = np.einsum("ij,j...->i...", L, t)
        gz = g(om.reshape((d,) + (1,) * (x.ndim - 1)) + x)
        r = gz - y.reshape((-1,) + (1,) * (x.ndim - 1))
        if noise_variance is None:
            w = np.all(np.abs(r) <= 1e-9 * (1 + np.abs(y)).reshape(r.shape[:1] + (1,) * (r.ndim - 1)),
                       axis=0).astype(float)
        else:
            w = np.exp(-0.5 * np.sum(r * r, axis=0) / noise_variance + log_sup - shift)
        w = w * np.exp(-0.5 * np.sum(t * t, axis=0) - 0.5 * d * math.log(2 * math.pi))
        poly = np.ones_like(w)
        for k, pw in enumerate(powers):
            sel = comp == k
            if pw and np.any(sel):
                term = np.prod([x[i] for i in pw], axis=0)
                poly = np.where(sel, term, poly)
        return w * poly

    forms = [(a @ L, float(a @ om + c)) for a, c in _linear_forms(model)]
    tol = dict(rtol=BRUTE_RTOL, atol=1e-14, maxlevel=12)
    # the outer integrand is itself a quadrature: its noise must stay below the outer rtol
    tol_inner = dict(rtol=1e-3 * BRUTE_RTOL, atol=1e-17, maxlevel=12)

    def integrate(T):
        comp = np.arange(n_comp, dtype=float)
        if d == 1:
            pts = np.array([-beta / al[0] for al, beta in forms if al[0] != 0])
            lo, hi = _pieces(np.full(n_comp, -T), np.full(n_comp, T),
                             np.broadcast_to(pts, (n_comp, pts.size)))
            res = tanhsinh(lambda t, c: integrand(t[None], c), lo, hi, args=(comp[:, None],),
                           **tol)
            return res.integral.sum(axis=-1), bool(np.all(res.success))
        outer_pts = np.array([-beta / al[0] for al, beta in forms if al[1] == 0 and al[0] != 0])
        inner_forms = [(al, beta) for al, beta in forms if al[1] != 0]
        ok = [True]

        def inner(t1, c):
            pts = np.stack([-(beta + al[0] * t1) / al[1] for al, beta in inner_forms], axis=-1) \
                if inner_forms else np.zeros(t1.shape + (0,))
            lo, hi = _pieces(np.full(t1.shape, -T), np.full(t1.shape, T), pts)
            res = tanhsinh(lambda t2, t1_, c_: integrand(np.stack([t1_ + 0 * t2, t2]), c_),
                           lo, hi, args=(t1[..., None], c[..., None]), **tol_inner)
            ok[0] &= bool(np.all(res.success))
            return res.integral.sum(axis=-1)
        lo, hi = _pieces(np.full(n_comp, -T), np.full(n_comp, T),
                         np.broadcast_to(outer_pts, (n_comp, outer_pts.size)))
        res = tanhsinh(inner, lo, hi, args=(np.broadcast_to(comp[:, None], lo.shape),), **tol)
        return res.integral.sum(axis=-1), bool(np.all(res.success)) and ok[0]

    T = T0
    while True:
        res, converged = integrate(T)
        logZ = math.log(res[0]) + shift
        T_need = math.sqrt(2.0 * max(0.0, log_sup - logZ - math.log(BRUTE_RTOL)))
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

    from .multi_index import gout_from_moments

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
        logZ, mean, cov = channel.moments(y[None], om[None], V)
        g, dg = gout_from_moments(mean, cov, om[None], V)
        logZ_b, mean_b, cov_b = brute_force_moments(model, channel.noise_variance, y, om, V,
                                                    shift=float(logZ[0]))
        g_b, dg_b = gout_from_moments(mean_b.reshape(1, model.P, model.M), cov_b[None], om[None], V)
        lam = float(np.linalg.norm(np.linalg.inv(V), 2))
        eg = discrepancy(g, g_b, 1e-2 * math.sqrt(lam))
        edg = discrepancy(dg, dg_b, 1e-2 * lam)
        worst_g, worst_dg = max(worst_g, eg), max(worst_dg, edg)
        if not (eg <= CHECK_RTOL and edg <= CHECK_RTOL):
            raise ChannelCheckError(
                f"channel of {model.name!r} ({channel.last_accuracy.method}) fails the "
                f"declaration check at point {k} (y = {np.round(y, 4).tolist()}): g_out differs "
                f"from the brute-force quadrature by {eg:.2e}, dg_out by {edg:.2e} (relative; "
                f"tolerance {CHECK_RTOL:g}); use a finer rule")
    return CheckReport(True, len(points), worst_g, worst_dg, CHECK_RTOL,
                       time.perf_counter() - t0)
