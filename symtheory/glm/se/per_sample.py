"""Per-sample quantities of the state evolution's frozen samples: the teacher's
``(y, omega, V, Z)``, the channel's posterior moments (in inversion-feature coordinates for
a reduced link, with the a-posteriori error of its tensor rule), ``g_out`` / ``dg_out`` and
the per-sample products ``Q_hat`` averages (Eq. (12) of Troiani et al., arXiv:2502.00901),
also as the two-level values of :mod:`symtheory.glm.se.multilevel`.

A mixin of :class:`symtheory.glm.se.state_evolution.StateEvolution` (which holds the
samples, rules and caches it reads).
"""
from __future__ import annotations


import numpy as np

from ...core.linalg import psd_sqrt
from ...core.quadrature import TensorRule
from ...core.validate import ParameterError
from ..integrate.moments import Moments
from .staged_solve import CHANNEL_ERROR_SAMPLES

#: nodes-per-axis factor of the finer rule the channel error of a reduced noiseless link
#: is estimated against at the fixed point (one evaluation: 1.5^D times its cost over D
#: integrated coordinates)
CHANNEL_ERROR_REFINEMENT = 1.5


class PerSampleMoments:
    """Mixin of :class:`~symtheory.glm.se.state_evolution.StateEvolution`: see the module docstring."""

    def sample_channel(self, Q):
        """Return ``(y, omega, V, Z)`` of the frozen samples at overlap ``Q``.

        ``omega = Q^(1/2) xi``, ``Z = omega + (rho - Q)^(1/2) eta``, ``y = g(Z)`` (+ noise).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of numpy.ndarray
            ``y (n, outputs)``, ``omega (n, P, M)``, ``V (P, P)``, ``Z (n, P, M)``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> y, omega, V, Z = se.sample_channel(np.array([[0.3]]))
        >>> y.shape, omega.shape, V
        ((256, 1), (256, 1, 1), array([[0.7]]))
        """
        Q = self._check_Q(Q)
        V = self.rho - Q + self.regularization * np.eye(self.model.P)
        sq, sv = psd_sqrt(Q), psd_sqrt(V)
        omega = np.einsum("ab,sbm->sam", sq, self.xi)
        Z = omega + np.einsum("ab,sbm->sam", sv, self.eta)
        y = self.model.g(Z).reshape(self.samples, -1)
        if self.noise is not None:
            y = y + np.sqrt(self.noise_variance) * self.noise
        return y, omega, V, Z

    def posterior_moments(self, Q, *, include_jacobian=True):
        """Return the posterior moments of the frozen samples at ``Q`` (with their ``omega`` and ``V``).

        A reduced link is integrated in feature coordinates (module docstring) with its tensor
        rule; the largest change against the rule with :data:`CHANNEL_ERROR_REFINEMENT` times
        the nodes per axis is kept in ``channel_error`` (the a-posteriori estimate of the
        error of the rule used, in the units of
        :class:`~symtheory.glm.integrate.moments.ChannelAccuracy`).  The last result is kept
        for the same ``Q`` and options (the free entropy's ``Psi_out`` at the fixed point just
        solved: a full pass over the samples); it is returned with the accuracy records it
        set.

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.
        include_jacobian : bool, optional
            ``False`` drops the observation-only Jacobian factor.

        Returns
        -------
        Moments
            :class:`~symtheory.glm.integrate.moments.Moments` (``log_partition``,
            ``mean_shift``, ``cov_shift``, ``omega``, ``V``).

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> m = se.posterior_moments(np.array([[0.3]]))
        >>> m.mean_shift.shape, se.channel_error
        ((256, 1, 1), 0.0)
        """
        # the channel object itself (compared by identity): a stage swaps it
        key = (self._check_Q(Q).tobytes(), self.samples, getattr(self, "feature_rule", None),
               self.channel, include_jacobian, self.estimate_channel_error)
        # two entries: the two-level map alternates between its levels at one Q
        cache = self.__dict__.setdefault("_moments_cache", {})
        if key in cache:
            self.channel_error, self._scrambling_sums = cache[key][1:]
            return cache[key][0]
        out = self._posterior_moments(Q, include_jacobian)
        if len(cache) >= 2:
            del cache[next(iter(cache))]
        cache[key] = (out, self.channel_error, getattr(self, "_scrambling_sums", None))
        return out

    def _posterior_moments(self, Q, include_jacobian):
        if self.features is None:
            y, omega, V, _ = self.sample_channel(Q)
            channel = self._observation_channel()
            if include_jacobian or not hasattr(channel, "branches"):
                moments = channel.moments(y, omega, V)
            else:
                moments = channel.moments(y, omega, V, include_jacobian=False)
            self.channel_error = channel.last_error
            self._scrambling_sums = getattr(channel, "last_scrambling_sums", None)
            return moments
        from ...core._moments_nb import moment_change_batch

        _, omega, V, Z = self.sample_channel(Q)
        rp = self.features
        Ebr, lw, valid, _ = rp.branches(rp.E_of_Z(Z))
        if not include_jacobian:
            lw = np.zeros_like(lw)
        from ..integrate.laplace_qmc import LaplaceQMCRule

        if isinstance(self.feature_rule, LaplaceQMCRule):
            # Laplace-RQMC: the rule states its own per-sample error (95% half-width over
            # its scramblings); that random error is part of the per-sample spread, hence
            # of the sampling standard error of Q_hat
            ch = self.channel.configured(rule=self.feature_rule)
            moments = ch.branch_moments(Ebr, lw, valid, omega, V)
            # the multilevel estimator's cost model (Giles' share): posterior evaluations,
            # not seconds, so that the share does not depend on the machine's load
            from .randomized_multilevel import evaluations_per_draw

            self._coarse_evaluations_per_draw = evaluations_per_draw(ch)
            self._scrambling_sums = ch.last_scrambling_sums
            self.channel_error = (ch.last_accuracy.max_error if self.estimate_channel_error
                                  else None)
            return moments
        starts = self._peak_starts(Z) if not isinstance(self.feature_rule, TensorRule) else None
        # the error pass at a fixed point just iterated on reuses that pass's moments
        fine_key = (self._check_Q(Q).tobytes(), self.samples, self.feature_rule,
                    include_jacobian)
        cached = getattr(self, "_last_fine_posterior", None)
        if cached is not None and cached[0] == fine_key:
            fine = cached[1]
        else:
            fine = rp.posterior(Ebr, lw, valid, omega, V, self.feature_rule, starts=starts)
            self._last_fine_posterior = (fine_key, fine)
        if not self.estimate_channel_error:
            self.channel_error = None
            return Moments.from_posterior(fine[0], fine[1], fine[2], omega, V)
        # against a finer rule, not a coarser one: the change to half the nodes measures
        # the coarse rule's error, e.g. 8.4 with two nearly known rows (Q ~ rho) where GH 30 agrees with
        # a 1601^2 trapezoid to 5e-10 (measured).  On a prefix of the samples (every
        # scrambling; see CHANNEL_ERROR_SAMPLES)
        k = min(len(Z), CHANNEL_ERROR_SAMPLES)
        finer = rp.posterior(Ebr[:k], lw[:k], valid[:k], omega[:k], V,
                             self.feature_rule.refined(CHANNEL_ERROR_REFINEMENT),
                             starts=None if starts is None else starts[:k])
        self._refined_moments = (self._refined_key(Q),
                                 Moments.from_posterior(finer[0], finer[1], finer[2], omega[:k], V))
        sd = np.sqrt(np.repeat(np.diag(V), self.model.M))
        err = moment_change_batch(finer[0], finer[1].reshape(k, -1), finer[2], fine[0][:k],
                                  fine[1][:k].reshape(k, -1), fine[2][:k], sd)
        self.channel_error = float(np.max(err)) if err.size else 0.0
        return Moments.from_posterior(fine[0], fine[1], fine[2], omega, V)

    def _peak_starts(self, Z):
        """Starts of the peak search of a :class:`~symtheory.glm.integrate.reduced_posterior.PeakTensorRule`
        (``(n, k, p_free M)``): each sample's true free rows and their images under the sign
        flips of the even groups of free rows and their products
        (:func:`~symtheory.glm.integrate.laplace_qmc.flip_patterns`: symmetries of the
        link).  Starts only steer the proposal; the estimate is exact for any mixture."""
        from ..integrate.laplace_qmc import flip_patterns

        free, M = list(self.features.free_rows), self.model.M
        u = Z[:, free, :].reshape(len(Z), -1)          # entry a_free M + m: Z[free[a], m]
        flips = flip_patterns(self.model, [a * M + m for a in free for m in range(M)])
        return np.ascontiguousarray(np.concatenate([u[:, None, :], u[:, None, :] * flips[None]],
                                                   axis=1))

    def gout_at(self, Q):
        """Return ``(g_out, dg_out)`` of the frozen samples at ``Q`` (Eq. (12) of arXiv:2502.00901).

        The last result is kept (a fixed point is evaluated again by its callers: the
        standard error, the staircase's instability).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of numpy.ndarray
            ``g_out (n, P, M)`` and ``dg_out``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> g, dg = se.gout_at(np.array([[0.3]]))
        >>> g.shape, float(dg[0].ravel()[0]) == -1 / 1.2         # -1/(V + Delta)
        ((256, 1, 1), True)
        """
        return self._gout_all(Q)[:2]

    def gout_halves(self, Q):
        """Return ``(g_A, g_B)``: ``g_out`` of the posterior means pooled over the two halves of the scramblings.

        The even and the odd scramblings of the channel's Laplace-RQMC rule (``'cross'``
        estimator), independent given the rule's proposal
        (:func:`~symtheory.glm.integrate.laplace_qmc.independent_half_means`).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        tuple of numpy.ndarray
            ``(g_A, g_B)``, each ``(n, P, M)``.

        Raises
        ------
        ValueError
            Without the ``'cross'`` estimator.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> se.gout_halves(np.array([[0.3]]))
        Traceback (most recent call last):
            ...
        ValueError: gout_halves needs the 'cross' estimator
        """
        if self.estimator != "cross":
            raise ValueError("gout_halves needs the 'cross' estimator")
        return self._gout_all(Q)[2:]

    def _gout_all(self, Q):
        if self.observation_rule is not None:
            raise ParameterError("per-sample g_out do not exist when y is integrated given omega; "
                                 "construct the StateEvolution with observation='sample'")
        Q = self._check_Q(Q)
        key = (Q.tobytes(), self.samples, getattr(self, "feature_rule", None),
               getattr(self.channel, "rule", None), self.estimate_channel_error)
        cache = self.__dict__.setdefault("_gout_cache", {})
        if key in cache:
            return cache[key]
        moments = self.posterior_moments(Q)
        out = moments.output_functions()
        omega, V = moments.omega, moments.V
        if self.estimator == "cross":
            from ..integrate.laplace_qmc import independent_half_means

            Vinv = np.linalg.inv(V)
            out = out + tuple(np.einsum("ab,sbm->sam", Vinv, m.reshape(omega.shape) - omega)
                              for m in independent_half_means(self._scrambling_sums))
        if len(cache) >= 2:     # two entries: the levels of the two-level map
            del cache[next(iter(cache))]
        cache[key] = out
        return out

    def _products(self, Q):
        """Per-sample ``(sum_m g g^T, -sum_m dg_mm)`` (symmetrized) at ``Q`` on the current
        samples and rule."""
        g, dg = self.gout_at(Q)
        bad = ~np.all(np.isfinite(g.reshape(len(g), -1)), axis=1)
        if bad.any():
            raise FloatingPointError(f"g_out is not finite for {bad.sum()} of {len(g)} samples "
                                     f"at Q = {Q.tolist()} (channel quadrature failed; try a "
                                     "finer rule)")
        tw = -np.einsum("sambm->sab", dg)
        return np.einsum("sam,sbm->sab", g, g), 0.5 * (tw + np.swapaxes(tw, 1, 2))

    def _two_levels(self, Q, values):
        """Per-sample two-level values of ``values(Q)`` (a tuple of arrays): the coarse
        rule of :attr:`multilevel` on all samples, telescoped with the requested rule on the
        first ``fine_samples`` (:func:`~symtheory.glm.se.multilevel.telescope`)."""
        from .multilevel import telescope

        plan = self.multilevel
        with self._stage(self.samples, plan.coarse):
            coarse = values(Q)
        with self._stage(plan.fine_samples, None):
            fine = values(Q)
        return tuple(telescope(c, f) for c, f in zip(coarse, fine))
