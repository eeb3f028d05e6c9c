"""Machines' drift figures (``store.drift``): how far a timed value moves between two runs of
the same sweep on one machine, learned from its runs (analysis.review_inputs.record_machine_drift) and kept
with the machine row, so that the Review page and the reports show what the machine has shown."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update

from store.outage import survives_outages
from store.results import Sessions
from store.schema import Machine, Run, utc_now

# The quantile of the figures kept before migration 0013 recorded it (its column is NULL there).
QUANTILE_BEFORE_0013 = 0.95


@dataclass(frozen=True)
class DriftRecord:
    machine: str
    log_ratio: float | None  # None: fewer moves than a figure needs
    moves: int
    run_id: int | None  # the run whose finish last updated it
    updated_at: datetime
    quantile: float = QUANTILE_BEFORE_0013  # the share of moves within it


class Drift:
    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    @survives_outages
    def save(self, run_id: int, log_ratio: float | None, moves: int, quantile: float) -> None:
        """Set the drift figure of ``run_id``'s machine, learned over its runs up to that one: the
        ``quantile`` quantile of ``moves`` moves."""
        if log_ratio is not None and not log_ratio >= 0:
            raise ValueError(f"log_ratio must be a non-negative number, got {log_ratio!r}")
        if moves < 0:
            raise ValueError(f"moves must be >= 0, got {moves}")
        if not 0 < quantile < 1:
            raise ValueError(f"quantile must be between 0 and 1, got {quantile!r}")
        with self._sessions.write() as session:
            machine_id = session.scalar(select(Run.machine_id).where(Run.id == run_id))
            if machine_id is None:
                raise ValueError(f"no run {run_id}")
            session.execute(
                update(Machine)
                .where(Machine.id == machine_id)
                .values(
                    drift_log_ratio=log_ratio,
                    drift_moves=moves,
                    drift_quantile=quantile,
                    drift_run_id=run_id,
                    drift_updated_at=utc_now(),
                )
            )

    @survives_outages
    def of_fingerprint(self, fingerprint: str) -> DriftRecord | None:
        """The machine's stored drift figure (None: none of its runs has finished since it was kept)."""
        with self._sessions.read() as session:
            row = session.execute(
                select(
                    Machine.name,
                    Machine.drift_log_ratio,
                    Machine.drift_moves,
                    Machine.drift_quantile,
                    Machine.drift_run_id,
                    Machine.drift_updated_at,
                ).where(Machine.fingerprint == fingerprint)
            ).first()
        if row is None or row.drift_updated_at is None:
            return None
        return DriftRecord(
            row.name,
            row.drift_log_ratio,
            int(row.drift_moves or 0),
            row.drift_run_id,
            row.drift_updated_at,
            QUANTILE_BEFORE_0013 if row.drift_quantile is None else row.drift_quantile,
        )
