"""The job queue: enqueue a sweep, claim it, heartbeat, progress, finish or requeue, reclaim.

- One job, one worker: PostgreSQL claims with ``SELECT … FOR UPDATE SKIP LOCKED``; SQLite
  claims inside a ``BEGIN IMMEDIATE`` transaction, which admits one writer.
- One job per machine: a claim takes only while no job runs on the claimer's machine. On
  PostgreSQL claims for one machine take a transaction-scoped advisory lock first, so two
  claimers on one machine cannot both see it idle; on SQLite the write lock serializes them.
- Fencing: a claim is (worker id, attempt). Every write about a claimed job or its run is
  conditional on that claim and raises ClaimLost when it no longer holds, so a worker that
  lost its job (frozen past the stale limit, reclaimed and finished by another) changes nothing.
- Every time here is the database server's (store.clock), never a worker machine's.

Rows are locked in one order everywhere (job, then run, then worker), so a reclaim and the
owner's finish cannot deadlock.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.orm import Session

from store.clock import server_now
from store.errors import ClaimLost
from store.outage import survives_outages
from store.records import Claim, JobRecord, WorkerRecord
from store.results import Sessions, new_run
from store.schema import Job, Run, Worker

# A job whose worker went silent this many times is failed instead of requeued again.
MAX_STALE_RECLAIMS = 3
JOB_END_STATUSES = ("done", "failed", "interrupted")


def owned_job(session: Session, backend: str, claim: Claim, *, share: bool = False) -> Job:
    """The claimed job, row-locked (for update, or shared), or ClaimLost when the claim no
    longer holds."""
    query = select(Job).where(
        Job.id == claim.job_id,
        Job.worker_id == claim.worker_id,
        Job.attempts == claim.attempt,
        Job.status == "running",
    )
    if backend == "postgresql":
        query = query.with_for_update(read=share)
    job = session.scalar(query)
    if job is None:
        raise ClaimLost(f"job {claim.job_id} is no longer this worker's (claim attempt {claim.attempt})")
    return job


class JobQueue:
    """The store's queue (``store.jobs``)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    def _now(self, offset_seconds: float = 0.0) -> Any:
        return server_now(self._sessions.backend, offset_seconds)

    @survives_outages
    def enqueue(
        self,
        spec: dict[str, Any],
        *,
        preset: str | None = None,
        machine_name: str | None = None,
        cases_total: int = 0,
    ) -> int:
        with self._sessions.write() as session:
            job = Job(
                spec=spec,
                preset=preset,
                machine_name=machine_name,
                status="queued",
                cases_total=cases_total,
                cases_done=0,
                created_at=self._now(),
            )
            session.add(job)
            session.flush()
            return job.id

    def _machine_lock(self, session: Session, machine_name: str) -> None:
        """Serialize claims for one machine (PostgreSQL; SQLite's BEGIN IMMEDIATE already
        admits one writer). Scoped to the schema, so stores sharing a database do not wait."""
        if self._sessions.backend == "postgresql":
            session.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':' || :machine))"),
                {"machine": machine_name},
            )

    def _running_on(self, session: Session, machine_name: str) -> int | None:
        return session.scalar(
            select(Job.id).where(Job.status == "running", Job.claimed_by_machine == machine_name).limit(1)
        )

    def _take(self, session: Session, job: Job, worker: WorkerRecord) -> JobRecord:
        job.status = "running"
        job.worker = worker.name
        job.worker_id = worker.id
        job.claimed_by_machine = worker.machine_name
        job.claimed_at = self._now()
        job.heartbeat_at = self._now()
        job.attempts = (job.attempts or 0) + 1
        session.flush()
        session.execute(update(Worker).where(Worker.id == worker.id).values(current_job_id=job.id))
        return JobRecord(
            id=job.id,
            spec=job.spec,
            preset=job.preset,
            machine_name=job.machine_name,
            run_id=job.run_id,
            attempts=job.attempts,
            worker_id=worker.id,
        )

    @survives_outages
    def claim(self, worker: WorkerRecord) -> JobRecord | None:
        """The oldest queued job this machine may run, or None when there is none or when a
        job already runs on this machine (the worker waits: one timing job per machine)."""
        query = (
            select(Job)
            .where(Job.status == "queued", or_(Job.machine_name.is_(None), Job.machine_name == worker.machine_name))
            .order_by(Job.created_at, Job.id)
            .limit(1)
        )
        if self._sessions.backend == "postgresql":
            query = query.with_for_update(skip_locked=True)
        with self._sessions.write() as session:
            self._machine_lock(session, worker.machine_name)
            if self._running_on(session, worker.machine_name) is not None:
                return None
            job = session.scalar(query)
            return None if job is None else self._take(session, job, worker)

    @survives_outages
    def claim_new(
        self, spec: dict[str, Any], worker: WorkerRecord, *, preset: str | None = None, cases_total: int = 0
    ) -> JobRecord | None:
        """A job for a sweep run from a terminal, pinned to this machine and claimed at once,
        so the machine's slot is taken as by any job; None while another job runs here."""
        with self._sessions.write() as session:
            self._machine_lock(session, worker.machine_name)
            if self._running_on(session, worker.machine_name) is not None:
                return None
            job = Job(
                spec=spec,
                preset=preset,
                machine_name=worker.machine_name,
                status="queued",
                cases_total=cases_total,
                cases_done=0,
                created_at=self._now(),
            )
            session.add(job)
            session.flush()
            return self._take(session, job, worker)

    @survives_outages
    def running_on(self, machine_name: str) -> int | None:
        """The job running on this machine, if any."""
        with self._sessions.read() as session:
            return self._running_on(session, machine_name)

    @survives_outages
    def queued_for(self, machine_name: str) -> int:
        """How many queued jobs a worker on this machine may run."""
        with self._sessions.read() as session:
            return int(
                session.scalar(
                    select(func.count(Job.id)).where(
                        Job.status == "queued", or_(Job.machine_name.is_(None), Job.machine_name == machine_name)
                    )
                )
                or 0
            )

    @survives_outages
    def begin_run(
        self,
        claim: Claim,
        *,
        machine_id: int,
        spec: dict[str, Any],
        code_version: str,
        model_id: int | None,
        preset: str | None = None,
    ) -> tuple[int, bool]:
        """The claimed job's run: the one it already has, set running again (a resume), or a
        new one attached to it in the same transaction. Returns (run id, resumed)."""
        with self._sessions.write() as session:
            job = owned_job(session, self._sessions.backend, claim)
            if job.run_id is not None:
                session.execute(
                    update(Run).where(Run.id == job.run_id).values(status="running", error=None, finished_at=None)
                )
                return job.run_id, True
            run_id = new_run(
                session, machine_id=machine_id, spec=spec, code_version=code_version, model_id=model_id, preset=preset
            )
            job.run_id = run_id
            return run_id, False

    @survives_outages
    def heartbeat(self, claim: Claim) -> bool:
        """Refresh the job's heartbeat and its worker's last seen; False when the job is no
        longer this worker's (the worker must then stop that job at once)."""
        with self._sessions.write() as session:
            result = session.execute(
                update(Job)
                .where(
                    Job.id == claim.job_id,
                    Job.worker_id == claim.worker_id,
                    Job.attempts == claim.attempt,
                    Job.status == "running",
                )
                .values(heartbeat_at=self._now())
            )
            session.execute(update(Worker).where(Worker.id == claim.worker_id).values(last_seen_at=self._now()))
            return bool(getattr(result, "rowcount", 0))

    @survives_outages
    def progress(self, claim: Claim, cases_done: int, cases_total: int) -> None:
        with self._sessions.write() as session:
            job = owned_job(session, self._sessions.backend, claim)
            job.cases_done, job.cases_total, job.heartbeat_at = cases_done, cases_total, self._now()

    @survives_outages
    def finish(self, claim: Claim, status: str, *, error: str | None = None, wall_seconds: float | None = None) -> None:
        """End the claimed job (done, failed or interrupted) and its run with it, in one
        transaction. Finishing a job this claim already finished the same way changes nothing
        (a retry after a dropped connection); any other lost claim raises ClaimLost."""
        if status not in JOB_END_STATUSES:
            raise ValueError(f"a job finishes as {', '.join(JOB_END_STATUSES)}, not {status!r}")
        with self._sessions.write() as session:
            if self._already(session, claim, status):
                return
            job = owned_job(session, self._sessions.backend, claim)
            self._end_run(session, job, status, error, wall_seconds)
            job.status, job.error, job.finished_at = status, error, self._now()
            self._release_worker(session, claim.worker_id)

    @survives_outages
    def requeue(self, claim: Claim, *, error: str, wall_seconds: float | None = None) -> None:
        """Give the claimed job back (a worker stopped by SIGTERM or Ctrl-C): its run is marked
        interrupted and the next worker to claim the job resumes that run."""
        with self._sessions.write() as session:
            if self._already(session, claim, "queued"):
                return
            job = owned_job(session, self._sessions.backend, claim)
            self._end_run(session, job, "interrupted", error, wall_seconds)
            job.status, job.error = "queued", error
            job.worker, job.worker_id, job.claimed_by_machine = None, None, None
            self._release_worker(session, claim.worker_id)

    def _already(self, session: Session, claim: Claim, status: str) -> bool:
        """Whether this claim already left the job in ``status`` (ended or requeued by it)."""
        row = session.execute(select(Job.status, Job.worker_id, Job.attempts).where(Job.id == claim.job_id)).one()
        if status == "queued":
            # A requeue clears the owner; the attempt count stays until the next claim.
            return row.status == "queued" and row.worker_id is None and row.attempts == claim.attempt
        return (row.status, row.worker_id, row.attempts) == (status, claim.worker_id, claim.attempt)

    def _end_run(self, session: Session, job: Job, status: str, error: str | None, wall: float | None) -> None:
        if job.run_id is None:
            return
        values: dict[str, Any] = {"status": status, "error": error, "finished_at": self._now()}
        if wall is not None:
            values["wall_seconds"] = wall
        session.execute(update(Run).where(Run.id == job.run_id).values(**values))

    def _release_worker(self, session: Session, worker_id: int) -> None:
        session.execute(update(Worker).where(Worker.id == worker_id).values(current_job_id=None))

    @survives_outages
    def reclaim_stale(self, stale_after_seconds: float) -> list[int]:
        """Requeue running jobs whose heartbeat is older than the limit (by the server's clock);
        their runs are marked interrupted until a worker resumes them. A job whose worker went
        silent MAX_STALE_RECLAIMS times is failed. A job whose row is locked (its worker is in
        a transaction right now) is not silent: it is skipped."""
        query = (
            select(Job)
            .where(Job.status == "running", Job.heartbeat_at < self._now(-stale_after_seconds))
            .order_by(Job.id)
        )
        if self._sessions.backend == "postgresql":
            query = query.with_for_update(skip_locked=True)
        reclaimed: list[int] = []
        with self._sessions.write() as session:
            for job in session.scalars(query).all():
                message = f"worker {job.worker} stopped sending heartbeats"
                if job.run_id is not None:
                    session.execute(
                        update(Run)
                        .where(Run.id == job.run_id, Run.status == "running")
                        .values(status="interrupted", error=message, finished_at=self._now())
                    )
                if job.worker_id is not None:
                    session.execute(
                        update(Worker)
                        .where(and_(Worker.id == job.worker_id, Worker.current_job_id == job.id))
                        .values(current_job_id=None)
                    )
                job.stale_reclaims = (job.stale_reclaims or 0) + 1
                if job.stale_reclaims >= MAX_STALE_RECLAIMS:
                    job.status = "failed"
                    job.error = f"{message}; gave up after {job.stale_reclaims} silent workers"
                    job.finished_at = self._now()
                else:
                    job.status = "queued"
                    job.error = message
                job.worker, job.worker_id, job.claimed_by_machine = None, None, None
                reclaimed.append(job.id)
        return reclaimed

    @survives_outages
    def status(self, job_id: int) -> str | None:
        with self._sessions.read() as session:
            return session.scalar(select(Job.status).where(Job.id == job_id))
