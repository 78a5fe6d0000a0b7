"""Attention-indexed models (AIM) and the extensive-width quadratic network (QN), declared.

Boncoraglio, Troiani, Erba, Zdeborova, *Bayes optimal learning of attention-indexed
models*, arXiv:2506.01582 (NeurIPS 2025); Maillard, Troiani, Martin, Krzakala,
Zdeborova, *Bayes-optimal learning of an extensive-width neural network from
quadratically many samples*, arXiv:2408.03733 (NeurIPS 2024).  Specification:
``docs/theory/aim.md`` (section numbers below refer to it).  Package notation: the
paper's T is ``seq_len``, its L is ``depth`` (only ``depth = 1`` here), its beta is
``inv_temp``; ``rho = r/d``, ``alpha = n/d^2``.

Model (aim.md 1.1): tokens ``x_1..x_T ~ N(0, I_d)``, ``S = W W^T/sqrt(r d)`` with
``W`` (``d x r``) i.i.d. N(0, 1), indices ``h_ab = (x_a^T S x_b - delta_ab Tr S)/sqrt(d)``,
output ``y = g(h)`` (row softmax at inverse temperature beta, or the identity), with
output noise of variance ``delta/(2 - delta_ab)`` on ``h_ab`` (aim.md 1.2; for one token
``y = h + sqrt(delta) xi``).  The QN model is ``T = 1``, identity link, ``rho = kappa``
(aim.md 8).

Typed inputs (the theorems and the model's structure); everything else is derived:

* the prior's random-matrix structure: ``S`` is a sample covariance of ``r = rho d``
  Gaussian vectors with weight ``1/(d sqrt(rho))`` (Silverstein's equation,
  :func:`freeprob.sample_covariance`);
* the symmetric RIE and its Nishimori MMSE (:mod:`symtheory.glm.factors.spectral_priors`);
* the isotropic ("u-space") coordinates ``u_ab = h_ab (a < b)``, ``u_aa = h_aa/sqrt(2)``
  (aim.md 2) and the link ``g``;
* the dimension ``r d - r(r-1)/2`` of rank-``r`` PSD matrices (aim.md 4.1);
* the outlier theorem of Benaych-Georges & Nadakuditi (Adv. Math. 227, 2011) for the
  low-rank limit (aim.md 4.4).

Symbols: ``t = sqrt(rho)`` (keeps the laws polynomial), ``D`` the denoising noise
``1/q_hat``, ``at = alpha_tilde = 2 alpha k`` the effective sample ratio of a
linear-rank channel with ``k`` revealed indices per sample, ``s2`` the output noise per
u-space index (``delta/2``), ``v = Q0 - q`` the MSE.
"""
from __future__ import annotations

import sympy as sp

from ..core import freeprob, functionals
from ..core.softmax import softmax_rows
from ..core.derive import cached_derivation
from ..glm.factors import gaussian_prior, linear_rank, spectral_priors
from . import registry
from .registry import SYMBOLIC_LINKS

t, D = sp.symbols("t D", positive=True)
rho = sp.Symbol("rho", positive=True)
alpha, delta = sp.symbols("alpha delta", nonnegative=True)
at = sp.Symbol("at", nonnegative=True)            # alpha_tilde = 2 alpha k
a_lr = sp.Symbol("a_lr", nonnegative=True)        # alpha_tilde/rho in the low-rank limit
s2 = sp.Symbol("s2", nonnegative=True)            # output-noise variance per u-space index
v = sp.Symbol("v", nonnegative=True)              # MSE = Q0 - q
V = sp.Symbol("V", nonnegative=True)              # posterior variance of one index
k = sp.Symbol("k", positive=True)                 # revealed indices per sample
beta = sp.Symbol("beta", positive=True)           # inverse temperature
LINKS = SYMBOLIC_LINKS          # the links with this symbolic theory (registry)


# ----------------------------------------------------------------------- prior
@cached_derivation(freeprob)
def prior_law():
    """Eigenvalue law of ``S = W W^T/sqrt(r d) = sum_{j <= r} w_j w_j^T/(d sqrt(rho))``:
    Silverstein's equation for ``r = rho d`` rank-one terms of weight ``(1/sqrt(rho))/d``
    (aim.md 1.1: ``sqrt(rho) MP_{1/rho}``, atom ``(1 - rho)_+`` at 0)."""
    return freeprob.sample_covariance(freeprob.point_mass(1), ratio=t**2, scale=1 / t,
                                      params=(t,))


@cached_derivation(freeprob, functionals, spectral_priors)
def denoising():
    """Denoising ``S`` from ``S + sqrt(D) Z`` (aim.md 3.1): the observation's cubic,
    its edge quartic, the prior moments (``Tr S/d = sqrt(rho)``, ``Q0 = 1 + rho``) and
    the reduced MMSE ``D - (4 pi^2/3) D^2 int mu^3``.  Also checks that the
    uninformative error ``Q0 - mean^2`` is 1 (the normalisation of the ``mmse``
    column)."""
    der = spectral_priors.derive_symmetric_rie(prior_law(), D, (t,))
    m = der["prior_moments"]
    if sp.simplify(m[2] - m[1] ** 2 - 1) != 0:
        raise RuntimeError(f"prior variance is not 1: {m}")
    return der


# ----------------------------------------------------------------------- indices and links
def index_symbols(seq_len: int):
    """u-space coordinates ``u_ab``, ``a <= b`` (aim.md 2), and the symmetric ``h(u)``."""
    T = int(seq_len)
    pairs = [(a, b) for a in range(T) for b in range(a, T)]
    u = sp.symbols(f"u0:{len(pairs)}", real=True)
    h = sp.zeros(T, T)
    for (a, b), uk in zip(pairs, u):
        if a == b:
            h[a, a] = sp.sqrt(2) * uk
        else:
            h[a, b] = h[b, a] = uk
    return list(u), h, pairs


def link_outputs(seq_len: int, link: str, inv_temp=beta):
    """``y = g(h(u))`` as a flat list (row-major ``T x T``): ``softmax`` rows
    ``exp(beta h_ab)/sum_c exp(beta h_ac)`` or the ``identity``."""
    u, h, _ = index_symbols(seq_len)
    if link == "softmax":
        return list(softmax_rows(h, inv_temp)), u
    if link == "identity":
        return list(h), u
    raise ValueError(f"link must be one of {LINKS}, got {link!r}")


@cached_derivation(linear_rank)
def link_rank(seq_len: int, link: str):
    """Rank ``k`` of ``dy/du`` and its kernel (aim.md 3.4), derived at random points.

    A positive inverse temperature multiplies the softmax Jacobian by ``beta`` and
    rescales the point, so the generic rank at ``beta = 1`` holds for every ``beta > 0``.
    Softmax: ``k = T(T+1)/2 - 1`` (kernel ``h -> h + c J``); identity: ``k = T(T+1)/2``.
    """
    out, u = link_outputs(seq_len, link, inv_temp=sp.Integer(1))
    return linear_rank.jacobian_rank(out, u, points=3)


def noise_per_index(seq_len: int = 3):
    """u-space variance of the output noise (aim.md 1.2): independent noise of variance
    ``delta/(2 - delta_ab)`` on each ``h_ab`` (``a <= b``) mapped through the inverse of
    ``h(u)`` (:func:`index_symbols`).  Raises unless it is isotropic; returns it
    (``delta/2``)."""
    u, h, pairs = index_symbols(seq_len)
    h_entries = [h[a, b] for a, b in pairs]
    du_dh = sp.Matrix(h_entries).jacobian(u).inv()          # u = du_dh h (linear)
    h_var = [delta / (2 - (1 if a == b else 0)) for a, b in pairs]
    u_var = {sp.simplify(sum(du_dh[i, j] ** 2 * h_var[j] for j in range(len(pairs))))
             for i in range(len(pairs))}
    if len(u_var) != 1:
        raise RuntimeError(f"output noise is not isotropic in u-space: {u_var}")
    return u_var.pop()


# ----------------------------------------------------------------------- thresholds
def sample_factor():
    """Unit measurements per unit ``alpha`` and per parameter (aim.md 3.3): ``alpha d^2``
    samples against the ``d(d+1)/2`` entries of a symmetric matrix -> 2."""
    dd = sp.Symbol("d", positive=True)
    return sp.limit(dd**2 / (dd * (dd + 1) / 2), dd, sp.oo)


@cached_derivation()
def alpha_tilde_pr():
    """Perfect-recovery threshold in ``alpha_tilde = 2 alpha k`` (aim.md 4.1): the
    dimension of rank-``r`` PSD ``d x d`` matrices, ``r d - r(r-1)/2`` (``r = rho d``;
    ``d(d+1)/2`` for ``rho >= 1``), per ``d^2/2`` unit measurements.  Returns
    ``(below_one, above_one)``: ``2 rho - rho^2`` and ``1``."""
    dd = sp.Symbol("d", positive=True)
    r = rho * dd
    low = sp.limit((r * dd - r * (r - 1) / 2) / (dd**2 / 2), dd, sp.oo)
    high = sp.limit((dd * (dd + 1) / 2) / (dd**2 / 2), dd, sp.oo)
    return sp.expand(low), high


# ----------------------------------------------------------------------- rho -> infinity
@cached_derivation(freeprob, functionals, spectral_priors)
def rho_infinity():
    """``rho -> infinity`` (aim.md 4.2).  The R-transform of ``S - sqrt(rho)`` tends to
    ``g``: a unit semicircle.  Denoising it is Gaussian: ``mmse = D/(1 + D)`` (from the
    same reduced MMSE with ``int mu^3`` integrated by SymPy), and the fixed point
    ``v = mmse((v + s2)/at)`` has a closed form (noiseless: ``1 - at``)."""
    Q, R, g = freeprob.r_transform_relation(prior_law())
    roots = sp.solve(Q, R)
    if len(roots) != 1:
        raise RuntimeError(f"prior R-transform not unique: {roots}")
    R_centered = sp.limit(roots[0] - t, t, sp.oo)        # R_{S - sqrt(rho)}(g) as rho -> oo
    var = sp.simplify(R_centered / g)
    if var.free_symbols:
        raise RuntimeError(f"rho -> oo limit is not a semicircle: R = {R_centered}")
    der = spectral_priors.derive_symmetric_rie(freeprob.semicircle(var), D, ())
    P, G, z = der["P"], der["G"], der["z"]
    a2, a1, a0 = sp.Poly(P, G).all_coeffs()
    if sp.Poly(P, G).degree() != 2:
        raise RuntimeError("observation of a semicircle prior should be quadratic in G")
    # quadratic: Im G = sqrt(4 a2 a0 - a1^2)/(2 |a2|) inside the support
    xx = spectral_priors.x
    radicand = sp.expand((4 * a2 * a0 - a1**2).subs(z, xx))
    density = sp.sqrt(radicand) / (2 * sp.Abs(a2) * sp.pi)
    edges = sorted(sp.solve(radicand, xx), key=lambda e: e.subs(D, 1))
    I3 = sp.simplify(sp.integrate(sp.simplify(density**3), (xx, edges[0], edges[1])))
    (Isym,) = der["integrals"]
    mmse = sp.factor(sp.simplify(der["mmse"].subs(Isym, I3)))
    fps = sp.solve(sp.Eq(v, mmse.subs(D, (v + s2) / at)), v)
    sample = {at: sp.Rational(1, 3), s2: sp.Rational(1, 10)}
    phys = [r for r in fps if 0 <= r.subs(sample).evalf() <= 1]
    if len(phys) != 1:
        raise RuntimeError(f"rho -> oo fixed point: could not select the root among {fps}")
    return {"variance": var, "mmse": mmse, "v": sp.simplify(phys[0]),
            "v_noiseless": sp.simplify(phys[0].subs(s2, 0)), "density": density}


# ----------------------------------------------------------------------- low rank
@cached_derivation(freeprob)
def low_rank():
    """Low-rank limit ``rho -> 0`` at fixed ``a_lr = alpha_tilde/rho`` (aim.md 4.4).

    ``S`` becomes ``r`` spikes of size ``theta = 1/sqrt(rho)`` in a semicircle of
    variance ``D``.  Outlier ``lambda`` with ``G_sc(lambda) = 1/theta``, squared
    overlap ``-1/(theta^2 G_sc'(lambda))`` (Benaych-Georges & Nadakuditi), RIE value
    ``xi = lambda - 2 D G_sc(lambda)``; the error per spike over ``theta^2`` is a
    function of ``tau = D/theta^2 = rho/q_hat`` only, valid while the outlier exists
    (``tau < 1``: the BBP point from the semicircle's edge).  With
    ``q_hat = rho a_lr/(v + s2)`` (linear-rank channel), ``tau = (v + s2)/a_lr``; the
    fixed point, the weak-recovery threshold (``v = 1`` stops being the solution) and
    the noiseless perfect-recovery threshold follow.
    """
    theta = sp.Symbol("theta", positive=True)
    tau = sp.Symbol("tau", positive=True)
    sc = freeprob.semicircle(D)
    G, z = sp.symbols("G z")
    P = sp.expand(sc.poly.subs({sc.s: -G, sc.u: z}, simultaneous=True))
    lam = sp.solve(P.subs(G, 1 / theta), z)
    if len(lam) != 1:
        raise RuntimeError(f"outlier location not unique: {lam}")
    lam = lam[0]
    Gp = (-sp.diff(P, z) / sp.diff(P, G)).subs({G: 1 / theta, z: lam})
    overlap2 = sp.simplify(-1 / (theta**2 * Gp))
    xi = lam - 2 * D / theta
    err = sp.simplify(1 + xi**2 / theta**2 - 2 * xi * overlap2 / theta)
    err_tau = sp.factor(sp.simplify(err.subs(D, tau * theta**2)))
    if err_tau.has(theta):
        raise RuntimeError(f"spike error does not depend on D/theta^2 only: {err_tau}")
    # BBP: the outlier exists while theta > 1/G(edge); the edge is a root of the
    # discriminant of the semicircle's quadratic
    edge = [e for e in sp.solve(freeprob.edge_polynomial(P, G, z), z) if e.subs(D, 1) > 0]
    G_edge = sp.solve(P.subs(z, edge[0]), G)          # a double root at the edge
    if len(G_edge) != 1:
        raise RuntimeError(f"edge value of the semicircle not unique: {G_edge}")
    tau_c = sp.simplify(D * G_edge[0] ** 2)           # tau = D/theta^2 at theta = 1/G(edge)
    # fixed point v = err(tau(v)), tau = (v + s2)/a_lr, on the nontrivial branch
    fps = sp.solve(sp.Eq(v, err_tau.subs(tau, (v + s2) / a_lr)), v)
    sample = {a_lr: sp.Rational(3, 2), s2: sp.Rational(1, 20)}
    phys = [r for r in fps if 0 < r.subs(sample).evalf() < 1]
    if len(phys) != 1:
        raise RuntimeError(f"low-rank fixed point: could not select among {fps}")
    v_branch = sp.simplify(phys[0])
    a_weak = sp.solve(sp.Eq((1 + s2) / a_lr, tau_c), a_lr)         # tau(v = 1) = tau_c
    # noiseless: the nontrivial solution of v = err(v/a_lr) reaches v = 0 at a_strong
    nontrivial = [r for r in sp.solve(sp.Eq(v, err_tau.subs(tau, v / a_lr)), v) if r != 0]
    if len(nontrivial) != 1:
        raise RuntimeError(f"low-rank noiseless branch not unique: {nontrivial}")
    a_strong = [r for r in sp.solve(nontrivial[0], a_lr) if r.is_positive]
    if len(a_weak) != 1 or len(a_strong) != 1:
        raise RuntimeError(f"low-rank thresholds not unique: {a_weak}, {a_strong}")
    return {"err_tau": err_tau, "tau_c": tau_c, "overlap2": overlap2, "v": v_branch,
            "v_noiseless": sp.factor(nontrivial[0]), "a_weak": sp.simplify(a_weak[0]),
            "a_strong": a_strong[0]}


# ----------------------------------------------------------------------- errors
@cached_derivation(gaussian_prior)
def gen_error_identity(seq_len: int):
    """Bayes test error of the identity link (aim.md 3.8): ``sum_ab Var[h_ab(omega +
    sqrt(V) xi)]`` over ``xi ~ N(0, I_K)`` (``V`` includes the output noise ``s2``), by
    exact Gaussian expectations; ``T(T+1) V`` (``2 V`` for the QN model)."""
    out, u = link_outputs(seq_len, "identity")
    xi = sp.symbols(f"xi0:{len(u)}", real=True)
    shifted = [o.subs({uk: uk + sp.sqrt(V) * x for uk, x in zip(u, xi)}, simultaneous=True)
               for o in out]
    total = sum(gaussian_prior.gaussian_expectation((o - o.subs({x: 0 for x in xi})) ** 2, *xi)
                for o in shifted)
    return sp.factor(sp.expand(total))


# ----------------------------------------------------------------------- hardmax, T = 2
HARDMAX_VARIANTS = registry.HARDMAX_VARIANTS


def hardmax_projection(seq_len: int = 2):
    """Hardmax of ``T = 2`` tokens (aim.md 3.5): ``y_aa = 1[h_aa > h_ab]`` reveals the
    signs of ``h_11 - h_12`` and ``h_22 - h_21``, linear in the u-space indices.  Returns
    the ``2 x K`` matrix ``P`` of these differences, differentiated from :func:`index_symbols`
    (``P P^T = [[3, 1], [1, 3]]``: the noise covariance of aim.md 3.5 over ``V``)."""
    if int(seq_len) != 2:
        raise ValueError(f"hardmax is implemented for seq_len = 2 only, got {seq_len}")
    u, h, _ = index_symbols(2)
    diffs = sp.Matrix([h[0, 0] - h[0, 1], h[1, 1] - h[1, 0]])
    return diffs.jacobian(u)
