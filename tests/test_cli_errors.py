"""Bad store input: one line naming the problem, a non-zero exit, nothing written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import sqlalchemy as sa

from store.engine import create_store_engine
from store.store import Store
from tests.conftest import run_decodelab


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
