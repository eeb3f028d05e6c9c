"""The experiment store's tables: machine (with its measured roofs), model, run (with its tags), case,
measurement, sample, job, worker.

Every schema change goes through an Alembic migration in ``store/migrations/versions``;
these classes must always describe the head revision.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utc_now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class Machine(Base):
    """A fingerprint of the hardware and software a run executed on."""

    __tablename__ = "machine"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    cpu_model: Mapped[str] = mapped_column(String(300))
    cores: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    os: Mapped[str] = mapped_column(String(300))
    python_version: Mapped[str] = mapped_column(String(50))
    torch_version: Mapped[str] = mapped_column(String(50))
    threads: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(50))
    gpu_name: Mapped[str | None] = mapped_column(String(300))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    # The machine's drift figure (store.drift): the DRIFT_QUANTILE quantile of |log ratio| of its
    # timed headline values between consecutive comparable runs (None: fewer moves than it needs),
    # how many moves it rests on, the quantile it was taken at (None: kept before that was
    # recorded, the 95th), and the run whose finish last updated it.
    drift_log_ratio: Mapped[float | None] = mapped_column(Float)
    drift_quantile: Mapped[float | None] = mapped_column(Float)
    drift_moves: Mapped[int | None] = mapped_column(Integer)
    drift_run_id: Mapped[int | None] = mapped_column(Integer)
    drift_updated_at: Mapped[datetime | None] = mapped_column()


class MachineProfile(Base):
    """A machine's measured roof (``decodelab machine profile``): peak multiply-add throughput per
    precision and read bandwidth per working-set size, as the JSON of runner.cost.machine_profile."""

    __tablename__ = "machine_profile"

    id: Mapped[int] = mapped_column(primary_key=True)
    machine_id: Mapped[int] = mapped_column(ForeignKey("machine.id", ondelete="CASCADE"))
    instruction_set: Mapped[str] = mapped_column(String(100))
    quick: Mapped[bool] = mapped_column(Boolean)
    figures: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)

    __table_args__ = (Index("ix_machine_profile_machine", "machine_id"),)


class Model(Base):
    """A trained checkpoint, stored once by the hash of its weights and config."""

    __tablename__ = "model"

    id: Mapped[int] = mapped_column(primary_key=True)
    weights_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # Hash of (model config, training config, corpus): lets `train` reuse a checkpoint.
    recipe_hash: Mapped[str] = mapped_column(String(64), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    corpus_hash: Mapped[str] = mapped_column(String(64))
    train_loss: Mapped[float] = mapped_column(Float)
    val_loss: Mapped[float] = mapped_column(Float)
    parameter_count: Mapped[int] = mapped_column(BigInteger)
    weight_bytes: Mapped[int] = mapped_column(BigInteger)
    weights: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class Run(Base):
    """One execution of a sweep on one machine."""

    __tablename__ = "run"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Unique across stores: an imported run keeps it, so importing twice adds nothing.
    uid: Mapped[str | None] = mapped_column(String(36), default=lambda: str(uuid.uuid4()))
    machine_id: Mapped[int] = mapped_column(ForeignKey("machine.id"))
    model_id: Mapped[int | None] = mapped_column(ForeignKey("model.id"))
    # The checkpoint's hash, kept even where this store lacks the checkpoint itself.
    model_hash: Mapped[str | None] = mapped_column(String(64))
    preset: Mapped[str | None] = mapped_column(String(100))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    code_version: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), default="running")
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(default=utc_now)
    finished_at: Mapped[datetime | None] = mapped_column()
    wall_seconds: Mapped[float | None] = mapped_column(Float)
    # A reviewer's words about the run (free text), editable after it ended.
    note: Mapped[str | None] = mapped_column(Text)

    machine: Mapped[Machine] = relationship()
    model: Mapped[Model | None] = relationship()
    cases: Mapped[list[Case]] = relationship(back_populates="run", cascade="all, delete-orphan")

    __table_args__ = (
        Index("ix_run_started_at", "started_at"),
        Index("ix_run_machine_started_at", "machine_id", "started_at"),
        Index("ix_run_uid", "uid", unique=True),
    )


class RunTag(Base):
    """A label on a run: ``baseline`` (pinned as the baseline of later runs), ``reviewed``,
    ``suspect`` (left out of baselines and change detection), or a free one."""

    __tablename__ = "run_tag"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)

    __table_args__ = (
        UniqueConstraint("run_id", "name", name="uq_run_tag_run_name"),
        Index("ix_run_tag_name", "name"),
    )


class Case(Base):
    """One parameter point of one experiment inside a run."""

    __tablename__ = "case"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    experiment: Mapped[str] = mapped_column(String(100))
    # Canonical JSON of the params: a resumed run skips cases whose key it already holds.
    case_key: Mapped[str] = mapped_column(String(1000))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    # Set when the case could not be measured (runner.errors.Unmeasured): it has no measurements,
    # the run goes on, the review says "not measured" and a later `run --only-unmeasured` retries it.
    unmeasured_reason: Mapped[str | None] = mapped_column(Text)

    run: Mapped[Run] = relationship(back_populates="cases")

    __table_args__ = (UniqueConstraint("run_id", "experiment", "case_key", name="uq_case_run_key"),)


class Measurement(Base):
    """One named value of a case, with its unit."""

    __tablename__ = "measurement"

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("case.id", ondelete="CASCADE"))
    # Denormalised from the case so the dashboard's queries need no join to filter.
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"))
    experiment: Mapped[str] = mapped_column(String(100))
    metric: Mapped[str] = mapped_column(String(100))
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(30))

    __table_args__ = (
        Index("ix_measurement_run_experiment_metric", "run_id", "experiment", "metric"),
        Index("ix_measurement_experiment_metric", "experiment", "metric"),
        Index("ix_measurement_case", "case_id"),
    )


class Sample(Base):
    """One raw timing behind a measurement: pair index, side (A/B) and seconds; in an A/B session
    (`decodelab ab`) also its round, whose samples share a worker process (null elsewhere)."""

    __tablename__ = "sample"

    id: Mapped[int] = mapped_column(primary_key=True)
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurement.id", ondelete="CASCADE"))
    pair_index: Mapped[int] = mapped_column(Integer)
    side: Mapped[str] = mapped_column(String(1))
    seconds: Mapped[float] = mapped_column(Float)
    round_index: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (Index("ix_sample_measurement", "measurement_id"),)


class Job(Base):
    """A queued sweep, optionally pinned to a machine name, with progress and heartbeat."""

    __tablename__ = "job"

    id: Mapped[int] = mapped_column(primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    preset: Mapped[str | None] = mapped_column(String(100))
    machine_name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20), default="queued")
    # The owner's name (host:pid), for people; ownership itself is (worker_id, attempts).
    worker: Mapped[str | None] = mapped_column(String(200))
    worker_id: Mapped[int | None] = mapped_column(Integer)
    # The machine the job runs on while running: a machine runs one job at a time.
    claimed_by_machine: Mapped[str | None] = mapped_column(String(200))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("run.id"))
    cases_done: Mapped[int] = mapped_column(Integer, default=0)
    cases_total: Mapped[int] = mapped_column(Integer, default=0)
    # Claims so far: the claim's attempt number, part of the ownership check.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Times its worker went silent and another requeued it; past MAX_STALE_RECLAIMS it is failed.
    stale_reclaims: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)
    # What the launcher said it would take (runner.spec.calibrated_estimate), to set beside the run's wall time.
    estimated_seconds: Mapped[float | None] = mapped_column(Float)
    # Idempotent retries: the enqueue's request id, and the request id of the current claim.
    # A retry after a lost reply finds the job its first try added or claimed by these.
    request_id: Mapped[str | None] = mapped_column(String(36))
    claim_request_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    claimed_at: Mapped[datetime | None] = mapped_column()
    heartbeat_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (
        Index("ix_job_status_created_at", "status", "created_at"),
        Index("ix_job_status_claimed_by_machine", "status", "claimed_by_machine"),
        Index("ix_job_request_id", "request_id", unique=True),
        Index("ix_job_claim_request_id", "claim_request_id", unique=True),
    )


class Worker(Base):
    """A process that claims jobs: a ``decodelab worker``, or a terminal ``decodelab run``
    (kind "run"), with when it was last seen by the database server's clock. Its current job is
    the running job whose worker_id is its id (read, never stored twice)."""

    __tablename__ = "worker"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))
    machine_name: Mapped[str] = mapped_column(String(200))
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column()
    last_seen_at: Mapped[datetime] = mapped_column()
    # Silent for longer than this, it is dead (each worker says how often it is seen).
    stale_after_seconds: Mapped[float] = mapped_column(Float)
    stopped_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (Index("ix_worker_machine_last_seen", "machine_name", "last_seen_at"),)
