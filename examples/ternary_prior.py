"""A discrete prior w in {-1, 0, 1} with probabilities 1/4, 1/2, 1/4, declared for
`symtheory glm phases --prior FILE`.

    symtheory glm phases --prior examples/ternary_prior.py

A density works the same way: ``prior = SeparablePrior("laplace",
[density_component(sp.exp(-sp.Abs(w)) / 2, w)])`` (SymPy integrates it against
``exp(B w - A w^2/2)``; the declaration is refused by name if it does not normalize or
its second moment diverges).
"""
import sympy as sp

from symtheory.glm.factors.separable_prior import discrete

prior = discrete({-1: sp.Rational(1, 4), 0: sp.Rational(1, 2), 1: sp.Rational(1, 4)},
                 name="ternary")
