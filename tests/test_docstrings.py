"""The public API's docstrings are numpydoc and their Examples run (issue 34, item 4).

The public names are computed, not typed: every name a family package (``bsr``, ``smi``,
``aim``) or ``glm`` exports (its ``__all__``, i.e. its lazy_loader attributes), and the
public methods and properties of every exported class, also those it inherits from a
symtheory base class.  So a newly exported name without a docstring fails here.

1. :func:`numpydoc.validate.validate` on each of them, failing on :data:`ENFORCED`.
2. Every Examples section runs as a doctest (``smoke``: the examples derive priors,
   channels and kernels with SymPy and run three threshold searches; ~3-4 min in one
   process on 2 loaded cores).
3. Each docstring, as numpydoc hands it to Sphinx, parses as RST without a warning.
"""
from __future__ import annotations

import doctest
import importlib
import inspect

import numpydoc.validate as numpydoc_validate  # the test extra: missing is an error, not a skip
import pytest

PACKAGES = ("symtheory.bsr", "symtheory.smi", "symtheory.aim", "symtheory.glm")

#: numpydoc error codes that fail the test.  Not enforced, one line of reason each:
#:   ES01  an extended summary is optional: a one-line summary can say it all
#:   SA01-SA04  a See Also section is optional (cross-references live in the text)
#:   PR08, RT04  a description may open with a symbol in double backticks (``rho = r/d``)
ENFORCED = frozenset({
    "GL01", "GL02", "GL03", "GL05", "GL06", "GL07", "GL08", "GL09", "GL10",
    "SS01", "SS02", "SS03", "SS04", "SS05", "SS06",
    "PR01", "PR02", "PR03", "PR04", "PR05", "PR06", "PR07", "PR09", "PR10",
    "RT01", "RT02", "RT03", "RT05", "YD01",
    "EX01",
})
#: a property is documented by its summary (numpydoc checks no parameters or returns of
#: one); its example is its class's
PROPERTY_ENFORCED = ENFORCED - {"EX01"}
#: an exported submodule (``aim.theory``, ``glm.se``, ...) is a namespace: its members are
#: documented where they are exported; the module needs a docstring opening with a
#: sentence (checked here directly: numpydoc 1.11's validator raises StopIteration on a
#: module without a ``def`` or ``class`` line, e.g. ``glm/se/__init__.py``)
MODULE_ENFORCED = frozenset()


def _path(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def public_objects() -> list[tuple[str, object, frozenset]]:
    """``(import path, object, enforced codes)`` of every public name, each object once."""
    out, seen = [], set()

    def add(path, obj, codes):
        if id(obj) not in seen:
            seen.add(id(obj))
            out.append((path, obj, codes))

    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for name in sorted(pkg.__all__):
            obj = getattr(pkg, name)
            if inspect.ismodule(obj):
                add(obj.__name__, obj, MODULE_ENFORCED)
                continue
            add(_path(obj), obj, ENFORCED)
            if not inspect.isclass(obj):
                continue
            for attr in sorted(dir(obj)):
                # the class that defines it (an override hides its bases' version)
                cls = next(c for c in obj.__mro__ if attr in vars(c))
                if attr.startswith("_") or not cls.__module__.startswith("symtheory"):
                    continue
                member = vars(cls)[attr]
                if isinstance(member, property):
                    add(f"{_path(cls)}.{attr}", member, PROPERTY_ENFORCED)
                elif isinstance(member, (staticmethod, classmethod)):
                    add(f"{_path(cls)}.{attr}", member.__func__, ENFORCED)
                elif inspect.isfunction(member):
                    add(f"{_path(cls)}.{attr}", member, ENFORCED)
    return out


PUBLIC = public_objects()


def test_public_names_found():
    """The collection is not empty, and it holds functions, classes and methods."""
    paths = [p for p, _, _ in PUBLIC]
    assert len(paths) > 100, paths
    assert "symtheory.bsr.theory.bo_curve" in paths
    assert "symtheory.glm.se.state_evolution.StateEvolution.solve" not in paths  # inherited
    assert "symtheory.glm.se.staged_solve.StagedSolve.solve" in paths


@pytest.mark.parametrize("path,codes", [(p, c) for p, _, c in PUBLIC], ids=[p for p, _, _ in PUBLIC])
def test_numpydoc(path, codes):
    obj = next(o for p, o, _ in PUBLIC if p == path)
    if inspect.ismodule(obj):
        doc = inspect.getdoc(obj) or ""
        assert doc[:1].isupper(), f"{path}: no docstring opening with a sentence"
        return
    errors = [f"{code}: {msg}" for code, msg in numpydoc_validate.validate(path)["errors"]
              if code in codes]
    assert not errors, f"{path}:\n  " + "\n  ".join(errors)


def _doctests():
    finder = doctest.DocTestFinder(recurse=False, exclude_empty=True)
    out = []
    for path, obj, _ in PUBLIC:
        if inspect.ismodule(obj):
            continue
        # globs={}: an example imports what it uses, as a reader's session would
        for test in finder.find(obj, name=path, module=False, globs={}):
            if test.examples:
                out.append(test)
    return out


@pytest.mark.smoke
@pytest.mark.parametrize("test", _doctests(), ids=lambda t: t.name)
def test_example_runs(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    result = runner.run(test, out=report.append)
    assert result.attempted > 0
    assert result.failed == 0, "".join(report)


def _literal_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from docutils import nodes

    return [nodes.literal(rawtext, text)], []


@pytest.fixture(scope="module")
def rst_parser():
    """A docutils parser and its settings, made once (each costs ~0.1 s), with Sphinx's
    roles (``:func:`` ...) stood in for by literals."""
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser, roles

    for role in ("func", "class", "meth", "data", "attr", "mod", "obj", "exc", "math", "ref"):
        roles.register_local_role(role, _literal_role)
    return Parser(), get_default_settings(Parser)


@pytest.mark.parametrize("path", [p for p, _, _ in PUBLIC])
def test_docstring_is_valid_rst(path, rst_parser):
    """The docstring as numpydoc hands it to Sphinx parses without a docutils warning
    (unbalanced ``*``, ``|x|`` read as a substitution, bad indentation): the docs site
    builds its API reference from these with warnings as errors."""
    from docutils.utils import new_document
    from numpydoc.docscrape_sphinx import SphinxDocString

    obj = next(o for p, o, _ in PUBLIC if p == path)
    doc = inspect.getdoc(obj) or ""
    rst = doc if inspect.ismodule(obj) else str(SphinxDocString(doc))
    parser, settings = rst_parser
    warnings = []

    class Stream:
        def write(self, text):
            warnings.append(text)

    settings = settings.copy() if hasattr(settings, "copy") else settings
    settings.report_level, settings.halt_level, settings.warning_stream = 2, 5, Stream()
    document = new_document(path, settings)
    parser.parse(rst, document)
    assert not warnings, f"{path}:\n" + "".join(warnings)
