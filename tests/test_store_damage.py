"""A damaged store: truncated, corrupted, read-only, out of space. Each gives one clear line and
a non-zero exit, and the file is left as it was (or consistent)."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from store import frames
from store.store import Store
from tests.conftest import TINY_SPEC, copy_store

ROOT = Path(__file__).parent.parent


def decodelab(*args: str, cwd: Path, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cli", *args]
    if as_nobody:
        # Root ignores file permissions; drop to an unprivileged user for the read-only case.
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def store_copy(filled_store_url: str, tmp_path: Path) -> Path:
    """A private copy of a real store, checkpointed into one file."""
    target = tmp_path / "copy.db"
    copy_store(filled_store_url, target)
    return target


def test_a_truncated_store(store_copy: Path, tmp_path: Path) -> None:
    with open(store_copy, "r+b") as handle:
        handle.truncate(store_copy.stat().st_size // 3)
    before = store_copy.read_bytes()
    for command in (["db", "upgrade"], ["export", "--format", "csv", "--out", str(tmp_path / "x.csv")]):
        result = decodelab(*command, "--db", f"sqlite:///{store_copy}", cwd=tmp_path)
        assert_one_line_error(result, "malformed")
    assert store_copy.read_bytes() == before
    assert not (tmp_path / "x.csv").exists()


def test_a_corrupted_store(store_copy: Path, tmp_path: Path) -> None:
    with open(store_copy, "r+b") as handle:
        handle.seek(100)
        handle.write(random.Random(0).randbytes(8192))
    before = store_copy.read_bytes()
    result = decodelab(
        "export", "--format", "csv", "--out", str(tmp_path / "x.csv"), "--db", f"sqlite:///{store_copy}", cwd=tmp_path
    )
    assert_one_line_error(result)
    assert "Traceback" not in result.stderr
    assert store_copy.read_bytes() == before


def test_a_read_only_store(store_copy: Path) -> None:
    import tempfile

    # pytest's own temporary folders are private to root; this one the unprivileged user can read.
    with tempfile.TemporaryDirectory(dir="/tmp") as name:
        shared = Path(name)
        shared.chmod(0o755)
        readonly = shared / "readonly.db"
        shutil.copy(store_copy, readonly)
        readonly.chmod(0o444)
        shutil.copy(TINY_SPEC, shared / "tiny.toml")
        (shared / "tiny.toml").chmod(0o444)
        before = readonly.read_bytes()
        result = decodelab(
            "enqueue", "--spec", str(shared / "tiny.toml"), "--db", f"sqlite:///{readonly}", cwd=shared, as_nobody=True
        )
        assert_one_line_error(result, "readonly database")
        assert readonly.read_bytes() == before


def test_a_full_disk_fails_cleanly_and_keeps_the_store_consistent(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy of a filled store (its model stored, one complete run) gets room for a few pages
    more: the second run of the same spec starts, records what fits and fails on a full disk."""
    from sqlalchemy import event

    import store.store as store_module
    from cli.main import main

    url = f"sqlite:///{store_copy}"
    real_create = store_module.create_store_engine

    def on_a_tiny_disk(store_url: str, *, read_only: bool = False) -> Engine:
        engine = real_create(store_url, read_only=read_only)

        @event.listens_for(engine, "connect")
        def limit(dbapi_connection: Any, _record: object) -> None:
            pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages + 12}")

        return engine

    monkeypatch.setattr(store_module, "create_store_engine", on_a_tiny_disk)
    monkeypatch.setattr(sys, "argv", ["decodelab", "run", "--spec", str(TINY_SPEC), "--db", url])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1 and "full" in error_lines[0], error_lines
    monkeypatch.undo()

    with sqlite3.connect(store_copy) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = Store(url)
    runs = frames.runs(store).sort_values("run_id")
    assert len(runs) == 2, "the run row fitted"
    complete, failed = (int(run_id) for run_id in runs["run_id"])
    assert runs.iloc[1]["status"] == "failed" and "full" in runs.iloc[1]["error"]

    def cases(run_id: int) -> dict[tuple[str, str], tuple[list[str], int]]:
        """Per case: its metrics and how many raw samples stand behind them."""
        rows = frames.measurements(store, run_id)
        # The roofline's predictions are withheld or made from the run's own timed fits (a fit
        # that misses its points, the first case of an impl): which of them a case holds may
        # differ between two runs of one spec, so the case's whole is compared without them.
        rows = rows[~rows["metric"].str.startswith("roofline_")]
        counts = frames.samples(store, rows["measurement_id"].tolist()).groupby("measurement_id").size()
        return {
            (str(experiment), str(sorted(group["params"].iloc[0].items()))): (
                sorted(group["metric"]),
                int(counts.reindex(group["measurement_id"], fill_value=0).sum()),
            )
            for (experiment, _), group in rows.groupby(["experiment", "case_id"])
        }

    whole, partial = cases(complete), cases(failed)
    assert 0 < len(partial) < len(whole), "some cases fitted, not all"
    # Every case the failed run kept is whole: the same metrics and samples as in the complete run.
    assert all(partial[key] == whole[key] for key in partial)
    store.close()
