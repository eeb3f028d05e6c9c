"""Plain records that cross the line between the runner and the store (no SQL here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SampleRecord:
    """One raw timing: which pair it belongs to, which side (A baseline, B candidate), and in an
    A/B session the round (fresh worker processes) that took it."""

    pair_index: int
    side: str
    seconds: float
    round_index: int | None = None


@dataclass(frozen=True)
class MeasurementRecord:
    metric: str
    value: float
    unit: str
    samples: tuple[SampleRecord, ...] = ()


@dataclass(frozen=True)
class CaseRecord:
    """One parameter point of one experiment and everything measured at it."""

    experiment: str
    params: dict[str, Any]
    measurements: tuple[MeasurementRecord, ...] = field(default_factory=tuple)
    unmeasured_reason: str | None = None  # set: the case could not be measured, and why


@dataclass(frozen=True)
class MachineRecord:
    name: str
    cpu_model: str
    cores: int
    memory_bytes: int
    os: str
    python_version: str
    torch_version: str
    threads: int
    device: str
    gpu_name: str | None

    def fingerprint(self) -> str:
        """Hash of every field, the name included: two hosts with identical hardware are still
        two machines, and a changed torch version or thread count makes a new fingerprint."""
        import hashlib
        import json

        return hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ModelRecord:
    weights_hash: str
    recipe_hash: str
    config: dict[str, Any]
    corpus_hash: str
    train_loss: float
    val_loss: float
    parameter_count: int
    weight_bytes: int
    weights: bytes
    id: int | None = None


@dataclass(frozen=True)
class Claim:
    """What makes a worker a job's owner: its worker id and the claim's attempt number. Every
    write about the job or its run is conditional on both, so a worker that lost the job (frozen
    past the stale limit, then reclaimed by another) changes nothing."""

    job_id: int
    worker_id: int
    attempt: int


@dataclass(frozen=True)
class JobRecord:
    id: int
    spec: dict[str, Any]
    preset: str | None
    machine_name: str | None
    run_id: int | None
    attempts: int
    worker_id: int

    @property
    def claim(self) -> Claim:
        return Claim(self.id, self.worker_id, self.attempts)


@dataclass(frozen=True)
class WorkerRecord:
    """A registered worker process (or a terminal `decodelab run`, kind "run")."""

    id: int
    name: str
    machine_name: str
    kind: str = "worker"


@dataclass(frozen=True)
class RecordedMeasurement:
    """A measurement as the store gives it back to the runner: its case's params beside it."""

    params: dict[str, Any]
    metric: str
    value: float
    unit: str


def case_key(params: dict[str, Any]) -> str:
    """Canonical JSON of a case's params: equal params give equal keys on every backend."""
    import json

    return json.dumps(params, sort_keys=True, separators=(",", ":"))


# Where a dashboard launch records its data folder in the job's spec: not part of what ran.
LAUNCH_MARKS = ("launched_from_dashboard",)


def ran_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A stored spec without the marks of how it was launched: what ran."""
    return {key: value for key, value in spec.items() if key not in LAUNCH_MARKS}


def comparable_key(preset: Any, spec: Any) -> str:
    """Which runs are like this one: a preset's runs by the preset's name (only a preset run
    unchanged carries it); a custom run with those of the very same spec, by its hash."""
    import hashlib
    import json

    if isinstance(preset, str) and preset:
        return preset
    if not isinstance(spec, Mapping):
        return "custom"
    canonical = json.dumps(ran_spec(spec), sort_keys=True, default=str)
    return "custom " + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
