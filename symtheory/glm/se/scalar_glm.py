"""State evolution and free entropy of a generalized linear model with one index, a
separable prior and a scalar channel with finitely many outputs, deterministically.

For ``y ~ P_out(. | w . x / sqrt(d))``, ``w_i ~ P`` i.i.d. (``rho = E w^2``), the
replica-symmetric fixed point is (Barbier, Krzakala, Macris, Miolane & Zdeborova, PNAS
116 (2019), Eqs. (8)-(10); Sec. 4 of Troiani et al., arXiv:2502.00901 with ``P = M = 1``)

    q_hat = alpha Psi(q),  Psi(q) = sum_y E_xi[ Z_out(y; sqrt(q) xi, rho - q) g_out^2 ],
    q     = E[f_in^2](q_hat)   (the prior's overlap map),
    phi   = -q q_hat/2 + psi_P(q_hat) + alpha psi_out(q),
    psi_out(q) = sum_y E_xi[ Z_out log Z_out ],   psi_P(q_hat) = E log Z_P.

It is written here in the error ``V = rho - q`` (no cancellation next to perfect
recovery): ``V = mmse_P(alpha Psi(V))`` with ``mmse_P = E Var(w0 | B)`` and

    phi = q_hat V / 2 + psi_c(q_hat) + alpha psi_out(V),

``psi_c = psi_P - q_hat rho/2`` the prior's centred term
(:meth:`~symtheory.glm.factors.separable_prior.SeparablePrior.error_terms`), exact at any
``q_hat``.  Every fixed point lies on the curve ``alpha(V) = mmse_P^{-1}(V) / Psi(V)``:
its decreasing pieces are the stable branches, its extrema the spinodals
(:mod:`symtheory.glm.thresholds.phases`).  The expectations over ``xi`` are adaptive
quadrature (:func:`~symtheory.core.quadrature.integrate_adaptive`) split where the
channel's jumps sit, ``xi = u_jump / sqrt(q)``; along a branch
``d phi / d alpha = psi_out`` (I-MMSE, the envelope theorem), which the tests check.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from ...core.quadrature import integrate_adaptive
from ...core.result import Result
from ...core.validate import ParameterError
from ..factors.separable_prior import XI_MAX

#: tightest relative tolerance of the channel's expectation: next to a sharp channel
#: front (V -> 0) g_out's float64 evaluation carries ~1e-11 relative noise there (a
#: symmetric door at V = 1.5e-6: the error estimate stalled at 6e-12 relative while
#: halving panels 13 times), below which no rule can go
CHANNEL_RTOL_FLOOR = 1e-10
#: largest q_hat searched by the inverse prior map (mmse underflows far before)
QHAT_MAX = 1e300


class ScalarGlmSE:
    """The deterministic state evolution of a scalar GLM with finitely many outputs (module docstring).

    Written in the error ``V = rho - q``: ``V = mmse_P(alpha Psi(V))`` (Barbier, Krzakala,
    Macris, Miolane & Zdeborova, PNAS 116 (2019), Eqs. (8)-(10); Sec. 4 of Troiani et
    al., arXiv:2502.00901 with ``P = M = 1``), ``alpha = n/d``; expectations by adaptive
    quadrature.

    Parameters
    ----------
    channel : ScalarChannel
        A channel with finitely many outputs (``y_levels``).
    prior : SeparablePrior
        The weights' i.i.d. prior.
    params : tuple of float, optional
        The channel's parameter values, in declaration order.
    rtol : float, optional
        Quadrature tolerance.

    Attributes
    ----------
    rho : float
        ``E w^2``.
    v_max : float
        The uninformed error ``Var w``.

    Examples
    --------
    >>> from symtheory.glm import ScalarGlmSE, sign_channel
    >>> from symtheory.glm.factors.separable_prior import rademacher
    >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
    >>> se.rho, se.v_max
    (1.0, 1.0)
    """

    def __init__(self, channel, prior, params=(), *, rtol: float = 1e-12):
        if channel.levels is None:
            raise ParameterError(f"channel {channel.name!r} has continuous outputs: this "
                                 "state evolution sums over finitely many outputs (declare "
                                 "y_levels)")
        if len(params) != len(channel.params):
            raise ParameterError(f"channel {channel.name!r} takes parameters "
                                 f"{[str(p) for p in channel.params]}, got {len(params)}")
        self.channel, self.prior, self.params = channel, prior, tuple(float(p) for p in params)
        self.rtol = float(rtol)
        self.rho = prior.second_moment
        self.v_max = prior.second_moment - prior.mean ** 2
        sub = dict(zip(channel.params, self.params))
        bps = channel.likelihood.breakpoints if channel.likelihood is not None else ()
        self.jumps = sorted(float(sp.N(sp.sympify(b).subs(sub), 20)) for b in bps)
        self.levels = np.array(channel.levels, dtype=float)
        self.deterministic = self._deterministic(sub)

    def _deterministic(self, sub) -> bool:
        """Whether ``y`` is a function of ``z`` (no output noise, the likelihood 0 or 1):
        then ``Z_out -> 0 or 1`` and ``psi_out -> 0`` exactly at perfect recovery."""
        lik = self.channel.likelihood
        if lik is None or sp.sympify(lik.noise_variance).subs(sub) != 0:
            return False
        prob = lik.probability(self.channel.params)
        u = np.random.default_rng(0).normal(0, 2, 200)
        vals = np.concatenate([np.broadcast_to(prob(level, u, *self.params), u.shape)
                               for level in self.levels])
        return bool(np.all((vals == 0) | (vals == 1)))

    # ------------------------------------------------------------------ channel side
    def channel_terms(self, V):
        """Return ``(Psi, psi_out)`` at the error ``V`` (``q = rho - V``) and their error estimates.

        ``Psi(q) = sum_y E_xi[Z_out g_out^2]``, ``psi_out = sum_y E_xi[Z_out log Z_out]``
        (module docstring), split at the channel's jumps.

        Parameters
        ----------
        V : float
            The error, in ``(0, rho]``.

        Returns
        -------
        tuple
            ``((Psi, psi_out), (Psi_error, psi_out_error))``.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> import math
        >>> (Psi, psi_out), _ = se.channel_terms(1.0)      # q = 0: Psi = 2/pi, psi_out = -log 2
        >>> abs(Psi - 2 / math.pi) < 1e-12, abs(psi_out + math.log(2)) < 1e-12
        (True, True)
        """
        if not (0 < V <= self.rho):
            raise ParameterError(f"V must be in (0, rho = {self.rho}], got {V}")
        q = self.rho - V
        s = math.sqrt(max(q, 0.0))
        ch, L = self.channel, self.levels

        def integrand(x):
            om = np.broadcast_to(s * x[:, None], (len(x), len(L)))
            y = np.broadcast_to(L, om.shape)
            m = ch.moments(y, om, V, *self.params)
            Z = np.exp(m.log_partition)
            g = m.mean_shift / V
            zlogz = np.where(Z > 0, Z * m.log_partition, 0.0)
            dens = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
            return np.stack([np.sum(Z * g * g, axis=1), np.sum(zlogz, axis=1)], axis=1) \
                * dens[:, None]

        if s == 0.0:
            val = integrand(np.zeros(1))[0] * math.sqrt(2 * math.pi)
            return (float(val[0]), float(val[1])), (0.0, 0.0)
        points, widths = self._front_points(s, V)
        # Psi relative (it sets q_hat); psi_out to an absolute 1e-13 (it enters phi = O(1),
        # and log Z_out next to 0 carries absolute rounding)
        val, err, ok = integrate_adaptive(integrand, -XI_MAX, XI_MAX,
                                          rtol=max(self.rtol, CHANNEL_RTOL_FLOOR),
                                          atol=np.array([1e-300, 1e-13]), points=points,
                                          widths=widths)
        if not ok:
            raise ArithmeticError(f"channel expectation at V = {V} did not reach rtol "
                                  f"{self.rtol:g}")
        return (float(val[0]), float(val[1])), (float(err[0]), float(err[1]))

    def _front_points(self, s, V):
        """Each jump of the channel (``xi = u/sqrt(q)``) with its front's width
        ``sqrt(V/q)`` (a jump of ``P_out`` smoothed over ``sqrt(V)`` in ``u``), for the
        adaptive rule's graded panels: its nodes would straddle a front far narrower than a
        panel and see nothing."""
        centres = [u / s for u in self.jumps if abs(u / s) < XI_MAX]
        return centres, [math.sqrt(V) / s] * len(centres)

    # ------------------------------------------------------------------ prior side
    def mmse(self, qhat):
        """Return the prior's MMSE ``mmse_P(q_hat) = E Var(w0 | B)``.

        Parameters
        ----------
        qhat : float
            Precision ``q_hat`` (>= 0).

        Returns
        -------
        float
            The MMSE (``v_max`` at 0).

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> import numpy as np
        >>> from numpy.polynomial.hermite_e import hermegauss
        >>> t, g = hermegauss(160)                  # 1 - E tanh(q_hat + sqrt(q_hat) z), q_hat = 1
        >>> bool(abs(se.mmse(1.0) - (1 - g @ np.tanh(1 + t) / g.sum())) < 1e-12)
        True
        """
        return self.prior.error_terms(qhat)[0][0]

    def inverse_mmse(self, V, guess=None):
        """Return ``q_hat`` with ``mmse_P(q_hat) = V``, by Brent in ``log q_hat`` to 1e-15.

        ``mmse_P`` decreases from ``v_max`` at 0; the bracket starts from ``guess`` (e.g. the
        last point of a curve) or from 1, widened by factors of ``e^4``.

        Parameters
        ----------
        V : float
            The error, in ``(0, v_max)``.
        guess : float, optional
            A nearby ``q_hat``.

        Returns
        -------
        float
            ``q_hat``.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> round(se.inverse_mmse(se.mmse(1.0)), 10)
        1.0
        """
        from scipy.optimize import brentq

        if not (0 < V < self.v_max):
            raise ParameterError(f"V must be in (0, v_max = {self.v_max}), got {V}")
        centre = math.log(guess) if guess else 0.0
        step = 0.25 if guess else 4.0

        def h(t):    # an mmse that underflows to 0 counts as below any V
            return math.log(max(self.mmse(math.exp(t)), 5e-324)) - math.log(V)

        lo, hi = centre - step, centre + step
        h_lo, h_hi = h(lo), h(hi)
        while h_lo <= 0:
            lo, step = lo - step, 2 * step
            h_lo = h(lo)
            if lo < -700:
                raise ArithmeticError(f"no q_hat > e^-700 with mmse above V = {V}")
        while h_hi >= 0:
            hi, step = hi + step, 2 * step
            h_hi = h(hi)
            if math.exp(min(hi, 700)) > QHAT_MAX or hi > 700:
                raise ArithmeticError(f"mmse stays above V = {V} up to q_hat = {QHAT_MAX:g}")
        return math.exp(brentq(h, lo, hi, xtol=1e-15, rtol=1e-15))

    # ------------------------------------------------------------------ the curve
    def point(self, V, qhat_guess=None) -> dict:
        """Return the fixed point with error ``V``: its ``alpha``, ``q_hat`` and free entropy.

        Every fixed point lies on the curve ``alpha(V) = mmse_P^(-1)(V) / Psi(V)``; ``phi =
        q_hat V / 2 + psi_c(q_hat) + alpha psi_out(V)`` with ``phi_error`` from the
        quadratures' error estimates.

        Parameters
        ----------
        V : float
            The error, in ``(0, v_max)``.
        qhat_guess : float, optional
            A nearby ``q_hat`` (bracket of :meth:`inverse_mmse`).

        Returns
        -------
        dict
            ``V, q, alpha, qhat, Psi, psi_out, phi, phi_error``.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> pt = se.point(0.5)

        Against the sign channel's q_hat written out (``V = q = 1/2``, ``omega ~ N(0, q)``):
        ``q_hat = alpha E_omega sum_y phi(omega/sqrt V)^2 / (V Phi(y omega/sqrt V))``, and the
        prior's MMSE at ``q_hat`` is ``V`` (Gauss-Hermite 160, converged to 1e-15):

        >>> import math
        >>> import numpy as np
        >>> from numpy.polynomial.hermite_e import hermegauss
        >>> from scipy.stats import norm
        >>> t, g = hermegauss(160)
        >>> g = g / g.sum()
        >>> w = t            # omega / sqrt(V) with q = V = 1/2
        >>> per_alpha = g @ sum(norm.pdf(w) ** 2 / (0.5 * norm.cdf(y * w)) for y in (1, -1))
        >>> mmse = 1 - g @ np.tanh(pt["qhat"] + math.sqrt(pt["qhat"]) * t)
        >>> bool(abs(pt["alpha"] - pt["qhat"] / per_alpha) < 1e-12), bool(abs(mmse - 0.5) < 1e-12)
        (True, True)
        """
        qhat = self.inverse_mmse(V, qhat_guess)
        (Psi, psi_out), (Psi_err, psi_out_err) = self.channel_terms(V)
        (_, psi_c), (_, psi_c_err) = self.prior.error_terms(qhat)
        alpha = qhat / Psi if Psi > 0 else math.inf
        phi = qhat * V / 2 + psi_c + alpha * psi_out
        # the quadratures' error estimates, to first order (alpha = q_hat / Psi carries
        # Psi's relative error)
        phi_err = psi_c_err + abs(alpha) * (psi_out_err + abs(psi_out) * Psi_err / Psi) \
            if Psi > 0 else math.inf
        return {"V": V, "q": self.rho - V, "alpha": alpha, "qhat": qhat, "Psi": Psi,
                "psi_out": psi_out, "phi": phi, "phi_error": phi_err}

    def map_slope(self, alpha, V, rel_step=1e-4) -> float:
        """Return ``T'(V)`` of the SE map ``T(V) = mmse_P(alpha Psi(V))`` at fixed ``alpha``.

        The Jacobian's eigenvalue (``P = 1``), which crosses 1 at a spinodal.  Central
        differences (one-sided at ``v_max``) with step ``rel_step V``: truncation
        ``O(rel_step^2)``, rounding ``~ rtol / rel_step``.

        Parameters
        ----------
        alpha : float
            Sample ratio ``n/d``.
        V : float
            The error.
        rel_step : float, optional
            Relative difference step.

        Returns
        -------
        float
            ``T'(V)``.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> round(se.map_slope(1.0, 0.5), 4)           # < 1: locally stable
        0.3536
        """
        h = rel_step * V

        def T(v):
            return self.mmse(alpha * self.channel_terms(v)[0][0])
        if V + h < self.v_max:
            return (T(V + h) - T(V - h)) / (2 * h)
        return (3 * T(V) - 4 * T(V - h) + T(V - 2 * h)) / (2 * h)

    def alpha_of(self, V) -> float:
        """Return the ``alpha`` at which ``V`` is a fixed point (``point(V)["alpha"]``).

        Parameters
        ----------
        V : float
            The error, in ``(0, v_max)``.

        Returns
        -------
        float
            ``alpha(V)``.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> import math
        >>> import numpy as np
        >>> from numpy.polynomial.hermite_e import hermegauss
        >>> from scipy.stats import norm
        >>> t, g = hermegauss(160)                  # q_hat written out, as in point()
        >>> g = g / g.sum()
        >>> per_alpha = g @ sum(norm.pdf(t) ** 2 / (0.5 * norm.cdf(y * t)) for y in (1, -1))
        >>> bool(abs(se.alpha_of(0.5) - se.point(0.5)["qhat"] / per_alpha) < 1e-12)
        True
        """
        return self.point(V)["alpha"]

    def trivial_point(self, alpha) -> dict:
        """Return the uninformed fixed point ``q = mean^2``: ``phi = alpha psi_out(v_max)``.

        A fixed point when the channel learns nothing there (``Psi(v_max) = 0``, e.g. an even
        channel).

        Parameters
        ----------
        alpha : float
            Sample ratio ``n/d``.

        Returns
        -------
        dict
            ``V, q, alpha, qhat, Psi, psi_out, phi``.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> se.trivial_point(0.5)["q"]
        0.0
        """
        (Psi, psi_out), _ = self.channel_terms(self.v_max)
        return {"V": self.v_max, "q": self.rho - self.v_max, "alpha": alpha, "qhat": 0.0,
                "Psi": Psi, "psi_out": psi_out, "phi": alpha * psi_out}

    def solve(self, alpha, V0=None, *, tol=1e-14, max_iter=10000) -> Result:
        """Return the fixed point reached by iterating ``V <- mmse_P(alpha Psi(V))`` from ``V0``.

        With the package's fixed-point engine (:func:`~symtheory.core.solvers.fixed_point`).

        Parameters
        ----------
        alpha : float
            Sample ratio ``n/d`` (finite, > 0).
        V0 : float, optional
            Start (default ``v_max``, the uninformed start).
        tol : float, optional
            Residual tolerance.
        max_iter : int, optional
            Iteration cap.

        Returns
        -------
        Result
            ``value`` the error ``V`` at the fixed point, with the solve's report.

        Examples
        --------
        >>> from symtheory.glm import ScalarGlmSE, sign_channel
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> se = ScalarGlmSE(sign_channel(noise=False), rademacher())     # binary perceptron
        >>> res = se.solve(1.0)       # V re-derived by mpmath in tests/glm/test_phases_mp.py
        >>> round(res.value, 8), res.converged
        (0.43928526, True)
        >>> se.solve(1.7).value                        # beyond alpha_alg = 1.49: perfect recovery
        0.0
        """
        from ...core.solvers import fixed_point

        alpha = float(alpha)
        if not (math.isfinite(alpha) and alpha > 0):
            raise ParameterError(f"alpha must be finite and > 0, got {alpha}")
        V0 = self.v_max if V0 is None else float(V0)

        def step(v):
            v = float(np.clip(v, 1e-300, self.v_max))
            return self.mmse(alpha * self.channel_terms(v)[0][0])

        res = fixed_point(step, V0, tol=tol, maxiter=max_iter, damping=0.0,
                          project=lambda v: np.clip(v, 0.0, self.v_max),
                          name=f"scalar GLM SE at alpha={alpha:g}", warn=False)
        return Result(value=float(res.value), converged=res.converged,
                      iterations=res.iterations, residual=res.residual,
                      method="iteration of V <- mmse_P(alpha Psi(V))", message=res.message)
