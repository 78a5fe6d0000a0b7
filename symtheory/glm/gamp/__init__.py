"""Generalized approximate message passing: one loop (:mod:`.loop`) for every model, with
row operators for dense sensing and token sequences; :mod:`.tokens` sets it up for
sequence multi-index models (Algorithm 1 of Troiani et al., arXiv:2502.00901)."""
