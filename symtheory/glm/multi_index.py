"""Multi-index models with tokens: declaration -> channel, posterior moments.

A model is declared by its link ``y = g(Z)`` with ``Z = W x / sqrt(D)`` the ``P x M``
matrix of indices (``P`` index rows, ``M`` tokens), written in SymPy
(smi.md Eq. 1).  Everything message passing and state evolution need comes from the
output channel (smi.md Eq. 9)

    Z_out(y; omega, V) = int dZ prod_m N(z_{.m}; omega_{.m}, V) P_out(y | Z),

through the posterior moments of ``Z``:  ``g_out = V^{-1}(E[z_{.m}|y] - omega_{.m})`` and
``[dg_out]_{am,bn} = [V^{-1} Cov(z_{.m}, z_{.n}|y) V^{-1}]_{ab} - (V^{-1})_{ab} delta_mn``
(smi.md Eq. 12), computed from first and second moments of one weighted quadrature
(no finite differences).  Two generated integrators:

* **stochastic channels** ``P_out(y|Z) = exp(loglik(y, Z))`` (e.g. Gaussian noise on
  ``g``): tensor quadrature over all ``P M`` indices around ``omega`` (rule scaled by
  the Cholesky factor of ``V``);
* **deterministic links** with a :class:`DeterministicReduction` (smi.md Sec. 9,
  Corollary E.1): ``y = head(E)`` with ``E = T(u) h^T``, ``u`` the freely integrated
  rows (earlier layers), ``h`` the solved rows (last layer).  SymPy solves
  ``head(E) = y`` for the branches ``E^(k)(y)`` and derives the output Jacobian
  ``|det d y_obs / d E|``; the reduced integral over ``u`` (Gaussian marginal of ``u``
  times the conditional of ``h`` given ``u``, per token) is one generated Numba pass
  returning ``(log Z, E[z], Cov[z])``:

      Z_out = sum_k E_u[ N(T(u)^{-1} E^(k); mean_{h|u}, C_{h|u}) / (|det T(u)|^r |det dy/dE (E^(k))|) ].

The fused Numba drivers of both integrators are source templates in
``symtheory/glm/templates/`` (rendered by :func:`symtheory.core.codegen.render_template`).

Symbolic checks run at declaration: the reduction reproduces the link
(``head(T(u) h^T) == g``) and the inversion features agree on both sides, at random
points; the even symmetries ``g(..., -h_l, ...) = g`` of each row group are detected.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import sympy as sp

from ..core._moments_nb import moment_change_batch
from ..core.codegen import Kernel, render_template
from ..core.quadrature import AdaptiveRule, TensorRule
from ..core.validate import ParameterError, real
from .laplace_qmc import TEMPLATE as _MIXTURE_TEMPLATE
from .laplace_qmc import LaplaceQMCRule, by_point_set, flip_patterns, rqmc_levels
from .link_analysis import NotApplicable, affine_split, breakpoints, discrete_structure
from .orthant_mixture import OrthantMixture


# ---------------------------------------------------------------------- declaration
@dataclass
class DeterministicReduction:
    """How a deterministic link is reduced to an integral over the free rows (smi.md 9).

    ``y = head(E)`` with ``E = mixing(u) @ h^T`` (``M x r``), ``h`` the ``solved_rows``
    of ``Z`` and ``u`` all other rows.  ``observed`` lists the ``M r`` output entries
    used as coordinates of the density of ``y``.  ``features`` (optional) are pairs
    ``(f_y(Y), f_E(E))`` with ``f_y(head(E)) = f_E(E)`` that turn ``head(E) = y`` into a
    system SymPy solves (e.g. softmax log-ratios -> logit differences); without them
    ``head(E)[observed] = y[observed]`` is solved directly.
    """

    solved_rows: tuple
    mixing: sp.Matrix
    E: sp.Matrix
    head: sp.Matrix
    observed: tuple
    features: tuple | None = None


def _random_check(lhs, rhs, symbols, *, trials=6, seed=0, scale=1.0, rtol=1e-9):
    """Max relative difference of two expression lists at random points."""
    rng = np.random.default_rng(seed)
    f = sp.lambdify(list(symbols), [sp.Matrix(lhs) - sp.Matrix(rhs), sp.Matrix(rhs)], "mpmath")
    worst = 0.0
    for _ in range(trials):
        vals = list(scale * rng.standard_normal(len(symbols)))
        diff, ref = f(*vals)
        d = max(float(abs(v)) for v in diff) if len(diff) else 0.0
        s = max([float(abs(v)) for v in ref] + [1.0])
        worst = max(worst, d / s)
    return worst


class MultiIndexModel:
    """A sequence multi-index model ``y = g(Z)`` (+ optional Gaussian output noise).

    Parameters
    ----------
    name:
        identifier used in kernel names.
    indices:
        ``P x M`` SymPy matrix of distinct real symbols (rows = index rows, columns = tokens).
    link:
        SymPy matrix of outputs, entries in ``indices`` and ``params``.
    params:
        ``{symbol: value}`` of the model's constants (e.g. skip ``c``, inverse temperature).
    row_groups:
        partition of the rows into groups (e.g. layers); even symmetry is tested per group.
    reduction:
        a :class:`DeterministicReduction` for noiseless channels.
    """

    def __init__(self, name, indices, link, *, params=None, row_groups=None, reduction=None,
                 description=""):
        if not str(name).isidentifier():
            raise ValueError(f"model name must be an identifier, got {name!r}")
        self.name = name
        self.indices = sp.Matrix(indices)
        self.link = sp.Matrix(link)
        self.params = dict(params or {})
        self.param_symbols = tuple(self.params)
        self.description = description
        P, M = self.indices.shape
        self.P, self.M = P, M
        syms = list(self.indices)
        if len(set(syms)) != len(syms) or not all(isinstance(s, sp.Symbol) for s in syms):
            raise ValueError("indices must be a matrix of distinct symbols")
        extra = self.link.free_symbols - set(syms) - set(self.param_symbols)
        if extra:
            raise ValueError(f"link depends on undeclared symbols {sorted(map(str, extra))}")
        self.row_groups = tuple(tuple(g) for g in (row_groups or [(a,) for a in range(P)]))
        if sorted(a for g in self.row_groups for a in g) != list(range(P)):
            raise ValueError(f"row_groups must partition rows 0..{P - 1}, got {self.row_groups}")
        self.even_groups = self._detect_even_groups()
        self.reduction = reduction
        if reduction is not None:
            self._check_reduction()
        self._channels = {}
        self._link_kernel = None

    # --------------------------------------------------------------- symmetry
    def _detect_even_groups(self):
        """``{group: True/False}``: is ``g`` invariant under ``Z[group] -> -Z[group]``?"""
        out = {}
        for g in self.row_groups:
            flip = {self.indices[a, m]: -self.indices[a, m] for a in g for m in range(self.M)}
            flipped = self.link.xreplace(flip)
            if flipped == self.link:
                out[g] = True
                continue
            worst = _random_check(flipped.subs(self.params), self.link.subs(self.params),
                                  list(self.indices))
            out[g] = worst < 1e-12
        return out

    @property
    def is_even(self) -> bool:
        """Every row group flips freely: ``g_out(y, 0, V) = 0``, block-diagonal ``J``."""
        return all(self.even_groups.values())

    # --------------------------------------------------------------- reduction
    def _check_reduction(self):
        red = self.reduction
        P, M = self.P, self.M
        solved = tuple(red.solved_rows)
        free = tuple(a for a in range(P) if a not in solved)
        r = len(solved)
        if red.E.shape != (M, r):
            raise ValueError(f"reduction E must be {M} x {r}, got {red.E.shape}")
        if len(red.observed) != M * r:
            raise ValueError(f"reduction needs M r = {M * r} observed entries, got {len(red.observed)}")
        free_syms = {self.indices[a, m] for a in free for m in range(M)}
        if not red.mixing.free_symbols <= free_syms | set(self.param_symbols):
            raise ValueError("the mixing matrix may depend only on the free rows and parameters")
        h = sp.Matrix([[self.indices[a, m] for m in range(M)] for a in solved])
        E_of_Z = red.mixing * h.T
        rebuilt = red.head.xreplace(dict(zip(list(red.E), list(E_of_Z))))
        worst = _random_check(rebuilt.subs(self.params), self.link.subs(self.params),
                              list(self.indices))
        if worst > 1e-10:
            raise ValueError(f"reduction does not reproduce the link (relative difference {worst:.2e})")
        if red.features:
            Y = self.output_symbols
            lhs = [fy.xreplace(dict(zip(list(Y), list(red.head)))) for fy, _ in red.features]
            rhs = [fe for _, fe in red.features]
            worst = _random_check([e.subs(self.params) for e in lhs],
                                  [e.subs(self.params) for e in rhs], list(red.E), scale=0.7)
            if worst > 1e-10:
                raise ValueError(f"inversion features disagree with the head ({worst:.2e})")
        self.free_rows, self.solved_rows = free, solved

    @property
    def output_symbols(self) -> sp.Matrix:
        rows, cols = self.link.shape
        return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"y_{i}_{j}", real=True))

    def derive_branches(self):
        """Inversion branches ``[E^(k)(y)]`` of ``head(E) = y``, solved by SymPy."""
        red = self.reduction
        Y = self.output_symbols
        E = list(red.E)
        if red.features:
            fs = sp.symbols(f"f0:{len(red.features)}", real=True)
            eqs = [fe - f for (_, fe), f in zip(red.features, fs)]
            sols = sp.solve(eqs, E, dict=True)
            back = {f: fy for f, (fy, _) in zip(fs, red.features)}
        else:
            eqs = [red.head[i, j] - Y[i, j] for i, j in red.observed]
            sols = sp.solve(eqs, E, dict=True)
            back = {}
        if not sols:
            raise ValueError("SymPy found no inversion branch for the reduction")
        branches = []
        for sol in sols:
            Ek = [sp.sympify(sol.get(e, e)).xreplace(back) for e in E]
            if any(set(x.free_symbols) & set(E) for x in Ek):
                raise ValueError("inversion left the system underdetermined")
            branches.append(Ek)
        return branches

    def derive_output_jacobian(self):
        """``det d y_obs / d E`` (signed; its modulus enters the density of ``y``)."""
        red = self.reduction
        obs = sp.Matrix([red.head[i, j] for i, j in red.observed])
        return sp.simplify(obs.jacobian(sp.Matrix(list(red.E))).det())

    # --------------------------------------------------------------- kernels
    @property
    def link_kernel(self) -> Kernel:
        if self._link_kernel is None:
            args = list(self.indices) + list(self.param_symbols)
            self._link_kernel = Kernel(f"mi_{self.name}_link", args, list(self.link),
                                       vector_args=list(self.indices),
                                       doc=f"link g(Z) of the multi-index model {self.name}")
        return self._link_kernel

    def g(self, Z: np.ndarray) -> np.ndarray:
        """``g(Z)`` for samples ``Z`` of shape ``(n, P, M)``; returns ``(n, *link.shape)``."""
        Z = np.asarray(Z, dtype=float)
        if Z.ndim != 3 or Z.shape[1:] != (self.P, self.M):
            raise ValueError(f"Z must have shape (n, {self.P}, {self.M}), got {Z.shape}")
        cols = [Z[:, a, m] for a in range(self.P) for m in range(self.M)]
        out = self.link_kernel.vec(*cols, *self.params.values())
        return out.reshape((Z.shape[0],) + tuple(self.link.shape))

    def channel(self, noise_variance: float | None = None, rule=None, *, check: bool = True):
        """The output channel (smi.md Eq. 9).

        * ``noise_variance`` given: ``y = g(Z) + sqrt(Delta) xi``, a
          :class:`GaussianNoiseChannel` whose integration is chosen from the link;
        * no noise, a :class:`DeterministicReduction`: :class:`ReducedChannel`;
        * no noise, a link constant on sign regions (``sign(z1 z2)``, hardmax):
          :class:`DiscreteOutputChannel`.

        ``rule``: ``None`` (an :class:`~symtheory.core.quadrature.AdaptiveRule`), an
        ``AdaptiveRule`` with another tolerance, or a ``TensorRule`` for the remaining
        quadrature (the reduced channel always uses a ``TensorRule``, default GH 30).
        ``check``: compare noisy and discrete channels with a brute-force quadrature at
        a few random points when first configured and refuse (:class:`ChannelCheckError`)
        a configuration that misses :data:`CHECK_RTOL` (``P M <= 2``; see
        :mod:`.multi_index_check`).
        """
        if noise_variance is not None:
            noise_variance = real("noise_variance", noise_variance, low=0.0, low_open=True)
            key = "noise"
        elif self.reduction is not None:
            key = "reduced"
        else:
            key = "discrete"
        if key not in self._channels:
            if key == "noise":
                self._channels[key] = GaussianNoiseChannel(self)
            elif key == "reduced":
                self._channels[key] = ReducedChannel(self)
            else:
                try:
                    self._channels[key] = DiscreteOutputChannel(self)
                except NotApplicable as exc:
                    raise ParameterError(
                        f"model {self.name!r} is deterministic but declares no reduction and its "
                        f"link is not discrete ({exc}); give noise_variance > 0 or a "
                        "DeterministicReduction") from None
        ch = self._channels[key].configured(noise_variance=noise_variance, rule=rule)
        if check and key != "reduced":
            ch.declaration_check()
        return ch


# ---------------------------------------------------------------------- channels
@dataclass(frozen=True)
class ChannelAccuracy:
    """What the last ``moments``/``gout`` call reached: the integration ``method``, the
    ``tolerance`` it aimed at and the per-sample estimated ``error`` of the posterior
    moments in natural units (``log Z``; means over prior standard deviations;
    covariances over their products)."""

    method: str
    tolerance: float
    error: np.ndarray

    @property
    def max_error(self) -> float:
        return float(np.max(self.error)) if self.error.size else 0.0

    @property
    def converged(self) -> bool:
        return bool(np.all(self.error <= self.tolerance))


def gout_from_moments(mean, cov, omega, V):
    """``g_out = V^{-1}(E[z_m|y] - omega_m)``, ``[dg_out]_{am,bn} = [V^{-1} Cov V^{-1}]_{ab}
    - (V^{-1})_{ab} delta_mn`` (smi.md Eq. 12); ``cov`` indexed ``a M + m``."""
    n, P, M = mean.shape
    Vinv = np.linalg.inv(V)
    g = np.einsum("ab,sbm->sam", Vinv, mean - np.asarray(omega, dtype=float).reshape(mean.shape))
    C = cov.reshape(n, P, M, P, M)
    dg = np.einsum("ac,scmek,eb->sambk", Vinv, C, Vinv)
    dg -= np.einsum("ab,mk->ambk", Vinv, np.eye(M))[None]
    return g, dg


class BlockGampChannel:
    """A multi-index channel in the flat layout of :func:`symtheory.glm.gamp.gamp` with
    ``blocks``: outputs ordered ``(sample, row, token)``, one block per row (layer), the
    ``P`` row variances ``V`` (the engine's per-block variances; ``V = diag(V)``, rows
    independent given the data).  ``gout`` returns ``g_out`` and the diagonal of
    ``d g_out/d omega`` (smi.md Eq. 12) from the channel's posterior moments;
    ``last_error`` keeps the channel's largest estimated error of the last call."""

    def __init__(self, channel, P: int, M: int, n_out: int):
        self.channel, self.P, self.M, self.n_out = channel, P, M, n_out
        self.last_error = None

    def gout(self, y, omega, V):
        n = len(omega) // (self.P * self.M)
        V = np.diag(np.broadcast_to(np.asarray(V, dtype=float), (self.P,)))
        om = np.asarray(omega, dtype=float).reshape(n, self.P, self.M)
        _, mean, cov = self.channel.moments(np.asarray(y).reshape(n, self.n_out), om, V)
        self.last_error = getattr(self.channel, "last_error", None)
        g, dg = gout_from_moments(mean, cov, om, V)
        diag = np.einsum("sambm->sam", dg)
        return g.ravel(), diag.ravel()


class _ChannelBase:
    """Shared post-processing: moments -> ``g_out``, ``dg_out``."""

    rule = None
    noise_variance: float | None = None
    last_accuracy: ChannelAccuracy | None = None
    check_report = None

    def __init__(self, model: MultiIndexModel):
        self.model = model
        self.P, self.M = model.P, model.M
        self._check_cache = {}

    def configured(self, noise_variance=None, rule=None):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.noise_variance = noise_variance
        new.rule = self._default_rule() if rule is None else rule
        if not isinstance(new.rule, (TensorRule, AdaptiveRule)):
            raise ParameterError(f"rule must be a TensorRule or an AdaptiveRule, got {rule!r}")
        new.last_accuracy = None
        return new

    def _default_rule(self):
        return AdaptiveRule()

    @property
    def last_error(self) -> float | None:
        """Largest estimated error of the last call (see :class:`ChannelAccuracy`)."""
        return None if self.last_accuracy is None else self.last_accuracy.max_error

    def _record(self, method, tolerance, error):
        error = np.asarray(error, dtype=float)
        self.last_accuracy = ChannelAccuracy(method, float(tolerance), error)
        bad = ~(error <= tolerance)
        if bad.any():
            warnings.warn(f"{type(self).__name__} of {self.model.name!r}: {int(bad.sum())} of "
                          f"{error.size} samples missed the tolerance {tolerance:g} (largest "
                          f"estimated error {np.nanmax(error):.2e}; method: {method})",
                          RuntimeWarning, stacklevel=3)

    def declaration_check(self):
        """Brute-force comparison at random points (once per configuration)."""
        from .multi_index_check import check_channel

        key = (self.noise_variance, self.rule)
        if key not in self._check_cache:
            self._check_cache[key] = check_channel(self)
        self.check_report = self._check_cache[key]
        return self.check_report

    @staticmethod
    def _check_V(V, P):
        V = np.asarray(V, dtype=float)
        if V.shape != (P, P):
            raise ParameterError(f"V must be {P} x {P}, got shape {V.shape}")
        if not np.all(np.isfinite(V)):
            raise ParameterError("V must be finite")
        V = 0.5 * (V + V.T)
        lam = np.linalg.eigvalsh(V)
        if lam[0] <= 0:
            raise ParameterError(f"V must be positive definite (smallest eigenvalue {lam[0]:.3g})")
        return V

    def _prep(self, y, omega, V):
        omega = np.asarray(omega, dtype=float)
        if omega.ndim == 2:
            omega = omega[None]
        if omega.shape[1:] != (self.P, self.M):
            raise ParameterError(f"omega must have shape (n, {self.P}, {self.M}), got {omega.shape}")
        if not np.all(np.isfinite(omega)):
            raise ParameterError("omega must be finite")
        y = np.asarray(y, dtype=float).reshape(omega.shape[0], -1)
        if not np.all(np.isfinite(y)):
            raise ParameterError("y must be finite")
        return np.ascontiguousarray(y), np.ascontiguousarray(omega), self._check_V(V, self.P)

    def gout(self, y, omega, V):
        """``(g_out (n, P, M), dg_out (n, P, M, P, M))`` from the posterior moments."""
        logZ, mean, cov = self.moments(y, omega, V)
        return gout_from_moments(mean, cov, omega, self._check_V(V, self.P))


class ReducedChannel(_ChannelBase):
    """Noiseless channel by the reduction of smi.md Sec. 9 (see module docstring).

    The reduced integral over the free rows uses a :class:`TensorRule` (default
    Gauss-Hermite 30 per axis); each call records the change against the rule with half
    as many nodes per axis in :attr:`last_accuracy` (an over-estimate of the error)."""

    def _default_rule(self):
        return TensorRule()

    def __init__(self, model: MultiIndexModel):
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
            extra_imports=("symtheory.core._moments_nb",),
            extra_source=self._driver_source(len(u_syms), len(pars)))

    def _driver_source(self, n_u, n_par):
        M = self.M
        pf = len(self.free_rows)
        u_args = [f"u[{a}, {m}]" for a in range(pf) for m in range(M)]
        p_args = [f"pars[{i}]" for i in range(n_par)]
        call = ", ".join(u_args + p_args + ["tout"])
        return render_template(__package__, "reduced_driver.py.tmpl", CALL_ARGS=call)

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
        self._record(f"reduction (smi.md 9) + {self.rule.describe()}; error = change vs "
                     f"{self.rule.coarsened().describe()}", math.inf, err)
        return logZ, mean.reshape(n, self.P, self.M), cov

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
        drive = self.mixing_kernel.extra("{name}_reduced")
        drive(E, logjac, valid, omega, pars, self.free_rows, self.solved_rows, Luu, B, Cinv,
              logdetC, tn, tw, logZ, mean, cov)
        return logZ, mean, cov


class _OrthantChannel(_ChannelBase):
    """Links constant on sign regions: exact region probabilities and truncated moments
    (:mod:`.orthant_mixture`); only the 1-D conditional integrals of two-form orthants are
    numerical (nested tanh-sinh to the rule's ``rtol``)."""

    def _setup_orthants(self, structure):
        self.discrete = structure
        self.mixture = OrthantMixture(structure, self.P, self.M)
        self.n_out = self.model.link.rows * self.model.link.cols

    def _orthant_moments(self, y, omega, V, loglik, method):
        n = omega.shape[0]
        rule = self.rule if isinstance(self.rule, AdaptiveRule) else AdaptiveRule()
        logZ, mean, cov, err = self.mixture.moments(
            omega.reshape(n, -1), V, loglik, rtol=rule.rtol, max_level=rule.tanh_sinh_max_level)
        if mean is None:
            bad = np.nonzero(err)[0]
            raise ParameterError(
                f"y = {y[bad[0]].tolist()} (sample {bad[0]}, {bad.size} in all) has probability 0 "
                f"under the link's values {np.unique(self.discrete.values, axis=0).tolist()}")
        self._record(method, rule.rtol, err)
        return logZ, mean.reshape(n, self.P, self.M), cov

    def _check_outputs(self, y):
        if y.shape[1] != self.n_out:
            raise ParameterError(f"y must have {self.n_out} entries per sample, got {y.shape[1]}")


class DiscreteOutputChannel(_OrthantChannel):
    """Noiseless link with finitely many values on sign regions of linear forms
    (``sign(z1 z2)``, hardmax ``1{e1 > e2}``): ``Z_out(y) = P(Z in g^{-1}(y))``, a sum of
    Gaussian orthant probabilities (a probability mass: ``log Z_out <= 0``), posterior
    moments of the truncated Gaussians (smi.md 3)."""

    def __init__(self, model: MultiIndexModel):
        super().__init__(model)
        self._setup_orthants(discrete_structure(model.link, model.indices, model.params))
        self.method = "discrete output, orthant mixture: " + self.discrete.describe()

    def moments(self, y, omega, V):
        """``(log P(y) (n,), E[Z|y] (n, P, M), Cov (n, P M, P M))``."""
        y, omega, V = self._prep(y, omega, V)
        self._check_outputs(y)
        vals = self.discrete.values
        # y must be one of the link's values (they are exact numbers from SymPy)
        match = np.all(np.abs(y[:, None, :] - vals[None]) <= 1e-9 * (1 + np.abs(vals[None])),
                       axis=2)
        loglik = np.where(match, 0.0, -np.inf)
        return self._orthant_moments(y, omega, V, loglik, self.method)


class GaussianNoiseChannel(_OrthantChannel):
    """``y = g(Z) + sqrt(Delta) xi`` with the integration chosen at declaration from what
    SymPy establishes about ``g`` (:mod:`.link_analysis`):

    1. ``g`` constant on sign regions of linear forms: ``Z_out = sum_k P(R_k) N(y; c_k,
       Delta)``, posterior = mixture of truncated Gaussians (exact up to 1-D orthant
       integrals, see :class:`DiscreteOutputChannel`);
    2. otherwise ``g = A(z_R) z_S + b(z_R)`` with the largest affine set ``S`` (possibly
       empty): ``z_S | z_R`` is integrated exactly (Gaussian conjugacy: ``Z_out =
       E_{z_R} N(y; A m + b, A C A^T + Delta I)``, with the conjugate posterior mean and
       covariance of ``z_S`` added to the moments), leaving ``|R|`` dimensions:

       * ``|R| = 0``: closed form (e.g. linear tokens);
       * ``|R| = 1``: composite Gauss-Legendre on ``[-T, T]`` (prior-whitened ``z_R``) split
         at the link's jumps (roots of its switch arguments), panels doubled per sample
         until the moments change by less than ``rtol``; ``T`` grows until the neglected
         mass, at most ``sup N(y; ., S) 2 Q(T) <= (2 pi Delta)^{-n/2} e^{-T^2/2}``, is below
         ``rtol Z_out``;
       * ``|R| = 2`` (or an explicit :class:`AdaptiveRule`): tensor composite Gauss-Legendre
         on the whitened box ``[-T, T]^|R|`` (Gaussian density in the weights: no
         polynomial approximation of the likelihood, unlike Gauss-Hermite), panels doubled
         per sample until the change meets ``rtol`` (or the node budget ends: reported,
         warned);
       * ``|R| >= 3`` by default (:data:`NOISE_LAPLACE_RULE`, or any
         :class:`~symtheory.glm.laplace_qmc.LaplaceQMCRule` for ``|R| >= 2``): the
         likelihood-following rule of :meth:`_laplace_rqmc` -- Laplace-centred Gaussian
         mixture importance sampling with randomized QMC, its error the 95% half-width
         over the scramblings (the box's ``(2^level 8)^|R|`` nodes per sample are out of
         reach at ``|R| = 4``: ~17M per sample at the first refinement).

    An explicit :class:`TensorRule` replaces the adaptive 1-D/tensor integration over
    ``z_R`` (its error estimate is the change against ``rule.coarsened()``)."""

    def __init__(self, model: MultiIndexModel):
        super().__init__(model)
        g = model.link
        self.n_out = g.rows * g.cols
        try:
            self._setup_orthants(discrete_structure(g, model.indices, model.params))
            self.method = "Gaussian noise, orthant mixture: " + self.discrete.describe()
            return
        except NotApplicable as exc:
            self.discrete = None
            self.not_discrete = str(exc)
        zs = list(model.indices)
        split = affine_split(g, zs)
        rebuilt = split.A * sp.Matrix([zs[i] for i in split.S]) + split.b if split.S else split.b
        worst = _random_check(list(rebuilt.subs(model.params)), list(g.subs(model.params)), zs)
        if worst > 1e-10:
            raise ValueError(f"affine split does not reproduce the link ({worst:.2e})")
        self.S = np.array(split.S, dtype=np.int64)
        self.R = np.array(split.R, dtype=np.int64)
        zR = [zs[i] for i in split.R]
        self.breaks = np.zeros(0)
        self.breaks_note = ""
        if len(zR) == 1:
            try:
                self.breaks = np.array(breakpoints(list(split.A) + list(split.b), zR[0],
                                                   model.params), dtype=float)
            except NotApplicable as exc:
                self.breaks_note = f" (jumps not located: {exc})"
        pars = list(model.param_symbols)
        call = ", ".join([f"zR[{r}]" for r in range(len(zR))]
                         + [f"pars[{i}]" for i in range(len(pars))] + ["kout"])
        # derivatives for the Gauss-Newton search of the Laplace-RQMC rule (|R| >= 2); a
        # jump of the link (DiracDelta) only moves the proposal, never the estimate
        derivs = [sp.diff(e, zr).replace(sp.DiracDelta, lambda *a: sp.S.Zero)
                  for e in list(split.A) + list(split.b) for zr in zR] if len(zR) >= 2 else []
        self.kernel = Kernel(
            f"mi_{model.name}_affine", zR + pars, list(split.A) + list(split.b) + derivs,
            doc=f"A(z_R), b(z_R) of {model.name}: g = A z_S + b, then d/dz_R of each",
            extra_imports=("symtheory.core._moments_nb",),
            extra_source=render_template(__package__, "gaussian_noise_drivers.py.tmpl",
                                         CALL_ARGS=call) + _MIXTURE_TEMPLATE)
        # sign flips of z_R that leave the link unchanged (starts of the mode search)
        self.flips = flip_patterns(model, list(split.R))
        self._points = {}
        names = [str(z) for z in zs]
        self.method = (f"Gaussian noise, exact Gaussian integral over "
                       f"{[names[i] for i in split.S]}, numerical over {[names[i] for i in split.R]}")

    def _default_rule(self):
        if self.discrete is None and self.R.size >= LAPLACE_MIN_DIM:
            return NOISE_LAPLACE_RULE
        return AdaptiveRule()

    def configured(self, noise_variance=None, rule=None):
        rule = self._default_rule() if rule is None else rule
        if not isinstance(rule, LaplaceQMCRule):
            return super().configured(noise_variance, rule)
        if self.discrete is not None or self.R.size < 2:
            raise ParameterError("the Laplace-RQMC rule integrates |R| >= 2 non-affine indices; "
                                 f"this channel has {self.method!r}: give an AdaptiveRule or a "
                                 "TensorRule")
        new = super().configured(noise_variance, AdaptiveRule())
        new.rule = rule
        return new

    def moments(self, y, omega, V):
        """``(log Z_out (n,), E[Z|y] (n, P, M), Cov (n, P M, P M))``, index ``a M + m``
        (and, by the Laplace-RQMC rule, :attr:`last_scrambling_sums`; else None)."""
        self.last_scrambling_sums = None
        y, omega, V = self._prep(y, omega, V)
        self._check_outputs(y)
        delta = self.noise_variance
        if self.discrete is not None:
            vals = self.discrete.values
            loglik = (-0.5 * np.sum((y[:, None, :] - vals[None]) ** 2, axis=2) / delta
                      - 0.5 * self.n_out * math.log(2 * math.pi * delta))
            return self._orthant_moments(y, omega, V, loglik, self.method)
        n, d = omega.shape[0], self.P * self.M
        om = np.ascontiguousarray(omega.reshape(n, d))
        Sigma = np.kron(V, np.eye(self.M))
        S, R = self.S, self.R
        S_RR = Sigma[np.ix_(R, R)]
        Kmat = np.linalg.solve(S_RR, Sigma[np.ix_(R, S)]).T if R.size else np.zeros((S.size, 0))
        Ccond = Sigma[np.ix_(S, S)] - Kmat @ Sigma[np.ix_(R, S)]
        Ccond = np.ascontiguousarray(0.5 * (Ccond + Ccond.T))
        Kmat = np.ascontiguousarray(Kmat)
        sd = np.sqrt(np.diag(Sigma))
        pars = np.array(list(self.model.params.values()), dtype=float)
        common = (y, om, pars, float(delta), S, R, Kmat, Ccond)
        rule = self.rule
        if R.size == 0:
            logZ, mean, cov = self._tensor_pass(TensorRule("gauss-hermite", 1), S_RR, common)
            err, method = np.zeros(n), self.method + " (none left: closed form)"
            tol = rule.rtol if isinstance(rule, AdaptiveRule) else math.inf
        elif isinstance(rule, TensorRule):
            logZ, mean, cov = self._tensor_pass(rule, S_RR, common)
            coarse = self._tensor_pass(rule.coarsened(), S_RR, common)
            err = moment_change_batch(coarse[0], coarse[1], coarse[2], logZ, mean, cov, sd)
            method = (f"{self.method} by {rule.describe()}; error = change vs "
                      f"{rule.coarsened().describe()}")
            tol = math.inf
        elif isinstance(rule, LaplaceQMCRule):
            logZ, mean, cov, err, method = self._laplace_rqmc(rule, S_RR, sd, common)
            tol = rule.tol
        elif R.size == 1:
            logZ, mean, cov, err = self._adaptive_1d(rule, S_RR, sd, common)
            method = (f"{self.method} by composite Gauss-Legendre {rule.gauss_legendre} "
                      f"split at {self.breaks.tolist()}{self.breaks_note}")
            tol = rule.rtol
        else:
            logZ, mean, cov, err = self._adaptive_tensor(rule, S_RR, sd, common)
            method = (f"{self.method} by tensor composite Gauss-Legendre "
                      f"{rule.gauss_legendre} on the whitened box, panels doubled to rtol")
            tol = rule.rtol
        self._record(method, tol, err)
        return logZ, mean.reshape(n, self.P, self.M), cov

    def _tensor_pass(self, rule, S_RR, common, nodes=None):
        """One pass of the generated driver over the nodes ``(t, w)`` of ``E f(t)``,
        ``t ~ N(0, I)`` (prior-whitened ``z_R``), from ``rule`` or given."""
        y, om = common[0], common[1]
        n, d = om.shape
        tn, tw = nodes if nodes is not None else rule.nodes(self.R.size)
        if self.R.size == 0:
            tn, tw = np.zeros((1, 0)), np.ones(1)
        keep = tw > 0
        tn, tw = np.ascontiguousarray(tn[keep]), np.ascontiguousarray(tw[keep])
        L_RR = np.linalg.cholesky(S_RR) if self.R.size else np.zeros((0, 0))
        logZ, mean, cov = np.empty(n), np.empty((n, d)), np.empty((n, d, d))
        self.kernel.extra("{name}_tensor")(*common, np.ascontiguousarray(L_RR), tn, tw,
                                           logZ, mean, cov)
        return logZ, mean, cov

    def _adaptive_tensor(self, rule, S_RR, sd, common):
        """Tensor composite Gauss-Legendre on the prior-whitened box, panels doubled per
        sample until the moments change by less than ``rtol`` (that change is the error);
        samples whose neglected mass outside the box, at most
        ``sup(lik) 2 k Q(T) <= k exp(log_lsup - T^2/2)``, is not below ``rtol Z_out`` are
        redone on a larger box."""
        n = common[1].shape[0]
        k = self.R.size
        log_lsup = -0.5 * self.n_out * math.log(2 * math.pi * self.noise_variance)
        out = [np.empty(n), np.empty((n, sd.size)), np.empty((n, sd.size, sd.size))]
        err = np.full(n, np.inf)

        def run(idx, T):
            sub = (common[0][idx], common[1][idx]) + common[2:]
            levels = rule.box_levels(k)
            prev = self._tensor_pass(None, S_RR, sub, nodes=rule.box_nodes(k, levels[0], T))
            todo = np.arange(idx.size)
            res = [a.copy() for a in prev]
            e = np.full(idx.size, np.inf)
            for level in levels[1:]:
                cur = self._tensor_pass(None, S_RR, (sub[0][todo], sub[1][todo]) + sub[2:],
                                        nodes=rule.box_nodes(k, level, T))
                e[todo] = moment_change_batch(*(p[todo] for p in res), *cur, sd)
                for j in range(3):
                    res[j][todo] = cur[j]
                todo = todo[e[todo] > rule.rtol]
                if todo.size == 0:
                    break
            trunc = k * np.exp(np.minimum(0.0, log_lsup - 0.5 * T * T - res[0]))
            for j in range(3):
                out[j][idx] = res[j]
            err[idx] = np.maximum(e, trunc)
            return res[0]

        logZ = run(np.arange(n), rule.box_half_width)
        T_need = np.sqrt(2.0 * np.maximum(0.0, log_lsup + math.log(k) - logZ - math.log(rule.rtol)))
        for i in np.nonzero(T_need > rule.box_half_width)[0]:
            run(np.array([i]), min(float(T_need[i]) + 0.5, _BOX_T_MAX))
        return out[0], out[1], out[2], err

    def _laplace_rqmc(self, rule, S_RR, sd, common):
        """``|R| >= 2`` by Laplace-centred mixture importance sampling with randomized QMC
        (:mod:`.laplace_qmc`) in prior-whitened ``z_R = omega_R + L t``: component 0 the
        prior ``N(0, I)``, peaks at the maxima of the log integrand found by Gauss-Newton
        from the prior mean, its images under the link's sign flips and the two best of
        ``rule.scan`` prior points, covariance ``inflate^2`` times the inverse Gauss-Newton
        Hessian; ``z_S | z_R`` stays exact (conjugate).  Error: 95% half-width over the
        scramblings (natural units), samples above ``rule.tol`` redone with 4x the points."""
        n, d = common[1].shape
        k = self.R.size
        L_RR = np.ascontiguousarray(np.linalg.cholesky(S_RR))
        logZ, mean, cov = np.empty(n), np.empty((n, d)), np.empty((n, d, d))
        sums = np.empty((n, rule.scrambles, 1 + d))
        comps = np.zeros(n, dtype=np.int64)
        drive = self.kernel.extra("{name}_laplace")
        tcrit = rule.t95()

        def run(todo, npts):
            return by_point_set(rule, todo, npts, run_set)

        def run_set(todo, npts, k_set):
            key = (rule, npts, k_set)
            if key not in self._points:
                self._points[key] = np.ascontiguousarray(rule.normal_points(k, npts, k_set))
            out = (np.empty(todo.size), np.empty((todo.size, d)), np.empty((todo.size, d, d)),
                   np.empty(todo.size), np.empty(todo.size, dtype=np.int64),
                   np.empty((todo.size, rule.scrambles, 1 + d)))
            drive(np.ascontiguousarray(common[0][todo]), np.ascontiguousarray(common[1][todo]),
                  *common[2:], L_RR, self.flips, self._points[key], int(rule.scan),
                  float(rule.inflate), float(rule.prior_share), int(rule.adapt), 1.2, tcrit, sd,
                  *out)
            logZ[todo], mean[todo], cov[todo], comps[todo] = out[0], out[1], out[2], out[4]
            sums[todo] = out[5]
            return out[3]

        err, used = rqmc_levels(rule, n, run)
        self.components, self.points_used = comps, used
        #: per-scrambling sums (n, scrambles, 1 + P M): weight, then sum of w Z (index
        #: a M + m), one scale per sample -- E[Z|y] pooled over disjoint sets of
        #: scramblings are independent given the proposal (:func:`.laplace_qmc.pooled_mean`)
        self.last_scrambling_sums = sums
        method = (f"{self.method} by {rule.describe()}; error = 95% half-width over the "
                  f"scramblings; {comps.mean():.2f} components and {used.mean():.0f} points per "
                  "component and scrambling on average")
        return logZ, mean, cov, err, method

    def _adaptive_1d(self, rule, S_RR, sd, common):
        n, d = common[1].shape
        gl_x, gl_w = rule.legendre()
        logZ, mean, cov = np.empty(n), np.empty((n, d)), np.empty((n, d, d))
        err, level = np.empty(n), np.empty(n, dtype=np.int64)
        log_lsup = -0.5 * self.n_out * math.log(2 * math.pi * self.noise_variance)
        self.kernel.extra("{name}_adaptive")(
            *common, math.sqrt(S_RR[0, 0]), np.ascontiguousarray(self.breaks), gl_x, gl_w, sd,
            float(rule.rtol), int(rule.min_level), int(rule.max_level), _ADAPTIVE_T0,
            _ADAPTIVE_T_MAX, log_lsup,
            logZ, mean, cov, err, level)
        return logZ, mean, cov, err


#: initial half-width of the prior-whitened 1-D domain (grown per sample when needed)
_ADAPTIVE_T0 = 8.0
#: largest 1-D half-width: an output whose posterior sits T prior standard deviations
#: out has Z_out ~ e^{-T^2/2}; the weights are kept in logs, so only the resolution
#: (2^max_level panels) limits T -- beyond it the sample reports its error and warns
_ADAPTIVE_T_MAX = 200.0
#: largest half-width of the |R| >= 2 box (its node count grows like T^|R|)
_BOX_T_MAX = 38.0
#: fewest non-affine indices integrated by default with NOISE_LAPLACE_RULE: at |R| = 2 the
#: box rule reaches rtol 1e-10 within its node budget, and the declaration check (P M <= 2,
#: multi_index_check.CHECK_RTOL = 1e-6) holds a channel to more than an RQMC rule gives
LAPLACE_MIN_DIM = 3
#: default rule of GaussianNoiseChannel for |R| >= LAPLACE_MIN_DIM non-affine indices.
#: tol: Q_hat = alpha E[g_out g_out^T] is quadratic in g_out, so independent per-sample
#: errors do not average out: they add E[dg dg^T] ~ (tol / 2)^2 V^{-1} (tol a 95% half-width
#: in prior standard deviations).  Measured on deep attention (depth 2, Delta = 0.1,
#: Q = diag(0.05, 0.5), 1000 samples): a rule at median error 0.17 raised Q_hat_11 by
#: 5e-3 = 12 Monte-Carlo standard errors over one at 0.018.  At tol = 1e-2 the bias,
#: ~2.5e-5 / (1 - Q), stays below the Monte-Carlo standard error at 20,000 samples.
NOISE_LAPLACE_RULE = LaplaceQMCRule(tol=1e-2, points=64, max_points=1024, scrambles=8,
                                    adapt=1, scan=32)
#: the same channel's rule in the state evolution, whose ``'cross'`` estimator
#: (:class:`~symtheory.glm.se.StateEvolution`) averages ``g_A g_B^T`` of the posterior
#: means pooled over the rule's even and over its odd scramblings: their random errors no
#: longer add ``E[dg dg^T]``.  Two conditions, both measured: the samples must not share
#: one randomization of the points (a fixed point set's errors are correlated across
#: samples and their products do not average out: at Q = diag(0, 0.558), where
#: Q_hat_11 = 0 exactly, one set gave -2.7e-5 +- 0.6e-5 at 256 points, 16 sets
#: -0.6e-5 +- 1.4e-5), hence ``point_sets`` (the SE sets it to its scramblings, so the
#: error lands in its standard error); and the ratio bias must be small: depth-2
#: attention, Delta = 0.1, Q = 0.05 I, 1024 samples, 16 sets, Q_hat_11 = 2.45e-3 /
#: 2.43e-3 / 2.50e-3 at 128 / 256 / 1024 points (stderr 1.5e-4), one run's g g^T 2.68e-3
#: at 128 (measured; tests/test_cross_estimator.py re-checks both conditions: the exact
#: 0 at Q11 = 0, and 128 points against the combined estimator at 1024).  Cost ~0.4 ms
#: per sample at 128 points (0.42 measured on 2 threads; 1.25 ms before the per-point
#: helpers ran without reference counting); 1-3% of samples above tol = 0.25 at the first level (escalated
#: to 4x the points).
NOISE_SE_RULE = LaplaceQMCRule(tol=0.25, points=128, max_points=1024, scrambles=8,
                               adapt=1, scan=32, point_sets=16)
