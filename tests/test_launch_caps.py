"""Caps the server sets, not the spec: a dashboard's launches obey the limits whoever started it
chose (`decodelab dashboard --max-hours, --max-memory, --max-queued`, passed to the app in its
environment), a spec's own max_hours is lowered to the cap, one page may launch only so many
sweeps a minute, and any queued or running job can be called off (`decodelab cancel JOB`, or the
button beside it in the sidebar)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.launch import LAUNCHES_PER_MINUTE, check_launch_rate
from runner.errors import InputError
from store import frames
from store.store import Store
from tests.conftest import QUICK_SPEC, ROOT, run_decodelab

# The quick spec allowing itself a year, as the drill's spec did.
GREEDY_SPEC = QUICK_SPEC.replace('name = "tiny"', 'name = "tiny"\nmax_hours = 8760')


def test_cancel_calls_off_a_queued_job_and_no_worker_takes_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    (tmp_path / "quick.toml").write_text(QUICK_SPEC)
    assert run_decodelab("enqueue", "--spec", "quick.toml", "--db", url, cwd=tmp_path).returncode == 0
    result = run_decodelab("cancel", "1", "--db", url, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "job 1 cancelled (it was queued)", result.stderr
    result = run_decodelab("worker", "--until-empty", "--db", url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    store = Store(url)
    job = frames.jobs(store).set_index("job_id").loc[1]
    assert job["status"] == "cancelled" and not store.results.run_exists(1)
    store.close()
    for job_id, line in (
        ("1", "error: JOB: job 1 is cancelled already (allowed: a queued or running job)"),
        ("99", "error: JOB: no job 99 in this store"),
    ):
        result = run_decodelab("cancel", job_id, "--db", url, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [line], result.stderr


def test_the_dashboards_caps_are_checked_as_it_starts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    for option, value in (("--max-hours", "0"), ("--max-memory", "-1"), ("--max-queued", "0")):
        result = run_decodelab("dashboard", "--db", url, option, value, cwd=tmp_path, timeout=60)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert option in result.stderr


def test_the_launch_rate_is_per_minute() -> None:
    times: list[float] = []
    for second in range(LAUNCHES_PER_MINUTE):
        times = check_launch_rate(times, 100.0 + second)
    with pytest.raises(InputError, match=f"allowed: at most {LAUNCHES_PER_MINUTE} a minute; wait 56 s"):
        check_launch_rate(times, 104.0)
    assert len(check_launch_rate(times, 160.5)) == LAUNCHES_PER_MINUTE  # the first has aged out


def launch_spec(app: AppTest, spec: str) -> None:
    app.radio(key="launch_source").set_value("spec").run()
    app.text_area(key="launch_spec").input(spec).run()
    app.button(key="launch_button").click().run()
    assert not app.exception, [exception.value for exception in app.exception]


def errors(app: AppTest) -> list[str]:
    return [error.value for error in app.sidebar.error]


@pytest.mark.slow
def test_the_sidebar_keeps_to_the_caps_its_starter_set(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole app under AppTest with the environment `decodelab dashboard --max-hours 2
    --max-memory 0.001 / 4 --max-queued 2` gives it (no worker started: the jobs stay queued)."""
    import dashboard.launch

    monkeypatch.setattr(dashboard.launch, "start_worker", lambda url: None)
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("DECODELAB_MAX_HOURS", "2")
    monkeypatch.setenv("DECODELAB_MAX_QUEUED", "2")
    monkeypatch.setenv("DECODELAB_MAX_MEMORY_GIB", "0.001")
    Store(sqlite_url).close()
    app = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    app.run()
    launch_spec(app, GREEDY_SPEC)
    assert any(
        line.startswith("memory: estimated peak memory")
        and "allowed: at most 0.001 GiB, set by `decodelab dashboard --max-memory`" in line
        for line in errors(app)
    ), errors(app)
    monkeypatch.setenv("DECODELAB_MAX_MEMORY_GIB", "4")
    monkeypatch.setenv("DECODELAB_MAX_HOURS", "0.0001")
    launch_spec(app, GREEDY_SPEC)
    assert any("is above this dashboard's cap (allowed: at most 0.0001 hours" in line for line in errors(app))
    monkeypatch.setenv("DECODELAB_MAX_HOURS", "2")
    store = Store(sqlite_url)
    assert frames.jobs(store).empty  # nothing over a cap was queued
    launch_spec(app, GREEDY_SPEC)
    launch_spec(app, GREEDY_SPEC)
    with store.engine.connect() as connection:
        allowed = [json.loads(row[0])["max_hours"] for row in connection.exec_driver_sql("SELECT spec FROM job").all()]
    assert allowed == [2.0, 2.0], "the job carries the dashboard's cap, not the spec's 8760"
    launch_spec(app, GREEDY_SPEC)
    assert any(line.startswith("queue: 2 jobs queued or running already (allowed: at most 2") for line in errors(app))
    # The sidebar's button calls one off, and then there is room again.
    app.button(key="cancel_job_1").click().run()
    assert not app.exception
    assert frames.jobs(store).set_index("job_id").loc[1, "status"] == "cancelled"
    monkeypatch.setenv("DECODELAB_MAX_QUEUED", "100")
    for _ in range(LAUNCHES_PER_MINUTE - 2):
        launch_spec(app, GREEDY_SPEC)
    assert len(frames.jobs(store)) == LAUNCHES_PER_MINUTE
    launch_spec(app, GREEDY_SPEC)
    assert any(line.startswith(f"launch: {LAUNCHES_PER_MINUTE} launches in the last minute") for line in errors(app))
    assert len(frames.jobs(store)) == LAUNCHES_PER_MINUTE
    store.close()


@pytest.mark.slow
def test_cancel_stops_a_running_job_at_its_next_heartbeat(tmp_path: Path) -> None:
    """A worker running the job (training its model): `decodelab cancel` ends the job, the
    worker finds its claim gone at the next beat and stops writing; the run is interrupted."""
    import time

    from tests.conftest import LEAN_SPEC, start_decodelab

    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert run_decodelab("enqueue", "--spec", str(LEAN_SPEC), "--db", url, cwd=tmp_path).returncode == 0
    worker = start_decodelab("worker", "--once", "--heartbeat-seconds", "0.5", "--db", url, cwd=tmp_path)
    store = Store(url)
    try:
        deadline = time.monotonic() + 120
        while store.jobs.status(1) != "running" or frames.jobs(store).iloc[0]["run_id"] != 1:
            assert time.monotonic() < deadline and worker.poll() is None, "the worker never ran the job"
            time.sleep(0.1)  # polling the store, not a pause
        result = run_decodelab("cancel", "1", "--db", url, cwd=tmp_path)
        assert result.stdout.strip() == "job 1 cancelled (it was running)", result.stderr
        output, _ = worker.communicate(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert "job 1 is no longer this worker's" in output, output
    assert store.jobs.status(1) == "cancelled"
    assert frames.runs(store).set_index("run_id").loc[1, "status"] == "interrupted"
    store.close()
