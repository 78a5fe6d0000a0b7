"""y = |z1| - |z2|, noiseless: a link with switches, no reduction, for `--model-file`.

    symtheory smi threshold --model-file examples/abs_difference.py

The link is smooth on each sign orthant (``z1 - z2``, ``z1 + z2``, ...): SymPy resolves
``Abs`` there, solves each piece for ``z1`` and the channel sums the co-area integrals of
the four orthants (the faces ``z_i = 0`` and the orthant's end of the preimage are cuts
of the tanh-sinh pieces), checked at declaration by the tower and derivative identities.
``alpha_c = 0.746954219221739`` (independent value from the erfc closed forms of the
half-normal convolution: tests/glm/test_level_set.py).
"""
import sympy as sp

from symtheory.glm import MultiIndexModel

z1, z2 = sp.symbols("z1 z2", real=True)
model = MultiIndexModel("abs_difference", sp.Matrix([[z1], [z2]]),
                        sp.Matrix([[sp.Abs(z1) - sp.Abs(z2)]]),
                        description="y = |z1| - |z2| (noiseless)")
