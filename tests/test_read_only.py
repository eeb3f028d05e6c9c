"""Read-only for real: every reading command (`export`, `report run`, `report machines`,
`db current`, `workers`) opens the store read-only, works on a store file that is itself
read-only in a read-only folder, never creates a store at a mistyped path, and on PostgreSQL
reads in sessions the server keeps read-only."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.errors import StoreError
from store.records import CaseRecord, MeasurementRecord, SampleRecord
from store.store import Store
from tests.conftest import _cli_environment, copy_store
from tests.test_store import MACHINE

# Root writes through any permission bits; without these two capabilities it obeys them, as
# any other user would (the tests run as root in CI containers).
WITHOUT_OVERRIDE = [
    "setpriv",
    "--inh-caps=-dac_override,-dac_read_search",
    "--bounding-set=-dac_override,-dac_read_search",
]


def as_ordinary_user(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI, unable to write what its permission bits forbid, even as root."""
    prefix = WITHOUT_OVERRIDE + ["--"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=_cli_environment({}),
    )


def fill(store: Store) -> None:
    """Two done runs of one preset on one machine (a run and its baseline), a job, a worker."""
    machine_id = store.results.machine_id(MACHINE)
    for value in (1.0, 1.1):
        run_id = store.results.start_run(machine_id=machine_id, spec={}, code_version="x", model_id=None, preset="p")
        samples = tuple(SampleRecord(pair, side, 0.01 * value) for pair in range(3) for side in "AB")
        case = CaseRecord(
            "kv_cache", {"part": "timing", "n": 8}, (MeasurementRecord("speedup", value, "ratio", samples),)
        )
        store.results.record_case(run_id, case)
        store.results.finish_run(run_id, "done", wall_seconds=1.0)
    store.jobs.enqueue({"name": "queued"})
    store.workers.register(name="w:1", kind="worker", machine_name="laptop", host="h", pid=1, stale_after_seconds=60)


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[Path]:
    """A filled SQLite store copied (one file, no side files) into a folder, then both made
    read-only: a copy handed to a reviewer, an immutable snapshot."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    store = Store(source)
    fill(store)
    store.close()
    folder = tmp_path / "snapshot"
    folder.mkdir()
    copy_store(source, folder / "store.db")
    (folder / "store.db").chmod(0o444)
    folder.chmod(0o555)
    yield folder / "store.db"
    folder.chmod(0o755)


def fingerprint(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.mark.slow
def test_every_reading_command_works_on_a_read_only_store_file(read_only_store: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{read_only_store}"
    before = fingerprint(read_only_store.parent)
    out = tmp_path / "out"
    out.mkdir()
    commands = {
        "db current": ["db", "current"],
        "workers": ["workers"],
        "export csv": ["export", "--format", "csv", "--out", str(out / "all.csv")],
        "export json": ["export", "--format", "json", "--out", str(out / "all.json")],
        "report run": ["report", "run", "--run", "2", "--baseline", "1", "--out", str(out / "run.md")],
        "report machines": ["report", "machines", "--out", str(out / "machines.md")],
    }
    for name, command in commands.items():
        result = as_ordinary_user(*command, "--db", url, cwd=tmp_path)
        assert result.returncode == 0, f"{name}: {result.stderr}"
    assert "up to date" in as_ordinary_user("db", "current", "--db", url, cwd=tmp_path).stdout
    assert "w:1" in as_ordinary_user("workers", "--db", url, cwd=tmp_path).stdout
    assert (out / "all.csv").read_text().count("speedup") == 2
    assert fingerprint(read_only_store.parent) == before, "a reading command changed or added a file"
    assert stat.S_IMODE(read_only_store.stat().st_mode) == 0o444


@pytest.mark.slow
def test_a_reading_command_never_creates_a_store_at_a_mistyped_path(tmp_path: Path) -> None:
    missing = tmp_path / "mistyped.db"
    url = f"sqlite:///{missing}"
    for command in (
        ["db", "current"],
        ["workers"],
        ["export", "--out", str(tmp_path / "x.csv")],
        ["report", "machines", "--out", str(tmp_path / "m.md")],
        ["report", "run", "--run", "1", "--out", str(tmp_path / "r.md")],
    ):
        result = as_ordinary_user(*command, "--db", url, cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, f"{command}: {result.stderr}"
        assert "no such file" in lines[0], lines[0]
        assert not missing.exists(), f"{' '.join(command)} created a store"


def test_a_read_only_store_refuses_every_write(store_url: str) -> None:
    Store(store_url).close()
    reader = Store(store_url, read_only=True)
    if reader.backend == "postgresql":
        with reader.read() as session:
            assert session.connection().exec_driver_sql("SHOW default_transaction_read_only").scalar() == "on"
    # SQLite's refusal ("attempt to write a readonly database") comes through the store's own
    # error; PostgreSQL's ("cannot execute INSERT in a read-only transaction") as the driver's.
    with pytest.raises((StoreError, sa.exc.DBAPIError), match="read-only|readonly"):
        reader.jobs.enqueue({"name": "x"})
    reader.close()


def test_the_read_only_dashboard_reads_through_a_read_only_connection(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import data

    Store(sqlite_url).close()
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")
    data.store_for.clear()
    try:
        store = data.store_for(sqlite_url)
        assert store.read_only
        with pytest.raises(StoreError, match="readonly"):
            store.jobs.enqueue({"name": "from a visitor"})
    finally:
        data.store_for.clear()


def test_the_read_only_dashboard_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "mistyped.db"
    result = as_ordinary_user("dashboard", "--read-only", "--port", "1", "--db", f"sqlite:///{missing}", cwd=tmp_path)
    assert result.returncode == 2 and "no such file" in result.stderr, result.stderr
    assert not missing.exists()
