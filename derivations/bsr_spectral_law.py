"""BSR: the algebraic equations behind the Bayes-optimal error, derived step by step.

Run ``python derivations/bsr_spectral_law.py``.  Every expression printed here is the
one the package compiles into kernels (``symtheory.bsr.model``); each step states the
input it uses.  Reference: bsr.md sections 4, 3.2, 7, 8, 9, 10.
"""
import sympy as sp

from symtheory.bsr import model as M
from symtheory.core import freeprob


def show(title, expr):
    print(f"\n== {title}\n{sp.pretty(expr, use_unicode=False, wrap_line=False)}")


law = M.observation_law()
print("Input 1 (theorem): Silverstein's equation for M = sum_j tau_j x_j x_j^T,")
print("   1/m = -w + ratio E[scale t/(1 + scale t m)],  m(w) = (1/d) Tr (M - w)^-1.")
print("Input 2 (model): rows of S* + sqrt(D) Z are Gaussian with covariance V V^T/r + D.")
show("Wishart V V^T/r (point mass population, ratio phi = r/L): s(u) relation",
     sp.collect(law["wishart"].poly, law["wishart"].s))
show("Gram matrix Y Y^T, Y = (S* + sqrt(D) Z)/(dL)^(1/4) (t = sqrt(beta)): quartic in m(w)",
     sp.collect(law["gram"].poly, law["gram"].s))
show("symmetrized singular values: G(z) = -z m(z^2), polynomial P(G, z)",
     sp.collect(law["P"], law["G"]))
w = sp.Symbol("w")
edges = sp.Poly(sp.expand(law["edges"]).subs(law["z"] ** 2, w), w)
print(f"\n== edge polynomial: factored discriminant of P in G, degree {edges.degree()} in w = x^2")
print(f"   leading coefficient: {sp.factor(edges.LC())}")

moments = freeprob.large_z_moments(law["P"], law["G"], law["z"], 2)
show("moments from G(z) = sum_k E[x^k]/z^(k+1):  [1, E x, E x^2]", moments)

expr, integrals = M.rie_mmse()
print("\nInput 3 (rectangular RIE): xi(x) = x - (2D/t)((t^2 - 1)/(2x) + H(x)),"
      " mmse = 1 - (1/t) int xi^2 mu.")
print("Identities: int x H mu = 1/2, int H mu/x = 0 (even), int H^2 mu = (pi^2/3) int mu^3.")
show("denoising MMSE (remaining integrals " + ", ".join(map(str, integrals)) + ")",
     sp.factor_terms(expr))

show("alpha_PR from r(d + L - r)/(dL)", M.alpha_pr_formula())
show("Bayes-optimal ridge, fixed point m = 1 - F(alpha/(Delta + m))", M.ridge_mse())

binf = M.beta_infinity()
show("beta -> infinity: leading order in t of the quartic (w = t u, m = mt/t)", binf["relation"])
show("   mmse_inf(D) = D - D^2 mt(0)", binf["mmse"])
show("   noiseless fixed point v = mmse_inf(v/alpha): 1 - q", binf["noiseless"])

lr = M.low_rank()
show("low rank: q(h) = q_u q_v on the nontrivial branch", lr["q_of_h"])
show("   weak-recovery threshold alpha_lr", lr["alpha_weak"])
show("   strong threshold lim h (1 - q(h))", lr["alpha_strong"])
show("   beta -> infinity: overlap", lr["q_beta_inf"])
