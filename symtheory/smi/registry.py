"""The SMI model registry: every shipped model, declared once, for the command line, the
sweep computations and the thresholds.

A :class:`ShippedModel` states its name, what it is, the schema parameters that shape it
(``depth``, ``seq_len``, ``skip``, ``inv_temp``; ``delta`` for the threshold models with
output noise), the tasks that offer it, its sizes ``(P, M, outputs)`` and whether it has
a deterministic reduction (smi.md 9: it may run without output noise) -- both known
without building it, so that a command refuses what cannot run before any SymPy work --
and how it is built (:func:`build_model`, once per process: its channel is derived
symbolically).  Importing this module imports nothing numeric.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

from ..core.validate import ParameterError

#: the schema parameters that shape a shipped model
SHAPE = ("depth", "seq_len", "skip", "inv_temp", "delta")


@dataclass(frozen=True)
class ShippedModel:
    """One shipped model (see the module docstring).  ``sizes(v)`` and ``reduced(v)``
    read the shape values ``v``; ``check(v)`` returns ``(parameter, why)`` for a shape
    the model cannot take, else ``None``."""

    name: str
    help: str
    shape: tuple
    tasks: tuple
    sizes: Callable[[dict], tuple]
    reduced: Callable[[dict], bool]
    check: Callable[[dict], tuple | None] | None = None


def _softmax_tokens(v):
    if v["seq_len"] < 2:
        return "seq_len", (f"must be >= 2 for the softmax attention, got {v['seq_len']}: a "
                           "softmax over one token is the constant 1 (nothing to learn)")
    return None


def option(name: str) -> str:
    """How the command line spells a parameter: ``seq_len`` -> ``--seq-len``."""
    return "--" + name.replace("_", "-")


_SE_TASKS = ("se", "error", "gamp", "sgd")
#: tasks that take every shipped model (``smi derive`` prints what was derived for any)
_EVERY = ("derive",)
MODELS = {m.name: dataclasses.replace(m, tasks=m.tasks + _EVERY) for m in (
    ShippedModel("attention", "deep tied softmax attention (smi.md 2; the paper's model)",
                 ("depth", "seq_len", "skip", "inv_temp"), _SE_TASKS + ("threshold",),
                 sizes=lambda v: (v["depth"], v["seq_len"], v["seq_len"] ** 2),
                 # smi.md 9-10: the reduction exists for rank one at M = 2 (softmax)
                 reduced=lambda v: v["seq_len"] == 2, check=_softmax_tokens),
    ShippedModel("linear-attention", "deep tied attention with the identity for the softmax",
                 ("depth", "seq_len", "skip", "inv_temp"), _SE_TASKS,
                 sizes=lambda v: (v["depth"], v["seq_len"], v["seq_len"] ** 2),
                 reduced=lambda v: True),
    ShippedModel("outer-product", "y = z z^T (smi.md 13.3)", ("seq_len",),
                 _SE_TASKS + ("threshold",),
                 sizes=lambda v: (1, v["seq_len"], v["seq_len"] ** 2), reduced=lambda v: True),
    ShippedModel("linear-tokens", "y = z (smi.md 13.1; needs output noise)", ("seq_len",),
                 _SE_TASKS, sizes=lambda v: (1, v["seq_len"], v["seq_len"]),
                 reduced=lambda v: False),
    ShippedModel("phase-retrieval", "y = z^2 + sqrt(delta) xi (smi.md 13.2)", ("delta",),
                 ("threshold",), sizes=lambda v: (1, 1, 1), reduced=lambda v: True),
    ShippedModel("sign-product", "y = sign(z1 z2) + sqrt(delta) xi (smi.md 13.4)", ("delta",),
                 ("threshold",), sizes=lambda v: (2, 1, 1), reduced=lambda v: False),
)}


def names(task: str) -> tuple:
    """The models ``task`` (``se``, ``error``, ``gamp``, ``sgd``, ``threshold``, ``derive``)
    offers."""
    return tuple(n for n, m in MODELS.items() if task in m.tasks)


def applies(option: str, task: str) -> tuple:
    """The models of ``task`` that ``option`` (a :data:`SHAPE` name) shapes."""
    return tuple(n for n in names(task) if option in MODELS[n].shape)


def shape_values(name: str, given: dict, defaults: dict, *, task: str,
                 spell: Callable[[str], str] = option) -> dict:
    """The shape of model ``name``: ``given`` (the shape parameters set by the user,
    ``None`` where not set) completed with ``defaults``.  A parameter set for a model it
    does not shape is refused by name (``spell(name)``: ``--seq-len`` on the command line,
    ``seq_len`` in a spec), never ignored; so is a shape the model cannot take."""
    model = MODELS[name]
    for k, v in given.items():
        if v is not None and k not in model.shape:
            raise ParameterError(f"{spell(k)} applies only to {spell('model')} "
                                 f"{' or '.join(applies(k, task))}, not {name}")
    values = {k: defaults[k] if given.get(k) is None else given[k] for k in model.shape}
    bad = model.check(values) if model.check is not None else None
    if bad is not None:
        raise ParameterError(f"{spell(bad[0])} {bad[1]}")
    return values


def require_noise(name: str, values: dict, noise, *, option: str = "--noise") -> None:
    """A model without a deterministic reduction needs output noise (smi.md 9): refused
    before the model is built."""
    if noise is None and not MODELS[name].reduced(values):
        shape = ", ".join(f"{k} = {v:g}" for k, v in values.items())
        raise ParameterError(f"{option} must be given, in (0, inf), for {name}"
                             + (f" at {shape}" if shape else "")
                             + ": a noiseless link needs a DeterministicReduction (smi.md 9), "
                               "which this model has not")


@functools.lru_cache(maxsize=None)
def _build(name, items):
    from . import attention, closed_form

    v = dict(items)
    if name in ("attention", "linear-attention"):
        return attention.deep_attention(v["depth"], v["seq_len"], 1, v["skip"], v["inv_temp"],
                                        "softmax" if name == "attention" else "linear")
    if name == "outer-product":
        return closed_form.outer_product(v["seq_len"])
    if name == "linear-tokens":
        return closed_form.linear_tokens(v["seq_len"])
    if name == "phase-retrieval":
        return closed_form.outer_product(1)
    if name == "sign-product":
        return sign_product()
    raise ParameterError(f"model must be one of {', '.join(MODELS)}, got {name!r}")


def build_model(name: str, values: dict):
    """The shipped model ``name`` at the shape ``values`` (built once per process; the
    shape options it does not take are ignored here: :func:`shape_values` refuses them)."""
    if name not in MODELS:
        raise ParameterError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    return _build(name, tuple(sorted((k, values[k]) for k in MODELS[name].shape
                                     if k != "delta")))


def sign_product():
    """``y = sign(z1 z2)`` (P = 2, M = 1; smi.md 13.4): ``alpha_c = pi^2/4``."""
    import sympy as sp

    from ..glm.factors.multi_index import MultiIndexModel

    Z = sp.Matrix(2, 1, lambda a, m: sp.Symbol(f"z{a}_{m}", real=True))
    return MultiIndexModel("sign_product", Z, sp.Matrix([[sp.sign(Z[0, 0] * Z[1, 0])]]),
                           description="y = sign(z1 z2)")


def se_sample_bytes(samples: int, sizes: tuple, *, noise: bool, sampling: str) -> int:
    """A lower bound on the memory of a state evolution's frozen samples
    (:class:`~symtheory.glm.se.state_evolution.StateEvolution`): ``samples`` draws of
    ``2 P M`` coordinates (plus the ``outputs`` under output noise), 8 bytes each; the
    RQMC design holds its Sobol points and their interleaved copy at once."""
    P, M, n_out = sizes
    dim = 2 * P * M + (n_out if noise else 0)
    # "auto" may take the RQMC design: counted as it
    return 8 * int(samples) * dim * (2 if sampling in ("rqmc", "auto") else 1)


def check_se_memory(samples: int, sizes: tuple, *, noise: bool, sampling: str,
                    option: str = "--samples") -> None:
    """Refuse, before anything is drawn, frozen samples that will not fit in memory,
    saying how much they need and the most that fits."""
    from ..core.memory import MAX_FRACTION, available_bytes, human

    need = se_sample_bytes(samples, sizes, noise=noise, sampling=sampling)
    avail = available_bytes()
    if avail is None or need <= MAX_FRACTION * avail:
        return
    per = se_sample_bytes(1, sizes, noise=noise, sampling=sampling)
    P, M, n_out = sizes
    raise ParameterError(
        f"{option} {samples}: the state evolution's frozen samples need at least "
        f"{human(need)} ({samples} x {per} bytes: 2 P M = {2 * P * M} coordinates"
        + (f" + {n_out} outputs" if noise else "")
        + (", twice for the RQMC design's interleaved copy" if sampling == "rqmc" else "")
        + f"), but only {human(avail)} of memory is available; give {option} <= "
        f"{int(MAX_FRACTION * avail // per)}")


def model_from_args(args, task: str, defaults: dict, *, file_allows: tuple = (), noise=None,
                    channel=True, precheck=None):
    """The model of the command-line options ``--model`` / ``--model-file`` and the
    shape options (``defaults``: the shape of an option not given, for each of
    :data:`SHAPE`).  Shape options given with ``--model-file`` (except ``file_allows``) or
    for a model they do not shape are refused, never ignored; for a shipped model the
    shape, (``channel``) the need for output noise -- ``noise`` is the noise given, None
    for a noiseless channel -- and ``precheck(sizes)`` (e.g. memory; ``sizes = (P, M,
    outputs)``) run before any SymPy work."""
    given = {k: getattr(args, k) for k in SHAPE if getattr(args, k, None) is not None}
    if getattr(args, "model_file", None) is not None:
        bad = [k for k in given if k not in file_allows]
        if bad:
            raise ParameterError(f"{option(bad[0])} does not apply to --model-file (declare the "
                                 "model's shape in the file)")
        from .model_file import load_model

        model = load_model(args.model_file)
        if channel and noise is None and model.reduction is None:
            # a noiseless link without a reduction: discrete cells or a level set, else
            # refused with both reasons (MultiIndexModel.channel)
            try:
                model.channel(None, check=False)
            except ParameterError as exc:
                raise ParameterError(f"--noise must be given, in (0, inf), for "
                                     f"{model.description or model.name}: {exc}") from None
        if precheck is not None:
            precheck((model.P, model.M, model.link.rows * model.link.cols))
        return model
    name = getattr(args, "model", None) or "attention"
    values = shape_values(name, given, defaults, task=task)
    if channel:
        require_noise(name, values, noise)
    if precheck is not None:
        precheck(MODELS[name].sizes(dict(defaults, **values)))
    return build_model(name, values)
