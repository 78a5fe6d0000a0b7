"""The output density of a noiseless link on tanh-sinh nodes in ``y``.

``E_y f(y) = int dy Z_out(y | omega, Sigma) f(y)`` for the tower identity of the
declaration check (:mod:`symtheory.glm.checks.level_set`) and the threshold's operator
(:func:`symtheory.glm.thresholds.expectations._level_set_operator`): ``y`` is cut at the
link's critical values (where ``Z_out`` has its log singularities), infinite pieces are
mapped with a scale, levels are doubled until the weighted moments settle, and the
posterior moments at each node come from the level-set rule
(:func:`~.level_set.level_set_moments`, which takes a nested structure as well) --
computed to the target only at the nodes whose weight can matter.
"""
from __future__ import annotations

import numpy as np

from .level_set import _piece_nodes, _pieces, level_set_moments


def output_pieces(cuts, scale, level):
    """Tanh-sinh nodes and weights in ``y`` on the real line cut at ``cuts`` (the
    critical values), infinite pieces mapped with ``scale``: ``(y (N,), w (N,))``."""
    cuts = np.asarray(cuts, dtype=float).reshape(1, -1)
    if cuts.size == 0:
        cuts = np.zeros((1, 1))
    bounds, _ = _pieces(cuts, np.full(cuts.shape, -1))
    x, w, _, _ = _piece_nodes(bounds[:, :-1], bounds[:, 1:], np.array([scale]), level)
    keep = w.reshape(-1) > 0
    return x.reshape(-1)[keep], w.reshape(-1)[keep]


def _moments_reusing(structure, y, wy, omega, Sigma, rtol, known):
    """:func:`level_set_moments` at the nodes ``y`` with ``omega`` fixed, taking those at
    the nodes already in ``known`` (the previous level's, the same to 1e-13): half of a
    doubled tanh-sinh level is the level before it.  Returns the moments and the new
    ``known``."""
    d = omega.size
    logZ, shift = np.empty(y.size), np.empty((y.size, d))
    cov_shift = np.empty((y.size, d, d))
    new = np.ones(y.size, dtype=bool)
    if known is not None and known[0].size:
        ky = known[0]
        pos = np.clip(np.searchsorted(ky, y), 0, ky.size - 1)
        near = [np.clip(pos - 1, 0, ky.size - 1), pos]
        for cand in near:
            hit = new & (np.abs(ky[cand] - y) <= 1e-13 * np.maximum(np.abs(y), 1e-300))
            logZ[hit], shift[hit], cov_shift[hit] = (k[cand[hit]] for k in known[1:])
            new &= ~hit
    if new.any():
        logZ[new], shift[new], cov_shift[new] = _estimated_then_refined(
            structure, y[new], wy[new], omega, Sigma, rtol)
    order = np.argsort(y)
    return logZ, shift, cov_shift, (y[order], logZ[order], shift[order], cov_shift[order])


#: the first pass of :func:`_estimated_then_refined`: two tanh-sinh levels, to 1e-3
ESTIMATE_RTOL, ESTIMATE_MAX_LEVEL = 1e-3, 5
#: a node is negligible when its estimated weight times e^NEGLIGIBLE_MARGIN is below
#: rtol * 1e-2 of the total (the estimate's log Z errs by < 1 where the weight matters;
#: 20 e-folds cover its errors at astronomically small densities)
NEGLIGIBLE_MARGIN = 20.0


def _estimated_then_refined(structure, y, wy, omega, Sigma, rtol):
    """Moments at the output nodes ``y`` (weights ``wy``) where they matter: every node by
    a cheap two-level pass, then the nodes whose weight ``wy Z_out(y)`` can reach
    ``rtol 1e-2`` of the total to ``rtol``.  The far tails of ``y`` (a density below
    e^-1000) and the nodes packed against a cut (weights ~1e-38) are where the adaptive
    rule is slowest and their moments do not change the sums."""
    om = np.repeat(omega[None], y.size, axis=0)
    logZ, shift, cov_shift, _ = level_set_moments(structure, y, om, Sigma,
                                                  rtol=max(rtol, ESTIMATE_RTOL),
                                                  max_level=ESTIMATE_MAX_LEVEL)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        logw = np.where(wy > 0, np.log(wy), -np.inf) + logZ
    finite = np.isfinite(logw)
    top = np.logaddexp.reduce(logw[finite]) if finite.any() else 0.0
    matters = finite & (logw + NEGLIGIBLE_MARGIN >= top + np.log(rtol * 1e-2))
    if rtol < ESTIMATE_RTOL and matters.any():
        part = level_set_moments(structure, y[matters], om[matters], Sigma, rtol=rtol)
        logZ[matters], shift[matters], cov_shift[matters] = part[:3]
    return logZ, shift, cov_shift


def output_nodes(structure, omega, Sigma, cuts, scale, *, rtol=1e-12, levels=(4, 10)):
    """The output density on tanh-sinh nodes in ``y``: ``E_y f(y) = sum_k w_k f(y_k)``.

    ``y`` ranges over the real line cut at the link's critical values ``cuts`` (where the
    density has its ``log`` singularities; tanh-sinh's clustering at the cuts integrates
    them), infinite pieces mapped with ``scale``.  Levels are doubled until the weighted
    moments ``sum w (1, E[z|y], E[z z^T|y])`` change by less than ``rtol`` (relative).
    Returns ``(w (N,), mean (N, d), cov (N, d, d), error)`` at ``omega (d,)``,
    ``Sigma (d, d)``; ``w`` includes ``Z_out(y_k)`` (0 where ``y_k`` is not a value)."""
    omega = np.asarray(omega, dtype=float).reshape(-1)
    prev = None
    known = None     # (y sorted, logZ, shift, cov shift): a level's nodes reappear in the next
    for level in range(levels[0], levels[1] + 1):
        y, wy = output_pieces(cuts, scale, level)
        logZ, shift, cov_shift, known = _moments_reusing(structure, y, wy, omega, Sigma,
                                                         min(rtol, 1e-10), known)
        ok = np.isfinite(logZ) & np.all(np.isfinite(cov_shift.reshape(y.size, -1)), axis=1)
        w = np.where(ok, wy * np.exp(np.where(ok, logZ, -np.inf)), 0.0)
        mean = np.where(ok[:, None], omega[None] + shift, 0.0)
        cov = np.where(ok[:, None, None], cov_shift + Sigma[None], 0.0)
        second = cov + mean[:, :, None] * mean[:, None, :]
        stat = np.concatenate([[w.sum()], w @ mean, np.einsum("k,kij->ij", w, second).ravel()])
        if prev is not None:
            error = float(np.max(np.abs(stat - prev)) / max(np.max(np.abs(stat)), 1e-300))
            if error <= rtol:
                break
        prev = stat
    return w, mean, cov, error
