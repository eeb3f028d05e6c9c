"""The processes that claim jobs (``store.workers``): registered when they start, seen by the
database server's clock while they live, marked stopped when they exit. A worker that stopped
being seen for longer than its own stale limit is dead (killed, frozen, or its machine down)."""

from __future__ import annotations

from sqlalchemy import select, update

from store.clock import server_now
from store.outage import survives_outages
from store.records import WorkerRecord
from store.results import Sessions
from store.schema import Worker

WORKER_KINDS = ("worker", "run")


class Workers:
    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    @survives_outages
    def register(
        self, *, name: str, kind: str, machine_name: str, host: str, pid: int, stale_after_seconds: float
    ) -> WorkerRecord:
        if kind not in WORKER_KINDS:
            raise ValueError(f"a worker's kind is one of {WORKER_KINDS}, not {kind!r}")
        now = server_now(self._sessions.backend)
        with self._sessions.write() as session:
            row = Worker(
                name=name,
                kind=kind,
                machine_name=machine_name,
                host=host,
                pid=pid,
                started_at=now,
                last_seen_at=now,
                stale_after_seconds=stale_after_seconds,
            )
            session.add(row)
            session.flush()
            return WorkerRecord(row.id, name, machine_name, kind)

    @survives_outages
    def touch(self, worker_id: int) -> None:
        """Seen now (the idle loop; a running job's heartbeat does it too)."""
        with self._sessions.write() as session:
            session.execute(
                update(Worker).where(Worker.id == worker_id).values(last_seen_at=server_now(self._sessions.backend))
            )

    @survives_outages
    def stop(self, worker_id: int) -> None:
        with self._sessions.write() as session:
            now = server_now(self._sessions.backend)
            session.execute(update(Worker).where(Worker.id == worker_id).values(stopped_at=now, last_seen_at=now))

    @survives_outages
    def live(self, machine_name: str, kind: str = "worker") -> list[int]:
        """Ids of the workers of this kind that serve this machine now: not stopped, and seen
        within their own stale limit."""
        backend = self._sessions.backend
        query = select(Worker.id).where(
            Worker.machine_name == machine_name,
            Worker.kind == kind,
            Worker.stopped_at.is_(None),
            Worker.last_seen_at >= server_now(backend, -Worker.stale_after_seconds),
        )
        with self._sessions.read() as session:
            return list(session.scalars(query.order_by(Worker.id)))
