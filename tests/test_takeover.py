"""Taking over a dead worker's job: a run's cases all come from one machine (a worker on another
machine starts a new run, the partial one is marked abandoned; the same machine resumes), a
run's wall time adds up its attempts, and staleness is judged by the owner's own limit."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import pytest
import sqlalchemy as sa

from runner.spec.sweeps import validate
from store import frames
from store.clock import server_now
from store.records import CaseRecord, MeasurementRecord
from store.schema import Job
from store.store import Store
from tests.conftest import rows_by
from tests.shared_parts import store_model_of, store_roof_of
from tests.test_fleet import (  # noqa: F401 - the fixture kills a failing test's workers
    QUICK_CASES,
    no_child_outlives_its_test,
    silent_for,
    timed_job,
    wait_until,
    worker,
)
from tests.test_jobs import a_worker
from tests.test_store import MACHINE

OTHER_MACHINE = dataclasses.replace(MACHINE, name="desktop")


def heartbeat_seconds_ago(store: Store, seconds: float) -> None:
    with store.write() as session:
        session.execute(sa.update(Job).values(heartbeat_at=server_now(store.backend, -seconds)))


def a_case(n: int) -> CaseRecord:
    return CaseRecord("kv_cache", {"n": n}, (MeasurementRecord("m", 1.0, "ratio"),))


def test_the_same_machine_resumes_and_the_wall_time_adds_up(store: Store) -> None:
    store.jobs.enqueue({})
    machine_id = store.results.machine_id(MACHINE)
    first = store.jobs.claim(a_worker(store, "first"))
    assert first is not None
    run_id, _ = store.jobs.begin_run(first.claim, machine_id=machine_id, spec={}, code_version="x", model_id=None)
    store.jobs.requeue(first.claim, error="SIGTERM; requeued", wall_seconds=2.0)
    again = store.jobs.claim(a_worker(store, "second"))
    assert again is not None
    assert store.jobs.begin_run(again.claim, machine_id=machine_id, spec={}, code_version="x", model_id=None) == (
        run_id,
        True,
    )
    store.jobs.finish(again.claim, "done", wall_seconds=3.0)
    run = rows_by(frames.runs(store), "run_id")[run_id]
    assert (run["status"], run["wall_seconds"]) == ("done", 5.0), "the run's wall time is both attempts'"


def test_another_machine_starts_a_new_run_and_the_partial_one_is_abandoned(store: Store) -> None:
    job_id = store.jobs.enqueue({})
    dead = store.jobs.claim(a_worker(store, "dead", machine="laptop"))
    assert dead is not None
    laptop_id, desktop_id = store.results.machine_id(MACHINE), store.results.machine_id(OTHER_MACHINE)
    partial, _ = store.jobs.begin_run(dead.claim, machine_id=laptop_id, spec={}, code_version="x", model_id=None)
    assert store.results.record_case(partial, a_case(1), dead.claim) is not None
    heartbeat_seconds_ago(store, 300)
    assert store.jobs.reclaim_stale(60) == [job_id]
    taker = store.jobs.claim(a_worker(store, "taker", machine="desktop"))
    assert taker is not None and taker.run_id == partial
    fresh, resumed = store.jobs.begin_run(taker.claim, machine_id=desktop_id, spec={}, code_version="x", model_id=None)
    assert not resumed and fresh != partial
    # A retry of the same begin (a lost reply) finds the new run, not a third one.
    assert store.jobs.begin_run(taker.claim, machine_id=desktop_id, spec={}, code_version="x", model_id=None) == (
        fresh,
        True,
    )
    assert store.results.recorded_case_keys(fresh) == set(), "the new run repeats every case on its machine"
    store.jobs.finish(taker.claim, "done", wall_seconds=1.0)
    runs = rows_by(frames.runs(store), "run_id")
    assert runs[partial]["status"] == "abandoned"
    assert f"job {job_id} continued on machine desktop as run {fresh}" in runs[partial]["error"]
    assert (runs[fresh]["status"], runs[fresh]["wall_seconds"]) == ("done", 1.0)
    assert len(store.results.recorded_case_keys(partial)) == 1, "the abandoned run keeps its cases"
    assert rows_by(frames.jobs(store), "job_id")[job_id]["run_id"] == fresh


def test_a_takeover_uses_the_owners_stale_limit_not_the_takers(store: Store) -> None:
    job_id = store.jobs.enqueue({})
    owner = a_worker(store, "patient", stale_after_seconds=120)
    assert store.jobs.claim(owner) is not None
    heartbeat_seconds_ago(store, 20)  # it beats every 20 s, well inside its own 120 s
    assert store.jobs.reclaim_stale(3) == [], "a taker's 3 s limit took a live job"
    heartbeat_seconds_ago(store, 130)
    assert store.jobs.reclaim_stale(600) == [job_id], "silent past its own limit, it is dead"


@pytest.mark.slow
@pytest.mark.postgres
def test_a_worker_on_another_machine_takes_over_with_a_run_of_its_own(postgres_url: str, tmp_path: Path) -> None:
    store = Store(postgres_url)
    job = store.jobs.enqueue(timed_job())
    store_model_of(store, timed_job())
    store_roof_of(store, "alpha", "beta")
    total = validate(timed_job()).cases_total()
    alpha = worker(postgres_url, tmp_path, machine="alpha")
    wait_until(lambda: rows_by(frames.jobs(store), "job_id")[job]["cases_done"] >= QUICK_CASES, what="quick cases")
    alpha.process.send_signal(signal.SIGKILL)
    alpha.finish()
    partial = int(rows_by(frames.jobs(store), "job_id")[job]["run_id"])
    kept = frames.measurements(store, partial)["case_id"].nunique()
    assert 0 < kept < total
    wait_until(lambda: silent_for(store, job, 3), what="alpha's job to go stale")
    beta = worker(postgres_url, tmp_path, "--until-empty", machine="beta")
    output = beta.finish(timeout=300)
    assert beta.process.returncode == 0, output
    done = rows_by(frames.jobs(store), "job_id")[job]
    runs = rows_by(frames.runs(store), "run_id")
    fresh = int(done["run_id"])
    assert done["status"] == "done" and fresh != partial
    assert (runs[partial]["status"], runs[partial]["machine"]) == ("abandoned", "alpha")
    assert (runs[fresh]["status"], runs[fresh]["machine"]) == ("done", "beta")
    assert frames.measurements(store, fresh)["case_id"].nunique() == total, "beta ran every case itself"
    assert frames.measurements(store, partial)["case_id"].nunique() == kept, "alpha's cases are kept"
    store.close()
