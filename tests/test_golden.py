"""Golden snapshots of generated kernels (symforce's practice): the printed source of a
few representative kernels is committed under ``tests/golden/``.  A change in a
derivation, in the rewrite rules or in the printer shows up here as a readable diff
that a reviewer can judge; ``pytest tests/test_golden.py --refresh-golden`` rewrites
the snapshots after an intended change (commit them with the change)."""
import difflib
import re
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


def _bsr_alpha_pr():
    from symtheory.bsr.theory import theory

    return theory().alpha_pr_kernel


def _bsr_law_edges():
    from symtheory.bsr.theory import theory

    return theory().law.edge_kernel


def _bsr_rie_mmse_value():
    from symtheory.bsr.theory import theory

    return theory().mmse_functional.value_kernel


def _gaussian_prior_overlap():
    from symtheory.glm.factors.gaussian_prior import GaussianPrior

    GaussianPrior()
    return GaussianPrior._kernel


def _outer_product_link():
    from symtheory.smi import outer_product

    return outer_product(2).link_kernel


def _noisy_channel_driver():
    import sympy as sp

    from symtheory.glm import MultiIndexModel

    z1, z2 = sp.symbols("z1 z2", real=True)
    model = MultiIndexModel("golden_tanh_times", sp.Matrix([[z1], [z2]]),
                            sp.Matrix([[sp.tanh(z1) * z2]]))
    return model.channel(0.1, check=False).kernel


def _reduced_channel_driver():
    from symtheory.smi import outer_product

    return outer_product(2).channel().mixing_kernel


KERNELS = {
    "bsr_alpha_pr": _bsr_alpha_pr,            # a derived closed form
    "bsr_gram_edges": _bsr_law_edges,         # a discriminant (edge) polynomial, factored
    "bsr_rie_mmse_value": _bsr_rie_mmse_value,  # a spectral functional reduced by identities
    "prior_gaussian_overlap": _gaussian_prior_overlap,  # a prior map from its log-partition
    "outer_product_link": _outer_product_link,  # a multi-index link with its vector companion
    # kernels with a packed wrapper for the drivers in symtheory/glm/integrate/drivers/
    "noisy_channel_driver": _noisy_channel_driver,  # affine split of the noise drivers
    "reduced_channel_driver": _reduced_channel_driver,  # mixing T(u) of the smi.md 9 driver
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_generated_source_matches_snapshot(name, request):
    source = KERNELS[name]().source
    path = GOLDEN / f"{name}.py.txt"
    if request.config.getoption("--refresh-golden"):
        path.write_text(source)
        pytest.skip(f"refreshed {path.name}")
    if not path.exists():
        pytest.fail(f"no snapshot {path}; run pytest {__file__} --refresh-golden and review it")
    expected = path.read_text()
    if source != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), source.splitlines(True),
                                            f"golden/{path.name}", "generated now"))
        pytest.fail(f"generated source of {name} changed; review the diff and, if intended, "
                    f"run pytest tests/test_golden.py --refresh-golden\n{diff}")


@pytest.mark.parametrize("name", ["noisy_channel_driver", "reduced_channel_driver"])
def test_driver_snapshots_hold_only_the_kernel(name):
    """The drivers are modules of their own: a model's generated text is its kernel and the
    packed wrapper the drivers call, nothing more."""
    defs = re.findall(r"^def (\w+)\(", (GOLDEN / f"{name}.py.txt").read_text(), re.M)
    assert len(defs) == 2 and defs[1] == defs[0] + "_packed", defs
