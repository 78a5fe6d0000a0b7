"""``symtheory aim deep``: state evolution of deep AIM (aim.md 3.7), optionally next to
GAMP-RIE runs.  Building the parser imports nothing numeric."""
from __future__ import annotations

from ..core.cli_common import add_output, add_params, alphas_from_args, describe, emit
from ..core.validate import ParameterError
from ..glm.se.sampling import design_record
from . import params as P

DEEP_DESCRIPTION = describe(
    "Deep attention-indexed model (the deep extension of Boncoraglio et al., "
    "arXiv:2506.01582; aim.md 1.3, 3.7; UNVERIFIED against any paper -- no paper table or "
    "code exists for it; checked here against GAMP simulations): layers "
    "l = 1..L with independent S_l = W_l W_l^T/sqrt(r d), indices h^(l)_ab = (x_a^T S_l "
    "x_b - delta_ab Tr S_l)/sqrt(d), M_0 = I, M_l = (c I + softmax(M_{l-1} h^(l) "
    "M_{l-1}^T)) M_{l-1}, y = softmax(M_{L-1} h^(L) M_{L-1}^T) + sqrt(noise) xi (row "
    "softmax at --inv-temp, Gaussian noise of variance --noise on each of the T^2 outputs: "
    "unlike the one-layer 'aim theory --delta', the noise is on the outputs, since the "
    "noiseless deep observation is not invertible).  Normalization: alpha = n/d^2, rho = "
    "r/d (every layer), T = --seq-len.  mmse_l = (1/d)||S_hat_l - S_l||_F^2, 1 at alpha = "
    "0.  The SE is the multi-index state evolution with the layers as rows and the "
    "T(T+1)/2 u-space indices as tokens, averaged over --samples frozen draws (design: "
    "--sampling), the "
    "channel integrated by a Laplace-centred randomized quasi-Monte-Carlo rule.",
    "Columns (one row per alpha): alpha, mmse_l and mmse_l_stderr (standard error of "
    "the fixed point from the frozen samples) per layer l = 1..L, converged, iterations, residual (report "
    "of the fixed-point solve), channel_error = largest estimated error of the channel's "
    "posterior moments at the fixed point (95% half-width over RQMC scramblings, in prior "
    "standard deviations).  With --gamp-d D: gamp_mmse_l = mean over --gamp-seeds of GAMP-"
    "RIE's final error per layer at size d = D (n = round(alpha D^2)), gamp_mmse_l_spread "
    "= their standard deviation, gamp_converged = runs that met --tol.",
    example="""\
        example (depth 2, noise 0.1, three alphas, GAMP at d = 40 with two seeds; ~45 min):
          symtheory aim deep --alpha 0.3 0.6 1.0 --rho 0.5 --noise 0.1 --samples 400 \\
              --gamp-d 40 --gamp-seeds 0 1 --gamp-iter 25 --plot""")


def register_deep(aim_subparsers) -> None:
    p = aim_subparsers.add_parser("deep", help="deep AIM (depth >= 2): state evolution per "
                                  "layer, optionally against GAMP", description=DEEP_DESCRIPTION)
    add_params(p, dict({"alpha": P.ALPHA_SIM}, **P.DEEP), grid=("alpha",),
               many=("alpha", "gamp_seeds"), defaults={"gamp_seeds": [0]})
    add_output(p, plot="per-layer mmse vs alpha (SE with error bars, GAMP points)")
    p.set_defaults(func=cmd_deep)


def cmd_deep(args) -> int:
    if args.seq_len not in P.DEEP_SEQ_LENS:
        raise ParameterError(f"--seq-len must be 2 or 3 for aim deep, got {args.seq_len} (its SE "
                             "integrates depth x T(T+1)/2 indices per sample; aim.md 3.7)")
    import numpy as np

    from ..core.progress import progress_bar
    from ..core.table import Table
    from .data import generate_deep
    from .deep import deep_se_point
    from .gamp import run_deep_gamp

    alphas = alphas_from_args(args)
    L = args.depth
    cols = (["alpha"] + [f"mmse_{l + 1}" for l in range(L)]
            + [f"mmse_{l + 1}_stderr" for l in range(L)]
            + ["converged", "iterations", "residual", "channel_error"])
    if args.gamp_d:
        cols += ([f"gamp_mmse_{l + 1}" for l in range(L)]
                 + [f"gamp_mmse_{l + 1}_spread" for l in range(L)] + ["gamp_converged"])
    rows = {c: [] for c in cols}
    for a in progress_bar(alphas, desc="deep AIM", enabled=not args.quiet and len(alphas) > 1):
        res, mmse = deep_se_point(a, rho=args.rho, depth=L, seq_len=args.seq_len,
                                  skip=args.skip, inv_temp=args.inv_temp, noise=args.noise,
                                  samples=args.samples, seed=args.seed, damping=args.damping,
                                  sampling=args.sampling,
                                  max_iter=args.max_iter, progress=not args.quiet)
        vals = ([a] + [float(v) for v in mmse] + [float(v) for v in np.diag(res.Q_stderr)]
                + [bool(res.converged), int(res.iterations), float(res.residual),
                   float(res.channel_error)])
        if args.gamp_d:
            runs = [run_deep_gamp(generate_deep(args.gamp_d, a, rho=args.rho, depth=L,
                                                seq_len=args.seq_len, skip=args.skip,
                                                inv_temp=args.inv_temp, noise=args.noise,
                                                seed=s),
                                  damping=args.gamp_damping, max_iter=args.gamp_iter,
                                  tol=args.tol)
                    for s in args.gamp_seeds]
            m = np.array([r.layer_mse for r in runs])
            vals += ([float(v) for v in m.mean(axis=0)] + [float(v) for v in m.std(axis=0)]
                     + [sum(bool(r.converged) for r in runs)])
        for c, v in zip(cols, vals):
            rows[c].append(v)
    meta = {"model": "deep aim", "depth": L, "seq_len": args.seq_len, "rho": args.rho,
            "skip": args.skip, "inv_temp": args.inv_temp, "noise": args.noise,
            "samples": args.samples, **design_record(args.sampling), "seed": args.seed,
            "gamp_d": args.gamp_d,
            "gamp_seeds": args.gamp_seeds if args.gamp_d else None,
            "gamp_damping": args.gamp_damping if args.gamp_d else None,
            "status": "unverified against any paper (aim.md 3.7)"}
    stem = f"aim_deep_L{L}_T{args.seq_len}_rho{args.rho:g}_noise{args.noise:g}"
    return emit(Table(rows, meta), args, stem, _plot)


def _plot(table, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = table["alpha"]
    L = table.meta["depth"]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for l in range(1, L + 1):
        ax.errorbar(x, table[f"mmse_{l}"], yerr=table[f"mmse_{l}_stderr"], color=f"C{l - 1}",
                    marker="o", ms=3, lw=1.5, capsize=2, label=f"SE, layer {l}")
        if f"gamp_mmse_{l}" in table.columns:
            ax.errorbar(x, table[f"gamp_mmse_{l}"], yerr=table[f"gamp_mmse_{l}_spread"],
                        color=f"C{l - 1}", marker="s", ls="none", capsize=2,
                        label=f"GAMP d={table.meta['gamp_d']}, layer {l}")
    m = table.meta
    ax.set_title(f"deep AIM (unverified): L={L}, T={m['seq_len']}, rho={m['rho']}, "
                 f"c={m['skip']}, noise={m['noise']}")
    ax.set_xlabel(r"$\alpha = n/d^2$")
    ax.set_ylabel(r"$(1/d)\|\hat S_l - S_l\|_F^2$")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
