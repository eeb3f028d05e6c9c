"""What decodelab writes is its owner's: through the real commands, under the loosest umask, a
new store (and its WAL) is 0600, exports and reports 0640, the dashboard's worker log 0600; an
output's temporary file is made O_EXCL under a name nobody can predict, so a symlink planted at
the old fixed ``OUT.partial`` (or at OUT itself) never makes decodelab write through it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import run_decodelab


@contextlib.contextmanager
def loosest_umask() -> Iterator[None]:
    """umask 0 for this process and the commands it starts: modes come from decodelab alone."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_store_and_its_wal_are_the_owners_alone(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    with loosest_umask():
        result = run_decodelab("db", "upgrade", "--db", f"sqlite:///{store}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert mode(store) == 0o600
        with contextlib.closing(sqlite3.connect(store)) as connection:
            connection.execute("CREATE TABLE scratch (x INTEGER)")  # a write: the WAL appears
            assert mode(tmp_path / "store.db-wal") == 0o600


def test_exports_and_reports_are_0640_and_never_written_through_a_planted_link(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert run_decodelab("db", "upgrade", "--db", url, cwd=tmp_path).returncode == 0
    shared = tmp_path / "shared"
    shared.mkdir()
    victim, other_victim = tmp_path / "victim.txt", tmp_path / "other-victim.txt"
    victim.write_text("precious\n")
    other_victim.write_text("precious too\n")
    out = shared / "runs.json"
    # Another user's links: at the name the old code wrote to first, and at the output itself.
    (shared / "runs.json.partial").symlink_to(victim)
    with loosest_umask():
        result = run_decodelab("export", "--format", "json", "--out", str(out), "--db", url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert victim.read_text() == "precious\n" and (shared / "runs.json.partial").is_symlink()
        assert not out.is_symlink() and out.read_text().strip() == "[]" and mode(out) == 0o640
        table = shared / "runs.csv"
        table.symlink_to(other_victim)
        result = run_decodelab("export", "--format", "csv", "--out", str(table), "--db", url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert other_victim.read_text() == "precious too\n" and not table.is_symlink() and mode(table) == 0o640
        result = run_decodelab("report", "context-cost", "--out", str(shared), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert {mode(shared / name) for name in ("cost_report.json", "cost_report.md")} == {0o640}
    # Nothing temporary left behind: the folder holds the outputs and the planted link only.
    assert sorted(path.name for path in shared.iterdir()) == [
        "cost_report.json", "cost_report.md", "runs.csv", "runs.json", "runs.json.partial"
    ]  # fmt: skip


def test_the_dashboards_worker_log_is_the_owners_alone(tmp_path: Path) -> None:
    """The log the dashboard's launch starts a worker with (dashboard/launch.py), an older,
    wider one narrowed."""
    from dashboard.launch import start_worker, worker_log_path

    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert run_decodelab("db", "upgrade", "--db", url, cwd=tmp_path).returncode == 0
    log = worker_log_path(url)
    log.write_text("an older log\n")
    log.chmod(0o644)
    with loosest_umask():
        worker = start_worker(url, idle_seconds=1)
    try:
        assert mode(log) == 0o600 and log.read_text().startswith("an older log\n")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
