"""`decodelab import` checks a file as the form and the runner check what they take (issue 41,
row 12): each hand-made field out of its type or range is refused in one line naming the row and
the field, and nothing of the file is written; the text of a file it accepts is made safe once
(control characters gone, a note keeping its line breaks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from store import frames
from store.store import Store
from tests.conftest import run_decodelab
from tests.test_cli_errors import assert_one_line_error, quick_store  # noqa: F401 - the module's store

Rows = list[dict[str, Any]]


def set_run(field: str, value: Any) -> Callable[[Rows], None]:
    def change(rows: Rows) -> None:
        for row in rows:
            row["run"][field] = value

    return change


def set_machine(field: str, value: Any) -> Callable[[Rows], None]:
    def change(rows: Rows) -> None:
        for row in rows:
            row["run"]["machine"][field] = value

    return change


def set_last(field: str, value: Any) -> Callable[[Rows], None]:
    def change(rows: Rows) -> None:
        rows[-1][field] = value

    return change


def deep_params(rows: Rows) -> None:
    nested: Any = 1
    for _ in range(50):
        nested = {"x": nested}
    rows[-1]["params"] = json.dumps({"part": "deep", "nested": nested})


def huge_pair(rows: Rows) -> None:
    row = next(row for row in rows if row["samples"])
    row["samples"][0][0] = 10**30


HAND_MADE: dict[str, tuple[Callable[[Rows], None], str]] = {
    "a 10 MB note": (set_run("note", "x" * 10_000_000), "run.note 'xxxxxxxx"),
    "a 100,000-character machine name": (set_machine("name", "m" * 100_000), "run.machine.name"),
    "a 100,000-character preset": (set_run("preset", "p" * 100_000), "run.preset"),
    "status running": (set_run("status", "running"), "run.status 'running' is not the status of a run that ended"),
    "status queued": (set_run("status", "queued"), "run.status 'queued'"),
    "year 9999": (set_run("started_at", "9999-12-31T23:00:00"), "run.started_at '9999-12-31T23:00:00' is not a time"),
    "year 9999 with an offset": (set_run("finished_at", "9999-12-31T23:30:00-05:00"), "run.finished_at"),
    "cores many": (set_machine("cores", "many"), "run.machine.cores 'many' is not a whole number in 1.."),
    "no memory": (set_machine("memory_bytes", 0), "run.machine.memory_bytes '0'"),
    "negative wall time": (set_run("wall_seconds", -5.0), "run.wall_seconds '-5.0'"),
    "a value of 10**400": (set_last("value", 10**400), "row {last}: value '1000000000"),
    "a huge pair index": (huge_pair, "samples' pair '1000000000000000000000000000000'"),
    "deep params": (deep_params, "params '…' is not nested at most 10 levels deep"),
    "a bad tag": (set_run("tags", ["Not A Tag!"]), "run.tags: tag: 'Not A Tag!' is not a tag name"),
    "an unknown sample side": (set_last("samples", [[0, "Z", 0.1]]), "samples' side 'Z'"),
    "a negative round": (set_last("samples", [[0, "A", 0.1, -1]]), "samples' round '-1'"),
    "rounds on some samples only": (
        set_last("samples", [[0, "A", 0.1, 0], [0, "B", 0.2]]),
        "every sample of a measurement alike",
    ),
}


def assert_nothing_written(url: str) -> None:
    store = Store(url)
    with store.engine.connect() as connection:
        for table in ("run", "machine", "machine_profile", '"case"', "measurement"):
            assert connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() == 0, table
    store.close()


@pytest.mark.parametrize("name", sorted(HAND_MADE))
def test_a_hand_made_file_is_refused_in_one_line(
    tmp_path: Path,
    quick_store: Path,  # noqa: F811 - the fixture imported above
    name: str,
) -> None:
    change, fragment = HAND_MADE[name]
    rows = json.loads((quick_store / "quick.json").read_text())
    change(rows)
    (tmp_path / "bad.json").write_text(json.dumps(rows))
    url = f"sqlite:///{tmp_path / 'target.db'}"
    Store(url).close()
    result = run_decodelab("import", "bad.json", "--db", url, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "error: import: row ", fragment.format(last=len(rows)))
    assert len(result.stderr) < 400, result.stderr  # the refused value shown short
    assert_nothing_written(url)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("an integer of 5,000 digits", '[{"value": 1' + "0" * 5000 + "}]"),
        ("JSON nested 100,000 deep", "[" * 100_000 + "]" * 100_000),
    ],
)
def test_a_file_python_cannot_read_is_one_line(tmp_path: Path, sqlite_url: str, name: str, text: str) -> None:
    (tmp_path / "bad.json").write_text(text)
    result = run_decodelab("import", "bad.json", "--db", sqlite_url, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "error: import: ")


def test_an_accepted_file_is_stored_without_control_characters(
    tmp_path: Path,
    quick_store: Path,  # noqa: F811 - the fixture imported above
) -> None:
    rows = json.loads((quick_store / "quick.json").read_text())
    for row in rows:
        row["run"]["note"] = "first line\nsecond\x07 line\x1b[2J\x00"
        row["run"]["machine"]["name"] = "box\x07\x1b[31m\x00 one\r\ntwo"
        row["run"]["preset"] = "qu\x00ick\x1b"
        params = json.loads(row["params"])
        row["params"] = json.dumps(
            {key: f"{value[:1]}\x07{value[1:]}" if isinstance(value, str) else value for key, value in params.items()}
        )
    (tmp_path / "hostile.json").write_text(json.dumps(rows))
    url = f"sqlite:///{tmp_path / 'target.db'}"
    result = run_decodelab("import", "hostile.json", "--db", url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    store = Store(url)
    run = frames.runs(store).iloc[0]
    assert run["note"] == "first line\nsecond line[2J"
    assert run["machine"] == "box[31m one two"
    assert run["preset"] == "quick"
    measured = frames.measurements(store, int(run["run_id"]))
    original = {
        json.dumps(json.loads(row["params"]), sort_keys=True)
        for row in json.loads((quick_store / "quick.json").read_text())
    }
    assert {json.dumps(params, sort_keys=True) for params in measured["params"]} == original
    store.close()
