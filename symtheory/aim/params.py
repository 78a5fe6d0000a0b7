"""The AIM parameters, declared once, and the schema of every AIM task.

Each parameter is a :class:`~symtheory.core.tasks.Param`; each task -- an ``symtheory
aim`` subcommand or a sweep computation of :mod:`symtheory.aim.tasks` -- is a ``{name:
Param}`` schema made of them.  Normalization (aim.md 1; ``docs/theory/README.md``):
``alpha = n/d^2``, ``rho = r/d``, ``seq_len`` = the paper's T, ``inv_temp`` = the softmax
beta, ``delta`` = output-noise variance.  Importing this module imports nothing numeric.
"""
from __future__ import annotations

from ..core.tasks import DAMPING, REQUIRED, SAMPLING, SEED, Param
from . import registry

#: the link's Jacobian rank is derived in mpmath once per T (~15 s at T = 6, ~1.5 min at
#: T = 8; cached on disk afterwards)
MAX_SEQ_LEN = 8
MAX_PRECISION = 1000

# ----------------------------------------------------------------------- the model
ALPHA = Param.real(low=0, metavar="A",
                   doc="sample ratio alpha = n/d^2 (with rho = 0: alpha_bar = n/(d r))")
ALPHA_SIM = Param.real(low=0, low_open=True, metavar="A",
                       doc="sample ratio alpha = n/d^2 (n = round(alpha d^2) samples)")
RHO_LIMITS = Param.real(
    low=0, allow_inf=True,
    doc="width ratio r/d: inf = the rho -> infinity line (aim.md 4.2, closed form), 0 = the "
        "low-rank limit (aim.md 4.4; then alpha is alpha_bar = n/(d r))")
RHO = Param.real(low=0, low_open=True, default=0.5, doc="width ratio rho = r/d")
SEQ_LEN = Param.integer(
    low=1, high=MAX_SEQ_LEN, default=2, doc="tokens per sample T (the paper's T)",
    why="the link's Jacobian rank is derived in mpmath once per T, about 1.5 min at T = 8")
LINK = Param.choice(*registry.LINKS, default="softmax",
                    doc="output function: " + registry.describe())
HARDMAX_VARIANT = Param.choice(
    *registry.HARDMAX_VARIANTS, default="bayes",
    doc="hardmax g_out: bayes (d log Phi_2, Bayes-optimal) or joint-density (the published "
        "code's surrogate, aim.md 3.5: NOT Bayes-optimal; only to reproduce its figures)")
INV_TEMP = Param.real(low=0, low_open=True, default=1.0,
                      doc="softmax inverse temperature (the MSE of the one-layer theory does "
                          "not depend on it, the test error does)")
DELTA = Param.real(low=0, default=0.0,
                   doc="output-noise variance: delta/(2 - delta_ab) on h_ab before the link "
                       "(aim.md 1.2; one token: y = h + sqrt(delta) xi)")
PRECISION = Param.integer(low=1, high=MAX_PRECISION, default=None, nullable=True,
                          metavar="DIGITS",
                          doc="DIGITS significant digits with mpmath, confirmed by a solve at "
                              "2 x DIGITS")
GEN_SAMPLES = Param.integer(low=100, default=20000, nullable=True,
                            doc="Monte-Carlo samples of the softmax test error (the identity "
                                "link is exact; none: skip it)",
                            why="a Monte-Carlo standard error from fewer is unreliable")
D = Param.integer(low=2, doc="token dimension d")

#: the model: the parameters every AIM computation shares (aim.md 1; package notation)
MODEL_PARAMS = {"rho": RHO.with_default(REQUIRED), "seq_len": SEQ_LEN, "link": LINK,
                "inv_temp": INV_TEMP, "delta": DELTA}

# ----------------------------------------------------------------------- tasks
THEORY = {"alpha": ALPHA, "rho": RHO_LIMITS, "seq_len": SEQ_LEN.with_default(REQUIRED), "link": LINK,
          "hardmax_variant": HARDMAX_VARIANT, "delta": DELTA, "inv_temp": INV_TEMP,
          "precision": PRECISION.with_default(doc="mmse and q to DIGITS significant digits with "
                                                  "mpmath, confirmed by a solve at 2 x DIGITS"),
          "gen_samples": GEN_SAMPLES,
          "gen_error": Param.flag(default=True, doc="compute the test error (without: gen_error = "
                                                     "NaN)")}

THRESHOLD = {"rho": RHO_LIMITS.with_default(doc="width ratios r/d (0: the low-rank limit)"),
             "seq_len": SEQ_LEN.with_default(REQUIRED), "link": LINK,
             "hardmax_variant": HARDMAX_VARIANT, "delta": DELTA,
             "precision": PRECISION.with_default(doc="hardmax: digits of the threshold "
                                                     "(none: 30)")}

THEORY_POINT = dict(MODEL_PARAMS, **{
    "alpha": ALPHA.with_default(doc="sample ratio alpha = n/d^2"),
    "hardmax_variant": HARDMAX_VARIANT,
    "gen_samples": GEN_SAMPLES.with_default(None)})

TEACHER = {"d": D, "alpha": ALPHA_SIM, "rho": RHO, "seq_len": SEQ_LEN, "link": LINK,
           "inv_temp": INV_TEMP, "delta": DELTA}

GAMP = dict(MODEL_PARAMS, **{
    "d": D, "alpha": ALPHA_SIM,
    "seed": SEED.with_default(REQUIRED, doc="seed of the teacher data"),
    "damping": DAMPING.with_default(0.5),
    "max_iter": Param.integer(low=1, default=150, doc="GAMP iterations"),
    "tol": Param.real(low=0, low_open=True, default=1e-9,
                      doc="stop when (1/d)||S_t - S_{t-1}||_F^2 is below it"),
    "hardmax_variant": HARDMAX_VARIANT})

GD = dict(MODEL_PARAMS, **{
    "d": D, "alpha": ALPHA_SIM,
    "seed": SEED.with_default(REQUIRED, doc="seed of the teacher data and the students"),
    "students": Param.integer(low=1, default=16, doc="students averaged per teacher"),
    "steps": Param.integer(low=1, default=1000, doc="full-batch Adam steps"),
    "lr": Param.real(low=0, low_open=True, default=0.1, doc="Adam learning rate")})

GD_CLI = {"teachers": Param.integer(low=1, default=1,
                                    doc="independent teachers (data sets) per alpha"),
          "init_scale": Param.real(low=0, low_open=True, default=1.0,
                                   doc="standard deviation of the students' initial W")}

DEEP = {
    "rho": RHO.with_default(doc="width ratio r/d of every layer"),
    "depth": Param.integer(low=2, high=3, default=2, doc="layers L",
                           why="the SE integrates L T(T+1)/2 indices per sample: 9 at depth 3, "
                               "T = 2"),
    "seq_len": SEQ_LEN,
    "skip": Param.real(low=0, default=1.0, doc="skip (residual) strength c"),
    "inv_temp": INV_TEMP.with_default(doc="softmax inverse temperature"),
    "noise": Param.real(low=0, low_open=True,
                        doc="variance of the Gaussian noise on each output (the noiseless deep "
                            "observation is not invertible)"),
    "samples": Param.integer(low=100, default=1024,
                             doc="frozen samples of the SE map (design: sampling; 16 x 2^6; "
                                 "each costs one Laplace-RQMC posterior integral per map "
                                 "evaluation)"),
    "sampling": SAMPLING,
    "seed": SEED.with_default(0, doc="random seed of the SE samples"),
    "damping": DAMPING.with_default(0.3, doc="damping of the SE's overlap iteration: weight of "
                                             "the previous iterate (0 = undamped)"),
    "max_iter": Param.integer(low=1, default=200, doc="iteration cap of the SE"),
    "gamp_d": Param.integer(low=4, default=None, nullable=True, metavar="D",
                            doc="also run GAMP-RIE at token dimension D"),
    "gamp_seeds": SEED.with_default(0, doc="data seeds of the GAMP runs"),
    "gamp_iter": Param.integer(low=1, default=60, doc="GAMP iterations"),
    "gamp_damping": DAMPING.with_default(0.6, doc="damping of GAMP's messages, estimate and "
                                                  "variances: weight of the previous iterate "
                                                  "(at 0.3 layer 1 oscillates with period 2 at "
                                                  "d = 40)"),
    "tol": Param.real(low=0, low_open=True, default=1e-7,
                      doc="GAMP stops when the mean squared change of its estimate is below it"),
}
#: tokens the deep command takes (its SE is set up for T = 2, 3; aim.md 3.7)
DEEP_SEQ_LENS = (2, 3)
