"""Bayes-optimal theory of the AIM and of the quadratic network: assembly and solvers.

Assembles the declarations of :mod:`symtheory.aim.model` with the generic layers:
the symmetric RIE prior (:class:`glm.factors.spectral_priors.SymmetricRIE`), the linear-rank
output channel and the scalar spectral state evolution
(:mod:`glm.se.spectral`).  The state evolution (aim.md 3.3) in the error
``v = Q0 - q = (1/d) E||S_hat - S||_F^2``:

    v = mmse((v + delta/2)/alpha_tilde),     alpha_tilde = 2 alpha k,

``k`` the number of u-space indices a sample reveals (``T(T+1)/2 - 1`` for softmax at
any inverse temperature, ``T(T+1)/2`` for the identity; derived from the link's
Jacobian), ``delta/2`` the output noise per u-space index (aim.md 1.2, 3.4).  Solved by
a bracketed Brent root (unique root: tested), or to any number of digits with mpmath.

The denoiser whose MMSE this is stands in :mod:`symtheory.aim.denoising`; the hardmax
channel of two tokens, with its own SE, in :mod:`symtheory.aim.hardmax`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..core import validate
from ..core.codegen import Kernel, KernelSet
from ..core.result import Result, alias
from ..core.softmax import softmax
from ..core.solvers import SolverResult
from ..glm.factors.linear_rank import LinearRankChannel
from ..glm.factors.spectral_priors import SpectralPrior, SymmetricRIE
from ..glm.se.spectral import ScalarSpectralSE, exact_mpf, precision_report
from . import model as M

_THEORY = None

#: alpha_tilde >= alpha_tilde_PR - this tolerance counts as perfect recovery
ALPHA_PR_TOL = 1e-12

#: measurements per unit alpha and parameter: alpha d^2 samples, d^2/2 parameters (aim.md 3.3)
SAMPLE_FACTOR = float(M.sample_factor())


class AIMTheory:
    """Kernels for the AIM/QN Bayes-optimal theory (built once per process)."""

    def __init__(self):
        self.prior = SymmetricRIE("aim_prior", M.denoising(), (M.t,), M.D)
        self.kernels = KernelSet()
        for kern in self.prior.kernels():
            self.kernels.add(kern)
        add = self.kernels.add
        rinf = M.rho_infinity()
        self.rho_inf_mmse = add(Kernel("aim_rho_inf_mmse", (M.D,), [rinf["mmse"]],
                                       doc="rho -> infinity denoising MMSE D/(1 + D)"))
        self.rho_inf_v = add(Kernel("aim_rho_inf_v", (M.at, M.s2), [rinf["v"]],
                                    doc="rho -> infinity fixed point of v = mmse((v + s2)/at)"))
        lr = M.low_rank()
        self.low_rank_v = add(Kernel("aim_low_rank_v", (M.a_lr, M.s2), [lr["v"]],
                                     doc="low-rank MSE on the nontrivial branch (aim.md 4.4)"))
        self.low_rank_weak = add(Kernel("aim_low_rank_a_weak", (M.s2,), [lr["a_weak"]],
                                        doc="low-rank weak-recovery threshold in a_lr"))
        self.low_rank_strong = float(lr["a_strong"])
        low, high = M.alpha_tilde_pr()
        self.at_pr_low = add(Kernel("aim_alpha_tilde_pr", (M.rho,), [low],
                                    doc="perfect-recovery alpha_tilde for rho <= 1"))
        self.at_pr_high = float(high)
        self.noise = add(Kernel("aim_noise_per_index", (M.delta,), [M.noise_per_index()],
                                doc="output-noise variance per u-space index"))
        self._ranks: dict = {}
        self._gen_identity: dict = {}

    def link_rank(self, seq_len: int, link: str):
        key = (seq_len, link)
        if key not in self._ranks:
            self._ranks[key] = M.link_rank(seq_len, link)
        return self._ranks[key]

    def gen_identity_kernel(self, seq_len: int) -> Kernel:
        if seq_len not in self._gen_identity:
            self._gen_identity[seq_len] = self.kernels.add(Kernel(
                f"aim_gen_error_identity_T{seq_len}", (M.V,), [M.gen_error_identity(seq_len)],
                doc="Bayes test error of the identity link at posterior variance V"))
        return self._gen_identity[seq_len]


def theory() -> AIMTheory:
    global _THEORY
    if _THEORY is None:
        _THEORY = AIMTheory()
    return _THEORY


# --------------------------------------------------------------------- parameters
def check_params(rho, seq_len, link="softmax", inv_temp=1.0, delta=0.0):
    """Validate ``(rho, seq_len, link, inv_temp, delta)``; ``rho`` may be 0 (low-rank
    limit) or ``inf``.  Returns the converted values."""
    rho = validate.real("rho", rho, low=0, allow_inf=True)
    seq_len = validate.integer("seq_len", seq_len, low=1)
    if link not in M.LINKS:
        raise validate.ParameterError(f"link must be one of {', '.join(M.LINKS)}, got {link!r}")
    inv_temp = validate.real("inv_temp", inv_temp, low=0, low_open=True)
    delta = validate.real("delta", delta, low=0)
    return rho, seq_len, link, inv_temp, delta


def constraints_per_sample(seq_len, link="softmax") -> int:
    """Return ``k``, the number of u-space indices a sample reveals (aim.md 3.4).

    The rank of the link's Jacobian, derived symbolically: ``2k = T^2 + T - 2`` for
    softmax (its rows sum to one), ``T(T+1)/2`` for the identity.

    Parameters
    ----------
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).

    Returns
    -------
    int
        ``k``.

    Examples
    --------
    >>> from symtheory import aim
    >>> aim.constraints_per_sample(3), aim.constraints_per_sample(3, "identity")
    (5, 6)
    """
    seq_len = validate.integer("seq_len", seq_len, low=1)
    check_params(1.0, seq_len, link)
    return theory().link_rank(seq_len, link).rank


def alpha_tilde(alpha, seq_len, link="softmax") -> float:
    """Return the effective sample ratio ``alpha_tilde = 2 alpha k`` of the linear-rank channel.

    The state evolution (aim.md 3.3) depends on ``alpha = n/d^2`` only through it;
    ``k`` is :func:`constraints_per_sample`.

    Parameters
    ----------
    alpha : float
        Sample ratio ``n/d^2`` (>= 0).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).

    Returns
    -------
    float
        ``alpha_tilde``.

    Examples
    --------
    >>> from symtheory import aim
    >>> aim.alpha_tilde(0.1, seq_len=2)     # k = 2
    0.4
    """
    alpha = validate.real("alpha", alpha, low=0)
    return SAMPLE_FACTOR * alpha * constraints_per_sample(seq_len, link)


def _at_pr(rho: float) -> float:
    if rho >= 1.0:
        return theory().at_pr_high
    return float(theory().at_pr_low(rho)[0])


def alpha_pr(rho, seq_len, link="softmax") -> float:
    """Return the perfect-recovery threshold ``alpha_PR`` in ``alpha = n/d^2`` (aim.md 4.1).

    ``(2 rho - rho^2)/(T^2 + T - 2)`` for softmax and ``rho <= 1``, ``1/(T^2 + T - 2)``
    above; generally ``alpha_tilde_PR/(2k)``; ``inf`` when the link reveals nothing
    (``k = 0``).

    Parameters
    ----------
    rho : float
        Width ratio ``r/d`` (>= 0, ``inf`` allowed).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).

    Returns
    -------
    float
        ``alpha_PR``.

    Examples
    --------
    >>> from symtheory import aim
    >>> aim.alpha_pr(0.5, seq_len=2)        # (1 - 0.25)/4
    0.1875
    """
    rho, seq_len, link, _, _ = check_params(rho, seq_len, link)
    k = constraints_per_sample(seq_len, link)
    if k == 0:
        return math.inf
    return _at_pr(rho) / (SAMPLE_FACTOR * k)


# --------------------------------------------------------------------- errors
class _SoftmaxIndices:
    """Adapter for :func:`glm.se.errors.bayes_error`: ``P = 1`` row of ``K`` u-space
    indices in units of their total standard deviation ``scale``."""

    def __init__(self, seq_len, inv_temp, scale):
        self.T, self.beta, self.scale = seq_len, inv_temp, scale
        self.P, self.M = 1, seq_len * (seq_len + 1) // 2
        iu = np.triu_indices(seq_len)
        self._rows, self._cols = iu
        self._diag = (iu[0] == iu[1])

    def g(self, Z):
        u = self.scale * Z.reshape(len(Z), self.M)
        u = np.where(self._diag, math.sqrt(2.0) * u, u)
        h = np.zeros((len(Z), self.T, self.T))
        h[:, self._rows, self._cols] = u
        h[:, self._cols, self._rows] = u
        return softmax(h, axis=2, inv_temp=self.beta)


def gen_error(mse, rho, seq_len, link="softmax", inv_temp=1.0, delta=0.0, *, samples=20000,
              seed=0):
    """Return the Bayes-optimal test error of the AIM at MSE ``V = mse`` (aim.md 3.8).

    ``E_omega tr Cov[g(h(omega + sqrt(V + delta/2) xi))]`` with overlap ``q = Q0 - V``,
    ``omega ~ N(0, q)``, output noise included: exact for the identity link
    (``T(T+1)(V + delta/2)``, ``2V + delta`` for QN), Monte Carlo for softmax
    (:func:`~symtheory.glm.se.errors.bayes_error` with ``samples`` outer draws; NaN at
    ``rho = inf``, where the indices have infinite variance).

    Parameters
    ----------
    mse : float
        The MSE ``V = (1/d)||S_hat - S||_F^2`` (in ``[0, 1]``).
    rho : float
        Width ratio ``r/d`` (>= 0, ``inf`` allowed).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).
    inv_temp : float, optional
        Softmax inverse temperature (> 0).
    delta : float, optional
        Output-noise variance (>= 0).
    samples : int, optional
        Monte-Carlo draws (softmax).
    seed : int, optional
        Seed of the draws.

    Returns
    -------
    tuple of float
        ``(value, stderr)``; ``stderr`` is 0 for the exact identity link.

    Examples
    --------
    >>> from symtheory import aim
    >>> aim.gen_error(0.5, rho=0.5, seq_len=2, link="identity")     # T(T+1) V
    (3.0, 0.0)
    """
    rho, seq_len, link, inv_temp, delta = check_params(rho, seq_len, link, inv_temp, delta)
    th = theory()
    V = validate.real("mse", mse, low=0, high=1)
    s2 = float(th.noise(delta)[0])
    if link == "identity":
        return float(th.gen_identity_kernel(seq_len)(V + s2)[0]), 0.0
    if math.isinf(rho):
        return math.nan, math.nan
    from ..glm.se.errors import bayes_error

    Q0 = 1.0 + rho
    total = Q0 + s2
    model = _SoftmaxIndices(seq_len, inv_temp, math.sqrt(total))
    est = bayes_error(model, np.array([[(Q0 - V) / total]]), samples=samples, seed=seed)
    return est.error, est.stderr


# --------------------------------------------------------------------- fixed point
@dataclass
class AIMPoint(Result):
    """Bayes-optimal solution of the AIM at one ``alpha`` (the columns of :func:`bo_curve`).

    Returned by :func:`bo_point`; every parameter is the attribute of the same name.
    ``value`` (also ``mmse``) is ``(1/d)||S_hat - S||_F^2`` (1 at ``alpha = 0``) and
    ``q = Q0 - mmse``, ``Q0 = 1 + rho``.

    Parameters
    ----------
    alpha, rho : float
        Sample ratio ``n/d^2`` and width ratio ``r/d``.
    seq_len : int
        Sequence length ``T``.
    delta : float
        Output-noise variance.
    q : float
        Overlap ``(1/d) Tr(S S_hat) = Q0 - mmse``.
    gen_error, gen_error_stderr : float
        Bayes test error (aim.md 3.8) and its Monte-Carlo standard error (NaN when
        skipped).
    alpha_tilde, alpha_pr : float
        Effective sample ratio ``2 alpha k`` and the perfect-recovery threshold.
    mmse_str, q_str : str
        High-precision values (with ``precision=``), else empty.
    digits_confirmed : float
        Digits on which the precision run and its check at twice the digits agree.
    value : float
        The MSE.
    error : float or None
        Not estimated (``None``).
    error_kind : str
        Empty (no error bar).
    converged : bool
        The solver met its criterion.
    iterations : int
        Iterations of the solve.
    residual : float
        Its last residual.
    method : str
        ``brent``, ``exact`` or ``closed form``.
    message : str
        What happened, in words.

    Examples
    --------
    >>> from symtheory import aim
    >>> pt = aim.bo_point(0.05, rho=0.5, seq_len=2, gen_samples=None)
    >>> round(pt.mmse, 9), round(pt.q, 9), pt.converged
    (0.723677422, 0.776322578, True)
    """

    alpha: float = math.nan
    rho: float = math.nan
    seq_len: int = 0
    delta: float = 0.0
    q: float = math.nan               # (1/d) Tr(S S_hat) = Q0 - mmse
    gen_error: float = math.nan
    gen_error_stderr: float = math.nan
    alpha_tilde: float = math.nan
    alpha_pr: float = math.nan
    mmse_str: str = ""
    q_str: str = ""
    digits_confirmed: float = float("nan")

    mmse = alias("value", "(1/d)||S_hat - S||_F^2 at the fixed point.")


def spectral_engine(fisher, alpha, rho, name) -> ScalarSpectralSE:
    """The tied prior's scalar spectral SE (aim.md 3.3) for a channel's ``E||g_out||^2``."""
    return ScalarSpectralSE(spectral_prior(rho), fisher, alpha, sample_factor=SAMPLE_FACTOR,
                            name=f"AIM {name}overlap at alpha={alpha}, rho={rho}")


def spectral_prior(rho) -> SpectralPrior:
    """The tied prior ``S`` of width ratio ``rho`` as the state evolution sees it: its
    derived denoising MMSE, ``Q0 = 1 + rho`` and mean ``sqrt(rho)`` (aim.md 3.1, from the
    prior law's moments)."""
    th = theory()
    t = math.sqrt(rho)
    return SpectralPrior(lambda D: th.prior.mmse((t,), D), th.prior.second_moment(t),
                         th.prior.mean(t), name=f"AIM prior at rho={rho}")


def _engine(alpha, rho, seq_len, link, delta) -> ScalarSpectralSE:
    th = theory()
    k = constraints_per_sample(seq_len, link)
    channel = LinearRankChannel(k, seq_len * (seq_len + 1) // 2, float(th.noise(delta)[0]))
    return spectral_engine(channel.fisher, alpha, rho, "")


def solve_mse(alpha, rho, seq_len, link="softmax", delta=0.0) -> SolverResult:
    """Solve the state evolution; ``value`` is the MSE ``v = Q0 - q``."""
    alpha = validate.real("alpha", alpha, low=0)
    rho, seq_len, link, _, delta = check_params(rho, seq_len, link, 1.0, delta)
    th = theory()
    at = alpha_tilde(alpha, seq_len, link)
    s2 = float(th.noise(delta)[0])
    if rho == 0:
        raise validate.ParameterError("rho must be > 0 here; the rho -> 0 limit is "
                                      "low_rank_point(alpha_bar = n/(d r), ...)")
    if at == 0:
        return SolverResult(1.0, True, 0, 0.0, "exact", "alpha_tilde = 0: nothing learned")
    if delta == 0 and at >= _at_pr(rho) - ALPHA_PR_TOL:
        return SolverResult(0.0, True, 0, 0.0, "exact", "alpha >= alpha_PR: perfect recovery")
    if math.isinf(rho):
        return SolverResult(float(th.rho_inf_v(at, s2)[0]), True, 0, 0.0, "closed form",
                            "rho = inf: closed form")
    return _engine(alpha, rho, seq_len, link, delta).solve()


def _precision_solve(alpha, rho, seq_len, link, delta, v0, digits):
    import mpmath

    k = constraints_per_sample(seq_len, link)

    def mmse_mp(D):
        return theory().prior.mmse_mp((mpmath.sqrt(exact_mpf(rho)),), D, dps=mpmath.mp.dps)

    def qhat_mp(v):
        return SAMPLE_FACTOR * k * exact_mpf(alpha) / (v + exact_mpf(delta) / 2)

    return _engine(alpha, rho, seq_len, link, delta).solve_mp(mmse_mp, qhat_mp, v0, digits=digits)


def _rho_inf_digits(alpha, seq_len, link, delta, digits):
    """The rho -> infinity closed form in mpmath at ``digits`` and ``2 digits`` (+ guard):
    ``(value string, agreeing digits)``."""
    import mpmath

    k = constraints_per_sample(seq_len, link)
    vals = []
    for dps in (digits + 10, 2 * digits + 10):
        with mpmath.workdps(dps):
            at = SAMPLE_FACTOR * k * exact_mpf(alpha)
            vals.append(theory().rho_inf_v.mp(at, exact_mpf(delta) / 2, dps=dps)[0])
    with mpmath.workdps(2 * digits + 10):
        diff = abs(vals[0] - vals[1])
        agree = float(-mpmath.log10(diff / abs(vals[1]))) if diff else math.inf
        return mpmath.nstr(vals[0], digits), round(agree, 1)


def bo_point(alpha, rho, seq_len, link="softmax", inv_temp=1.0, delta=0.0, *,
             precision: int | None = None, gen_samples: int | None = 20000,
             seed: int = 0) -> AIMPoint:
    """Return the Bayes-optimal MSE on ``S`` and test error at ``alpha = n/d^2`` (aim.md 3.3, 3.8).

    Solves ``v = mmse((v + delta/2)/alpha_tilde)`` (module docstring) by a bracketed
    Brent root; ``mmse`` is ``(1/d)||S_hat - S||_F^2``, 1 at ``alpha = 0``.

    Parameters
    ----------
    alpha : float
        Sample ratio ``n/d^2`` (>= 0).
    rho : float
        Width ratio ``r/d`` (> 0, ``inf`` allowed).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).
    inv_temp : float, optional
        Softmax inverse temperature (> 0; enters the test error only).
    delta : float, optional
        Output-noise variance (>= 0).
    precision : int, optional
        Digits of an mpmath refinement of the MSE, confirmed at twice the digits.
    gen_samples : int or None, optional
        Monte-Carlo draws of the softmax test error; ``None`` skips it (NaN).
    seed : int, optional
        Seed of those draws.

    Returns
    -------
    AIMPoint
        The solution and its report.

    Examples
    --------
    >>> from symtheory import aim
    >>> pt = aim.bo_point(0.05, rho=0.5, seq_len=2, gen_samples=None)
    >>> round(pt.mmse, 9), pt.alpha_tilde, pt.alpha_pr
    (0.723677422, 0.2, 0.1875)
    >>> aim.bo_point(0.2, rho=0.5, seq_len=2, gen_samples=None).mmse   # above alpha_PR
    0.0
    """
    rho, seq_len, link, inv_temp, delta = check_params(rho, seq_len, link, inv_temp, delta)
    alpha = validate.real("alpha", alpha, low=0)
    res = solve_mse(alpha, rho, seq_len, link, delta)
    v = float(res.value)
    Q0 = 1.0 + rho
    if gen_samples is None:
        ge = (math.nan, math.nan)
    else:
        ge = gen_error(v, rho, seq_len, link, inv_temp, delta,
                       samples=validate.integer("gen_samples", gen_samples, low=2), seed=seed)
    pt = AIMPoint(alpha=alpha, rho=rho, seq_len=seq_len, delta=delta, value=v, q=Q0 - v,
                  gen_error=ge[0], gen_error_stderr=ge[1],
                  alpha_tilde=alpha_tilde(alpha, seq_len, link), alpha_pr=alpha_pr(rho, seq_len, link),
                  converged=bool(res.converged), iterations=int(res.iterations),
                  residual=float(res.residual), method=res.method, message=res.message)
    if precision is not None:
        digits = validate.integer("precision", precision, low=1)
        if res.method == "closed form":
            pt.mmse_str, pt.digits_confirmed = _rho_inf_digits(alpha, seq_len, link, delta, digits)
            pt.q_str = "inf"
        elif res.method == "exact":          # v exactly 0 (perfect recovery) or 1 (alpha_tilde = 0)
            pt.mmse_str, pt.q_str = repr(v), repr(Q0 - v)
            pt.digits_confirmed = float("inf")
        else:
            pr = _precision_solve(alpha, rho, seq_len, link, delta, v, digits)
            pt.mmse_str, pt.q_str, pt.digits_confirmed = precision_report(
                pr, digits, also=lambda val: 1 + exact_mpf(rho) - val, name=f"alpha={alpha}")
    return pt


def bo_curve(alpha, rho, seq_len, link="softmax", inv_temp=1.0, delta=0.0, *,
             precision: int | None = None, gen_samples: int | None = 20000, seed: int = 0,
             progress: bool = False):
    """Return :func:`bo_point` along a sweep of ``alpha`` as a table.

    Columns: ``alpha, rho, seq_len, delta, mmse, q, gen_error, gen_error_stderr,
    alpha_tilde, alpha_pr, converged, iterations, residual`` (+ ``mmse_str, q_str,
    digits_confirmed`` with ``precision``); ``alpha = n/d^2`` (aim.md 3.3, 3.8).

    Parameters
    ----------
    alpha : float or array_like
        Sample ratios ``n/d^2`` (>= 0).
    rho : float
        Width ratio ``r/d`` (> 0).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).
    inv_temp : float, optional
        Softmax inverse temperature (> 0).
    delta : float, optional
        Output-noise variance (>= 0).
    precision : int, optional
        Digits of an mpmath refinement of each point.
    gen_samples : int or None, optional
        Monte-Carlo draws of the test error; ``None`` skips it.
    seed : int, optional
        Seed of those draws.
    progress : bool, optional
        Show a progress bar.

    Returns
    -------
    Table
        One row per ``alpha`` (:class:`~symtheory.core.table.Table`, with metadata).

    Examples
    --------
    >>> from symtheory import aim
    >>> table = aim.bo_curve([0.02, 0.05], rho=0.5, seq_len=2, gen_samples=None)
    >>> table["mmse"].round(6).tolist()
    [0.906634, 0.723677]
    """
    from ..core.progress import progress_bar
    from ..core.table import Table

    rho, seq_len, link, inv_temp, delta = check_params(rho, seq_len, link, inv_temp, delta)
    alphas = np.atleast_1d(np.asarray(alpha, dtype=float))
    for a in alphas:
        validate.real("alpha", a, low=0)
    t0 = time.perf_counter()
    pts = [bo_point(a, rho, seq_len, link, inv_temp, delta, precision=precision,
                    gen_samples=gen_samples, seed=seed)
           for a in progress_bar(alphas, desc="AIM BO curve", enabled=progress)]
    cols = ["alpha", "rho", "seq_len", "delta", "mmse", "q", "gen_error", "gen_error_stderr",
            "alpha_tilde", "alpha_pr", "converged", "iterations", "residual"]
    if precision is not None:
        cols += ["mmse_str", "q_str", "digits_confirmed"]
    data = {c: [getattr(p, c) for p in pts] for c in cols}
    import symtheory

    meta = {"model": "aim", "quantity": "Bayes-optimal MSE (1/d)||S_hat - S||_F^2 (aim.md 3.3), "
            "1 at alpha = 0; gen_error: Bayes test error (aim.md 3.8)",
            "alpha_definition": "n/d^2", "rho": rho, "seq_len": seq_len, "link": link,
            "inv_temp": inv_temp, "delta": delta,
            "constraints_per_sample": constraints_per_sample(seq_len, link),
            "precision": precision, "gen_samples": gen_samples, "n_points": len(pts),
            "seconds": round(time.perf_counter() - t0, 4), "symtheory": symtheory.__version__}
    return Table(data, meta)


def rho_infinity_mse(alpha, seq_len, link="softmax", delta=0.0) -> float:
    """Return the MSE on the ``rho -> infinity`` line (aim.md 4.2), in closed form.

    Noiseless it is ``max(0, 1 - alpha_tilde)``.

    Parameters
    ----------
    alpha : float
        Sample ratio ``n/d^2`` (>= 0).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).
    delta : float, optional
        Output-noise variance (>= 0).

    Returns
    -------
    float
        The MSE.

    Examples
    --------
    >>> from symtheory import aim
    >>> aim.rho_infinity_mse(0.05, seq_len=2)        # 1 - alpha_tilde, alpha_tilde = 0.2
    0.8
    """
    return float(solve_mse(alpha, math.inf, seq_len, link, delta).value)


# --------------------------------------------------------------------- low-rank limit
@dataclass
class LowRankPoint:
    """``rho -> 0`` at fixed ``alpha_bar = n/(d r) = alpha/rho`` (aim.md 4.4)."""

    alpha_bar: float
    seq_len: int
    delta: float
    mmse: float
    q: float
    alpha_bar_wr: float
    alpha_bar_pr: float


def low_rank_point(alpha_bar, seq_len, link="softmax", delta=0.0) -> LowRankPoint:
    """Return the low-rank limit ``rho -> 0`` at fixed ``alpha_bar = n/(d r)`` (aim.md 4.4).

    With ``a = 2 k alpha_bar``: MSE 1 below ``a_WR = 1 + delta/2``, the derived branch
    above it (noiseless: ``a (2 - a)``, 0 beyond ``a = 2``).

    Parameters
    ----------
    alpha_bar : float
        Sample ratio ``n/(d r) = alpha/rho`` (>= 0).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).
    delta : float, optional
        Output-noise variance (>= 0).

    Returns
    -------
    LowRankPoint
        ``alpha_bar, seq_len, delta, mmse, q`` and the thresholds ``alpha_bar_wr``,
        ``alpha_bar_pr`` (in ``alpha_bar``).

    Examples
    --------
    >>> from symtheory import aim
    >>> pt = aim.low_rank_point(0.2, seq_len=2)      # a = 0.8: nothing learned
    >>> pt.mmse, pt.alpha_bar_wr, pt.alpha_bar_pr
    (1.0, 0.25, 0.5)
    """
    alpha_bar = validate.real("alpha_bar", alpha_bar, low=0)
    _, seq_len, link, _, delta = check_params(0.0, seq_len, link, 1.0, delta)
    th = theory()
    k = constraints_per_sample(seq_len, link)
    s2 = float(th.noise(delta)[0])
    a = SAMPLE_FACTOR * k * alpha_bar
    a_weak = float(th.low_rank_weak(s2)[0])
    a_strong = th.low_rank_strong if delta == 0 else math.inf
    if a <= a_weak:
        v = 1.0
    elif a >= a_strong - ALPHA_PR_TOL:
        v = 0.0
    else:
        v = float(th.low_rank_v(a, s2)[0])
    scale = SAMPLE_FACTOR * k if k else math.nan
    return LowRankPoint(alpha_bar, seq_len, delta, v, 1.0 - v, a_weak / scale if k else math.inf,
                        a_strong / scale if k else math.inf)


def thresholds(rho, seq_len, link="softmax", delta=0.0) -> dict:
    """Return the phase transitions of the AIM (aim.md 4).

    Constraints per sample ``k``, ``alpha_PR`` (noiseless, finite ``rho``; ``inf`` with
    noise) and the low-rank weak- and perfect-recovery thresholds in ``alpha_bar =
    n/(d r)``.

    Parameters
    ----------
    rho : float
        Width ratio ``r/d`` (>= 0).
    seq_len : int
        Sequence length ``T`` (>= 1).
    link : {"softmax", "identity"}, optional
        The attention link (softmax at any inverse temperature, or the identity).
    delta : float, optional
        Output-noise variance (>= 0).

    Returns
    -------
    dict
        ``rho, seq_len, link, delta, constraints_per_sample, alpha_tilde_pr, alpha_pr,
        alpha_bar_wr, alpha_bar_pr``.

    Examples
    --------
    >>> from symtheory import aim
    >>> th = aim.thresholds(0.5, seq_len=2)
    >>> th["constraints_per_sample"], th["alpha_pr"], th["alpha_bar_wr"]
    (2, 0.1875, 0.25)
    """
    rho, seq_len, link, _, delta = check_params(rho, seq_len, link, 1.0, delta)
    k = constraints_per_sample(seq_len, link)
    lr = low_rank_point(0.0, seq_len, link, delta)
    return {"rho": rho, "seq_len": seq_len, "link": link, "delta": delta,
            "constraints_per_sample": k,
            "alpha_tilde_pr": _at_pr(rho) if rho > 0 else 0.0,
            "alpha_pr": (alpha_pr(rho, seq_len, link) if delta == 0 else math.inf),
            "alpha_bar_wr": lr.alpha_bar_wr, "alpha_bar_pr": lr.alpha_bar_pr}


def qn_paper_units(mse, delta, kappa) -> dict:
    """Convert to the quadratic-network paper's normalization ``S_M = W^T W/m`` (aim.md 8).

    ``S = sqrt(kappa) S_M``, so ``MSE_M = mse/kappa`` and ``Delta_M = delta/kappa`` (its
    curves plot ``kappa MSE_M``, which is the package's ``mse``; Maillard et al.,
    arXiv:2408.03733).

    Parameters
    ----------
    mse : float
        The package's MSE (>= 0).
    delta : float
        The package's output-noise variance (>= 0).
    kappa : float
        The QN width ratio ``m/d`` (> 0; ``rho = kappa``).

    Returns
    -------
    dict
        ``{"mse_paper": mse/kappa, "delta_paper": delta/kappa}``.

    Examples
    --------
    >>> from symtheory import aim
    >>> aim.qn_paper_units(0.2, 0.1, kappa=0.5)
    {'mse_paper': 0.4, 'delta_paper': 0.2}
    """
    kappa = validate.real("kappa", kappa, low=0, low_open=True)
    return {"mse_paper": validate.real("mse", mse, low=0) / kappa,
            "delta_paper": validate.real("delta", delta, low=0) / kappa}
