"""Reading the BSR reference CSVs and classifying their known-inaccurate rows.

bsr.md 16 documents rows where the *reference* is numerically off; the list below is
that documentation, plus rows found here whose values the mpmath path confirms to 12
digits to differ from the reference (see ``DISPUTED``).
"""
import csv
import math

from conftest import REFERENCE

BSR = REFERENCE / "bsr"
THEORY_GLOBS = ("fig1/*.csv", "fig1_noisy/*.csv", "fig2/*.csv", "fig2_noisy/*.csv")

# (file, rho, beta, delta, alpha or alpha_LR) -> value of 1-q confirmed by the mpmath
# path at 12 digits (and 24-digit agreement); the reference differs by 1e-5..6e-5.
DISPUTED = {
    ("fig1/LR_delta0.0_beta1.0_rhos0.0-0.05.csv", 0.05, 1.0, 0.0, 0.0178): 0.979736786181,
    ("fig1/LR_delta0.0_beta1.0_rhos0.0-0.05.csv", 0.05, 1.0, 0.0, 0.033): 0.948073779203,
    ("fig1/delta0.0_beta1.0_rho0.05.csv", 0.05, 1.0, 0.0, 0.033): 0.948073779203,
    ("fig2/delta0.0_rho0.05_betas1-2-5-inf.csv", 0.05, 1.0, 0.0, 0.033): 0.948073779203,
    ("fig1_noisy/delta0.1_beta1.0_rhos0.1-2.0.csv", 2.0, 1.0, 0.1, 0.09): 0.918712518156,
    ("fig2_noisy/delta0.1_rho0.05_betas1-2-5-inf.csv", 0.05, 2.0, 0.1, 0.112): 0.163097059918,
    ("fig2/delta0.0_rho0.05_betas1-2-5-inf.csv", 0.05, 5.0, 0.0, 0.04): 0.583619773589,
    ("fig1/LR_delta0.0_beta1.0_rhos0.0-0.05.csv", 0.05, 1.0, 0.0, 0.0353): 0.940881084543,
    ("fig1_noisy/LR_delta0.1_beta1.0_rhos0.0-0.05.csv", 0.05, 1.0, 0.1, 0.0196): 0.979758703918,
}


def rows():
    """Every theory row: dict with rel (file), rho, beta, delta, alpha, alpha_lr, mmse, ridge."""
    for pattern in THEORY_GLOBS:
        for path in sorted(BSR.glob(pattern)):
            rel = f"{path.parent.name}/{path.name}"
            with open(path) as fh:
                for r in csv.DictReader(fh):
                    yield {"rel": rel, "rho": float(r["rho"]), "beta": float(r["beta"]),
                           "delta": float(r["delta"]), "alpha": float(r["alpha"]),
                           "alpha_lr": float(r["alpha_LR"]) if r.get("alpha_LR") else float("nan"),
                           "mmse": float(r["mmse"]), "ridge": float(r["mse_ridge_opt"])}


def known_bad(row, alpha_pr) -> str:
    """Reason the reference value of this row is inaccurate (bsr.md 16), or ''."""
    if row["rho"] == 0:
        if row["delta"] == 0 and row["alpha_lr"] >= 0.98:
            return "low-rank noiseless row near alpha_LR = 1 (reference unconverged)"
        return ""
    a = row["alpha"]
    if 0 < a <= 0.005 + 1e-12:
        return "first grid points alpha <= 0.005 (reference off by up to 9e-4)"
    if row["delta"] == 0 and abs(a - alpha_pr) < 1e-9:
        return "alpha exactly alpha_PR (reference unconverged)"
    key = (row["rel"], row["rho"], row["beta"], row["delta"], round(a, 6))
    if key in {(k[0], k[1], k[2], k[3], round(k[4], 6)) for k in DISPUTED}:
        return "disputed: mpmath-confirmed value differs from the reference"
    return ""


def disputed_value(row):
    for k, v in DISPUTED.items():
        if (k[0], k[1], k[2], k[3]) == (row["rel"], row["rho"], row["beta"], row["delta"]) and \
                math.isclose(k[4], row["alpha"], abs_tol=1e-9):
            return v
    return None
