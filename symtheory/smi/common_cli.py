"""What the ``symtheory smi`` subcommands share: the family's normalization text, the
model options (``--model`` / ``--model-file`` and the shape of the model and its
channel, generated from the task's schema) and building the model they name.  Light
imports only (the parser is built from it)."""
from __future__ import annotations

from ..core.cli_common import add_params
from . import registry
from .params import SHAPE_DEFAULTS

NORMALIZATION = (
    "Model (Troiani et al., arXiv:2502.00901; smi.md 1): y = g(W x/sqrt(d)), x in R^{d x M} "
    "(M = seq-len tokens) and W in R^{P x d} with i.i.d. N(0,1) entries; deep tied "
    "attention X_{l+1} = (c I + softmax_row(inv_temp X_l W_l^T W_l X_l^T/d)) X_l, output "
    "the last attention matrix.  Normalization: alpha = n/d (samples per token dimension); "
    "overlaps Q = W_hat W*^T/d (P x P); errors are squared Frobenius norms summed over the "
    "output entries.")

MODEL_FILE_OPTION_HELP = ("a Python file defining `model` (a MultiIndexModel) or a function "
                          "`build_model()` returning one; see the example below")


# ----------------------------------------------------------------------- model
CHANNEL = ("noise", "quadrature", "quadrature_nodes")


def add_model_options(p, schema: dict, *, file_help: str = MODEL_FILE_OPTION_HELP,
                      defaults=None, channel: tuple = CHANNEL) -> None:
    """``--model`` / ``--model-file`` and the options of ``schema`` that shape the model
    (:data:`registry.SHAPE`) and (``channel``) its channel, parsed as None unless given,
    so that an option that does not apply to the chosen model is refused, never ignored."""
    g = p.add_mutually_exclusive_group()
    add_params(p, {"model": schema["model"]}, unset=("model",), group=g)
    g.add_argument("--model-file", metavar="PATH", help=file_help)
    shape = {k: schema[k] for k in (*registry.SHAPE, *channel) if k in schema}
    add_params(p, shape, unset=tuple(k for k in shape if k not in (defaults or {})),
               defaults=defaults)


def build_model(args, task: str = "se", *, precheck=None, channel: bool = True):
    """The model of ``--model`` / ``--model-file`` (:func:`registry.model_from_args`):
    options that would be ignored and (``channel``: the task integrates the model's
    channel) a noiseless channel the model cannot integrate are refused before anything
    is built."""
    return registry.model_from_args(args, task, SHAPE_DEFAULTS,
                                    noise=getattr(args, "noise", None), precheck=precheck,
                                    channel=channel)


