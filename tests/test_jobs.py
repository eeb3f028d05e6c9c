"""The job queue: atomic claims across processes, one job per machine, heartbeats, progress,
fencing of a worker that lost its job, stale reclaims by the server's clock."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from store import frames
from store.clock import server_now
from store.errors import ClaimLost
from store.records import CaseRecord, MeasurementRecord, WorkerRecord
from store.schema import Job, utc_now
from store.store import Store

JOBS = 50


def a_worker(store: Store, name: str, machine: str = "m", stale_after_seconds: float = 60) -> WorkerRecord:
    return store.workers.register(
        name=name, kind="worker", machine_name=machine, host="test", pid=0, stale_after_seconds=stale_after_seconds
    )


def claim_until_empty(
    url: str, worker: str, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue
) -> None:
    opened = Store(url)
    # Each racer is a machine of its own: one machine runs one job at a time.
    me = a_worker(opened, worker, machine=worker)
    out.put("ready")
    start.wait()
    claimed = []
    while (job := opened.jobs.claim(me)) is not None:
        claimed.append(job.id)
        opened.jobs.finish(job.claim, "done")
    out.put(claimed)
    opened.close()


def test_two_processes_racing_claim_each_job_exactly_once(store: Store) -> None:
    for index in range(JOBS):
        store.jobs.enqueue({"index": index})
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    processes = [
        context.Process(target=claim_until_empty, args=(store.url, f"worker-{n}", start, out)) for n in range(2)
    ]
    for process in processes:
        process.start()
    # Both have opened the store and wait at the gate before either may claim.
    assert [out.get(timeout=120) for _ in processes] == ["ready", "ready"]
    start.set()
    claimed = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    every_claim = claimed[0] + claimed[1]
    assert sorted(every_claim) == sorted(set(every_claim)), "a job was claimed twice"
    assert len(every_claim) == JOBS
    assert set(frames.jobs(store)["status"]) == {"done"}


def test_pinned_jobs_go_only_to_their_machine(store: Store) -> None:
    pinned = store.jobs.enqueue({}, machine_name="gpu-box")
    anyone = store.jobs.enqueue({})
    laptop, gpu_box = a_worker(store, "w1", "laptop"), a_worker(store, "w2", "gpu-box")
    first = store.jobs.claim(laptop)
    assert first is not None and first.id == anyone
    store.jobs.finish(first.claim, "done")
    assert store.jobs.claim(laptop) is None
    second = store.jobs.claim(gpu_box)
    assert second is not None and second.id == pinned


def test_a_machine_runs_one_job_at_a_time(store: Store) -> None:
    first_job, second_job = store.jobs.enqueue({}), store.jobs.enqueue({})
    one, two, elsewhere = a_worker(store, "one"), a_worker(store, "two"), a_worker(store, "three", "other-box")
    first = store.jobs.claim(one)
    assert first is not None and first.id == first_job
    assert store.jobs.claim(two) is None, "a second worker on the same machine waits"
    assert store.jobs.running_on("m") == first_job and store.jobs.queued_for("m") == 1
    # A terminal run on the busy machine waits too; another machine does not.
    assert store.jobs.claim_new({"name": "here"}, two) is None
    other = store.jobs.claim(elsewhere)
    assert other is not None and other.id == second_job
    store.jobs.finish(first.claim, "done")
    here = store.jobs.claim_new({"name": "here"}, two, cases_total=3)
    assert here is not None and here.machine_name == "m" and store.jobs.running_on("m") == here.id


def test_heartbeat_progress_and_finish(store: Store) -> None:
    job_id = store.jobs.enqueue({}, cases_total=10)
    worker = a_worker(store, "w")
    job = store.jobs.claim(worker)
    assert job is not None and job.attempts == 1
    assert store.jobs.heartbeat(job.claim)
    assert not store.jobs.heartbeat(type(job.claim)(job_id, worker.id + 1, 1)), "another worker's beat"
    store.jobs.progress(job.claim, 3, 10)
    row = frames.jobs(store).iloc[0]
    assert (row["cases_done"], row["cases_total"], row["status"]) == (3, 10, "running")
    assert frames.workers(store).iloc[0]["job_id"] == job_id
    store.jobs.finish(job.claim, "failed", error="ValueError: bad")
    store.jobs.finish(job.claim, "failed", error="ValueError: bad")  # a retry changes nothing
    row = frames.jobs(store).iloc[0]
    assert (row["status"], row["error"]) == ("failed", "ValueError: bad")
    # A beat after its own claim's finish (the heartbeat thread racing the finish) is no loss.
    assert store.jobs.heartbeat(job.claim)
    assert frames.jobs(store).iloc[0]["status"] == "failed", "a beat does not revive a finished job"
    assert frames.workers(store)["job_id"].isna().all()


def go_stale(store: Store) -> None:
    with store.write() as session:
        session.execute(sa.update(Job).values(heartbeat_at=server_now(store.backend, -300)))


def test_a_worker_that_lost_its_job_changes_nothing(store: Store) -> None:
    from tests.test_store import MACHINE

    store.jobs.enqueue({}, cases_total=2)
    frozen, rescuer = a_worker(store, "frozen"), a_worker(store, "rescuer")
    lost = store.jobs.claim(frozen)
    assert lost is not None
    machine_id = store.results.machine_id(MACHINE)
    run_id, resumed = store.jobs.begin_run(lost.claim, machine_id=machine_id, spec={}, code_version="x", model_id=None)
    assert not resumed
    case = CaseRecord("kv_cache", {"n": 1}, (MeasurementRecord("m", 1.0, "ratio"),))
    assert store.results.record_case(run_id, case, lost.claim) is not None
    go_stale(store)
    assert store.jobs.reclaim_stale(60) == [lost.id]
    taken = store.jobs.claim(rescuer)
    assert taken is not None and taken.attempts == 2 and taken.run_id == run_id
    assert store.jobs.begin_run(taken.claim, machine_id=machine_id, spec={}, code_version="x", model_id=None) == (
        run_id,
        True,
    )
    store.jobs.finish(taken.claim, "done", wall_seconds=1.0)
    finished = frames.jobs(store).iloc[0]

    late = CaseRecord("kv_cache", {"n": 2}, (MeasurementRecord("m", 1.0, "ratio"),))
    assert not store.jobs.heartbeat(lost.claim)
    for stale_write in (
        lambda: store.results.record_case(run_id, late, lost.claim),
        lambda: store.results.record_case(run_id, late),  # no claim at all: a job owns this run
        lambda: store.results.finish_run(run_id, "failed"),
        lambda: store.jobs.progress(lost.claim, 2, 2),
        lambda: store.jobs.finish(lost.claim, "done"),
        lambda: store.jobs.requeue(lost.claim, error="SIGTERM"),
        lambda: store.jobs.begin_run(lost.claim, machine_id=machine_id, spec={}, code_version="x", model_id=None),
    ):
        with pytest.raises(ClaimLost):
            stale_write()
    after = frames.jobs(store).iloc[0]
    assert (after["status"], after["finished_at"], after["attempts"]) == ("done", finished["finished_at"], 2)
    assert frames.runs(store).iloc[0]["status"] == "done"
    assert len(store.results.recorded_case_keys(run_id)) == 1


def test_sigterm_requeues_the_job_and_the_next_claim_resumes_its_run(store: Store) -> None:
    from tests.test_store import MACHINE

    store.jobs.enqueue({})
    first = store.jobs.claim(a_worker(store, "stopped"))
    assert first is not None
    machine_id = store.results.machine_id(MACHINE)
    run_id, _ = store.jobs.begin_run(first.claim, machine_id=machine_id, spec={}, code_version="x", model_id=None)
    store.jobs.requeue(first.claim, error="interrupted (SIGTERM); requeued")
    assert (frames.jobs(store).iloc[0]["status"], frames.runs(store).iloc[0]["status"]) == ("queued", "interrupted")
    again = store.jobs.claim(a_worker(store, "next"))
    assert again is not None and again.run_id == run_id and again.attempts == 2


def test_a_stale_job_is_requeued_and_its_run_marked_interrupted(store: Store) -> None:
    from tests.test_store import MACHINE

    job_id = store.jobs.enqueue({})
    dead = store.jobs.claim(a_worker(store, "dead-worker"))
    assert dead is not None
    store.jobs.begin_run(
        dead.claim, machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )
    assert store.jobs.reclaim_stale(60) == [], "a fresh heartbeat is not stale"
    # A heartbeat stamped five minutes ago (written here by this process's clock, as an older
    # worker would have) is stale by the server's clock.
    with store.write() as session:
        session.execute(sa.update(Job).values(heartbeat_at=utc_now() - timedelta(minutes=5)))
    assert store.jobs.reclaim_stale(60) == [job_id]
    assert frames.runs(store)["status"].tolist() == ["interrupted"]
    assert frames.workers(store)["job_id"].isna().all(), "the dead worker no longer holds it"
    again = store.jobs.claim(a_worker(store, "new-worker"))
    assert again is not None and again.id == job_id and again.attempts == 2


def test_a_job_whose_workers_keep_going_silent_is_failed(store: Store) -> None:
    job_id = store.jobs.enqueue({})
    worker = a_worker(store, "w")
    for _ in range(3):
        assert store.jobs.claim(worker) is not None
        go_stale(store)
        store.jobs.reclaim_stale(60)
    assert store.jobs.status(job_id) == "failed"
    assert store.jobs.claim(worker) is None


def test_workers_are_live_stopped_or_dead_by_the_server_clock(store: Store) -> None:
    from store.schema import Worker

    live, stopped, dead = (
        a_worker(store, "live"),
        a_worker(store, "stopped"),
        a_worker(store, "dead", stale_after_seconds=5),
    )
    store.workers.stop(stopped.id)
    with store.write() as session:
        session.execute(
            sa.update(Worker).where(Worker.id == dead.id).values(last_seen_at=server_now(store.backend, -6))
        )
    states = frames.workers(store).set_index("name")["state"].to_dict()
    assert states == {"live": "live", "stopped": "stopped", "dead": "dead"}
    assert store.workers.live("m") == [live.id]
    assert store.workers.live("other") == []


@pytest.mark.parametrize("skew_hours", [-2.0, 2.0])
def test_a_machine_whose_own_clock_is_hours_off_changes_no_claim_heartbeat_or_staleness(
    store: Store, monkeypatch: pytest.MonkeyPatch, skew_hours: float
) -> None:
    """Every time workers compare is the database server's: a worker whose machine runs hours
    fast or slow neither looks dead to the others nor makes their jobs look stale."""
    from store import schema as schema_module
    from tests.test_store import MACHINE
    from tests.test_transfer import utc

    class SkewedClock(datetime):
        """This machine's clock: what store.schema.utc_now (every ORM default) reads."""

        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=skew_hours)

    monkeypatch.setattr(schema_module, "datetime", SkewedClock)
    assert abs((schema_module.utc_now() - datetime.now(UTC)).total_seconds()) > 3600
    me = a_worker(store, "skewed", stale_after_seconds=30)
    job_id = store.jobs.enqueue({"x": 1})
    job = store.jobs.claim(me)
    assert job is not None and job.id == job_id
    store.jobs.begin_run(
        job.claim, machine_id=store.results.machine_id(MACHINE), spec={}, code_version="t", model_id=None
    )
    store.workers.touch(me.id)
    assert store.jobs.heartbeat(job.claim)
    assert store.jobs.reclaim_stale(stale_after_seconds=30) == [], "a fresh heartbeat looked stale"
    assert store.workers.live("m") == [me.id], "a live worker looked dead"
    run = frames.runs(store).iloc[0]
    drift = abs((utc(run["started_at"]) - datetime.now(UTC)).total_seconds())
    assert drift < 600, f"the run's start came from the machine's clock ({drift:.0f} s off)"
