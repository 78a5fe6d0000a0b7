"""SymPy -> Numba kernel generation, on-disk caching and the mpmath twin."""
import subprocess
import sys
import textwrap

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from symtheory.core.codegen import Kernel

x, y, a = sp.symbols("x y a")
EXPRS = [sp.exp(-x**2 / 2) * sp.cos(a * y) + sp.sqrt(1 + x**2), sp.log(1 + y**2) / (2 + sp.sin(x))]


def test_source_is_a_real_module_with_cse_and_cache():
    k = Kernel("test_cg_basic", [x, y, a], EXPRS, vector_args=[x, y])
    src = k.source
    assert "@numba.njit(" in src and "cache=True" in src
    assert "math.exp" in src and "math.sqrt" in src  # fully qualified names
    assert k.module_name.startswith("stk_test_cg_basic_")
    # same expressions -> same module; a different expression -> a different hash
    assert Kernel("test_cg_basic", [x, y, a], EXPRS, vector_args=[x, y]).digest == k.digest
    assert Kernel("test_cg_basic", [x, y, a], [EXPRS[0] + 1, EXPRS[1]], vector_args=[x, y]).digest != k.digest


@given(st.floats(-3, 3), st.floats(-3, 3), st.floats(-2, 2))
def test_float_kernel_equals_mpmath_evaluation(xv, yv, av):
    k = Kernel("test_cg_basic", [x, y, a], EXPRS, vector_args=[x, y])
    got = k(xv, yv, av)
    ref = k.mp(xv, yv, av, dps=30)
    # a few ulp of float64 rounding through O(10) operations
    np.testing.assert_allclose(got, [float(r) for r in ref], rtol=1e-13, atol=1e-15)


def test_vectorized_equals_scalar():
    k = Kernel("test_cg_basic", [x, y, a], EXPRS, vector_args=[x, y])
    xs, ys = np.linspace(-2, 2, 7), np.linspace(0, 3, 7)
    vec = k.vec(xs, ys, 0.7)
    for i in range(7):
        np.testing.assert_array_equal(vec[i], k(xs[i], ys[i], 0.7))


def test_bad_declarations_and_calls():
    with pytest.raises(ValueError, match="not arguments"):
        Kernel("test_cg_bad", [x], [x + y])
    with pytest.raises(ValueError, match="identifier"):
        Kernel("bad name", [x], [x])
    k = Kernel("test_cg_call", [x], [x**2])
    with pytest.raises(TypeError, match="takes 1 arguments"):
        k(1.0, 2.0)


def test_second_process_loads_from_cache(tmp_path):
    """Cold cache: first process compiles; second process loads the machine code."""
    script = textwrap.dedent("""
        import sympy as sp
        from symtheory.core.codegen import Kernel
        x = sp.Symbol("x")
        k = Kernel("test_cg_proc", [x], [sp.sin(x) ** 2 + sp.cos(x) ** 2])
        print(k.status if k(0.3)[0] == k(0.3)[0] else "?", round(float(k(0.3)[0]), 12))
    """)
    env = {"SYMTHEORY_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs[0] == ["compiled", "1.0"]
    assert runs[1] == ["loaded", "1.0"]
    assert any(p.suffix == ".nbi" for p in (tmp_path / "kernels").rglob("*"))


def test_cache_cli_info_and_clear(tmp_path):
    env = {"SYMTHEORY_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    (tmp_path / "kernels").mkdir(parents=True)
    (tmp_path / "kernels" / "dummy.py").write_text("# x\n")
    out = subprocess.run([sys.executable, "-m", "symtheory.cli", "cache", "clear"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "removed 1 files" in out
    assert not (tmp_path / "kernels" / "dummy.py").exists()


def test_mp_precision_is_real():
    k = Kernel("test_cg_pi", [x], [sp.pi * x])
    with mpmath.workdps(50):
        v = k.mp(1, dps=50)[0]
        assert abs(v - mpmath.pi) < mpmath.mpf(10) ** -48


def test_packed_wrapper_reads_the_arguments_from_arrays():
    """``packed=(1, 2)``: x, y from a 1 x 2 array (row-major), a from ``pars`` -- the fixed
    signature through which drivers call any kernel."""
    k = Kernel("test_cg_packed", [x, y, a], EXPRS, packed=(1, 2))
    assert "def test_cg_packed_packed(x, pars, out):" in k.source
    out = np.empty(2)
    k.packed_func(np.array([[0.3, -0.7]]), np.array([1.1]), out)
    np.testing.assert_array_equal(out, k(0.3, -0.7, 1.1))
    unpacked = Kernel("test_cg_basic", [x, y, a], EXPRS)
    assert "_packed" not in unpacked.source
    with pytest.raises(AttributeError, match="without packed"):
        _ = unpacked.packed_func
    with pytest.raises(ValueError, match="packed shape"):
        Kernel("test_cg_packed", [x, y, a], EXPRS, packed=(2, 2))
