"""``symtheory smi derive``: what SymPy derived for a model, as LaTeX and SymPy.

The link's symmetry group, the preimages or output cells, ``Z_out`` and the moments of
``g_out``, the linearized state evolution and the threshold equation
(:mod:`symtheory.glm.derive`: the expressions the kernels are generated from, not
re-derived here).  Light imports only (the parser is built from it).
"""
from __future__ import annotations

from pathlib import Path

from ..core.cli_common import add_params, converter, describe
from ..core.validate import ParameterError
from . import params as P
from .common_cli import NORMALIZATION, add_model_options, build_model
from .model_file import EXAMPLE

DERIVE_HELP = (
    "Print what was derived symbolically for a model (Troiani et al., arXiv:2502.00901): the "
    "link's symmetry group, the preimages / output cells, Z_out and the moments of g_out "
    "(Eqs. 9, 12), the kernels' expressions, the linearized state evolution at the trivial "
    "point (Eq. 15) and the threshold equation (Eq. 16).  What is not derivable for the "
    "model (e.g. the preimages of a noisy link, a reduction's integral over the free rows) "
    "is stated with the reason.  Nothing is integrated.")
DERIVE_OUTPUT = (
    "Output: text, not a table (Columns: none), in the sections Link, Symmetry group, "
    "Preimages / output cells, Output channel (Z_out, g_out, dg_out, kernels), Linearized "
    "state evolution, Threshold equation; per item its key, title and expression (markdown: "
    "LaTeX and SymPy; latex: sp.latex; sympy: `key = expression`, read back by "
    "sympy.sympify with the printed symbol names) or why it is not derivable.  Symbols: "
    "omega_a_m = prior mean, Vinv_a_b = (V^-1)_ab, Delta = output-noise variance, "
    "J_i_j / mu_a_m = dg_out / g_out at omega = 0, V = I, T_a_b_c_d = the operator tensor.")


def _out_file(text):
    """``--out FILE``: a file path whose folder exists (refused at parse time)."""
    path = Path(text).expanduser()
    if not text.strip() or path.is_dir():
        raise ParameterError(f"--out must be a file path, got {text!r}")
    if not path.parent.is_dir():
        raise ParameterError(f"--out {text}: folder {path.parent} does not exist")
    return path


def cmd_derive(args) -> int:
    model = build_model(args, "derive", channel=False)
    from ..glm.derive import derive, render

    text = render(derive(model, args.noise), args.format)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0


def register_derive(smi_subparsers) -> None:
    """Add ``symtheory smi derive``."""
    p = smi_subparsers.add_parser(
        "derive", help="print the symbolic derivation of a model (LaTeX and SymPy)",
        description=describe(DERIVE_HELP, NORMALIZATION, DERIVE_OUTPUT, "--model-file: a Python file defining `model` (a "
                             "MultiIndexModel) or `build_model()`. Example (phase retrieval):",
                             example=EXAMPLE))
    add_model_options(p, P.DERIVE, channel=("noise",))
    add_params(p, {"format": P.DERIVE["format"]})
    p.add_argument("--out", type=converter(_out_file, "file path"), metavar="FILE",
                   help="write the derivation into FILE instead of printing it")
    p.set_defaults(func=cmd_derive)
