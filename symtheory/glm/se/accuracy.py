"""Stated accuracy of the state evolution's Monte-Carlo averages: standard errors of
the frozen samples' design (RQMC per-scrambling means, plain Monte Carlo, batch means) and
the effect of the channel rule's refinement on ``Q_hat`` in those standard errors.

A mixin of :class:`symtheory.glm.se.state_evolution.StateEvolution`.
"""
from __future__ import annotations

import numpy as np

from .sampling import (
    tail_multiple,
)


class SamplingAccuracy:
    """Mixin of :class:`~symtheory.glm.se.state_evolution.StateEvolution`: see the module docstring."""

    def sample_mean_stderr(self, values):
        """Return ``(mean, standard error)`` over axis 0 of per-sample values of the frozen samples.

        All of them, or the prefix of a warm-up stage.  RQMC: the spread of the
        per-scrambling means over sqrt(scrambles) (the per-sample spread would count the
        variance the low-discrepancy points remove); plain Monte Carlo, or a prefix too short
        to hold two points of every scrambling: the per-sample spread over sqrt(n).  Plain
        Monte Carlo with a channel rule of several point sets: batch means over the point sets
        (samples sharing a set share its errors).

        Parameters
        ----------
        values : array_like
            Per-sample values, samples on axis 0.

        Returns
        -------
        tuple of numpy.ndarray
            ``(mean, stderr)`` over axis 0.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> mean, stderr = se.sample_mean_stderr(np.ones(256))
        >>> float(mean), float(stderr)
        (1.0, 0.0)
        """
        values = np.asarray(values, dtype=float)
        n = len(values)
        if getattr(self, "omega_weights", None) is not None:
            # a quadrature rule, not samples: no sampling error (its own error is bounded
            # at the fixed point by a coarser rule, StagedSolve._tensor_rule_error)
            mean = self.sample_mean(values)
            return mean, np.zeros_like(mean)
        mean = values.mean(axis=0)
        B = self.error_groups
        if B is None or n < 2 * B:
            return mean, values.std(axis=0, ddof=1) / np.sqrt(n)
        groups = np.arange(n) % B
        sums = np.zeros((B,) + values.shape[1:])
        np.add.at(sums, groups, values)
        counts = np.bincount(groups, minlength=B).reshape((B,) + (1,) * (values.ndim - 1))
        return mean, (sums / counts).std(axis=0, ddof=1) / np.sqrt(B)

    def sample_mean(self, values):
        """Return the mean over axis 0 of per-sample values by the design's weights.

        Equal weights for sampled designs, the Gauss-Hermite tensor rule's weights
        (:attr:`omega_weights`) for ``sampling='gauss-hermite'``.

        Parameters
        ----------
        values : array_like
            Per-sample values, samples on axis 0 (all of them: a tensor rule has no prefix).

        Returns
        -------
        numpy.ndarray
            The weighted mean.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, omega_nodes=8,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> se.sampling, se.samples          # nothing sampled: 8 nodes (y = z is not even: no fold)
        ('gauss-hermite', 8)
        >>> round(float(se.sample_mean(se.xi[:, 0, 0] ** 2)), 12)   # E xi^2 = 1 (exact to degree 15)
        1.0
        """
        w = getattr(self, "omega_weights", None)
        values = np.asarray(values, dtype=float)
        if w is None:
            return values.mean(axis=0)
        if len(values) != len(w):
            raise ValueError(f"{len(values)} values for a tensor rule of {len(w)} nodes "
                             "(a prefix of a tensor rule is no rule)")
        return np.tensordot(w, values, axes=1)

    def tail_multiple(self, sigmas):
        """Return :func:`~symtheory.glm.se.sampling.tail_multiple` for this SE's design.

        The multiple of a standard error with the tail probability of ``sigmas`` normal
        standard deviations (the t quantile for RQMC's ``scrambles - 1`` degrees of freedom).

        Parameters
        ----------
        sigmas : float
            Normal standard deviations.

        Returns
        -------
        float
            The multiple of the stated standard error.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> se.tail_multiple(4.0) > 4.0              # 16 scramblings: t with 15 degrees of freedom
        True
        """
        return tail_multiple(sigmas, self.error_groups)

    def quadrature_qhat_error(self, Q):
        """Return the effect of the channel rule's refinement on ``Q_hat`` at ``Q``, in sampling standard errors.

        (:attr:`SEResult.channel_qhat_error <symtheory.glm.se.result.SEResult.channel_qhat_error>`):
        reuses the refined moments of the last error-estimating pass at ``Q``; ``None`` if
        there is none (a randomized or non-reduced rule).

        Parameters
        ----------
        Q : numpy.ndarray
            Overlap, ``P x P`` with ``0 <= Q < rho``.

        Returns
        -------
        float or None
            ``max_ab |Q_hat - Q_hat_refined|_ab / stderr_ab``.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False,
        ...                     sampling="rqmc")    # y = z + sqrt(0.5) xi
        >>> se.quadrature_qhat_error(np.array([[0.3]])) is None     # not a reduced link
        True
        """
        Q = self._check_Q(Q)
        if self.multilevel is not None:
            # the requested rule runs on the fine level's samples only: refined there,
            # compared with the two-level map's standard errors
            _, stderr, _ = self.qhat(Q)
            with self._stage(self.multilevel.fine_samples, None):
                return self._refinement_effect(Q, stderr)
        return self._refinement_effect(Q, None)

    def _refinement_effect(self, Q, stderr):
        ref = getattr(self, "_refined_moments", None)
        if ref is None or ref[0] != self._refined_key(Q):
            return None
        g, dg = self.gout_at(Q)
        if stderr is None:
            _, stderr, _, _ = self._qhat_from_gout(g, dg, self.alpha, Q)
        g_ref, dg_ref = ref[1].output_functions()
        k = len(g_ref)          # the refined rule ran on the first k samples
        Qhat, _, _, _ = self._qhat_from_gout(g[:k], dg[:k], self.alpha, Q)
        Qhat_ref, _, _, _ = self._qhat_from_gout(g_ref, dg_ref, self.alpha, Q)
        free = self.mask > 0
        diff = np.abs(Qhat - Qhat_ref)[free]
        if not diff.size or not np.any(diff > 0):
            return 0.0
        # an entry held at 0 (Q_ll = 0 of an even model) is rounding noise in both rules
        floor = 1e-12 * max(float(np.max(np.abs(Qhat))), float(np.max(np.abs(Qhat_ref))))
        return float(np.max(diff / np.maximum(stderr[free], max(floor, 1e-300))))

    def _refined_key(self, Q):
        """What the refined moments of an error-estimating pass belong to (as gout's key:
        a different Q, sample set or rule must not reuse them)."""
        return (self._check_Q(Q).tobytes(), self.samples, getattr(self, "feature_rule", None))
