"""The observation integrated, not sampled: Rao-Blackwellized state evolution.

The SE's ``Q_hat = alpha E_{xi, eta}[g_out g_out^T]`` (Eqs. (13)-(14) of Troiani et al.,
arXiv:2502.00901) samples ``y`` given ``omega`` through ``eta`` (and the output noise).
Where the output has few dimensions the inner expectation is a deterministic integral over
``y`` instead,

    E[f | omega] = int dy Z_out(y | omega, V) f(y, omega)
                 ~ sum_k w_k Z_out(y_k | omega, V) f(y_k, omega),

with ``Z_out`` the channel's own normalizer (``Moments.log_partition``: the density of ``y``,
or its probability for a discrete output).  Only ``omega = Q^{1/2} xi`` is sampled (RQMC), and
the per-sample values are conditional expectations: by Rao-Blackwell their variance is at
most that of ``g g^T`` (law of total variance), and they are smooth in ``xi``, where the
randomized QMC gain is largest.

Nodes ``y_k`` (:class:`ObservationRule`):

* ``discrete`` (noiseless, finitely many output values, :class:`~symtheory.glm.factors.
  discrete.DiscreteOutputChannel`): the values themselves with weight 1 -- an exact sum;
* ``scalar noise`` (one output, Gaussian noise, one index or a discrete link under noise):
  the trapezoid rule on a uniform grid covering ``g`` over ``|t| <= OUTER_T`` prior
  standard deviations of ``z`` given ``omega`` (the cell values for a discrete link) plus
  ``OUTER_TAIL`` noise standard deviations on each side, spacing at most ``STEP`` noise
  standard deviations.  ``Z_out(y)`` is a Gaussian convolution, analytic in ``y``, so the
  trapezoid rule converges geometrically in the spacing; its error is bounded for free
  by the sub-grid of every other node (twice the spacing).

* ``level set`` (noiseless link of two indices on the level-set channel,
  :class:`~symtheory.glm.factors.level_set.LevelSetChannel`; chosen by 'auto'):
  tanh-sinh in ``y`` on the real line cut at the link's critical values (``y = 0`` of
  ``z1^2 - z2^2``: the density's ``log|y|``), infinite pieces scaled by the spread of
  ``g`` given ``omega``, and on each level set a fixed-level tanh-sinh rule (Numba,
  :func:`~symtheory.glm.integrate.level_set.fixed_level_set_moments`), so the map is
  smooth in ``Q``; its error is bounded by the change to one level lower in both.

Anything else (several continuous outputs, a reduced noiseless link, a randomized channel
rule) raises :class:`NotApplicable` with the reason; the SE then samples ``y`` and says so.

Symmetry (:func:`row_symmetries`): signed permutations ``S`` of the index rows with
``g(S Z) = s g(Z)``, ``s = +-1`` (``s = -1`` only where the output law is symmetric:
Gaussian noise, or a discrete value set closed under negation), found from the SymPy
link at random points.  For such an ``S`` the map is equivariant,
``Q_hat(S Q S^T) = S Q_hat(Q) S^T``; averaging every sample over its images ``S xi`` makes
the frozen-sample map equivariant exactly, so a symmetric start stays symmetric (e.g.
``Q11 = Q22`` for ``y = z1^2 - z2^2``).  Pure sign flips of even rows are already held by
the block structure (their images give identical conditional expectations), so only
elements that move rows are averaged over.
"""
from __future__ import annotations

import math

import numpy as np

from ...core.quadrature import gauss_hermite
from ...core.validate import ParameterError
from ..integrate.link_structure import NotApplicable

#: half-width, in prior standard deviations of ``z`` given ``omega``, of the range of ``g``
#: the grid covers (Gaussian mass outside: 2.6e-12)
OUTER_T = 7.0
#: noise standard deviations added beyond that range on each side (tail e^{-8^2/2} = 1e-14)
OUTER_TAIL = 8.0
#: largest grid spacing in noise standard deviations.  The trapezoid rule on a Gaussian
#: convolution of width sd errs by ~exp(-2 pi^2 sd^2 / h^2) (Poisson summation):
#: h = 0.5 sd (1e-34); the posterior ratios in g_out are smooth on the same scale
STEP = 0.5
#: largest number of grid nodes per sample (the grid's cost is this many channel
#: evaluations per sample); above it the SE samples y and says so
MAX_NODES = 512
#: relative tolerance of an adaptive channel rule at the nodes (its default 1e-10 is for
#: one posterior; here the errors enter Q_hat through weights summing to 1) and its first
#: level (2^3 panels of Gauss-Legendre per smooth piece)
NODE_RTOL = 1e-7
NODE_MIN_LEVEL = 3
#: most distinct output values summed exactly
MAX_VALUES = 64
#: largest P for which signed row permutations are enumerated (2^P P! elements)
MAX_SYMMETRY_ROWS = 4
#: tanh-sinh levels of the level-set rule (noiseless link of two indices): nodes in ``y``
#: and on each level set.  Measured on E[g g^T], E[-dg] of y = z1^2 - z2^2 at Q = I/2
#: (64 samples): y-level 2 errs by 3e-3, 3 by 2e-7, 4 agrees with 5 to 1e-9; level-set
#: level 3 by 1e-5, 4 by 2e-8.  Fine (4, 4), coarse (3, 3): the stated change is that of
#: the coarse rule (~1e-5), an upper bound on the fine rule's error, not an estimate
LEVEL_SET_Y_LEVEL = 4
LEVEL_SET_X_LEVEL = 4
#: Gauss-Hermite nodes per index of the scale of y (the spread of g given omega)
SCALE_GH = 6


class ObservationRule:
    """Nodes and weights of ``E[f(y) | omega] = sum_k w_k Z_out(y_k) f(y_k)`` for a model's
    channel (module docstring).  ``kind``: ``'discrete'`` or ``'scalar noise'``."""

    def __init__(self, model, channel, noise_variance):
        from ..integrate.laplace_qmc import LaplaceQMCRule

        self.model = model
        self.noise_variance = noise_variance
        n_out = model.link.rows * model.link.cols
        self.n_out = n_out
        if isinstance(getattr(channel, "rule", None), LaplaceQMCRule):
            raise NotApplicable("the channel's rule is randomized (Laplace-RQMC): its per-sample "
                                "errors would be summed over the nodes")
        discrete = getattr(channel, "discrete", None)
        if noise_variance is None and getattr(channel, "structure", None) is not None:
            self._init_level_set(channel)
            return
        if noise_variance is None:
            if discrete is None:
                raise NotApplicable("a noiseless link without finitely many output values")
            vals = np.unique(np.asarray(discrete.values, dtype=float), axis=0)
            if len(vals) > MAX_VALUES:
                raise NotApplicable(f"{len(vals)} output values (> {MAX_VALUES})")
            self.kind, self.values = "discrete", vals
            return
        if n_out != 1:
            raise NotApplicable(f"{n_out} outputs under noise: a grid over y would need "
                                f"nodes^{n_out} channel evaluations per sample")
        self.sd = math.sqrt(float(noise_variance))
        if discrete is not None:
            self.kind, self.values = "scalar noise", np.unique(np.asarray(discrete.values, float))
        elif model.P * model.M == 1:
            self.kind, self.values = "scalar noise", None
        else:
            raise NotApplicable(f"one noisy output of {model.P * model.M} non-discrete indices: "
                                "the range of y given omega is not located")

    def _init_level_set(self, channel):
        """A noiseless link of two indices integrated on its level sets (``channel.structure``,
        :mod:`symtheory.glm.integrate.level_set`): cuts in ``y`` at the link's critical
        values, cuts in the free index at its critical points."""
        from ..integrate.level_set import critical_values, link_critical_points

        st = channel.structure
        if not hasattr(st, "complex_branches"):
            raise NotApplicable(f"{st.describe()}: the fixed rule integrates one smooth "
                                "two-index level set, not orthant sheets or a nested one")
        if st.complex_branches:
            raise NotApplicable("level-set branches in complex arithmetic (Cardano): the "
                                "fixed rule has no Numba path for them")
        m = self.model
        self.kind, self.values, self.structure = "level set", None, st
        self.y_cuts = critical_values(m.link, m.indices, m.params)
        self.x_cuts = sorted({float(p[st.free]) for p in
                              link_critical_points(m.link, m.indices, m.params)})
        t, w = gauss_hermite(SCALE_GH)
        self._scale_nodes = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
        self._scale_weights = np.outer(w, w).reshape(-1)

    def symmetric(self) -> bool:
        """Whether the nodes in ``y`` are closed under ``y -> -y`` (then row
        permutations that flip the output's sign are averaged over too)."""
        if self.kind != "level set":
            return False
        c = np.round(np.asarray(self.y_cuts, float), 12)
        return set(c.tolist()) == set((-c).tolist())

    def describe(self) -> str:
        if self.kind == "level set":
            return (f"tanh-sinh in y (level {LEVEL_SET_Y_LEVEL}, cut at the critical values "
                    f"{[float(c) for c in self.y_cuts]}) x tanh-sinh on each level set (level "
                    f"{LEVEL_SET_X_LEVEL}, Numba), error from levels {LEVEL_SET_Y_LEVEL - 1}/"
                    f"{LEVEL_SET_X_LEVEL - 1}")
        if self.kind == "discrete":
            return f"exact sum over the {len(self.values)} output values"
        return (f"trapezoid rule in y (spacing <= {STEP:g} noise sd, range of g over "
                f"|t| <= {OUTER_T:g} plus {OUTER_TAIL:g} noise sd)")

    def _range(self, omega, V):
        """Per sample ``(lo, hi)`` of ``g`` over the prior range of ``z`` given ``omega``."""
        if self.values is not None:
            lo, hi = float(self.values.min()), float(self.values.max())
            return np.full(len(omega), lo), np.full(len(omega), hi)
        t = np.linspace(-OUTER_T, OUTER_T, 281)
        z = omega.reshape(-1, 1) + math.sqrt(float(np.asarray(V).reshape(-1)[0])) * t[None]
        gz = self.model.g(z.reshape(-1, 1, 1)).reshape(z.shape)
        return gz.min(axis=1), gz.max(axis=1)

    def nodes(self, omega, V):
        """``(Y (n, K, n_out), log w (n, K), coarse (K,) bool)``: the nodes per sample, log
        weights, and the sub-grid (every other node) whose sum with doubled weights is the
        coarse rule of the error estimate (``None`` for an exact sum)."""
        n = len(omega)
        if self.kind == "discrete":
            Y = np.broadcast_to(self.values[None], (n,) + self.values.shape)
            return np.ascontiguousarray(Y), np.zeros((n, len(self.values))), None
        lo, hi = self._range(omega, V)
        lo, hi = lo - OUTER_TAIL * self.sd, hi + OUTER_TAIL * self.sd
        width = hi - lo
        K = int(math.ceil(float(width.max()) / (STEP * self.sd))) + 1
        K += (K + 1) % 2            # odd: the coarse sub-grid keeps both ends
        if K > MAX_NODES:
            raise NotApplicable(f"the observation grid needs {K} nodes per sample (> {MAX_NODES}): "
                                "g's range given omega spans too many noise widths")
        h = width / (K - 1)
        Y = lo[:, None] + h[:, None] * np.arange(K)[None]
        # trapezoid: the ends carry e^{-32}-small integrands, full weights are as exact
        logw = np.broadcast_to(np.log(h)[:, None], (n, K)).copy()
        coarse = np.zeros(K, dtype=bool)
        coarse[::2] = True
        return Y[:, :, None], logw, coarse


    def _y_scale(self, om, Sigma):
        """Per sample the standard deviation of ``g(z)`` under ``N(omega, Sigma)``
        (Gauss-Hermite ``SCALE_GH^2``, symmetric square root): the scale of the infinite
        pieces in ``y``.  Invariant under signed permutations of the indices (the node
        set is), so the nodes of an image sample are the mirrored nodes."""
        from ...core.linalg import psd_sqrt

        n = len(om)
        z = om[:, None, :] + self._scale_nodes[None] @ psd_sqrt(Sigma).T
        P, M = self.model.P, self.model.M
        gz = self.model.g(z.reshape(-1, P, M)).reshape(n, -1)
        mean = gz @ self._scale_weights
        var = ((gz - mean[:, None]) ** 2) @ self._scale_weights
        return np.sqrt(np.maximum(var, 1e-24))

    def level_set_products(self, omega, V, coarse=True):
        """``(fine, coarse)`` per sample: ``fine (4, n)``-shaped sums ``sum_k W_k (g g^T,
        -dg, log Z_out, 1)`` (the first two ``(n, P, P)``), ``W_k = w_k Z_out(y_k)``, on the
        nodes in ``y`` at :data:`LEVEL_SET_Y_LEVEL` and the level sets at
        :data:`LEVEL_SET_X_LEVEL`; ``coarse`` the first two on every other node in ``y``
        (doubled weights) with the level sets one level lower -- the refinement whose
        change bounds the error (tanh-sinh: the error of a level is about the square of
        the previous one's); ``coarse=False``: ``None`` for it (a third less work, while a
        solve iterates)."""
        from ..integrate.level_set import fixed_level_set_moments, output_rule
        from ..integrate.moments import Moments

        n, P, M = omega.shape
        om = omega.reshape(n, P * M)
        Sigma = np.kron(V, np.eye(M))
        Y, w, sub = output_rule(self.y_cuts, self._y_scale(om, Sigma), LEVEL_SET_Y_LEVEL)

        def sums(Y, w, level, full):
            K = Y.shape[1]
            logZ, shift, cshift = fixed_level_set_moments(
                self.structure, Y.reshape(-1), np.repeat(om, K, axis=0), Sigma, level,
                self.x_cuts)
            ok = np.isfinite(logZ) & (w.reshape(-1) > 0)
            shift = np.where(ok[:, None], shift, 0.0)
            cshift = np.where(ok[:, None, None], cshift, 0.0)
            g, dg = Moments(logZ, shift.reshape(-1, P, M), cshift,
                            np.repeat(omega, K, axis=0), V).output_functions()
            with np.errstate(under="ignore", divide="ignore"):
                W = np.where(ok, w.reshape(-1) * np.exp(np.where(ok, logZ, 0.0)), 0.0)
            W = W.reshape(n, K)
            sq = np.einsum("sam,sbm->sab", g, g).reshape(n, K, P, P)
            tw = -np.einsum("sambm->sab", dg).reshape(n, K, P, P)
            tw = 0.5 * (tw + np.swapaxes(tw, 2, 3))
            out = [np.einsum("sk,skab->sab", W, sq), np.einsum("sk,skab->sab", W, tw)]
            if full:
                out += [np.einsum("sk,sk->s", W, np.where(W > 0, logZ.reshape(n, K), 0.0)),
                        W.sum(axis=1)]
            return out

        fine = sums(Y, w, LEVEL_SET_X_LEVEL, True)
        if not coarse:
            return fine, None
        coarse = sums(Y[:, sub], 2.0 * w[:, sub], LEVEL_SET_X_LEVEL - 1, False)
        # (the coarse y-nodes at the fine level-set level cost as much again; the lower
        # level-set level errs more than the lower y-level, so their change bounds both)
        return fine, coarse


def row_symmetries(model, noise_variance, values=None, symmetric_rule=False):
    """Signed row permutations ``S`` (``P x P``, rows moved) with ``g(S Z) = s g(Z)``
    (``s = +-1``, the same for every output; ``s = -1`` only where the output law is
    symmetric: Gaussian noise, or ``values``, the discrete output values, closed under
    negation), from the link's symmetry group
    (:attr:`~symtheory.glm.factors.multi_index.MultiIndexModel.symmetry_group`, derived
    from the SymPy link).  Returns a list of ``(S, s)``, the identity first, one element
    per row permutation; pure sign flips are left out (module docstring)."""
    P = model.P
    out = [(np.eye(P), 1)]
    if P < 2 or P > MAX_SYMMETRY_ROWS:
        return out
    odd_ok = noise_variance is not None or symmetric_rule
    if not odd_ok and values is not None:
        v = {tuple(np.round(x, 12)) for x in np.asarray(values, float).reshape(len(values), -1)}
        odd_ok = v == {tuple(np.round(-np.array(x), 12)) for x in v}
    group = model.symmetry_group or list(model.symmetries)
    seen = {tuple(range(P))}
    for el in sorted(group, key=lambda e: (e.perm, tuple(-x for x in e.signs))):
        if el.perm in seen or (el.output_sign < 0 and not odd_ok):
            continue
        seen.add(el.perm)
        out.append((el.matrix(), el.output_sign))
    return out


def check_observation(observation):
    """``observation``: ``'auto'``, ``'integrate'`` or ``'sample'``."""
    if observation not in ("auto", "integrate", "sample"):
        raise ParameterError(f"observation must be 'auto', 'integrate' or 'sample', got "
                             f"{observation!r}")
    return observation
