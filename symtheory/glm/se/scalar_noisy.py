"""Deterministic state evolution of a one-index model with one noisy output (``P = M = 1``).

For ``y = g(z) + sqrt(Delta) xi`` the whole SE map is a two-dimensional integral
(Eqs. (13)-(14) of Troiani et al., arXiv:2502.00901 at ``P = M = 1``),

    Q_hat(Q) = alpha E_omega int dy Z_out(y | omega, V) g_out(y, omega, V)^2,
    omega ~ N(0, Q), V = rho - Q,   Q = F_prior(Q_hat),

so nothing need be sampled: ``omega = sqrt(Q) x`` by probabilists' Gauss-Hermite in ``x``
and ``y`` given ``omega`` by the generic estimator's own observation rule (the trapezoid
y-grid of :class:`~symtheory.glm.se.observation.ObservationRule`, with the channel's
adaptive rule at its nodes), i.e. the same per-``omega`` conditional expectations the
generic :class:`~symtheory.glm.se.state_evolution.StateEvolution` computes with
``observation='integrate'``, with its RQMC design over ``omega`` replaced by a
deterministic rule.  The fixed point is found by Brent's method on ``Q - F(Q_hat(Q))``
(a one-dimensional root: no Jacobian, no difference step); its error estimate is the
change of the root when the ``omega`` rule is halved (the coarser rule's error, an
over-estimate of the finer one's for a converging rule) plus the channel's stated
tolerance carried through.
"""
from __future__ import annotations


import numpy as np

from ...core.quadrature import gauss_hermite
from ...core.validate import ParameterError

#: Gauss-Hermite nodes over omega (the error estimate halves it): y = |z| + sqrt(0.2) xi at
#: Q = 0.4475 changes E g^2 by 6e-4, 4e-5, 1e-6 from 24 -> 48 -> 96 -> 192 nodes (measured)
OMEGA_NODES = 128
#: Brent's tolerance on Q (far below the rule's error)
ROOT_XTOL = 1e-13


class ScalarNoisySE:
    """The deterministic SE of a ``P = M = 1`` model with one noisy output (module docstring).

    Parameters
    ----------
    model : MultiIndexModel
        ``P = M = 1``, one output.
    alpha : float
        Sample ratio ``n/d`` (> 0).
    noise_variance : float
        Output noise ``Delta`` (> 0).
    omega_nodes : int, optional
        Gauss-Hermite nodes over ``omega`` (>= 8).

    Examples
    --------
    >>> import sympy as sp
    >>> from symtheory.glm import MultiIndexModel
    >>> from symtheory.glm.se.scalar_noisy import ScalarNoisySE
    >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
    >>> se = ScalarNoisySE(MultiIndexModel("ident_sn", z, z), 1.0, 0.5, omega_nodes=16)
    >>> res = se.solve()       # linear: Q = Q_hat/(1 + Q_hat), Q_hat = alpha/(Delta + 1 - Q)
    >>> round(res["Q"], 8), res["error"] < 1e-8
    (0.5, True)
    """

    def __init__(self, model, alpha, noise_variance, *, omega_nodes=OMEGA_NODES):
        from .state_evolution import StateEvolution

        if model.P * model.M != 1 or len(model.link) != 1:
            raise ParameterError(f"model: ScalarNoisySE needs P = M = 1 and one output, got "
                                 f"P = {model.P}, M = {model.M}, {len(model.link)} outputs")
        if noise_variance is None or not (np.isfinite(noise_variance) and noise_variance > 0):
            raise ParameterError(f"noise_variance must be finite and > 0, got {noise_variance}")
        if isinstance(omega_nodes, bool) or not isinstance(omega_nodes, (int, np.integer)) \
                or omega_nodes < 8:
            raise ParameterError(f"omega_nodes must be an integer >= 8, got {omega_nodes!r}")
        self.model, self.alpha, self.noise_variance = model, float(alpha), float(noise_variance)
        self.omega_nodes = int(omega_nodes)
        # the generic estimator (its channel, observation rule and conditional expectations);
        # only its omega design is replaced
        self.se = StateEvolution(model, alpha, samples=2, noise_variance=noise_variance,
                                 observation="integrate", estimator="square",
                                 sampling="rqmc")      # its xi replaced below
        self.rho = float(self.se.rho[0, 0])
        self.evaluations = 0

    def qhat(self, Q, nodes=None):
        """``Q_hat(Q)`` by Gauss-Hermite (``nodes``, default :attr:`omega_nodes`) over
        ``omega`` and the observation rule over ``y``."""
        n = self.omega_nodes if nodes is None else int(nodes)
        x, w = gauss_hermite(n)
        se = self.se
        se.xi = x.reshape(n, 1, 1)
        se.samples = n
        se._last_integrated = None
        sq = se._integrated_products(np.array([[float(Q)]]))[0][:, 0, 0]
        self.evaluations += 1
        return self.alpha * float(w @ sq)

    def _residual(self, Q, nodes):
        qh = self.qhat(Q, nodes)
        return Q - float(self.se.prior.overlap_map(np.array([[qh]]))[0, 0])

    def solve(self, bracket=(0.0, None)):
        """Return ``{Q, Q_hat, error, Q_coarse, evaluations, note}``: the largest root of
        ``Q = F(Q_hat(Q))`` in the bracket (Brent), at :attr:`omega_nodes` and half of it;
        ``error`` = ``|Q - Q_coarse|`` + the channel tolerance carried through the map
        (:data:`~symtheory.glm.se.observation.NODE_RTOL` times ``F'`` ``Q_hat``)."""
        from scipy.optimize import brentq

        from .observation import NODE_RTOL

        lo = float(bracket[0])
        hi = float(bracket[1]) if bracket[1] is not None else self.rho * (1 - 1e-9)
        roots = {}
        for n in (self.omega_nodes // 2, self.omega_nodes):
            f_lo, f_hi = self._residual(lo, n), self._residual(hi, n)
            if f_lo * f_hi > 0:
                raise ArithmeticError(f"no sign change of Q - F(Q_hat(Q)) on [{lo}, {hi}] "
                                      f"({f_lo:.3g}, {f_hi:.3g}): give a bracket")
            roots[n] = brentq(self._residual, lo, hi, args=(n,), xtol=ROOT_XTOL, rtol=1e-14)
        Q = roots[self.omega_nodes]
        qh = self.qhat(Q)
        slope = float(self.se.prior.overlap_map_derivative(np.array([[qh]]),
                                                          np.array([[1.0]]))[0, 0])
        err = abs(Q - roots[self.omega_nodes // 2]) + NODE_RTOL * qh * slope
        return {"Q": Q, "Q_hat": qh, "error": err, "Q_coarse": roots[self.omega_nodes // 2],
                "evaluations": self.evaluations,
                "note": (f"deterministic: Gauss-Hermite {self.omega_nodes} over omega x "
                         f"{self.se.observation_rule.describe()}; error = change vs "
                         f"{self.omega_nodes // 2} omega nodes + channel rtol {NODE_RTOL:g}")}
