"""Killed and interrupted workers: the store keeps every completed case, never a partial one,
and a resumed run never duplicates a case."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.measure.reference import REFERENCE_METRIC
from runner.spec.sweeps import load_spec_file
from store import frames
from store.store import Store
from tests.conftest import rows_by, start_decodelab
from tests.shared_parts import store_model_of, store_roof_of

SLOW_SPEC = Path(__file__).parent / "fixtures" / "slow.toml"
# Cases of the slow sweep before its first timed one (equivalence, counter check, the counts): a
# worker that has recorded these is inside the timing cases.
QUICK_CASES = [case.get("part") for _, case in load_spec_file(SLOW_SPEC).plan()].index("timing")
# Metrics a complete case of each kv_cache part holds.
COMPLETE = {
    "equivalence": 7,
    "no_mask": 5,
    "counter_check": 10,
    "counts": 8,
    "recomputation": 5,
    # 19 of its own, and the roofline's placement of each side
    # (runner.experiments.parts.roofline_placement: 10 per side, 9 where the prediction and its
    # error are withheld, one reason instead).
    "timing": 39,
    "width": 39,
    "fit": 6,
    "prefill": 3,
    "memory": 8,
    "rounded_cache": 5,
    "aa": 4,  # the A/A noise floor: aa_speedup and its band, aa_min_ratio
}

# The workers' stale limit: a heartbeat older than this lets the next worker take the job. Six
# heartbeats (every 0.5 s); no live worker is there to lose its job when the test waits it out.
STALE_AFTER_SECONDS = 3

pytestmark = pytest.mark.slow
# How long a wait on a condition may take before the test fails: it ends as soon as the condition
# holds, so a generous figure costs nothing on a quiet machine. 120 s timed out in the full suite
# at a load average of 18-23 on the 2 shared cores while the first worker was still training and
# running its first cases (every kill and interrupt test failed that way in one run).
CONDITION_TIMEOUT_SECONDS = 600
STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_worker_outlives_its_test() -> Iterator[None]:
    """A failing test must not leave its worker running the slow sweep behind it (those left
    by such failures ran on for over 15 minutes, slowing every later test)."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def start_worker(url: str, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    worker = start_decodelab(
        "worker",
        "--once",
        "--db",
        url,
        "--heartbeat-seconds",
        "0.5",
        "--stale-after-seconds",
        str(STALE_AFTER_SECONDS),
        *extra,
        cwd=tmp_path,
        DECODELAB_MACHINE="test-box",
    )
    STARTED.append(worker)
    return worker


def wait_for_cases(store: Store, job_id: int, at_least: int, timeout: float = CONDITION_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if rows_by(frames.jobs(store), "job_id")[job_id]["cases_done"] >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach {at_least} cases")


def wait_until_stale(store: Store, job_id: int, seconds: float, timeout: float = CONDITION_TIMEOUT_SECONDS) -> None:
    """Until the job's last heartbeat is older than ``seconds`` by the database server's clock
    (the condition the next worker's claim tests)."""
    from sqlalchemy import func, select

    from store.clock import server_now
    from store.schema import Job

    stale = (
        select(func.count())
        .select_from(Job)
        .where(Job.id == job_id, Job.heartbeat_at < server_now(store.backend, -seconds))
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with store.read() as session:
            if session.scalar(stale):
                return
        time.sleep(0.1)
    raise AssertionError(f"job {job_id}'s heartbeat did not go stale")


def assert_only_whole_cases(store: Store, run_id: int) -> int:
    measured = frames.measurements(store, run_id)
    if measured.empty:
        return 0
    measured["part"] = measured["params"].map(lambda params: params["part"])
    measured["withheld"] = measured["metric"].str.startswith("roofline_prediction_withheld")
    # The runner adds the machine's speed to each case that timed anything (runner.measure.reference),
    # in the case's own transaction: not the part's metric, so counted apart, and every timing case has it.
    speeds = set(measured[measured["metric"] == REFERENCE_METRIC]["case_id"])
    measured = measured[measured["metric"] != REFERENCE_METRIC]
    per_case = measured.groupby("case_id").agg(
        part=("part", "first"), metrics=("metric", "nunique"), withheld=("withheld", "sum")
    )
    for case in per_case.itertuples():
        expected = COMPLETE[str(case.part)] - int(str(case.withheld))
        assert case.metrics == expected, f"case {case.Index} ({case.part}) is partial"
        if case.part == "timing":
            assert case.Index in speeds, f"case {case.Index} (timing) has no reading of the machine's speed"
    return len(per_case)


def test_kill_9_mid_case_loses_nothing_and_the_next_worker_resumes(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url)
    spec = load_spec_file(SLOW_SPEC)
    job_id = store.jobs.enqueue(spec.raw, cases_total=spec.cases_total())
    # The workers stop and resume cases: neither trains nor profiles the machine.
    store_model_of(store, spec.raw)
    store_roof_of(store, "test-box")
    first = start_worker(store_url, tmp_path)
    wait_for_cases(store, job_id, QUICK_CASES)  # past the counts: into the timing cases
    time.sleep(0.3)  # not a wait for something: the kill is meant to land inside a timing case
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    job = rows_by(frames.jobs(store), "job_id")[job_id]
    assert job["status"] == "running", "nobody could mark it: the worker died"
    run_id = int(job["run_id"])
    recorded = assert_only_whole_cases(store, run_id)
    assert recorded >= QUICK_CASES

    wait_until_stale(store, job_id, STALE_AFTER_SECONDS)
    second = start_worker(store_url, tmp_path)
    output, _ = second.communicate(timeout=CONDITION_TIMEOUT_SECONDS)
    assert second.returncode == 0, output
    assert f"job {job_id}: its worker stopped heartbeating; requeued" in output
    job = rows_by(frames.jobs(store), "job_id")[job_id]
    assert (job["status"], job["attempts"], int(job["run_id"])) == ("done", 2, run_id)
    assert assert_only_whole_cases(store, run_id) == spec.cases_total()
    assert rows_by(frames.runs(store), "run_id")[run_id]["status"] == "done"


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_interrupt_the_run_keep_its_cases_and_requeue_the_job(
    store_url: str, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    store = Store(store_url)
    spec = load_spec_file(SLOW_SPEC)
    job_id = store.jobs.enqueue(spec.raw, cases_total=spec.cases_total())
    store_model_of(store, spec.raw)
    store_roof_of(store, "test-box")
    worker = start_worker(store_url, tmp_path)
    wait_for_cases(store, job_id, QUICK_CASES)
    time.sleep(0.3)  # not a wait for something: the signal is meant to land inside a timing case
    worker.send_signal(stop_signal)
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 130, output
    job = rows_by(frames.jobs(store), "job_id")[job_id]
    run = rows_by(frames.runs(store), "run_id")[int(job["run_id"])]
    # A scheduler's SIGTERM (or Ctrl-C) stops the worker, not the job: the next worker resumes it.
    assert job["status"] == "queued" and run["status"] == "interrupted"
    assert "interrupted" in run["error"] and "requeued" in job["error"]
    recorded = assert_only_whole_cases(store, int(job["run_id"]))
    assert QUICK_CASES <= recorded < spec.cases_total()
    assert f"recorded cases are kept; job {job_id} requeued for the next worker" in output
    assert set(frames.workers(store)["state"]) == {"stopped"}


@pytest.mark.parametrize("stopping", [False, True])
def test_a_refused_heartbeat_stops_the_job_unless_the_worker_is_stopping_already(
    monkeypatch: pytest.MonkeyPatch, stopping: bool
) -> None:
    """A heartbeat the store refuses raises ClaimLost into the main thread; but after the worker's
    own Ctrl-C or SIGTERM the refusal is its own doing (the stop requeued the job), and a
    ClaimLost then would replace the stop being handled: the worker exited 0, not 130."""
    from runner.execution import lifecycle, worker
    from store.errors import ClaimLost
    from store.records import Claim

    monkeypatch.setattr(lifecycle, "_stop_requested", stopping)
    refused = threading.Event()

    class RefusingJobs:
        def heartbeat(self, claim: Claim) -> bool:
            refused.set()
            return False

    class RefusingStore:
        jobs = RefusingJobs()

    raised: list[BaseException] = []

    class RecordingStop:
        def stop_with(self, error: BaseException) -> None:
            raised.append(error)

    beat = worker.Heartbeat(RefusingStore(), Claim(1, 1, 1), 0.01, RecordingStop(), lambda _: None)  # type: ignore[arg-type]
    with beat:
        assert refused.wait(5), "the heartbeat thread asked the store"
        beat._thread.join(5)  # the thread has decided (it ends after a refusal), whatever it decided
        assert not beat._thread.is_alive()
    assert [type(error) for error in raised] == ([] if stopping else [ClaimLost])
