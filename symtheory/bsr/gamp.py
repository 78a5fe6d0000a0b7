"""GAMP-RIE for BSR (bsr.md 6): the core GAMP engine with the rectangular RIE denoiser.

The denoiser and its predicted variance come from the same generated kernels as the
Bayes-optimal theory (:func:`theory.rie_denoise`, :func:`theory.mmse_rie`); the
Gaussian output channel's ``g_out`` is derived symbolically (glm.factors.scalar).  The
state evolution ``v <- mmse_RIE(beta, rho, (Delta + v)/alpha)`` (bsr.md 6.2) runs
alongside (undamped: the damped iteration shares its fixed point, see glm.gamp.loop).
"""
from __future__ import annotations


from ..glm.factors.prior import DenoiserPrior
from ..glm.factors.scalar import gaussian_noise_channel
from ..glm.gamp.loop import DenseOperator, GampResult, gamp
from .data import BSRData
from .theory import bo_point, mmse_rie, rie_denoise

_CHANNEL = None


def channel():
    global _CHANNEL
    if _CHANNEL is None:
        _CHANNEL = gaussian_noise_channel()
    return _CHANNEL


def gamp_rie(data: BSRData, *, damping: float = 0.0, a_estimator: str = "derivative",
             onsager: str = "empirical", max_iter: int = 100, tol: float = 1e-8,
             restore_best: bool = True, progress: bool = False) -> GampResult:
    """GAMP-RIE on a BSR instance; trace columns ``mse, variance, se_variance, A``.

    ``damping``: weight of the previous iterate in [0, 1) (0 = undamped), applied to
    ``g_out``, ``A`` and the estimate together so that the fixed point is unchanged
    (glm.gamp.loop; bsr.md 6.1 damps ``S`` and ``V`` only).

    ``a_estimator='derivative'`` is the theoretical ``A = alpha/(Delta + V)`` (for the
    Gaussian channel ``-alpha mean(dg_out)`` equals it exactly); ``'square'`` is the
    empirical ``alpha mean(g_out^2)`` of the reference code.

    ``onsager='empirical'`` uses the exact divergence of the finite-size denoiser,
    ``V = D div/(dL)``, as the variance in the channel and the Onsager term (it tends
    to the predicted ``mmse_RIE(D)``, bsr.md 5.1); ``'predicted'`` uses ``mmse_RIE(D)``.
    """
    if onsager not in ("empirical", "predicted"):
        raise ValueError(f"onsager must be 'empirical' or 'predicted', got {onsager!r}")
    d, L = data.d, data.L
    beta = L / d
    rho = data.rho
    alpha = data.alpha
    delta = data.delta
    # the Gaussian channel needs Delta > 0 in its log-partition; Delta = 0 is its limit
    ch_delta = max(delta, 1e-300)

    def denoiser(R, noise):
        noise = float(noise[0])
        if onsager == "empirical":
            S, div = rie_denoise(R.reshape(d, L), noise, rho, divergence=True)
            return S.reshape(1, -1), noise * div / (d * L)
        S = rie_denoise(R.reshape(d, L), noise, rho)
        return S.reshape(1, -1), mmse_rie(beta, rho, noise)

    def se_map(v):
        return mmse_rie(beta, rho, (delta + v) / alpha)

    res = gamp(DenseOperator(data.Phi), data.y, channel(), DenoiserPrior(denoiser, name="RIE"),
               channel_params=(ch_delta,), V0=1.0, a_estimator=a_estimator, damping=damping,
               max_iter=max_iter, tol=tol, truth=data.S.reshape(1, -1), se_map=se_map,
               restore_best=restore_best, progress=progress)
    res.trace["bo_mse"] = [bo_point(alpha, beta, rho, delta).mmse] * len(res.trace["mse"])
    return res
