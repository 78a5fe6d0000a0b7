"""Sequence multi-index models and deep attention (Troiani et al., ICML 2025)."""
import importlib

# lazy (PEP 562): the command-line parser imports symtheory.smi.cli without SymPy
_EXPORTS = {"deep_attention": "attention", "softmax_rows": "attention",
            "linear_tokens": "closed_form", "outer_product": "closed_form"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
