"""Priors, symbolically: log-partition -> input functions -> overlap (state-evolution) map.

For a prior ``P_W`` the scalar input channel observes ``b = A w0 + sqrt(A) xi``; the
log-partition is ``log Z(b, A) = log int dP_W(w) exp(b w - A w^2/2)``, the posterior
mean ``f_in = d log Z / d b`` and the overlap map ``F(A) = E[f_in(b, A)^2]`` (Bayes
optimal, Nishimori).  For the standard Gaussian prior everything is polynomial and
SymPy carries out the Gaussian expectations exactly.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from ...core.codegen import Kernel
from ...core.derive import cached_derivation
from .prior import Prior


def gaussian_log_partition(b, A, variance=1):
    """``log int N(w; 0, variance) exp(b w - A w^2/2) dw``, computed by SymPy."""
    w = sp.Symbol("w_", real=True)
    s2 = sp.sympify(variance)
    integrand = sp.exp(-w**2 / (2 * s2) + b * w - A * w**2 / 2) / sp.sqrt(2 * sp.pi * s2)
    Z = sp.integrate(integrand, (w, -sp.oo, sp.oo), conds="none")
    return sp.simplify(sp.log(sp.simplify(Z)))


def gaussian_expectation(expr, *variables):
    """Exact ``E[expr]`` over independent N(0, 1) ``variables`` (polynomial expr)."""
    e = sp.expand(expr)
    for v in variables:
        poly = sp.Poly(e, v)
        out = sp.Integer(0)
        for (k,), c in poly.terms():
            if k % 2 == 0:
                out += c * sp.factorial2(k - 1) if k > 0 else c
        e = sp.expand(out)
    return e


def gaussian_overlap_map(qhat=None, variance=1):
    """Overlap map ``q = F(qhat)`` of a Gaussian prior N(0, variance), derived.

    ``F(qhat) = E[f_in(b, qhat)^2]`` with ``b = qhat w0 + sqrt(qhat) xi``, ``w0`` drawn
    from the prior.  For N(0, 1) this is ``qhat/(1 + qhat)``.
    """
    qhat = qhat if qhat is not None else sp.Symbol("qhat", nonnegative=True)
    b = sp.Symbol("b_", real=True)
    A = sp.Symbol("A_", nonnegative=True)
    f_in = sp.diff(gaussian_log_partition(b, A, variance), b)
    w0, xi = sp.symbols("w0_ xi_", real=True)
    sd = sp.sqrt(sp.sympify(variance))
    field = qhat * sd * w0 + sp.sqrt(qhat) * xi
    F = gaussian_expectation(sp.expand(f_in.subs({b: field, A: qhat})**2), w0, xi)
    return sp.simplify(sp.factor(F))


@cached_derivation
def gaussian_prior_derivations() -> dict:
    """Everything :class:`GaussianPrior` compiles, derived by SymPy from the log-partition
    (cached on disk, keyed by the package sources: :func:`~symtheory.core.derive.
    cached_derivation`; the derivation costs ~6 s of SymPy integration a process).

    ``F`` = the overlap map ``qhat/(1 + qhat)`` and ``dF`` its derivative (factored: the
    plain derivative printed as ``t0 (1 - t1)``, ``t1 = F``, cancels at large ``qhat``,
    1.6e-5 relative at 1.5e11); ``divided`` = ``(F(a) - F(b))/(a - b)``, the
    Daleckii-Krein kernel of the matrix function's derivative, with the ``a - b`` factor
    cancelled (it holds at ``a = b``, where it is ``F'``, and does not cancel where ``F``
    rounds to 1); ``inverse`` = ``F^{-1}(q)``; ``psi`` = ``psi_P(qhat) = E log Z(qhat w0 +
    sqrt(qhat) xi, qhat)`` (Eqs. (10)-(11) of arXiv:2502.00901); ``c_in(A)`` = ``d f_in /
    db``, with ``f_in = c_in(A) b`` checked linear in ``b`` (so the matrix form is
    ``f_in(B, A) = c_in(A) B`` exactly).  Each check raises ``RuntimeError`` naming it."""
    qhat = sp.Symbol("qhat", nonnegative=True)
    F = gaussian_overlap_map(qhat)
    a_, b_ = sp.symbols("a b", nonnegative=True)
    dd = sp.factor(sp.cancel((F.subs(qhat, a_) - F.subs(qhat, b_)) / (a_ - b_)))
    if sp.simplify(dd.subs(b_, a_) - sp.diff(F, qhat).subs(qhat, a_)) != 0 or \
            sp.denom(dd).subs(b_, a_) == 0:
        raise RuntimeError(f"prior overlap map: divided difference not regular at a = b: {dd}")
    q = sp.Symbol("q", positive=True)
    inv = list(sp.solve(sp.Eq(F, q), qhat))
    if len(inv) != 1:
        raise RuntimeError(f"prior overlap map not uniquely invertible: {inv}")
    b, A = sp.symbols("b_ A_", real=True)
    w0, xi = sp.symbols("w0_ xi_", real=True)
    logZ = gaussian_log_partition(b, A)
    field = qhat * w0 + sp.sqrt(qhat) * xi
    psi = sp.simplify(gaussian_expectation(sp.expand(logZ.subs({b: field, A: qhat})), w0, xi))
    f_in = sp.diff(logZ, b)
    c_in = sp.simplify(sp.diff(f_in, b))
    if c_in.has(b) or sp.simplify(f_in - c_in * b) != 0:
        raise RuntimeError(f"Gaussian prior: f_in is not linear in b ({f_in})")
    return {"qhat": qhat, "F": F, "dF": sp.factor(sp.diff(F, qhat)), "a": a_, "b": b_,
            "divided": dd, "q": q, "inverse": inv[0], "psi": psi, "A": A, "c_in": c_in}


class GaussianPrior(Prior):
    """Standard Gaussian prior ``N(0, I_P)`` on each weight column: ``rho = I``.

    Its overlap map ``F(qhat) = qhat/(1 + qhat)``, the map's inverse and derivative, the
    free-entropy term ``psi_P`` and the input functions are derived by SymPy from the
    log-partition (once per process) and compiled; matrices enter as the matrix functions
    of the scalar maps (rotation invariance).  Eqs. (10)-(14) of arXiv:2502.00901.

    Examples
    --------
    >>> import numpy as np
    >>> from symtheory.glm import GaussianPrior
    >>> prior = GaussianPrior()
    >>> prior.overlap_map(np.array([[1.0]]))        # qhat/(1 + qhat)
    array([[0.5]])
    """

    _kernel = None

    def __init__(self):
        if GaussianPrior._kernel is None:
            d = gaussian_prior_derivations()
            qhat, a_, b_, q, A = d["qhat"], d["a"], d["b"], d["q"], d["A"]
            GaussianPrior._kernel = Kernel("prior_gaussian_overlap", (qhat,),
                                           [d["F"], d["dF"]], vector_args=(qhat,),
                                           doc="overlap map F(qhat) of the N(0,1) prior and dF/dqhat")
            GaussianPrior._divided = Kernel("prior_gaussian_divided_difference", (a_, b_),
                                            [d["divided"]], vector_args=(a_, b_),
                                            doc="(F(a) - F(b))/(a - b) of the N(0,1) prior map")
            GaussianPrior._inverse = Kernel("prior_gaussian_overlap_inverse", (q,),
                                            [d["inverse"]], vector_args=(q,),
                                            doc="inverse of the N(0,1) prior overlap map")
            GaussianPrior._psi = Kernel("prior_gaussian_psi", (qhat,), [d["psi"]],
                                        vector_args=(qhat,),
                                        doc="prior free-entropy term psi_P(qhat) of N(0,1)")
            GaussianPrior._c_in = Kernel("prior_gaussian_c_in", (A,), [d["c_in"]],
                                         vector_args=(A,),
                                         doc="posterior variance c_in(A) of the N(0,1) prior")

    def rho(self, P):
        """Return the second moment ``E[w w^T] = I_P``.

        Parameters
        ----------
        P : int
            Number of weight rows.

        Returns
        -------
        numpy.ndarray
            The ``P x P`` identity.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import GaussianPrior
        >>> prior = GaussianPrior()
        >>> prior.rho(2)
        array([[1., 0.],
               [0., 1.]])
        """
        return np.eye(P)

    def input_functions(self, A: np.ndarray, B: np.ndarray):
        """Return GAMP's matrix input functions ``(f_in, C_in)`` of the Gaussian prior.

        For a column observed through ``exp(-w^T A w/2 + B^T w)`` (GAMP, arXiv:2502.00901
        Algorithm 1): the derived scalar ``c_in`` applied to the eigenvalues of ``A`` (rotation
        invariance), ``C_in = c_in(A) = (I + A)^(-1)`` and ``f_in = C_in B``.

        Parameters
        ----------
        A : numpy.ndarray
            Precision, ``P x P`` (symmetrized); ``I + A`` must be positive definite
            (``ValueError`` otherwise).
        B : numpy.ndarray
            Fields, ``P x p``.

        Returns
        -------
        tuple of numpy.ndarray
            ``(f_in (P, p), C_in (P, P))``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import GaussianPrior
        >>> prior = GaussianPrior()
        >>> f, C = prior.input_functions(np.eye(2), np.ones((2, 1)))
        >>> f.ravel(), np.diag(C)
        (array([0.5, 0.5]), array([0.5, 0.5]))
        """
        A = 0.5 * (A + A.T)
        lam, O = np.linalg.eigh(A)
        if lam[0] <= -1.0:
            raise ValueError(f"I + A must be positive definite (eigenvalue of A {lam[0]:.3g})")
        C = (O * self._c_in.vec(lam)[:, 0]) @ O.T
        return C @ B, C

    def overlap_map(self, Qhat: np.ndarray) -> np.ndarray:
        """Return ``F_prior(Q_hat)``, the matrix function of the derived scalar map ``qhat/(1 + qhat)``.

        Parameters
        ----------
        Qhat : numpy.ndarray
            Positive semidefinite ``P x P`` matrix (symmetrized).

        Returns
        -------
        numpy.ndarray
            ``Q = Q_hat (I + Q_hat)^(-1)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import GaussianPrior
        >>> prior = GaussianPrior()
        >>> prior.overlap_map(np.diag([1.0, 3.0]))
        array([[0.5 , 0.  ],
               [0.  , 0.75]])
        """
        Qhat = 0.5 * (Qhat + Qhat.T)
        lam, O = np.linalg.eigh(Qhat)
        if lam[0] < -1e-12 * max(1.0, abs(lam[-1])):
            raise ValueError(f"Q_hat must be positive semidefinite (eigenvalue {lam[0]:.3g})")
        f = self._kernel.vec(np.clip(lam, 0.0, None))[:, 0]
        return (O * f) @ O.T

    def overlap_map_derivative(self, Qhat: np.ndarray, H: np.ndarray) -> np.ndarray:
        """Return the directional derivative ``dF_prior(Q_hat)[H]`` of the matrix function.

        No differencing: the Daleckii-Krein formula ``O (Gamma o O^T H O) O^T`` (Higham,
        Functions of Matrices, Thm. 3.11), ``Gamma_ij = (F(l_i) - F(l_j))/(l_i - l_j)`` the
        divided difference derived symbolically with ``l_i - l_j`` cancelled (``F'`` on the
        diagonal).  Next to perfect recovery ``F = 1 - O(1/q_hat)`` rounds to 1: differences
        of ``F`` vanish there (Q_stderr read 0 at q_hat = 2.5e12), and so did a numerical
        divided difference between eigenvalues 1e12 and 1.00001e12.

        Parameters
        ----------
        Qhat : numpy.ndarray
            Positive semidefinite, finite, square.
        H : numpy.ndarray
            Symmetric direction of the same shape.

        Returns
        -------
        numpy.ndarray
            ``dF(Q_hat)[H]``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import GaussianPrior
        >>> prior = GaussianPrior()
        >>> prior.overlap_map_derivative(np.eye(1), np.eye(1))     # 1/(1 + qhat)^2 at 1
        array([[0.25]])
        """
        Qhat = np.asarray(Qhat, dtype=float)
        H = np.asarray(H, dtype=float)
        if Qhat.ndim != 2 or Qhat.shape[0] != Qhat.shape[1] or H.shape != Qhat.shape:
            raise ValueError(f"Q_hat and H must be square matrices of one shape, got "
                             f"{Qhat.shape} and {H.shape}")
        if not (np.all(np.isfinite(Qhat)) and np.all(np.isfinite(H))):
            raise ValueError("Q_hat and H must be finite")
        Qhat = 0.5 * (Qhat + Qhat.T)
        H = 0.5 * (H + H.T)
        lam, O = np.linalg.eigh(Qhat)
        if lam[0] < -1e-12 * max(1.0, abs(lam[-1])):
            raise ValueError(f"Q_hat must be positive semidefinite (eigenvalue {lam[0]:.3g})")
        lam = np.clip(lam, 0.0, None)
        k = len(lam)
        gamma = self._divided.vec(np.repeat(lam, k), np.tile(lam, k))[:, 0].reshape(k, k)
        return O @ (gamma * (O.T @ H @ O)) @ O.T

    def psi(self, Qhat: np.ndarray) -> float:
        """Return the prior's free-entropy term ``psi_P(Q_hat)`` (Eqs. (10)-(11) of arXiv:2502.00901).

        The sum of the derived scalar term over the eigenvalues: ``Tr Q_hat/2 -
        log det(I + Q_hat)/2`` for ``N(0, I)``.

        Parameters
        ----------
        Qhat : numpy.ndarray
            Positive semidefinite ``P x P`` matrix.

        Returns
        -------
        float
            ``psi_P(Q_hat)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import GaussianPrior
        >>> prior = GaussianPrior()
        >>> bool(abs(prior.psi(np.array([[1.0]])) - (0.5 - np.log(2) / 2)) < 1e-12)  # (q - log(1+q))/2
        True
        """
        lam = np.linalg.eigvalsh(0.5 * (Qhat + Qhat.T))
        return float(np.sum(self._psi.vec(np.clip(lam, 0.0, None))[:, 0]))

    def inverse_overlap_map(self, Q: np.ndarray) -> np.ndarray:
        """Return ``F_prior^(-1)(Q)`` for ``0 <= Q < I`` (the derived inverse of the scalar map).

        Parameters
        ----------
        Q : numpy.ndarray
            Symmetric ``P x P`` matrix with eigenvalues in ``[0, 1)``.

        Returns
        -------
        numpy.ndarray
            ``Q_hat = Q (I - Q)^(-1)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import GaussianPrior
        >>> prior = GaussianPrior()
        >>> prior.inverse_overlap_map(np.array([[0.5]]))
        array([[1.]])
        """
        Q = 0.5 * (Q + Q.T)
        lam, O = np.linalg.eigh(Q)
        if lam[0] < -1e-12 or lam[-1] >= 1:
            raise ValueError(f"Q must satisfy 0 <= Q < I, eigenvalues [{lam[0]:.3g}, {lam[-1]:.3g}]")
        f = self._inverse.vec(np.clip(lam, 0.0, None))[:, 0]
        return (O * f) @ O.T


