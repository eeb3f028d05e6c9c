"""Bad store input: one line naming the problem, a non-zero exit, nothing written."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.engine import create_store_engine
from store.errors import StoreError
from store.store import Store
from tests.conftest import QUICK_SPEC, ROOT, run_decodelab


def decodelab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_decodelab(*args, cwd=cwd)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_malformed_url(tmp_path: Path) -> None:
    result = decodelab("db", "upgrade", "--db", "not a url", cwd=tmp_path)
    assert_one_line_error(result, "is malformed", "postgresql+psycopg://")
    assert list(tmp_path.iterdir()) == []


def test_unsupported_backend(tmp_path: Path) -> None:
    result = decodelab("db", "upgrade", "--db", "mysql://u@localhost/x", cwd=tmp_path)
    assert_one_line_error(result, "'mysql' is not supported")


def test_unreachable_postgres_never_prints_the_password(tmp_path: Path) -> None:
    result = decodelab("db", "upgrade", "--db", "postgresql+psycopg://me:hunter2@127.0.0.1:1/db", cwd=tmp_path)
    assert_one_line_error(result, "cannot open store postgresql+psycopg://me:***@127.0.0.1:1/db")
    assert "hunter2" not in result.stderr + result.stdout


def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("my precious notes\n")
    result = decodelab("db", "upgrade", "--db", f"sqlite:///{notes}", cwd=tmp_path)
    assert_one_line_error(result, "is not a SQLite database")
    assert notes.read_text() == "my precious notes\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.db"]


def test_a_missing_directory(tmp_path: Path) -> None:
    result = decodelab("db", "upgrade", "--db", f"sqlite:///{tmp_path}/nowhere/x.db", cwd=tmp_path)
    assert_one_line_error(result, "does not exist")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["recommend", "--run", "1"], "a reading command creates none"),
        (["report", "roofline", "--run", "1", "--out", "r.md"], "a reading command creates none"),
        (["report", "run", "--run", "2", "--out", "r.md"], "a reading command creates none"),
        (["tag", "reviewed", "--run", "1"], "`decodelab tag` changes an existing store and creates none"),
        (["note", "hello", "--run", "1"], "`decodelab note` changes an existing store and creates none"),
        (["cancel", "3"], "`decodelab cancel` changes an existing store and creates none"),
    ],
)
def test_a_mistyped_store_path_is_refused_not_created(tmp_path: Path, args: list[str], fragment: str) -> None:
    """A command about a run or a job in a store that is not there says so; it used to create an
    empty store and then say there was no such run, which reads as an empty store, not a typo."""
    result = decodelab(*args, "--db", f"sqlite:///{tmp_path}/typo.db", cwd=tmp_path)
    assert_one_line_error(result, "no such file", fragment)
    assert list(tmp_path.iterdir()) == []


def test_a_store_newer_than_the_code(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    Store(url).close()
    engine = create_store_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    before = (tmp_path / "new.db").read_bytes()
    result = decodelab("db", "upgrade", "--db", url, cwd=tmp_path)
    assert_one_line_error(result, "newer than this decodelab understands")
    assert (tmp_path / "new.db").read_bytes() == before


def test_db_upgrade_reports_the_revision_and_uses_the_environment(tmp_path: Path) -> None:
    result = run_decodelab("db", "upgrade", cwd=tmp_path, timeout=120, DECODELAB_DB=f"sqlite:///{tmp_path / 'env.db'}")
    assert result.returncode == 0, result.stderr
    assert "env.db is at schema revision" in result.stdout
    assert (tmp_path / "env.db").exists()


def test_the_default_store_is_a_sqlite_file_in_the_working_directory(tmp_path: Path) -> None:
    result = decodelab("db", "upgrade", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "decodelab.db").exists()


def test_usage_errors_and_bad_option_values_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """The issue's four, through a real process: typer 0.29's vendored click no longer matched
    `except click.ClickException`, and each printed a 50-line traceback."""
    for args, fragment in (
        (["nosuch"], "No such command 'nosuch'"),
        (["run", "--nosuch"], "No such option: --nosuch"),
        (["export", "--run", "abc", "--out", "x"], "'--run'"),
        (["dashboard", "--port", "99999"], "'--port': Input should be less than or equal to 65535"),
        (["db"], "decodelab db: a command is missing (allowed: upgrade, current)"),
        # train took --spec and ignored --preset silently; run and enqueue refuse both.
        (["train", "--preset", "quick", "--spec", "x.toml"], "give exactly one of --preset NAME or --spec FILE"),
    ):
        result = decodelab(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert_one_line_error(result, fragment)
        assert "Traceback" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_loads_pandas_and_sqlalchemy_only_for_a_command_that_needs_them() -> None:
    """Every `decodelab` starts by loading the CLI: with pandas and SQLAlchemy (0.5 s of CPU)
    left to the commands that read a store, a usage error or a refused --out answers at once."""
    import sys

    heavy = ("pandas", "sqlalchemy", "alembic", "torch", "scipy")
    code = f"import sys, cli.main\nprint(sorted(name for name in {heavy!r} if name in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    # Checking a spec (every run, enqueue and worker job) loads every experiment, but scipy only
    # once a distribution check computes (0.7 s of CPU a process).
    code = "import sys\nfrom runner.spec.sweeps import parse_toml, preset_text\n"
    code += "parse_toml(preset_text('quick')).cases\nprint('scipy' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "False", loaded.stdout + loaded.stderr


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_exposed_dashboard_must_be_read_only_or_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from cli.main import main

    url = f"sqlite:///{tmp_path / 'shown.db'}"
    Store(url).close()
    started: dict[str, dict[str, str]] = {}

    def exec_streamlit(_path: str, _argv: list[str], environment: dict[str, str]) -> None:
        started["environment"] = environment
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", exec_streamlit)
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")  # inherited from somewhere: never trusted
    # A free port: the command refuses a busy one (8501 may serve another dashboard on this machine).
    port = str(free_port())
    for args, read_only in (
        (["--host", "127.0.0.1"], False),
        (["--host", "0.0.0.0", "--read-only"], True),
        (["--host", "10.1.2.3", "--allow-remote-launch", "--behind-proxy"], False),
    ):
        started.clear()
        with pytest.raises(SystemExit) as exited:
            main(["dashboard", "--db", url, "--port", port, *args])
        assert exited.value.code == 0
        assert (started["environment"].get("DECODELAB_READ_ONLY") == "1") == read_only, args
    started.clear()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["dashboard", "--db", url, "--host", "0.0.0.0"])
    assert exited.value.code == 2 and not started
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --host: 0.0.0.0 is reachable from the network"), lines


def test_workers_and_db_current_report_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    store = Store(url)
    busy = store.workers.register(
        name="box-1:100", kind="worker", machine_name="box-1", host="box-1", pid=100, stale_after_seconds=60
    )
    store.jobs.enqueue({}, cases_total=5)
    job = store.jobs.claim(busy)
    assert job is not None
    store.jobs.progress(job.claim, 2, 5)
    gone = store.workers.register(
        name="box-2:200", kind="worker", machine_name="box-2", host="box-2", pid=200, stale_after_seconds=60
    )
    store.workers.stop(gone.id)
    store.close()
    listed = run_decodelab("workers", "--db", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["box-1"][2:6] == ["worker", "live", "box-1:100", str(job.id)] and "2/5" in rows["box-1"]
    assert rows["box-2"][2:5] == ["worker", "stopped", "box-2:200"]
    current = run_decodelab("db", "current", "--db", url, cwd=tmp_path)
    assert current.returncode == 0 and "(up to date)" in current.stdout, current.stderr


@pytest.fixture(scope="module")
def quick_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store holding one quick run and its model, and its JSON export beside it."""
    directory = tmp_path_factory.mktemp("quick")
    (directory / "quick.toml").write_text(QUICK_SPEC)
    url = f"sqlite:///{directory / 'quick.db'}"
    result = run_decodelab("run", "--spec", "quick.toml", "--db", url, cwd=directory)
    assert result.returncode == 0, result.stderr
    exported = run_decodelab("export", "--format", "json", "--out", "quick.json", "--db", url, cwd=directory)
    assert exported.returncode == 0, exported.stderr
    return directory


def test_db_naming_a_folder(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    for args in (["db", "current"], ["db", "upgrade"], ["workers"], ["export", "--out", "x.csv"]):
        result = decodelab(*args, "--db", "sqlite:///folder", cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert_one_line_error(result, "store 'folder' is a folder")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder"]


@pytest.mark.parametrize(
    "args",
    [
        ["export", "--format", "csv"],
        ["export", "--format", "json"],
        ["report", "run", "--run", "1"],
        ["report", "machines"],
    ],
)
def test_out_naming_a_folder_is_refused_before_any_work(tmp_path: Path, quick_store: Path, args: list[str]) -> None:
    (tmp_path / "folder").mkdir()
    shutil.copy(quick_store / "quick.db", tmp_path / "quick.db")
    url = f"sqlite:///{tmp_path / 'quick.db'}"
    result = decodelab(*args, "--out", "folder", "--db", url, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "--out: 'folder' is a folder")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder", "quick.db"]
    # Before any work: not even the store was opened (a missing one is not created).
    missing = decodelab(*args, "--out", "folder", "--db", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert_one_line_error(missing, "--out: 'folder' is a folder")
    assert not (tmp_path / "none.db").exists()


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path) -> None:
    from store.files import write_whole

    target = tmp_path / "report.md"
    target.write_text("the old report\n")

    def half_then_fail(temporary: Path) -> None:
        temporary.write_text("half a rep")
        raise OSError(28, "No space left on device")

    with pytest.raises(StoreError, match=f"--out: cannot write '{target}' \\(No space left on device\\)"):
        write_whole(target, half_then_fail)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.md"]
    assert target.read_text() == "the old report\n"


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("value", "abc", "row 1: value 'abc' is not a finite number"),
        ("value", None, "row 1: value 'None' is not a finite number"),
        ("run", 5, "row 1: run '5' is not an object"),
        ("samples", ["x"], "row 1: samples"),
        ("params", 3, "row 1: params '3' is not a JSON object"),
    ],
)
def test_import_of_a_badly_typed_row_writes_nothing(
    tmp_path: Path, quick_store: Path, field: str, value: object, fragment: str
) -> None:
    rows = json.loads((quick_store / "quick.json").read_text())
    rows[-1][field] = value
    (tmp_path / "bad.json").write_text(json.dumps(rows))
    url = f"sqlite:///{tmp_path / 'target.db'}"
    Store(url).close()
    result = decodelab("import", "bad.json", "--db", url, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, fragment.replace("row 1", f"row {len(rows)}"))
    store = Store(url)
    with store.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT count(*) FROM run")).scalar() == 0
    store.close()


# Seeded damage: random bytes that start like a protocol-1 pickle made torch warn before it
# failed, two more lines around the error: 80 blobs in 20,000 (measured), and one CI run met one.
CHECKPOINT_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda weights: weights[:1000],
    "random_bytes": lambda weights: random.Random(0).randbytes(len(weights)),
    "pickle_protocol_1": lambda weights: b"\x80\x01" + random.Random(1).randbytes(len(weights) - 2),
}


@pytest.mark.parametrize("damage", sorted(CHECKPOINT_DAMAGE))
def test_a_corrupt_checkpoint_is_one_line(tmp_path: Path, quick_store: Path, damage: str) -> None:
    shutil.copy(quick_store / "quick.db", tmp_path / "quick.db")
    with sqlite3.connect(tmp_path / "quick.db") as connection:
        for model_id, weights in connection.execute("SELECT id, weights FROM model").fetchall():
            damaged = CHECKPOINT_DAMAGE[damage](weights)
            connection.execute("UPDATE model SET weights = ? WHERE id = ?", (damaged, model_id))
    url = f"sqlite:///{tmp_path / 'quick.db'}"
    result = decodelab("train", "--spec", str(quick_store / "quick.toml"), "--db", url, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "the stored checkpoint is damaged", "delete that model row")


def test_an_output_file_that_cannot_be_written_is_one_line(tmp_path: Path, quick_store: Path) -> None:
    # /proc takes no new files, even from root (a permission test would not fail for root).
    result = decodelab(
        "export", "--out", "/proc/decodelab-export.csv", "--db", f"sqlite:///{quick_store / 'quick.db'}", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "--out: cannot write '/proc/decodelab-export.csv'")


def test_export_takes_its_format_from_the_files_name_and_refuses_a_name_that_says_another(
    tmp_path: Path, quick_store: Path
) -> None:
    """`export --out c.json` used to write CSV under that name and report it written; `import`
    then refused the file."""
    url = f"sqlite:///{quick_store / 'quick.db'}"
    named = decodelab("export", "--out", "c.json", "--db", url, cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert json.loads((tmp_path / "c.json").read_text())[0]["run"]["uid"]  # JSON, as the name says
    imported = decodelab("import", "c.json", "--db", f"sqlite:///{tmp_path / 'other.db'}", cwd=tmp_path)
    assert imported.returncode == 0 and "cases added" in imported.stdout, imported.stderr
    plain = decodelab("export", "--out", "c.txt", "--db", url, cwd=tmp_path)
    assert plain.returncode == 0 and (tmp_path / "c.txt").read_text().startswith("run_id,"), plain.stderr
    clash = decodelab("export", "--out", "d.json", "--format", "csv", "--db", url, cwd=tmp_path)
    assert_one_line_error(clash, "--out: 'd.json' names json, but --format is csv")
    assert not (tmp_path / "d.json").exists()


def test_a_tag_that_only_ab_writes_is_refused_by_hand(tmp_path: Path, quick_store: Path) -> None:
    """By hand an ab: tag took a run out of the baselines and paired it with others, silently."""
    shutil.copy(quick_store / "quick.db", tmp_path / "quick.db")
    url = f"sqlite:///{tmp_path / 'quick.db'}"
    for name, prefix in (("ab:7-8", "ab:"), ("rev:abc", "rev:")):
        result = decodelab("tag", name, "--run", "1", "--db", url, cwd=tmp_path)
        assert_one_line_error(result, f"tag: '{name}' starts with {prefix}, which only `decodelab ab` writes")
    assert Store(url).annotations.tags([1]) == {}
    assert decodelab("tag", "abc:x", "--run", "1", "--db", url, cwd=tmp_path).returncode == 0


def test_runs_lists_the_stores_runs_newest_first_and_says_when_there_are_none(
    tmp_path: Path, quick_store: Path
) -> None:
    """The help of every --run pointed at `decodelab workers`, which lists no run ids."""
    url = f"sqlite:///{quick_store / 'quick.db'}"
    listed = decodelab("runs", "--db", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, first, *rest = listed.stdout.splitlines()
    assert header.split()[:4] == ["run", "started", "(UTC)", "status"] and header.endswith("tags")
    assert first.split()[0] == "1" and " done " in first and " custom " in first and rest == []
    Store(f"sqlite:///{tmp_path / 'empty.db'}").close()
    empty = decodelab("runs", "--db", f"sqlite:///{tmp_path / 'empty.db'}", cwd=tmp_path)
    assert empty.returncode == 0 and empty.stdout.startswith("no run in sqlite:///"), empty.stderr
    refused = decodelab("runs", "--limit", "0", "--db", url, cwd=tmp_path)
    assert refused.returncode == 2 and "--limit" in refused.stderr
    helped = decodelab("tag", "--help", cwd=tmp_path).stdout
    assert "decodelab runs" in helped and "decodelab workers" not in helped
