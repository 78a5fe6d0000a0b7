"""y = z1^2 - z2^2, noiseless: two indices, no reduction, declared for `--model-file`.

    symtheory smi threshold --model-file examples/square_difference.py
    symtheory smi derive --model-file examples/square_difference.py

SymPy solves ``g = y`` for ``z1 = +-sqrt(y + z2^2)``; the channel integrates the Gaussian
on that level set (co-area formula, folds at ``z2 = +-sqrt(-y)``) and is checked at
declaration by the tower and derivative identities.  ``alpha_c = 0.59375109822226``
(independent value from Bessel functions: tests/glm/test_level_set.py).
"""
import sympy as sp

from symtheory.glm import MultiIndexModel

z1, z2 = sp.symbols("z1 z2", real=True)
model = MultiIndexModel("square_difference", sp.Matrix([[z1], [z2]]),
                        sp.Matrix([[z1**2 - z2**2]]),
                        description="y = z1^2 - z2^2 (noiseless)")
