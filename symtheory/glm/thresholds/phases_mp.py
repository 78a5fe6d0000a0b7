"""An independent mpmath path for the phase transitions of a scalar GLM: each threshold
recomputed at ``dps`` and at ``2 dps`` digits, the digits on which the two agree filling
:attr:`~symtheory.glm.thresholds.phases.PhaseTransition.digits_confirmed` (the rule
"bracket first, confirm at 2x digits": the float64 report brackets, mpmath confirms).

Nothing here calls the float64 kernels or quadrature for a value; they only supply
starting brackets.  The equations are those of Barbier, Krzakala, Macris, Miolane &
Zdeborova, PNAS 116 (2019), Eqs. (8)-(10), in the error ``V = rho - q``
(:mod:`symtheory.glm.se.scalar_glm`), and every function is derived from the symbolic
declarations:

channel
    ``log Z_y(omega, V)`` is ``channel.log_Z`` at each of ``channel.levels``,
    ``g_y = d log Z_y / d omega`` by ``sp.diff``, both lambdified with the mpmath
    versions of the stable functions (:data:`symtheory.core.special.MPMATH_NAMESPACE`);

        Psi(V)     = sum_y E_xi[ Z_y(sqrt(q) xi, V) g_y^2 ],
        psi_out(V) = sum_y E_xi[ Z_y log Z_y ],      q = rho - V,

    by ``mpmath.quad`` (tanh-sinh) split at each jump ``xi = u_j / sqrt(q)`` of the
    channel and at ``+-1, +-6`` front widths ``sqrt(V / q)`` from it;
prior
    ``log Z_k(B, A)`` of each component (``component.log_partition``), its first two
    ``B``-derivatives by ``sp.diff``; over ``w0 ~ P_k`` (a point mass or ``N(m, s2)``)
    ``B = q_hat w0 + sqrt(q_hat) xi ~ N(q_hat m, q_hat + q_hat^2 s2)``, so

        mmse_P(q_hat) = sum_k p_k E_k[ Var(w0 | B) ],
        psi_c(q_hat)  = sum_k p_k ( E_k[ log sum_j p_j Z_j(B, q_hat) ] - q_hat rho_k / 2 ),

    ``Var(w0 | B)`` by the law of total variance over the posterior component weights,
    one Gaussian integral per component (split at the fronts where the posterior moves
    between point masses), ``psi_c`` with ``log10 q_hat`` extra digits for its
    cancellation; ``psi_c(inf) = sum_k p_k log p_k`` for point masses;
curve
    ``alpha(V) = mmse_P^{-1}(V) / Psi(V)``, the inverse by ``mpmath.findroot``
    (Anderson-Bjoerck) in ``log q_hat`` on a bracket around the float64 inverse, and
    ``phi(V) = q_hat V / 2 + psi_c(q_hat) + alpha psi_out(V)``.

Thresholds:

``alpha_alg``
    the maximum of ``alpha(V)``: the root of the central difference
    ``(alpha(V(1 + h)) - alpha(V(1 - h))) / (2 h V)``, ``h = 10^(-d/3)`` at ``d``
    working digits (the root moves by ``O(h^2)`` and by the noise ``10^-d / h``, both
    ``10^(-2d/3)`` in ``V``, hence ``10^(-4d/3)`` in ``alpha`` at a quadratic maximum),
    bracketed around the report's float64 ``V``;
``alpha_IT``
    with a perfect-recovery informed branch (``phi_inf = psi_c(inf) + alpha psi_out(0+)``,
    ``psi_out(0+) = 0`` for a deterministic channel): on the uninformed branch the root
    in ``V`` of ``phi(V) - phi_inf(alpha(V))``, bracketed at the float64 point where
    ``alpha(V)`` equals the report's value; below ``alpha_c`` of a trivial channel the
    uninformed point is ``V = v_max`` with ``phi = alpha psi_out(v_max)`` and the
    crossing is ``alpha = psi_c(inf) / (psi_out(v_max) - psi_out(0+))``;
``alpha_c``
    ``lim_{V -> v_max} alpha(V)``: with ``mmse_P(q_hat) = v - q_hat v^2 + O(q_hat^2)``
    (``v = v_max``, the small-SNR expansion) and ``Psi(v_max) = 0``,
    ``alpha_c = -1 / (v^2 Psi'(v_max))``, where by Stein's lemma
    ``Psi'(V) = E_xi[ d_V h - d_omega^2 h / 2 ]`` (``h = sum_y Z_y g_y^2``, derivatives
    by ``sp.diff``) is regular at ``q = mean^2``.

A density component of the prior is refused (``NotImplementedError``), as is an informed
branch at ``V > 0`` (its crossing needs a nested solve not written here) and perfect
recovery with a noisy channel (``psi_out(0+)`` is then a limit): those transitions keep
``digits_confirmed = None`` and say why in their message.
"""
from __future__ import annotations

import math

import mpmath
import sympy as sp
from sympy.printing.pycode import MpmathPrinter

from ...core import special
from ..factors.separable_prior import A as _A
from ..factors.separable_prior import B as _B

#: guard digits carried above the digits asked for
GUARD = 5
#: front widths either side of a jump at which the Gaussian integrals are split
FRONT_SPLITS = (1, 6)


def _lambdify(args, expr):
    return sp.lambdify(args, expr, modules=[special.MPMATH_NAMESPACE, "mpmath"],
                       printer=MpmathPrinter({"fully_qualified_modules": False}))


def _mpf(expr):
    """A SymPy number at the working precision (rationals stay exact until here)."""
    return mpmath.mpf(sp.N(sp.sympify(expr), mpmath.mp.dps + 10))


def _gauss(f, cuts=()):
    """``E_xi f(xi)``, ``xi ~ N(0, 1)``, tanh-sinh on the real line split at ``cuts``."""
    pts = sorted(set(cuts))
    return mpmath.quad(lambda x: mpmath.npdf(x) * f(x), [mpmath.ninf] + pts + [mpmath.inf])


def _front_cuts(centres, widths):
    out = []
    for c, w in zip(centres, widths):
        out.append(c)
        for k in FRONT_SPLITS:
            out += [c - k * w, c + k * w]
    return out


class MpChannel:
    """The channel's ``log Z_y``, ``g_y`` (and for ``alpha_c`` the derivatives of
    ``h = sum_y Z_y g_y^2``) as mpmath functions of ``(omega, V)``."""

    def __init__(self, channel):
        #: the jumps and parameter values at the working precision (set by MpCurve)
        self.channel, self.jumps, self.pvals = channel, [], []
        om, V = channel.omega, channel.V
        args = (om, V) + tuple(channel.params)
        self.exprs = []
        for level in channel.levels:
            lz = channel.log_Z.subs(channel.y, level)
            if lz.has(sp.nan) or lz.has(sp.Piecewise):
                raise NotImplementedError(f"log Z_out of channel {channel.name!r} at y = "
                                          f"{level} does not reduce to one expression: {lz}")
            self.exprs.append(lz)
        self.log_Z = [_lambdify(args, lz) for lz in self.exprs]
        self.g = [_lambdify(args, sp.diff(lz, om)) for lz in self.exprs]
        self._h_derivs = None
        self._memo = {}

    def terms(self, omega, V):
        """``(sum_y Z g^2, sum_y Z log Z)`` at ``omega``, ``V`` (memoized: ``Psi`` and
        ``psi_out`` integrate on the same nodes)."""
        key = (mpmath.mp.prec, omega, V, tuple(self.pvals))
        if key not in self._memo:
            if len(self._memo) > 200000:
                self._memo.clear()
            self._memo[key] = self._terms(omega, V)
        return self._memo[key]

    def _terms(self, omega, V):
        psi, zlz = 0, 0
        for lz, g in zip(self.log_Z, self.g):
            L = lz(omega, V, *self.pvals)
            if L == mpmath.ninf:
                continue
            Z = mpmath.exp(L)
            psi += Z * g(omega, V, *self.pvals) ** 2
            zlz += Z * L
        return psi, zlz

    def _cuts(self, s, V):
        if s == 0:
            return []
        return _front_cuts([u / s for u in self.jumps], [mpmath.sqrt(V) / s] * len(self.jumps))

    def Psi(self, V, q):
        s = mpmath.sqrt(q)
        if s == 0:
            return self.terms(mpmath.mpf(0), V)[0]
        return _gauss(lambda x: self.terms(s * x, V)[0], self._cuts(s, V))

    def psi_out(self, V, q):
        s = mpmath.sqrt(q)
        if s == 0:
            return self.terms(mpmath.mpf(0), V)[1]
        return _gauss(lambda x: self.terms(s * x, V)[1], self._cuts(s, V))

    def dPsi_dV(self, V, q):
        """``Psi'(V) = E_xi[d_V h - d_omega^2 h / 2]`` at ``q = rho - V`` (Stein)."""
        if self._h_derivs is None:
            om, Vs = self.channel.omega, self.channel.V
            h = sum(sp.exp(lz) * sp.diff(lz, om) ** 2 for lz in self.exprs)
            self._h_derivs = _lambdify((om, Vs) + tuple(self.channel.params),
                                       sp.diff(h, Vs) - sp.diff(h, om, 2) / 2)
        d = lambda om, V: self._h_derivs(om, V, *self.pvals)  # noqa: E731
        s = mpmath.sqrt(q)
        if s == 0:
            return d(mpmath.mpf(0), V)
        return _gauss(lambda x: d(s * x, V), self._cuts(s, V))


class MpPrior:
    """The prior's ``mmse_P`` and ``psi_c`` (module docstring) in mpmath, point-mass and
    Gaussian components."""

    def __init__(self, prior):
        self.prior, self.comps = prior, []
        for c in prior.components:
            if c.kind.startswith("delta"):
                s2 = sp.Integer(0)
            elif c.kind.startswith("N("):
                s2 = sp.nsimplify(c.second_moment - c.mean ** 2)
            else:
                raise NotImplementedError(f"prior {prior.name!r}: the mpmath path supports "
                                          f"point masses and Gaussians, not the {c.kind!r} "
                                          "component")
            if c.weight == 0:
                continue
            lz = c.log_partition
            d1 = sp.diff(lz, _B)
            self.comps.append({"w": c.weight, "m": c.mean, "s2": s2, "m2": c.second_moment,
                               "lz": _lambdify((_B, _A), lz), "d1": _lambdify((_B, _A), d1),
                               "d2": _lambdify((_B, _A), sp.diff(d1, _B)),
                               "delta": c.kind.startswith("delta")})
        deltas = sorted({sp.nsimplify(c["m"]) for c in self.comps if c["delta"]})
        self.mids = sorted({(a + b) / 2 for i, a in enumerate(deltas) for b in deltas[i + 1:]}
                           | {sp.Integer(0)})
        gaps = [b - a for a, b in zip(deltas, deltas[1:])]
        self.gap = min(gaps) if gaps else sp.Integer(1)
        self._cache, self._memo = {}, {}

    def _consts(self):
        """The components' numbers at the working precision (converted once per precision)."""
        key = mpmath.mp.prec
        if key not in self._cache:
            self._cache[key] = {
                "logw": [mpmath.log(_mpf(c["w"])) for c in self.comps],
                "w": [_mpf(c["w"]) for c in self.comps], "m": [_mpf(c["m"]) for c in self.comps],
                "s2": [_mpf(c["s2"]) for c in self.comps],
                "m2": [_mpf(c["m2"]) for c in self.comps],
                "mids": [_mpf(m) for m in self.mids], "gap": _mpf(self.gap)}
        return self._cache[key]

    def _memo_posterior(self, Bv, A, logw):
        key = (mpmath.mp.prec, Bv, A)
        if key not in self._memo:
            if len(self._memo) > 200000:
                self._memo.clear()
            self._memo[key] = self._posterior(Bv, A, logw)
        return self._memo[key]

    def _posterior(self, Bv, A, logw):
        """``(log Z, mean, variance)`` of the posterior at ``(B, A)``."""
        logs = [lw + c["lz"](Bv, A) for lw, c in zip(logw, self.comps)]
        top = max(logs)
        r = [mpmath.exp(x - top) for x in logs]
        tot = mpmath.fsum(r)
        post = [x / tot for x in r]
        d1 = [c["d1"](Bv, A) for c in self.comps]
        mean = mpmath.fsum(p * d for p, d in zip(post, d1))
        var = mpmath.fsum(p * (c["d2"](Bv, A) + (d - mean) ** 2)
                          for p, c, d in zip(post, self.comps, d1))
        return top + mpmath.log(tot), mean, var

    def _expect(self, qhat, which):
        """``sum_k p_k E_k[f(B)]`` with ``f`` the posterior's log Z (``which = 0``, minus
        ``q_hat rho_k / 2``) or its variance (``2``), ``B ~ N(q_hat m_k, q_hat + q_hat^2
        s2_k)``."""
        k = self._consts()
        total = 0
        for i in range(len(self.comps)):
            mu = qhat * k["m"][i]
            sd = mpmath.sqrt(qhat + qhat ** 2 * k["s2"][i])
            cuts = _front_cuts([(qhat * m - mu) / sd for m in k["mids"]],
                               [1 / (sd * k["gap"])] * len(k["mids"]))
            val = _gauss(lambda t: self._memo_posterior(mu + sd * t, qhat, k["logw"])[which],
                         cuts)
            if which == 0:
                val -= qhat * k["m2"][i] / 2
            total += k["w"][i] * val
        return total

    def mmse(self, qhat):
        with mpmath.extraprec(self._extra(qhat)):
            return +self._expect(qhat, 2)

    def psi_c(self, qhat):
        with mpmath.extraprec(self._extra(qhat)):
            return +self._expect(qhat, 0)

    @staticmethod
    def _extra(qhat):
        """Bits added for ``psi_c``: ``E log Z = q_hat rho / 2 + O(1)`` cancels
        ``log2 q_hat`` of them (``mmse`` runs alike, so both share the nodes)."""
        return max(0, int(mpmath.log(qhat + 1, 2))) + 10

    def psi_c_inf(self):
        """``psi_c(q_hat -> inf) = sum_k p_k log p_k`` (each point mass recovered exactly)."""
        if not all(c["delta"] for c in self.comps):
            raise NotImplementedError("perfect recovery with a Gaussian component: psi_c -> -inf")
        k = self._consts()
        return mpmath.fsum(w * lw for w, lw in zip(k["w"], k["logw"]))


class MpCurve:
    """The fixed-point curve at the working precision, by ``V`` (``alpha(V) =
    mmse_P^{-1}(V) / Psi(V)``, the inverse bracketed around the float64 one) or by
    ``q_hat`` (``V = mmse_P(q_hat)``, ``alpha = q_hat / Psi(V)``: the same curve without
    the inverse, which the solvers use: one prior integral per point instead of ~6)."""

    def __init__(self, se, params=None):
        self.se = se
        params = se.params if params is None else params
        self.params = [p if isinstance(p, sp.Expr) else sp.nsimplify(p) for p in params]
        # the jumps at the declared parameters (SymPy, not the float64 copy)
        sub = dict(zip(se.channel.params, self.params))
        lik = se.channel.likelihood
        self.jump_exprs = [sp.sympify(b).subs(sub) for b in
                           (lik.breakpoints if lik is not None else ())]
        self.channel = MpChannel(se.channel)
        self.prior = MpPrior(se.prior)
        self.cache = {}

    def _constants(self):
        key = mpmath.mp.prec
        if key not in self.cache:
            comps = self.se.prior.components
            rho = mpmath.fsum(_mpf(c.weight * c.second_moment) for c in comps)
            mean = mpmath.fsum(_mpf(c.weight * c.mean) for c in comps)
            self.cache[key] = {"rho": rho, "v_max": rho - mean ** 2,
                               "jumps": [_mpf(j) for j in self.jump_exprs],
                               "params": [_mpf(p) for p in self.params], "points": {}}
        self.channel.jumps = self.cache[key]["jumps"]
        self.channel.pvals = self.cache[key]["params"]
        return self.cache[key]

    @property
    def rho(self):
        return self._constants()["rho"]

    @property
    def v_max(self):
        return self._constants()["v_max"]

    def inverse_mmse(self, V):
        """``q_hat`` with ``mmse_P(q_hat) = V``: Anderson-Bjoerck in ``log q_hat`` on a
        bracket around the float64 inverse."""
        guess = self.se.inverse_mmse(float(V))

        def h(q):
            return mpmath.log(self.prior.mmse(q)) - mpmath.log(V)
        return _bracket_root(h, guess, mpmath.mpf(1e-10), sign=1)

    def at(self, qhat):
        """The fixed point with ``q_hat``: ``V``, ``Psi``, ``alpha``."""
        qhat = mpmath.mpf(qhat)
        pts = self._constants()["points"]
        if qhat not in pts:
            V = self.prior.mmse(qhat)
            Psi = self.channel.Psi(V, self.rho - V)
            pts[qhat] = {"V": V, "qhat": qhat, "Psi": Psi, "alpha": qhat / Psi}
        return pts[qhat]

    def point(self, V):
        """The fixed point with error ``V`` (through the inverse prior map)."""
        return self.at(self.inverse_mmse(mpmath.mpf(V)))

    def alpha(self, qhat):
        return self.at(qhat)["alpha"]

    def phi(self, qhat):
        """``q_hat V / 2 + psi_c(q_hat) + alpha psi_out(V)``."""
        p = self.at(qhat)
        if "phi" not in p:
            V = p["V"]
            p["psi_out"] = self.channel.psi_out(V, self.rho - V)
            p["phi"] = qhat * V / 2 + self.prior.psi_c(p["qhat"]) + p["alpha"] * p["psi_out"]
        return p["phi"]


def _bracket_root(f, x0, rel, grow=10, tries=8, sign=0):
    """``findroot`` (Anderson-Bjoerck) of ``f`` on ``x0 (1 +- rel)``, the bracket widened
    by ``grow`` until ``f`` changes sign (from ``+`` to ``-`` if ``sign = 1``)."""
    x0, seen = mpmath.mpf(x0), {}

    def once(x):    # findroot re-evaluates the bracket's ends (at 20 more bits)
        if x not in seen:
            seen[x] = f(x)
        return seen[x]
    for _ in range(tries):
        lo, hi = x0 * (1 - rel), x0 * (1 + rel)
        f_lo, f_hi = once(lo), once(hi)
        if f_lo * f_hi < 0 and (sign == 0 or sign * f_lo > 0):
            tol = mpmath.mpf(10) ** (-mpmath.mp.dps)
            return mpmath.findroot(once, (lo, hi), solver="anderson", tol=tol, verify=False)
        rel *= grow
        if rel >= 1:
            break
    raise ArithmeticError(f"no sign change of the function around {mpmath.nstr(x0, 8)}")


def alpha_alg(curve: MpCurve, q0):
    """``(max alpha, q_hat)`` near ``q0``: the root of the central difference of
    ``alpha(q_hat)`` with relative step ``h = 10^(-d/3)`` (module docstring; ``q_hat``
    is monotone in ``V``, so the extremum is the same)."""
    h = mpmath.mpf(10) ** (-(mpmath.mp.dps // 3))

    def slope(q):
        return (curve.alpha(q * (1 + h)) - curve.alpha(q * (1 - h))) / (2 * h * q)
    q = _bracket_root(slope, q0, mpmath.mpf(10) ** -5)
    return curve.alpha(q), q


def alpha_c(curve: MpCurve):
    """``-1 / (v_max^2 Psi'(v_max))`` (module docstring)."""
    v = curve.v_max
    return -1 / (v ** 2 * curve.channel.dPsi_dV(v, curve.rho - v)), mpmath.mpf(0)


def alpha_it(curve: MpCurve, q_branch):
    """The crossing with the perfect-recovery branch (module docstring), ``q_branch`` the
    float64 ``q_hat`` on the uninformed branch where ``alpha`` equals the report's value
    (``None``: the trivial point ``q_hat = 0``, below ``alpha_c``)."""
    if not curve.se.deterministic:
        raise NotImplementedError("perfect recovery with a noisy channel: psi_out(0+) is a "
                                  "limit the mpmath path does not take")
    psi_inf, psi0 = curve.prior.psi_c_inf(), mpmath.mpf(0)
    if q_branch is None:
        v = curve.v_max
        return psi_inf / (curve.channel.psi_out(v, curve.rho - v) - psi0), mpmath.mpf(0)

    def gap(q):
        return curve.phi(q) - (psi_inf + curve.alpha(q) * psi0)
    q = _bracket_root(gap, q_branch, mpmath.mpf(10) ** -9)
    return curve.alpha(q), q


def _uninformed_qhat(se, report, a_it, V_alg):
    """The float64 ``q_hat`` on the uninformed branch (``V_alg < V < v_max``) where
    ``alpha = a_it``: bracketed by the report's curve, refined by Brent in ``log V``."""
    from scipy.optimize import brentq

    pts = sorted((p for p in report.curve if V_alg < p["V"] < se.v_max), key=lambda p: p["V"])
    for p, r in zip(pts, pts[1:]):
        if (p["alpha"] - a_it) * (r["alpha"] - a_it) <= 0:
            lo, hi = math.log(p["V"]), math.log(r["V"])
            break
    else:
        lo, hi = math.log(pts[-1]["V"]), math.log(se.v_max * (1 - 1e-12))
    t = brentq(lambda t: se.alpha_of(math.exp(t)) - a_it, lo, hi, xtol=1e-15, rtol=1e-15)
    return se.inverse_mmse(math.exp(t))


def _thresholds(curve: MpCurve, report, seeds, dps):
    """Every threshold of ``report`` at ``dps`` working digits (plus guard), as
    ``{kind: (value, V) or exception}``; ``seeds`` the float64 brackets."""
    out = {}
    with mpmath.workdps(dps + GUARD):
        found = {t.kind: t for t in report.transitions}
        for kind in ("alpha_c", "alpha_alg", "alpha_IT"):
            if kind not in found:
                continue
            try:
                if kind == "alpha_c" or (kind == "alpha_alg" and seeds["alpha_alg"] is None):
                    val = alpha_c(curve)
                elif kind == "alpha_alg":
                    val = alpha_alg(curve, seeds["alpha_alg"])
                else:
                    if not report.perfect_recovery:
                        raise NotImplementedError("the informed branch is at V > 0: its "
                                                  "crossing needs a nested solve, not written")
                    val = alpha_it(curve, seeds["alpha_IT"])
            except (NotImplementedError, ArithmeticError, ZeroDivisionError) as exc:
                val = exc
            out[kind] = val
    return out


def confirm_digits(se, report, dps: int = 20, *, params=None):
    """Recompute every threshold of ``report`` (from
    :func:`~symtheory.glm.thresholds.phases.phase_transitions` on ``se``) in mpmath at
    ``dps`` and ``2 dps`` digits; fill each transition's ``digits_confirmed`` with
    ``floor(-log10(|a_dps - a_2dps| / |a_2dps|))`` capped at ``dps`` and append the
    mpmath value and its agreement with the float64 one to its message (the two mpmath
    values are kept as the transition's ``mp_values``).  ``params``: the
    channel parameters as SymPy numbers (default ``se.params``, float64) when they are
    known to more digits.  Returns ``report``."""
    dps = int(dps)
    if dps < 5:
        raise ValueError(f"dps must be >= 5, got {dps}")
    curve = MpCurve(se, params)
    found = {t.kind: t for t in report.transitions}
    seeds = {"alpha_alg": None, "alpha_c": None, "alpha_IT": None}
    if "alpha_alg" in found and found["alpha_alg"].V < se.v_max:
        seeds["alpha_alg"] = se.inverse_mmse(found["alpha_alg"].V)
    if "alpha_c" in found:
        seeds["alpha_c"] = found["alpha_c"].value
    if "alpha_IT" in found and report.perfect_recovery:
        a_it = found["alpha_IT"].value
        below_c = seeds["alpha_c"] is not None and (seeds["alpha_alg"] is None
                                                    or a_it <= seeds["alpha_c"])
        if not below_c:
            V_alg = found["alpha_alg"].V if "alpha_alg" in found else 0.0
            seeds["alpha_IT"] = _uninformed_qhat(se, report, a_it, V_alg)
    first = _thresholds(curve, report, seeds, dps)
    # the 2x run starts from the dps run's points (its brackets; its own roots)
    seeds2 = dict(seeds)
    if isinstance(first.get("alpha_alg"), tuple) and seeds["alpha_alg"] is not None:
        seeds2["alpha_alg"] = first["alpha_alg"][1]
    if isinstance(first.get("alpha_IT"), tuple) and seeds["alpha_IT"] is not None:
        seeds2["alpha_IT"] = first["alpha_IT"][1]
    second = _thresholds(curve, report, seeds2, 2 * dps)
    for kind, t in found.items():
        a, b = first.get(kind), second.get(kind)
        if not isinstance(a, tuple) or not isinstance(b, tuple):
            why = a if not isinstance(a, tuple) else b
            t.message += f"; mpmath: not confirmed ({why})"
            continue
        t.digits_confirmed = _agreement(a[0], b[0], dps)
        t.mp_values = (a[0], b[0])
        rel64 = abs(mpmath.mpf(t.value) - b[0]) / abs(b[0])
        t.message += (f"; mpmath at {dps} and {2 * dps} digits: "
                      f"{mpmath.nstr(b[0], 2 * dps)}, {t.digits_confirmed} digits confirmed "
                      f"(float64 off by {float(rel64):.2g} relative)")
    return report


def _agreement(a, b, dps):
    diff = abs(a - b)
    if diff == 0:
        return dps
    return int(min(dps, mpmath.floor(-mpmath.log10(diff / abs(b)))))
