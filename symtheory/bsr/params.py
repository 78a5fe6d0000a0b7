"""The BSR parameters, declared once, and the schema of every BSR task.

Each parameter is a :class:`~symtheory.core.tasks.Param`; each task -- a ``symtheory bsr``
subcommand or a sweep computation of :mod:`symtheory.bsr.tasks` -- is a ``{name: Param}``
schema made of them.  Normalization (bsr.md 0; ``docs/theory/README.md``): ``beta = L/d``,
``rho = r/d`` at every beta, ``alpha = n/(dL)``, ``delta`` the label-noise variance.
Importing this module imports nothing numeric.
"""
from __future__ import annotations

from ..core.tasks import DAMPING, REQUIRED, SEED, Param

MAX_PRECISION = 1000

ALPHA = Param.real(low=0, metavar="A", doc="sample ratio alpha = n/(dL)")
ALPHA_SIM = Param.real(low=0, low_open=True, metavar="A",
                       doc="sample ratio alpha = n/(dL) (the instance has n = round(alpha d L))")
BETA = Param.real(low=0, low_open=True, allow_inf=True,
                  doc="aspect ratio L/d (inf: the beta -> infinity limit)")
BETA_FINITE = Param.real(low=0, low_open=True, doc="aspect ratio L/d")
RHO = Param.real(low=0, low_open=True, doc="width ratio r/d (at every beta)")
RHO_THRESHOLD = Param.real(low=0, doc="width ratio r/d (at every beta; 0: rank zero, both "
                                      "thresholds 0)")
DELTA = Param.real(low=0, default=0.0, doc="label-noise variance")
D = Param.integer(low=2, doc="token dimension d (L = round(beta d), r = round(rho d), "
                             "n = round(alpha d L))")
PRECISION = Param.integer(low=1, high=MAX_PRECISION, default=None, nullable=True,
                          metavar="DIGITS",
                          doc="mmse and q to DIGITS significant digits with mpmath, confirmed "
                              "by a solve at 2 x DIGITS")
INSTANCE_SEED = SEED.with_default(REQUIRED, doc="seed of the instance (teacher, tokens, noise)")

THEORY = {"alpha": ALPHA, "beta": BETA, "rho": RHO, "delta": DELTA, "precision": PRECISION}
THRESHOLDS = {"beta": BETA_FINITE, "rho": RHO_THRESHOLD}
SIMULATION = {"d": D, "beta": BETA_FINITE, "rho": RHO, "alpha": ALPHA_SIM, "delta": DELTA,
              "seed": INSTANCE_SEED}

GAMP = dict(SIMULATION, **{
    "damping": DAMPING.with_default(0.0, doc="damping of the estimate and its variance: weight "
                                             "of the previous iterate (0 = undamped)"),
    "a_estimator": Param.choice("derivative", "square", default="derivative",
                                doc="A = alpha/(delta + V) (derivative) or alpha mean(g_out^2) "
                                    "(square, the reference code's)"),
    "onsager": Param.choice("empirical", "predicted", default="empirical",
                            doc="variance from the denoiser's exact divergence (empirical) or "
                                "from the predicted mmse_RIE (predicted)"),
    "max_iter": Param.integer(low=1, default=100, doc="iteration cap"),
    "tol": Param.real(low=0, low_open=True, default=1e-8,
                      doc="stop when the mean squared change is below it")})

GD = dict(SIMULATION, **{
    "runs": Param.integer(low=1, default=1, doc="independent initializations on the same data"),
    "lr": Param.real(low=0, low_open=True, doc="learning rate"),
    "steps": Param.integer(low=1, doc="GD steps"),
    "init": Param.choice("prior", "small", default="prior",
                         doc="U, V drawn from the prior or N(0, init_scale^2) (small)"),
    "init_scale": Param.real(low=0, low_open=True, default=1e-4,
                             doc="standard deviation of the small init"),
    "record_every": Param.integer(low=1, default=100, doc="record the errors every N steps")})

MNNE = {k: SIMULATION[k] for k in ("d", "beta", "rho", "alpha", "seed")}

#: command-line only: several consecutive seeds of one command
SEEDS = Param.integer(low=1, default=1, doc="number of consecutive seeds")
