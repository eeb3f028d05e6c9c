"""The Store: owns the engine and sessions; the write API for the runner and the read API
for the dashboard. The only code in decodelab that speaks SQL, with ``store/jobs.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pandas as pd
from sqlalchemy import Select, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.expression import Selectable

from store.engine import check_and_upgrade, create_store_engine, mask_url, resolve_url
from store.errors import StoreError
from store.jobs import JobQueue
from store.records import CaseRecord, MachineRecord, ModelRecord
from store.schema import Case, Machine, Measurement, Model, Run, Sample, utc_now

RUN_STATUSES = ("queued", "running", "done", "failed", "interrupted")


def case_key(params: dict[str, Any]) -> str:
    """Canonical JSON of a case's params: equal params give equal keys on every backend."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class Store(JobQueue):
    """One experiment store (a SQLite file or a PostgreSQL database)."""

    def __init__(self, url: str | None = None, *, auto_upgrade: bool = True) -> None:
        self.url = resolve_url(url)
        self.masked_url = mask_url(self.url)
        self.engine = create_store_engine(self.url)
        self.backend = self.engine.dialect.name
        check_and_upgrade(self.engine, self.url, auto_upgrade=auto_upgrade)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        # Writers on SQLite take the write lock at BEGIN (see store.engine); PostgreSQL ignores it.
        self._writer = sessionmaker(self.engine.execution_options(sqlite_immediate=True), expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({self.masked_url!r})"

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._reader() as session, session.begin():
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that commits everything or nothing."""
        try:
            with self._writer() as session, session.begin():
                yield session
        except OperationalError as error:
            message = str(error.orig).splitlines()[0] if error.orig else str(error)
            raise StoreError(f"store {self.masked_url} refused a write: {message}") from None

    # ---- machines and models -------------------------------------------------------------

    def machine_id(self, machine: MachineRecord) -> int:
        """The id of this fingerprint, inserting it the first time it is seen."""
        fingerprint = machine.fingerprint()
        with self.read() as session:
            found = session.scalar(select(Machine.id).where(Machine.fingerprint == fingerprint))
        if found is not None:
            return found
        try:
            with self.write() as session:
                row = Machine(fingerprint=fingerprint, **machine.__dict__)
                session.add(row)
                session.flush()
                return row.id
        except IntegrityError:  # another process inserted it between our read and write
            with self.read() as session:
                return session.scalars(select(Machine.id).where(Machine.fingerprint == fingerprint)).one()

    def save_model(self, model: ModelRecord) -> int:
        """Store a checkpoint once by its weights hash; returns its id either way."""
        with self.read() as session:
            found = session.scalar(select(Model.id).where(Model.weights_hash == model.weights_hash))
        if found is not None:
            return found
        fields = {key: value for key, value in model.__dict__.items() if key != "id"}
        try:
            with self.write() as session:
                row = Model(**fields)
                session.add(row)
                session.flush()
                return row.id
        except IntegrityError:
            with self.read() as session:
                return session.scalars(select(Model.id).where(Model.weights_hash == model.weights_hash)).one()

    def find_model(self, *, recipe_hash: str | None = None, weights_hash: str | None = None) -> ModelRecord | None:
        """The newest checkpoint with this training recipe, or with exactly these weights."""
        query = select(Model).order_by(Model.id.desc()).limit(1)
        if recipe_hash is not None:
            query = query.where(Model.recipe_hash == recipe_hash)
        if weights_hash is not None:
            query = query.where(Model.weights_hash == weights_hash)
        with self.read() as session:
            row = session.scalar(query.options())
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

    def start_run(
        self,
        *,
        machine_id: int,
        spec: dict[str, Any],
        code_version: str,
        model_id: int | None,
        preset: str | None = None,
    ) -> int:
        with self.write() as session:
            model_hash = session.scalar(select(Model.weights_hash).where(Model.id == model_id)) if model_id else None
            run = Run(
                machine_id=machine_id,
                model_id=model_id,
                model_hash=model_hash,
                spec=spec,
                code_version=code_version,
                preset=preset,
                status="running",
            )
            session.add(run)
            session.flush()
            return run.id

    def resume_run(self, run_id: int) -> None:
        with self.write() as session:
            session.execute(update(Run).where(Run.id == run_id).values(status="running", error=None, finished_at=None))

    def record_case(self, run_id: int, case: CaseRecord) -> int | None:
        """Write a case, its measurements and their samples in one transaction.

        Returns the case id, or None when the run already holds this case (a resumed run).
        """
        key = case_key(case.params)
        try:
            with self.write() as session:
                row = Case(run_id=run_id, experiment=case.experiment, case_key=key, params=case.params)
                session.add(row)
                session.flush()
                if case.measurements:
                    measurement_ids = session.scalars(
                        insert(Measurement).returning(Measurement.id, sort_by_parameter_order=True),
                        [
                            {
                                "case_id": row.id,
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
                        }
                        for measurement_id, measurement in zip(measurement_ids, case.measurements, strict=True)
                        for sample in measurement.samples
                    ]
                    if samples:
                        session.execute(insert(Sample), samples)
                return row.id
        except IntegrityError as error:
            if "uq_case_run_key" in str(error.orig) or "UNIQUE constraint failed: case." in str(error.orig):
                return None
            raise

    def recorded_case_keys(self, run_id: int) -> set[tuple[str, str]]:
        with self.read() as session:
            rows = session.execute(select(Case.experiment, Case.case_key).where(Case.run_id == run_id))
            return {(experiment, key) for experiment, key in rows}

    def finish_run(
        self, run_id: int, status: str, *, error: str | None = None, wall_seconds: float | None = None
    ) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
        with self.write() as session:
            values: dict[str, Any] = {"status": status, "error": error, "finished_at": utc_now()}
            if wall_seconds is not None:
                values["wall_seconds"] = wall_seconds
            session.execute(update(Run).where(Run.id == run_id).values(**values))

    # ---- read API for the dashboard ------------------------------------------------------

    def _frame(self, query: Selectable) -> pd.DataFrame:
        with self.engine.connect() as connection:
            return pd.read_sql(query, connection)

    def runs(
        self,
        *,
        machine: str | None = None,
        experiment: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> pd.DataFrame:
        """One row per run, newest first, with its machine and model."""
        query = (
            select(
                Run.id.label("run_id"),
                Run.started_at,
                Run.finished_at,
                Run.wall_seconds,
                Run.status,
                Run.preset,
                Run.code_version,
                Run.error,
                Machine.name.label("machine"),
                Machine.fingerprint.label("machine_fingerprint"),
                Run.model_hash,
                Run.uid,
            )
            .join(Machine, Machine.id == Run.machine_id)
            .order_by(Run.started_at.desc(), Run.id.desc())
        )
        if machine is not None:
            query = query.where(Machine.name == machine)
        if status is not None:
            query = query.where(Run.status == status)
        if since is not None:
            query = query.where(Run.started_at >= since)
        if until is not None:
            query = query.where(Run.started_at <= until)
        if experiment is not None:
            query = query.where(select(Case.id).where(Case.run_id == Run.id, Case.experiment == experiment).exists())
        return self._frame(query)

    def _measurement_query(self) -> Select[Any]:
        return (
            select(
                Measurement.run_id,
                Machine.name.label("machine"),
                Measurement.experiment,
                Measurement.case_id,
                Case.params,
                Measurement.metric,
                Measurement.value,
                Measurement.unit,
                Measurement.id.label("measurement_id"),
                Run.started_at,
                Machine.fingerprint.label("machine_fingerprint"),
                Run.model_hash,
            )
            .join(Case, Case.id == Measurement.case_id)
            .join(Run, Run.id == Measurement.run_id)
            .join(Machine, Machine.id == Run.machine_id)
            .order_by(Measurement.run_id, Measurement.id)
        )

    def measurements(self, run_id: int, experiment: str | None = None) -> pd.DataFrame:
        """Every measurement of a run, with the case params as a dict column."""
        query = self._measurement_query().where(Measurement.run_id == run_id)
        if experiment is not None:
            query = query.where(Measurement.experiment == experiment)
        return self._decode_params(self._frame(query))

    def metric_across_runs(self, experiment: str, metric: str, machines: Sequence[str] | None = None) -> pd.DataFrame:
        """One metric of one experiment over every run and machine."""
        query = self._measurement_query().where(Measurement.experiment == experiment, Measurement.metric == metric)
        if machines:
            query = query.where(Machine.name.in_(list(machines)))
        return self._decode_params(self._frame(query))

    def metric_names(self, experiment: str) -> list[str]:
        with self.read() as session:
            query = select(Measurement.metric).where(Measurement.experiment == experiment).distinct()
            return sorted(session.scalars(query))

    def samples(self, measurement_ids: Sequence[int]) -> pd.DataFrame:
        query = (
            select(Sample.measurement_id, Sample.pair_index, Sample.side, Sample.seconds)
            .where(Sample.measurement_id.in_(list(measurement_ids)))
            .order_by(Sample.measurement_id, Sample.pair_index, Sample.side)
        )
        return self._frame(query)

    def export_rows(self, run_id: int | None = None) -> pd.DataFrame:
        """The long format: run_id, machine, experiment, params (JSON text), metric, value, unit."""
        query = self._measurement_query()
        if run_id is not None:
            query = query.where(Measurement.run_id == run_id)
        frame = self._decode_params(self._frame(query))
        frame["params"] = frame["params"].map(lambda params: json.dumps(params, sort_keys=True))
        return frame[["run_id", "machine", "experiment", "params", "metric", "value", "unit"]]

    def run_exists(self, run_id: int) -> bool:
        with self.read() as session:
            return session.get(Run, run_id) is not None

    @staticmethod
    def _decode_params(frame: pd.DataFrame) -> pd.DataFrame:
        # SQLite's JSON comes back as text through pandas; PostgreSQL's as dicts.
        if len(frame) and isinstance(frame["params"].iloc[0], str):
            frame["params"] = frame["params"].map(json.loads)
        return frame
