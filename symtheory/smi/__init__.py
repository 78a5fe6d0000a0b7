"""Sequence multi-index models and deep attention (Troiani et al., arXiv:2502.00901, ICML
2025).  Imports are lazy (``lazy_loader``): the command-line parser imports
:mod:`symtheory.smi.cli` without SymPy."""
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={"attention": ["deep_attention", "softmax_rows"],
                  "closed_form": ["linear_tokens", "outer_product"]})
