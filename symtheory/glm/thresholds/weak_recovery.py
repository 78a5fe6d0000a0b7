"""Weak-recovery thresholds of any declared multi-index model (Eqs. 15-16 of Troiani et
al., arXiv:2502.00901).

* the trivial-subspace test (``E[Z|y] != 0`` on a set of positive measure -> the span of
  ``E_y sum_m E[z_m|y] E[z_m|y]^T`` is learnable at any ``alpha > 0``, ``alpha_c = 0``);
* ``alpha_c = 1 / lambda_max`` of the linearized operator (:mod:`.operator`, with the
  expectation of :mod:`.expectations`) and the learnable subspace, with an error
  estimate from successive resolutions.

Precision (``precision=P``): the same computation at ``P + 10`` digits and again at
``2 P + 10`` with a different, finer rule (more Gauss-Hermite nodes; Gauss-Legendre
panels made for ``P + 20`` digits); ``digits_confirmed`` is their number of agreeing
digits.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...core.quadrature import TensorRule
from ...core.validate import ParameterError
from ..factors.gaussian_prior import GaussianPrior
from .expectations import _mp_operator, _scalar_operator_float, choose_method, linearized_operator
from .operator import (
    ThresholdResult,
    _dict_to_tensor,
    _mp_lambda_max,
    operator_matrix,
    prior_jacobian,
    sym_basis,
    top_eigen,
)


def _trivial_result(first, first_err, P, method, t0, details):
    lam, vec = np.linalg.eigh(0.5 * (first + first.T))
    keep = lam > max(first_err, 1e-12 * max(1.0, lam[-1]))
    G = (vec[:, keep] * lam[keep]) @ vec[:, keep].T
    G /= np.linalg.norm(G)
    return ThresholdResult(
        kind="weak", value=0.0, error=0.0, method=method, subspace=G, eigenvalue=math.inf,
        converged=True, message=f"trivial subspace: E_y sum_m E[z_m|y] E[z_m|y]^T has eigenvalue {lam[-1]:.6g} "
        f"(numerical floor {first_err:.2g}), so E[Z|y] != 0 on a set of positive measure "
        "and its range is learnable at any alpha > 0 (Theorem 2.3 of arXiv:2502.00901)",
        seconds=time.perf_counter() - t0, details=details)


#: largest observation grid per axis :func:`weak_recovery` doubles to for ``target_error``
MAX_OUTER_NODES = 400


def weak_recovery(model, *, noise_variance=None, method="auto", precision=None, prior=None,
                  outer_nodes=48, width=8.0, rule=None, samples=200000, seed=0,
                  target_error=None):
    """Weak-recovery threshold ``alpha_c = 1/lambda_max(F_prior' o F)`` (Eqs. (15)-(16) of
    arXiv:2502.00901).

    ``target_error`` (observation grid only): while the error estimate exceeds it, the
    grid is redone with twice the nodes per axis, up to :data:`MAX_OUTER_NODES` (the
    integrand's scale varies with the model, e.g. the attention skip c: 48 nodes give
    7e-3 at c = 0.1 and 4e-7 at c = 1); ``converged`` is False and the message says so
    when the largest grid misses it.
    Deterministic methods report ``error`` from two resolutions: observation grid --
    ``|alpha(n_out, n_in) - alpha(0.75 n_out, n_in)| + |alpha(n_out, n_in) -
    alpha(n_out, 0.75 n_in)|`` (the error of the coarser runs, an upper estimate for
    the converged finer one) plus the truncated mass times ``alpha``; mpmath methods --
    ``|alpha(dps) - alpha(dps + 10)|``.  Monte Carlo: the standard error of batch means
    of ``v^T F_b v`` (``v`` the top eigenvector).  ``precision=P`` (mpmath methods):
    ``alpha`` at ``P + 10`` digits confirmed by a run at ``2 P + 10`` digits."""
    t0 = time.perf_counter()
    prior = prior or GaussianPrior()
    if noise_variance is not None and not (np.isfinite(noise_variance) and noise_variance >= 0):
        raise ParameterError(f"noise_variance must be finite and >= 0, got {noise_variance}")
    method = choose_method(model, noise_variance) if method == "auto" else method
    if target_error is not None:
        if not (np.isfinite(target_error) and target_error > 0):
            raise ParameterError(f"target_error must be finite and > 0, got {target_error}")
        if method != "observation-grid" or precision is not None:
            raise ParameterError("target_error applies to the observation-grid method without "
                                 f"precision (method here: {method!r})")
        n, tried = int(outer_nodes), []
        while True:
            res = weak_recovery(model, noise_variance=noise_variance, method=method,
                                prior=prior, outer_nodes=n, width=width, rule=rule)
            tried.append(f"{n}: {res.error:.1e}")
            if res.error <= target_error or 2 * n > MAX_OUTER_NODES:
                break
            n *= 2
        res.details["outer_nodes_tried"] = tried
        res.seconds = time.perf_counter() - t0
        if res.error > target_error:
            res.converged = False
            res.message += (f"; error {res.error:.1e} above target_error {target_error:g} at "
                             f"the largest observation grid ({n} per axis)")
        return res
    P, M = model.P, model.M
    Jp = prior_jacobian(prior, P)
    rule = rule or TensorRule("gauss-hermite", 40)
    if precision is not None:
        return _weak_recovery_precision(model, method, noise_variance, int(precision), prior, t0)
    details = {"method": method}
    if method == "observation-grid":
        runs = {}
        n_in = int(rule.n)
        coarse_out = max(4, int(round(0.75 * outer_nodes)))
        coarse_in = TensorRule(rule.kind, max(4, int(round(0.75 * n_in))), rule.width)
        for key, (no, ru) in {"fine": (outer_nodes, rule), "outer": (coarse_out, rule),
                              "inner": (outer_nodes, coarse_in)}.items():
            if key == "inner" and not model.free_rows:
                continue
            op = linearized_operator(model, method=method, outer_nodes=no, width=width, rule=ru)
            runs[key] = op
        op = runs["fine"]
        lam, G, spectrum = top_eigen(Jp @ op.matrix, P)
        first = op.first
        mass_defect = abs(1.0 - op.mass)
        first_floor = 1e-9 * max(1.0, float(np.max(np.abs(op.T))))
        details.update({k: v.details for k, v in runs.items()})
        lam_runs = {k: top_eigen(Jp @ v.matrix, P)[0] for k, v in runs.items()}
        details["lambda_runs"] = lam_runs
        if not model.is_even and np.max(np.linalg.eigvalsh(first)) > first_floor:
            return _trivial_result(first, first_floor, P, method, t0, details)
        alphas = {k: 1.0 / v for k, v in lam_runs.items()}
        err = sum(abs(alphas[k] - alphas["fine"]) for k in alphas if k != "fine")
        err += mass_defect / lam
        # even with exactly agreeing resolutions the rounding floor remains
        err = max(err, 1e-13 / lam)
        details.update({"operator": op.matrix, "spectrum": spectrum, "mass": op.mass,
                        "alpha_runs": alphas})
        if model.is_even:
            details["blocks"] = _block_constants(op.T, model)
        return ThresholdResult(
            kind="weak", value=1.0 / lam, error=err,
            method=f"observation-grid ({op.details['outer']}, inner {op.details['rule']})",
            subspace=G, eigenvalue=lam, converged=True, message=_subspace_message(G, model),
            seconds=time.perf_counter() - t0, details=details)
    if method == "cells":
        res = _weak_recovery_precision(model, method, noise_variance, 10, prior, t0)
        res.digits_confirmed = None
        return res
    if method == "scalar-quadrature":
        return _scalar_weak_recovery(model, noise_variance, prior, t0)
    if method == "monte-carlo":
        op = linearized_operator(model, noise_variance=noise_variance, method=method,
                                 samples=samples, seed=seed, rule=rule)
        Ts, Fs = op.details["batch_tensors"], op.details["batch_first"]
        B = len(Ts)
        Fmean = Fs.mean(axis=0)
        Ferr = float(np.max(Fs.std(axis=0, ddof=1))) / math.sqrt(B)
        if not model.is_even and np.max(np.linalg.eigvalsh(Fmean)) > 4 * Ferr:
            return _trivial_result(Fmean, 4 * Ferr, P, method, t0, {"samples": op.details["samples"]})
        lam, G, spectrum = top_eigen(Jp @ op.matrix, P)
        _, B_ = sym_basis(P)
        v = np.einsum("iab,ab->i", B_, G)
        per = np.array([v @ (Jp @ operator_matrix(T)) @ v for T in Ts])
        lam_err = float(per.std(ddof=1)) / math.sqrt(B)
        details.update({"operator": op.matrix, "spectrum": spectrum, "samples": op.details["samples"],
                        "batches": B, "lambda_stderr": lam_err})
        return ThresholdResult(
            kind="weak", value=1.0 / lam, error=lam_err / lam ** 2, error_kind="stderr",
            method=f"monte-carlo ({op.details['samples']} samples, {B} batch means)",
            subspace=G, eigenvalue=lam, converged=True, message=_subspace_message(G, model),
            seconds=time.perf_counter() - t0, details=details)
    raise ParameterError(f"unknown method {method!r}")


def _scalar_weak_recovery(model, noise_variance, prior, t0, level=6):
    """Float64 nested tanh-sinh (:func:`_scalar_operator_float`) at ``level`` with the
    error estimate ``|alpha(level) - alpha(level - 1)|`` (the coarser run's error)."""
    if not (noise_variance and model.P * model.M == 1 and len(model.link) == 1):
        raise ParameterError("scalar quadrature needs one index, one output and noise_variance > 0")
    Jp = prior_jacobian(prior, 1)
    runs = {lv: _scalar_operator_float(model, noise_variance, lv) for lv in (level - 1, level)}
    T, first, mass = runs[level]
    details = {"levels": {lv: {"T": float(r[0][0, 0, 0, 0]), "first": float(r[1][0, 0]),
                               "mass": r[2]} for lv, r in runs.items()}}
    floor = 1e-9 * max(1.0, abs(float(T[0, 0, 0, 0])))
    if not model.is_even and first[0, 0] > floor:
        return _trivial_result(first, floor, 1, "scalar-quadrature", t0, details)
    lams = {lv: top_eigen(Jp @ operator_matrix(r[0]), 1)[0] for lv, r in runs.items()}
    lam, G, spectrum = top_eigen(Jp @ operator_matrix(T), 1)
    err = abs(1 / lams[level] - 1 / lams[level - 1]) + abs(1 - mass) / lam
    return ThresholdResult(
        kind="weak", value=1.0 / lam, error=max(err, 1e-15 / lam),
        method=f"scalar-quadrature (float64 nested tanh-sinh, level {level})", subspace=G,
        eigenvalue=lam, converged=True, message=_subspace_message(G, model),
        seconds=time.perf_counter() - t0, details=details)


def _block_constants(T, model):
    """``K_{ll'}`` of the block-Hadamard structure of even models for
    one-row groups: ``F(Gamma)_{ll'} = K_{ll'} Gamma_{ll'}``."""
    P = model.P
    return np.array([[T[a, b, a, b] for b in range(P)] for a in range(P)])


def _subspace_message(G, model):
    lam, vec = np.linalg.eigh(G)
    v = vec[:, -1]
    rows = [a for a in range(model.P) if abs(v[a]) > 1e-6]
    return (f"learnable subspace: leading direction {np.round(v, 6).tolist()} "
            f"(rows {rows}, rank {int(np.sum(lam > 1e-8 * lam[-1]))})")


def _weak_recovery_precision(model, method, noise_variance, digits, prior, t0):
    """``alpha_c`` at ``digits + 10`` digits confirmed at ``2 digits + 10`` (module
    docstring).  A run that cannot give its digits -- a non-finite operator, a
    breakdown of the arithmetic, or fewer than ``digits`` agreeing digits -- returns
    ``converged=False`` with the reason in ``message`` (never a silent ``nan``)."""
    import mpmath

    if digits < 1:
        raise ParameterError(f"precision must be an integer >= 1, got {digits}")
    P, M = model.P, model.M
    guard = 10
    out = {}
    details = {"dps": digits + guard, "check_dps": 2 * digits + guard}
    for tag, dps in (("value", digits + guard), ("check", 2 * digits + guard)):
        # Gauss-Hermite nodes per axis (constant mixing): different in the two runs, so
        # their agreement also confirms the outer rule (exact for polynomial integrands)
        n_gh = 4 + digits // 6 + (4 if tag == "check" else 0)
        # the check's scalar rule: finer than the value's, for P + 20 digits (the digits
        # beyond P + 10 are never reported, so a rule for all 2P + 10 is wasted work)
        rule_digits = digits + guard + (10 if tag == "check" else 0)
        try:
            Td, Fd, info = _mp_operator(model, method, noise_variance, dps, n_gh, rule_digits)
            with mpmath.workdps(dps):
                bad = [k for k, v in (*Td.items(), *Fd.items()) if not mpmath.isfinite(v)]
                if bad:
                    raise ArithmeticError(f"operator entries {bad} are not finite")
                first_max = max(abs(v) for v in Fd.values())
                lam = _mp_lambda_max(Td, P, prior, dps)
        except (ArithmeticError, ValueError) as exc:
            if isinstance(exc, ParameterError):
                raise
            return _unconfirmed(model, method, digits, t0, details,
                                f"the {dps}-digit run failed: {type(exc).__name__}: {exc}")
        details[f"{tag}_rule"] = info
        out[tag] = (lam, first_max, Td, Fd)
    lam, first_max, Td, Fd = out["value"]
    lam2 = out["check"][0]
    T, first = _dict_to_tensor(Td, Fd, P)
    floor = 10.0 ** (-(digits + guard // 2))
    if not model.is_even and first_max > floor * max(1.0, float(np.max(np.abs(T)))):
        res = _trivial_result(first, floor, P, method, t0, details)
        res.digits_confirmed = float(digits)
        return res
    if not (lam > 0 and lam2 > 0):
        return _unconfirmed(model, method, digits, t0, details,
                            f"lambda_max = {mpmath.nstr(lam, 5)} (check run "
                            f"{mpmath.nstr(lam2, 5)}) is not positive: no finite threshold")
    Jp = prior_jacobian(prior, P)
    _, G, spectrum = top_eigen(Jp @ operator_matrix(T), P)
    with mpmath.workdps(2 * digits + guard):
        a1, a2 = 1 / lam, 1 / lam2
        diff = abs(a1 - a2)
        agree = float(-mpmath.log10(diff / abs(a2))) if diff != 0 else float(2 * digits + guard)
        err = float(diff)
    details.update({"alpha_check": a2, "operator": operator_matrix(T), "spectrum": spectrum})
    message = _subspace_message(G, model)
    if agree < digits:
        message = (f"only {agree:.1f} of {digits} digits confirmed: the runs at "
                   f"{digits + guard} and {2 * digits + guard} digits differ by {err:.3g} "
                   f"(the quadrature rule does not resolve this link at that precision); "
                   + message)
    res = ThresholdResult(kind="weak", value=a1, error=err,
                          method=f"{method} (mpmath {digits + guard} digits)", subspace=G,
                          eigenvalue=lam, converged=agree >= digits, message=message,
                          digits_confirmed=min(agree, float(digits + guard)),
                          seconds=time.perf_counter() - t0, details=details)
    if model.is_even:
        res.details["blocks"] = _block_constants(T, model)
    return res


def _unconfirmed(model, method, digits, t0, details, reason):
    """The result of a precision run that produced no digits: ``alpha = nan``,
    ``converged=False``, ``digits_confirmed = 0`` and the reason."""
    return ThresholdResult(kind="weak", value=math.nan, error=math.nan,
                           method=f"{method} (mpmath {digits + 10} digits)",
                           subspace=np.full((model.P, model.P), np.nan), eigenvalue=math.nan,
                           converged=False, message=f"no digits confirmed: {reason}",
                           digits_confirmed=0.0, seconds=time.perf_counter() - t0,
                           details=details)
