"""The job queue: atomic claims across processes, heartbeats, progress, stale reclaims."""

from __future__ import annotations

import multiprocessing
import time
from datetime import timedelta

import sqlalchemy as sa

from store import frames
from store.schema import Job, utc_now
from store.store import Store

JOBS = 50


def claim_until_empty(
    url: str, worker: str, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue
) -> None:
    opened = Store(url)
    start.wait()
    claimed = []
    while (job := opened.jobs.claim(worker, "racer")) is not None:
        claimed.append(job.id)
        opened.jobs.finish(job.id, "done")
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
    time.sleep(1.5)  # both have opened the store and wait at the gate
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
    first = store.jobs.claim("w1", "laptop")
    assert first is not None and first.id == anyone
    assert store.jobs.claim("w1", "laptop") is None
    second = store.jobs.claim("w2", "gpu-box")
    assert second is not None and second.id == pinned


def test_heartbeat_progress_and_finish(store: Store) -> None:
    job_id = store.jobs.enqueue({}, cases_total=10)
    job = store.jobs.claim("w", "m")
    assert job is not None and job.attempts == 1
    assert store.jobs.heartbeat(job_id, "w")
    assert not store.jobs.heartbeat(job_id, "someone-else")
    store.jobs.progress(job_id, 3, 10)
    row = frames.jobs(store).iloc[0]
    assert (row["cases_done"], row["cases_total"], row["status"]) == (3, 10, "running")
    store.jobs.finish(job_id, "failed", error="ValueError: bad")
    row = frames.jobs(store).iloc[0]
    assert (row["status"], row["error"]) == ("failed", "ValueError: bad")
    assert not store.jobs.heartbeat(job_id, "w"), "a finished job takes no heartbeat"


def test_a_stale_job_is_requeued_and_its_run_marked_interrupted(store: Store) -> None:
    from tests.test_store import MACHINE

    job_id = store.jobs.enqueue({})
    assert store.jobs.claim("dead-worker", "m") is not None
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )
    store.jobs.attach_run(job_id, run_id)
    assert store.jobs.reclaim_stale(60) == [], "a fresh heartbeat is not stale"
    with store.write() as session:
        session.execute(sa.update(Job).values(heartbeat_at=utc_now() - timedelta(minutes=5)))
    assert store.jobs.reclaim_stale(60) == [job_id]
    assert frames.runs(store)["status"].tolist() == ["interrupted"]
    again = store.jobs.claim("new-worker", "m")
    assert again is not None and again.id == job_id and again.run_id == run_id and again.attempts == 2


def test_a_job_that_keeps_dying_is_failed(store: Store) -> None:
    job_id = store.jobs.enqueue({})
    for _ in range(3):
        assert store.jobs.claim("w", "m") is not None
        with store.write() as session:
            session.execute(sa.update(Job).values(heartbeat_at=utc_now() - timedelta(minutes=5)))
        store.jobs.reclaim_stale(60)
    assert store.jobs.status(job_id) == "failed"
    assert store.jobs.claim("w", "m") is None
