"""Two-layer tied attention as a sequence multi-index model: what SymPy derives.

Run: ``python derivations/smi_attention_channel.py``.  Each step prints the object the
package builds (symtheory.smi.attention / symtheory.glm.factors.multi_index) and checks it against the
closed forms quoted in smi.md 2.1, 10.1 and 10.3.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from symtheory.smi import deep_attention
from symtheory.smi.attention import BETA, SKIP


def show(title, expr):
    print(f"\n== {title}")
    sp.pprint(expr, use_unicode=False, wrap_line=False)


def main():
    m = deep_attention(depth=2, seq_len=2, rank=1, skip=1.0)
    z1 = sp.Matrix(m.indices[0, :]).T      # layer-1 index of both tokens
    print(m.description)
    print(f"P = {m.P} index rows, M = {m.M} tokens; row groups (layers) {m.row_groups}")

    # 1. the link from the recursion T_{l+1} = (c I + softmax(beta E_l E_l^T)) T_l
    show("y = g(Z), entry (0, 1)  [softmax_row written as 1/sum_k exp(K_ik - K_ij)]",
         m.link[0, 1])

    # 2. symmetry detection: flipping one layer's indices leaves g unchanged
    print("\n== even symmetry per layer (g(-h_l) = g):", m.even_groups)

    # 3. the reduction: y = head(E), E = T(h_1) h_2^T
    red = m.reduction
    T = red.mixing.subs(m.params)
    detT = T.det()
    S11 = 1 / (1 + sp.exp(z1[0] * z1[1] - z1[0] ** 2))
    S22 = 1 / (1 + sp.exp(z1[0] * z1[1] - z1[1] ** 2))
    c = 1
    spec = (c + 1) * (c - 1 + S11 + S22)
    rng = np.random.default_rng(0)
    ok = all(abs(float((detT - spec).subs(dict(zip(list(z1), rng.standard_normal(2)))))) < 1e-12
             for _ in range(5))
    show("det T(h_1) (c = 1)", detT)
    print(f"   equals (c+1)(c-1+S11+S22) of smi.md 2.1 (5 random points): {ok}")

    # 4. inversion branches from the log-ratio features (SymPy solve)
    branches = m.derive_branches()
    for k, Ek in enumerate(branches):
        show(f"branch {k}: E(y)", sp.Matrix(Ek))
    Y = m.output_symbols
    a = sp.log(Y[0, 0] / Y[0, 1])
    b = sp.log(Y[1, 1] / Y[1, 0])
    closed = sp.Matrix([a, -b]) / sp.sqrt(a + b)
    # compare numerically at a valid y (y12 + y21 < 1) with beta = 1
    vals = {Y[0, 0]: 0.7, Y[0, 1]: 0.3, Y[1, 0]: 0.4, Y[1, 1]: 0.6, BETA: 1.0, SKIP: 1.0}
    nums = [np.array([float(sp.N(e.subs(vals))) for e in Ek]) for Ek in branches]
    ref = np.array([float(sp.N(e.subs(vals))) for e in closed])
    print("\n== branches = +-(a, -b)/sqrt(a+b), a = log(y11/y12), b = log(y22/y21) (smi.md 10.1):",
          all(np.allclose(abs(n), abs(ref)) for n in nums) and np.allclose(nums[0], -nums[1]))

    # 5. output Jacobian det d(y12, y21)/d(e1, e2)
    jac = m.derive_output_jacobian()
    show("det d(y12, y21)/d(e1, e2)", jac)
    e1, e2 = list(red.E)
    y12 = red.head[0, 1]
    y21 = red.head[1, 0]
    spec_jac = 2 * BETA**2 * (e1 - e2) ** 2 * y12 * (1 - y12) * y21 * (1 - y21)
    pt = {e1: 0.37, e2: -1.1, BETA: 1.3}
    print("   |det| = 2 beta^2 (e1-e2)^2 y12(1-y12) y21(1-y21) (smi.md 10.1 at beta = 1):",
          abs(abs(float(jac.subs(pt))) - float(spec_jac.subs(pt))) < 1e-12)

    # 6. linear activation (smi.md 10.3): det T = c (c + |z1|^2)
    lin = deep_attention(2, 2, 1, 1.0, activation="linear")
    dT = sp.factor(lin.reduction.mixing.det())
    show("linear activation: det T(h_1)", dT)
    w1 = list(lin.indices[0, :])
    print("   equals c (c + beta |z1|^2):",
          sp.simplify(dT - SKIP * (SKIP + BETA * (w1[0] ** 2 + w1[1] ** 2))) == 0)

    # 7. prior: overlap map, its inverse and psi_P, derived from the log-partition
    from symtheory.glm import GaussianPrior

    gp = GaussianPrior()
    show("prior overlap map F(qhat) and dF/dqhat", sp.Matrix(gp._kernel.outputs))
    show("inverse map", sp.Matrix(gp._inverse.outputs))
    show("psi_P(qhat)", gp._psi.outputs[0])


if __name__ == "__main__":
    main()
