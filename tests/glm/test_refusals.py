"""Bad model declarations get a named refusal, quickly (issue 32)."""
import time

import pytest
import sympy as sp

from symtheory.core.validate import ParameterError
from symtheory.glm import MultiIndexModel
from symtheory.glm.factors.multi_index import DeterministicReduction

z1, z2 = sp.symbols("z1 z2", real=True)


def test_link_without_an_index_is_refused_at_declaration_naming_it():
    # y = 1 used to give alpha_c = inf "through its sign" with exit 0
    with pytest.raises(ParameterError, match=r"does not depend on the declared index z1\b"):
        MultiIndexModel("const", sp.Matrix([[z1]]), sp.Matrix([[1]]))
    with pytest.raises(ParameterError, match=r"index z2 "):
        MultiIndexModel("one_of_two", sp.Matrix([[z1], [z2]]), sp.Matrix([[z1 ** 2]]))
    # a parameter that removes an index counts (checked with the parameters substituted)
    c = sp.Symbol("c", real=True)
    with pytest.raises(ParameterError, match="index z2"):
        MultiIndexModel("skip0", sp.Matrix([[z1], [z2]]), sp.Matrix([[z1 + c * z2]]),
                        params={c: 0.0})
    MultiIndexModel("skip1", sp.Matrix([[z1], [z2]]), sp.Matrix([[z1 + c * z2]]),
                    params={c: 1.0})


@pytest.mark.parametrize("P, link", [(1, sp.Max(z1, 0)), (2, sp.Max(z1, 0) * z2)])
def test_noiseless_link_constant_on_an_open_set_is_refused_with_the_reason(P, link):
    idx = sp.Matrix([[z1]]) if P == 1 else sp.Matrix([[z1], [z2]])
    model = MultiIndexModel(f"flat{P}", idx, sp.Matrix([[link]]))
    t0 = time.perf_counter()
    with pytest.raises(ParameterError, match="constant on an open set") as exc:
        model.channel()
    msg = str(exc.value)
    assert "level set" in msg and "discrete" in msg and "declare output noise" in msg
    assert time.perf_counter() - t0 < 60       # a refusal, not a failed integration


def test_flat_fraction_is_zero_for_links_with_a_density():
    from symtheory.glm.integrate.level_set import flat_fraction

    assert flat_fraction(z1 ** 2 - z2 ** 2, [z1, z2]) == 0
    assert flat_fraction(z1 * z2, [z1, z2]) == 0
    assert 0.4 < flat_fraction(sp.Max(z1, 0) * z2, [z1, z2]) < 0.6     # half the plane


def test_reduction_whose_entries_do_not_determine_E_is_refused_at_declaration():
    # y_01 = y_10 = e0 e1 cannot give e0 and e1: SymPy found no branch only when the
    # channel's kernels were generated
    z = sp.Matrix([sp.symbols("z0_0 z0_1", real=True)])
    E = sp.Matrix(sp.symbols("e0 e1", real=True))
    red = DeterministicReduction(solved_rows=(0,), mixing=sp.eye(2), E=E, head=E * E.T,
                                 observed=((0, 1), (1, 0)))
    with pytest.raises(ParameterError, match=r"observed entries \[\(0, 1\), \(1, 0\)\] do "
                                             r"not determine E .*rank 1"):
        MultiIndexModel("outer_bad", z, z.T * z, reduction=red)
    ok = DeterministicReduction(solved_rows=(0,), mixing=sp.eye(2), E=E, head=E * E.T,
                                observed=((0, 0), (1, 1)))
    MultiIndexModel("outer_ok", z, z.T * z, reduction=ok)


def test_model_too_wide_for_the_observation_grid_samples_y_and_says_so():
    from symtheory.glm.se.state_evolution import StateEvolution
    from symtheory.smi.closed_form import linear_tokens

    se = StateEvolution(linear_tokens(2), 1.0, samples=64, noise_variance=0.1)
    assert se.observation_rule is None
    assert se.observation_note.startswith("y sampled: 2 outputs under noise")
    with pytest.raises(ParameterError, match="observation='integrate' is not available here: "
                                             "2 outputs under noise"):
        StateEvolution(linear_tokens(2), 1.0, samples=64, noise_variance=0.1,
                       observation="integrate")
