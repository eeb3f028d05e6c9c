"""What the runner writes and reads back: machines, models, runs and cases, as plain records
(no pandas). One transaction per case: a case, its measurements and their samples are whole or
absent. A run that a job owns takes cases and status changes only from that job's current
claim (the job queue's fencing); a run without a job (a benchmark, a test) from anyone."""

from __future__ import annotations

import os
import signal
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sqlalchemy import Insert, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from store.clock import server_now
from store.compatibility import current_metric, current_params, superseded
from store.errors import ClaimLost
from store.outage import OutageGuard, survives_outages
from store.records import CaseRecord, Claim, MachineRecord, ModelRecord, RecordedMeasurement, case_key
from store.schema import Case, Job, Machine, Measurement, Model, Run, Sample, utc_now

# abandoned: a job's partial run that another machine took over (it continued as a new run).
# The statuses of a run that ended: its record no longer changes.
ENDED_RUN_STATUSES = ("done", "failed", "interrupted", "abandoned")
RUN_STATUSES = ("queued", "running", *ENDED_RUN_STATUSES)


class Sessions(Protocol):
    """What a part of the store needs of it: transactions and the backend's name."""

    backend: str
    outages: OutageGuard

    def read(self) -> AbstractContextManager[Session]: ...

    def write(self) -> AbstractContextManager[Session]: ...


def insert_or_skip(backend: str, table: Any, conflict_columns: list[str]) -> Insert:
    """An INSERT that does nothing when a row with the same ``conflict_columns`` exists (the
    dialect's ON CONFLICT DO NOTHING), so "already there" is a result, not an error to parse."""
    dialect_insert = postgresql.insert if backend == "postgresql" else sqlite.insert
    return dialect_insert(table).on_conflict_do_nothing(index_elements=conflict_columns)


class Results:
    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    # ---- machines and models -------------------------------------------------------------

    @survives_outages
    def machine_id(self, machine: MachineRecord) -> int:
        """The id of this fingerprint, inserting it the first time it is seen."""
        fingerprint = machine.fingerprint()
        with self._sessions.write() as session:
            session.execute(
                insert_or_skip(self._sessions.backend, Machine, ["fingerprint"]).values(
                    fingerprint=fingerprint, created_at=utc_now(), **machine.__dict__
                )
            )
            return session.scalars(select(Machine.id).where(Machine.fingerprint == fingerprint)).one()

    @survives_outages
    def save_model(self, model: ModelRecord) -> int:
        """Store a checkpoint once by its weights hash; returns its id either way."""
        fields = {key: value for key, value in model.__dict__.items() if key != "id"}
        with self._sessions.write() as session:
            session.execute(
                insert_or_skip(self._sessions.backend, Model, ["weights_hash"]).values(created_at=utc_now(), **fields)
            )
            return session.scalars(select(Model.id).where(Model.weights_hash == model.weights_hash)).one()

    @survives_outages
    def find_model(self, *, recipe_hash: str | None = None, weights_hash: str | None = None) -> ModelRecord | None:
        """The newest checkpoint with this training recipe, or with exactly these weights."""
        query = select(Model).order_by(Model.id.desc()).limit(1)
        if recipe_hash is not None:
            query = query.where(Model.recipe_hash == recipe_hash)
        if weights_hash is not None:
            query = query.where(Model.weights_hash == weights_hash)
        with self._sessions.read() as session:
            row = session.scalar(query)
            if row is None:
                return None
            return ModelRecord(
                weights_hash=row.weights_hash,
                recipe_hash=row.recipe_hash,
                config=row.config,
                corpus_hash=row.corpus_hash,
                train_loss=row.train_loss,
                val_loss=row.val_loss,
                parameter_count=row.parameter_count,
                weight_bytes=row.weight_bytes,
                weights=row.weights,
                id=row.id,
            )

    # ---- runs and cases ------------------------------------------------------------------

    @survives_outages
    def start_run(
        self,
        *,
        machine_id: int,
        spec: dict[str, Any],
        code_version: str,
        model_id: int | None,
        preset: str | None = None,
    ) -> int:
        """A run of no job (a benchmark run, a test's); a job's run starts with jobs.begin_run."""
        with self._sessions.write() as session:
            return new_run(
                session, machine_id=machine_id, spec=spec, code_version=code_version, model_id=model_id, preset=preset
            )

    @survives_outages
    def record_case(self, run_id: int, case: CaseRecord, claim: Claim | None = None) -> int | None:
        """Write a case, its measurements and their samples in one transaction.

        Returns the case id, or None when the run already holds this case (a resumed run, or a
        retry of a case whose commit the connection dropped). ClaimLost when a job owns the run
        and ``claim`` is not its current claim: a worker that lost its job writes nothing.
        """
        key = case_key(case.params)
        with self._sessions.write() as session:
            check_owner(session, self._sessions.backend, run_id, claim)
            freeze_here_if_asked()
            # An earlier attempt that could not measure this case left it unmeasured: this one replaces it.
            session.execute(
                delete(Case).where(
                    Case.run_id == run_id,
                    Case.experiment == case.experiment,
                    Case.case_key == key,
                    Case.unmeasured_reason.is_not(None),
                )
            )
            case_id = session.scalar(
                insert_or_skip(self._sessions.backend, Case, ["run_id", "experiment", "case_key"])
                .values(
                    run_id=run_id,
                    experiment=case.experiment,
                    case_key=key,
                    params=case.params,
                    created_at=utc_now(),
                    unmeasured_reason=case.unmeasured_reason,
                )
                .returning(Case.id)
            )
            if case_id is None:
                return None
            write_measurements(session, run_id, case_id, case)
            return case_id

    @survives_outages
    def recorded_case_keys(self, run_id: int) -> set[tuple[str, str]]:
        """The cases this run holds measured: a resumed run skips these and measures the rest,
        the unmeasured ones included."""
        query = select(Case.experiment, Case.case_key).where(Case.run_id == run_id, Case.unmeasured_reason.is_(None))
        with self._sessions.read() as session:
            return {(experiment, key) for experiment, key in session.execute(query)}

    @survives_outages
    def unmeasured_cases(self, run_id: int) -> list[tuple[str, dict[str, Any], str]]:
        """(experiment, params, reason) of each case of the run that could not be measured."""
        query = (
            select(Case.experiment, Case.params, Case.unmeasured_reason)
            .where(Case.run_id == run_id, Case.unmeasured_reason.is_not(None))
            .order_by(Case.id)
        )
        with self._sessions.read() as session:
            rows = session.execute(query)
            return [(experiment, current_params(experiment, params), reason) for experiment, params, reason in rows]

    @survives_outages
    def measurements(self, run_id: int, experiment: str) -> list[RecordedMeasurement]:
        """What this run recorded for ``experiment`` so far, in order: how a summary case (a fit
        over lengths) sees the cases before it, also after a resume."""
        query = (
            select(Case.id, Case.params, Measurement.metric, Measurement.value, Measurement.unit)
            .join(Case, Case.id == Measurement.case_id)
            .where(Measurement.run_id == run_id, Measurement.experiment == experiment)
            .order_by(Measurement.id)
        )
        with self._sessions.read() as session:
            rows = list(session.execute(query))
        dropped = superseded([row[0] for row in rows], [row[2] for row in rows])
        return [
            RecordedMeasurement(current_params(experiment, params), current_metric(metric), value, unit)
            for (_, params, metric, value, unit), drop in zip(rows, dropped, strict=True)
            if not drop
        ]

    @survives_outages
    def metric_values(self, run_id: int, metric: str) -> list[float]:
        """Every value of ``metric`` this run recorded, in order: the machine's speed at each timed
        case (runner.measure.reference), which the run's last lines sum up."""
        query = (
            select(Measurement.value)
            .where(Measurement.run_id == run_id, Measurement.metric == metric)
            .order_by(Measurement.id)
        )
        with self._sessions.read() as session:
            return [float(value) for (value,) in session.execute(query)]

    @survives_outages
    def finish_run(
        self, run_id: int, status: str, *, error: str | None = None, wall_seconds: float | None = None
    ) -> None:
        """End a run of no job (a job's run ends with jobs.finish, under its claim)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
        with self._sessions.write() as session:
            check_owner(session, self._sessions.backend, run_id, None)
            values: dict[str, Any] = {
                "status": status,
                "error": error,
                "finished_at": server_now(self._sessions.backend),
            }
            if wall_seconds is not None:
                values["wall_seconds"] = wall_seconds
            session.execute(update(Run).where(Run.id == run_id).values(**values))

    @survives_outages
    def run_to_retry(self, run_id: int) -> tuple[dict[str, Any], str | None, int, str] | None:
        """(spec, preset, machine id, status) of a run, or None where the store has no such run."""
        with self._sessions.read() as session:
            run = session.get(Run, run_id)
            return None if run is None else (run.spec, run.preset, run.machine_id, run.status)

    @survives_outages
    def run_exists(self, run_id: int) -> bool:
        with self._sessions.read() as session:
            return session.get(Run, run_id) is not None


def new_run(
    session: Session,
    *,
    machine_id: int,
    spec: dict[str, Any],
    code_version: str,
    model_id: int | None,
    preset: str | None,
) -> int:
    model_hash = session.scalar(select(Model.weights_hash).where(Model.id == model_id)) if model_id else None
    run = Run(
        machine_id=machine_id,
        model_id=model_id,
        model_hash=model_hash,
        spec=spec,
        code_version=code_version,
        preset=preset,
        status="running",
        # The server's clock, as for jobs: runs of many machines are ordered by one clock.
        started_at=server_now(session.get_bind().dialect.name),
    )
    session.add(run)
    session.flush()
    return run.id


# A test hook (tests/test_fleet.py): the process stops itself (SIGSTOP) inside the transaction of
# its N-th case write, its job's row locked, as a VM pause or a long GC would leave it.
FREEZE_VARIABLE = "DECODELAB_TEST_FREEZE_IN_CASE_WRITE"
_case_writes = 0


def freeze_here_if_asked() -> None:
    global _case_writes
    wanted = os.environ.get(FREEZE_VARIABLE)
    if not wanted:
        return
    _case_writes += 1
    if _case_writes == int(wanted):
        os.kill(os.getpid(), signal.SIGSTOP)


def check_owner(session: Session, backend: str, run_id: int, claim: Claim | None) -> None:
    """ClaimLost unless the writer may change this run: a run that a job owns only through
    that job's current claim (its row share-locked until the write commits, so a reclaim waits
    for the write instead of slipping in between check and write)."""
    query = select(Job.id, Job.worker_id, Job.attempts, Job.status).where(Job.run_id == run_id)
    if backend == "postgresql":
        query = query.with_for_update(read=True)
    owners = session.execute(query).all()
    if not owners and claim is None:
        return
    if claim is not None and any(
        tuple(owner) == (claim.job_id, claim.worker_id, claim.attempt, "running") for owner in owners
    ):
        return
    held = f"job {owners[0][0]}" if owners else "no job"
    raise ClaimLost(f"run {run_id} belongs to {held}; this writer holds {claim or 'no claim'}")


def write_measurements(session: Session, run_id: int, case_id: int, case: CaseRecord) -> None:
    """A case's measurements and their samples, in bulk, inside the caller's transaction."""
    if not case.measurements:
        return
    measurement_ids = session.scalars(
        insert(Measurement).returning(Measurement.id, sort_by_parameter_order=True),
        [
            {
                "case_id": case_id,
                "run_id": run_id,
                "experiment": case.experiment,
                "metric": measurement.metric,
                "value": float(measurement.value),
                "unit": measurement.unit,
            }
            for measurement in case.measurements
        ],
    ).all()
    samples = [
        {
            "measurement_id": measurement_id,
            "pair_index": sample.pair_index,
            "side": sample.side,
            "seconds": sample.seconds,
            "round_index": sample.round_index,
        }
        for measurement_id, measurement in zip(measurement_ids, case.measurements, strict=True)
        for sample in measurement.samples
    ]
    if samples:
        session.execute(insert(Sample), samples)
