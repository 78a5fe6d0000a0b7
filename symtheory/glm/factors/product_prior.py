"""Products of declared separable priors: ``P`` weight rows, row ``k`` drawn from its own
:class:`~symtheory.glm.factors.separable_prior.SeparablePrior`.

GAMP sees a coordinate's column ``w`` (a ``P``-vector) through
``exp(b^T w - w^T A w / 2)`` with a full ``P x P`` precision ``A`` (Rangan, ISIT 2011;
Algorithm 1 of Troiani et al., arXiv:2502.00901): the rows are independent a priori but
coupled by ``A``.  For components that are point masses and Gaussians the posterior is
exact: each combination ``c`` of one component per row is a Gaussian ``N(m_c, D_c)``
(``D_c`` diagonal, 0 for a point mass), and with ``K = D^{1/2} A D^{1/2}``,
``M = I + K``, ``h = D^{1/2} (b - A m)``,

    log Z_c = log pi_c + b.m - m^T A m / 2 - log det M / 2 + h^T M^{-1} h / 2,
    E[w | c] = m + D^{1/2} M^{-1} h,    Cov[w | c] = D^{1/2} M^{-1} D^{1/2}

(the Gaussian integral over ``z``, ``w = m + D^{1/2} z``, ``z ~ N(0, I)``), combined by the
posterior weights ``softmax_c(log Z_c)`` and the law of total covariance.  Components
given as densities enter only through the rows' own 1-D input functions, i.e. when ``A``
is diagonal; a coupled ``A`` with a density component is refused (it needs a
``P``-dimensional integral the package does not do silently).  The closed form is
checked against the rows' SymPy-derived log-partitions at diagonal ``A``, by its own
derivatives and by 2-D quadrature in the tests.

State evolution: at a diagonal ``Q_hat`` the rows decouple and ``F(Q_hat)`` is the rows'
1-D maps on the diagonal and ``E w_k E w_l`` off it (Nishimori: ``E f_k = E w0_k``); at a
coupled ``Q_hat`` the expectation over ``B ~ N(Q_hat m_c, Q_hat D_c Q_hat + Q_hat)`` per
combination is a tensor trapezoidal rule on ``[-8.5, 8.5]`` per axis (Gaussian mass
outside ~1e-17), its step halved until two steps agree to ``rtol``: for an integrand
analytic in a strip it converges geometrically in ``1/h`` (Gauss-Hermite only like
``exp(-c sqrt(n))``: 256 nodes left 4e-10 on a Rademacher row); otherwise it is refused
with the accuracy reached.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ...core.validate import ParameterError
from .prior import Prior
from .separable_prior import SeparablePrior, _logsumexp

#: the trapezoidal rule's half-width and its finest step at a coupled Q_hat
TRAPEZOID_HALF_WIDTH = 8.5
TRAPEZOID_MIN_STEP = 1 / 32


class ProductPrior(Prior):
    """Product of separable priors: rows ``k = 1..P`` i.i.d. from ``rows[k]``.

    Exact GAMP input functions at a coupled precision for point masses and Gaussians;
    the state-evolution expectations at a coupled ``Q_hat`` by the tensor trapezoidal rule
    (module docstring; Algorithm 1 of Troiani et al., arXiv:2502.00901).

    Parameters
    ----------
    rows : list of SeparablePrior
        One declared prior per weight row (non-empty).
    rtol : float, optional
        Tolerance of the state-evolution expectations at a coupled ``Q_hat``.

    Examples
    --------
    >>> import numpy as np
    >>> from symtheory.glm import ProductPrior
    >>> from symtheory.glm.factors.separable_prior import rademacher
    >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
    >>> prior.P, prior.rho(2)
    (2, array([[1., 0.],
           [0., 1.]]))
    """

    def __init__(self, rows, *, rtol: float = 1e-10):
        rows = list(rows)
        if not rows or not all(isinstance(r, SeparablePrior) for r in rows):
            raise ParameterError("rows must be a non-empty list of SeparablePrior declarations")
        self.rows, self.P, self.rtol = rows, len(rows), float(rtol)
        self.name = "x".join(r.name for r in rows)
        self.exact_coupled = all(c.kind.startswith(("delta", "N(")) for r in rows
                                 for c in r.components)
        if self.exact_coupled:
            self._combinations()

    def __repr__(self):
        return f"ProductPrior({', '.join(r.name for r in self.rows)})"

    def _combinations(self):
        """Every choice of one component per row: log weight, means ``m`` and variances
        ``D`` (``(n_comb,)``, ``(n_comb, P)``, ``(n_comb, P)``)."""
        logw, means, vars_ = [], [], []
        per_row = [[(lw, float(c.mean), float(c.second_moment - c.mean ** 2))
                    for lw, c in zip(r.log_weights, r.components) if np.isfinite(lw)]
                   for r in self.rows]
        for combo in itertools.product(*per_row):
            logw.append(sum(t[0] for t in combo))
            means.append([t[1] for t in combo])
            vars_.append([t[2] for t in combo])
        self.comb_logw, self.comb_mean = np.array(logw), np.array(means)
        self.comb_var = np.array(vars_)

    def _check(self, A, B):
        A, B = np.asarray(A, float), np.asarray(B, float)
        if A.shape != (self.P, self.P) or B.ndim != 2 or B.shape[0] != self.P:
            raise ParameterError(f"the product prior {self.name!r} has P = {self.P} rows; got A "
                                 f"of shape {A.shape} and B of shape {B.shape}")
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
            raise ValueError("A and B must be finite")
        return 0.5 * (A + A.T), B

    # ------------------------------------------------------------------ input channel
    def log_partition_terms(self, A, B):
        """Return ``(log Z, f_in, Cov[w | b])`` for the precision ``A`` and the fields ``B``.

        Rows decouple at a diagonal ``A`` (each row's own 1-D terms); at a coupled ``A``
        the closed form of the module docstring (point masses and Gaussians only).

        Parameters
        ----------
        A : array_like
            Precision, ``P x P``.
        B : array_like
            Fields, ``P x p``.

        Returns
        -------
        tuple of numpy.ndarray
            ``log Z (p,)``, ``f_in (P, p)``, ``Cov[w | b] (p, P, P)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> logz, f, cov = prior.log_partition_terms(np.eye(2), np.array([[0.5], [0.5]]))
        >>> bool(np.allclose(f.ravel(), np.tanh(0.5), rtol=1e-14))   # f_in = tanh(b)
        True
        """
        A, B = self._check(A, B)
        if not np.any(A - np.diag(np.diag(A))):
            outs = [r.log_partition_terms(B[k], A[k, k]) for k, r in enumerate(self.rows)]
            cov = np.zeros((B.shape[1], self.P, self.P))
            for k, (_, _, v) in enumerate(outs):
                cov[:, k, k] = v
            return sum(o[0] for o in outs), np.array([o[1] for o in outs]), cov
        if not self.exact_coupled:
            raise ParameterError(f"the product prior {self.name!r} has a density component: "
                                 "its input functions at a coupled precision A (off-diagonal "
                                 "entries) need a P-dimensional integral; only point masses "
                                 "and Gaussians are exact there")
        return self._coupled_terms(A, B)

    def _coupled_terms(self, A, B):
        b = B.T                                                   # (p, P)
        sq = np.sqrt(self.comb_var)                               # (c, P)
        K = sq[:, :, None] * A[None] * sq[:, None, :]
        M = np.eye(self.P)[None] + K                              # (c, P, P)
        _, logdet = np.linalg.slogdet(M)
        m = self.comb_mean
        Am = m @ A                                                # (c, P): A m (A symmetric)
        h = sq[:, None, :] * (b[None] - Am[:, None, :])           # (c, p, P)
        Minv = np.linalg.inv(M)
        Mh = np.einsum("cij,cpj->cpi", Minv, h)
        logz = self.comb_logw[:, None] + (b @ m.T).T - 0.5 * np.sum(m * Am, axis=1)[:, None] \
            - 0.5 * logdet[:, None] + 0.5 * np.sum(h * Mh, axis=2)  # (c, p)
        lse, post = _logsumexp(logz.T)                            # (p,), (p, c)
        mean_c = m[:, None, :] + sq[:, None, :] * Mh              # (c, p, P)
        cov_c = sq[:, :, None] * Minv * sq[:, None, :]            # (c, P, P)
        mean = np.einsum("pc,cpi->pi", post, mean_c)
        dev = mean_c - mean[None]
        cov = np.einsum("pc,cij->pij", post, cov_c) + np.einsum("pc,cpi,cpj->pij", post, dev, dev)
        return lse, mean.T, cov

    def input_functions(self, A, B):
        """Return GAMP's input functions ``(f_in, variance)`` for the input channel ``(A, B)``.

        Parameters
        ----------
        A : array_like
            Precision, ``P x P``.
        B : array_like
            Fields, ``P x p``.

        Returns
        -------
        tuple of numpy.ndarray
            ``f_in (P, p)`` and the posterior covariance averaged over coordinates ``(P, P)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> f, v = prior.input_functions(np.eye(2), np.zeros((2, 3)))
        >>> f.shape, v.round(6)
        ((2, 3), array([[1., 0.],
               [0., 1.]]))
        """
        _, f, cov = self.log_partition_terms(A, B)
        return f, cov.mean(axis=0)

    def rho(self, P):
        """Return the second moment ``E[w w^T]`` (``E w_k^2`` on the diagonal, ``E w_k E w_l`` off it).

        Parameters
        ----------
        P : int
            Number of rows (must equal the prior's).

        Returns
        -------
        numpy.ndarray
            The ``P x P`` second moment.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> prior.rho(2)
        array([[1., 0.],
               [0., 1.]])
        """
        if P != self.P:
            raise ParameterError(f"the product prior {self.name!r} has P = {self.P} rows, got {P}")
        mean = np.array([r.mean for r in self.rows])
        out = np.outer(mean, mean)
        out[np.diag_indices(self.P)] = [r.second_moment for r in self.rows]
        return out

    # ------------------------------------------------------------------ state evolution
    def _qhat(self, Qhat):
        Q = np.asarray(Qhat, float)
        if Q.shape != (self.P, self.P) or not np.all(np.isfinite(Q)):
            raise ParameterError(f"Q_hat must be a finite {self.P} x {self.P} matrix, got {Q}")
        return 0.5 * (Q + Q.T)

    def overlap_map(self, Qhat):
        """Return ``Q = F(Q_hat)``, the state evolution's prior map.

        Diagonal ``Q_hat``: the rows' 1-D maps; coupled: :meth:`coupled_expectation`.

        Parameters
        ----------
        Qhat : array_like
            Finite ``P x P`` matrix (symmetrized).

        Returns
        -------
        numpy.ndarray
            ``E[f_in f_in^T]``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> F = prior.overlap_map(np.eye(2))
        >>> x, w = np.polynomial.hermite_e.hermegauss(160)   # E tanh(qhat + sqrt(qhat) z), qhat = 1
        >>> ref = w @ np.tanh(1 + x) / np.sqrt(2 * np.pi)
        >>> bool(np.allclose(F, ref * np.eye(2), rtol=1e-12, atol=1e-15))
        True
        """
        Q = self._qhat(Qhat)
        if not np.any(Q - np.diag(np.diag(Q))):
            mean = np.array([r.mean for r in self.rows])
            out = np.outer(mean, mean)
            out[np.diag_indices(self.P)] = [r.overlap_map([[Q[k, k]]])[0, 0]
                                            for k, r in enumerate(self.rows)]
            return out
        return self.coupled_expectation(Q)[0]

    def psi(self, Qhat):
        """Return the prior's free-entropy term ``psi(Q_hat) = E log Z``.

        Parameters
        ----------
        Qhat : array_like
            Finite ``P x P`` matrix.

        Returns
        -------
        float
            The sum of the rows' terms at a diagonal ``Q_hat``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> x, w = np.polynomial.hermite_e.hermegauss(160)   # per row E log cosh(1 + z) - 1/2
        >>> row = w @ np.log(np.cosh(1 + x)) / np.sqrt(2 * np.pi) - 0.5
        >>> bool(abs(prior.psi(np.eye(2)) - 2 * row) < 1e-12)
        True
        """
        Q = self._qhat(Qhat)
        if not np.any(Q - np.diag(np.diag(Q))):
            return float(sum(r.psi([[Q[k, k]]]) for k, r in enumerate(self.rows)))
        return self.coupled_expectation(Q)[1]

    def coupled_expectation(self, Q):
        """Return ``(E[f_in f_in^T], E[log Z], change)`` at a coupled ``Q``.

        At ``A = Q``, ``B = Q w0 + Q^(1/2) xi``, per combination of components, by the tensor
        trapezoidal rule (module docstring), the step halved from 1/2 until two steps agree to
        ``rtol`` (relative to the largest entry; ``change`` the last difference).

        Parameters
        ----------
        Q : numpy.ndarray
            Positive semidefinite ``P x P`` matrix.

        Returns
        -------
        tuple
            ``(numpy.ndarray, float, float)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> Q = np.array([[1.0, 0.2], [0.2, 1.0]])
        >>> ff, logz, change = prior.coupled_expectation(Q)

        Against brute force: the posterior over the four sign vectors ``w`` at ``B = Q w0 +
        Q^(1/2) xi`` (weights ``exp(B.w - w^T Q w / 2)``), averaged over the four truths
        ``w0`` and over ``xi`` by Gauss-Hermite 120 per axis (converged to 1e-14):

        >>> import itertools
        >>> from numpy.polynomial.hermite_e import hermegauss
        >>> t, g = hermegauss(120)
        >>> xi = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
        >>> weight = np.outer(g, g).ravel() / g.sum() ** 2
        >>> signs = np.array(list(itertools.product([-1.0, 1.0], repeat=2)))
        >>> B = (signs @ Q)[:, None, :] + (xi @ np.linalg.cholesky(Q).T)[None]
        >>> logp = B @ signs.T - 0.5 * np.einsum("ki,ij,kj->k", signs, Q, signs)
        >>> post = np.exp(logp - logp.max(-1, keepdims=True))
        >>> f = (post / post.sum(-1, keepdims=True)) @ signs       # E[w | B]
        >>> brute = np.einsum("n,tni,tnj->ij", weight, f, f) / 4
        >>> float(np.abs(ff - brute).max()) < 1e-12, bool(change < 1e-10)
        (True, True)
        """
        if not self.exact_coupled:
            raise ParameterError(f"the product prior {self.name!r} has a density component: "
                                 "its state evolution at a coupled Q_hat is not available")
        w = np.linalg.eigvalsh(Q)
        if np.min(w) < -1e-12 * max(1.0, np.max(np.abs(w))):
            raise ParameterError(f"Q_hat must be positive semi-definite, eigenvalues {w}")
        prev, h, change = None, 0.5, math.inf
        while h >= TRAPEZOID_MIN_STEP:
            cur = self._trapezoid(Q, h)
            if prev is not None:
                change = max(np.max(np.abs(cur[0] - prev[0])) / max(1.0, np.max(np.abs(cur[0]))),
                             abs(cur[1] - prev[1]) / max(1.0, abs(cur[1])))
                if change <= self.rtol:
                    return cur[0], cur[1], change
            prev, h = cur, h / 2
        raise ArithmeticError(f"the product prior's expectation at Q_hat = {Q.tolist()} did not "
                              f"reach rtol {self.rtol:g} at step {2 * h:g} per axis (last "
                              f"change {change:.2g})")

    def _trapezoid(self, Q, h):
        L = TRAPEZOID_HALF_WIDTH
        x = np.arange(-L, L + h / 2, h)
        w = h * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        grid = np.array(list(itertools.product(x, repeat=self.P)))       # (n^P, P)
        wts = np.prod(np.array(list(itertools.product(w, repeat=self.P))), axis=1)
        ff, lz = np.zeros((self.P, self.P)), 0.0
        for lw, m, d in zip(self.comb_logw, self.comb_mean, self.comb_var):
            ev, U = np.linalg.eigh(Q @ np.diag(d) @ Q + Q)
            Bs = (Q @ m)[None] + grid @ (U * np.sqrt(np.clip(ev, 0.0, None))).T   # (n^P, P)
            logz, f, _ = self.log_partition_terms(Q, Bs.T)
            ff += math.exp(lw) * np.einsum("s,is,js->ij", wts, f, f)
            lz += math.exp(lw) * float(np.sum(wts * logz))
        return ff, lz

    def inverse_overlap_map(self, Q):
        """Return ``Q_hat = F^(-1)(Q)``, row by row.

        Parameters
        ----------
        Q : array_like
            ``P x P``, with off-diagonal entries ``E w_k E w_l`` (``NotImplementedError``
            otherwise).

        Returns
        -------
        numpy.ndarray
            The diagonal ``Q_hat``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm import ProductPrior
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = ProductPrior([rademacher(), rademacher()])      # P = 2 rows
        >>> prior.inverse_overlap_map(prior.overlap_map(np.eye(2))).round(8)
        array([[1., 0.],
               [0., 1.]])
        """
        Q = self._qhat(Q)
        if np.any(Q - np.diag(np.diag(Q))) and not np.allclose(
                Q - np.diag(np.diag(Q)), self.rho(self.P) - np.diag(np.diag(self.rho(self.P))),
                rtol=0, atol=1e-14):
            raise NotImplementedError(f"the product prior {self.name!r} inverts its overlap map "
                                      "row by row: Q must have off-diagonal entries E w_k E w_l")
        out = np.zeros((self.P, self.P))
        out[np.diag_indices(self.P)] = [r.inverse_overlap_map([[Q[k, k]]])[0, 0]
                                        for k, r in enumerate(self.rows)]
        return out
