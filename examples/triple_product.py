"""y = z1 z2 z3, noiseless: three indices, no reduction, declared for `--model-file`.

    symtheory smi threshold --model-file examples/triple_product.py
    symtheory smi derive --model-file examples/triple_product.py

SymPy separates the link as ``z1 (z2 z3)``; the channel nests an outer tanh-sinh over
``z1`` around the two-index level set ``z2 z3 = y / z1`` (co-area formula with weight
``1/|z1|``) and is checked at declaration by the tower and derivative identities.
E[z|y] = 0 and G(y) = (E[z1^2|y] - 1) I, so every direction of Sym_3 is a top
eigenvector (multiplicity 6); the threshold is checked against Meijer-G forms of the
density (tests/glm/test_nested_level_set.py).
"""
import sympy as sp

from symtheory.glm import MultiIndexModel

z1, z2, z3 = sp.symbols("z1 z2 z3", real=True)
model = MultiIndexModel("triple_product", sp.Matrix([[z1], [z2], [z3]]),
                        sp.Matrix([[z1 * z2 * z3]]),
                        description="y = z1 z2 z3 (noiseless)")
