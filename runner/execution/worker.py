"""The worker: registers itself, claims queued jobs from the store, heartbeats while it runs
them, reports progress per case.

- One timing job per machine: a worker whose machine already runs a job waits for it (the
  store's claim refuses while one runs there); so does a terminal ``decodelab run``, which takes
  the machine's slot as a job of its own (``run_here``).
- Fencing: a heartbeat the store refuses means the job is no longer this worker's (it went
  silent past the stale limit and another worker reclaimed it): the job stops at once, in the
  middle of a case if need be, and nothing more of it is written (ClaimLost).
- A worker killed with -9 stops heartbeating; the next worker to look finds the job stale,
  marks its run interrupted and requeues the job, and whoever claims it resumes the same run,
  skipping the cases already recorded.
- Ctrl-C and SIGTERM (a scheduler stopping the worker) mark the run interrupted and requeue
  the job for the next worker, which resumes the run; a terminal ``decodelab run`` stopped so
  marks its job interrupted instead (the person who started it stopped it).
- On PostgreSQL the worker rides out an outage (retrying each store operation with backoff)
  up to ``outage_limit_seconds``, then exits with StoreDown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Literal

from runner.errors import InputError
from runner.execution.execute import Log, RunOutcome, execute, log_to_stderr
from runner.execution.lifecycle import check_stop, job_ends_before_its_run, stop_on_signals, stop_was_requested
from runner.measure import quiet
from runner.measure.machine import machine_name
from runner.model.data_folder import check_dashboard_job, check_dashboard_models, split_dashboard_job
from runner.spec.calibrated_estimate import estimate_here
from runner.spec.sweeps import SweepSpec, validate
from store.errors import ClaimLost, StoreDown
from store.masking import mask_secrets
from store.records import Claim, JobRecord, WorkerRecord
from store.store import Store

HEARTBEAT_SECONDS = 5.0
STALE_AFTER_SECONDS = 60.0
OUTAGE_LIMIT_SECONDS = 300.0
# The signal the heartbeat thread sends the main thread to stop the job it runs.
STOP_JOB_SIGNAL = signal.SIGUSR1
# What the worker's caller does with each run that ended done (the store, the run id).
AfterRun = Callable[[Store, int], object]


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class MainThreadStop:
    """Raises an exception chosen by another thread in the main thread, wherever it is (inside
    a case's computation, a store call or a sleep): a real signal, so a sleep wakes too."""

    def __init__(self) -> None:
        self._pending: BaseException | None = None
        signal.signal(STOP_JOB_SIGNAL, self._raise_pending)

    def _raise_pending(self, _signum: int, _frame: FrameType | None) -> None:
        error, self._pending = self._pending, None
        if error is not None:
            raise error

    def stop_with(self, error: BaseException) -> None:
        self._pending = error
        main = threading.main_thread().ident
        if main is not None:
            signal.pthread_kill(main, STOP_JOB_SIGNAL)


class Heartbeat:
    """Refreshes a claimed job's heartbeat from a background thread while the job runs; stops
    the job in the main thread when the store says it is no longer this worker's, or when the
    store stayed down past the outage limit."""

    def __init__(self, store: Store, claim: Claim, every_seconds: float, stop: MainThreadStop, log: Log) -> None:
        self._store, self._claim, self._every, self._stop, self._log = store, claim, every_seconds, stop, log
        self._done = threading.Event()
        # Held while deciding to stop the main thread, and by __exit__: once the job's block
        # has ended, no stop can land in whatever the main thread does next.
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{claim.job_id}", daemon=True)

    def _beat(self) -> None:
        while not self._done.wait(self._every):
            error: BaseException | None = None
            try:
                # Between two timing samples: inside them, beats slowed 39 of 450 by up to 32%
                # (benchmarks/heartbeat_noise.py).
                with quiet.between_samples():
                    beating = self._store.jobs.heartbeat(self._claim)
                if not beating:
                    error = ClaimLost(f"job {self._claim.job_id}: the store refused this worker's heartbeat")
            except StoreDown as down:
                error = down
            except Exception as failure:  # a missed beat is not fatal; staleness takes many
                self._log(f"heartbeat for job {self._claim.job_id} failed: {failure}")
            if error is not None:
                with self._lock:
                    # A stop of this process's own (Ctrl-C, SIGTERM) requeues the job as the run
                    # ends, and the store then refuses the next beat: raised into the main thread,
                    # that ClaimLost would replace the stop it is handling (the worker exited 0,
                    # not 130, in a fresh-clone CI run). The main thread is stopping already.
                    if not self._done.is_set() and not stop_was_requested():
                        self._done.set()
                        self._stop.stop_with(error)
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._done.set()
        self._thread.join(timeout=self._every + 1)


def register(store: Store, kind: str, stale_after_seconds: float) -> WorkerRecord:
    return store.workers.register(
        name=worker_name(),
        kind=kind,
        machine_name=machine_name(),
        host=socket.gethostname(),
        pid=os.getpid(),
        stale_after_seconds=stale_after_seconds,
    )


def unregister(store: Store, worker: WorkerRecord) -> None:
    # Never masks the error that ends the process: a worker row not marked stopped only
    # turns "dead" once its stale limit passes.
    with contextlib.suppress(Exception):
        store.workers.stop(worker.id)


def run_job(
    store: Store,
    job: JobRecord,
    worker: WorkerRecord,
    stop: MainThreadStop,
    *,
    heartbeat_seconds: float,
    show_progress: bool,
    log: Log,
) -> int | None:
    """Run one claimed job; the id of its run where the run ended done, else None."""
    try:
        with Heartbeat(store, job.claim, heartbeat_seconds, stop, log):
            try:
                # A stop requeues the job, a bad spec fails it (with its one line).
                with job_ends_before_its_run(store, job.claim, requeue_on_interrupt=True):
                    spec_raw, dashboard_mark = split_dashboard_job(job.spec)
                    if dashboard_mark is not None:  # before validation reads any checkpoint
                        check_dashboard_models(spec_raw, dashboard_mark)
                    spec = validate(spec_raw)
                    if dashboard_mark is not None:
                        check_dashboard_job(spec.corpus, dashboard_mark)
            except InputError as error:
                log(f"job {job.id} failed validation: {error}")
                return None
            log(f"job {job.id}: running {spec.name} ({spec.cases_total()} cases) as {worker.name}")
            try:
                outcome = execute(
                    store,
                    spec,
                    preset=job.preset,
                    job=job,
                    requeue_on_interrupt=True,
                    show_progress=show_progress,
                    log=log,
                )
            except StoreDown:
                raise
            except Exception as error:
                # execute() marked the job (and its run, if it had begun) failed.
                log(f"job {job.id} failed: {mask_secrets(str(error))}")
                return None
            return outcome.run_id
    except ClaimLost as lost:
        log(f"job {job.id} is no longer this worker's ({lost}): stopped it without writing anything more")
    return None


@contextlib.contextmanager
def worker_session(
    store: Store, kind: str, *, stale_after_seconds: float, outage_limit_seconds: float, log: Log
) -> Iterator[tuple[WorkerRecord, MainThreadStop]]:
    """A registered worker row (a ``worker``, or a terminal ``run``) for the block: Ctrl-C and
    SIGTERM stop it, the store's outages are ridden out up to the limit, and the row is marked
    stopped however the block ends."""
    # SIGTERM stops a worker the way Ctrl-C does: the current run is interrupted, its job requeued.
    stop_on_signals()
    stop = MainThreadStop()
    store.survive_outages(outage_limit_seconds, log)
    me = register(store, kind, stale_after_seconds)
    try:
        yield me, stop
    except StoreDown:
        store.outages.give_up()
        raise
    finally:
        unregister(store, me)


# What a wait loop does when no job could be claimed: give up, wait idle, or wait for the job
# running on this machine (queued work is waiting for it: not idle).
WaitChoice = Literal["give_up", "idle", "queued"]


def claim_when_free(
    store: Store,
    me: WorkerRecord,
    claim: Callable[[], JobRecord | None],
    choose: Callable[[], WaitChoice],
    *,
    stale_after_seconds: float,
    poll_seconds: float,
    log: Log,
) -> JobRecord | None:
    """The one wait loop: requeue stale jobs and try ``claim`` until it gives a job (returned) or
    ``choose`` gives up (None); while queued work waits, the job running on this machine is named
    once. One timing job per machine: the store's claim refuses while one runs there."""
    waiting_for: int | None = None
    while True:
        check_stop()
        for job_id in store.jobs.reclaim_stale(stale_after_seconds):
            log(f"job {job_id}: its worker stopped heartbeating; requeued (its run is marked interrupted)")
        job = claim()
        if job is not None:
            return job
        store.workers.touch(me.id)
        choice = choose()
        if choice == "give_up":
            return None
        if choice == "queued":
            busy = store.jobs.running_on(me.machine_name)
            if busy is not None and busy != waiting_for:
                log(f"waiting: job {busy} is running on machine {me.machine_name!r} (one timing job per machine)")
            waiting_for = busy
        check_stop()
        time.sleep(poll_seconds)


def work(
    store: Store,
    *,
    once: bool = False,
    until_empty: bool = False,
    poll_seconds: float = 2.0,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    max_idle_seconds: float | None = None,
    outage_limit_seconds: float = OUTAGE_LIMIT_SECONDS,
    show_progress: bool = True,
    log: Log = log_to_stderr,
    after_run: AfterRun | None = None,
) -> int:
    """Claim and run jobs until interrupted, idle too long, or (``once``: after one job;
    ``until_empty``: once) no queued job is left for this machine. While another job runs on
    this machine, queued jobs wait, and so does the worker. ``after_run`` is called with the
    store and the run of every job that ended done (the command line records the machine's
    drift figure there: analysis sits above this package). Returns the number of jobs run."""
    jobs_run = 0
    idle_since = time.monotonic()

    with worker_session(
        store, "worker", stale_after_seconds=stale_after_seconds, outage_limit_seconds=outage_limit_seconds, log=log
    ) as (me, stop):
        log(f"worker {me.name} on machine {me.machine_name!r}, store {store.masked_url}")

        def choose() -> WaitChoice:
            nonlocal idle_since
            if store.jobs.queued_for(me.machine_name) == 0:
                if once or until_empty:
                    log("no queued job left for this machine" if jobs_run else "no queued job for this machine")
                    return "give_up"
                if max_idle_seconds is not None and time.monotonic() - idle_since > max_idle_seconds:
                    log(f"idle for {max_idle_seconds:.0f} s; stopping")
                    return "give_up"
                return "idle"
            # Queued work waits for the machine's running job: waiting is not idling.
            idle_since = time.monotonic()
            return "queued"

        while (
            job := claim_when_free(
                store,
                me,
                lambda: store.jobs.claim(me),
                choose,
                stale_after_seconds=stale_after_seconds,
                poll_seconds=poll_seconds,
                log=log,
            )
        ) is not None:
            run_id = run_job(
                store, job, me, stop, heartbeat_seconds=heartbeat_seconds, show_progress=show_progress, log=log
            )
            if run_id is not None and after_run is not None:
                after_run(store, run_id)
            jobs_run += 1
            idle_since = time.monotonic()
            if once:
                break
        return jobs_run


def run_here(
    store: Store,
    spec: SweepSpec,
    *,
    preset: str | None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    poll_seconds: float = 1.0,
    outage_limit_seconds: float = OUTAGE_LIMIT_SECONDS,
    show_progress: bool = True,
    log: Log = log_to_stderr,
    retry_run: int | None = None,
) -> RunOutcome:
    """``decodelab run``: the sweep in this process, as a job of its own pinned to this machine
    and claimed at once, so no worker times beside it (and it waits for one that is timing).
    With ``retry_run``, the job finishes that ended run instead: only its unmeasured cases."""
    with worker_session(
        store, "run", stale_after_seconds=stale_after_seconds, outage_limit_seconds=outage_limit_seconds, log=log
    ) as (me, stop):
        # Said before it starts, and kept on its job: History sets it beside the time taken.
        estimated = estimate_here(store, spec, me.machine_name)
        log(f"the sweep: {spec.cases_total()} cases, {estimated.describe()}")
        job = claim_when_free(
            store,
            me,
            lambda: store.jobs.claim_new(
                spec.raw, me, preset=preset, cases_total=spec.cases_total(), estimated_seconds=estimated.seconds
            ),
            lambda: "queued",
            stale_after_seconds=stale_after_seconds,
            poll_seconds=poll_seconds,
            log=log,
        )
        assert job is not None  # this loop never gives up: it waits for the machine
        if retry_run is not None:
            store.jobs.adopt_run(job.claim, retry_run)
        with Heartbeat(store, job.claim, heartbeat_seconds, stop, log):
            return execute(store, spec, preset=preset, job=job, show_progress=show_progress, log=log)
