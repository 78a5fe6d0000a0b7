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


#: largest symmetry group imposed on the quadrature (its cost is one einsum per element)
MAX_GROUP_ORDER = 384
#: operator norms below this are zero whatever the error bar (entries of J are O(1))
ZERO_FLOOR = 1e-12
#: a norm within its error bar is declared zero only if that error bar is below this
#: (or a symmetry derives the zero); above it the operator is unresolved, not zero
ZERO_RESOLVED = 1e-8


def _is_zero(norm, norm_err, model, group):
    """``True``: the operator is zero (below :data:`ZERO_FLOOR`, or within a resolved error
    bar, or within its error bar and derived zero by symmetry); ``None``: unresolved (within
    an error bar too large to tell); ``False``: non-zero."""
    if norm <= ZERO_FLOOR:
        return True
    if norm > norm_err:
        return False
    return True if norm_err <= ZERO_RESOLVED or _operator_zero_by(model, group) else None


def _symmetry_elements(model, prior):
    """The link's symmetry group restricted to elements that also preserve the prior's
    ``rho`` (the Gaussian law of ``Z`` at the trivial point); ``None`` when trivial or
    larger than :data:`MAX_GROUP_ORDER`."""
    group = model.symmetry_group
    if not group or len(group) < 2 or len(group) > MAX_GROUP_ORDER:
        return None
    rho = prior.rho(model.P)
    els = [e for e in group if np.allclose(e.matrix() @ rho @ e.matrix().T, rho, atol=1e-12)]
    return els if len(els) > 1 else None


def _names(model):
    return [str(model.indices[a, 0]) if model.M == 1 else f"row {a}" for a in range(model.P)]


def _first_moment_zero_by(model, group):
    """Why ``E[Z|y] = 0`` identically (a symmetry fixing no direction), or ``None``."""
    from ..integrate.link_structure import fixed_directions

    if not group or fixed_directions(group, model.P).shape[1]:
        return None
    single = [e for e in group if e.output_sign > 0 and not fixed_directions([e], model.P).shape[1]]
    if single:
        e = min(single, key=lambda e: sum(1 for a in range(model.P) if e.perm[a] != a))
        return f"the symmetry {e.describe(_names(model))} gives E[Z|y] = -E[Z|y]"
    return ("the symmetries with g -> g fix no direction, so E[Z|y] = 0: "
            + "; ".join(e.describe(_names(model)) for e in model.symmetries))


def _operator_zero_by(model, group):
    """A derivation of ``J(y) = E[Z Z^T|y] - I = 0`` (one token): off-diagonal entries
    cancel under a flip with ``g -> g`` moving exactly one of the two rows; a diagonal
    entry is 0 when ``g`` is invariant under ``z_a -> t z_a`` for every ``t > 0`` (then ``y``
    depends on ``z_a`` only through its sign, and ``|z_a|``, independent of it, keeps
    ``E[z_a^2|y] = 1``).  ``None`` when this does not establish it."""
    import sympy as sp

    if model.M != 1 or not group:
        return None
    P = model.P
    names = _names(model)
    flips = [e for e in group if e.output_sign > 0 and e.perm == tuple(range(P))]
    used = []
    for a in range(P):
        for b in range(a + 1, P):
            hit = next((e for e in flips if e.signs[a] != e.signs[b]), None)
            if hit is None:
                return None
            if hit not in used:
                used.append(hit)
    t = sp.Symbol("t_scale", positive=True)
    g = model.link.xreplace(model.params)
    for a in range(P):
        z = model.indices[a, 0]
        if sp.simplify(g.xreplace({z: t * z}) - g) != sp.zeros(*g.shape):
            return None
    return ("J(y) = E[z z^T|y] - I = 0 identically: off-diagonal entries by the flips "
            + "; ".join(e.describe(names) for e in used)
            + (", diagonal ones because g depends on each index only through its sign "
               "(invariant under z_a -> t z_a, t > 0)"))


def _infinite_result(norm, norm_err, method, t0, details, model, group, P):
    """``alpha_c = inf``: the linearized operator (Eq. 15 of arXiv:2502.00901) vanishes,
    so no direction is weakly learnable at first or second order."""
    why = _operator_zero_by(model, group)
    msg = (f"alpha_c = inf: the linearized operator vanishes (norm {norm:.3g} within its "
           f"error bar {norm_err:.2g}), so nothing is weakly learnable at first or second "
           "order (Eqs. 15-16 of arXiv:2502.00901)")
    msg += f"; derived: {why}" if why else "; no symmetry derivation found (numerical zero)"
    details = dict(details, zero_by_symmetry=why)
    return ThresholdResult(
        kind="weak", value=math.inf, error=0.0, method=method, subspace=np.zeros((P, P)),
        eigenvalue=norm, converged=True, message=msg, seconds=time.perf_counter() - t0,
        details=details)


def _unresolved(zero, norm, spec_err):
    if zero is not None:
        return ""
    return (f"UNRESOLVED: the operator's norm {norm:.3g} is within its error bar "
            f"{float(np.max(spec_err)):.2g}, so it may vanish (alpha_c = inf) -- refine the "
            "resolution (target_error / more samples); ")


def _top_group(spectrum, errors):
    """Multiplicity of the top eigenvalue: eigenvalues whose distance to ``lambda_max`` is
    within the sum of their error bars (ties forced by a symmetry land here exactly)."""
    top = int(np.argmax(spectrum))
    tol = np.asarray(errors) + errors[top]
    return int(np.sum(spectrum[top] - spectrum <= tol)), float(np.max(tol))


#: largest observation grid per axis :func:`weak_recovery` doubles to for ``target_error``
MAX_OUTER_NODES = 400


def _weak_recovery_to_target(model, noise_variance, method, precision, prior, outer_nodes,
                             width, rule, target_error, t0):
    """:func:`weak_recovery` with the observation grid doubled until ``target_error``."""
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


def weak_recovery(model, *, noise_variance=None, method="auto", precision=None, prior=None,
                  outer_nodes=48, width=8.0, rule=None, samples=200000, seed=0,
                  target_error=None):
    """Return the weak-recovery threshold ``alpha_c = 1/lambda_max(F_prior' o F)`` (Eqs. (15)-(16) of arXiv:2502.00901).

    The learnable subspace is the top eigenvector of the linearized operator at the
    trivial fixed point; ``alpha_c = 0`` when ``E[Z|y] != 0`` on a set of positive measure
    (module docstring).

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
    ``alpha`` at ``P + 10`` digits confirmed by a run at ``2 P + 10`` digits.

    Parameters
    ----------
    model : MultiIndexModel
        The declared model.
    noise_variance : float, optional
        Gaussian output-noise variance; ``None``: noiseless.
    method : str, optional
        ``"auto"`` (chosen from the model), ``"observation-grid"``, ``"cells"``,
        ``"scalar-quadrature"``, ``"output-quadrature"`` or ``"monte-carlo"``: the
        expectation of the operator.
    precision : int, optional
        Digits of an mpmath run (mpmath methods), confirmed at ``2 P + 10`` digits.
    prior : Prior, optional
        Weight prior (default ``GaussianPrior``).
    outer_nodes : int, optional
        Observation grid: nodes per axis.
    width : float, optional
        Observation grid: box in units of the largest singular value of the mixing.
    rule : TensorRule or AdaptiveRule, optional
        Observation grid: quadrature over the free rows (default Gauss-Hermite 40).
        Noisy channels (output quadrature, Monte Carlo): the channel's rule (default its
        own adaptive rule, the one its declaration check accepts).
    samples : int, optional
        Monte-Carlo draws.
    seed : int, optional
        Monte-Carlo seed.
    target_error : float, optional
        Observation grid: refine until the error estimate is below it (above).

    Returns
    -------
    ThresholdResult
        ``value`` (``alpha_c``, in ``alpha = n/D``), ``error``, ``subspace`` (the learnable directions),
        ``eigenvalue`` (``lambda_max``), ``converged`` and the report.

    Examples
    --------
    >>> from symtheory import smi
    >>> from symtheory.glm import weak_recovery
    >>> res = weak_recovery(smi.outer_product(seq_len=2))       # y = z z^T: 1/(M (M + 1))
    >>> round(res.value, 10), bool(res.error < 1e-10)
    (0.1666666667, True)
    """
    t0 = time.perf_counter()
    prior = prior or GaussianPrior()
    if noise_variance is not None and not (np.isfinite(noise_variance) and noise_variance >= 0):
        raise ParameterError(f"noise_variance must be finite and >= 0, got {noise_variance}")
    method = choose_method(model, noise_variance) if method == "auto" else method
    if target_error is not None:
        return _weak_recovery_to_target(model, noise_variance, method, precision, prior,
                                        outer_nodes, width, rule, target_error, t0)
    P = model.P
    Jp = prior_jacobian(prior, P)
    channel_rule = rule        # noisy channels: None is the channel's own adaptive rule
    rule = rule or TensorRule("gauss-hermite", 40)
    if precision is not None:
        return _weak_recovery_precision(model, method, noise_variance, int(precision), prior, t0)
    details = {"method": method}
    group = _symmetry_elements(model, prior)
    first_zero = _first_moment_zero_by(model, group)
    if first_zero:
        details["first_moment_zero_by"] = first_zero
    odd = not (model.is_even or first_zero)
    if method == "observation-grid":
        return _weak_recovery_grid(model, Jp, rule, outer_nodes, width, group, odd, t0, details)
    if method == "level-set":
        return _weak_recovery_level_set(model, Jp, P, t0, details, group)
    if method == "cells":
        res = _weak_recovery_precision(model, method, noise_variance, 10, prior, t0)
        res.digits_confirmed = None
        return res
    if method == "scalar-quadrature":
        return _scalar_weak_recovery(model, noise_variance, prior, t0)
    if method == "output-quadrature":
        return _output_weak_recovery(model, noise_variance, Jp, channel_rule, group, odd,
                                     t0, details)
    if method == "monte-carlo":
        return _weak_recovery_monte_carlo(model, Jp, noise_variance, channel_rule, samples, seed,
                                          group,
                                          odd, t0, details)
    raise ParameterError(f"unknown method {method!r}")


def _weak_recovery_grid(model, Jp, rule, outer_nodes, width, group, odd, t0, details):
    """The observation-grid method of :func:`weak_recovery`: the operator at the given
    resolution and again with 3/4 of the outer or of the inner nodes; the spread of those
    runs, the mass defect and a rounding floor make the error bar."""
    method, P = "observation-grid", model.P
    runs = {}
    n_in = int(rule.n)
    coarse_out = max(4, int(round(0.75 * outer_nodes)))
    coarse_in = TensorRule(rule.kind, max(4, int(round(0.75 * n_in))), rule.width)
    for key, (no, ru) in {"fine": (outer_nodes, rule), "outer": (coarse_out, rule),
                          "inner": (outer_nodes, coarse_in)}.items():
        if key == "inner" and not model.free_rows:
            continue
        op = linearized_operator(model, method=method, outer_nodes=no, width=width, rule=ru,
                                 symmetry=group)
        runs[key] = op
    op = runs["fine"]
    spectra = {k: np.linalg.eigvalsh(0.5 * (Jp @ v.matrix + (Jp @ v.matrix).T))
               for k, v in runs.items()}
    first = op.first
    mass_defect = abs(1.0 - op.mass)
    first_floor = 1e-9 * max(1.0, float(np.max(np.abs(op.T))))
    details.update({k: v.details for k, v in runs.items()})
    lam_runs = {k: float(v[-1]) for k, v in spectra.items()}
    details["lambda_runs"] = lam_runs
    if odd and np.max(np.linalg.eigvalsh(first)) > first_floor:
        return _trivial_result(first, first_floor, P, method, t0, details)
    spec = spectra["fine"]
    spec_err = sum(np.abs(spectra[k] - spec) for k in spectra) + mass_defect * np.abs(spec) \
        + 1e-13 * np.max(np.abs(spec))
    done, top = _zero_or_top(spec, spec_err, Jp @ op.matrix, model, group, P, method, t0,
                             details)
    if done is not None:
        return done
    zero, norm, mult, lam, G, spectrum = top
    details["multiplicity"] = mult
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
        subspace=G, eigenvalue=lam, converged=zero is not None,
        message=_unresolved(zero, norm, spec_err) + _subspace_message(G, model, mult, group),
        seconds=time.perf_counter() - t0, details=details)


def _weak_recovery_monte_carlo(model, Jp, noise_variance, rule, samples, seed, group, odd,
                               t0, details):
    """The Monte-Carlo method of :func:`weak_recovery`: batch means of the operator give
    the error bars of its spectrum and of ``lambda_max`` along the top eigenvector."""
    method, P = "monte-carlo", model.P
    op = linearized_operator(model, noise_variance=noise_variance, method=method,
                             samples=samples, seed=seed, rule=rule, symmetry=group)
    Ts, Fs = op.details["batch_tensors"], op.details["batch_first"]
    B = len(Ts)
    Fmean = Fs.mean(axis=0)
    Ferr = float(np.max(Fs.std(axis=0, ddof=1))) / math.sqrt(B)
    # absolute floor: per-sample means are accurate to the rule's stated accuracy only,
    # so a mean square below M acc^2 is consistent with E[Z|y] = 0
    floor = max(4 * Ferr, model.M * _mean_accuracy(rule) ** 2)
    if odd and np.max(np.linalg.eigvalsh(Fmean)) > floor:
        return _trivial_result(Fmean, floor, P, method, t0,
                               dict(details, samples=op.details["samples"]))
    # batch spread of every eigenvalue (sorted spectra of the batch operators)
    batch_spec = np.array([np.linalg.eigvalsh(Jp @ operator_matrix(T)) for T in Ts])
    spec = np.linalg.eigvalsh(0.5 * (Jp @ op.matrix + (Jp @ op.matrix).T))
    spec_err = 4 * batch_spec.std(axis=0, ddof=1) / math.sqrt(B)
    norm = float(np.max(np.abs(spec)))
    zero = _is_zero(norm, float(np.max(spec_err)), model, group)
    if zero:
        return _infinite_result(norm, float(np.max(spec_err)), method, t0,
                                dict(details, samples=op.details["samples"]), model, group, P)
    mult, tol = _top_group(spec, spec_err)
    lam, G, spectrum = top_eigen(Jp @ op.matrix, P, tol=tol)
    _, B_ = sym_basis(P)
    v = np.einsum("iab,ab->i", B_, G)
    per = np.array([v @ (Jp @ operator_matrix(T)) @ v for T in Ts])
    lam_err = float(per.std(ddof=1)) / math.sqrt(B)
    details.update({"operator": op.matrix, "spectrum": spectrum, "samples": op.details["samples"],
                    "batches": B, "lambda_stderr": lam_err, "multiplicity": mult})
    return ThresholdResult(
        kind="weak", value=1.0 / lam, error=lam_err / lam ** 2, error_kind="stderr",
        method=f"monte-carlo ({op.details['samples']} samples, {B} batch means)",
        subspace=G, eigenvalue=lam, converged=zero is not None,
        message=_unresolved(zero, norm, spec_err) + _subspace_message(G, model, mult, group),
        seconds=time.perf_counter() - t0, details=details)


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
    lam_err = abs(lams[level] - lams[level - 1]) + abs(1 - mass) * abs(lam)
    if _is_zero(abs(lam), lam_err, model, None):
        return _infinite_result(abs(lam), lam_err, "scalar-quadrature", t0, details, model,
                                _symmetry_elements(model, prior), 1)
    err = abs(1 / lams[level] - 1 / lams[level - 1]) + abs(1 - mass) / lam
    return ThresholdResult(
        kind="weak", value=1.0 / lam, error=max(err, 1e-15 / lam),
        method=f"scalar-quadrature (float64 nested tanh-sinh, level {level})", subspace=G,
        eigenvalue=lam, converged=True, message=_subspace_message(G, model),
        seconds=time.perf_counter() - t0, details=details)


def _output_weak_recovery(model, noise_variance, Jp, rule, group, odd, t0, details):
    """Eq. (16) with the output quadrature of
    :func:`~symtheory.glm.thresholds.expectations._output_quadrature_operator` at two
    tanh-sinh levels.  Error: ``|alpha(L) - alpha(L - 1)|`` (the coarser run's error),
    the mass defect times ``alpha``, and the channel's stated moment errors carried to
    first order to ``lambda`` and then to ``alpha = 1/lambda``."""
    from .expectations import OUTPUT_QUADRATURE_LEVEL, _output_quadrature_operator

    method = "output-quadrature"
    P = model.P
    runs = {lv: _output_quadrature_operator(model, noise_variance, lv, rule, group)
            for lv in (OUTPUT_QUADRATURE_LEVEL - 1, OUTPUT_QUADRATURE_LEVEL)}
    T, first, info = runs[OUTPUT_QUADRATURE_LEVEL]
    details.update({"levels": {lv: r[2] for lv, r in runs.items()}, "mass": info["mass"]})
    first_floor = 1e-9 * max(1.0, float(np.max(np.abs(T))))
    if odd and np.max(np.linalg.eigvalsh(first)) > first_floor:
        return _trivial_result(first, first_floor, P, method, t0, details)
    specs = {lv: np.linalg.eigvalsh(0.5 * (Jp @ operator_matrix(r[0])
                                          + (Jp @ operator_matrix(r[0])).T))
             for lv, r in runs.items()}
    spec = specs[OUTPUT_QUADRATURE_LEVEL]
    mass_defect = abs(1.0 - info["mass"])
    # the channel's error on T (absolute) through Jp (the prior's Jacobian, norm <= 1 for
    # the Gaussian prior: bounded by its spectral norm)
    ch_err = max(r[2]["channel_error"] for r in runs.values()) * float(np.linalg.norm(Jp, 2))
    spec_err = (np.abs(specs[OUTPUT_QUADRATURE_LEVEL - 1] - spec)
                + mass_defect * np.abs(spec) + ch_err + 1e-13 * np.max(np.abs(spec)))
    done, top = _zero_or_top(spec, spec_err, Jp @ operator_matrix(T), model, group, P,
                             method, t0, details)
    if done is not None:
        return done
    zero, norm, mult, lam, G, spectrum = top
    lam_c = float(spec[-1])
    lam_prev = float(specs[OUTPUT_QUADRATURE_LEVEL - 1][-1])
    err = abs(1 / lam_c - 1 / lam_prev) + (mass_defect * lam + ch_err) / lam ** 2 + 1e-13 / lam
    details.update({"operator": operator_matrix(T), "spectrum": spectrum,
                    "multiplicity": mult, "channel_error": ch_err})
    return ThresholdResult(
        kind="weak", value=1.0 / lam, error=err,
        method=(f"output-quadrature (tanh-sinh level {OUTPUT_QUADRATURE_LEVEL} in y, "
                f"{info['y_nodes']} nodes; channel: {info['channel']})"),
        subspace=G, eigenvalue=lam, converged=zero is not None,
        message=_unresolved(zero, norm, spec_err) + _subspace_message(G, model, mult, group),
        seconds=time.perf_counter() - t0, details=details)


def _zero_or_top(spec, spec_err, A, model, group, P, method, t0, details):
    """``(alpha_c = inf result, None)`` when the operator is zero within its error bars,
    else ``(None, (zero, norm, multiplicity, lambda_max, subspace, spectrum))`` with the
    top eigenspace grouped within the error bars."""
    norm = float(np.max(np.abs(spec)))
    zero = _is_zero(norm, float(np.max(spec_err)), model, group)
    if zero:
        return _infinite_result(norm, float(np.max(spec_err)), method, t0, details, model,
                                group, P), None
    mult, tol = _top_group(spec, spec_err)
    lam, G, spectrum = top_eigen(A, P, tol=tol)
    return None, (zero, norm, mult, lam, G, spectrum)


def _weak_recovery_level_set(model, Jp, P, t0, details, group):
    """Eq. (16) with the expectation on the level sets of a noiseless link (method
    ``level-set`` of :func:`~symtheory.glm.thresholds.expectations.linearized_operator`):
    the refinement's last relative change of the tensor, the density's mass defect and a
    rounding floor make the error bar; a zero operator is ``alpha_c = inf``; the top
    eigenspace is reported with its multiplicity."""
    method = "level-set"
    op = linearized_operator(model, method=method)
    A = Jp @ op.matrix
    spec = np.linalg.eigvalsh(0.5 * (A + A.T))
    details.update({"mass": op.mass, "level_set": op.details})
    first_floor = 1e-9 * max(1.0, float(np.max(np.abs(op.T))))
    if not model.is_even and np.max(np.linalg.eigvalsh(op.first)) > first_floor:
        return _trivial_result(op.first, first_floor, P, method, t0, details)
    rel = op.details["error"] + abs(1.0 - op.mass) + 1e-14
    spec_err = rel * np.max(np.abs(spec)) * np.ones_like(spec)
    done, top = _zero_or_top(spec, spec_err, A, model, group, P, method, t0, details)
    if done is not None:
        return done
    zero, norm, mult, lam, G, spectrum = top
    details.update({"operator": op.matrix, "spectrum": spectrum, "multiplicity": mult})
    return ThresholdResult(
        kind="weak", value=1.0 / lam, error=rel / lam,
        method=f"level-set (co-area; {op.details['y_nodes']} output nodes)",
        subspace=G, eigenvalue=lam, converged=zero is not None,
        message=_unresolved(zero, norm, spec_err) + _subspace_message(G, model, mult, group),
        seconds=time.perf_counter() - t0, details=details)


def _block_constants(T, model):
    """``K_{ll'}`` of the block-Hadamard structure of even models for
    one-row groups: ``F(Gamma)_{ll'} = K_{ll'} Gamma_{ll'}``."""
    P = model.P
    return np.array([[T[a, b, a, b] for b in range(P)] for a in range(P)])


def _subspace_message(G, model, multiplicity=1, group=None):
    """The learnable subspace: ``G`` is the projection of ``I`` on the top eigenspace of
    the operator (``multiplicity`` eigenvalues of Sym_P equal within their error bars);
    rows it touches and its rank as a matrix."""
    lam, vec = np.linalg.eigh(G)
    v = vec[:, -1]
    rows = sorted({a for a in range(model.P) for i in range(model.P)
                   if lam[i] > 1e-8 * lam[-1] and abs(vec[a, i]) > 1e-6})
    msg = (f"learnable subspace: leading direction {np.round(v, 6).tolist()} "
           f"(rows {rows}, rank {int(np.sum(lam > 1e-8 * lam[-1]))}); top eigenspace of "
           f"multiplicity {multiplicity} in Sym_{model.P} (dimension {model.P * (model.P + 1) // 2})")
    if group and multiplicity > 1:
        msg += f", symmetry group of order {len(group)} imposed"
    return msg


def _mean_accuracy(rule):
    """Stated accuracy of per-sample posterior means (prior standard deviations): an
    :class:`AdaptiveRule`'s ``rtol`` with the margin its own miss warnings show (x1e3);
    tensor rules state none, so ``1e-7``, far above float64 rounding (1e-15)."""
    from ...core.quadrature import AdaptiveRule

    rule = AdaptiveRule() if rule is None else rule      # None: the channel's default
    return 1e3 * rule.rtol if isinstance(rule, AdaptiveRule) else 1e-7


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
    group = _symmetry_elements(model, prior)
    first_zero = _first_moment_zero_by(model, group)
    if first_zero:
        details["first_moment_zero_by"] = first_zero
    elif not model.is_even and first_max > floor * max(1.0, float(np.max(np.abs(T)))):
        res = _trivial_result(first, floor, P, method, t0, details)
        res.digits_confirmed = float(digits)
        return res
    Jp = prior_jacobian(prior, P)
    spec = np.linalg.eigvalsh(0.5 * (Jp @ operator_matrix(T) + (Jp @ operator_matrix(T)).T))
    lam_err = float(abs(lam - lam2)) + floor
    if float(np.max(np.abs(spec))) <= lam_err and abs(float(lam)) <= lam_err:
        res = _infinite_result(float(np.max(np.abs(spec))), lam_err, f"{method} (mpmath "
                               f"{digits + guard} digits)", t0, details, model, group, P)
        res.digits_confirmed = float(digits)
        return res
    if not (lam > 0 and lam2 > 0):
        return _unconfirmed(model, method, digits, t0, details,
                            f"lambda_max = {mpmath.nstr(lam, 5)} (check run "
                            f"{mpmath.nstr(lam2, 5)}) is not positive: no finite threshold")
    mult, tol = _top_group(spec, np.full(len(spec), lam_err))
    _, G, spectrum = top_eigen(Jp @ operator_matrix(T), P, tol=tol)
    with mpmath.workdps(2 * digits + guard):
        a1, a2 = 1 / lam, 1 / lam2
        diff = abs(a1 - a2)
        agree = float(-mpmath.log10(diff / abs(a2))) if diff != 0 else float(2 * digits + guard)
        err = float(diff)
    details.update({"alpha_check": a2, "operator": operator_matrix(T), "spectrum": spectrum})
    message = _subspace_message(G, model, mult, group)
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
