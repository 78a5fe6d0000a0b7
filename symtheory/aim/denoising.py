"""Matrix denoising of the AIM's tied prior ``S``: the symmetric RIE (aim.md 3.1).

``S`` (width ratio ``rho``, ``Q0 = 1 + rho``) observed as ``S + sqrt(D) Z``, ``Z`` GOE:
its Bayes-optimal MMSE in float64 and, as the independent path, in mpmath, and the
estimator itself on a matrix.  The kernels are those of :func:`symtheory.aim.theory.theory`;
the state evolution reads the same MMSE through :func:`symtheory.aim.theory.spectral_prior`.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import validate
from ..glm.se.spectral import exact_mpf
from .theory import theory


def mmse_denoising(rho, D, *, rtol=1e-11) -> float:
    """Return the MMSE ``(1/d) E||S_hat - S||_F^2`` of the symmetric RIE at noise ``D`` (aim.md 3.1).

    ``S`` is the tied prior of width ratio ``rho`` (``Q0 = 1 + rho``), observed as
    ``S + sqrt(D) Z`` with ``Z`` GOE (semicircle on ``[-2, 2]``).

    Parameters
    ----------
    rho : float
        Width ratio ``r/d`` (> 0, ``inf`` allowed: ``D/(1 + D)``).
    D : float
        Noise variance (> 0).
    rtol : float, optional
        Relative tolerance of the quadrature.

    Returns
    -------
    float
        The MMSE.

    Examples
    --------
    >>> from symtheory import aim
    >>> round(aim.mmse_denoising(0.5, 0.1), 12)
    0.066541493203
    """
    rho = validate.real("rho", rho, low=0, low_open=True, allow_inf=True)
    D = validate.real("D", D, low=0, low_open=True)
    th = theory()
    if math.isinf(rho):
        return float(th.rho_inf_mmse(D)[0])
    return th.prior.mmse((math.sqrt(rho),), D, rtol=rtol)


def mmse_denoising_mp(rho, D, dps=30):
    """Return :func:`mmse_denoising` computed in mpmath at ``dps`` digits: the independent path.

    Parameters
    ----------
    rho : float
        Width ratio ``r/d`` (> 0, ``inf`` allowed); floats are read by their shortest
        repr (:func:`~symtheory.glm.se.spectral.exact_mpf`).
    D : float
        Noise variance (> 0).
    dps : int, optional
        Decimal digits of the working precision.

    Returns
    -------
    mpmath.mpf
        The MMSE.

    Examples
    --------
    >>> from symtheory import aim
    >>> v = aim.mmse_denoising_mp(0.5, 0.1, dps=20)
    >>> abs(float(v) - aim.mmse_denoising(0.5, 0.1)) < 1e-12
    True
    """
    import mpmath

    with mpmath.workdps(dps):
        rho_m, D_m = exact_mpf(rho), exact_mpf(D)
        if mpmath.isinf(rho_m):
            return theory().rho_inf_mmse.mp(D_m)[0]
        return theory().prior.mmse_mp((mpmath.sqrt(rho_m),), D_m, dps=dps)


def rie_denoise(R, rho, D):
    """Return the symmetric RIE estimate of ``S`` from ``R = S + sqrt(D) Z`` (aim.md 3.1).

    ``Z`` GOE with semicircle on ``[-2, 2]``; eigenvalues outside the limiting support use
    the physical branch of the Hilbert transform.

    Parameters
    ----------
    R : array_like
        The observed symmetric ``d x d`` matrix.
    rho : float
        Width ratio ``r/d`` of ``S`` (> 0).
    D : float
        Noise variance (> 0).

    Returns
    -------
    numpy.ndarray
        The estimate ``S_hat`` (``d x d``).

    Examples
    --------
    >>> import numpy as np
    >>> from symtheory import aim
    >>> rng = np.random.default_rng(0)
    >>> d, r, D = 200, 100, 0.1
    >>> W = rng.standard_normal((d, r))
    >>> S = W @ W.T / np.sqrt(r * d)                 # (1/d) E||S||^2 = 1 + rho
    >>> G = rng.standard_normal((d, d))
    >>> R = S + np.sqrt(D) * (G + G.T) / np.sqrt(2 * d)
    >>> S_hat = aim.rie_denoise(R, rho=r / d, D=D)
    >>> round(float(np.sum((S_hat - S) ** 2)) / d, 2), round(aim.mmse_denoising(0.5, D), 2)
    (0.07, 0.07)
    """
    R = np.asarray(R, dtype=float)
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise validate.ParameterError(f"R must be a square matrix, got shape {R.shape}")
    if not np.all(np.isfinite(R)):
        raise validate.ParameterError("R contains non-finite entries")
    rho = validate.real("rho", rho, low=0, low_open=True)
    D = validate.real("D", D, low=0, low_open=True)
    return theory().prior.denoise(R, (math.sqrt(rho),), D)
