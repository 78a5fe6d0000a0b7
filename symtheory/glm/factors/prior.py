"""The one prior interface: what GAMP and state evolution need from a weight prior.

The weights are ``P`` rows over ``p`` coordinates.  GAMP sees each coordinate's column
``w`` (a ``P``-vector) through the Gaussian input channel
``exp(-w^T A w / 2 + b^T w)`` (``A`` a ``P x P`` precision shared by the coordinates,
``b`` the coordinate's column of ``B``); the prior's *input functions* are the posterior
mean of ``w`` and its covariance, averaged over coordinates (Rangan, ISIT 2011;
Algorithm 1 of Troiani et al., arXiv:2502.00901).  State evolution sees the prior through
the overlap map ``Q = F(Q_hat) = E[f_in f_in^T]`` at ``A = Q_hat`` and its free-entropy
term ``psi(Q_hat)`` (Eqs. 13-14 and Sec. 4 of Troiani et al.).

=========================  ==============================================================
method                     what it returns
=========================  ==============================================================
``input_functions(A, B)``  ``(f_in (P, p), its variance (P, P))``: GAMP's estimate
``rho(P)``                 the prior's second moment ``E[w w^T]``
``overlap_map(Q_hat)``     ``Q = F(Q_hat)``, the SE's prior map
``psi(Q_hat)``             the prior's free-entropy term
``inverse_overlap_map``    ``Q_hat = F^{-1}(Q)``
``overlap_map_derivative`` ``dF(Q_hat)[H]`` where derived (else ``None``)
=========================  ==============================================================

A prior that cannot give one of them (a denoiser known only through its action, a
layer-wise spectral prior without a free entropy) raises ``NotImplementedError`` naming
what is missing, never a silent approximation.  Implementations:
:class:`~symtheory.glm.factors.gaussian_prior.GaussianPrior` (derived from its
log-partition), :class:`DenoiserPrior` (a separable denoiser per row, e.g. the spectral
denoisers of :mod:`.spectral_priors`), :class:`SideInformation` (a prior seen together
with a Gaussian side observation) and
:class:`~symtheory.glm.factors.spectral_priors.LayerwiseMatrixPrior`.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


class Prior:
    """A weight prior (module docstring).  Subclasses implement what they can."""

    #: input functions need ``A_aa > 0`` (a denoiser at noise ``1/A``); GAMP checks it
    positive_precision = False

    def _missing(self, what):
        return NotImplementedError(f"{type(self).__name__} does not provide {what}")

    def input_functions(self, A, B):
        """``(f_in (P, p), variance (P, P))`` for the input channel ``(A, B)``."""
        raise self._missing("input functions (GAMP)")

    def rho(self, P):
        """The second moment ``E[w w^T]`` (``P x P``)."""
        raise self._missing("its second moment rho")

    def overlap_map(self, Qhat):
        """``Q = F(Q_hat)``, the state evolution's prior map."""
        raise self._missing("an overlap map (state evolution)")

    def psi(self, Qhat):
        """The prior's free-entropy term ``psi(Q_hat)``."""
        raise self._missing("a free-entropy term psi")

    def inverse_overlap_map(self, Q):
        """``Q_hat = F^{-1}(Q)`` (the ``alpha`` at which ``Q`` is a fixed point)."""
        raise self._missing("an inverse overlap map")

    def overlap_map_derivative(self, Qhat, H):
        """Return the directional derivative ``dF(Q_hat)[H]``, or ``None`` when not derived.

        The state evolution then differences :meth:`overlap_map`.

        Parameters
        ----------
        Qhat : numpy.ndarray
            The ``P x P`` ``Q_hat``.
        H : numpy.ndarray
            Symmetric direction of the same shape.

        Returns
        -------
        numpy.ndarray or None
            The derivative; ``None`` for a prior without a derived one.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory.glm.factors.separable_prior import rademacher
        >>> prior = rademacher()                       # w = +-1, SeparablePrior
        >>> prior.overlap_map_derivative(np.eye(1), np.eye(1)) is None
        True
        """
        return None


class DenoiserPrior(Prior):
    """A prior known through a denoiser per row: ``f_in`` is the denoiser of
    ``R_a = B_a / A_aa`` at noise variance ``1/A_aa`` (the diagonal of ``A``: rows
    independent a priori).  ``denoise(R (P, p), noise (P,)) -> (estimate (P, p),
    variance (P,))``, the variance being the denoiser's predicted error per coordinate
    (e.g. its divergence times the noise, the Onsager coefficient)."""

    positive_precision = True

    def __init__(self, denoise: Callable, *, name: str = "denoiser"):
        self.denoise = denoise
        self.name = name

    def input_functions(self, A, B):
        a = np.diag(np.asarray(A, dtype=float))
        if not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"A = {a.tolist()} (must be positive and finite)")
        noise = 1.0 / a
        x, v = self.denoise(np.asarray(B, dtype=float) * noise[:, None], noise)
        v = np.broadcast_to(np.asarray(v, dtype=float), a.shape)
        return np.asarray(x, dtype=float).reshape(np.shape(B)), np.diag(v)


class SideInformation(Prior):
    """``prior`` seen together with a Gaussian side observation ``S = sqrt(lam) W* + Xi``
    (Sec. 6 of Troiani et al., arXiv:2502.00901): the input channel gains ``lam I`` in
    precision and ``sqrt(lam) S`` in field, and the SE's ``Q_hat`` gains ``lam I``."""

    def __init__(self, prior: Prior, lam: float, observation=None):
        if not (math.isfinite(lam) and lam >= 0):
            raise ValueError(f"side_information must be finite and >= 0, got {lam}")
        self.prior, self.lam = prior, float(lam)
        self.observation = None if observation is None else np.asarray(observation, float)
        self.positive_precision = prior.positive_precision

    def input_functions(self, A, B):
        if self.observation is None:
            raise ValueError("input functions with side information need the observation S")
        P = np.shape(A)[0]
        return self.prior.input_functions(A + self.lam * np.eye(P),
                                          B + math.sqrt(self.lam) * self.observation)

    def rho(self, P):
        return self.prior.rho(P)

    def overlap_map(self, Qhat):
        return self.prior.overlap_map(Qhat + self.lam * np.eye(len(Qhat)))

    def psi(self, Qhat):
        return self.prior.psi(Qhat + self.lam * np.eye(len(Qhat)))
