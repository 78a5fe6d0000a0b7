"""Noiseless multi-index channels by a deterministic reduction (Troiani et al.,
arXiv:2502.00901, Sec. 9 and Corollary E.1).

``y = head(E)`` with ``E = T(u) h^T``, ``u`` the freely integrated rows (earlier
layers), ``h`` the solved rows (last layer).  SymPy solves ``head(E) = y`` for the
branches ``E^(k)(y)`` and derives the output Jacobian ``|det d y_obs / d E|``; the
reduced integral over ``u`` (Gaussian marginal of ``u`` times the conditional of ``h``
given ``u``, per token) is one generated Numba pass returning ``(log Z, E[z], Cov[z])``:

    Z_out = sum_k E_u[ N(T(u)^{-1} E^(k); mean_{h|u}, C_{h|u}) / (|det T(u)|^r |det dy/dE (E^(k))|) ].
"""
from __future__ import annotations

import math

import numpy as np

from ...core._moments_nb import moment_change_batch
from ...core.codegen import Kernel
from ...core.quadrature import TensorRule
from ...core.validate import ParameterError
from ..integrate.drivers import reduced as reduced_drivers
from ..integrate.moments import Moments
from .channel import MultiIndexChannel


class ReducedChannel(MultiIndexChannel):
    """Noiseless channel by the reduction of Troiani et al., arXiv:2502.00901, Corollary E.1 (see module docstring).

    The reduced integral over the free rows uses a :class:`TensorRule` (default
    Gauss-Hermite 30 per axis); each call records the change against the rule with half
    as many nodes per axis in :attr:`last_accuracy` (an over-estimate of the error)."""

    def _default_rule(self):
        return TensorRule()

    def __init__(self, model):
        super().__init__(model)
        red = model.reduction
        self.free_rows = np.array(model.free_rows, dtype=np.int64)
        self.solved_rows = np.array(model.solved_rows, dtype=np.int64)
        self.r = len(model.solved_rows)
        Y = model.output_symbols
        branches = model.derive_branches()
        self.n_branches = len(branches)
        pars = list(model.param_symbols)
        self.branch_kernel = Kernel(f"mi_{model.name}_branches", list(Y) + pars,
                                    [e for Ek in branches for e in Ek], vector_args=list(Y),
                                    doc=f"inversion branches y -> E of {model.name}")
        Es = list(red.E)
        self.head_kernel = Kernel(f"mi_{model.name}_head", Es + pars,
                                  list(red.head) + [model.derive_output_jacobian()],
                                  vector_args=Es,
                                  doc=f"head(E) and det d y_obs/dE of {model.name}")
        u_syms = [model.indices[a, m] for a in model.free_rows for m in range(model.M)]
        self.mixing_kernel = Kernel(
            f"mi_{model.name}_mixing", u_syms + pars, list(red.mixing),
            doc=f"mixing matrix T(u) of {model.name}",
            packed=(len(self.free_rows), self.M))

    def branches(self, y):
        """Per sample: ``E`` of each branch ``(n, K, M r)``, ``log|det|`` and validity."""
        y = np.asarray(y, dtype=float)
        n = y.shape[0]
        cols = [y[:, i] for i in range(y.shape[1])]
        pv = list(self.model.params.values())
        Mr = self.M * self.r
        E = self.branch_kernel.vec(*cols, *pv).reshape(n, self.n_branches, Mr)
        logjac = np.zeros((n, self.n_branches))
        valid = np.zeros((n, self.n_branches), dtype=np.int64)
        scale = 1.0 + np.sum(y * y, axis=1)
        for k in range(self.n_branches):
            Ek = E[:, k, :]
            ok = np.all(np.isfinite(Ek), axis=1)
            Es = np.where(ok[:, None], Ek, 0.0)
            hj = self.head_kernel.vec(*[Es[:, i] for i in range(Mr)], *pv)
            resid = np.sum((hj[:, :-1] - y) ** 2, axis=1)
            jac = np.abs(hj[:, -1])
            # the branch must explain y (|head(E^(k)) - y| <= 1e-9) and be regular
            ok &= (resid <= 1e-18 * scale) & (jac > 0) & np.isfinite(jac)
            valid[:, k] = ok
            logjac[:, k] = np.where(ok, np.log(np.where(ok, jac, 1.0)), 0.0)
        return np.ascontiguousarray(np.where(np.isfinite(E), E, 0.0)), logjac, valid

    def moments(self, y, omega, V, *, include_jacobian=True):
        """``(log Z_out (n,), E[Z|y] (n, P, M), Cov (n, P M, P M))``, index ``a M + m``.

        ``log Z_out`` is the log-density of ``y`` in the observed coordinates; with
        ``include_jacobian=False`` the factor ``1/|det dy/dE|`` is left out (it depends on
        ``y`` only, so its expectation does not depend on the overlap; the moments are
        unchanged when all branches share it, as for sign-symmetric preimages)."""
        y, omega, V = self._prep(y, omega, V)
        n = omega.shape[0]
        E, logjac, valid = self.branches(y)
        if not include_jacobian:
            logjac = np.zeros_like(logjac)
        free, solved = list(self.model.free_rows), list(self.model.solved_rows)
        Vuu = V[np.ix_(free, free)]
        Vhu = V[np.ix_(solved, free)]
        Vhh = V[np.ix_(solved, solved)]
        if free:
            Luu = np.linalg.cholesky(Vuu)
            B = Vhu @ np.linalg.inv(Vuu)
            C = Vhh - B @ Vhu.T
        else:
            Luu = np.zeros((0, 0))
            B = np.zeros((self.r, 0))
            C = Vhh
        C = 0.5 * (C + C.T)
        Cinv = np.linalg.inv(C)
        logdetC = float(np.linalg.slogdet(C)[1])
        args = (E, logjac, valid, omega, np.ascontiguousarray(Luu), np.ascontiguousarray(B),
                np.ascontiguousarray(Cinv), logdetC)
        if not isinstance(self.rule, TensorRule):
            raise ParameterError("the reduced channel integrates with a TensorRule, got "
                                 f"{self.rule!r}")
        logZ, mean, cov = self._reduced_pass(self.rule, *args)
        coarse = self._reduced_pass(self.rule.coarsened(), *args)
        sd = np.sqrt(np.repeat(np.diag(V), self.M))
        err = moment_change_batch(coarse[0], coarse[1], coarse[2], logZ, mean, cov, sd)
        self._record(f"reduction (Corollary E.1) + {self.rule.describe()}; error = change vs "
                     f"{self.rule.coarsened().describe()}", math.inf, err)
        return Moments.from_posterior(logZ, mean, cov, omega, V)

    def _reduced_pass(self, rule, E, logjac, valid, omega, Luu, B, Cinv, logdetC):
        n = omega.shape[0]
        tn, tw = rule.nodes(len(self.model.free_rows) * self.M)
        keep = tw > 0                    # nodes whose weight underflowed carry nothing
        tn, tw = np.ascontiguousarray(tn[keep]), np.ascontiguousarray(tw[keep])
        # node layout of the driver: t[j, b M + m]
        logZ = np.empty(n)
        mean = np.empty((n, self.P * self.M))
        cov = np.empty((n, self.P * self.M, self.P * self.M))
        pars = np.array(list(self.model.params.values()), dtype=float)
        drive = self.mixing_kernel.drivers(reduced_drivers.build).reduced
        drive(E, logjac, valid, omega, pars, self.free_rows, self.solved_rows, Luu, B, Cinv,
              logdetC, tn, tw, logZ, mean, cov)
        return logZ, mean, cov


