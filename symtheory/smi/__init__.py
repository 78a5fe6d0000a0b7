"""Sequence multi-index models and deep attention (Troiani et al., ICML 2025)."""
from .attention import deep_attention, softmax_rows  # noqa: F401
from .closed_form import linear_tokens, outer_product  # noqa: F401
