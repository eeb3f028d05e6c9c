"""The worker: claims queued jobs from the store, heartbeats while it runs them, reports
progress per case.

A worker killed with -9 stops heartbeating; the next worker to look finds the job stale,
marks its run interrupted and requeues the job, then (or another worker) claims it again
and resumes the same run, skipping the cases already recorded. Ctrl-C and SIGTERM mark the
run and the job interrupted at once (they are not requeued: someone stopped them on purpose).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

from runner.errors import InputError
from runner.execute import Log, execute, log_to_stderr
from runner.machine import machine_name
from runner.sweeps import validate
from store.records import JobRecord
from store.store import Store

HEARTBEAT_SECONDS = 5.0
STALE_AFTER_SECONDS = 60.0


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Heartbeat:
    """Refreshes a job's heartbeat from a background thread while the job runs."""

    def __init__(self, store: Store, job_id: int, worker: str, every_seconds: float) -> None:
        self._store, self._job_id, self._worker, self._every = store, job_id, worker, every_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{job_id}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._store.jobs.heartbeat(self._job_id, self._worker)
            except Exception as error:  # a missed beat is not fatal; staleness takes many
                log_to_stderr(f"heartbeat for job {self._job_id} failed: {error}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._every + 1)


def run_job(
    store: Store, job: JobRecord, worker: str, *, heartbeat_seconds: float, show_progress: bool, log: Log
) -> None:
    try:
        spec = validate(job.spec)
    except InputError as error:
        store.jobs.finish(job.id, "failed", error=str(error))
        log(f"job {job.id} failed validation: {error}")
        return
    log(f"job {job.id}: running {spec.name} ({spec.cases_total()} cases) as {worker}")
    with Heartbeat(store, job.id, worker, heartbeat_seconds):
        try:
            execute(store, spec, preset=job.preset, job=job, show_progress=show_progress, log=log)
        except KeyboardInterrupt:
            raise
        except Exception as error:
            # execute() already marked run and job failed when the run had started.
            if store.jobs.status(job.id) == "running":
                store.jobs.finish(job.id, "failed", error=str(error).splitlines()[0] if str(error) else repr(error))
            log(f"job {job.id} failed: {error}")


def work(
    store: Store,
    *,
    once: bool = False,
    poll_seconds: float = 2.0,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    max_idle_seconds: float | None = None,
    show_progress: bool = True,
    log: Log = log_to_stderr,
) -> int:
    """Claim and run jobs until none is left (``once``), idle too long, or interrupted.

    Returns the number of jobs run.
    """
    # SIGTERM stops a worker the way Ctrl-C does: the current run is marked interrupted.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    name = worker_name()
    machine = machine_name()
    jobs_run = 0
    idle_since = time.monotonic()
    log(f"worker {name} on machine {machine!r}, store {store.masked_url}")
    while True:
        for job_id in store.jobs.reclaim_stale(stale_after_seconds):
            log(f"job {job_id}: its worker stopped heartbeating; requeued (its run is marked interrupted)")
        job = store.jobs.claim(name, machine)
        if job is None:
            if once:
                if jobs_run == 0:
                    log("no queued job for this machine")
                return jobs_run
            if max_idle_seconds is not None and time.monotonic() - idle_since > max_idle_seconds:
                log(f"idle for {max_idle_seconds:.0f} s; stopping")
                return jobs_run
            time.sleep(poll_seconds)
            continue
        run_job(store, job, name, heartbeat_seconds=heartbeat_seconds, show_progress=show_progress, log=log)
        jobs_run += 1
        idle_since = time.monotonic()
        if once:
            return jobs_run
