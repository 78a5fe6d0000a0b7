"""Sphinx configuration of the symtheory docs site.

Why this stack (issue 34): numpydoc renders the docstring standard the package adopts
(Parameters / Returns / Examples sections, checked by numpydoc's validator); myst-nb
reads the Markdown pages as they are on GitHub and executes the tutorial notebooks at
build time, with a jupyter-cache so an unchanged notebook is not re-run; autosummary
generates the API reference from the packages' public names (``__all__``), so a name
added to a package appears without editing a page.  MathJax is served from the build
(the ``django-static-mathjax`` wheel ships MathJax 3), not from a CDN, so the site renders
its math offline and in CI, where there is no network.

Build: ``python -m sphinx -W --keep-going -b html docs OUT``.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))          # document this checkout, not another install
sys.path.insert(0, str(DOCS))          # _gen.py: the generated pages

project = "symtheory"
author = "symtheory developers"
copyright = "symtheory developers, MIT licence"
from symtheory import __version__ as release  # noqa: E402
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
]

# --- pages ------------------------------------------------------------------------------
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "api/_templates"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
# the theory specs put $$...$$ display math inside list items and paragraphs
myst_dmath_double_inline = True
# the theory specs and guides link to sections by their titles
myst_heading_anchors = 3

# --- notebooks: executed at build, cached across builds ---------------------------------
nb_execution_mode = "cache"
nb_execution_cache_path = os.environ.get("SYMTHEORY_DOCS_CACHE",
                                         str(DOCS / "_build" / ".jupyter_cache"))
nb_execution_timeout = 600
nb_execution_raise_on_error = True     # a failing tutorial fails the build
nb_execution_show_tb = True
# the kernels inherit this environment: an MPLBACKEND=Agg set for scripts would keep the
# tutorials' figures out of the pages, so the kernels get the inline (headless) backend
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"

# --- API reference ----------------------------------------------------------------------
autosummary_generate = True
autodoc_typehints = "none"             # numpydoc writes the types into Parameters
numpydoc_show_class_members = False    # autosummary lists members; no duplicate tables
numpydoc_class_members_toctree = False
templates_path = ["api/_templates"]

# --- math: MathJax 3 from the build -----------------------------------------------------
_STATIC = DOCS / "_build" / "static"


def _vendor_mathjax() -> str | None:
    """Copy MathJax's es5 bundle (tex-chtml and what it loads lazily: fonts, TeX
    extensions) into a static folder of the build; return the path Sphinx serves."""
    try:
        import mathjax  # the django-static-mathjax wheel
    except ImportError:
        return None
    src = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    dst = _STATIC / "mathjax" / "es5"
    if not (dst / "tex-chtml.js").exists():
        # tex-chtml.js is self-contained but loads fonts (output/), TeX extensions on
        # first use (input/, autoload) and its menu (ui/, a11y/) from beside itself
        for sub in ("input", "output", "ui", "a11y"):
            shutil.copytree(src / sub, dst / sub, dirs_exist_ok=True)
        shutil.copy2(src / "tex-chtml.js", dst / "tex-chtml.js")
    return "mathjax/es5/tex-chtml.js"


_mathjax = _vendor_mathjax()
html_static_path = [str(_STATIC)] if _mathjax else []
if _mathjax:
    mathjax_path = _mathjax
# without the wheel Sphinx's default (a CDN) is used; tests/test_docs.py needs the wheel

# --- HTML -------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "symtheory"
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_show_sourcelink = False


def setup(app):
    from _gen import write_generated   # docs/_gen.py: API pages and the validation tables
    write_generated(DOCS)
