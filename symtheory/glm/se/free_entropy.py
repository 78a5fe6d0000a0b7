"""The replica-symmetric free entropy of the matrix state evolution and its output
term (Eqs. (10)-(11) of Troiani et al., arXiv:2502.00901), and the sample complexity at which
a given overlap is a fixed point (Eqs. (13)-(14) solved for alpha).

A mixin of :class:`symtheory.glm.se.state_evolution.StateEvolution`.
"""
from __future__ import annotations

import numpy as np


class FreeEntropyTerms:
    """Mixin of :class:`~symtheory.glm.se.state_evolution.StateEvolution`: see the module docstring."""

    def psi_out(self, Q, *, include_jacobian=True):
        """Return ``Psi_out(Q) = E_(xi, y) log Z_out(y; Q^(1/2) xi, rho - Q)`` on the frozen samples.

        The density of ``y`` in the model's observed coordinates (of the inversion features
        for a reduced link, see the module docstring).  ``include_jacobian=False`` drops the
        y-only output Jacobian of deterministic channels: a Q-independent shift in expectation
        but a heavy-tailed one sample by sample, so derivatives in Q are far less noisy
        without it.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        include_jacobian : bool, optional
            Include the output Jacobian of a deterministic channel.

        Returns
        -------
        tuple of float
            ``(value, stderr)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> value, stderr = se.psi_out(np.array([[0.3]]))
        >>> exact = -0.5 * (1 + np.log(2 * np.pi * 1.2))        # -E log N(y; omega, V + Delta)
        >>> bool(abs(value - exact) < 3 * stderr)
        True
        """
        if self.observation_rule is not None:
            # E_omega int dy Z_out log Z_out: the rule's weighted log partition per sample
            logZ = self._integrated_products(Q)[2]
        elif self.multilevel is not None:
            logZ, = self._two_levels(Q, lambda q: (self.posterior_moments(
                q, include_jacobian=include_jacobian).log_partition,))
        else:
            logZ = self.posterior_moments(Q, include_jacobian=include_jacobian).log_partition
        if not np.all(np.isfinite(logZ)):
            raise FloatingPointError("log Z_out is not finite on some samples")
        mean, stderr = self.sample_mean_stderr(logZ)
        return float(mean), float(stderr)

    def free_entropy(self, Q):
        """Return the replica-symmetric free entropy at ``Q`` with ``Q_hat`` from the SE map (Eqs. (10)-(11) of arXiv:2502.00901).

        ``Phi = -Tr(Q Q_hat)/2 + psi_P(Q_hat) + alpha Psi_out(Q)``.  At a fixed point it is the
        value whose maximum over fixed points selects the Bayes-optimal one.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of float
            ``(Phi, stderr)`` (stderr of the Monte-Carlo term).

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> phi, stderr = se.free_entropy(np.array([[0.5]]))
        >>> bool(stderr > 0), bool(np.isfinite(phi))
        (True, True)
        """
        Q = self._check_Q(Q)
        Qhat = self.psd_qhat(Q) + self.lam * np.eye(self.model.P)
        po, se = self.psi_out(Q)
        phi = -0.5 * float(np.sum(Q * Qhat)) + self.prior.psi(Qhat) + self.alpha * po
        return phi, self.alpha * se

    def alpha_at_fixed_point(self, Q, entry=None):
        """Return the ``alpha`` at which ``Q`` is a fixed point along ``entry`` (Eqs. (13)-(14) solved for alpha).

        ``alpha = [F_prior^(-1)(Q)]_ee / E[g g^T]_ee`` (the channel does not depend on
        alpha).  Exact for a one-parameter reduced SE (e.g. ``Q = diag(0, q2)`` below the
        layer-1 threshold).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        entry : tuple of int, optional
            The entry ``(a, b)`` (default the largest diagonal entry).

        Returns
        -------
        tuple of float
            ``(alpha, stderr)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> alpha, stderr = se.alpha_at_fixed_point(np.array([[0.5]]))
        >>> round(float(alpha), 8)
        1.0
        """
        Q = self._check_Q(Q)
        if entry is None:
            i = int(np.argmax(np.abs(np.diag(Q))))
            entry = (i, i)
        a, b = entry
        target = self.prior.inverse_overlap_map(Q)[a, b] - self.lam * (a == b)
        Qhat1, se1, _ = self.qhat(Q, alpha=1.0)
        return target / Qhat1[a, b], target * se1[a, b] / Qhat1[a, b] ** 2
