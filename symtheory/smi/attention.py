"""Deep attention as a sequence multi-index model (smi.md Sec. 2, Eqs. 2-7).

:func:`deep_attention` *builds* the link ``g`` by the symbolic recursion of smi.md 2.1
(token-major):

    T_1 = I_M,   E_l = T_l h_l^T,   T_{l+1} = (c I_M + act(beta E_l E_l^T)) T_l,
    y = act(beta E_L E_L^T),

``act`` = row softmax (rows sum to one) or the identity ("linear").  Untied keys and
queries (smi.md 2.3, A.1) replace ``E_l E_l^T`` by ``(T_l hQ_l^T)(T_l hK_l^T)^T``;
sequence-to-sequence (A.2) outputs the final mixing ``T_{L+1}``.  The declaration only
states the model; every numerical object (channel, SE, GAMP) comes from the core.
For tied attention with rank one and ``M = 2`` (the paper's case; linear activation:
any ``M``) the builder also states the deterministic reduction of smi.md 9 / 10.1:
``y = head(E)``, ``E = T_L(h_1..h_{L-1}) h_L^T``, with the inversion features
``log(y_ij / y_ii) = beta (E_i E_j - E_i E_i)`` (log-ratios of a softmax row are logit
differences); the core checks both at random points and solves the system with SymPy.
"""
from __future__ import annotations

import sympy as sp

from ..glm.factors.deep import LaplaceQMCModel
from ..glm.factors.multi_index import DeterministicReduction, MultiIndexModel
from ..core.softmax import softmax_rows
from ..core.validate import ParameterError, integer, real

SKIP = sp.Symbol("c_skip", positive=True)
BETA = sp.Symbol("beta_T", positive=True)


def _activation(name):
    if name == "softmax":
        return softmax_rows
    if name == "linear":
        return lambda K: K
    raise ParameterError(f"activation must be 'softmax' or 'linear', got {name!r}")


def deep_attention(depth: int = 2, seq_len: int = 2, rank: int = 1, skip: float = 1.0,
                   beta: float = 1.0, activation: str = "softmax", variant: str = "tied") -> MultiIndexModel:
    """Declare the SMI link of deep attention (smi.md Eq. 6) and, where available, its reduction.

    Builds ``y = g(Z)`` by the symbolic recursion of the module docstring (smi.md 2.1); for
    tied attention with rank one and ``M = 2`` (linear activation: any ``M``) it also
    declares the deterministic reduction of smi.md 9 / 10.1.

    Parameters
    ----------
    depth : int, optional
        Number of attention layers ``L`` (>= 1).
    seq_len : int, optional
        Number of tokens ``M`` (>= 1).
    rank : int, optional
        Rank ``r`` of each layer's weights (>= 1).
    skip : float, optional
        Skip-connection strength ``c`` (> 0).
    beta : float, optional
        Softmax inverse temperature (> 0).
    activation : {"softmax", "linear"}, optional
        Row softmax or the identity.
    variant : {"tied", "untied", "seq2seq"}, optional
        ``tied`` (``P = L r``), ``untied`` (``P = 2 L r``, rows ``K_1, Q_1, ..., K_L,
        Q_L``; smi.md 2.3, A.1) or ``seq2seq`` (tied, output the final mixing
        ``T_{L+1}``; A.2).

    Returns
    -------
    MultiIndexModel
        The declared model (a Laplace-RQMC model for a reduced link of depth >= 3).

    Examples
    --------
    >>> from symtheory import smi
    >>> model = smi.deep_attention(depth=2, seq_len=2)
    >>> model.P, model.M, model.link.shape, model.reduction is not None
    (2, 2, (2, 2), True)
    """
    L = integer("depth", depth, low=1)
    M = integer("seq_len", seq_len, low=1)
    r = integer("rank", rank, low=1)
    c = real("skip", skip, low=0.0, low_open=True)
    b = real("beta", beta, low=0.0, low_open=True)
    if variant not in ("tied", "untied", "seq2seq"):
        raise ParameterError(f"variant must be 'tied', 'untied' or 'seq2seq', got {variant!r}")
    act = _activation(activation)
    per_layer = 2 * r if variant == "untied" else r
    P = L * per_layer
    Z = sp.Matrix(P, M, lambda a, m: sp.Symbol(f"z{a}_{m}", real=True))
    groups = [tuple(range(l * per_layer, (l + 1) * per_layer)) for l in range(L)]

    T = sp.eye(M)
    E_last = None
    n_mix = L - 1 if variant != "seq2seq" else L
    for l in range(L):
        rows = groups[l]
        if variant == "untied":
            hK = Z[rows[0]:rows[0] + r, :]
            hQ = Z[rows[0] + r:rows[0] + 2 * r, :]
            K = BETA * (T * hQ.T) * (T * hK.T).T
        else:
            h = Z[rows[0]:rows[0] + r, :]
            E_last = T * h.T
            K = BETA * E_last * E_last.T
        if l < n_mix:
            T = (SKIP * sp.eye(M) + act(K)) * T
        else:
            y = act(K)
    if variant == "seq2seq":
        y = T
    name = f"attn_{activation}_{variant}_L{L}_M{M}_r{r}"
    desc = (f"{variant} {activation} attention, depth {L}, seq_len {M}, rank {r}, "
            f"skip c={c:g}, beta={b:g}")
    reduction = None
    if variant == "tied" and r == 1 and (activation == "linear" or M == 2):
        Esym = sp.Matrix(M, 1, lambda m, _: sp.Symbol(f"e{m}", real=True))
        head = act(BETA * Esym * Esym.T)
        T_L = sp.eye(M)
        for l in range(L - 1):
            h = Z[groups[l][0]:groups[l][0] + 1, :]
            El = T_L * h.T
            T_L = (SKIP * sp.eye(M) + act(BETA * El * El.T)) * T_L
        Y = sp.Matrix(M, M, lambda i, j: sp.Symbol(f"y_{i}_{j}", real=True))
        if activation == "softmax":
            pairs = [(0, 1), (1, 0)]
            features = tuple((sp.log(Y[i, j]) - sp.log(Y[i, i]),
                              BETA * (Esym[i] * Esym[j] - Esym[i] * Esym[i])) for i, j in pairs)
            observed = tuple(pairs)
        else:
            features = None
            observed = tuple((m, m) for m in range(M))
        reduction = DeterministicReduction(solved_rows=groups[-1], mixing=T_L, E=Esym,
                                           head=head, observed=observed, features=features)
    # depth >= 3: the reduced integral has (L - 1) r M axes; integrate it by the
    # Laplace-centred RQMC rule (glm.factors.deep) instead of a tensor rule
    cls = LaplaceQMCModel if (reduction is not None and L >= 3) else MultiIndexModel
    return cls(name, Z, y, params={SKIP: c, BETA: b}, row_groups=groups,
               reduction=reduction, description=desc)
