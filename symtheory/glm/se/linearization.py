"""The state evolution's map linearized: its free parametrization, difference
Jacobians and the standard error of a fixed point propagated through them.

The overlap ``Q`` lives on its free entries (upper triangle inside the structure mask);
Jacobians of the frozen-sample map are one-sided differences that stay in the domain
``0 <= Q < rho`` (:func:`symtheory.core.solvers.difference_jacobian`); the prior's
Jacobian is derived where the prior gives a derivative (Daleckii-Krein for a rotation-
invariant prior, Higham, Functions of Matrices, Thm. 3.11).  The fixed point's standard
error is ``(I - dF/dQ)^{-1} dF_prior/dQ_hat . stderr(Q_hat)`` (entries of ``Q_hat``
independent).
"""
from __future__ import annotations

import numpy as np


class MapLinearization:
    """Mixin of :class:`~symtheory.glm.se.state_evolution.StateEvolution`: needs
    ``model``, ``mask``, ``rho``, ``prior``, ``lam``, ``difference_step``,
    ``boundary_fraction``, ``_check_Q``, ``step`` and ``psd_qhat``."""

    def _free_entries(self):
        P = self.model.P
        return [(a, b) for a in range(P) for b in range(a, P) if self.mask[a, b]]

    def _to_free(self, Q):
        return np.array([Q[a, b] for a, b in self._free_entries()])

    def _from_free(self, q):
        Q = np.zeros((self.model.P, self.model.P))
        for (a, b), v in zip(self._free_entries(), q):
            Q[a, b] = Q[b, a] = v
        return Q

    def _in_domain(self, Q):
        """``0 <= Q < rho`` (the tolerance of :meth:`_check_Q`)."""
        return (np.linalg.eigvalsh(Q)[0] >= -1e-12
                and np.linalg.eigvalsh(self.rho - Q)[0] > 0)

    def _directions(self):
        """Difference directions for the Jacobian on the free entries: ``E_aa`` for a
        diagonal entry, ``E_ab + E_ba + E_aa + E_bb`` (positive semidefinite) for an
        off-diagonal one, so every difference from a PSD ``Q`` -- ``Q = 0`` included,
        where ``Q + h E_ab`` is indefinite -- stays PSD."""
        entries = self._free_entries()
        index = {e: i for i, e in enumerate(entries)}
        D = np.zeros((len(entries), len(entries)))
        for j, (a, b) in enumerate(entries):
            D[j, j] = 1.0
            if a != b:
                for c in (a, b):
                    if (c, c) in index:
                        D[index[(c, c)], j] = 1.0
        return D

    def map_jacobian(self, Q, *, step=None):
        """Return ``dF/dQ`` on the free entries by one-sided differences of the frozen-sample map.

        Rows and columns in the order of the upper-triangle entries kept by the structure;
        the differences stay in ``0 <= Q < rho``.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P``.
        step : float, optional
            Difference step (default ``difference_step``).

        Returns
        -------
        numpy.ndarray or None
            The Jacobian; ``None`` if no difference stays in the domain.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.map_jacobian(np.array([[0.5]])).round(5)       # d/dQ 1/(2.5 - Q) = 1/4 at Q = 1/2
        array([[0.25]])
        """
        from ...core.solvers import difference_jacobian

        step = self.difference_step if step is None else step
        Q = self._check_Q(Q)
        return difference_jacobian(lambda q: self._to_free(self.step(self._from_free(q))),
                                   self._to_free(Q), step=step,
                                   domain=lambda q: self._in_domain(self._from_free(q)),
                                   directions=self._directions(),
                                   boundary_fraction=self.boundary_fraction)

    def spectral_radius(self, Q) -> float:
        """Return the largest modulus of the eigenvalues of :meth:`map_jacobian` at ``Q``.

        Step ``max(1e-5, difference_step)``: below 1 where ``Q`` is a stable fixed point.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P``.

        Returns
        -------
        float
            The spectral radius; NaN if no difference stays in the domain.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> round(se.spectral_radius(np.array([[0.5]])), 4)
        0.25
        """
        J = self.map_jacobian(Q, step=max(1e-5, self.difference_step))
        return float(np.max(np.abs(np.linalg.eigvals(J)))) if J is not None else float("nan")

    def _prior_jacobian(self, Qhat):
        """``dF_prior/dQ_hat`` on the free entries (the directions of :meth:`_directions`):
        from the prior's derived derivative when it has one
        (:meth:`~symtheory.glm.factors.gaussian_prior.GaussianPrior.overlap_map_derivative`), else by
        differences inside ``Q_hat >= 0`` on relative steps: 1e-6 of the entry, up to
        1e-3 where ``Q_hat > 1e5``.  Next to perfect recovery ``Q_hat`` reaches 1e11 (skip
        100), where an absolute 1e-6 rounds away (the Jacobian was lost: Q_stderr NaN);
        there ``F = 1 - O(1/Q_hat)`` and its change resolves only on a relative step up to
        1e-3 (at 1.5e11: ~60 ulps of 1, ~2% -- enough for a standard error).  ``None`` if
        a direction leaves the domain both ways."""
        from ...core.solvers import difference_jacobian

        qh = self._to_free(Qhat)
        D = self._directions()
        derived = [self.prior.overlap_map_derivative(Qhat, self._from_free(D[:, j]))
                   for j in range(D.shape[1])]
        if all(d is not None for d in derived):
            # the derived derivative: exact where F rounds to rho (no difference at all)
            cols = np.stack([self._to_free(d) for d in derived], axis=1)
            return cols @ np.linalg.inv(D)      # as difference_jacobian: J = [dF(d_j)] D^-1
        big = np.array([max(1.0, float(np.max(np.abs(qh[D[:, j] != 0]))))
                        for j in range(D.shape[1])])
        scale = big * np.clip(1e-11 * big, 1e-6, 1e-3) / 1e-6
        return difference_jacobian(
            lambda h: self._to_free(self.prior.overlap_map(self._from_free(h))),
            qh, step=1e-6,
            domain=lambda h: np.linalg.eigvalsh(self._from_free(h))[0] >= 0,
            directions=D * scale[None, :])

    def _fixed_point_stderr(self, Q, Qhat_se, J=None, bound=False):
        """Standard error of the fixed point: ``(I - dF/dQ)^{-1} dF_prior/dQhat . stderr``
        (entries of ``Q_hat`` treated as independent); both Jacobians by one-sided
        differences inside their domains (``Q = 0`` and ``Q_hat = 0`` included).  ``J``:
        ``dF/dQ`` at ``Q`` if already known (the engine's stability check).  ``bound``:
        ``Qhat_se`` bounds a systematic error (a quadrature rule's), so the entries add
        linearly, ``|S| . err``, instead of in quadrature."""

        P = self.model.P
        entries = self._free_entries()
        k = len(entries)
        if J is None:
            J = self.map_jacobian(Q, step=max(1e-5, self.difference_step))
        G = self._prior_jacobian(self.psd_qhat(Q) + self.lam * np.eye(P))
        if J is None or G is None:
            return np.full((P, P), np.nan)
        s = np.array([Qhat_se[a, b] for a, b in entries])
        try:
            sens = np.linalg.solve(np.eye(k) - J, G)
        except np.linalg.LinAlgError:
            return np.full((P, P), np.inf)
        out = np.zeros((P, P))
        total = np.abs(sens) @ s if bound else np.sqrt((sens ** 2) @ (s ** 2))
        for (a, b), v in zip(entries, total):
            out[a, b] = out[b, a] = v
        return out
