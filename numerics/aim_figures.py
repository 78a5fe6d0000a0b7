"""AIM figures in the pattern of the AIM paper (Boncoraglio et al., arXiv:2506.01582):

* aim.mse_vs_alpha -- softmax, rho = 0.5: the Bayes-optimal MSE on S vs alpha for
  T = 2..6 with GAMP-RIE and (single, averaged) GD points;
* aim.collapse -- the same curves against alpha (T^2 + T - 2) (aim.md 3.4);
* aim.hardmax -- hardmax T = 2: the corrected SE vs the authors' published
  (joint-density) SE, with GAMP-RIE points (aim.md 3.5).

Each figure is the registered ``symtheory reproduce`` figure (symtheory/aim/tasks.py),
run serially into <out>/<figure>/: one CSV per table, the PNG, params.json and the
resumable sweep store.  --quick: T = 2, 3, small d, few points (a few minutes).

    python numerics/aim_figures.py [--quick] [--figures aim.hardmax ...]
"""
import sys

from _common import output_dir, parser, write_params

FIGURES = ("aim.mse_vs_alpha", "aim.collapse", "aim.hardmax")


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--figures", nargs="+", choices=FIGURES, default=list(FIGURES))
    args = p.parse_args(argv)
    from symtheory.sweep.reproduce import reproduce_figure

    out = output_dir(__file__, args)
    written = {}
    for name in args.figures:
        report, paths = reproduce_figure(name, quick=args.quick, out=out / name, serial=True,
                                         progress=False)
        written[name] = [str(p) for p in paths]
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)
        if report.failed:
            print(f"{name}: {report.failed} failed points (see {name}.sqlite)", file=sys.stderr)
    write_params(out, dict(figures=args.figures, quick=args.quick, written=written))


if __name__ == "__main__":
    main()
