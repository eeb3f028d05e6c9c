"""The dashboard's reads: pandas DataFrames shaped for its pages, aggregated in SQL where the
rows are many. The runner never needs these (it reads plain records through store.results)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import Select, case, func, select
from sqlalchemy.sql.expression import Selectable

from store.clock import server_now
from store.compatibility import as_today, current_metric, recorded_names
from store.schema import Case, Job, Machine, Measurement, Run, Sample, Worker

if TYPE_CHECKING:
    from store.store import Store


def _frame(store: Store, query: Selectable) -> pd.DataFrame:
    with store.engine.connect() as connection:
        return pd.read_sql(query, connection)


def _decode_params(frame: pd.DataFrame) -> pd.DataFrame:
    # SQLite's JSON comes back as text through pandas; PostgreSQL's as dicts.
    if len(frame) and isinstance(frame["params"].iloc[0], str):
        frame["params"] = frame["params"].map(json.loads)
    return frame


def _as_today(frame: pd.DataFrame) -> pd.DataFrame:
    """The read path's one compatibility step (store.compatibility): old runs read as today's."""
    return as_today(_decode_params(frame))


def runs(
    store: Store,
    *,
    machine: str | None = None,
    experiment: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pd.DataFrame:
    """One row per run, newest first, with its machine, model, note and tags (sorted, joined
    by ", "; empty for none)."""
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
            Run.note,
            Run.spec,
            # The launcher's estimate, from the run's job (a run imported or made without one: none).
            select(func.max(Job.estimated_seconds))
            .where(Job.run_id == Run.id)
            .scalar_subquery()
            .label("estimated_seconds"),
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
    frame = _frame(store, query)
    # The stored spec stays (decoded): a custom launch is named by what it changed
    # (analysis.runs.sweep_label) and compared only with runs of the same spec.
    specs = [json.loads(spec) if isinstance(spec, str) else spec for spec in frame["spec"]]
    frame["spec"] = pd.Series(specs, index=frame.index, dtype=object)
    frame["model"] = [model_name(spec) for spec in specs]
    frame["text_unit"] = [text_unit(spec) for spec in specs]
    tags = store.annotations.tags()
    frame["tags"] = [", ".join(tags.get(int(run_id), [])) for run_id in frame["run_id"]]
    return frame


def _model_section(spec: Any) -> dict[str, Any]:
    model = (spec or {}).get("model") if isinstance(spec, dict) else None
    return model if isinstance(model, dict) else {}


def model_name(spec: Any) -> str:
    """What a run's model is called: an hf checkpoint's name from its config, else decodelab's
    own character model by its shape."""
    model = _model_section(spec)
    if model.get("source") == "hf":
        return str(model.get("name") or "hf model")
    if "d_model" in model and "n_layer" in model:
        return f"char d{model['d_model']}×{model['n_layer']}"
    return ""


def text_unit(spec: Any) -> str:
    """The unit a run's lengths, positions and passes count: tokens for an hf checkpoint's
    tokenizer, characters for decodelab's own model."""
    return "tokens" if _model_section(spec).get("source") == "hf" else "characters"


def run_details(store: Store, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per run: its machine's whole fingerprint, its code version, model hash and the spec's seed
    (what the machines comparison sets side by side)."""
    query = (
        select(
            Run.id.label("run_id"),
            Run.started_at,
            Run.code_version,
            Run.model_hash,
            Run.preset,
            Run.spec,
            Machine.name.label("machine"),
            Machine.fingerprint.label("machine_fingerprint"),
            Machine.cpu_model,
            Machine.cores,
            Machine.memory_bytes,
            Machine.os,
            Machine.python_version,
            Machine.torch_version,
            Machine.threads,
            Machine.device,
            Machine.gpu_name,
        )
        .join(Machine, Machine.id == Run.machine_id)
        .where(Run.id.in_(list(run_ids)))
        .order_by(Run.id)
    )
    frame = _frame(store, query)
    specs = frame["spec"].map(lambda spec: json.loads(spec) if isinstance(spec, str) else spec)
    frame["seed"] = specs.map(lambda spec: (spec or {}).get("seed"))
    frame["drafts"] = specs.map(draft_models)
    return frame.drop(columns=["spec"])


# The speculative parameters that decide which draft models a run trains or derives from its target.
DRAFT_FIELDS = ("drafts", "small_draft_d_model", "small_draft_steps", "small_draft_distilled", "ngram_order")


def draft_models(spec: dict[str, Any] | None) -> str:
    """What determines a run's draft models besides its target (their own hashes are not
    recorded with the run): the speculative section's draft fields, as sorted JSON; empty for none."""
    section = ((spec or {}).get("experiments") or {}).get("speculative")
    if not section:
        return ""
    return json.dumps({name: section.get(name) for name in DRAFT_FIELDS}, sort_keys=True)


def _measurement_query() -> Select[Any]:
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


def measurements(store: Store, run_id: int, experiment: str | None = None) -> pd.DataFrame:
    """Every measurement of a run, with the case params as a dict column."""
    query = _measurement_query().where(Measurement.run_id == run_id)
    if experiment is not None:
        query = query.where(Measurement.experiment == experiment)
    return _as_today(_frame(store, query))


def metric_across_runs(
    store: Store, experiment: str, metric: str, machines: Sequence[str] | None = None
) -> pd.DataFrame:
    """One metric of one experiment over every run and machine, under whichever name each run
    recorded it (``recorded_metric`` says which)."""
    query = _measurement_query().where(
        Measurement.experiment == experiment, Measurement.metric.in_(recorded_names(metric))
    )
    if machines:
        query = query.where(Machine.name.in_(list(machines)))
    return _as_today(_frame(store, query))


def metric_names(store: Store, experiment: str) -> list[str]:
    with store.read() as session:
        query = select(Measurement.metric).where(Measurement.experiment == experiment).distinct()
        return sorted({current_metric(name) for name in session.scalars(query)})


def samples(store: Store, measurement_ids: Sequence[int]) -> pd.DataFrame:
    query = (
        select(Sample.measurement_id, Sample.pair_index, Sample.side, Sample.seconds, Sample.round_index)
        .where(Sample.measurement_id.in_(list(measurement_ids)))
        .order_by(Sample.measurement_id, Sample.pair_index, Sample.side)
    )
    return _frame(store, query)


def export_rows(store: Store, run_id: int | None = None) -> pd.DataFrame:
    """The long format: run_id, machine, experiment, params (JSON text), metric, value, unit."""
    query = _measurement_query()
    if run_id is not None:
        query = query.where(Measurement.run_id == run_id)
    frame = _decode_params(_frame(store, query))
    frame["params"] = frame["params"].map(lambda params: json.dumps(params, sort_keys=True))
    return frame[["run_id", "machine", "experiment", "params", "metric", "value", "unit"]]


def jobs(store: Store, status: str | None = None, limit: int = 200) -> pd.DataFrame:
    """The newest jobs first, with their progress and heartbeat."""
    query = (
        select(
            Job.id.label("job_id"),
            Job.status,
            Job.preset,
            Job.spec,
            Job.machine_name,
            Job.worker,
            Job.run_id,
            Job.cases_done,
            Job.cases_total,
            Job.attempts,
            Job.error,
            Job.created_at,
            Job.claimed_at,
            Job.heartbeat_at,
            Job.finished_at,
            Job.claimed_by_machine,
            Job.estimated_seconds,
        )
        .order_by(Job.id.desc())
        .limit(limit)
    )
    if status is not None:
        query = query.where(Job.status == status)
    with store.read() as session:
        rows = session.execute(query).mappings().all()
    frame = pd.DataFrame([dict(row) for row in rows], columns=list(query.selected_columns.keys()))
    frame["spec"] = pd.Series(
        [json.loads(spec) if isinstance(spec, str) else spec for spec in frame["spec"]], index=frame.index, dtype=object
    )
    return frame


def workers(store: Store, *, seen_within_hours: float = 24.0) -> pd.DataFrame:
    """Workers seen within the window, newest first, with their state by the server's clock
    (live: seen within its own stale limit; stopped: exited cleanly; dead: went silent) and
    the job each is running, with its progress."""
    backend = store.backend
    state = case(
        (Worker.stopped_at.is_not(None), "stopped"),
        (Worker.last_seen_at >= server_now(backend, -Worker.stale_after_seconds), "live"),
        else_="dead",
    )
    query = (
        select(
            Worker.id.label("worker_id"),
            Worker.name,
            Worker.kind,
            Worker.machine_name.label("machine"),
            Worker.host,
            Worker.pid,
            state.label("state"),
            Worker.started_at,
            Worker.last_seen_at,
            Job.id.label("job_id"),
            Job.status.label("job_status"),
            Job.cases_done,
            Job.cases_total,
        )
        .outerjoin(Job, (Job.worker_id == Worker.id) & (Job.status == "running"))
        .where(Worker.last_seen_at >= server_now(backend, -seen_within_hours * 3600))
        .order_by(Worker.last_seen_at.desc(), Worker.id.desc())
    )
    with store.read() as session:
        rows = session.execute(query).mappings().all()
    return pd.DataFrame([dict(row) for row in rows], columns=list(query.selected_columns.keys()))
