"""A family-neutral registry of the package's computations and figures, and the schema
of every task parameter.

A family declares each parameter once, as a :class:`Param` (kind, valid range, default,
doc with units and normalization, and why the range is what it is), and each task --
a command-line subcommand or a computation a sweep may run -- as a ``{name: Param}``
schema built from those declarations.  From the schema come

* the command-line options (:func:`symtheory.core.cli_common.add_params`: names, types,
  help text stating the valid range, checked while parsing);
* the validation of a sweep spec and of the Python task API (:meth:`Computation.validate`);
* the option tables of ``docs/reference/options.md`` (``symtheory docs options``),

so a parameter has one bound wherever it appears.  Grids obey one cap, :data:`MAX_GRID`
values per axis (``--alpha-grid NUM`` and a spec's ``linspace``/``geomspace``/``range``).

A family declares in its ``tasks`` module (``symtheory.<family>.tasks``) each computation
a sweep may run -- its name, its schema and a function ``params -> outputs`` -- and each
figure ``symtheory reproduce`` can draw::

    @computation("fam.point", params={"alpha": Param.real(low=0), "seed": Param.integer(low=0)},
                 outputs=("error",))
    def point(alpha, seed):
        ...
        return {"error": e, "convergence": convergence(converged=True, iterations=12,
                                                       residual=3e-12, message="...")}

The returned dict holds scalar outputs plus the key ``"convergence"``: the solver's report
(``converged``, ``iterations``, ``residual``, ``message``; ``None`` where a field does not
apply, e.g. a fixed number of gradient steps).  :meth:`Computation.validate` checks and
completes parameters *before* anything runs; :meth:`Computation.execute` runs one point
and checks what the declaration promised (declared outputs present, scalar, a convergence
report), and records the warnings raised while computing.

Nothing here names a family: the sweep engine (``symtheory.sweep``) discovers the
families' ``tasks`` modules at run time, so a new family is picked up without changes.
This module imports nothing heavy (the command-line parser is built from it).
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from . import validate
from .validate import ParameterError

_REQUIRED = object()
_KEEP = object()
#: the default of a required parameter (``Param.with_default(REQUIRED)``)
REQUIRED = _REQUIRED

#: keys of a convergence report; every computation returns all of them
CONVERGENCE_FIELDS = ("converged", "iterations", "residual", "message")

#: most values of one grid axis: ``--alpha-grid START STOP NUM`` and a sweep spec's
#: ``linspace``/``geomspace`` ``num`` or ``range`` length (refused before any allocation)
MAX_GRID = 10_000

#: most points of one sweep spec (all blocks, before duplicates are merged): the product
#: of the axes is refused before it is expanded
MAX_POINTS = 1_000_000


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class Param:
    """Schema of one parameter: kind (``real``, ``integer``, ``choice``, ``flag``), valid
    range, default (absent: required), whether ``None`` is allowed, a short doc (meaning,
    units, normalization), ``why`` (the reason for a bound, stated in help texts and
    refusals) and the command line's ``metavar``."""

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    allow_inf: bool = False
    choices: tuple = ()
    default: Any = _REQUIRED
    nullable: bool = False
    doc: str = ""
    why: str = ""
    metavar: str | None = None

    # ---------------------------------------------------------------- constructors
    @classmethod
    def real(cls, *, low=None, high=None, low_open=False, high_open=False, allow_inf=False,
             default=_REQUIRED, nullable=False, doc="", why="", metavar=None):
        return cls("real", low, high, low_open, high_open, allow_inf, (), default, nullable, doc,
                   why, metavar)

    @classmethod
    def integer(cls, *, low=None, high=None, default=_REQUIRED, nullable=False, doc="", why="",
                metavar=None):
        return cls("integer", low, high, default=default, nullable=nullable, doc=doc, why=why,
                   metavar=metavar)

    @classmethod
    def choice(cls, *choices, default=_REQUIRED, nullable=False, doc="", why=""):
        return cls("choice", choices=tuple(choices), default=default, nullable=nullable,
                   doc=doc, why=why)

    @classmethod
    def flag(cls, *, default=_REQUIRED, doc=""):
        return cls("flag", default=default, doc=doc)

    def with_default(self, default=_KEEP, *, doc: str | None = None) -> "Param":
        """The same parameter (kind, range, reason) with a task's own default
        (:data:`REQUIRED`: none, the task requires it) and, if given, a doc saying what it
        means in that task: a default belongs to the task, the range to the parameter."""
        return dataclasses.replace(self, default=self.default if default is _KEEP else default,
                                   doc=self.doc if doc is None else doc)

    # ---------------------------------------------------------------- use
    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> str:
        """The valid values in words, e.g. ``a real in (0, inf]`` or ``an integer >= 1``."""
        if self.kind == "real":
            lo = "-inf" if self.low is None else f"{self.low:g}"
            hi = "inf" if self.high is None else f"{self.high:g}"
            lb = "(" if self.low_open or self.low is None else "["
            rb = ")" if self.high_open or (self.high is None and not self.allow_inf) else "]"
            text = f"a real in {lb}{lo}, {hi}{rb}"
        elif self.kind == "integer":
            if self.low is not None and self.high is not None:
                text = f"an integer in [{self.low}, {self.high}]"
            elif self.low is not None:
                text = f"an integer >= {self.low}"
            elif self.high is not None:
                text = f"an integer <= {self.high}"
            else:
                text = "an integer"
        elif self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = "true or false"
        if self.nullable:
            text += " (or omitted/none)"
        return text

    def check(self, name: str, value):
        """The canonical value (float, int, str, bool or None), or :class:`ParameterError`
        naming ``name``, the valid values and (if stated) why.  Text (a command-line word)
        is read as a number for ``real`` and ``integer`` (``1e3`` is the integer 1000).
        Reals and integers are checked by :mod:`symtheory.core.validate` (its wording:
        ``<name> must be in (0, inf), got -1``)."""
        if value is None:
            if self.nullable:
                return None
            raise self._why(ParameterError(f"{name} must be {self.describe()}, got none"))
        try:
            if self.kind in ("real", "integer"):
                if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
                    raise ParameterError(f"{name} must be {self.describe()}, got {value!r}")
                if self.kind == "integer":
                    return validate.integer(name, value, low=self.low, high=self.high)
                # +inf only: a lower bound is always declared where inf is allowed
                return validate.real(name, value, low=self.low, high=self.high,
                                     low_open=self.low_open, high_open=self.high_open,
                                     allow_inf=self.allow_inf and self.low is not None)
            if self.kind == "choice":
                if isinstance(value, bool) or value not in self.choices:
                    raise ParameterError(f"{name} must be {self.describe()}, got {value!r}")
                return value
            if not isinstance(value, bool):
                raise ParameterError(f"{name} must be {self.describe()}, got {value!r}")
            return value
        except ParameterError as exc:
            raise self._why(exc) from None

    def _why(self, exc: ParameterError) -> ParameterError:
        return ParameterError(f"{exc} ({self.why})") if self.why else exc

    def interval(self) -> str:
        """The range of a real, e.g. ``(0, inf]`` (as :func:`validate.interval`)."""
        return validate.interval(self.low, self.high, low_open=self.low_open,
                                 high_open=self.high_open, allow_inf=self.allow_inf)

    def show_default(self, default=_REQUIRED) -> str:
        """A default as the help texts and tables show it (``-`` for none)."""
        d = self.default if default is _REQUIRED else default
        if d is _REQUIRED:
            return "required"
        if d is None:
            return "none"
        if isinstance(d, bool):
            return "true" if d else "false"
        if isinstance(d, (list, tuple)):
            return " ".join(_num(v) for v in d)
        return _num(d)


# ------------------------------------------------------------- package-wide parameters
#: one meaning wherever they appear; a task sets its own default (:meth:`Param.with_default`)
SEED = Param.integer(low=0, default=0, doc="random seed")
DAMPING = Param.real(low=0, high=1, high_open=True,
                     doc="damping: weight t of the previous iterate, new = (1 - t) F(old) + t old "
                         "(0 = undamped)")
SAMPLING = Param.choice(
    "rqmc", "monte-carlo", default="rqmc",
    doc="design of the state evolution's frozen samples: rqmc (independently scrambled "
        "Sobol sequences, standard errors from the spread of their means) or monte-carlo "
        "(pseudo-random draws, per-sample standard errors)")


#: ``NUM`` of ``--X-grid START STOP NUM`` and ``num`` of a sweep spec's grids
GRID_NUM = Param.integer(low=1, high=MAX_GRID)


def params_markdown(params: dict) -> list:
    """Rows of a markdown table of a schema: parameter, valid values, default, meaning."""
    rows = ["| parameter | valid values | default | meaning |", "| --- | --- | --- | --- |"]
    for name, p in params.items():
        why = f" ({p.why})" if p.why else ""
        rows.append(f"| `{name}` | {p.describe()}{why} | {p.show_default()} | {p.doc} |"
                    .replace("\n", " "))
    return rows


def convergence(*, converged=None, iterations=None, residual=None, message="") -> dict:
    """A convergence report (see the module docstring); ``None`` where not applicable."""
    return {"converged": None if converged is None else bool(converged),
            "iterations": None if iterations is None else int(iterations),
            "residual": None if residual is None else float(residual),
            "message": str(message)}


def _scalar(name, value):
    """Plain Python scalar for an output (NumPy scalars unwrapped); anything else is a
    defect of the declaration, not of the point."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"output {name!r} must be a scalar (number, bool, str or None), "
                    f"got {type(value).__name__}")


@dataclass(frozen=True)
class Computation:
    """One declared computation (see the module docstring)."""

    name: str
    func: Callable[..., dict]
    params: dict
    outputs: tuple | None = None
    check: Callable[[dict], None] | None = None
    doc: str = ""

    def validate(self, params: dict, where: str = "") -> dict:
        """Complete ``params`` with defaults and check every value against the schema and
        the cross-parameter ``check``; returns the canonical parameters.  Errors name the
        key (prefixed by ``where``) and its valid range."""
        prefix = f"{where}." if where else ""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ParameterError(
                f"{prefix}{unknown[0]}: unknown parameter of {self.name}; valid parameters: "
                + "; ".join(f"{k} ({p.describe()})" for k, p in self.params.items()))
        out = {}
        for key, spec in self.params.items():
            if key in params:
                out[key] = spec.check(prefix + key, params[key])
            elif spec.required:
                raise ParameterError(f"{prefix}{key}: required parameter of {self.name} is "
                                     f"missing; give {spec.describe()}")
            else:
                out[key] = spec.default
        if self.check is not None:
            try:
                self.check(out)
            except ParameterError as exc:
                raise ParameterError(f"{prefix[:-1] or self.name}: {exc}") from None
        return out

    def execute(self, params: dict) -> tuple[dict, dict]:
        """Run one point: ``(outputs, convergence report)``; the report lists the warnings
        raised while computing (messages, deduplicated) under ``warnings``."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = self.func(**params)
        if not isinstance(result, dict) or not isinstance(result.get("convergence"), dict):
            raise TypeError(f"{self.name} must return a dict with a 'convergence' report")
        result = dict(result)
        report = result.pop("convergence")
        missing = [k for k in CONVERGENCE_FIELDS if k not in report]
        if missing:
            raise TypeError(f"{self.name}: convergence report lacks {', '.join(missing)}")
        if self.outputs is not None and set(result) != set(self.outputs):
            raise TypeError(f"{self.name} returned outputs {sorted(result)}, declared "
                            f"{sorted(self.outputs)}")
        clash = set(result) & set(self.params)
        if clash:
            raise TypeError(f"{self.name}: outputs {sorted(clash)} shadow parameters")
        outputs = {k: _scalar(k, v) for k, v in result.items()}
        seen = []
        for w in caught:
            text = f"{w.category.__name__}: {w.message}"
            if text not in seen:
                seen.append(text)
        report = {k: _scalar(k, v) for k, v in report.items()}
        report["warnings"] = "; ".join(seen)
        return outputs, report


@dataclass(frozen=True)
class Figure:
    """A figure ``symtheory reproduce`` can draw: ``spec(quick)`` returns a sweep spec
    (the dict form of a TOML spec), ``render(tables, folder)`` draws it from the results
    (``{block label: Table}``) and returns the paths it wrote."""

    name: str
    title: str
    spec: Callable[[bool], dict]
    render: Callable[[dict, Any], list]
    doc: str = ""


_COMPUTATIONS: dict[str, Computation] = {}
_FIGURES: dict[str, Figure] = {}


def _check_name(name: str, old_module: str | None, what: str, module: str) -> None:
    """Names read ``<family>.<name>``; a name may be declared again only by the same
    module (a re-import), never by two."""
    if not isinstance(name, str) or name.count(".") != 1 or not all(name.split(".")):
        raise ValueError(f"{what} name must read '<family>.<name>', got {name!r}")
    if old_module is not None and old_module != module:
        raise ValueError(f"{what} {name!r} is declared in both {old_module} and {module}")


def computation(name: str, *, params: dict, outputs=None, check=None, doc: str | None = None):
    """Decorator declaring ``func`` as the computation ``name`` (see the module docstring).

    The function's parameters must be exactly the schema's keys (checked here, so a
    declaration cannot drift from its function)."""
    for key, spec in params.items():
        if not isinstance(spec, Param):
            raise TypeError(f"{name}: schema of {key!r} must be a Param")

    def register(func):
        old = _COMPUTATIONS.get(name)
        _check_name(name, old and old.func.__module__, "computation", func.__module__)
        sig = set(inspect.signature(func).parameters)
        if sig != set(params):
            raise TypeError(f"{name}: function parameters {sorted(sig)} differ from the schema "
                            f"{sorted(params)}")
        text = doc if doc is not None else inspect.getdoc(func) or ""
        _COMPUTATIONS[name] = Computation(name, func, dict(params),
                                          None if outputs is None else tuple(outputs), check, text)
        return func

    return register


def register_figure(name: str, *, title: str, spec, render, doc: str = "") -> Figure:
    """Declare a figure of ``symtheory reproduce`` (see :class:`Figure`)."""
    old = _FIGURES.get(name)
    _check_name(name, old and old.render.__module__, "figure", render.__module__)
    fig = Figure(name, title, spec, render, doc)
    _FIGURES[name] = fig
    return fig


def computations() -> dict[str, Computation]:
    """The computations declared so far (the sweep engine imports the families first)."""
    return dict(_COMPUTATIONS)


def figures() -> dict[str, Figure]:
    return dict(_FIGURES)
