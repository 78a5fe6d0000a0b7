"""The AIM link registry: every output link, declared once, for the command line, the
sweep computations, the data generator, gradient descent and the theory.

=============  ===========================================================================
link           output of a sample (aim.md 1)
=============  ===========================================================================
softmax        ``y = softmax_row(inv_temp h)``: the paper's model (two tokens or more)
identity       ``y = h``: with one token, the quadratic network (Maillard et al.)
hardmax        ``y`` = one-hot of the row argmax (``inv_temp -> inf``; T = 2 only, its
               orthant channel of aim.md 3.5)
=============  ===========================================================================

Importing this module imports nothing numeric.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """One output link: whether one token carries information, whether gradient descent
    can train it (hardmax is piecewise constant), whether its theory is the symbolic
    linear-rank channel (:mod:`symtheory.aim.model`) and the token counts it takes."""

    name: str
    help: str
    one_token: bool
    trainable: bool
    symbolic: bool
    seq_lens: tuple | None = None       # None: any T allowed by the schema


_LINKS = (
    Link("softmax", "row-wise softmax at inv_temp (the paper's model; T >= 2)", one_token=False,
         trainable=True, symbolic=True),
    Link("identity", "y = h (one token: the quadratic network)", one_token=True,
         trainable=True, symbolic=True),
    Link("hardmax", "row-wise one-hot argmax (T = 2 only, aim.md 3.5)", one_token=False,
         trainable=False, symbolic=False, seq_lens=(2,)),
)
REGISTRY = {link.name: link for link in _LINKS}

#: every link, in the order the help texts list them
LINKS = tuple(REGISTRY)
#: links whose output carries information with a single token
ONE_TOKEN_LINKS = tuple(n for n, k in REGISTRY.items() if k.one_token)
#: links whose output has a useful gradient
TRAINABLE_LINKS = tuple(n for n, k in REGISTRY.items() if k.trainable)
#: links with the symbolic linear-rank theory (aim.md 3.3-3.4)
SYMBOLIC_LINKS = tuple(n for n, k in REGISTRY.items() if k.symbolic)
#: hardmax g_out: bayes (Bayes-optimal, d log Phi_2) or the published surrogate
HARDMAX_VARIANTS = ("bayes", "joint-density")


def describe(links=LINKS) -> str:
    return "; ".join(f"{n} = {REGISTRY[n].help}" for n in links)
