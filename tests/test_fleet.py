"""Workers as a fleet, through the real CLI in child processes on both backends: one timing
job per machine, a frozen worker that lost its job touches nothing when it wakes, SIGTERM
requeues, --until-empty exits when the queue is empty, and the worker table shows them."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from runner.spec.sweeps import validate
from store import frames
from store.records import JobRecord
from store.store import Store
from tests.conftest import FIXTURES, rows_by, start_decodelab
from tests.shared_parts import counting_job, store_model_of, store_roof_of

pytestmark = pytest.mark.slow
# How long a wait on a condition may take before the test fails: it ends as soon as the condition
# holds, so a generous figure costs nothing on a quiet machine and saves a loaded one (two minutes
# timed out under a load average of 25 on 2 cores while the cases were still running).
CONDITION_TIMEOUT_SECONDS = 600


def timed_job() -> dict[str, Any]:
    """The slow fixture cut down: a few cases of about a second each, after quick ones."""
    raw = tomllib.loads((FIXTURES / "slow.toml").read_text())
    raw["train"]["steps"] = 3
    raw["experiments"]["kv_cache"].update(lengths=[20, 32, 44], widths=[16], impls=["static"], pairs=6)
    return validate(raw).raw


# Cases of timed_job before its first timed one (equivalence, counter check, the counts).
QUICK_CASES = [case.get("part") for _, case in validate(timed_job()).plan()].index("timing")
STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_child_outlives_its_test() -> Iterator[None]:
    """A failing test must not leave a worker running (or suspended) behind it."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(timeout=30)


class Output:
    """A child's output lines, read as they come, so a test can wait on one."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        STARTED.append(process)
        self.process = process
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, fragment: str, timeout: float = CONDITION_TIMEOUT_SECONDS) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if fragment in line:
                    return line
            if self.process.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line with {fragment!r} in:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 120) -> str:
        self.process.wait(timeout=timeout)
        self._thread.join(timeout=10)
        return "\n".join(self.lines)


def wait_until(condition: Any, timeout: float = CONDITION_TIMEOUT_SECONDS, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def worker(url: str, tmp_path: Path, *extra: str, machine: str = "one-box") -> Output:
    return Output(
        start_decodelab(
            "worker",
            "--db",
            url,
            "--poll-seconds",
            "0.2",
            "--heartbeat-seconds",
            "0.5",
            "--stale-after-seconds",
            "3",
            *extra,
            cwd=tmp_path,
            DECODELAB_MACHINE=machine,
        )
    )


def hold_machine(store: Store, worker_name: str, *, stale_after_seconds: float) -> JobRecord:
    """Machine one-box made busy: a job claimed by a registered worker that stays alive."""
    store.jobs.enqueue({"name": "held"})
    holder = store.workers.register(
        name=worker_name,
        kind="worker",
        machine_name="one-box",
        host="h",
        pid=1,
        stale_after_seconds=stale_after_seconds,
    )
    held = store.jobs.claim(holder)
    assert held is not None
    return held


def test_two_workers_on_one_machine_never_time_at_once(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url)
    # The machine is busy first (a job held here, its worker alive), so both workers must wait.
    held = hold_machine(store, "holder:1", stale_after_seconds=600)
    jobs = [store.jobs.enqueue(counting_job("short", index), cases_total=3) for index in range(2)]
    store_model_of(store, counting_job("short", 0))  # the jobs' one model: no worker trains
    store_roof_of(store, "one-box")
    workers = [worker(store_url, tmp_path, "--until-empty", "--stale-after-seconds", "600") for _ in range(2)]
    for one in workers:
        one.wait_for(f"waiting: job {held.id} is running on machine 'one-box'")
    assert all(row["status"] == "queued" for row in frames.jobs(store).to_dict("records") if row["job_id"] in jobs)
    store.jobs.finish(held.claim, "done")
    outputs = [one.finish(timeout=300) for one in workers]
    for one, output in zip(workers, outputs, strict=True):
        assert one.process.returncode == 0, output
    rows = rows_by(frames.jobs(store), "job_id")
    assert [rows[job]["status"] for job in jobs] == ["done", "done"], outputs
    first, second = sorted((rows[job] for job in jobs), key=lambda row: row["claimed_at"])
    assert rows[held.id]["finished_at"] <= first["claimed_at"], "a job started while the held one ran"
    assert first["finished_at"] <= second["claimed_at"], (
        f"job {first['job_id']} ran {first['claimed_at']}..{first['finished_at']}, "
        f"job {second['job_id']} from {second['claimed_at']}: both timed at once"
    )
    assert {row["claimed_by_machine"] for row in rows.values()} == {"one-box"}
    assert set(frames.workers(store)[lambda frame: frame["name"] != "holder:1"]["state"]) == {"stopped"}


def test_a_terminal_run_takes_the_machine_slot(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url)
    # A worker on this machine is timing a job (its claim held here, its heartbeat fresh).
    # Never stale within the test: a reclaimed hold would let the run start instead of waiting
    # (the run imports torch first, which a loaded 2-core machine can stretch past a minute).
    held = hold_machine(store, "busy:1", stale_after_seconds=600)
    store_model_of(store, counting_job("here", 0))  # the same model as the spec below: it does not train
    store_roof_of(store, "one-box")
    spec = tmp_path / "short.toml"
    spec.write_text(
        "\n".join(
            [
                'name = "here"',
                "[model]\nd_model = 16\nn_layer = 1\nn_head = 2\ncontext_length = 32",
                "[train]\nsteps = 3\nbatch_size = 4\nsequence_length = 16",
                "[experiments.context_cost]\nlengths = [8, 100]\nd_model = 8\nd_ff = 16\nn_heads = 2",
                "reference_length = 16",
            ]
        )
    )
    here = Output(
        start_decodelab("run", "--spec", str(spec), "--db", store_url, cwd=tmp_path, DECODELAB_MACHINE="one-box")
    )
    here.wait_for(f"waiting: job {held.id} is running on machine 'one-box'")
    assert len(frames.jobs(store)) == 1, "while it waits it holds no job"
    store.jobs.finish(held.claim, "done")
    output = here.finish()
    assert here.process.returncode == 0, output
    rows = rows_by(frames.jobs(store), "job_id")
    mine = rows[max(rows)]
    assert (mine["status"], mine["machine_name"], mine["preset"]) == ("done", "one-box", None)
    assert rows[held.id]["finished_at"] <= mine["claimed_at"], "the terminal run timed beside the worker"
    assert set(frames.workers(store).set_index("name")["kind"].items()) >= {("busy:1", "worker")}
    assert "run" in set(frames.workers(store)["kind"])


def silent_for(store: Store, job_id: int, seconds: float) -> bool:
    """Whether the job's last heartbeat is older than ``seconds`` by the server's clock."""
    from store.clock import server_now
    from store.schema import Job

    with store.read() as session:
        query = sa.select(Job.id).where(Job.id == job_id, Job.heartbeat_at < server_now(store.backend, -seconds))
        return session.scalar(query) is not None


def no_transaction_open(url: str, pid: int) -> bool:
    """Whether the (suspended) process holds no transaction: a worker frozen inside one would
    hold a lock that no test, and no fleet, should wait on."""
    if url.startswith("sqlite"):
        probe = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            probe.close()
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        open_transactions = connection.scalar(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name AND xact_start IS NOT NULL"),
            {"name": f"decodelab:{pid}"},
        )
    engine.dispose()
    return open_transactions == 0


def freeze_outside_a_transaction(process: subprocess.Popen[str], url: str) -> None:
    for _ in range(100):
        process.send_signal(signal.SIGSTOP)
        if no_transaction_open(url, process.pid):
            return
        process.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("the worker was always inside a transaction")


def test_a_frozen_worker_that_lost_its_job_touches_nothing(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url)
    job = store.jobs.enqueue(timed_job())
    store_model_of(store, timed_job())
    store_roof_of(store, "one-box")
    total = validate(timed_job()).cases_total()
    frozen = worker(store_url, tmp_path)
    # Past the quick cases, inside the timed ones, with seven cases still to come.
    wait_until(lambda: rows_by(frames.jobs(store), "job_id")[job]["cases_done"] >= QUICK_CASES, what="the quick cases")
    freeze_outside_a_transaction(frozen.process, store_url)
    assert rows_by(frames.jobs(store), "job_id")[job]["cases_done"] < total, "frozen too late: nothing left to fence"
    try:
        wait_until(lambda: silent_for(store, job, 3), what="the frozen worker's job to go stale")
        rescuer = worker(store_url, tmp_path, "--until-empty")
        rescued = rescuer.finish(timeout=300)
        assert rescuer.process.returncode == 0, rescued
        assert f"job {job}: its worker stopped heartbeating; requeued" in rescued
    finally:
        frozen.process.send_signal(signal.SIGCONT)
    done = rows_by(frames.jobs(store), "job_id")[job]
    run_id = int(done["run_id"])
    run = rows_by(frames.runs(store), "run_id")[run_id]
    cases = frames.measurements(store, run_id)["case_id"].nunique()
    assert (done["status"], done["attempts"], run["status"], cases) == ("done", 2, "done", total)

    # Awake, the first worker learns at once that the job is not its own and stops it.
    frozen.wait_for(f"job {job} is no longer this worker's")
    frozen.process.send_signal(signal.SIGTERM)
    output = frozen.finish()
    # 130, wherever the signal lands (runner.execution.lifecycle.StopRequested says why that needs care).
    assert frozen.process.returncode == 130, output
    after = rows_by(frames.jobs(store), "job_id")[job]
    assert (after["status"], after["finished_at"], after["cases_done"]) == ("done", done["finished_at"], total)
    run_after = rows_by(frames.runs(store), "run_id")[run_id]
    assert (run_after["status"], run_after["finished_at"]) == ("done", run["finished_at"])
    assert frames.measurements(store, run_id)["case_id"].nunique() == total, "no case added or duplicated"
    # Nothing after the line that says so. That line's reason names the run when the fence caught a
    # write rather than a heartbeat ("run 1 belongs to job 1; this writer holds ..."): which comes
    # first after SIGCONT is a race, and either stops the run unwritten.
    after_fencing = output.split("is no longer this worker's", 1)[1].partition("\n")[2]
    assert "run " not in after_fencing, "it reported nothing more of the run"


def stopped(process: subprocess.Popen[str]) -> bool:
    """Whether the process is stopped (SIGSTOP): state T in /proc."""
    return Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.postgres
def test_a_worker_frozen_inside_a_case_write_loses_its_job_within_the_bound(postgres_url: str, tmp_path: Path) -> None:
    """Frozen inside the transaction that writes a case, its job's row locked: the server ends that
    transaction after IDLE_IN_TRANSACTION_MS, the rescuer's reclaim waits for the lock rather than
    skipping the job, and takes it over within the stale limit plus RECLAIM_LOCK_WAIT_MS. Skipping
    locked rows left the job with the frozen worker until the old 60 s idle limit at least."""
    from store.jobs import RECLAIM_LOCK_WAIT_MS

    store = Store(postgres_url)
    job = store.jobs.enqueue(timed_job())
    store_model_of(store, timed_job())
    store_roof_of(store, "one-box")
    total = validate(timed_job()).cases_total()
    frozen = Output(
        start_decodelab(
            "worker", "--db", postgres_url, "--poll-seconds", "0.2", "--heartbeat-seconds", "0.5",
            "--stale-after-seconds", "3", cwd=tmp_path, DECODELAB_MACHINE="one-box",
            DECODELAB_TEST_FREEZE_IN_CASE_WRITE=str(QUICK_CASES + 1),
        )
    )  # fmt: skip
    wait_until(lambda: stopped(frozen.process), what="the worker to stop itself inside a case write")
    frozen_at = time.monotonic()
    assert not no_transaction_open(postgres_url, frozen.process.pid), "frozen inside its transaction"
    try:
        # The rescuer comes once the job has gone stale (an --until-empty worker that finds nothing leaves).
        wait_until(lambda: silent_for(store, job, 3), what="the frozen worker's job to go stale")
        rescuer = worker(postgres_url, tmp_path, "--until-empty")
        rescuer.wait_for(f"job {job}: its worker stopped heartbeating; requeued")
        taken_after = time.monotonic() - frozen_at
        # The stated bound (docs/deploy.md), with room for a loaded machine's process start-up.
        bound = 3 + RECLAIM_LOCK_WAIT_MS / 1000 + 15
        assert taken_after < bound, f"the job was taken over after {taken_after:.1f} s (bound {bound:.0f} s)"
        rescued = rescuer.finish(timeout=CONDITION_TIMEOUT_SECONDS)
        assert rescuer.process.returncode == 0, rescued
    finally:
        frozen.process.send_signal(signal.SIGCONT)
    done = rows_by(frames.jobs(store), "job_id")[job]
    run_id = int(done["run_id"])
    assert (done["status"], done["attempts"]) == ("done", 2)
    assert frames.measurements(store, run_id)["case_id"].nunique() == total
    # Awake, the frozen worker's write is refused (its transaction was ended, its claim is gone).
    frozen.wait_for(f"job {job} is no longer this worker's")
    frozen.process.send_signal(signal.SIGTERM)
    frozen.finish()
    assert frames.measurements(store, run_id)["case_id"].nunique() == total, "no case added or duplicated"
    assert rows_by(frames.jobs(store), "job_id")[job]["status"] == "done"
