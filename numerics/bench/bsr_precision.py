"""Benchmark: BSR's Bayes-optimal point to 30 and 40 digits (``--precision``), the
mpmath path against the earlier one, measured in the same run.

Ours: :func:`symtheory.bsr.bo_point` with ``precision=`` -- ``mmse_RIE`` by the
edge-adapted rules of :func:`symtheory.core.quadrature.integrate_edges_mp` (periodic
trapezoid in ``theta`` of ``x = m - h cos(theta)`` between two square-root edges), the
law's root at each node by Newton in gmpy2 from the float64 root, the edges from
``numpy.roots`` refined by Newton, and the secant of
:func:`symtheory.core.roots_mp.refine_root_mp` carrying its slope into the 2x-digit
confirmation.
Reference: the same call with ``_reference_mp=True`` -- ``mpmath.quad`` (tanh-sinh) on
every piece, Newton in mpmath's own ``mpc``, ``mpmath.polyroots`` for the edges,
``mpmath.findroot``'s secant restarted at each precision.

Both are warmed up first (kernels loaded, mpmath twins generated, node tables at each
precision); then reference and ours alternate (``--pairs`` pairs per point) and every
pair gives a ratio; their median is the point's speedup.  The two values must agree on
every confirmed digit (the printed strings are compared).  Also timed: the CLI command
of the acceptance point in a fresh process (import, kernel loading and the float64
solve included), against the targets < 5 s (30 digits) and < 10 s (40 digits) on two
idle cores.

Ends with ``speedup <number>``: the median paired ratio at the acceptance point, 30 digits.

Run: ``python numerics/bench/bsr_precision.py [--pairs N] [--no-cli]``
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

from symtheory import bsr

#: (alpha, beta, rho, delta, digits): the acceptance point at 30 and 40 digits, and a
#: square-matrix point (beta = 1: a bulk symmetric about 0, its half by Gauss)
POINTS = [(0.3, 2.0, 0.5, 0.1, 30), (0.3, 2.0, 0.5, 0.1, 40), (0.2, 1.0, 0.2, 0.1, 30)]
TARGETS = {30: 5.0, 40: 10.0}


def timed(reference, alpha, beta, rho, delta, digits):
    t0 = time.perf_counter()
    p = bsr.bo_point(alpha, beta, rho, delta, precision=digits, _reference_mp=reference)
    return time.perf_counter() - t0, p


def cli_seconds(digits):
    """Wall and CPU time of the CLI command in a fresh process (CPU: what two idle cores
    would take as wall time; on a loaded machine the wall time is not it)."""
    code = ("from symtheory.cli import main; import sys; sys.exit(main(['bsr', 'theory', "
            "'--alpha', '0.3', '--beta', '2', '--rho', '0.5', '--delta', '0.1', "
            f"'--precision', '{digits}', '--quiet']))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=2, help="reference/ours pairs per point")
    ap.add_argument("--no-cli", action="store_true", help="skip the fresh-process CLI timing")
    args = ap.parse_args(argv)

    for point in {p[:4] + (10,) for p in POINTS}:   # warm-up: kernels, mpmath twins
        timed(False, *point)
        timed(True, *point)
    for point in POINTS:                            # node tables at these precisions
        timed(False, *point)
    headline = None
    for alpha, beta, rho, delta, digits in POINTS:
        ours, ref, ratios = [], [], []
        for _ in range(args.pairs):
            t_ref, p_ref = timed(True, alpha, beta, rho, delta, digits)
            t_new, p_new = timed(False, alpha, beta, rho, delta, digits)
            ours.append(t_new)
            ref.append(t_ref)
            ratios.append(t_ref / t_new)
        same = p_new.mmse_str == p_ref.mmse_str
        ok = same and p_new.digits_confirmed >= digits
        print(f"alpha={alpha} beta={beta} rho={rho} delta={delta}, {digits} digits: "
              f"ours {statistics.median(ours):.2f} s (runs {', '.join(f'{t:.2f}' for t in ours)}, "
              f"{p_new.digits_confirmed} digits confirmed at {2 * digits}); "
              f"reference {statistics.median(ref):.2f} s (runs "
              f"{', '.join(f'{t:.2f}' for t in ref)}, {p_ref.digits_confirmed} confirmed); "
              f"paired ratios {', '.join(f'{r:.1f}' for r in ratios)}")
        print(f"  mmse {p_new.mmse_str} ({'identical to the reference' if same else 'DIFFERS: '}"
              f"{'' if same else p_ref.mmse_str}){'' if ok else '  <-- CHECK FAILED'}")
        if not ok:
            raise SystemExit(f"{digits}-digit values disagree or are not confirmed")
        if (alpha, beta, digits) == (0.3, 2.0, 30):
            headline = statistics.median(ratios)
    if not args.no_cli:
        for digits, target in TARGETS.items():
            wall, cpu = cli_seconds(digits)
            print(f"CLI bsr theory --alpha 0.3 --beta 2 --rho 0.5 --delta 0.1 --precision "
                  f"{digits}, fresh process: {wall:.2f} s wall, {cpu:.2f} s CPU (target < "
                  f"{target:g} s on 2 idle cores: {'met' if cpu < target else 'NOT met'} by "
                  f"the CPU time)")
    print(f"speedup {headline:.1f}")
    return headline


if __name__ == "__main__":
    main()
