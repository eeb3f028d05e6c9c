"""The job queue: enqueue a sweep, claim it atomically, heartbeat, progress, finish, reclaim.

No two workers ever hold the same job: PostgreSQL claims with ``SELECT … FOR UPDATE SKIP
LOCKED``; SQLite claims inside a ``BEGIN IMMEDIATE`` transaction, which admits one writer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update

from store.records import JobRecord
from store.results import Sessions
from store.schema import Job, Run, utc_now

# A job whose worker died this many times is failed instead of requeued again.
MAX_ATTEMPTS = 3


class JobQueue:
    """The store's queue (``store.jobs``)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

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
            )
            session.add(job)
            session.flush()
            return job.id

    def claim(self, worker: str, machine_name: str) -> JobRecord | None:
        """Take the oldest queued job this machine may run, or None when there is none."""
        query = (
            select(Job)
            .where(Job.status == "queued", or_(Job.machine_name.is_(None), Job.machine_name == machine_name))
            .order_by(Job.created_at, Job.id)
            .limit(1)
        )
        if self._sessions.backend == "postgresql":
            query = query.with_for_update(skip_locked=True)
        with self._sessions.write() as session:
            job = session.scalar(query)
            if job is None:
                return None
            now = utc_now()
            job.status = "running"
            job.worker = worker
            job.claimed_at = now
            job.heartbeat_at = now
            job.attempts += 1
            return JobRecord(
                id=job.id,
                spec=job.spec,
                preset=job.preset,
                machine_name=job.machine_name,
                run_id=job.run_id,
                attempts=job.attempts,
            )

    def attach_run(self, job_id: int, run_id: int) -> None:
        with self._sessions.write() as session:
            session.execute(update(Job).where(Job.id == job_id).values(run_id=run_id))

    def heartbeat(self, job_id: int, worker: str) -> bool:
        """Refresh the heartbeat; False when the job is no longer this worker's."""
        with self._sessions.write() as session:
            result = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.worker == worker, Job.status == "running")
                .values(heartbeat_at=utc_now())
            )
            return bool(getattr(result, "rowcount", 0))

    def progress(self, job_id: int, cases_done: int, cases_total: int) -> None:
        with self._sessions.write() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(cases_done=cases_done, cases_total=cases_total, heartbeat_at=utc_now())
            )

    def finish(self, job_id: int, status: str, error: str | None = None) -> None:
        if status not in ("done", "failed", "interrupted"):
            raise ValueError(f"a job finishes as done, failed or interrupted, not {status!r}")
        with self._sessions.write() as session:
            session.execute(
                update(Job).where(Job.id == job_id).values(status=status, error=error, finished_at=utc_now())
            )

    def reclaim_stale(self, stale_after_seconds: float) -> list[int]:
        """Requeue running jobs whose heartbeat is older than the limit; their runs are marked
        interrupted until a worker resumes them. A job that died MAX_ATTEMPTS times is failed."""
        cutoff = utc_now() - timedelta(seconds=stale_after_seconds)
        reclaimed: list[int] = []
        with self._sessions.write() as session:
            stale = session.scalars(
                select(Job).where(Job.status == "running", Job.heartbeat_at < cutoff).order_by(Job.id)
            ).all()
            for job in stale:
                message = f"worker {job.worker} stopped sending heartbeats"
                if job.run_id is not None:
                    session.execute(
                        update(Run)
                        .where(Run.id == job.run_id, Run.status == "running")
                        .values(status="interrupted", error=message, finished_at=utc_now())
                    )
                if job.attempts >= MAX_ATTEMPTS:
                    job.status = "failed"
                    job.error = f"{message}; gave up after {job.attempts} attempts"
                    job.finished_at = utc_now()
                else:
                    job.status = "queued"
                    job.error = message
                job.worker = None
                reclaimed.append(job.id)
        return reclaimed

    def status(self, job_id: int) -> str | None:
        with self._sessions.read() as session:
            return session.scalar(select(Job.status).where(Job.id == job_id))
