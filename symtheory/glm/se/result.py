"""The result of a state evolution: its fixed point with standard errors and report."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...core.result import Result, alias


@dataclass
class SEResult(Result):
    """A state-evolution fixed point with its standard errors and the report of the solve.

    ``value`` (also ``Q``) the overlap, ``error`` (also ``Q_stderr``) its standard error
    (sampling, through the linearized map, with the iteration's truncation error in
    quadrature).  Returned by :meth:`StateEvolution.solve
    <symtheory.glm.se.staged_solve.StagedSolve.solve>`; every parameter is the attribute
    of the same name.

    Parameters
    ----------
    Qhat, Qhat_stderr : numpy.ndarray or None
        ``Q_hat`` at the fixed point and its standard error.
    nishimori_gap : float
        The gap of :meth:`StateEvolution.qhat
        <symtheory.glm.se.state_evolution.StateEvolution.qhat>` at the fixed point.
    trace : list
        Per-iteration records.
    stable : bool or None
        No eigenvalue of ``dF/dQ`` above 1 at ``Q`` (``None``: not checked).
    channel_error : float or None
        Largest estimated error of the channel's posterior moments over the samples at
        ``Q`` (reduced noiseless link: change against the rule with 1.5x the nodes per
        axis; otherwise the channel's own estimate; ``None``: not estimated).
    channel_qhat_error : float or None
        The same refinement's effect on ``Q_hat`` at ``Q``, in its sampling standard
        errors: ``max_ab |Q_hat - Q_hat_refined|_ab / stderr_ab`` (stderr floored at 1e-12
        of ``max |Q_hat|``).  Below ~0.3 the quadrature adds under 5% to the sampling
        error of the fixed point; ``None``: not estimated (a randomized rule's error is
        part of the sampling spread already).
    samples : int or None
        Frozen samples of ``xi`` (and of ``y``, when sampled) the fixed point was solved on.
    observation : str
        How the observation was treated: integrated given ``omega`` by which rule, or
        sampled and why (:mod:`symtheory.glm.se.observation`).
    observation_qhat_error : float or None
        The observation rule's coarse sub-grid's effect on ``Q_hat`` at ``Q``, in its
        standard errors (0 for an exact sum; ``None``: ``y`` sampled).
    target_rounds : list
        The rounds of :meth:`~symtheory.glm.se.staged_solve.StagedSolve.solve_to_target`,
        ``(samples, max stderr, seconds)`` each (empty for a single solve).
    value : numpy.ndarray
        The overlap ``Q``.
    error : numpy.ndarray
        Its standard error.
    error_kind : str
        ``"stderr"``.
    converged : bool
        The solve met its residual tolerance.
    iterations : int
        Iterations over all stages.
    residual : float
        The last residual.
    method : str
        How the value was computed.
    message : str
        What happened, in words.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from symtheory.glm import MultiIndexModel, StateEvolution
    >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
    >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
    ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
    >>> res = se.solve()
    >>> type(res).__name__, round(float(res.Q[0, 0]), 8), bool(res.Q_stderr[0, 0] < 1e-6)
    ('SEResult', 0.5, True)
    """

    Qhat: np.ndarray | None = None
    Qhat_stderr: np.ndarray | None = None
    nishimori_gap: float = math.nan
    trace: list = field(default_factory=list)
    stable: bool | None = None     # no eigenvalue of dF/dQ above 1 at Q (None: not checked)
    #: largest estimated error of the channel's posterior moments over the samples at Q
    #: (reduced noiseless link: change against the rule with 1.5x the nodes per axis,
    #: :data:`~symtheory.glm.se.state_evolution.CHANNEL_ERROR_REFINEMENT`; otherwise the channel's own estimate; None: not
    #: estimated)
    channel_error: float | None = None
    #: the same refinement's effect on ``Q_hat`` at Q, in its sampling standard errors:
    #: ``max_ab |Q_hat - Q_hat_refined|_ab / stderr_ab`` (stderr floored at 1e-12 of
    #: ``max |Q_hat|``: an entry held at 0 is rounding noise both ways).  Below ~0.3 the
    #: quadrature adds under 5% to the sampling error of the fixed point; None: not
    #: estimated (a randomized rule's error is part of the sampling spread already)
    channel_qhat_error: float | None = None
    #: frozen samples of ``xi`` (and of ``y``, when sampled) the fixed point was solved on
    samples: int | None = None
    #: how the observation was treated: integrated given ``omega`` by which rule, or sampled
    #: and why (:mod:`symtheory.glm.se.observation`)
    observation: str = ""
    #: the observation rule's coarse sub-grid's effect on ``Q_hat`` at Q, in its standard
    #: errors (0 for an exact sum; None: y sampled)
    observation_qhat_error: float | None = None
    #: :meth:`~symtheory.glm.se.staged_solve.StagedSolve.solve_to_target`'s rounds:
    #: ``(samples, max stderr, seconds)`` each (empty for a single solve)
    target_rounds: list = field(default_factory=list)
    error_kind: str = field(default="stderr", kw_only=True)
    method: str = field(default="state evolution on frozen samples", kw_only=True)

    Q = alias("value", "The overlap matrix at the fixed point.")
    Q_stderr = alias("error", "Its standard error.")

    def as_dict(self):
        """Return the fixed point and its report as plain Python values (for JSON).

        Returns
        -------
        dict
            ``Q, converged, stable, iterations, residual, Q_stderr, nishimori_gap,
            channel_error, channel_qhat_error, message``; matrices as nested lists.

        Examples
        --------
        >>> import numpy as np, sympy as sp
        >>> from symtheory.glm import MultiIndexModel, StateEvolution
        >>> z = sp.Matrix([[sp.Symbol("z", real=True)]])
        >>> se = StateEvolution(MultiIndexModel("identity", z, z), alpha=1.0, samples=256,
        ...                     noise_variance=0.5, check_channel=False)    # y = z + sqrt(0.5) xi
        >>> d = se.solve().as_dict()
        >>> [round(q, 8) for q in d["Q"][0]], d["converged"]
        ([0.5], True)
        """
        return {"Q": self.Q.tolist(), "converged": self.converged, "stable": self.stable,
                "iterations": self.iterations, "residual": self.residual,
                "Q_stderr": self.Q_stderr.tolist(), "nishimori_gap": self.nishimori_gap,
                "channel_error": self.channel_error,
                "channel_qhat_error": self.channel_qhat_error, "samples": self.samples,
                "observation": self.observation,
                "observation_qhat_error": self.observation_qhat_error, "message": self.message}
