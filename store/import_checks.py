"""What `decodelab import` accepts of an exported row: every field checked for its type and range
as the form and the runner would have checked it, before anything is written, and its text made
safe once (store.user_text: labels on one line without control characters, a note keeping its
line breaks). A bad file is refused in one line naming the row and the field; nothing of it is
written.

The ranges are the ones the store itself keeps: a name at most as long as its column, the note
at most NOTE_LIMIT characters, tags as `decodelab tag` takes them, a run that ended (no
``running`` or ``queued`` import), no date later than now, sizes and counts above zero, every
number finite and every integer within the store's integers.
"""

from __future__ import annotations

import json
import math
import reprlib
from datetime import UTC, datetime
from typing import Any

from store.annotations import NOTE_LIMIT, check_tag
from store.clock import as_utc
from store.errors import StoreError
from store.results import ENDED_RUN_STATUSES
from store.schema import Case, Machine, MachineProfile, Measurement, Run, Sample
from store.user_text import clean_label, clean_note

# An import is a finished run's record.
IMPORT_STATUSES = ENDED_RUN_STATUSES
# How deep a row's JSON (params, spec, the machine's roof) may nest: a real spec is 4 levels deep;
# deeper is a file made to exhaust the recursion of whatever reads it next.
MAX_DEPTH = 10
# The store's integer columns: Integer is 32-bit on PostgreSQL, BigInteger 64-bit.
INTEGER_MAX = 2**31 - 1
BIG_INTEGER_MAX = 2**63 - 1
# The samples of one measurement (a real one holds tens to hundreds).
MAX_SAMPLES = 100_000
SAMPLE_SIDES = ("A", "B")
ERROR_LIMIT = 10_000
MACHINE_TEXT = ("name", "cpu_model", "os", "python_version", "torch_version", "device")
MACHINE_COUNTS = {"cores": INTEGER_MAX, "threads": INTEGER_MAX, "memory_bytes": BIG_INTEGER_MAX}


def column_limit(model: Any, name: str) -> int:
    """The length of a text column of the store's schema."""
    return int(model.__table__.c[name].type.length)


def is_number(value: Any) -> bool:
    """A finite JSON number: an integer as large as 10**400 is not (float() cannot hold it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= BIG_INTEGER_MAX
    return math.isfinite(value)


def shown(value: Any) -> str:
    """A refused value in a message: short, on one line, escapes shown as escapes; a nested value
    only its first levels (reprlib: str() of a deep one would exhaust the recursion)."""
    return repr(value[:40] if isinstance(value, str) else reprlib.repr(value)[:40])


class RowChecker:
    """The checks of one row, each refusal naming the row and the field."""

    def __init__(self, number: int, row: dict[str, Any]) -> None:
        self.number = number
        self.row = row

    def refuse(self, field: str, value: Any, allowed: str) -> StoreError:
        return StoreError(f"import: row {self.number}: {field} {shown(value)} is not {allowed}")

    def label(self, field: str, value: Any, limit: int, *, required: bool = True) -> str | None:
        """A name or other one-line text of at most ``limit`` characters (after cleaning)."""
        if value is None and not required:
            return None
        if not isinstance(value, str):
            raise self.refuse(field, value, f"text of at most {limit} characters")
        cleaned = clean_label(value)
        if (required and not cleaned.strip()) or len(cleaned) > limit:
            raise self.refuse(field, value, f"text of 1 to {limit} characters")
        return cleaned

    def count(self, field: str, value: Any, maximum: int, *, minimum: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise self.refuse(field, value, f"a whole number in {minimum}..{maximum:,}")
        return value

    def json_value(self, field: str, value: Any, depth: int = 0) -> Any:
        """JSON (objects, lists, text, numbers, true/false/null) no deeper than MAX_DEPTH, every
        number finite, every text cleaned as a label (keys included)."""
        if depth > MAX_DEPTH:
            raise self.refuse(field, "…", f"nested at most {MAX_DEPTH} levels deep")
        if isinstance(value, str):
            return clean_label(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            if not is_number(value):
                raise self.refuse(field, value, "made of finite numbers")
            return value
        if isinstance(value, list):
            return [self.json_value(field, item, depth + 1) for item in value]
        if isinstance(value, dict):
            return {clean_label(str(key)): self.json_value(field, item, depth + 1) for key, item in value.items()}
        raise self.refuse(field, value, "JSON")

    def when(self, field: str, value: Any, now: datetime) -> str | None:
        """An ISO timestamp no later than ``now``, as given."""
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise self.refuse(field, value, "an ISO timestamp")
        aware = as_utc(parsed)
        try:
            late = aware > now
        except OverflowError:  # an offset that moves 9999-12-31 past the last datetime
            late = True
        if late:
            raise self.refuse(field, value, f"a time no later than now ({now:%Y-%m-%d %H:%M} UTC)")
        return value


def check_row(number: int, row: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The row as it will be imported (text cleaned), or StoreError: one line naming the row and
    the field, before anything is written."""
    now = now or datetime.now(UTC)
    check = RowChecker(number, row)
    cleaned: dict[str, Any] = dict(row)
    cleaned["experiment"] = check.label("experiment", row["experiment"], column_limit(Case, "experiment"))
    cleaned["metric"] = check.label("metric", row["metric"], column_limit(Measurement, "metric"))
    cleaned["unit"] = check.label("unit", row["unit"], column_limit(Measurement, "unit"))
    if not is_number(row["value"]):
        raise check.refuse("value", row["value"], "a finite number")
    params = row["params"]
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except (ValueError, RecursionError):
            raise check.refuse("params", row["params"], "a JSON object") from None
    if not isinstance(params, dict):
        raise check.refuse("params", row["params"], "a JSON object")
    cleaned["params"] = check.json_value("params", params)
    cleaned["case_key"] = check.label("case_key", row.get("case_key"), column_limit(Case, "case_key"), required=False)
    cleaned["samples"] = check_samples(check, row.get("samples", []))
    run = row["run"]
    if not isinstance(run, dict):
        raise check.refuse("run", run, "an object")
    cleaned["run"] = check_run(check, run, now)
    return cleaned


def check_samples(check: RowChecker, samples: Any) -> list[list[Any]]:
    allowed = "a list of [pair, side, seconds] or [pair, side, seconds, round]"
    if not isinstance(samples, list) or len(samples) > MAX_SAMPLES:
        raise check.refuse("samples", samples, f"{allowed} (at most {MAX_SAMPLES:,})")
    for sample in samples:
        if not (
            isinstance(sample, list)
            and len(sample) in (3, 4)
            and all(isinstance(sample[i], int) and not isinstance(sample[i], bool) for i in (0, *range(3, len(sample))))
            and isinstance(sample[1], str)
            and is_number(sample[2])
        ):
            raise check.refuse("samples", samples, allowed)
        pair, side, seconds = sample[:3]
        if len(sample) == 4 and not 0 <= sample[3] <= INTEGER_MAX:
            raise check.refuse("samples' round", sample[3], f"a round index in 0..{INTEGER_MAX:,}")
        if len(sample) != len(samples[0]):
            raise check.refuse("samples", samples, f"{allowed}, every sample of a measurement alike")
        if not 0 <= pair <= INTEGER_MAX:
            raise check.refuse("samples' pair", pair, f"a pair index in 0..{INTEGER_MAX:,}")
        if side not in SAMPLE_SIDES:
            raise check.refuse("samples' side", side, f"a side ({' or '.join(SAMPLE_SIDES)})")
        if seconds < 0:
            raise check.refuse("samples' seconds", seconds, "a time of 0 seconds or more")
    assert column_limit(Sample, "side") == 1  # the sides above fit the column
    return samples


def check_run(check: RowChecker, run: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The run's fields, as imported."""
    uid = run.get("uid")
    if not isinstance(uid, str) or not uid:
        raise StoreError(f"import: row {check.number}: run.uid is missing (export it with this version of decodelab)")
    cleaned = dict(run)
    cleaned["uid"] = check.label("run.uid", uid, column_limit(Run, "uid"))
    spec = run.get("spec") or {}
    if not isinstance(spec, dict):
        raise StoreError(f"import: row {check.number}: run.spec is not an object")
    cleaned["spec"] = check.json_value("run.spec", spec)
    status = run.get("status") or "done"
    if status not in IMPORT_STATUSES:
        raise check.refuse("run.status", status, f"the status of a run that ended ({', '.join(IMPORT_STATUSES)})")
    cleaned["status"] = status
    for field, model, column in (
        ("preset", Run, "preset"),
        ("code_version", Run, "code_version"),
        ("model_hash", Run, "model_hash"),
    ):
        cleaned[field] = check.label(f"run.{field}", run.get(field), column_limit(model, column), required=False)
    error = run.get("error")
    if error is not None and (not isinstance(error, str) or len(error) > ERROR_LIMIT):
        raise check.refuse("run.error", error, f"text of at most {ERROR_LIMIT:,} characters")
    cleaned["error"] = None if error is None else clean_note(error)
    note = run.get("note")
    if note is not None and (not isinstance(note, str) or len(note) > NOTE_LIMIT):
        raise check.refuse("run.note", note, f"text of at most {NOTE_LIMIT:,} characters")
    cleaned["note"] = None if note is None else clean_note(note)
    wall = run.get("wall_seconds")
    if wall is not None and (not is_number(wall) or wall < 0):
        raise check.refuse("run.wall_seconds", wall, "a finite number of seconds, 0 or more")
    started = check.when("run.started_at", run.get("started_at"), now)
    finished = check.when("run.finished_at", run.get("finished_at"), now)
    if started is not None and finished is not None and _utc(finished) < _utc(started):
        raise check.refuse("run.finished_at", finished, f"a time after run.started_at ({started})")
    tags = run.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise check.refuse("run.tags", tags, "a list of tag names")
    for tag in tags:
        try:
            check_tag(tag)
        except StoreError as error:
            raise StoreError(f"import: row {check.number}: run.tags: {error}") from None
    cleaned["machine"] = check_machine(check, run.get("machine"))
    profile = run.get("machine_profile")
    if profile is not None:
        if not isinstance(profile, dict):
            raise check.refuse("run.machine_profile", profile, "an object")
        profile = check.json_value("run.machine_profile", profile)
        check.label(
            "run.machine_profile.instruction_set",
            str(profile.get("instruction_set", "")),
            column_limit(MachineProfile, "instruction_set"),
            required=False,
        )
    cleaned["machine_profile"] = profile
    return cleaned


def check_machine(check: RowChecker, machine: Any) -> dict[str, Any]:
    if not isinstance(machine, dict):
        raise check.refuse("run.machine", machine, "an object")
    cleaned = dict(machine)
    for field in MACHINE_TEXT:
        cleaned[field] = check.label(f"run.machine.{field}", machine.get(field), column_limit(Machine, field))
    cleaned["gpu_name"] = check.label(
        "run.machine.gpu_name", machine.get("gpu_name"), column_limit(Machine, "gpu_name"), required=False
    )
    for field, maximum in MACHINE_COUNTS.items():
        cleaned[field] = check.count(f"run.machine.{field}", machine.get(field), maximum)
    return cleaned


def _utc(value: str) -> datetime:
    return as_utc(datetime.fromisoformat(value))
