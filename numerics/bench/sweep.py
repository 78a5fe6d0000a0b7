"""Benchmark: a 200-point BSR theory sweep on 2 local Dask workers vs one process.

Measured in one run (kernels loaded everywhere before any timing):
* one process: the 200 points by a plain loop over ``bsr.bo_point`` (no store, no
  engine) -- the baseline;
* serial engine: ``sweep.run(..., serial=True)`` in this process (store included);
* Dask: ``sweep.run`` on a 2-worker ``LocalCluster`` (127.0.0.1) whose workers were
  started and warmed beforehand (their start and warm-up are reported separately), with
  automatic batches (the default) and with one point per Dask task (``batch=1``);
* reference for the machine's headroom: the two warm workers each run half of the
  points by a plain loop at the same time (one Dask task each, no engine);
* the store: its per-task overhead in both runs (``RunReport.store_seconds``: the time
  the driver spends committing results) and a micro-benchmark of 1000 commits.
The Dask values are checked equal to the serial ones (bit for bit).

The one-process loop and the Dask run are timed alternately ``--repeat`` times (default
3; best of each), so that both see the same background load.

Grid: alpha in [0.01, 1] (100 points) x beta in {2, 5}, rho = 0.5, delta = 0.1 (every
point needs a root solve).  Ends with ``speedup <number>`` (one-process time / Dask
time; target >= 1.6 on 2 cores) and prints the load average, since the machine may be
shared.

Run: ``python numerics/bench/sweep.py [--workers 2] [--repeat 3]``
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

SPEC = {"name": "bench", "run": [{
    "computation": "bsr.theory_point", "alpha": {"linspace": [0.01, 1.0, 100]},
    "beta": [2.0, 5.0], "rho": 0.5, "delta": 0.1}]}


def _store_micro(folder: Path, n: int = 1000) -> float:
    """Seconds per committed row (WAL, synchronous=NORMAL) for a synthetic result."""
    from symtheory.sweep.spec import load_spec
    from symtheory.sweep.store import Store

    spec = load_spec({"name": "micro", "run": [{"computation": "bsr.theory_point",
                                                "alpha": {"linspace": [0.0, 1.0, n]},
                                                "beta": 2.0, "rho": 0.5}]})
    result = {"status": "ok", "outputs": {"mmse": 0.5, "q": 0.5, "alpha_pr": 0.625},
              "convergence": {"converged": True, "iterations": 9, "residual": 1e-15,
                              "message": "x", "warnings": ""},
              "error": None, "wall_time": 0.005, "worker": "h:1", "version": "0",
              "source_hash": "0" * 64}
    with Store(folder / "micro.sqlite") as st:
        t0 = time.perf_counter()
        for p in spec.points():
            st.add(p, result)
        return (time.perf_counter() - t0) / n


def _plain_share(params, part, parts):
    """Half of the points by a plain loop, in a warm worker (for the ideal 2-process time)."""
    from symtheory import bsr

    t0 = time.perf_counter()
    for p in params[part::parts]:
        bsr.bo_point(p["alpha"], p["beta"], p["rho"], p["delta"])
    return time.perf_counter() - t0


def main() -> float:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="alternating timings of each")
    args = ap.parse_args()

    from distributed import Client

    from symtheory import bsr
    from symtheory.sweep import runner
    from symtheory.sweep.spec import load_spec

    spec = load_spec(SPEC)
    points = spec.points()
    assert len(points) == 200
    bsr.bo_point(0.5, 2.0, 0.5, 0.1)  # load the kernels in this process
    load0 = os.getloadavg()

    def plain_loop():
        t0 = time.perf_counter()
        vals = [bsr.bo_point(**{k: p.params[k] for k in ("alpha", "beta", "rho", "delta")}).mmse
                for p in points]
        return time.perf_counter() - t0, vals

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rep_serial = runner.run(spec, store=tmp / "serial.sqlite", serial=True, progress=False)

        t0 = time.perf_counter()
        cluster = runner.local_cluster(args.workers)
        client = Client(cluster)
        t_start = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = [client.submit(runner.execute_point, "bsr.theory_point",
                              {"alpha": 0.5, "beta": b, "rho": 0.5, "delta": 0.1, "precision": None},
                              workers=[w], pure=False)
                for w in client.nthreads() for b in (2.0, 5.0)]
        assert all(f.result()["status"] == "ok" for f in warm)
        t_warm = time.perf_counter() - t0
        # alternate the one-process loop and the Dask run (the machine may be shared:
        # alternating exposes both to the same load; the best of each is reported)
        t_plain, t_dask, t_ideal, reps = [], [], [], []
        addrs = sorted(client.nthreads())
        try:
            for i in range(args.repeat):
                t, plain = plain_loop()
                t_plain.append(t)
                t0 = time.perf_counter()
                futs = [client.submit(_plain_share, [p.params for p in points], k, len(addrs),
                                      workers=[a], pure=False) for k, a in enumerate(addrs)]
                client.gather(futs)
                t_ideal.append(time.perf_counter() - t0)
                reps.append(runner.run(spec, store=tmp / f"dask{i}.sqlite", client=client,
                                       progress=False))
                t_dask.append(reps[-1].seconds)
            rep_one = runner.run(spec, store=tmp / "dask_batch1.sqlite", client=client,
                                 progress=False, batch=1)
        finally:
            client.close()
            cluster.close()
        rep_dask = reps[int(np.argmin(t_dask))]

        from symtheory.sweep import load_results

        serial_vals = load_results(spec, store=tmp / "serial.sqlite").tables["bsr.theory_point"]
        identical = all(
            load_results(spec, store=tmp / f"dask{i}.sqlite").tables["bsr.theory_point"]
            .columns["mmse"] == serial_vals.columns["mmse"] == plain for i in range(args.repeat))
        micro = _store_micro(tmp)
    load1 = os.getloadavg()

    assert rep_serial.complete and rep_one.complete and all(r.complete for r in reps)
    best_plain, best_dask = min(t_plain), min(t_dask)
    speedup = best_plain / best_dask
    print(f"grid: 200 BSR theory points (alpha 0.01..1 x beta {{2, 5}}, rho 0.5, delta 0.1)")
    print(f"one process, plain loop over bsr.bo_point: {best_plain:.2f} s "
          f"({200 / best_plain:.1f} points/s, {1e3 * best_plain / 200:.1f} ms/point; runs "
          f"{', '.join(f'{t:.2f}' for t in t_plain)})")
    print(f"one process, sweep engine (serial, store): {rep_serial.seconds:.2f} s "
          f"({200 / rep_serial.seconds:.1f} points/s)")
    print(f"Dask LocalCluster, {args.workers} workers: {best_dask:.2f} s "
          f"({200 / best_dask:.1f} points/s, automatic batches; runs "
          f"{', '.join(f'{t:.2f}' for t in t_dask)}); cluster start "
          f"{t_start:.1f} s and worker warm-up {t_warm:.1f} s not included")
    print(f"  the same with one point per Dask task (--batch 1): {rep_one.seconds:.2f} s "
          f"({200 / rep_one.seconds:.1f} points/s)")
    print(f"  reference: each worker computes half the points by a plain loop, concurrently: "
          f"{min(t_ideal):.2f} s (runs {', '.join(f'{t:.2f}' for t in t_ideal)}): the machine "
          f"allows at most {best_plain / min(t_ideal):.2f}x now")
    print(f"store overhead per task: {1e3 * rep_serial.store_seconds / 200:.2f} ms (serial run), "
          f"{1e3 * rep_dask.store_seconds / 200:.2f} ms (Dask run); micro-benchmark "
          f"{1e3 * micro:.2f} ms per committed row (WAL, synchronous=NORMAL)")
    print(f"values: Dask == serial == plain loop, bit for bit: {identical}")
    print(f"load average before/after: {' '.join(f'{x:.1f}' for x in load0)} / "
          f"{' '.join(f'{x:.1f}' for x in load1)} on {os.cpu_count()} cores")
    print(f"speedup {speedup:.2f}")
    return speedup


if __name__ == "__main__":
    main()
