"""Seeded teacher-student data for attention-indexed models (aim.md 1, 8).

A sample is ``X in R^{T x d}`` (``T = seq_len`` tokens, i.i.d. N(0, 1) entries).  The teacher
is the tied prior of aim.md 1.1, ``S = W W^T / sqrt(r d)`` with ``W`` ``d x r`` i.i.d.
N(0, 1) (``r = round(rho d)``); its attention indices are

    h_ab = (x_a^T S x_b - delta_ab Tr S) / sqrt(d)                      (aim.md 1.1)

and the output is ``y = g(h + noise)`` (aim.md 1.2):

* ``softmax``:  ``y_ab = exp(inv_temp h_ab) / sum_c exp(inv_temp h_ac)`` (row-wise);
* ``hardmax``:  ``y_a. = one-hot(argmax_b h_ab)`` (the ``inv_temp -> inf`` limit);
* ``identity``: ``y = h``; with one token this is the quadratic network (aim.md 8),
  ``y = (x^T S x - Tr S)/sqrt(d) + sqrt(delta) xi``.

Noise (aim.md 1.2): a symmetric Gaussian matrix added to ``h`` before ``g``, variance
``delta`` on the diagonal and ``delta/2`` off it (``delta/(2 - delta_ab)``).

``alpha = n/d^2`` and ``rho = r/d`` (docs/theory/README.md); the integer sizes are
``n = round(alpha d^2)`` and ``r = round(rho d)``, and the data report the realised ratios.
The error of an estimate is ``mse = (1/d) ||S_hat - S||_F^2`` (aim.md 1.1), equal to 1 for
``S_hat = sqrt(rho) I`` in the large-``d`` limit.

The index and link functions take an array module ``xp`` (numpy by default) so that the
GD students of :mod:`symtheory.aim.gd` run the same expressions under JAX.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core import validate
from ..core.memory import check_allocation
from ..core.softmax import softmax
from ..core.validate import ParameterError
from .registry import LINKS, ONE_TOKEN_LINKS


@dataclass(frozen=True)
class AIMData:
    """One teacher and its ``n`` samples (shapes in the field comments)."""

    X: np.ndarray        # (n, T, d) tokens, rows x_a of each sample
    h: np.ndarray        # (n, T, T) the teacher's noiseless attention indices
    y: np.ndarray        # (n, T, T) outputs g(h + noise)
    W: np.ndarray        # (d, r) teacher factor
    S: np.ndarray        # (d, d) teacher matrix W W^T / sqrt(r d)
    link: str
    inv_temp: float
    delta: float
    seed: tuple

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def seq_len(self) -> int:
        return self.X.shape[1]

    @property
    def d(self) -> int:
        return self.X.shape[2]

    @property
    def r(self) -> int:
        return self.W.shape[1]

    @property
    def alpha(self) -> float:
        """Realised sample ratio ``n / d^2``."""
        return self.n / self.d**2

    @property
    def rho(self) -> float:
        """Realised width ratio ``r / d``."""
        return self.r / self.d


def seed_sequence(seed) -> np.random.SeedSequence:
    """A :class:`numpy.random.SeedSequence` from an integer >= 0 or a sequence of them
    (e.g. ``(seed, alpha_index, teacher)``: independent streams per run)."""
    parts = seed if isinstance(seed, (tuple, list)) else (seed,)
    if not parts:
        raise ParameterError("seed must be an integer >= 0 or a non-empty sequence of them, got ()")
    return np.random.SeedSequence([validate.integer("seed", s, low=0) for s in parts])


def sizes(d, alpha, rho) -> tuple[int, int, int]:
    """``(d, n, r)`` with ``n = round(alpha d^2) >= 1`` and ``r = round(rho d) >= 1``."""
    d = validate.integer("d", d, low=1)
    alpha = validate.real("alpha", alpha, low=0.0, low_open=True)
    rho = validate.real("rho", rho, low=0.0, low_open=True)
    n, r = round(alpha * d * d), round(rho * d)
    if n < 1:
        raise ParameterError(f"alpha must give at least one sample (n = round(alpha d^2) >= 1), "
                             f"got alpha={alpha:g} with d={d}")
    if r < 1:
        raise ParameterError(f"rho must give a width r = round(rho d) >= 1, got rho={rho:g} "
                             f"with d={d}")
    return d, n, r


def check_link(link, seq_len, inv_temp) -> tuple[str, int, float]:
    """Validated ``(link, seq_len, inv_temp)``; a softmax or hardmax of one token is the
    constant 1 and is refused (the one-token model is the identity link, aim.md 8)."""
    link = validate.choice("link", link, LINKS)
    seq_len = validate.integer("seq_len", seq_len, low=1)
    inv_temp = validate.real("inv_temp", inv_temp, low=0.0, low_open=True)
    if seq_len == 1 and link not in ONE_TOKEN_LINKS:
        raise ParameterError(f"seq_len must be >= 2 for link={link!r} (a row of one token "
                             f"gives the constant output 1); use link='identity' for T = 1")
    return link, seq_len, inv_temp


def teacher_matrix(W: np.ndarray) -> np.ndarray:
    """``S = W W^T / sqrt(r d)`` for ``W`` of shape ``(..., d, r)`` (aim.md 1.1)."""
    d, r = W.shape[-2:]
    return W @ np.swapaxes(W, -1, -2) / math.sqrt(r * d)


def attention_indices(X, W, xp=np):
    """``h_ab = (x_a^T S x_b - delta_ab Tr S)/sqrt(d)`` with ``S = W W^T/sqrt(r d)``,
    computed through ``P = X W`` (cost ``n T d r``, ``S`` never formed).

    ``X``: ``(n, T, d)``; ``W``: ``(d, r)``.  Returns ``(n, T, T)``.
    """
    d, r = W.shape
    T = X.shape[-2]
    P = X @ W
    gram = P @ xp.swapaxes(P, -1, -2)           # x_a^T W W^T x_b
    trace = xp.sum(W * W)                        # Tr(W W^T)
    return (gram - trace * xp.eye(T, dtype=gram.dtype)) / (math.sqrt(r * d) * math.sqrt(d))


def apply_link(h, link: str, inv_temp: float = 1.0, xp=np):
    """The output function ``g`` of aim.md 1.2 applied to the last two axes of ``h``."""
    if link == "identity":
        return h
    if link == "softmax":
        return softmax(h, axis=-1, inv_temp=inv_temp, xp=xp)
    if link == "hardmax":
        # ties have probability zero for Gaussian indices
        return (h == xp.max(h, axis=-1, keepdims=True)).astype(h.dtype)
    raise ParameterError(f"link must be one of {', '.join(LINKS)}, got {link!r}")


def symmetric_noise(rng: np.random.Generator, shape, delta: float) -> np.ndarray:
    """``sqrt(delta) (xi + xi^T)/2`` with ``xi`` i.i.d. N(0, 1): symmetric, variance
    ``delta`` on the diagonal and ``delta/2`` off it (aim.md 1.2)."""
    xi = rng.standard_normal(shape)
    return math.sqrt(delta) * 0.5 * (xi + np.swapaxes(xi, -1, -2))


def generate(d, alpha, *, rho, seq_len, link: str = "softmax", inv_temp: float = 1.0,
             delta: float = 0.0, seed=0) -> AIMData:
    """Draw a teacher ``W``, ``n = round(alpha d^2)`` token sequences and their outputs.

    The draws come from one generator seeded by ``seed`` (an integer >= 0 or a sequence of
    them), in the order ``W``, ``X``, noise: the same seed gives the same data.
    """
    d, n, r = sizes(d, alpha, rho)
    link, seq_len, inv_temp = check_link(link, seq_len, inv_temp)
    delta = validate.real("delta", delta, low=0.0)
    seq = seed_sequence(seed)
    check_allocation(8 * (n * seq_len * (d + r + 3 * seq_len) + d * (d + r)),
                     what=f"AIM data (n={n}, T={seq_len}, d={d}, r={r})")
    rng = np.random.default_rng(seq)
    W = rng.standard_normal((d, r))
    X = rng.standard_normal((n, seq_len, d))
    h = attention_indices(X, W)
    noisy = h + symmetric_noise(rng, h.shape, delta) if delta > 0 else h
    y = apply_link(noisy, link, inv_temp)
    return AIMData(X=X, h=h, y=y, W=W, S=teacher_matrix(W), link=link, inv_temp=inv_temp,
                   delta=delta, seed=tuple(int(s) for s in seq.entropy))


def mse(S_hat, S) -> float | np.ndarray:
    """``(1/d) ||S_hat - S||_F^2`` (aim.md 1.1); ``S_hat`` may carry leading batch axes."""
    S = np.asarray(S)
    diff = np.asarray(S_hat) - S
    return np.sum(diff * diff, axis=(-2, -1)) / S.shape[-1]


@dataclass
class DeepAIMData:
    """Deep AIM data (aim.md 1.3; :mod:`symtheory.aim.deep`): tokens ``X`` ``(n, T, d)``,
    per-layer teachers ``W`` ``(L, d, r)`` and ``S`` ``(L, d, d)``, indices ``h``
    ``(L, n, T, T)``, outputs ``y`` ``(n, T, T)`` with output noise of variance ``noise``."""

    X: np.ndarray
    W: np.ndarray
    S: np.ndarray
    h: np.ndarray
    y: np.ndarray
    skip: float
    inv_temp: float
    noise: float
    seed: tuple

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[2]

    @property
    def depth(self) -> int:
        return self.W.shape[0]

    @property
    def alpha(self) -> float:
        return self.n / self.d ** 2

    @property
    def rho(self) -> float:
        return self.W.shape[2] / self.d


def deep_outputs(h, skip: float, inv_temp: float):
    """aim.md 1.3 as written: ``M_0 = I``, ``M_l = (c I + softmax(M_{l-1} h^(l)
    M_{l-1}^T)) M_{l-1}``, ``y = softmax(M_{L-1} h^(L) M_{L-1}^T)`` (row softmax at
    ``inv_temp``); ``h`` of shape ``(L, n, T, T)``."""
    L, n, T, _ = h.shape
    mixing = np.broadcast_to(np.eye(T), (n, T, T))
    for l in range(L):
        scores = mixing @ h[l] @ np.swapaxes(mixing, 1, 2)
        soft = apply_link(scores, "softmax", inv_temp)
        if l == L - 1:
            return soft
        mixing = (skip * np.eye(T) + soft) @ mixing


def generate_deep(d, alpha, *, rho, depth: int = 2, seq_len: int = 2, skip: float = 1.0,
                  inv_temp: float = 1.0, noise: float, seed=0) -> DeepAIMData:
    """Deep AIM teacher data: draws ``W_1..W_L``, ``X``, output noise (in that order) from
    one generator seeded by ``seed``; ``noise > 0`` is the output-noise variance."""
    d, n, r = sizes(d, alpha, rho)
    L = validate.integer("depth", depth, low=2)
    _, T, inv_temp = check_link("softmax", seq_len, inv_temp)
    skip = validate.real("skip", skip, low=0.0)
    noise = validate.real("noise", noise, low=0.0, low_open=True)
    seq = seed_sequence(seed)
    check_allocation(8 * (n * T * (d + L * r + 3 * T) + L * d * (d + r)),
                     what=f"deep AIM data (n={n}, T={T}, d={d}, r={r}, L={L})")
    rng = np.random.default_rng(seq)
    W = rng.standard_normal((L, d, r))
    X = rng.standard_normal((n, T, d))
    h = np.stack([attention_indices(X, W[l]) for l in range(L)])
    y = deep_outputs(h, skip, inv_temp) + math.sqrt(noise) * rng.standard_normal((n, T, T))
    return DeepAIMData(X=X, W=W, S=teacher_matrix(W), h=h, y=y, skip=skip, inv_temp=inv_temp,
                       noise=noise, seed=tuple(int(s) for s in seq.entropy))
