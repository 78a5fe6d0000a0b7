"""The SMI parameters, declared once, and the schema of every SMI task.

Each parameter is a :class:`~symtheory.core.tasks.Param` (range, default, doc and why the
range is what it is); each task -- a ``symtheory smi`` subcommand or a sweep computation
of :mod:`symtheory.smi.tasks` -- is a ``{name: Param}`` schema made of them, so that
``--seq-len`` of ``smi se`` and ``seq_len`` of a sweep spec's ``smi.se_point`` are one
parameter with one bound.  Normalization (smi.md 1): ``alpha = n/d`` (samples per token
dimension), ``M = seq_len`` tokens, ``W`` (P x d) with i.i.d. N(0, 1) entries.  Importing
this module imports nothing numeric.
"""
from __future__ import annotations

from ..core.tasks import DAMPING, REQUIRED, SAMPLING, SEED, Param
from ..glm.se.sampling import DEFAULT_OMEGA_NODES, DEFAULT_SAMPLES
from . import registry

# ----------------------------------------------------------------------- the model
ALPHA = Param.real(
    low=0, low_open=True, high=1e12, metavar="A",
    doc="sample ratio alpha = n/d (samples per token dimension)",
    why="the state evolution runs in float64 and 1 - Q falls like 1/alpha: beyond 1e12 it "
        "nears float64's resolution of Q = 1 and the fixed point is lost to rounding")
DEPTH = Param.integer(
    low=1, high=3, default=2, doc="attention layers L (attention models)",
    why="the link is derived symbolically and its size grows about tenfold per layer; "
        "depth 3 is the deepest checked against the paper's reference (smi.md 8.4)")
SEQ_LEN = Param.integer(
    low=1, high=6, default=2, doc="tokens per sequence M",
    why="one bound for every SMI model and task: softmax attention's link is derived "
        "symbolically in M x M entries, its size growing steeply with M (minutes from M = 5 "
        "at depth 2)")
SKIP = Param.real(low=0, low_open=True, default=1.0,
                  doc="skip (residual) strength c (attention models)")
INV_TEMP = Param.real(low=0, low_open=True, default=1.0,
                      doc="softmax inverse temperature (attention models)")
NOISE = Param.real(low=0, low_open=True, default=None, nullable=True,
                   doc="variance of the Gaussian noise added to each output (none: noiseless, "
                       "which needs a model with a deterministic reduction, smi.md 9)")
QUADRATURE = Param.choice(
    "gauss-hermite", "uniform", default="gauss-hermite", nullable=True,
    doc="tensor quadrature rule of the channel over the integrated indices (none: the "
        "channel's own rule -- tensor Gauss-Hermite for a noiseless reduction, an adaptive or "
        "Laplace-centred RQMC rule under output noise)")
QUADRATURE_NODES = Param.integer(
    low=4, high=200, default=30, doc="quadrature nodes per axis over the integrated indices",
    why="the error estimates compare with a coarser rule of at least 4 nodes; 200^axes "
        "nodes bound the cost")
SIDE_INFORMATION = Param.real(low=0, default=0.0,
                              doc="side-information strength lambda (S = sqrt(lambda) W* + Xi)")
D = Param.integer(low=2, doc="token dimension d (n = round(alpha d) sequences)")


def model_param(task: str) -> Param:
    """``model``: the shipped models :mod:`symtheory.smi.registry` offers to ``task``."""
    return Param.choice(*registry.names(task), default="attention",
                        doc="a shipped model: " + "; ".join(
                            f"{n} = {registry.MODELS[n].help}" for n in registry.names(task)))


#: the model and its channel: the parameters every SMI state-evolution task shares
MODEL_PARAMS = {
    "model": model_param("se"), "depth": DEPTH, "seq_len": SEQ_LEN, "skip": SKIP,
    "inv_temp": INV_TEMP, "noise": NOISE, "quadrature": QUADRATURE,
    "quadrature_nodes": QUADRATURE_NODES,
}

# ----------------------------------------------------------------------- tasks
SE = dict(MODEL_PARAMS, **{
    "alpha": ALPHA,
    "samples": Param.integer(
        low=100, default=DEFAULT_SAMPLES,
        doc="frozen samples of the SE map (design: sampling; best 16 x a power of 2 with "
            "rqmc: a Sobol sequence's first 2^m points are balanced)",
        why="fewer give no usable standard error; the most is what fits in memory, "
            "checked before drawing"),
    "seed": SEED,
    "side_information": SIDE_INFORMATION,
    "start": Param.choice("uninformed", "informed", default="uninformed",
                          doc="initial overlap Q0 = 0.05 I (uninformed) or 0.99 I (informed)"),
    "damping": DAMPING.with_default(0.2),
    "max_iter": Param.integer(low=1, default=300, doc="iteration cap of the SE"),
    "errors": Param.flag(default=True, doc="compute the Bayes-optimal and plug-in errors at the "
                                           "fixed point (without: NaN)"),
    "error_samples": Param.integer(low=100, default=200000,
                                   doc="Monte-Carlo samples of the errors"),
    "sampling": Param.choice(
        "auto", "rqmc", "monte-carlo", "gauss-hermite", default="auto",
        doc="design of the state evolution's omega = Q^(1/2) xi: rqmc (independently "
            "scrambled Sobol sequences, standard errors from the spread of their means), "
            "monte-carlo (pseudo-random draws, per-sample standard errors), gauss-hermite "
            "(nothing sampled: xi on a tensor rule of --omega-nodes per axis, y integrated "
            "given omega; P M <= 2; Q*_stderr is then the rules' error estimate) or auto "
            "(gauss-hermite where it applies, else rqmc; the observation column says which)"),
    "omega_nodes": Param.integer(
        low=6, default=DEFAULT_OMEGA_NODES,
        doc="Gauss-Hermite nodes per axis of xi with --sampling gauss-hermite (the error "
            "estimate compares 2/3 of them; --target-error grows them 1.5x a round)"),
    "target_error": Param.real(
        low=0, low_open=True, default=None, nullable=True,
        doc="standard error wanted on every free overlap at the fixed point (Q*_stderr): "
            "solves again on more frozen samples, starting at --samples, x (error/target)^2 "
            "(at least 2x, at most 64x) a round, until it is met (up to 2^22 samples; each "
            "round's ETA from its measured cost per sample goes to stderr; none: one solve). "
            "On a staircase plateau of a reduced noiseless link (M = 2, one free row) the "
            "deterministic plateau map is taken instead when predicted sooner: the method "
            "column then reads 'plateau map' and Q*_stderr is its rule's error estimate"),
    "observation": Param.choice(
        "auto", "integrate", "sample", default="auto",
        doc="auto: integrate y given omega by an exact sum over a discrete output's values, "
            "on the level sets of a noiseless two-index link, or (with --sampling "
            "gauss-hermite, auto's choice for P M = 1) on a grid in y for one noisy output, "
            "else sample y (the result's observation column says which and why); integrate: "
            "also the y-grid with sampled omega (opt-in: not yet faster than sampling), and "
            "refuse a model that allows neither; sample: always sample y"),
})

ERROR = dict(MODEL_PARAMS, **{
    "kind": Param.choice("bo", "plugin", default="bo",
                         doc="bo = Bayes-optimal error (smi.md Eq. 11), plugin = prediction "
                             "with the mean weights (smi.md 10.5)"),
    "samples": Param.integer(low=100, default=200000, doc="Monte-Carlo samples"),
    "seed": SEED,
})

GAMP = dict(MODEL_PARAMS, **{
    "d": D,
    "alpha": ALPHA,
    "seed": SEED.with_default(REQUIRED, doc="seed of the teacher data; the start uses seed + 2"),
    "damping": DAMPING.with_default(0.0),
    "max_iter": Param.integer(low=1, default=40, doc="GAMP iterations"),
    "tol": Param.real(low=0, low_open=True, default=1e-6,
                      doc="stop when the weights' mean squared change is below it"),
    "init_scale": Param.real(low=0, low_open=True, default=0.1,
                             doc="standard deviation of the random initial W"),
    "side_information": SIDE_INFORMATION,
})

GAMP_TRACE = dict(GAMP, test_samples=Param.integer(
    low=0, default=1000, doc="fresh test sequences for the test error (0: none)"))

#: smi.md 15 (GD_2w.ipynb): the paper's SGD protocol, the command line's defaults
PAPER_SGD = {"d": 500, "alpha": 15.0, "epochs": 1700, "lr": 15.0, "weight_decay_d": 0.07,
             "batch": 200, "repeats": 3, "init_scale": 0.9}

SGD = {k: MODEL_PARAMS[k] for k in ("model", "depth", "seq_len", "skip", "inv_temp", "noise")}
SGD.update({
    "d": D,
    "alpha": ALPHA,
    "seed": SEED.with_default(REQUIRED, doc="seed of the teacher data, test set, initialization and "
                                  "batch order"),
    "epochs": Param.integer(low=1, doc="training epochs"),
    "lr": Param.real(low=0, low_open=True, default=15.0, doc="learning rate"),
    "weight_decay_d": Param.real(low=0, default=0.07,
                                 doc="d x the weight decay (smi.md 15: 0.07)"),
    "batch": Param.integer(low=1, default=200, doc="batch size"),
    "repeats": Param.integer(low=1, default=3, doc="SGD steps per batch"),
    "init_scale": Param.real(low=0, low_open=True, default=0.9,
                             doc="standard deviation of the initial entries"),
    "record_every": Param.integer(low=1, default=1, doc="epochs between recorded points"),
    "test_samples": Param.integer(low=0, default=1000, doc="fresh test sequences"),
})

# ----------------------------------------------------------------------- thresholds
MAX_PRECISION = 200

THRESHOLD = {
    "model": model_param("threshold"), "depth": DEPTH, "seq_len": SEQ_LEN, "skip": SKIP,
    "inv_temp": INV_TEMP,
    "delta": Param.real(low=0, default=0.0,
                        doc="Gaussian output-noise variance (phase-retrieval, sign-product, "
                            "model files)"),
    "precision": Param.integer(
        low=1, high=MAX_PRECISION, default=None, nullable=True, metavar="DIGITS",
        doc="alpha to DIGITS significant digits with mpmath, confirmed by a run at 2 DIGITS "
            "(digits_confirmed)"),
    "target_error": Param.real(
        low=0, low_open=True, default=None, nullable=True,
        doc="absolute error wanted on the weak-recovery alpha (observation grid, attention): the "
            "grid starts at outer-nodes and doubles (up to 400 per axis) until its error "
            "estimate is below it (none: one grid)"),
    "outer_nodes": Param.integer(low=4, high=400, default=48,
                                 doc="observation-grid nodes per axis (attention)"),
    "quadrature_nodes": QUADRATURE_NODES.with_default(40),
    "weak_only": Param.flag(default=False, doc="skip the staircase (attention)"),
    "staircase_samples": Param.integer(
        low=64, high=10 ** 7, default=4096,
        doc="frozen samples of the staircase map (randomized QMC; the grand staircase's "
            "design: sampling)"),
    "seed": SEED.with_default(0, doc="random seed of the staircase samples"),
    "grand_staircase": Param.flag(
        default=False,
        doc="every threshold of the grand staircase from the SE itself (glm/grand_staircase.py: "
            "rows not learned pinned at 0, averages over --staircase-samples frozen samples; "
            "extra columns rows_learned_before, rows_learned_at (row a = layer a + 1), "
            "converged, se_check: the SE order check's verdict, confirmed / inconclusive "
            "within its sampling noise / contradicted); the default for attention at depth "
            ">= 3 without --weak-only"),
    "alpha_continuation": Param.choice(
        "auto", "always", "never", default="auto",
        doc="grand staircase: find a stage's threshold by SE solves in alpha on the SE's "
            "stable branch (about 10 solves) where the fast overlap-space root is not a stable "
            "fixed point (auto), at every stage after the first (always), or never (the stage "
            "is then flagged not converged)"),
    "sampling": SAMPLING.with_default(doc=SAMPLING.doc + " (the grand staircase only; the "
                                      "two-layer staircase always uses its own randomized-QMC "
                                      "batch means)"),
}

#: the shape of a shipped model when an option is not given (the schema's defaults)
SHAPE_DEFAULTS = {k: THRESHOLD[k].default for k in registry.SHAPE}

PHASE_DIAGRAM = {
    "seq_len": SEQ_LEN.with_default(2, doc="tokens per sequence M (2 only: the reduction of "
                                           "smi.md 10)"),
    **{k: THRESHOLD[k] for k in ("target_error", "outer_nodes", "quadrature_nodes",
                                 "weak_only", "staircase_samples", "seed")},
}
PHASE_DIAGRAM["target_error"] = THRESHOLD["target_error"].with_default(1e-4)
SKIP_GRID = SKIP.with_default(doc="skip strength c of the phase diagram's grid (geometric)")

#: ``smi derive``: any shipped model or a model file, and the channel's output noise
DERIVE = {
    "model": model_param("derive"), "depth": DEPTH, "seq_len": SEQ_LEN, "skip": SKIP,
    "inv_temp": INV_TEMP,
    "noise": NOISE.with_default(doc="variance of the Gaussian output noise the channel is "
                                    "derived for, printed as the symbol Delta (none: the "
                                    "noiseless channel; a model without one says so)"),
    "format": Param.choice("markdown", "latex", "sympy", default="markdown",
                           doc="markdown (each expression as LaTeX and as SymPy), latex, or "
                               "sympy (lines `key = expression`, read back by sympy.sympify)"),
}
