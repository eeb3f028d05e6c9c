"""PostgreSQL going away under a running worker, on a throwaway cluster this module starts
itself (the shared test server is not for stopping): a restart mid-sweep is ridden out with
nothing lost or duplicated; an outage past the limit ends the worker with one line, and the
run is marked interrupted once the store is back."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from store import frames
from store.store import Store
from tests.shared_parts import store_model_of, store_roof_of
from tests.test_fleet import (  # noqa: F401 - the fixture kills a failing test's workers
    QUICK_CASES,
    Output,
    no_child_outlives_its_test,
    silent_for,
    timed_job,
    wait_until,
    worker,
)
from tests.test_reliability import assert_only_whole_cases

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def postgres_binaries() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return candidates[-1].parent if candidates else None


def cannot(reason: str) -> None:
    if os.environ.get("DECODELAB_REQUIRE_PG") == "1":
        pytest.fail(f"DECODELAB_REQUIRE_PG=1 but no throwaway PostgreSQL cluster: {reason}")
    pytest.skip(f"no throwaway PostgreSQL cluster: {reason}")


@dataclass
class Cluster:
    binaries: Path
    directory: Path
    port: int

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(self.binaries / "pg_ctl"),
                "-D",
                str(self.directory / "data"),
                *args,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.pg_ctl("-l", str(self.directory / "log"), "-w", "-o", options, "start")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")

    def database_url(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres")
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    binaries = postgres_binaries()
    if binaries is None:
        cannot("PostgreSQL's server binaries are not installed (.ci/run installs them)")
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        cannot("starting a cluster as the postgres user needs root and runuser")
    assert binaries is not None
    directory = Path(tempfile.mkdtemp(prefix="decodelab-outage-", dir="/tmp"))
    shutil.chown(directory, "postgres")
    directory.chmod(0o700)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    subprocess.run(
        ["runuser", "-u", "postgres", "--", str(binaries / "initdb"), "-D", str(directory / "data"), "-U", "postgres"]
        + ["-A", "trust"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    started = Cluster(binaries, directory, port)
    started.start()
    yield started
    subprocess.run(
        ["runuser", "-u", "postgres", "--", str(binaries / "pg_ctl"), "-D", str(directory / "data")]
        + ["-m", "immediate", "-w", "stop"],
        capture_output=True,
        timeout=60,
    )
    shutil.rmtree(directory, ignore_errors=True)


def start_timed_job(cluster: Cluster, tmp_path: Path, *extra: str) -> tuple[str, Store, int, Output]:
    url = cluster.database_url()
    store = Store(url, upgrade=True)
    job = store.jobs.enqueue(timed_job())
    store_model_of(store, timed_job())
    store_roof_of(store, "one-box")
    # A stale limit longer than the outage: no other worker is there to reclaim anything anyway.
    running = worker(url, tmp_path, "--stale-after-seconds", "120", *extra)
    # Past the quick cases, inside the timed ones, with seven cases still to come.
    wait_until(lambda: frames.jobs(store).iloc[0]["cases_done"] >= QUICK_CASES, what="the quick cases")
    return url, store, job, running


def test_a_worker_rides_out_a_postgresql_restart(cluster: Cluster, tmp_path: Path) -> None:
    _url, store, job, running = start_timed_job(cluster, tmp_path, "--until-empty")
    cluster.stop()
    try:
        running.wait_for("unreachable", timeout=60)
    finally:
        cluster.start()
    output = running.finish(timeout=300)
    assert running.process.returncode == 0, output
    row = frames.jobs(store).iloc[0]
    assert (row["job_id"], row["status"], row["attempts"]) == (job, "done", 1), output
    run_id = int(row["run_id"])
    assert frames.runs(store).iloc[0]["status"] == "done"
    assert assert_only_whole_cases(store, run_id) == int(row["cases_total"]), "a case lost or duplicated"
    lines = output.splitlines()
    assert sum("unreachable" in line for line in lines) == 1, "one line per outage"
    assert sum("reachable again after" in line for line in lines) == 1, output
    store.close()


def test_a_store_down_past_the_limit_ends_the_worker(cluster: Cluster, tmp_path: Path) -> None:
    # A stale limit of its own that the test can wait out: a takeover goes by the owner's limit.
    url, store, job, running = start_timed_job(
        cluster, tmp_path, "--store-outage-limit-seconds", "2", "--stale-after-seconds", "3"
    )
    run_id = int(frames.jobs(store).iloc[0]["run_id"])
    store.close()
    cluster.stop()
    try:
        output = running.finish(timeout=120)
    finally:
        cluster.start()
    assert running.process.returncode == 75, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "unreachable for" in errors[0] and "Traceback" not in output, output
    back = Store(url)
    assert frames.runs(back).iloc[0]["status"] == "running", "nothing could mark it while the store was down"
    # Back up: the next worker to look finds the job silent, marks its run interrupted and
    # requeues the job (its recorded cases kept for the resume).
    wait_until(lambda: silent_for(back, job, 3), what="the job to go silent")
    assert back.jobs.reclaim_stale(3) == [job]
    assert frames.runs(back).iloc[0]["status"] == "interrupted"
    assert frames.jobs(back).iloc[0]["status"] == "queued"
    assert assert_only_whole_cases(back, run_id) >= QUICK_CASES
    back.close()
