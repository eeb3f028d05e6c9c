"""Four workers and a polling reader over one store: every job done exactly once, no
'database is locked' escapes, and the reader never sees half a case."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from store import frames
from store.store import Store
from tests.conftest import start_decodelab
from tests.shared_parts import counting_job, store_roof_of

JOBS = 24
WORKERS = 4
CASE_METRICS = {"table": 3, "summary": 10}

pytestmark = pytest.mark.slow


def poll_like_the_dashboard(url: str, stop: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    """Read runs, jobs and each run's cases until told to stop; report what was seen."""
    store = Store(url, upgrade=False)
    reads, problems = 0, []
    try:
        while not stop.is_set():
            frames.jobs(store)
            for run_id in frames.runs(store)["run_id"].tolist()[:10]:
                measured = frames.measurements(store, int(run_id))
                for _, case in measured.groupby("case_id"):
                    part = case["params"].iloc[0]["part"]
                    if case["metric"].nunique() != CASE_METRICS[part]:
                        problems.append(f"run {run_id}: a {part} case with {case['metric'].nunique()} metrics")
                reads += 1
            time.sleep(0.05)
    except Exception as error:  # anything escaping is a failure of the store
        problems.append(f"{type(error).__name__}: {error}")
    out.put((reads, problems))


def test_four_workers_and_a_reader(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url)
    for index in range(JOBS):
        store.jobs.enqueue(counting_job("small", index), cases_total=3)
    # The machines' roofs stored: no worker profiles its machine first (the workers still train
    # the jobs' model, all at once, each saving it).
    store_roof_of(store, *(f"machine-{number}" for number in range(WORKERS)))
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    reader = context.Process(target=poll_like_the_dashboard, args=(store_url, stop, out))
    reader.start()
    # Four machines (one timing job per machine at a time), so claims really race. A worker idles
    # only once the queue is empty (queued jobs reset its idle clock), so each stops a second after
    # the last claim instead of four, while the reader polls on.
    workers = [
        start_decodelab(
            "worker",
            "--db",
            store_url,
            "--poll-seconds",
            "0.2",
            "--max-idle-seconds",
            "1",
            cwd=tmp_path,
            DECODELAB_MACHINE=f"machine-{number}",
        )
        for number in range(WORKERS)
    ]
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    stop.set()
    reads, problems = out.get(timeout=60)
    reader.join(timeout=30)
    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, output
        assert "database is locked" not in output, output
    assert not problems, problems[:5]
    assert reads > 0
    jobs = frames.jobs(store, limit=JOBS)
    assert len(jobs) == JOBS
    assert set(jobs["status"]) == {"done"}, jobs[jobs["status"] != "done"][["job_id", "status", "error"]]
    assert (jobs["attempts"] == 1).all(), "a job was claimed twice"
    assert jobs["run_id"].nunique() == JOBS
    runs = frames.runs(store)
    assert len(runs) == JOBS and set(runs["status"]) == {"done"}
    busy = {line.split()[-1] for output in outputs for line in output.splitlines() if "running small-" in line}
    assert len(busy) > 1, "more than one worker took part"
