"""Multi-index models with tokens, declared by their link (the factor a family declares).

A model is its link ``y = g(Z)`` with ``Z = W x / sqrt(D)`` the ``P x M`` matrix of
indices (``P`` index rows, ``M`` tokens), written in SymPy (Eq. 1 of Troiani et al.,
arXiv:2502.00901).  Everything message passing and state evolution need comes from its
output channel (ibid. Eq. 9),

    Z_out(y; omega, V) = int dZ prod_m N(z_{.m}; omega_{.m}, V) P_out(y | Z),

which :meth:`MultiIndexModel.channel` builds from what SymPy establishes about ``g``:
Gaussian output noise (:mod:`.gaussian_noise`), a deterministic reduction
(:mod:`.reduced`, ibid. Sec. 9 and Corollary E.1) or a link constant on sign regions
(:mod:`.discrete`).

Symbolic checks run at declaration: the reduction reproduces the link
(``head(T(u) h^T) == g``) and its inversion features agree on both sides, at random
points; the even symmetries ``g(..., -h_l, ...) = g`` of each row group are detected.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from ...core.codegen import Kernel
from ...core.validate import ParameterError, real
from ..checks.symbolic import random_point_discrepancy
from ..integrate.link_structure import NotApplicable


# ---------------------------------------------------------------------- declaration
@dataclass
class DeterministicReduction:
    """How a deterministic link is reduced to an integral over the free rows (App. E.1 of arXiv:2502.00901).

    ``y = head(E)`` with ``E = mixing(u) @ h^T`` (``M x r``), ``h`` the ``solved_rows``
    of ``Z`` and ``u`` all other rows.  ``observed`` lists the ``M r`` output entries
    used as coordinates of the density of ``y``.  ``features`` (optional) are pairs
    ``(f_y(Y), f_E(E))`` with ``f_y(head(E)) = f_E(E)`` that turn ``head(E) = y`` into a
    system SymPy solves (e.g. softmax log-ratios -> logit differences); without them
    ``head(E)[observed] = y[observed]`` is solved directly.

    Parameters
    ----------
    solved_rows : tuple of int
        Rows ``h`` of ``Z`` solved for from ``y``.
    mixing : sympy.Matrix
        ``M x M`` mixing ``T(u)`` of the free rows.
    E : sympy.Matrix
        ``M x r`` matrix of symbols for ``E``.
    head : sympy.Matrix
        The output as a function of ``E``.
    observed : tuple of tuple of int
        The ``M r`` observed output entries ``(i, j)``.
    features : tuple of tuple, optional
        Inversion features ``(f_y, f_E)``.

    Examples
    --------
    >>> import sympy as sp
    >>> from symtheory.glm import DeterministicReduction, MultiIndexModel
    >>> z = sp.Matrix([sp.symbols("z0_0 z0_1", real=True)])            # P = 1, M = 2
    >>> E = sp.Matrix(sp.symbols("e0 e1", real=True))
    >>> red = DeterministicReduction(solved_rows=(0,), mixing=sp.eye(2), E=E, head=E * E.T,
    ...                              observed=((0, 0), (1, 1)))
    >>> MultiIndexModel("outer", z, z.T * z, reduction=red).free_rows
    ()
    """

    solved_rows: tuple
    mixing: sp.Matrix
    E: sp.Matrix
    head: sp.Matrix
    observed: tuple
    features: tuple | None = None


class MultiIndexModel:
    """A sequence multi-index model ``y = g(Z)`` (+ optional Gaussian output noise).

    ``Z = W x / sqrt(D)`` is the ``P x M`` matrix of indices (Eq. 1 of Troiani et al.,
    arXiv:2502.00901); everything message passing and state evolution need comes from its
    output channel (:meth:`channel`).  The even symmetries of each row group are detected
    and a reduction is checked against the link at declaration.

    Parameters
    ----------
    name : str
        Identifier used in kernel names.
    indices : sympy.Matrix
        ``P x M`` matrix of distinct real symbols (rows = index rows, columns = tokens).
    link : sympy.Matrix
        The outputs, entries in ``indices`` and ``params``.
    params : dict, optional
        ``{symbol: value}`` of the model's constants (e.g. skip ``c``, inverse temperature).
    row_groups : list of tuple of int, optional
        Partition of the rows into groups (e.g. layers); even symmetry is tested per group.
    reduction : DeterministicReduction, optional
        For noiseless channels.
    description : str, optional
        Words for reports.

    Attributes
    ----------
    P, M : int
        Index rows and tokens.
    even_groups : dict
        ``{group: bool}``, whether ``g`` is invariant under flipping the group's sign.

    Raises
    ------
    ParameterError
        The link does not depend on a declared index (parameters substituted), or a
        reduction's observed entries (or features) do not determine ``E``.

    Examples
    --------
    >>> import sympy as sp
    >>> from symtheory.glm import MultiIndexModel
    >>> z = sp.Matrix([sp.symbols("z0 z1", real=True)])                # P = 1, M = 2
    >>> model = MultiIndexModel("sum_of_squares", z, sp.Matrix([z[0] ** 2 + z[1] ** 2]))
    >>> model.P, model.M, model.is_even
    (1, 2, True)
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
        # an index the link does not read is unidentifiable: the posterior on it is the
        # prior whatever y, and downstream quantities (thresholds, symmetry groups) would
        # report an artefact (y = 1 gave alpha_c = inf "through its sign")
        unused = [str(z) for z in syms if z not in self.link.subs(self.params).free_symbols]
        if unused:
            raise ParameterError(
                f"model {name!r}: the link does not depend on the declared "
                f"{'index' if len(unused) == 1 else 'indices'} {', '.join(unused)} (with the "
                "parameters substituted); every index must enter g -- declare only the "
                "indices the link reads")
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
            worst = random_point_discrepancy(flipped.subs(self.params), self.link.subs(self.params),
                                  list(self.indices))
            out[g] = worst < 1e-12
        return out

    @property
    def symmetries(self):
        """Generators of the link's signed-row-permutation symmetry group.

        Each carries the sign it gives ``g``
        (:func:`~symtheory.glm.integrate.link_structure.link_symmetries`; derived once,
        on first use).
        """
        if not hasattr(self, "_symmetries"):
            from ..integrate.link_structure import link_symmetries

            self._symmetries = link_symmetries(self.link, self.indices, self.params)
        return self._symmetries

    @property
    def symmetry_group(self):
        """All elements generated by :attr:`symmetries` (``None`` if more than 50,000)."""
        if not hasattr(self, "_symmetry_group"):
            from ..integrate.link_structure import group_closure

            self._symmetry_group = group_closure(self.symmetries, self.P)
        return self._symmetry_group

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
        worst = random_point_discrepancy(rebuilt.subs(self.params), self.link.subs(self.params),
                              list(self.indices))
        if worst > 1e-10:
            raise ValueError(f"reduction does not reproduce the link (relative difference {worst:.2e})")
        if red.features:
            Y = self.output_symbols
            lhs = [fy.xreplace(dict(zip(list(Y), list(red.head)))) for fy, _ in red.features]
            rhs = [fe for _, fe in red.features]
            worst = random_point_discrepancy([e.subs(self.params) for e in lhs],
                                  [e.subs(self.params) for e in rhs], list(red.E), scale=0.7)
            if worst > 1e-10:
                raise ValueError(f"inversion features disagree with the head ({worst:.2e})")
        self._check_invertible()
        self.free_rows, self.solved_rows = free, solved

    def _check_invertible(self):
        """The observed entries (or the features) must determine ``E`` locally: their
        Jacobian in ``E`` has full rank ``M r`` at random points.  Otherwise SymPy finds no
        inversion branch, or an underdetermined one, only when the channel's kernels are
        generated (a rank test costs milliseconds)."""
        red = self.reduction
        E = list(red.E)
        if red.features:
            exprs, what = [fe for _, fe in red.features], "features"
        else:
            exprs, what = [red.head[i, j] for i, j in red.observed], "observed"
        J = sp.Matrix(exprs).jacobian(sp.Matrix(E)).subs(self.params)
        if J.free_symbols - set(E):
            return       # depends on more than E (free rows): the branch solve decides
        jac = sp.lambdify(E, J, "numpy")
        rng = np.random.default_rng(20240601)
        ranks = [np.linalg.matrix_rank(np.asarray(jac(*rng.standard_normal(len(E))), dtype=float),
                                       tol=1e-9) for _ in range(3)]
        if max(ranks) < len(E):
            raise ParameterError(
                f"reduction of model {self.name!r}: the {what} entries "
                f"{list(red.observed) if what == 'observed' else exprs} do not determine E "
                f"({len(E)} unknowns; the Jacobian of those entries in E has rank {max(ranks)} "
                "at random points), so y cannot be inverted for E; choose entries of the head "
                "that fix every entry of E")

    @property
    def output_symbols(self) -> sp.Matrix:
        """Symbols ``y_i_j`` of the outputs, the shape of the link."""
        rows, cols = self.link.shape
        return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"y_{i}_{j}", real=True))

    def derive_branches(self):
        """Return the inversion branches ``[E^(k)(y)]`` of ``head(E) = y``, solved by SymPy.

        Returns
        -------
        list of list of sympy.Expr
            One list of the entries of ``E`` per branch.

        Examples
        --------
        >>> from symtheory import smi
        >>> model = smi.outer_product(seq_len=2)       # y = z z^T, P = 1, M = 2
        >>> model.derive_branches()[-1]                 # E = (sqrt(y_00), sqrt(y_11)) and signs
        [sqrt(y_0_0), sqrt(y_1_1)]
        """
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
        """Return ``det d y_obs / d E``, signed (its modulus enters the density of ``y``).

        Returns
        -------
        sympy.Expr
            The Jacobian determinant in the symbols of ``E``.

        Examples
        --------
        >>> from symtheory import smi
        >>> model = smi.outer_product(seq_len=2)       # y = z z^T, P = 1, M = 2
        >>> model.derive_output_jacobian()              # y_00 = e0^2, y_11 = e1^2
        4*e0*e1
        """
        red = self.reduction
        obs = sp.Matrix([red.head[i, j] for i, j in red.observed])
        return sp.simplify(obs.jacobian(sp.Matrix(list(red.E))).det())

    # --------------------------------------------------------------- kernels
    @property
    def link_kernel(self) -> Kernel:
        """The compiled kernel of the link (built on first use)."""
        if self._link_kernel is None:
            args = list(self.indices) + list(self.param_symbols)
            self._link_kernel = Kernel(f"mi_{self.name}_link", args, list(self.link),
                                       vector_args=list(self.indices),
                                       doc=f"link g(Z) of the multi-index model {self.name}")
        return self._link_kernel

    def g(self, Z: np.ndarray) -> np.ndarray:
        """Return the link ``g(Z)`` evaluated on samples (its compiled kernel).

        Parameters
        ----------
        Z : numpy.ndarray
            Samples of shape ``(n, P, M)``.

        Returns
        -------
        numpy.ndarray
            Shape ``(n, *link.shape)``.

        Examples
        --------
        >>> import numpy as np
        >>> from symtheory import smi
        >>> model = smi.outer_product(seq_len=2)       # y = z z^T, P = 1, M = 2
        >>> model.g(np.array([[[1.0, 2.0]]]))[0]
        array([[1., 2.],
               [2., 4.]])
        """
        Z = np.asarray(Z, dtype=float)
        if Z.ndim != 3 or Z.shape[1:] != (self.P, self.M):
            raise ValueError(f"Z must have shape (n, {self.P}, {self.M}), got {Z.shape}")
        cols = [Z[:, a, m] for a in range(self.P) for m in range(self.M)]
        out = self.link_kernel.vec(*cols, *self.params.values())
        return out.reshape((Z.shape[0],) + tuple(self.link.shape))

    def channel(self, noise_variance: float | None = None, rule=None, *, check: bool = True):
        """Return the model's output channel (Eq. (9) of arXiv:2502.00901).

        * ``noise_variance`` given: ``y = g(Z) + sqrt(Delta) xi``, a
          :class:`~symtheory.glm.factors.gaussian_noise.GaussianNoiseChannel` whose
          integration is chosen from the link;
        * no noise, a :class:`DeterministicReduction`:
          :class:`~symtheory.glm.factors.reduced.ReducedChannel`;
        * no noise, a link constant on sign regions (``sign(z1 z2)``, hardmax):
          :class:`~symtheory.glm.factors.discrete.DiscreteOutputChannel`;
        * no noise, any other scalar link SymPy solves for one of ``P M <= 2`` indices
          (``z1^2 - z2^2``, ``z1 z2``; switches at ``z_i = 0`` split into orthants:
          ``|z1| - |z2|``):
          :class:`~symtheory.glm.factors.level_set.LevelSetChannel` (co-area formula).

        Parameters
        ----------
        noise_variance : float, optional
            Gaussian output-noise variance ``Delta`` (> 0); ``None``: noiseless.
        rule : AdaptiveRule or TensorRule, optional
            ``None`` (an :class:`~symtheory.core.quadrature.AdaptiveRule`), an
            ``AdaptiveRule`` with another tolerance, or a ``TensorRule`` for the remaining
            quadrature (the reduced channel always uses a ``TensorRule``, default GH 30).
        check : bool, optional
            Compare noisy and discrete channels with a brute-force quadrature at a few
            random points when first configured and refuse
            (:class:`~symtheory.glm.checks.scalar.ChannelCheckError`) a configuration that
            misses ``CHECK_RTOL`` (``P M <= 2``; see :mod:`symtheory.glm.checks.multi_index`).

        Returns
        -------
        MultiIndexChannel
            The configured channel.

        Examples
        --------
        >>> from symtheory import smi
        >>> model = smi.outer_product(seq_len=2)       # y = z z^T, P = 1, M = 2
        >>> type(model.channel()).__name__
        'ReducedChannel'
        >>> type(model.channel(noise_variance=0.1, check=False)).__name__
        'GaussianNoiseChannel'
        """
        if noise_variance is not None:
            noise_variance = real("noise_variance", noise_variance, low=0.0, low_open=True)
            key = "noise"
        elif self.reduction is not None:
            key = "reduced"
        else:
            key = "discrete"
        if key not in self._channels:
            from .discrete import DiscreteOutputChannel
            from .gaussian_noise import GaussianNoiseChannel
            from .reduced import ReducedChannel

            if key == "noise":
                self._channels[key] = GaussianNoiseChannel(self)
            elif key == "reduced":
                self._channels[key] = ReducedChannel(self)
            else:
                from .level_set import LevelSetChannel

                try:
                    self._channels[key] = DiscreteOutputChannel(self)
                except NotApplicable as exc:
                    try:
                        self._channels[key] = LevelSetChannel(self)
                    except NotApplicable as exc2:
                        raise ParameterError(
                            f"model {self.name!r} is deterministic but declares no reduction, "
                            f"its link is not discrete ({exc}) and its level set is not "
                            f"integrated ({exc2}); give noise_variance > 0 or a "
                            "DeterministicReduction") from None
        ch = self._channels[key].configured(noise_variance=noise_variance, rule=rule)
        if check and key != "reduced":
            ch.declaration_check()
        return ch


