"""The softmax, once: symbolic for declared links, numeric for data and Monte Carlo, both
overflow-free (no NumPy or SymPy at import: callers of either kind import this module)."""
from __future__ import annotations


def softmax_rows(K, inv_temp=1):
    """Return the row softmax of a SymPy matrix, written so that it never overflows.

    ``exp(b K_ij) / sum_k exp(b K_ik)`` (``b = inv_temp``) written as
    ``1 / sum_k exp(b (K_ik - K_ij))``: its generated kernels never overflow to NaN (a huge
    exponent only sends an entry to its limit 0).  The package's one symbolic softmax
    (the activation of deep attention, Eq. 6 of arXiv:2502.00901).

    Parameters
    ----------
    K : sympy.Matrix
        The logits, ``rows x cols``.
    inv_temp : sympy.Expr or float, optional
        Inverse temperature ``b``.

    Returns
    -------
    sympy.Matrix
        Same shape as ``K``; each row sums to one.

    Examples
    --------
    >>> import sympy as sp
    >>> from symtheory.smi import softmax_rows
    >>> x = sp.Symbol("x", real=True)
    >>> softmax_rows(sp.Matrix([[0, x]]))
    Matrix([[1/(exp(x) + 1), 1/(1 + exp(-x))]])
    """
    import sympy as sp

    rows, cols = K.shape
    return sp.Matrix(rows, cols, lambda i, j: 1 / sum(
        (sp.exp(inv_temp * (K[i, k] - K[i, j])) if k != j else sp.Integer(1))
        for k in range(cols)))


def softmax(x, axis=-1, inv_temp=1.0, xp=None):
    """Numeric softmax of ``inv_temp * x`` along ``axis``, shifted by its maximum first
    (shift invariance: no overflow).  ``xp``: the array module (numpy by default; JAX's
    for autodiff).  The package's one numeric softmax."""
    if xp is None:
        import numpy as xp
    z = inv_temp * x
    e = xp.exp(z - xp.max(z, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)
