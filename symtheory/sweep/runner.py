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
from .store import Store, claim_owner
from .store import now as store_now

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
    failed_before: int = 0  # of stored_before: stored with an error, not retried
    submitted: int = 0
    computed: int = 0
    failed: int = 0
    lost: int = 0
    seconds: float = 0.0
    store_seconds: float = 0.0
    by_others: int = 0  # stored during this run by other runs sharing the store
    taken_over: int = 0  # claims of dead or expired runs this run took over
    in_progress: int = 0  # claimed by other runs, not waited for (wait=False)
    ok_at_end: int = 0  # points of the grid stored without error when the run ended
    errors: list = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every point of the grid is stored without error."""
        return self.ok_at_end == self.total and self.lost == 0

    def summary(self) -> str:
        rate = self.computed / self.seconds if self.seconds > 0 else float("nan")
        text = (f"{self.name}: {self.total} tasks, {self.stored_before} already stored, "
                f"{self.computed} computed ({self.failed} failed, {self.lost} lost) in "
                f"{self.seconds:.1f} s ({rate:.3g} tasks/s, {self.executor}); store {self.store}")
        if self.by_others:
            text += f"\n{self.by_others} tasks were computed by another run sharing the store"
        if self.taken_over:
            text += (f"\n{self.taken_over} tasks claimed by a run that died or stopped renewing "
                     "its claims were taken over")
        if self.in_progress:
            text += (f"\n{self.in_progress} tasks are in progress in another run sharing the "
                     "store (not waited for); run the spec again when it ends")
        if self.failed_before:
            text += f"\n{self.failed_before} points were stored with an error by an earlier run"
        if self.failed or self.failed_before:
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

    import dask
    from distributed import LocalCluster

    if not logging.getLogger().isEnabledFor(logging.INFO):  # quiet unless `symtheory -v`
        logging.getLogger("distributed").setLevel(logging.WARNING)
    n = _cores() if workers is None else workers
    # worker-saturation inf: the scheduler sends each worker its share of the submitted
    # tasks at once instead of one at a time (no idle round trip between two tasks; the
    # driver bounds what is submitted).  The scheduler's HTTP endpoints (health, metrics)
    # go to a free loopback port: no dashboard, no clash with a cluster on 8787.
    with dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}):
        return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address=None, silence_logs=logging.ERROR,
                            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})


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


class _Recorder:
    """Commits results as they arrive (one transaction per arrival) and keeps the report
    and the progress bar (tasks done / total, rate, ETA, failures) up to date."""

    def __init__(self, store, report, code, bar, owner, pending):
        self.store, self.report, self.code, self.bar, self.owner = store, report, code, bar, owner
        self.left: dict = {}  # tasks left per computation: the bar's ETA costs each kind
        self._seen: set = set()  # computations with a result in this run
        for p in pending:
            self.left[p.computation] = self.left.get(p.computation, 0) + 1

    def __call__(self, pairs) -> None:
        rep, keep = self.report, []
        for point, result in pairs:
            if result["source_hash"] != self.code:
                rep.lost += 1
                warnings.warn(f"{point.computation} {point.params}: worker {result['worker']} "
                              f"runs other code ({result['source_hash'][:12]}); not stored",
                              SweepWarning, stacklevel=3)
                continue
            keep.append((point, result))
            if result["status"] == "error":
                rep.failed += 1
                if len(rep.errors) < 20:
                    rep.errors.append({"params": point.params,
                                       "error": result["error"].splitlines()[0]})
        t0 = time.perf_counter()
        self.store.add_many(keep)
        rep.store_seconds += time.perf_counter() - t0
        rep.computed += len(keep)
        self.tick(pairs)

    def lost(self, points, why) -> None:
        self.report.lost += len(points)
        self.store.release(self.owner, [p.key for p in points])  # free for the next run
        warnings.warn(f"{len(points)} task(s) lost ({why}), e.g. {points[0].computation} "
                      f"{points[0].params}; not stored", SweepWarning, stacklevel=3)
        self.tick([(p, None) for p in points], timed=False)

    def tick(self, pairs, *, timed=True) -> None:
        """Advance the bar by ``pairs`` (a lost task, or another run's, is not timed): the
        first result of a computation in this run is not timed either, it includes the
        workers' compilation."""
        if self.bar is None or not pairs:
            return
        comp = pairs[0][0].computation
        for p, _ in pairs:
            self.left[p.computation] = max(self.left.get(p.computation, 0) - 1, 0)
        first = timed and comp not in self._seen
        if timed:
            self._seen.add(comp)
        self.bar.note = f"failed={self.report.failed}, lost={self.report.lost}"
        self.bar.advance(len(pairs), kind=comp, warm=first or not timed)
        self.bar.remaining([(n, c) for c, n in self.left.items()])


#: a run's claim on a task lasts this long unless renewed; a run renews its claims every
#: LEASE_SECONDS / 4 (a heartbeat thread), so the claims of a run that died are retaken at
#: most this long after (at once by a run on the same host: it sees the process is gone).
#: Long enough for a heartbeat delayed by a compiled kernel that holds the GIL
LEASE_SECONDS = 120.0
#: how often a run waiting for the tasks another run claimed looks at the store
WAIT_POLL_SECONDS = 1.0


def run(spec, *, store=None, scheduler=None, client=None, workers: int | None = None,
        serial: bool = False, retry_failed: bool = False, progress: bool = True,
        retries: int = DEFAULT_RETRIES, max_in_flight: int | None = None,
        batch: int | None = None, wait: bool = True, lease: float = LEASE_SECONDS) -> RunReport:
    """Run a sweep (a spec path, TOML text, dict or :class:`~symtheory.sweep.spec.Spec`).

    ``store`` overrides the spec's store file; ``serial`` runs in this process (no Dask);
    ``client`` (a ``distributed.Client``) or ``scheduler`` (an address) use a running
    cluster, otherwise a local one with ``workers`` processes is started and shut down.
    ``retry_failed`` recomputes points stored with an error by the same code.

    On Dask each grid point is still one task of the store (its own row and wall time),
    but consecutive points of a computation are sent to a worker together, ``batch`` at a
    time (default: sized from the measured task times so that a Dask task lasts about
    :data:`BATCH_SECONDS` -- one for slow tasks, many for millisecond ones, whose
    scheduling would otherwise cost more than their computation).  ``max_in_flight``
    bounds the Dask tasks submitted and not yet stored (default: 4 per worker thread),
    so a killed driver loses at most those points.

    Runs may share a store: a task is claimed in the store before it is computed (a
    lease of ``lease`` seconds, renewed while the run lives; :mod:`.store`), so each task
    is computed by one run.  When only tasks claimed by another run are left, this run
    waits for them (``wait``; saying so on stderr) or returns, reporting them as in
    progress.
    """
    import symtheory
    from ..core.derive import package_digest

    spec = load_spec(spec, store=store)
    if spec.store is None:
        raise ParameterError("store: give a results store path (the spec has no file to put it beside)")
    for name, value in (("workers", workers), ("max_in_flight", max_in_flight), ("batch", batch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ParameterError(f"retries must be an integer >= 0, got {retries!r}")
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not lease > 0:
        raise ParameterError(f"lease must be a number of seconds > 0, got {lease!r}")
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
        report.failed_before = sum(stored.get(p.key) == "error" for p in points) - \
            sum(stored.get(p.key) == "error" for p in pending)
        run_id = st.begin_run(spec.name, spec.source, version, code, executor)
        since = store_now()
        t0 = time.perf_counter()
        bar = _bar(spec.name, len(points), report.stored_before, progress)
        claims = _Claims(st, code, lease, redo, since, report)
        record = _Recorder(st, report, code, bar, claims.owner, pending)
        heartbeat = _Heartbeat(spec.store, claims.owner, lease)
        own_client = cluster = None
        try:
            while True:
                todo = [p for p in pending if p.key not in claims.attempted]
                if not todo:
                    break
                claims.claimed_in_round = 0
                if serial:
                    # claimed in batches of about BATCH_SECONDS of work: a claim is a
                    # transaction (~0.3 ms), as much as a millisecond task
                    batches = _Batches(todo, batch, 1, claims)
                    while points_ := batches.take():
                        for p in points_:
                            report.submitted += 1
                            pair = (p, execute_point(p.computation, p.params))
                            batches.observe([pair])
                            record([pair])
                else:
                    if client is None:
                        client, cluster = own_client = _connect(scheduler, workers)
                        _check_workers(client, code)
                    _run_dask(todo, record, claims, client=client, retries=retries,
                              max_in_flight=max_in_flight, batch=batch)
                left = {p.key for p in todo if p.key not in claims.attempted}
                claims.tick_others(left, todo, record)
                busy = left & set(st.claims(code))
                if busy and not wait:
                    report.in_progress = len(busy)
                    break
                if busy:
                    claims.announce_wait(len(busy))
                    time.sleep(WAIT_POLL_SECONDS)
                elif not claims.claimed_in_round:
                    break  # nothing was claimable and nobody holds a claim: all stored
        finally:
            heartbeat.stop()
            st.release(claims.owner)
            report.seconds = time.perf_counter() - t0
            if bar is not None:
                bar.close()
            if own_client is not None:
                client.close()
                if cluster is not None:
                    cluster.close()
            final = st.statuses(code)
            report.ok_at_end = sum(final.get(p.key) == "ok" for p in points)
            report.by_others = claims.by_others(pending)
            st.end_run(run_id, {k: v for k, v in report.as_dict().items() if k != "errors"})
    return report


class _Claims:
    """This run's claims in the store: ``claims(points)`` claims what it can of them and
    returns those; ``attempted`` holds every key this run claimed."""

    def __init__(self, store, code, lease, redo, since, report):
        import uuid

        self.store, self.code, self.lease, self.redo, self.since = store, code, lease, redo, since
        self.report, self.owner = report, claim_owner(uuid.uuid4().hex[:8])
        self.attempted: set = set()  # every key this run claimed
        self.claimed_in_round = 0
        self._seen_others: set = set()
        self._announced = False

    def __call__(self, points) -> list:
        got, taken = self.store.claim([p.key for p in points], self.code, self.owner,
                                      self.lease, redo=self.redo, since=self.since)
        self.report.taken_over += taken
        self.attempted.update(got)
        self.claimed_in_round += len(got)
        got = set(got)
        return [p for p in points if p.key in got]

    def tick_others(self, left, todo, record) -> None:
        """Advance the bar by the tasks of ``left`` another run stored since last time."""
        done = self._stored_by_others(left) - self._seen_others
        self._seen_others |= done
        record.tick([(p, None) for p in todo if p.key in done], timed=False)

    def _stored_by_others(self, keys) -> set:
        return {r["point_key"] for r in self.store.rows(source_hash=self.code, keys=keys)
                if r["finished_at"] >= self.since} - self.attempted

    def by_others(self, pending) -> int:
        return len(self._stored_by_others({p.key for p in pending}))

    def announce_wait(self, n) -> None:
        if not self._announced:
            self._announced = True
            print(f"{self.report.name}: {n} tasks are being computed by another run sharing "
                  f"the store {self.report.store}; waiting for them (--no-wait returns now)",
                  file=sys.stderr)


class _Heartbeat:
    """Renews a run's claims every ``lease / 4`` seconds from a thread of its own (its own
    connection to the store)."""

    def __init__(self, path, owner, lease):
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(path, owner, lease),
                                        name="symtheory-claims-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, path, owner, lease):
        import sqlite3

        with Store(path) as st:
            while not self._stop.wait(lease / 4):
                with contextlib.suppress(sqlite3.Error):  # a busy store: the next beat renews
                    st.renew(owner, lease)

    def stop(self):
        self._stop.set()
        self._thread.join()


def _bar(name, total, initial, enabled):
    if not enabled:
        return None
    from ..core.progress import WorkBar

    # quiet when stderr is not a TTY (a log file gets no bar); the ETA costs each
    # computation from its measured results, the first one (compilation) left out
    return WorkBar(desc=name, unit="task", total=total, initial=initial)


#: automatic batches aim at Dask tasks of about this many seconds (Dask's guidance: tasks
#: well above its ~1 ms per-task overhead; a shared machine's wake-up latency is ~10 ms)
BATCH_SECONDS = 0.5
MAX_BATCH = 1000


def execute_batch(items) -> list:
    """:func:`execute_point` over ``[(computation, params), ...]`` (one Dask task)."""
    return [execute_point(c, p) for c, p in items]


class _Batches:
    """Consecutive pending points of one computation, sized from the measured time per
    point (exponential average of the records' wall times) unless ``fixed``."""

    def __init__(self, pending, fixed, threads, claim):
        self.pending, self.next, self.fixed, self.threads = pending, 0, fixed, threads
        self.claim, self.seconds = claim, {}

    def observe(self, pairs) -> None:
        for point, result in pairs:
            old = self.seconds.get(point.computation)
            t = result["wall_time"]
            self.seconds[point.computation] = t if old is None else 0.5 * old + 0.5 * t

    def take(self) -> list:
        """The next batch of points this run could claim ([] when none is left)."""
        while self.next < len(self.pending):
            out = self.claim(self._candidates())
            if out:
                return out
        return []

    def _candidates(self) -> list:
        comp = self.pending[self.next].computation
        if self.fixed:
            size = self.fixed
        elif comp not in self.seconds:
            size = 1  # measure first
        else:
            remaining = len(self.pending) - self.next
            balance = -(-remaining // (2 * self.threads))  # >= 2 batches per worker thread left
            size = max(1, min(int(BATCH_SECONDS / max(self.seconds[comp], 1e-6)), balance, MAX_BATCH))
        out = []
        while len(out) < size and self.next < len(self.pending) and \
                self.pending[self.next].computation == comp:
            out.append(self.pending[self.next])
            self.next += 1
        return out


def _run_dask(pending, record, claim, *, client, retries, max_in_flight, batch):
    import hashlib

    from distributed import as_completed

    threads = sum(client.nthreads().values())
    window = max_in_flight or max(8, 4 * threads)
    batches = _Batches(pending, batch, threads, claim)
    in_flight = {}
    done = as_completed()

    def submit_next() -> bool:
        points = batches.take()
        if not points:
            return False
        key = hashlib.sha256("".join(p.key for p in points).encode()).hexdigest()
        fut = client.submit(execute_batch, [(p.computation, p.params) for p in points],
                                key=f"sweep-{points[0].computation}-{key}", retries=retries)
        in_flight[fut.key] = points
        record.report.submitted += len(points)
        done.add(fut)
        return True

    for _ in range(window):
        if not submit_next():
            break
    for fut in done:
        points = in_flight.pop(fut.key)
        if fut.status == "finished":
            pairs = list(zip(points, fut.result()))
            batches.observe(pairs)
            record(pairs)
        else:
            record.lost(points, fut.exception() if fut.status == "error" else fut.status)
        fut.release()
        submit_next()
