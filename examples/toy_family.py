"""A toy model family in one file: the teacher-student perceptron GLM.

    y = f(w . x / sqrt(d)),   x ~ N(0, I_d),   w_i ~ P i.i.d.,   alpha = n/d

A family only *declares*: its models (a registry), the parameters of its tasks (one
schema, from which the command line, its validation and a sweep's validation come) and
each task as a function of those parameters.  Every number comes from the family-neutral
layer, ``symtheory.glm``: the channel's g_out derived from its log-partition and checked
at declaration, the prior's input functions, the state evolution and its fixed-point
engine.  Nothing numeric is written here.

    python examples/toy_family.py --alpha 1.5 --model probit --delta 0.1 --prior rademacher
    python examples/toy_family.py --alpha -1        # refused: --alpha must be > 0

docs/toy_family.md walks through it; tests/test_toy_family.py runs it.
"""
from __future__ import annotations

import json
import sys

from symtheory.core.cli_common import Parser, UsageError, add_params, describe
from symtheory.core.tasks import Param, computation, convergence


# ---------------------------------------------------------------- 1. the model registry
def _sign():
    from symtheory.glm import sign_channel

    return sign_channel(noise=False)


def _probit():
    from symtheory.glm import sign_channel

    return sign_channel(noise=True)       # y = sign(z + sqrt(delta) xi)


def _prior(name):
    from symtheory.glm.factors import separable_prior

    return {"gaussian": separable_prior.gaussian,
            "rademacher": separable_prior.rademacher}[name]()


#: model name -> (channel factory, names of the schema parameters the channel takes)
MODELS = {"sign": (_sign, ()), "probit": (_probit, ("delta",))}
PRIORS = ("gaussian", "rademacher")

# ---------------------------------------------------------------- 2. the task schema
PARAMS = {
    "alpha": Param.real(low=0, low_open=True, metavar="A", doc="sample ratio alpha = n/d"),
    "model": Param.choice(*MODELS, default="sign",
                          doc="sign: y = sign(z); probit: y = sign(z + sqrt(delta) xi)"),
    "prior": Param.choice(*PRIORS, default="gaussian", doc="the weights' prior"),
    "delta": Param.real(low=0, low_open=True, default=0.1, metavar="D",
                        doc="probit noise variance (model probit only)"),
}


# ---------------------------------------------------------------- 3. the task
@computation("toy.overlap", params=PARAMS, outputs=("overlap", "mse"))
def overlap(alpha, model, prior, delta):
    """Bayes-optimal overlap q/rho and error V = rho - q at the fixed point of the state
    evolution reached from the uninformed start (Barbier et al., PNAS 116 (2019))."""
    from symtheory.glm import ScalarGlmSE

    factory, takes = MODELS[model]
    values = tuple({"delta": delta}[k] for k in takes)
    se = ScalarGlmSE(factory(), _prior(prior), values)
    res = se.solve(alpha)
    return {"overlap": 1 - res.value / se.rho, "mse": res.value,
            "convergence": convergence(converged=res.converged, iterations=res.iterations,
                                       residual=res.residual, message=res.message)}


# ---------------------------------------------------------------- 4. the command line
def build_parser() -> Parser:
    p = Parser(prog="toy_family", description=describe(
        "Overlap of the teacher-student perceptron at its SE fixed point.",
        "Normalization: z = w . x / sqrt(d), alpha = n/d, overlap = q/rho, rho = E w^2."))
    add_params(p, PARAMS)                 # options, types, ranges and help from the schema
    return p


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"toy_family: error: {exc.message}", file=sys.stderr)
        return 2
    params = {k: getattr(args, k) for k in PARAMS}
    outputs = overlap(**params)
    print(json.dumps({**params, **{k: v for k, v in outputs.items() if k != "convergence"},
                      "converged": outputs["convergence"]["converged"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
