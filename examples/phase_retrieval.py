"""Phase retrieval y = z^2 (+ Gaussian noise with --noise), declared for `--model-file`.

    symtheory smi se --model-file examples/phase_retrieval.py --alpha 0.3 0.6 1.0
    symtheory smi gamp --model-file examples/phase_retrieval.py --d 500 --alpha 1.5

``z = w.x/sqrt(d)`` is the single index (P = 1 row, M = 1 token).  The reduction says how
the noiseless channel is integrated: ``e`` is the value of ``z`` solved from ``y`` (SymPy
finds the two branches +-sqrt(y); the package derives |dy/de| itself).
"""
import sympy as sp

from symtheory.glm import DeterministicReduction, MultiIndexModel

z, e = sp.symbols("z e", real=True)
model = MultiIndexModel(
    "phase_retrieval", sp.Matrix([[z]]), sp.Matrix([[z**2]]),
    reduction=DeterministicReduction(solved_rows=(0,), mixing=sp.eye(1), E=sp.Matrix([[e]]),
                                     head=sp.Matrix([[e**2]]), observed=((0, 0),)),
    description="phase retrieval y = z^2")
