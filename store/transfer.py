"""Moving runs between stores: a JSON export that is the long format (one row per measurement,
the seven export columns first) with what an import needs beside it, and the import.

Each row also carries its case key, its raw samples and its run (uid, machine fingerprint
fields, model hash, spec, status, times, the reviewers' note and tags, the roof it is judged on:
its host's newest, under any of the host's fingerprints). Importing recreates the machine by
fingerprint (with its roof, where this store has none for it), links the model where the target
store holds it (the run keeps the hash either way), and writes each run in one transaction; a run
whose uid is already there only gains the cases it lacks, so importing twice adds nothing. Tags
are merged; a note is taken where the run has none here.

An export whose name ends in ``.gz`` is written gzip-compressed (a quick run's 2 MB becomes about
200 KB), and an import reads either kind, whatever the name.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import defaultdict
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.annotations import check_tag
from store.clock import as_utc
from store.errors import StoreError
from store.export import compressed_name
from store.files import write_whole
from store.import_checks import check_row
from store.profiles import newest_roof
from store.records import CaseRecord, MachineRecord, MeasurementRecord, SampleRecord, case_key
from store.results import write_measurements
from store.schema import Case, Machine, Measurement, Model, Run, RunTag, Sample, utc_now
from store.store import Store
from store.user_text import flatten_lines

MACHINE_FIELDS = tuple(item.name for item in fields(MachineRecord))
RUN_FIELDS = ("uid", "preset", "spec", "code_version", "status", "error", "wall_seconds", "model_hash", "note")
GZIP_MAGIC = b"\x1f\x8b"
# A run's export is a few MB of JSON (a quick run's about 2 MB; a whole store's is their sum). What
# is read is bounded, so a gzip-compressed file, which can inflate a thousandfold, cannot ask for
# more than this much text (the rows parsed from it take several times as much again).
MAX_EXPORT_BYTES = 256 * 1024 * 1024


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def export_json_rows(store: Store, run_id: int | None = None) -> list[dict[str, Any]]:
    """The long format with samples, case keys and run metadata on every row."""
    rows: list[dict[str, Any]] = []
    with store.read() as session:
        runs_query = select(Run).order_by(Run.id)
        if run_id is not None:
            runs_query = runs_query.where(Run.id == run_id)
        for run in session.scalars(runs_query):
            machine = session.get(Machine, run.machine_id)
            assert machine is not None
            run_meta = {field: getattr(run, field) for field in RUN_FIELDS}
            run_meta |= {
                "started_at": _time(run.started_at),
                "finished_at": _time(run.finished_at),
                "machine": {field: getattr(machine, field) for field in MACHINE_FIELDS},
                "tags": sorted(session.scalars(select(RunTag.name).where(RunTag.run_id == run.id))),
                # The roof the run is judged on travels with it (None if the host was never profiled).
                "machine_profile": newest_roof(session, machine),
            }
            cases = session.execute(
                select(Case, Measurement)
                .join(Measurement, Measurement.case_id == Case.id)
                .where(Case.run_id == run.id)
                .order_by(Case.id, Measurement.id)
            ).all()
            measurement_ids = [measurement.id for _, measurement in cases]
            samples: dict[int, list[list[Any]]] = defaultdict(list)
            for sample in session.scalars(
                select(Sample).where(Sample.measurement_id.in_(measurement_ids)).order_by(Sample.id)
            ):
                row = [sample.pair_index, sample.side, sample.seconds]
                # An A/B session's round as a fourth element; three elements elsewhere, as always.
                samples[sample.measurement_id].append(row if sample.round_index is None else [*row, sample.round_index])
            for case, measurement in cases:
                rows.append(
                    {
                        "run_id": run.id,
                        "machine": machine.name,
                        "experiment": case.experiment,
                        "params": json.dumps(case.params, sort_keys=True),
                        "metric": measurement.metric,
                        "value": measurement.value,
                        "unit": measurement.unit,
                        "case_key": case.case_key,
                        "samples": samples.get(measurement.id, []),
                        "run": run_meta,
                    }
                )
    return rows


def write_json_export(store: Store, path: Path, run_id: int | None = None) -> int:
    rows = export_json_rows(store, run_id)
    data = json.dumps(rows, indent=1, default=str).encode("utf-8")
    if compressed_name(path):
        data = gzip.compress(data, mtime=0)  # the same rows give the same bytes
    write_whole(path, lambda temporary: temporary.write_bytes(data))
    return len(rows)


def export_text(path: Path) -> str:
    """The JSON text of an export, plain or gzip-compressed (told by its first two bytes); at most
    MAX_EXPORT_BYTES of it."""
    with path.open("rb") as handle:
        compressed = handle.read(len(GZIP_MAGIC)) == GZIP_MAGIC
        handle.seek(0)
        reader = gzip.GzipFile(fileobj=handle) if compressed else handle
        data = reader.read(MAX_EXPORT_BYTES + 1)
    if len(data) > MAX_EXPORT_BYTES:
        raise StoreError(
            f"import: {str(path)!r} holds more than {MAX_EXPORT_BYTES // 2**20} MiB of JSON"
            f"{' once decompressed' if compressed else ''} (allowed: at most {MAX_EXPORT_BYTES // 2**20} MiB)"
        )
    return data.decode("utf-8")


def _parse_time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise StoreError(f"import: run.{field} {value!r} is not an ISO timestamp") from None
    return as_utc(parsed)


def read_export(path: Path) -> list[dict[str, Any]]:
    """The rows of an export, each checked and its text cleaned (store.import_checks): a bad file
    is refused in one line before anything is written."""
    try:
        rows = json.loads(export_text(path))
    except (OSError, UnicodeDecodeError, ValueError, EOFError, zlib.error) as error:
        # ValueError: malformed JSON, or an integer longer than Python reads (4,300 digits);
        # OSError, EOFError, zlib.error: a file that cannot be read, or a damaged or cut gzip stream.
        reason = flatten_lines(str(error))[:200]
        raise StoreError(f"import: cannot read {str(path)!r} as a decodelab JSON export ({reason})") from None
    except RecursionError:
        raise StoreError(f"import: {str(path)!r} nests its JSON too deeply to be a decodelab JSON export") from None
    required = {"experiment", "params", "metric", "value", "unit", "run"}
    if not isinstance(rows, list) or not all(isinstance(row, dict) and required <= set(row) for row in rows):
        raise StoreError(
            f"import: {str(path)!r} is not a decodelab JSON export (expected a list of rows with "
            f"{', '.join(sorted(required))}; export with `decodelab export --format json`)"
        )
    now = datetime.now(UTC)
    return [check_row(number, row, now) for number, row in enumerate(rows, start=1)]


def import_rows(store: Store, rows: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Import every run in ``rows``; returns (uid, run id in this store, cases added) per run."""
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        uid = row["run"].get("uid")
        if not uid:
            raise StoreError("import: a row's run has no uid (export it with this version of decodelab)")
        by_run[uid].append(row)
    return [_import_run(store, uid, run_rows) for uid, run_rows in by_run.items()]


def _import_run(store: Store, uid: str, rows: list[dict[str, Any]]) -> tuple[str, int, int]:
    """One run's rows into this store in one transaction: its machine, the run (or the one with
    its uid already here), its tags, and the cases this store lacks."""
    meta = rows[0]["run"]
    machine_id = _imported_machine(store, uid, meta)
    with store.write() as session:
        run = _imported_run(session, uid, meta, machine_id)
        _merge_tags(session, uid, run.id, meta)
        added = _add_missing_cases(session, run.id, rows)
        return uid, run.id, added


def _imported_machine(store: Store, uid: str, meta: dict[str, Any]) -> int:
    """The machine's id by its fingerprint (recreated if new), with the run's measured roof
    where this store has none for it."""
    try:
        machine = MachineRecord(**{field: meta["machine"][field] for field in MACHINE_FIELDS})
    except (KeyError, TypeError) as error:
        raise StoreError(f"import: run {uid} has an incomplete machine ({error})") from None
    machine_id = store.results.machine_id(machine)
    profile = meta.get("machine_profile")
    if isinstance(profile, dict) and store.profiles.latest(machine_id) is None:
        store.profiles.save(machine_id, str(profile.get("instruction_set", "")), bool(profile.get("quick")), profile)
    return machine_id


def _imported_run(session: Session, uid: str, meta: dict[str, Any], machine_id: int) -> Run:
    """The run with ``uid`` already here (gaining the note if it had none), else a new one linked
    to the model where this store holds it."""
    run = session.scalar(select(Run).where(Run.uid == uid))
    if run is not None:
        if run.note is None and meta.get("note"):
            run.note = meta["note"]
        return run
    model_id = None
    if meta.get("model_hash"):
        model_id = session.scalar(select(Model.id).where(Model.weights_hash == meta["model_hash"]))
    run = Run(
        uid=uid,
        machine_id=machine_id,
        model_id=model_id,
        model_hash=meta.get("model_hash"),
        preset=meta.get("preset"),
        spec=meta.get("spec") or {},
        code_version=meta.get("code_version") or "",
        status=meta.get("status") or "done",
        error=meta.get("error"),
        wall_seconds=meta.get("wall_seconds"),
        started_at=_parse_time(meta.get("started_at"), "started_at"),
        finished_at=_parse_time(meta.get("finished_at"), "finished_at"),
        note=meta.get("note"),
    )
    session.add(run)
    session.flush()
    return run


def _merge_tags(session: Session, uid: str, run_id: int, meta: dict[str, Any]) -> None:
    """Add the run's tags this store's copy lacks."""
    tags = meta.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise StoreError(f"import: run {uid} has tags that are not a list of names")
    held = set(session.scalars(select(RunTag.name).where(RunTag.run_id == run_id)))
    for tag in sorted(set(tags) - held):
        session.add(RunTag(run_id=run_id, name=check_tag(tag), created_at=utc_now()))


def _add_missing_cases(session: Session, run_id: int, rows: list[dict[str, Any]]) -> int:
    """Write each case of ``rows`` the run lacks here, with its measurements and samples; returns
    how many were added."""
    present = {
        (experiment, key)
        for experiment, key in session.execute(select(Case.experiment, Case.case_key).where(Case.run_id == run_id))
    }
    added = 0
    for (experiment, key), measurements in _rows_by_case(rows).items():
        if (experiment, key) in present:
            continue
        case = Case(run_id=run_id, experiment=experiment, case_key=key, params=measurements[0]["params"])
        session.add(case)
        session.flush()
        write_measurements(session, run_id, case.id, _case_record(experiment, measurements))
        added += 1
    return added


def _rows_by_case(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rows grouped by (experiment, case key), each with its params as a dict."""
    cases: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        params = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
        cases[(row["experiment"], row.get("case_key") or case_key(params))].append({**row, "params": params})
    return cases


def round_of(sample: list[Any]) -> int | None:
    """An exported sample's round: its fourth element, where an A/B session wrote one."""
    return int(sample[3]) if len(sample) > 3 else None


def _case_record(experiment: str, measurements: list[dict[str, Any]]) -> CaseRecord:
    """One case's rows as the record the store writes."""
    return CaseRecord(
        experiment,
        measurements[0]["params"],
        tuple(
            MeasurementRecord(
                m["metric"],
                float(m["value"]),
                m["unit"],
                tuple(
                    SampleRecord(int(sample[0]), str(sample[1]), float(sample[2]), round_of(sample))
                    for sample in m.get("samples", [])
                ),
            )
            for m in measurements
        ),
    )
