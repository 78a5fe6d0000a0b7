"""``--model-file``: an SMI model declared in the user's own Python file.

The file defines ``model`` (a :class:`symtheory.glm.MultiIndexModel`, smi.md Eq. 1) or a
function ``build_model()`` returning one.  A deterministic link needs a
:class:`symtheory.glm.DeterministicReduction` (smi.md Sec. 9); without one, give the
output noise with ``--noise``.  :data:`EXAMPLE` (phase retrieval, ``y = z^2``: the same
model as ``outer_product(1)``) is shown in ``symtheory smi ... --help`` and run by the tests.
"""
from __future__ import annotations

EXAMPLE = '''\
import sympy as sp
from symtheory.glm import DeterministicReduction, MultiIndexModel
z, e = sp.symbols("z e", real=True)   # index z = w.x/sqrt(d); e = its value solved from y
red = DeterministicReduction(solved_rows=(0,), mixing=sp.eye(1), E=sp.Matrix([e]),
                             head=sp.Matrix([e**2]), observed=((0, 0),))
model = MultiIndexModel("phase_retrieval", sp.Matrix([z]), sp.Matrix([z**2]),
                        reduction=red, description="phase retrieval y = z^2")
'''


def load_model(path):
    """The ``MultiIndexModel`` declared in ``path``; any failure is a ``ParameterError``
    naming the file (see :func:`symtheory.core.cli_common.load_declaration`)."""
    from ..core.cli_common import load_declaration
    from ..glm.factors.multi_index import MultiIndexModel

    return load_declaration(path, option="--model-file", name="model", factory="build_model",
                            expected=MultiIndexModel)
