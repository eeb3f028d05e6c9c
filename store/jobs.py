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

import uuid
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from store.clock import server_now
from store.engine import IDLE_IN_TRANSACTION_MS
from store.errors import ClaimLost, StoreError
from store.outage import survives_outages
from store.records import Claim, JobRecord, WorkerRecord
from store.results import Sessions, new_run
from store.schema import Job, Run, Worker

# A job whose worker went silent this many times is failed instead of requeued again.
MAX_STALE_RECLAIMS = 3
# How long a reclaim waits on a running job's row lock: past the server's end of a frozen
# worker's idle transaction (store.engine.IDLE_IN_TRANSACTION_MS), with room for a loaded server.
RECLAIM_LOCK_WAIT_MS = IDLE_IN_TRANSACTION_MS + 5_000
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for a lock_timeout that ran out
JOB_END_STATUSES = ("done", "failed", "interrupted")
# A job someone called off (`decodelab cancel`, the dashboard's button): never claimed again.
CANCELLED = "cancelled"


def new_request_id() -> str:
    """One id per enqueue or claim call, the same for all its retries."""
    return str(uuid.uuid4())


def job_record(row: Any, worker: WorkerRecord) -> JobRecord:
    return JobRecord(
        id=row.id,
        spec=row.spec,
        preset=row.preset,
        machine_name=row.machine_name,
        run_id=row.run_id,
        attempts=row.attempts,
        worker_id=worker.id,
    )


def owned_by(claim: Claim) -> tuple[ColumnElement[bool], ...]:
    """The job row that ``claim`` still owns."""
    return (
        Job.id == claim.job_id,
        Job.worker_id == claim.worker_id,
        Job.attempts == claim.attempt,
        Job.status == "running",
    )


def check_claim(job: Job, claim: Claim) -> None:
    """ClaimLost unless ``claim`` is the job's current claim."""
    if (job.status, job.worker_id, job.attempts) != ("running", claim.worker_id, claim.attempt):
        raise ClaimLost(f"job {claim.job_id} is no longer this worker's (claim attempt {claim.attempt})")


def owned_job(session: Session, backend: str, claim: Claim) -> Job:
    """The claimed job, row-locked, or ClaimLost when the claim no longer holds."""
    query = select(Job).where(Job.id == claim.job_id)
    if backend == "postgresql":
        query = query.with_for_update()
    job = session.scalars(query).one()
    check_claim(job, claim)
    return job


class JobQueue:
    """The store's queue (``store.jobs``)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    def _now(self, offset_seconds: float = 0.0) -> Any:
        return server_now(self._sessions.backend, offset_seconds)

    def enqueue(
        self,
        spec: dict[str, Any],
        *,
        preset: str | None = None,
        machine_name: str | None = None,
        cases_total: int = 0,
        estimated_seconds: float | None = None,
        request_id: str | None = None,
    ) -> int:
        """Add a queued job; returns its id. Every try of one call carries one request id, so a
        retry after a lost reply finds the job its first try added instead of adding another."""
        return self._enqueue(spec, preset, machine_name, cases_total, request_id or new_request_id(), estimated_seconds)

    @survives_outages
    def _enqueue(
        self,
        spec: dict[str, Any],
        preset: str | None,
        machine_name: str | None,
        cases_total: int,
        request_id: str,
        estimated_seconds: float | None = None,
    ) -> int:
        with self._sessions.write() as session:
            earlier = session.scalar(select(Job.id).where(Job.request_id == request_id))
            if earlier is not None:
                return earlier
            return self._add_queued(session, spec, preset, machine_name, cases_total, request_id, estimated_seconds).id

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

    def _take(self, session: Session, candidate: Any, worker: WorkerRecord, request_id: str) -> JobRecord | None:
        """Claim the job ``candidate`` selects (a job id, or a scalar subquery of one) in one
        statement, UPDATE … RETURNING: a claim is one round trip, however busy the queue."""
        now = self._now()
        row = session.execute(
            update(Job)
            .where(Job.id == candidate)
            .values(
                status="running",
                worker=worker.name,
                worker_id=worker.id,
                claimed_by_machine=worker.machine_name,
                claimed_at=now,
                heartbeat_at=now,
                attempts=Job.attempts + 1,
                claim_request_id=request_id,
            )
            .returning(Job.id, Job.spec, Job.preset, Job.machine_name, Job.run_id, Job.attempts)
        ).one_or_none()
        return None if row is None else job_record(row, worker)

    def _claimed_by(self, session: Session, request_id: str, worker: WorkerRecord) -> JobRecord | None:
        """The job an earlier try of this claim took, while that claim still holds."""
        row = session.execute(
            select(Job.id, Job.spec, Job.preset, Job.machine_name, Job.run_id, Job.attempts).where(
                Job.claim_request_id == request_id, Job.status == "running", Job.worker_id == worker.id
            )
        ).one_or_none()
        return None if row is None else job_record(row, worker)

    def claim(self, worker: WorkerRecord, *, request_id: str | None = None) -> JobRecord | None:
        """The oldest queued job this machine may run, or None when there is none or when a
        job already runs on this machine (the worker waits: one timing job per machine). A
        retry after a lost reply gets the job its first try claimed (one request id)."""
        return self._claim(worker, request_id or new_request_id())

    @survives_outages
    def _claim(self, worker: WorkerRecord, request_id: str) -> JobRecord | None:
        machine = worker.machine_name
        running_here = select(Job.id).where(Job.status == "running", Job.claimed_by_machine == machine).exists()
        candidate = (
            select(Job.id)
            .where(Job.status == "queued", or_(Job.machine_name.is_(None), Job.machine_name == machine), ~running_here)
            .order_by(Job.created_at, Job.id)
            .limit(1)
        )
        if self._sessions.backend == "postgresql":
            candidate = candidate.with_for_update(skip_locked=True)
        with self._sessions.write() as session:
            self._machine_lock(session, machine)
            earlier = self._claimed_by(session, request_id, worker)
            if earlier is not None:
                return earlier
            return self._take(session, candidate.scalar_subquery(), worker, request_id)

    def claim_new(
        self,
        spec: dict[str, Any],
        worker: WorkerRecord,
        *,
        preset: str | None = None,
        cases_total: int = 0,
        estimated_seconds: float | None = None,
        request_id: str | None = None,
    ) -> JobRecord | None:
        """A job for a sweep run from a terminal, pinned to this machine and claimed at once,
        so the machine's slot is taken as by any job; None while another job runs here. A
        retry after a lost reply gets the job its first try added and claimed."""
        return self._claim_new(spec, worker, preset, cases_total, request_id or new_request_id(), estimated_seconds)

    @survives_outages
    def _claim_new(
        self,
        spec: dict[str, Any],
        worker: WorkerRecord,
        preset: str | None,
        cases_total: int,
        request_id: str,
        estimated_seconds: float | None = None,
    ) -> JobRecord | None:
        with self._sessions.write() as session:
            self._machine_lock(session, worker.machine_name)
            earlier = self._claimed_by(session, request_id, worker)
            if earlier is not None:
                return earlier
            if self._running_on(session, worker.machine_name) is not None:
                return None
            job = self._add_queued(
                session, spec, preset, worker.machine_name, cases_total, request_id, estimated_seconds
            )
            return self._take(session, job.id, worker, request_id)

    def _add_queued(
        self,
        session: Session,
        spec: dict[str, Any],
        preset: str | None,
        machine_name: str | None,
        cases_total: int,
        request_id: str,
        estimated_seconds: float | None = None,
    ) -> Job:
        job = Job(
            request_id=request_id,
            spec=spec,
            preset=preset,
            machine_name=machine_name,
            status="queued",
            cases_total=cases_total,
            estimated_seconds=estimated_seconds,
            cases_done=0,
            created_at=self._now(),
        )
        session.add(job)
        session.flush()
        return job

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
        """The claimed job's run: the one it already has, set running again (a resume on the
        machine that began it), or a new one attached to it in the same transaction. A run's
        cases all come from one machine: a job taken over on another machine starts a new run,
        and the partial one is marked abandoned (its cases kept). Returns (run id, resumed)."""
        with self._sessions.write() as session:
            job = owned_job(session, self._sessions.backend, claim)
            if job.run_id is not None:
                earlier_machine = session.scalar(select(Run.machine_id).where(Run.id == job.run_id))
                if earlier_machine == machine_id:
                    session.execute(
                        update(Run).where(Run.id == job.run_id).values(status="running", error=None, finished_at=None)
                    )
                    return job.run_id, True
            run_id = new_run(
                session, machine_id=machine_id, spec=spec, code_version=code_version, model_id=model_id, preset=preset
            )
            if job.run_id is not None:
                session.execute(
                    update(Run)
                    .where(Run.id == job.run_id)
                    .values(
                        status="abandoned",
                        error=f"job {job.id} continued on machine {job.claimed_by_machine} as run {run_id}",
                        finished_at=func.coalesce(Run.finished_at, self._now()),
                    )
                )
            job.run_id = run_id
            return run_id, False

    @survives_outages
    def adopt_run(self, claim: Claim, run_id: int) -> None:
        """Give the claimed job an ended run to finish (`decodelab run --only-unmeasured`): its
        begin_run then resumes that run, and the job measures only the cases it lacks. Refused
        (ClaimLost) while another job is running that run."""
        with self._sessions.write() as session:
            job = owned_job(session, self._sessions.backend, claim)
            running = session.scalar(
                select(Job.id).where(Job.run_id == run_id, Job.status == "running", Job.id != job.id)
            )
            if running is not None:
                raise ClaimLost(f"run {run_id} is being run by job {running}")
            job.run_id = run_id

    @survives_outages
    def heartbeat(self, claim: Claim) -> bool:
        """Refresh the job's heartbeat and its worker's last seen; False when the job is no
        longer this worker's (the worker must then stop that job at once). A job that this
        very claim already ended (done, failed, interrupted) is not lost: a beat that lands
        after the run's own finish (the heartbeat thread races the main thread's finish, more
        often while an outage delays both) returns True and changes nothing."""
        with self._sessions.write() as session:
            result = session.execute(update(Job).where(*owned_by(claim)).values(heartbeat_at=self._now()))
            session.execute(update(Worker).where(Worker.id == claim.worker_id).values(last_seen_at=self._now()))
            if getattr(result, "rowcount", 0):
                return True
            ended = session.execute(
                select(Job.id).where(
                    Job.id == claim.job_id,
                    Job.worker_id == claim.worker_id,
                    Job.attempts == claim.attempt,
                    Job.status.in_(JOB_END_STATUSES),
                )
            ).one_or_none()
            return ended is not None

    @survives_outages
    def progress(self, claim: Claim, cases_done: int, cases_total: int) -> None:
        with self._sessions.write() as session:
            result = session.execute(
                update(Job)
                .where(*owned_by(claim))
                .values(cases_done=cases_done, cases_total=cases_total, heartbeat_at=self._now())
            )
            if not getattr(result, "rowcount", 0):
                raise ClaimLost(f"job {claim.job_id} is no longer this worker's (claim attempt {claim.attempt})")

    @survives_outages
    def finish(self, claim: Claim, status: str, *, error: str | None = None, wall_seconds: float | None = None) -> None:
        """End the claimed job (done, failed or interrupted) and its run with it, in one
        transaction. Finishing a job this claim already finished the same way changes nothing
        (a retry after a dropped connection); any other lost claim raises ClaimLost."""
        if status not in JOB_END_STATUSES:
            raise ValueError(f"a job finishes as {', '.join(JOB_END_STATUSES)}, not {status!r}")
        with self._sessions.write() as session:
            # One conditional UPDATE (it locks the job row first, as everywhere): the common
            # case is a single round trip, plus one for the run.
            ended = session.execute(
                update(Job)
                .where(*owned_by(claim))
                .values(status=status, error=error, finished_at=self._now())
                .returning(Job.run_id)
            ).one_or_none()
            if ended is None:
                job = self._locked(session, claim.job_id)
                if (job.status, job.worker_id, job.attempts) == (status, claim.worker_id, claim.attempt):
                    return
                check_claim(job, claim)
            elif ended.run_id is not None:
                self._end_run(session, ended.run_id, status, error, wall_seconds)

    @survives_outages
    def requeue(self, claim: Claim, *, error: str, wall_seconds: float | None = None) -> None:
        """Give the claimed job back (a worker stopped by SIGTERM or Ctrl-C): its run is marked
        interrupted and the next worker to claim the job resumes that run."""
        with self._sessions.write() as session:
            job = self._locked(session, claim.job_id)
            # Already given back by this claim (a retry): the owner is cleared, the attempt kept.
            if (job.status, job.worker_id, job.attempts) == ("queued", None, claim.attempt):
                return
            check_claim(job, claim)
            if job.run_id is not None:
                self._end_run(session, job.run_id, "interrupted", error, wall_seconds)
            job.status, job.error = "queued", error
            job.worker, job.worker_id, job.claimed_by_machine = None, None, None

    def _locked(self, session: Session, job_id: int) -> Job:
        query = select(Job).where(Job.id == job_id)
        if self._sessions.backend == "postgresql":
            query = query.with_for_update()
        return session.scalars(query).one()

    def _end_run(self, session: Session, run_id: int, status: str, error: str | None, wall: float | None) -> None:
        values: dict[str, Any] = {"status": status, "error": error, "finished_at": self._now()}
        if wall is not None:
            # A resumed run's wall time is the sum of its attempts (each adds its own).
            values["wall_seconds"] = func.coalesce(Run.wall_seconds, 0.0) + wall
        session.execute(update(Run).where(Run.id == run_id).values(**values))

    @survives_outages
    def reclaim_stale(self, stale_after_seconds: float) -> list[int]:
        """Requeue running jobs whose heartbeat is older than their owner's own stale limit
        (recorded with the worker; ``stale_after_seconds`` only for a job whose worker row is
        gone), by the server's clock: a taker's shorter limit never takes a live job. Their
        runs are marked interrupted until a worker resumes them. A job whose worker went
        silent MAX_STALE_RECLAIMS times is failed. A job whose row is locked (its worker is in
        a transaction) is waited for, up to RECLAIM_LOCK_WAIT_MS: a live worker's transaction
        ends in milliseconds (the row is then read again, its heartbeat fresh), and a frozen
        worker's is ended by the server after IDLE_IN_TRANSACTION_MS. Skipping it instead let a
        worker frozen inside a transaction keep its job for as long as it stayed frozen."""
        owners_limit = func.coalesce(Worker.stale_after_seconds, stale_after_seconds)
        query = (
            select(Job)
            .outerjoin(Worker, Worker.id == Job.worker_id)
            .where(Job.status == "running", Job.heartbeat_at < server_now(self._sessions.backend, -owners_limit))
            .order_by(Job.id)
        )
        if self._sessions.backend == "postgresql":
            query = query.with_for_update(of=Job)
        reclaimed: list[int] = []
        with self._sessions.write() as session:
            if self._sessions.backend == "postgresql":
                session.execute(text(f"SET LOCAL lock_timeout = {RECLAIM_LOCK_WAIT_MS}"))
                try:
                    stale = session.scalars(query).all()
                except OperationalError as error:
                    if getattr(error.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                        raise
                    session.rollback()
                    return []  # held longer than a frozen session can be: a long transaction; next poll
            else:
                stale = session.scalars(query).all()
            for job in stale:
                message = f"worker {job.worker} stopped sending heartbeats"
                if job.run_id is not None:
                    session.execute(
                        update(Run)
                        .where(Run.id == job.run_id, Run.status == "running")
                        .values(status="interrupted", error=message, finished_at=self._now())
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
    def cancel(self, job_id: int) -> str:
        """Call off a queued or running job; returns the status it had. A running job's worker
        finds its claim gone at its next heartbeat or write and stops without writing more;
        its run is marked interrupted. StoreError for a job that is missing or already ended."""
        with self._sessions.write() as session:
            query = select(Job).where(Job.id == job_id)
            if self._sessions.backend == "postgresql":
                query = query.with_for_update()
            job = session.scalars(query).one_or_none()
            if job is None:
                raise StoreError(f"JOB: no job {job_id} in this store")
            if job.status not in ("queued", "running"):
                raise StoreError(f"JOB: job {job_id} is {job.status} already (allowed: a queued or running job)")
            was = job.status
            if job.run_id is not None and was == "running":
                self._end_run(session, job.run_id, "interrupted", "cancelled", None)
            job.status, job.error, job.finished_at = CANCELLED, "cancelled", self._now()
            job.worker, job.worker_id, job.claimed_by_machine = None, None, None
            return was

    @survives_outages
    def pending(self) -> int:
        """How many jobs are queued or running (what a dashboard's --max-queued bounds)."""
        with self._sessions.read() as session:
            return int(
                session.scalar(select(func.count()).select_from(Job).where(Job.status.in_(("queued", "running")))) or 0
            )

    @survives_outages
    def status(self, job_id: int) -> str | None:
        with self._sessions.read() as session:
            return session.scalar(select(Job.status).where(Job.id == job_id))
