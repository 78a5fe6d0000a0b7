"""The state evolution's choice of how ``y`` is treated given ``omega`` -- integrated
(the exact sum over a discrete output's values, or a y-grid of one noisy output:
:mod:`symtheory.glm.se.observation`) or sampled, with the reason -- and the per-sample
products of the integrated map.

A mixin of :class:`symtheory.glm.se.state_evolution.StateEvolution`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...core.linalg import psd_sqrt
from ...core.validate import ParameterError


class IntegratedObservation:
    """Mixin of :class:`~symtheory.glm.se.state_evolution.StateEvolution`: see the module docstring."""

    def _set_observation(self, observation):
        """:attr:`observation_rule` (``None``: ``y`` sampled, :attr:`observation_note` says
        why) and the row symmetries whose images every sample is averaged over
        (:mod:`symtheory.glm.se.observation`)."""
        from ..integrate.link_structure import NotApplicable
        from .observation import ObservationRule, check_observation, row_symmetries

        check_observation(observation)
        self.observation_rule, self.observation_note, self.symmetries = None, "", []
        self.observation_qhat_error = None
        self.observation_qhat_change = None
        if observation == "sample":
            self.observation_note = "y sampled (observation='sample')"
            return
        reason = None
        if self.features is not None:
            reason = ("a reduced noiseless link: its observation has M r feature coordinates, "
                      "a grid per sample costs nodes^(M r) posterior integrals")
        elif self.estimator == "cross":
            reason = "the channel's rule is randomized (Laplace-RQMC)"
        else:
            try:
                self.observation_rule = (getattr(self, "_prebuilt_observation", None) or
                                         ObservationRule(self.model, self.channel,
                                                         self.noise_variance))
            except NotApplicable as exc:
                reason = str(exc)
            if self.observation_rule is not None and observation == "auto" and \
                    self.observation_rule.kind == "scalar noise" and \
                    self.sampling != "gauss-hermite":
                # measured (y = |z| + sqrt(0.2) xi, alpha 1.5, 2026-11-29, the node rule now
                # relaxed to NODE_RTOL): 1024 samples 0.45080 +- 2.8e-4 in 81 s, 1.4 errors
                # from 0.4512017 (re-derived by nested quadrature in test_scalar_noisy_se.py;
                # 8 errors before the relaxation was fixed); plain RQMC 16384 samples
                # +- 1.3e-3 in 2.7 s: error^2 x time still 1.3x worse, so opt-in
                self.observation_rule = None
                reason = ("one noisy output: the y-grid is opt-in (observation='integrate'); "
                          "not yet faster than sampling")
                if self.model.P * self.model.M == 1:
                    # the whole map is a 2-D integral there: deterministic, no samples
                    reason += ("; P = M = 1: sampling='gauss-hermite' (the default 'auto') "
                               "integrates the whole map, a 2-D integral")
        if reason is not None:
            if observation == "integrate":
                raise ParameterError(f"observation='integrate' is not available here: {reason}")
            self.observation_note = f"y sampled: {reason}"
            return
        if self.sampling == "gauss-hermite":
            # the tensor rule is invariant under signed row permutations: the map on it is
            # exactly equivariant, its images would repeat its nodes
            self.observation_note = f"y integrated given omega: {self.observation_rule.describe()}"
            return
        values = getattr(getattr(self.channel, "discrete", None), "values", None)
        for S, _ in row_symmetries(self.model, self.noise_variance, values,
                                   self.observation_rule.symmetric())[1:]:
            # a symmetry that moves a pinned row onto a free one would break the mask
            if np.array_equal(np.abs(S) @ self.mask @ np.abs(S).T, self.mask):
                self.symmetries.append(S)
        self.observation_note = (f"y integrated given omega: {self.observation_rule.describe()}"
                                 + (f"; every sample averaged with its images under "
                                    f"{len(self.symmetries)} row permutation(s) of the link"
                                    if self.symmetries else ""))

    def _check_tensor_design(self):
        """``sampling='gauss-hermite'`` integrates everything: it needs ``y`` integrated
        given ``omega`` (else ParameterError with the reason ``y`` is sampled)."""
        if self.observation_rule is None:
            raise ParameterError("sampling='gauss-hermite' needs y integrated given omega, but "
                                 f"here {self.observation_note}; use sampling='rqmc'")
        #: row groups whose sign flip folds the tensor rule: the model is even in them and
        #: the block structure holds their cross entries at 0 (Q block diagonal, so the
        #: flip maps omega's nodes onto nodes)
        self.tensor_folds = (tuple(g for g, even in self.model.even_groups.items() if even)
                             if self.structure == "block" else ())
        self._draw_samples(self.sampling, self.scrambles or 4, self.seed)
        self.observation_note += (f"; omega on a Gauss-Hermite tensor rule, {self.omega_nodes} "
                                  "nodes per axis (nothing sampled)" +
                                  (f", folded by the sign flips of row groups "
                                   f"{list(self.tensor_folds)}: {self.samples} nodes"
                                   if self.tensor_folds else ""))

    def _observation_channel(self):
        """The channel the map evaluates, at the observation rule's nodes or at sampled
        ``y``: an adaptive rule's tolerance relaxed to
        :data:`~symtheory.glm.se.observation.NODE_RTOL` (its error enters ``Q_hat``
        linearly, per sample or through weights summing to 1, far below the sampling
        error; the default 1e-10 costs ~3-4x more: y = z1 z2 z3, 256 samples, 65 s against
        17 s, Q_hat equal to 1e-15), a rule already at least that loose or anything else
        as configured."""
        from ...core.quadrature import AdaptiveRule
        from .observation import NODE_MIN_LEVEL, NODE_RTOL

        rule = getattr(self.channel, "rule", None)
        if not isinstance(rule, AdaptiveRule) or rule.rtol >= NODE_RTOL:
            return self.channel
        key = (id(self.channel), rule)
        if getattr(self, "_node_channel", (None,))[0] != key:
            relaxed = dataclasses.replace(rule, rtol=NODE_RTOL,
                                          min_level=min(rule.min_level, NODE_MIN_LEVEL))
            self._node_channel = (key, self.channel.configured(self.noise_variance, relaxed))
        return self._node_channel[1]

    def _integrated_products(self, Q):
        """Per sample of ``xi``: ``(E[sum_m g g^T | omega], E[-sum_m dg_mm | omega],
        E[log Z_out | omega], mass)`` by the observation rule, averaged over the sample's
        images under :attr:`symmetries`; also sets :attr:`observation_qhat_error` (the
        change of ``Q_hat`` under the rule's coarse sub-grid, in standard errors)."""
        Q = self._check_Q(Q)
        # the level-set rule's coarse level costs a third more: only where the accuracy
        # is reported (not while solve() iterates)
        with_coarse = self.estimate_channel_error or self.observation_rule.kind != "level set"
        key = (Q.tobytes(), self.samples, self.channel, with_coarse)
        last = getattr(self, "_last_integrated", None)
        if last is not None and last[0] == key:
            return last[1]
        P, n = self.model.P, self.samples
        V = self.rho - Q + self.regularization * np.eye(P)
        sq = psd_sqrt(Q)
        rule = self.observation_rule
        images = [np.eye(P)] + self.symmetries
        fine = np.zeros((4, n, P, P))
        coarse = np.zeros((2, n, P, P))
        errors = []
        for S in images:
            omega = np.einsum("ab,sbm->sam", sq @ S, self.xi)
            if rule.kind == "level set":
                # the rule sums over its own nodes (two levels, Numba)
                f, c = rule.level_set_products(omega, V, coarse=with_coarse)
                for i in range(2):
                    fine[i] += f[i]
                    if with_coarse:
                        coarse[i] += c[i]
                fine[2] += f[2][:, None, None]
                fine[3] += f[3][:, None, None]
                continue
            Y, logw, sub = rule.nodes(omega, V)
            K = Y.shape[1]
            mom = self._observation_channel().moments(Y.reshape(n * K, -1),
                                                      np.repeat(omega, K, axis=0), V)
            if self._observation_channel().last_error is not None:
                errors.append(self._observation_channel().last_error)
            g, dg = mom.output_functions()
            logZ = mom.log_partition.reshape(n, K)
            with np.errstate(under="ignore"):
                W = np.exp(logw + logZ)
            ok = (W > 0).reshape(-1)
            g = np.where(ok[:, None, None], g, 0.0)
            dg = np.where(ok[:, None, None, None, None], dg, 0.0)
            sqk = np.einsum("sam,sbm->sab", g, g).reshape(n, K, P, P)
            twk = -np.einsum("sambm->sab", dg).reshape(n, K, P, P)
            twk = 0.5 * (twk + np.swapaxes(twk, 2, 3))
            bad = ~np.all(np.isfinite(sqk.reshape(n, -1)) & np.isfinite(twk.reshape(n, -1)), axis=1)
            if bad.any():
                raise FloatingPointError(
                    f"g_out is not finite at {bad.sum()} of {n} samples' observation nodes at "
                    f"Q = {Q.tolist()} (channel quadrature failed)")
            fine[0] += np.einsum("sk,skab->sab", W, sqk)
            fine[1] += np.einsum("sk,skab->sab", W, twk)
            fine[2] += np.einsum("sk,sk->s", W, np.where(W > 0, logZ, 0.0))[:, None, None]
            fine[3] += W.sum(axis=1)[:, None, None]
            if sub is not None:
                Wc = np.where(sub[None], 2.0 * W, 0.0)
                coarse[0] += np.einsum("sk,skab->sab", Wc, sqk)
                coarse[1] += np.einsum("sk,skab->sab", Wc, twk)
        fine /= len(images)
        coarse /= len(images)
        self.channel_error = max(errors) if errors else None
        out = (fine[0], fine[1], fine[2][:, 0, 0], fine[3][:, 0, 0])
        #: largest |sum_k w_k Z_out(y_k) - 1| over the samples: the rule's mass defect
        self.observation_mass_error = float(np.max(np.abs(out[3] - 1.0)))
        if rule.kind == "discrete":
            self.observation_qhat_error = 0.0
            self.observation_qhat_change = np.zeros((P, P))
        elif with_coarse:
            # the same combination of the coarse sub-grid's products (its own weights)
            Qc = self._qhat_from_products(coarse[0] / 1.0, coarse[1], 1.0)[0]
            Qf, se = self._qhat_from_products(out[0], out[1], 1.0)[:2]
            free = self.mask > 0
            #: the coarse sub-grid's change of Q_hat / alpha (an error bound of the rule)
            self.observation_qhat_change = np.abs(Qf - Qc) * free
            if self.omega_weights is not None:
                self.observation_qhat_error = None      # no standard error to measure it in
            else:
                floor = max(1e-12 * float(np.max(np.abs(Qf))), 1e-300)
                self.observation_qhat_error = float(np.max(np.abs(Qf - Qc)[free] /
                                                           np.maximum(se[free], floor)))
        self._last_integrated = (key, out)
        return out
