"""One run lifecycle for every way a run is executed: done, failed with its first line,
interrupted, each written once, through the job's claim when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from runner.execution import lifecycle
from runner.execution.lifecycle import run_lifecycle
from store import frames
from store.store import Store
from tests.conftest import rows_by
from tests.test_store import MACHINE


def new_run(store: Store) -> int:
    return store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )


def status_of(store: Store, run_id: int) -> tuple[str, str | None, float | None]:
    row = rows_by(frames.runs(store), "run_id")[run_id]
    return row["status"], row["error"], row["wall_seconds"]


def test_a_run_ends_done_failed_or_interrupted(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    done = new_run(store)
    # Its wall time counts from the ``started`` given (the model's training before the cases).
    monkeypatch.setattr(lifecycle, "time", SimpleNamespace(perf_counter=lambda: 12.5))
    with run_lifecycle(store, done, started=10.0):
        pass
    monkeypatch.undo()
    status, error, wall = status_of(store, done)
    assert (status, error, wall) == ("done", None, 2.5)

    failed = new_run(store)
    with pytest.raises(ValueError), run_lifecycle(store, failed):
        raise ValueError("the disk vanished\nand a second line nobody needs")
    assert status_of(store, failed)[:2] == ("failed", "ValueError: the disk vanished")

    interrupted = new_run(store)
    with pytest.raises(KeyboardInterrupt), run_lifecycle(store, interrupted):
        raise KeyboardInterrupt
    assert status_of(store, interrupted)[:2] == ("interrupted", "interrupted (Ctrl-C or SIGTERM)")


def test_a_claimed_run_ends_through_its_job(store: Store) -> None:
    job_id = store.jobs.enqueue({"name": "x"}, cases_total=1)
    worker = store.workers.register(
        name="w", kind="worker", machine_name="box", host="test", pid=0, stale_after_seconds=60
    )
    job = store.jobs.claim(worker)
    assert job is not None and job.claim.job_id == job_id
    run_id, _ = store.jobs.begin_run(
        job.claim, machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None, preset=None
    )
    with pytest.raises(KeyboardInterrupt), run_lifecycle(store, run_id, job.claim, requeue_on_interrupt=True):
        raise KeyboardInterrupt
    assert store.jobs.status(job_id) == "queued", "given back for the next worker"
    assert status_of(store, run_id)[0] == "interrupted"


def test_a_stop_swallowed_by_a_finalizer_is_still_seen_at_the_next_safe_point(tmp_path: Path) -> None:
    """A SIGTERM whose KeyboardInterrupt lands in a ``__del__`` (tqdm's, as a worker saw it) is
    dropped by Python with "Exception ignored"; the worker's loops still stop at check_stop."""
    script = """
import os, signal, sys
from runner.execution.lifecycle import check_stop, stop_on_signals
stop_on_signals()
class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):
            pass
Finalized()
print("still running", flush=True)
try:
    check_stop()
except KeyboardInterrupt:
    sys.exit(42)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(Path(__file__).parent.parent), "PATH": "/usr/bin:/bin"},
    )
    assert "Exception ignored" in result.stderr and "still running" in result.stdout, result.stderr
    assert result.returncode == 42, result.stderr


STOPPED_IN_EXEC = """
import sys
from runner.execution.lifecycle import stop_on_signals
stop_on_signals()
try:
    # The signal lands while code run by exec() of a string executes (as in SQLAlchemy's compile).
    exec("import os, signal\\nos.kill(os.getpid(), signal.{signal})\\nfor _ in range(10**6):\\n    pass")
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("stop_signal", ["SIGTERM", "SIGINT"])
def test_a_stop_landing_in_exec_code_still_ends_with_the_exit_code(tmp_path: Path, stop_signal: str) -> None:
    # Run as `python -m`, as the dashboard starts its worker: with a bare KeyboardInterrupt,
    # CPython 3.11 would end this process by SIGINT (-2) after the handler's sys.exit(130).
    (tmp_path / "stopped_in_exec.py").write_text(STOPPED_IN_EXEC.replace("{signal}", stop_signal))
    root = Path(__file__).parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "stopped_in_exec"],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 130, (result.returncode, result.stderr)


STORE_ERROR_AFTER_A_STOP = """
import os, signal, sys
import sqlalchemy.exc
import cli.main as cli
from runner.execution.lifecycle import stop_on_signals

stop_on_signals()
DRIVER = Exception("can't change 'autocommit' now: connection in transaction status ACTIVE")


def command(**_options):
    try:
        if sys.argv[1] == "stopped":
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10**6):
                pass
    finally:
        # What psycopg's cleanup raised in the stop's place when SIGTERM landed inside a query.
        raise sqlalchemy.exc.OperationalError("SELECT secret FROM t", {}, DRIVER)


cli.click_command = lambda: command
cli.main(["worker"])
"""


@pytest.mark.parametrize("stopped", [True, False])
def test_a_store_error_left_by_a_stop_ends_as_interrupted(tmp_path: Path, stopped: bool) -> None:
    """Seen in the fleet tests: a worker's SIGTERM landed inside a PostgreSQL query, the driver's
    cleanup raised its own error, and the worker ended 2 ("the store failed") instead of 130."""
    root = Path(__file__).parent.parent
    result = subprocess.run(
        [sys.executable, "-c", STORE_ERROR_AFTER_A_STOP, "stopped" if stopped else "not stopped"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    reason = "can't change 'autocommit' now: connection in transaction status ACTIVE"
    expected = (130, f"interrupted (as it stopped: {reason})") if stopped else (2, f"error: the store failed: {reason}")
    assert (result.returncode, result.stderr.strip()) == expected, result.stderr
    assert "secret" not in result.stderr, "no SQL in the line"
