"""No password on a command line, in a log, in a stored error or on a page: `decodelab bench`
(a benchmark that times out), `run` and `worker` against a real PostgreSQL server, with the
command line of every process they start read from /proc while they run."""

from __future__ import annotations

import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.store import Store
from tests.conftest import TINY_SPEC, start_decodelab
from tests.shared_parts import store_model_of

pytestmark = pytest.mark.postgres

# The tiny model and one quick experiment: a run that trains in seconds.
QUICK_SPEC = TINY_SPEC.read_text().split("[experiments.kv_cache]")[0]


def descendants(root: int) -> set[int]:
    """Every live process below ``root``, from the parent ids in /proc/*/stat."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= children
        frontier = children
    return found


def command_lines(pids: set[int]) -> list[str]:
    lines = []
    for pid in pids:
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # it ended between the two reads
    return lines


def watch(*args: str, cwd: Path, url: str, timeout: float = 300) -> tuple[int, str, list[str]]:
    """Run the real CLI with the URL in its environment; return its exit code, its output and
    the command lines of itself and every process it started, read every 20 ms while it ran."""
    process = start_decodelab(*args, cwd=cwd, DECODELAB_DB=url)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        seen += command_lines({process.pid, *descendants(process.pid)})
        time.sleep(0.02)
    try:
        output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, output, seen


def store_text(url: str) -> str:
    """Every row of every table of the store, as text."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            tables = sa.inspect(connection).get_table_names()
            return "\n".join(
                str(row) for table in tables for row in connection.execute(sa.text(f'SELECT * FROM "{table}"'))
            )
    finally:
        engine.dispose()


@pytest.mark.slow
def test_bench_run_worker_and_a_timeout_never_show_the_password(postgres_url: str, tmp_path: Path) -> None:
    password = sa.engine.make_url(postgres_url).password
    assert password
    spec = tmp_path / "quick.toml"
    spec.write_text(QUICK_SPEC)
    # The model stored first: the commands below load it rather than train it (training starts
    # no process and logs no URL; it cost the run some 2 s of CPU).
    store = Store(postgres_url)
    store_model_of(store, tomllib.loads(QUICK_SPEC))
    store.close()
    outputs: list[str] = []
    command_lines_seen: list[str] = []

    code, output, seen = watch(
        "bench", "--only", "decode_vs_transformers", "--timeout-seconds", "2", cwd=tmp_path, url=postgres_url
    )
    assert code == 2, output
    assert "benchmark decode_vs_transformers timed out after 2 s" in output
    assert any("decode_vs_transformers.py" in line for line in seen), "the benchmark process was never seen"
    outputs.append(output)
    command_lines_seen += seen

    code, output, seen = watch("run", "--spec", str(spec), cwd=tmp_path, url=postgres_url)
    assert code == 0, output
    outputs.append(output)
    command_lines_seen += seen

    code, output, seen = watch("enqueue", "--spec", str(spec), cwd=tmp_path, url=postgres_url)
    assert code == 0, output
    code, output, seen = watch("worker", "--once", cwd=tmp_path, url=postgres_url)
    assert code == 0, output
    assert "job 2: running tiny" in output
    outputs.append(output)
    command_lines_seen += seen

    stored = store_text(postgres_url)
    assert "timed out after 2 s" in stored  # the bench run's error is stored, masked
    for text in (*outputs, *command_lines_seen, stored):
        assert password not in text


def test_every_url_password_in_a_message_is_masked() -> None:
    from runner.execution.lifecycle import stored_error
    from store.masking import mask_secrets

    error = RuntimeError(
        "Command '['python', '--db', 'postgresql+psycopg://me:hunter2@db:5432/x']' timed out; "
        "dsn host=db password=hunter2 user=me\nsecond line"
    )
    stored = stored_error(error)  # what a failed run stores
    assert "hunter2" not in stored and "postgresql+psycopg://me:***@db:5432/x" in stored and "password=***" in stored
    assert mask_secrets("sqlite:////tmp/x.db and http://host:8501/review") == (
        "sqlite:////tmp/x.db and http://host:8501/review"
    )
