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

    def describe(self) -> str:
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


def row_symmetries(model, noise_variance, values=None):
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
    odd_ok = noise_variance is not None
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
