"""The symmetric door y = sign(|z| - K), declared for `symtheory glm phases --model-file`.

    symtheory glm phases --model-file examples/symmetric_door.py --channel-param 0.6744897501960817 --prior rademacher

``K = Phi^{-1}(3/4) = 0.6744897501960817`` makes ``P(y = 1) = 1/2``.  The likelihood is
given as probabilities over the two outputs; SymPy integrates each against the Gaussian
(splitting at the steps) and the channel's identities are checked at declaration.
"""
import sympy as sp

from symtheory.glm import likelihood_channel

y, u = sp.symbols("y u", real=True)
K = sp.Symbol("K", positive=True)
likelihood = sp.Piecewise((sp.Heaviside(u - K) + sp.Heaviside(-u - K), sp.Eq(y, 1)),
                          (sp.Heaviside(K - u) * sp.Heaviside(u + K), sp.Eq(y, -1)), (0, True))
channel = likelihood_channel("symmetric_door", likelihood, y, u, params=(K,), y_levels=(-1, 1),
                             check_ranges={K: (0.2, 2.0)})
