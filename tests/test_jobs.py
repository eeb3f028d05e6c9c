"""The job queue: atomic claims across processes, heartbeats, progress, stale reclaims."""

from __future__ import annotations

import multiprocessing
import time
from datetime import timedelta

import sqlalchemy as sa

from store.schema import Job, utc_now
from store.store import Store

JOBS = 50


def claim_until_empty(
    url: str, worker: str, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue
) -> None:
    opened = Store(url)
    start.wait()
    claimed = []
    while (job := opened.claim(worker, "racer")) is not None:
        claimed.append(job.id)
        opened.finish_job(job.id, "done")
    out.put(claimed)
    opened.close()


def test_two_processes_racing_claim_each_job_exactly_once(store: Store) -> None:
    for index in range(JOBS):
        store.enqueue({"index": index})
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
    assert set(store.jobs()["status"]) == {"done"}


def test_pinned_jobs_go_only_to_their_machine(store: Store) -> None:
    pinned = store.enqueue({}, machine_name="gpu-box")
    anyone = store.enqueue({})
    first = store.claim("w1", "laptop")
    assert first is not None and first.id == anyone
    assert store.claim("w1", "laptop") is None
    second = store.claim("w2", "gpu-box")
    assert second is not None and second.id == pinned


def test_heartbeat_progress_and_finish(store: Store) -> None:
    job_id = store.enqueue({}, cases_total=10)
    job = store.claim("w", "m")
    assert job is not None and job.attempts == 1
    assert store.heartbeat(job_id, "w")
    assert not store.heartbeat(job_id, "someone-else")
    store.progress(job_id, 3, 10)
    row = store.jobs().iloc[0]
    assert (row["cases_done"], row["cases_total"], row["status"]) == (3, 10, "running")
    store.finish_job(job_id, "failed", error="ValueError: bad")
    row = store.jobs().iloc[0]
    assert (row["status"], row["error"]) == ("failed", "ValueError: bad")
    assert not store.heartbeat(job_id, "w"), "a finished job takes no heartbeat"


def test_a_stale_job_is_requeued_and_its_run_marked_interrupted(store: Store) -> None:
    from tests.test_store import MACHINE

    job_id = store.enqueue({})
    assert store.claim("dead-worker", "m") is not None
    run_id = store.start_run(machine_id=store.machine_id(MACHINE), spec={}, code_version="x", model_id=None)
    store.attach_run(job_id, run_id)
    assert store.reclaim_stale(60) == [], "a fresh heartbeat is not stale"
    with store.write() as session:
        session.execute(sa.update(Job).values(heartbeat_at=utc_now() - timedelta(minutes=5)))
    assert store.reclaim_stale(60) == [job_id]
    assert store.runs()["status"].tolist() == ["interrupted"]
    again = store.claim("new-worker", "m")
    assert again is not None and again.id == job_id and again.run_id == run_id and again.attempts == 2


def test_a_job_that_keeps_dying_is_failed(store: Store) -> None:
    job_id = store.enqueue({})
    for _ in range(3):
        assert store.claim("w", "m") is not None
        with store.write() as session:
            session.execute(sa.update(Job).values(heartbeat_at=utc_now() - timedelta(minutes=5)))
        store.reclaim_stale(60)
    assert store.job_status(job_id) == "failed"
    assert store.claim("w", "m") is None
