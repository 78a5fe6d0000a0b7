"""Running a sweep: serially, on a local Dask cluster, or on a running one.

:func:`run` validates the spec (nothing runs if it is bad), skips the points the store
already holds for the same code, and executes the rest; each result is committed to the
store as it arrives, so a driver or worker killed at any moment loses at most the tasks
in flight, and running the same spec again completes the grid.

Execution (Dask distributed): by default a ``LocalCluster`` sized to the machine (one
single-threaded worker process per core) bound to 127.0.0.1 with no dashboard; with
``scheduler=`` (``--scheduler tcp://host:8786``) a running cluster, e.g. one started by
dask-jobqueue on a batch system (docs/sweep.md).  Tasks lost with a worker are
rescheduled by the Dask scheduler (``distributed.scheduler.allowed-failures``); a task
that raises outside the computation (e.g. a worker that cannot import the package) is
retried by Dask (``retries=``); a computation that raises is *recorded* with its error
and the sweep goes on.  Workers must run the driver's code: their source hash is checked
before anything is submitted, and again on every result.

Kernel cache: workers use the cache of :mod:`symtheory.core.cache`
(``SYMTHEORY_CACHE_DIR`` or the user cache dir); workers sharing a file system share it.
The first task of each computation in a worker process runs under an exclusive file lock
in the cache folder, so kernels are compiled once per cache (once per machine without a
shared file system) while the other workers wait and then load them.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field

from ..core.validate import ParameterError
from .spec import load_spec
from .store import Store

#: Dask retries of a task that raised outside the computation (infrastructure failures)
DEFAULT_RETRIES = 2


class SweepWarning(UserWarning):
    """A task was lost (not stored): a re-run of the same spec computes it."""


# ---------------------------------------------------------------------- worker side
def identity() -> dict:
    """The code and process a result comes from."""
    import symtheory
    from ..core.derive import package_digest

    return {"version": symtheory.__version__, "source_hash": package_digest(),
            "worker": f"{socket.gethostname()}:{os.getpid()}"}


_WARM: set = set()


@contextlib.contextmanager
def _first_run_lock(computation: str):
    """Hold an exclusive lock in the kernel cache folder during the first run of
    ``computation`` in this process (see the module docstring); free afterwards."""
    if computation in _WARM:
        yield
        return
    try:
        import fcntl

        from ..core.cache import cache_dir

        folder = cache_dir() / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f"first-run-{computation}.lock", "a")
    except (ImportError, OSError):  # no fcntl (Windows) or a read-only cache: no lock
        handle = None
    try:
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
        _WARM.add(computation)
    finally:
        if handle is not None:
            handle.close()  # closing releases the lock (also when the process dies)


def execute_point(computation: str, params: dict) -> dict:
    """Run one task and return its record (see :meth:`Store.add`).  An exception raised
    by the computation is the point's result (status ``error``); anything failing before
    it (looking up the computation) propagates, for Dask to retry."""
    from .registry import get

    t0 = time.perf_counter()
    comp = get(computation)
    record = identity()
    with _first_run_lock(computation):
        try:
            outputs, report = comp.execute(params)
            record.update(status="ok", outputs=outputs, convergence=report, error=None)
        except Exception as exc:  # noqa: BLE001 - recorded with its error, the sweep goes on
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
            record.update(status="error", outputs=None, convergence=None,
                          error=f"{type(exc).__name__}: {exc}\n{''.join(tb[1:])}".strip())
    record["wall_time"] = time.perf_counter() - t0
    return record


# ---------------------------------------------------------------------- driver side
@dataclass
class RunReport:
    """What one :func:`run` did.  ``store_seconds``: time spent committing results."""

    name: str
    store: str
    executor: str
    total: int
    stored_before: int
    submitted: int = 0
    computed: int = 0
    failed: int = 0
    lost: int = 0
    seconds: float = 0.0
    store_seconds: float = 0.0
    errors: list = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every point of the grid is stored without error."""
        return self.stored_before + self.computed - self.failed == self.total and self.lost == 0

    def summary(self) -> str:
        rate = self.computed / self.seconds if self.seconds > 0 else float("nan")
        text = (f"{self.name}: {self.total} tasks, {self.stored_before} already stored, "
                f"{self.computed} computed ({self.failed} failed, {self.lost} lost) in "
                f"{self.seconds:.1f} s ({rate:.3g} tasks/s, {self.executor}); store {self.store}")
        if self.failed:
            text += "\nfailed tasks are stored with their error; `sweep run --retry-failed` retries them"
        if self.lost:
            text += "\nlost tasks were not stored; run the same spec again to complete the grid"
        return text

    def as_dict(self) -> dict:
        return asdict(self)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def local_cluster(workers: int | None = None):
    """A ``LocalCluster`` on the loopback interface: ``workers`` single-threaded worker
    processes (default: one per core), no dashboard (nothing listens beyond 127.0.0.1)."""
    import logging

    from distributed import LocalCluster

    if not logging.getLogger().isEnabledFor(logging.INFO):  # quiet unless `symtheory -v`
        logging.getLogger("distributed").setLevel(logging.WARNING)
    n = _cores() if workers is None else workers
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                        dashboard_address=None, silence_logs=logging.ERROR)


def _connect(scheduler, workers):
    """``(client, cluster or None)``."""
    try:
        from distributed import Client
    except ImportError:
        raise ParameterError("scheduler: Dask distributed is not installed; install the "
                             "'sweep' extra (pip install 'symtheory[sweep]') or run with "
                             "--serial") from None
    if scheduler is not None:
        try:
            return Client(scheduler, timeout="30s"), None
        except (OSError, TimeoutError, ValueError) as exc:
            raise ParameterError(f"scheduler: cannot connect to {scheduler!r}: {exc}") from None
    cluster = local_cluster(workers)
    return Client(cluster), cluster


def _check_workers(client, source_hash: str) -> None:
    idents = client.run(identity)
    if not idents:
        raise ParameterError("scheduler: the cluster has no workers")
    bad = {w: i["source_hash"][:12] for w, i in idents.items() if i["source_hash"] != source_hash}
    if bad:
        raise ParameterError(
            "scheduler: workers run different symtheory sources than this driver "
            f"(driver {source_hash[:12]}; " + ", ".join(f"{w}: {h}" for w, h in bad.items())
            + "); install the same code on every worker")


def run(spec, *, store=None, scheduler=None, client=None, workers: int | None = None,
        serial: bool = False, retry_failed: bool = False, progress: bool = True,
        retries: int = DEFAULT_RETRIES, max_in_flight: int | None = None) -> RunReport:
    """Run a sweep (a spec path, TOML text, dict or :class:`~symtheory.sweep.spec.Spec`).

    ``store`` overrides the spec's store file; ``serial`` runs in this process (no Dask);
    ``client`` (a ``distributed.Client``) or ``scheduler`` (an address) use a running
    cluster, otherwise a local one with ``workers`` processes is started and shut down.
    ``retry_failed`` recomputes points stored with an error by the same code.
    ``max_in_flight`` bounds the tasks submitted and not yet stored (default: 4 per
    worker thread), so a killed driver loses at most that many.
    """
    import symtheory
    from ..core.derive import package_digest

    spec = load_spec(spec, store=store)
    if spec.store is None:
        raise ParameterError("store: give a results store path (the spec has no file to put it beside)")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ParameterError(f"workers must be an integer >= 1, got {workers!r}")
    if not isinstance(retries, int) or retries < 0:
        raise ParameterError(f"retries must be an integer >= 0, got {retries!r}")
    code, version = package_digest(), symtheory.__version__
    points = spec.points()
    executor = "serial" if serial else (f"scheduler {scheduler}" if scheduler else
                                        "client" if client is not None else "local cluster")
    with Store(spec.store) as st:
        stored = st.statuses(code)
        redo = {"error"} if retry_failed else set()
        pending = [p for p in points if p.key not in stored or stored[p.key] in redo]
        report = RunReport(spec.name, str(spec.store), executor, len(points),
                           len(points) - len(pending))
        run_id = st.begin_run(spec.name, spec.source, version, code, executor)
        t0 = time.perf_counter()
        bar = _bar(spec.name, len(points), report.stored_before, progress)

        def record(point, result):
            if result["source_hash"] != code:
                report.lost += 1
                warnings.warn(f"{point.computation} {point.params}: worker {result['worker']} "
                              f"runs other code ({result['source_hash'][:12]}); not stored",
                              SweepWarning, stacklevel=2)
            else:
                ts = time.perf_counter()
                st.add(point, result)
                report.store_seconds += time.perf_counter() - ts
                report.computed += 1
                if result["status"] == "error":
                    report.failed += 1
                    if len(report.errors) < 20:
                        report.errors.append({"params": point.params,
                                              "error": result["error"].splitlines()[0]})
            _tick(bar, report)

        try:
            if not pending:
                pass
            elif serial:
                report.submitted = len(pending)
                for p in pending:
                    record(p, execute_point(p.computation, p.params))
            else:
                _run_dask(pending, record, report, client=client, scheduler=scheduler,
                          workers=workers, code=code, retries=retries, max_in_flight=max_in_flight,
                          bar=bar)
        finally:
            report.seconds = time.perf_counter() - t0
            if bar is not None:
                bar.close()
            st.end_run(run_id, {k: v for k, v in report.as_dict().items() if k != "errors"})
    return report


def _bar(name, total, initial, enabled):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="task", file=sys.stderr,
                dynamic_ncols=True, mininterval=0.5, smoothing=0.1)


def _tick(bar, report):
    if bar is not None:
        bar.update(1)
        bar.set_postfix(failed=report.failed, lost=report.lost, refresh=False)


def _run_dask(pending, record, report, *, client, scheduler, workers, code, retries,
              max_in_flight, bar):
    from distributed import as_completed

    own_client, cluster = (client, None) if client is not None else _connect(scheduler, workers)
    try:
        _check_workers(own_client, code)
        threads = sum(own_client.nthreads().values())
        window = max_in_flight or max(8, 4 * threads)
        queue = iter(pending)
        by_key = {}
        done = as_completed()

        def submit_next() -> bool:
            p = next(queue, None)
            if p is None:
                return False
            fut = own_client.submit(execute_point, p.computation, p.params,
                                    key=f"sweep-{p.computation}-{p.key}", retries=retries)
            by_key[fut.key] = p
            report.submitted += 1
            done.add(fut)
            return True

        for _ in range(window):
            if not submit_next():
                break
        for fut in done:
            p = by_key.pop(fut.key)
            if fut.status == "finished":
                record(p, fut.result())
            else:
                exc = fut.exception() if fut.status == "error" else fut.status
                report.lost += 1
                warnings.warn(f"{p.computation} {p.params}: task lost ({exc!r}); not stored",
                              SweepWarning, stacklevel=2)
                _tick(bar, report)
            fut.release()
            submit_next()
    finally:
        if client is None:
            own_client.close()
            if cluster is not None:
                cluster.close()
