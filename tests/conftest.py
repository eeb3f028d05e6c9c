"""Shared fixtures: a real SQLite file and a real PostgreSQL server for the store suite,
and a tiny trained model for the runner tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
import sqlalchemy as sa
import torch
from hypothesis import settings

from store import frames

if TYPE_CHECKING:  # for the annotations: the fixtures import it where they use it
    from store.store import Store

# Property tests draw the same examples every run and never fail on time: Hypothesis's default
# (fresh examples, a 200 ms deadline per example) turns a stall on a busy CI core into a failure.
settings.register_profile("decodelab", deadline=None, derandomize=True, database=None)
settings.load_profile("decodelab")

FIXTURES = Path(__file__).parent / "fixtures"
TINY_SPEC = FIXTURES / "tiny.toml"
# The tiny model and its first, quickest experiment (training_summary): a run in seconds, for tests
# about launching, storing or showing a run rather than about what the experiments measure.
QUICK_SPEC = TINY_SPEC.read_text().split("[experiments.kv_cache]")[0]
# The tiny model and training with every experiment but a lean speculative section (28 cases, not
# 82): a whole sweep in a few seconds once the model is stored, for tests about running, queueing,
# resuming or comparing sweeps. Tests about what the speculative grid records read the session's
# filled store (the whole tiny spec, run once) instead of running it again.
LEAN_SPEC = FIXTURES / "lean.toml"
# training_summary 1; kv_cache 27; overhead 12; quantization 8 (as in the tiny spec); speculative 28
# (per impl: distribution 1, aa 1, 2 drafts × (fixed k 1 and 3, heuristic) at T = 1 and the bigram's
# 3 greedy, a choice per temperature and one accuracy); context_cost 3
LEAN_CASES = 79
# The machine names the lean spec is run under for the machines comparison (DECODELAB_MACHINE).
MACHINE_NAMES = ("alpha", "beta")
ROOT = Path(__file__).parent.parent
# A run profiles its machine first when the store has no roof for it: the quick profile, in tests.
os.environ.setdefault("DECODELAB_PROFILE", "quick")
# One torch thread in each test process: `make test` runs two on the 2 cores, and with two threads
# each, a tiny op waits on a thread the busy machine has not scheduled (a kv_cache timing case took
# 6-28 s instead of 0.3-0.5 s beside one busy core). The tests check results, not speed.
torch.set_num_threads(1)


# Streamlit's AppTest runs a page as __main__ and leaves it there; a process started later with
# multiprocessing's spawn re-imports __main__ in the child, which would then run that page instead
# of the test's function (test_concurrency's reader never reported after test_access's AppTests).
REAL_MAIN_MODULE = sys.modules["__main__"]


@pytest.fixture(autouse=True)
def restore_main_module() -> Iterator[None]:
    yield
    sys.modules["__main__"] = REAL_MAIN_MODULE


def rows_by(frame: pd.DataFrame, column: str) -> dict[Any, dict[Any, Any]]:
    """The frame's rows as plain dicts keyed by ``column``: plain Python values to compare."""
    return {row[column]: row for row in frame.to_dict("records")}


def _cli_environment(environment: dict[str, str]) -> dict[str, str]:
    """A minimal environment for the CLI (no inherited store URL), plus ``environment``."""
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DECODELAB_PROFILE": os.environ["DECODELAB_PROFILE"]}
    return {**base, **environment}


def run_decodelab(*args: str, cwd: Path, timeout: float = 300, **environment: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process, to completion."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_cli_environment(environment),
    )


def start_decodelab(*args: str, cwd: Path, **environment: str) -> subprocess.Popen[str]:
    """The real CLI in a child process left running (a worker), stderr folded into stdout."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_cli_environment(environment),
    )


def _postgres_url_or_skip() -> str:
    url = os.environ.get("DECODELAB_TEST_PG_URL")
    required = os.environ.get("DECODELAB_REQUIRE_PG") == "1"
    if not url:
        if required:
            pytest.fail("DECODELAB_REQUIRE_PG=1 but DECODELAB_TEST_PG_URL is not set")
        pytest.skip("no PostgreSQL server: set DECODELAB_TEST_PG_URL (CI does; see .ci/run)")
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
        with engine.connect():
            pass
        engine.dispose()
    except sa.exc.OperationalError as error:
        if required:
            pytest.fail(f"DECODELAB_REQUIRE_PG=1 but PostgreSQL is unreachable: {error.orig}")
        pytest.skip(f"PostgreSQL at DECODELAB_TEST_PG_URL is unreachable: {error.orig}")
    return url


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A fresh, empty schema in the test server, dropped afterwards."""
    base = _postgres_url_or_skip()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = sa.engine.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    yield url.render_as_string(hide_password=False)
    with admin.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def postgres_url(empty_postgres_url: str) -> str:
    """A fresh schema brought to head, as `decodelab db upgrade` would (on PostgreSQL nothing
    else migrates)."""
    from store.store import Store

    Store(empty_postgres_url, upgrade=True).close()
    return empty_postgres_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every store test runs against a SQLite file and a PostgreSQL server (at head)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    request.applymarker(pytest.mark.postgres)
    return request.getfixturevalue("postgres_url")


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store with no tables yet, on each backend: for migration tests."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    request.applymarker(pytest.mark.postgres)
    return request.getfixturevalue("empty_postgres_url")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    from store.store import Store

    opened = Store(store_url)
    yield opened
    opened.close()


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], str]) -> str:
    """``build(directory)``'s URL, built once per test session however many processes run it.

    Under pytest-xdist each worker process has its own session fixtures; the stores below take
    tens of seconds to build, so the first worker to ask builds into the folder the workers share,
    under a file lock, and the others read what it wrote (the tests only read these stores, and
    copy them to write). Without xdist this is an ordinary session fixture."""
    from filelock import FileLock

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent
    built = shared / f"{name}.url"
    with FileLock(str(shared / f"{name}.lock")):
        if not built.exists():
            directory = shared / name
            directory.mkdir()
            built.write_text(build(directory))
    return built.read_text()


@pytest.fixture(scope="session")
def filled_store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store holding one real run of the tiny sweep (every experiment)."""

    def build(directory: Path) -> str:
        from analysis.review_inputs import record_machine_drift
        from runner.execution.execute import execute
        from runner.spec.sweeps import load_spec_file
        from store.store import Store

        url = f"sqlite:///{directory / 'filled.db'}"
        store = Store(url)
        outcome = execute(store, load_spec_file(TINY_SPEC), preset="tiny", show_progress=False, log=lambda _: None)
        record_machine_drift(store, outcome.run_id)  # as `decodelab run` does after a done run
        store.close()
        return url

    return built_once(tmp_path_factory, "filled", build)


@pytest.fixture(scope="session")
def two_machines_url(filled_store_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The lean spec run through `decodelab run` once as alpha and once as beta, into a copy of the
    session's filled store (which holds the tiny model, so neither run trains)."""

    def build(directory: Path) -> str:
        url = copy_store(filled_store_url, directory / "machines.db")
        for name in MACHINE_NAMES:
            result = run_decodelab("run", "--spec", str(LEAN_SPEC), "--db", url, cwd=ROOT, DECODELAB_MACHINE=name)
            assert result.returncode == 0, result.stderr
        return url

    return built_once(tmp_path_factory, "machines", build)


def copy_store(url: str, target: Path) -> str:
    """A private copy of a SQLite store, its write-ahead log checkpointed into the one file first;
    returns the copy's URL (tests that write start from the session's filled store this way)."""
    import shutil
    import sqlite3

    source = Path(url.removeprefix("sqlite:///"))
    with sqlite3.connect(source) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(source, target)
    return f"sqlite:///{target}"


def kill_job_workers(url: str) -> None:
    """Stop the worker processes registered in this store (started detached by the dashboard)."""
    import signal

    from store.store import Store

    store = Store(url)
    workers = frames.workers(store)
    here = workers[(workers["host"] == socket.gethostname()) & (workers["state"] == "live")]
    for pid in here["pid"].unique():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
    store.close()


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Tiny Hugging Face GPT-2 directories built here (tests/hf_checkpoints.py), once a session."""
    pytest.importorskip("transformers")
    from tests.hf_checkpoints import build

    return build(tmp_path_factory.mktemp("hf"))


HF_SPEC = FIXTURES / "tiny_hf.toml"


def hf_spec_text(target: Path, draft: Path) -> str:
    """The tiny hf sweep (tests/fixtures/tiny_hf.toml) pointed at built checkpoints."""
    return HF_SPEC.read_text().replace("TARGET_DIR", str(target)).replace("DRAFT_DIR", str(draft))


@pytest.fixture(scope="session")
def hf_run_url(hf_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store holding one run of the tiny hf sweep through `decodelab run`."""
    directory = tmp_path_factory.mktemp("hf_run")
    spec = directory / "tiny_hf.toml"
    spec.write_text(hf_spec_text(hf_checkpoints.target, hf_checkpoints.draft))
    url = f"sqlite:///{directory / 'hf.db'}"
    result = run_decodelab("run", "--spec", str(spec), "--db", url, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return url


# The session stores above take tens of seconds to build (the filled store about 35 s).
SESSION_STORES = frozenset({"filled_store_url", "two_machines_url", "hf_run_url"})


# The tests whose figures come out of the CPU's kernels (decode, fast path, speculative, the
# distribution check, quantization): `.ci/run` runs them again (`-m numerics`) under a lower torch
# capability (ATEN_CPU_CAPABILITY) and a lower fast-path build (DECODELAB_FAST_MARCH), so a test that
# holds only for one CPU's rounding fails on every CPU.
NUMERICS_FILES = frozenset(
    f"tests/test_{name}.py"
    for name in (
        "model",
        "fast_kernels",
        "speculative",
        "speculative_costs",
        "speculative_figures",
        "speculative_schedules",
        "speculative_loop",
        "distribution_check",
        "quantize",
        "kv_cache",
    )
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the numerics group (NUMERICS_FILES), then orders files: the order `make test` hands
    test files to its two processes (with --no-loadscope-reorder, pytest-xdist keeps it). The files
    with most tests first, as xdist's own order, except that the second is the file needing no
    session store with the most tests marked slow, which keeps the second process busy while the
    first builds the filled store. Under xdist's order both processes started on a file needing
    that store, and one waited about 30 s for the other."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.nodeid.split("::")[0] in NUMERICS_FILES:
            item.add_marker(pytest.mark.numerics)
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = sorted(files, key=lambda name: -len(files[name]))
    store_free = [
        name
        for name in order
        if not any(SESSION_STORES & set(getattr(item, "fixturenames", ())) for item in files[name])
    ]
    if store_free and len(order) > 2:

        def slow_tests(name: str) -> int:
            return sum(item.get_closest_marker("slow") is not None for item in files[name])

        busiest = max(store_free, key=slow_tests)
        order.remove(busiest)
        order.insert(1, busiest)
    items[:] = [item for name in order for item in files[name]]
