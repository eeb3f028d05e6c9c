"""Every way a job ends leaves it final or queued, never running with no heartbeat behind it:
an error before the run begins fails it with one line, a stop during training requeues it (a
worker) or marks it interrupted (a terminal run), and a heartbeat that lands after the run's
own finish does not report the job as lost."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from runner.execution.worker import Heartbeat
from store import frames
from store.store import Store
from tests.conftest import run_decodelab, start_decodelab
from tests.test_fleet import (  # noqa: F401 - the fixture kills a failing test's workers
    Output,
    no_child_outlives_its_test,
    wait_until,
)
from tests.test_jobs import a_worker, go_stale


def write_spec(path: Path, *, corpus: str = "default", steps: int = 3) -> Path:
    path.write_text(
        "\n".join(
            [
                'name = "endings"',
                f"[model]\nd_model = 16\nn_layer = 1\nn_head = 2\ncontext_length = 32\ncorpus = {corpus!r}",
                f"[train]\nsteps = {steps}\nbatch_size = 4\nsequence_length = 16",
                "[experiments.context_cost]\nlengths = [8, 100]\nd_model = 8\nd_ff = 16\nn_heads = 2",
                "reference_length = 16",
            ]
        )
    )
    return path


class RecordedStops:
    """Stands in for the main-thread signal: records what the heartbeat would have raised."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def stop_with(self, error: BaseException) -> None:
        self.errors.append(error)


def test_a_beat_after_the_runs_own_finish_does_not_lose_the_job(store: Store) -> None:
    store.jobs.enqueue({})
    worker = a_worker(store, "w")
    job = store.jobs.claim(worker)
    assert job is not None
    store.jobs.finish(job.claim, "done")
    stops = RecordedStops()
    seen_before = frames.workers(store).iloc[0]["last_seen_at"]
    # The heartbeat thread beats again after the main thread finished the job, before it
    # leaves the heartbeat's block (the race behind "another worker owns it now").
    with Heartbeat(store, job.claim, 0.01, stops, lambda _message: None):  # type: ignore[arg-type]
        wait_until(lambda: frames.workers(store).iloc[0]["last_seen_at"] > seen_before, what="a beat")
    assert stops.errors == [], "a job this claim finished was reported lost"
    assert frames.jobs(store).iloc[0]["status"] == "done"


def test_a_beat_of_a_claim_that_lost_its_job_still_stops_it(store: Store) -> None:
    store.jobs.enqueue({})
    job = store.jobs.claim(a_worker(store, "frozen"))
    assert job is not None
    go_stale(store)
    assert store.jobs.reclaim_stale(60) == [job.id]
    taker = store.jobs.claim(a_worker(store, "taker"))
    assert taker is not None
    store.jobs.finish(taker.claim, "done")
    assert not store.jobs.heartbeat(job.claim), "another claim's finish is a lost job"


@pytest.mark.parametrize(
    ("corpus_bytes", "expected"),
    [(None, "is not a file"), (b"\xff\xfe not utf-8 " * 20, "UTF-8")],
    ids=["missing", "not-utf-8"],
)
@pytest.mark.slow
def test_a_corpus_error_fails_the_terminal_runs_job_with_one_line(
    tmp_path: Path, corpus_bytes: bytes | None, expected: str
) -> None:
    corpus = tmp_path / "corpus.txt"
    if corpus_bytes is not None:
        corpus.write_bytes(corpus_bytes)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = run_decodelab(
        "run", "--spec", str(write_spec(tmp_path / "s.toml", corpus=str(corpus))), "--db", url, cwd=tmp_path
    )
    # The run says its plan first (the sweep's size and estimate), then the refusal: one line.
    errors = [line for line in result.stderr.strip().splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.strip().splitlines()[-1] == errors[0]
    store = Store(url)
    job = frames.jobs(store).iloc[0]
    assert job["status"] == "failed", "the job was left running with nobody behind it"
    assert expected in job["error"] and "\n" not in job["error"]
    assert set(frames.workers(store)["state"]) == {"stopped"}
    store.close()


def training_forever(tmp_path: Path) -> Path:
    return write_spec(tmp_path / "long.toml", steps=1_000_000)


def wait_for_training(store: Store, process_output: Output) -> None:
    """Claimed, its run not begun: the process is loading the corpus or training."""
    wait_until(lambda: list(frames.jobs(store)["status"]) == ["running"], what="the job's claim")
    process_output.wait_for("training d_model=")


@pytest.mark.slow
def test_ctrl_c_of_a_terminal_run_during_training_marks_its_job_interrupted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    running = Output(start_decodelab("run", "--spec", str(training_forever(tmp_path)), "--db", url, cwd=tmp_path))
    store = Store(url)
    wait_for_training(store, running)
    running.process.send_signal(signal.SIGINT)
    output = running.finish()
    assert running.process.returncode == 130, output
    job = frames.jobs(store).iloc[0]
    assert (job["status"], job["error"]) == ("interrupted", "interrupted (Ctrl-C or SIGTERM)")
    assert frames.runs(store).empty, "no run had begun"
    store.close()


@pytest.mark.slow
def test_sigterm_of_a_worker_during_training_requeues_its_job(tmp_path: Path) -> None:
    from runner.spec.sweeps import load_spec_file

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    spec = load_spec_file(training_forever(tmp_path))
    store.jobs.enqueue(spec.raw, cases_total=spec.cases_total())
    working = Output(start_decodelab("worker", "--db", url, "--poll-seconds", "0.2", cwd=tmp_path))
    wait_for_training(store, working)
    working.process.send_signal(signal.SIGTERM)
    output = working.finish()
    assert working.process.returncode == 130, output
    job = frames.jobs(store).iloc[0]
    assert (job["status"], job["worker"]) == ("queued", None), "the job was left running"
    assert "requeued" in job["error"]
    store.close()
