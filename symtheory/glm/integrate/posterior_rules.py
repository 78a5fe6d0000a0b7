"""Posterior moments of reduced deterministic channels with a
rule that follows the posterior (used by :mod:`symtheory.glm.thresholds.weak_recovery`).

The channel integral of Troiani et al., arXiv:2502.00901, Corollary E.1, over the free rows ``u``,

    Z = sum_k int du N(u; omega_u, V_uu) N(X_k(u); mu_{h|u}, C_{h|u}) |det T(u)|^{-r} e^{lw_k},
    T(u) X_k(u) = E^(k)   (X_k = h^T, the solved rows),

is computed as ``sum_c E_{N_c}[ h_c(u) pi(u) / N_c(u) ]`` over the components of the
mixture ``sum_c pi_c N_c``, with the shares ``h_c = (pi_c N_c)^b / sum_c' (pi_c'
N_c')^b`` (the power heuristic of multiple importance sampling, Veach & Guibas 1995;
``b = 1`` is the balance heuristic ``h_c = pi_c N_c / q``): component 0 is the Gaussian
marginal of ``u`` (the rule of :class:`~symtheory.glm.factors.reduced.ReducedChannel`), the
others are Gaussians at the local maxima of the integrand (found by Newton's method from
given starts and, when those leave a peak to find, from the best nodes of component 0)
with the inverse Hessian, inflated, as covariance.  The decomposition is exact for any
mixture, since the shares sum to 1; the peaks only make each share's integrand smooth
when the solved rows are nearly known (``C_{h|u} -> 0``: the integrand concentrates on
the discrete preimages of ``u -> X(u)``), where a rule over the prior misses
them.  With ``b = 2`` the prior component's share falls off quadratically inside a peak,
so its nodes, spaced on the prior's scale, no longer hit the peak by chance.  Each
component is integrated by the tensor Gauss-Hermite nodes ``tn, tw``.

The drivers are in :mod:`symtheory.glm.integrate.drivers.posterior`.
"""
