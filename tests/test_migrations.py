"""Schema revisions: an old store upgrades without losing rows; a newer one is refused; a
PostgreSQL store migrates only through `decodelab db upgrade`, a SQLite one on open after a
copy of the file is put aside."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from store import frames
from store.engine import create_store_engine, current_revision, head_revision, upgrade
from store.errors import SchemaBehind, StoreError
from store.store import Store
from tests.conftest import run_decodelab

NOW = {"now": "2026-01-01 00:00:00"}


def test_a_populated_first_revision_store_upgrades_to_head(empty_store_url: str) -> None:
    store_url = empty_store_url
    engine = create_store_engine(store_url)
    upgrade(engine, "0001")
    assert current_revision(engine) == "0001"
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO machine (id, fingerprint, name, cpu_model, cores, memory_bytes, os, python_version, "
                "torch_version, threads, device, created_at) VALUES (1, 'f', 'old', 'cpu', 2, 25769803776, 'Linux', "
                "'3.11', '2.13.0', 2, 'cpu', :now)"
            ),
            {"now": "2026-01-01 00:00:00"},
        )
        connection.execute(
            sa.text(
                "INSERT INTO run (id, machine_id, spec, code_version, status, started_at) "
                "VALUES (1, 1, '{}', 'old', 'done', :now)"
            ),
            {"now": "2026-01-01 00:00:00"},
        )
        connection.execute(
            sa.text(
                'INSERT INTO "case" (id, run_id, experiment, case_key, params, created_at) '
                "VALUES (1, 1, 'kv_cache', :key, :params, :now)"
            ),
            {"key": '{"n":64}', "params": '{"n": 64}', "now": "2026-01-01 00:00:00"},
        )
        connection.execute(
            sa.text(
                "INSERT INTO measurement (id, case_id, run_id, experiment, metric, value, unit) "
                "VALUES (1, 1, 1, 'kv_cache', 'speedup', 1.7, 'ratio')"
            )
        )
        connection.execute(
            sa.text("INSERT INTO sample (id, measurement_id, pair_index, side, seconds) VALUES (1, 1, 0, 'A', 0.07)")
        )
        connection.execute(
            sa.text(
                "INSERT INTO job (id, spec, status, cases_done, cases_total, created_at) "
                "VALUES (1, '{}', 'done', 1, 1, :now)"
            ),
            {"now": "2026-01-01 00:00:00"},
        )
    engine.dispose()

    opened = Store(store_url, upgrade=True)
    assert current_revision(opened.engine) == head_revision()
    assert frames.runs(opened)["run_id"].tolist() == [1]
    assert frames.runs(opened)["wall_seconds"].isna().all()
    assert frames.measurements(opened, 1)["value"].tolist() == [1.7]
    assert frames.samples(opened, [1])["seconds"].tolist() == [0.07]
    assert frames.jobs(opened).loc[0, "attempts"] == 0
    inspector = sa.inspect(opened.engine)
    assert "ix_measurement_run_experiment_metric" in {index["name"] for index in inspector.get_indexes("measurement")}
    opened.close()


def test_an_older_store_can_be_left_alone_with_the_command_to_run(sqlite_url: str) -> None:
    engine = create_store_engine(sqlite_url)
    upgrade(engine, "0001")
    engine.dispose()
    with pytest.raises(StoreError, match="run `decodelab db upgrade --db sqlite:///"):
        Store(sqlite_url, upgrade=False)


def test_a_newer_store_is_refused(store_url: str) -> None:
    Store(store_url).close()
    engine = create_store_engine(store_url)
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="revision 9999, newer than this decodelab understands"):
        Store(store_url)


def a_revision_0003_store(url: str) -> None:
    """A store left by the previous release: a run, a running job and a queued one."""
    engine = create_store_engine(url)
    upgrade(engine, "0003")
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO machine (id, fingerprint, name, cpu_model, cores, memory_bytes, os, python_version, "
                "torch_version, threads, device, created_at) VALUES (1, 'f', 'old', 'cpu', 2, 1, 'Linux', "
                "'3.11', '2.13.0', 2, 'cpu', :now)"
            ),
            NOW,
        )
        connection.execute(
            sa.text(
                "INSERT INTO run (id, uid, machine_id, spec, code_version, status, started_at) "
                "VALUES (1, 'u-1', 1, '{}', 'old', 'running', :now)"
            ),
            NOW,
        )
        for job_id, status, run_id, attempts in ((1, "running", 1, 1), (2, "queued", None, 0)):
            connection.execute(
                sa.text(
                    "INSERT INTO job (id, spec, status, worker, run_id, cases_done, cases_total, attempts, created_at,"
                    " heartbeat_at) VALUES (:id, '{}', :status, 'old-host:1', :run, 0, 3, :attempts, :now, :now)"
                ),
                {"id": job_id, "status": status, "run": run_id, "attempts": attempts, **NOW},
            )
    engine.dispose()


def test_a_0003_store_with_jobs_upgrades_to_the_fleet_schema(empty_store_url: str) -> None:
    a_revision_0003_store(empty_store_url)
    store = Store(empty_store_url, upgrade=True)
    assert current_revision(store.engine) == head_revision()
    jobs = frames.jobs(store).set_index("job_id")
    # The old worker's running job keeps running (it may still finish it); nothing is lost.
    assert jobs.loc[1, "status"] == "running" and jobs.loc[1, "run_id"] == 1
    assert frames.workers(store).empty
    worker = store.workers.register(
        name="new:1", kind="worker", machine_name="m", host="new", pid=1, stale_after_seconds=60
    )
    claimed = store.jobs.claim(worker)
    assert claimed is not None and claimed.id == 2 and claimed.attempts == 1
    # The old job went silent long ago (by the server's clock): a reclaim requeues it.
    assert store.jobs.reclaim_stale(60) == [1]
    assert frames.runs(store).set_index("run_id").loc[1, "status"] == "interrupted"
    store.close()


@pytest.mark.slow
def test_postgresql_migrates_only_through_db_upgrade(empty_postgres_url: str, tmp_path: Path) -> None:
    a_revision_0003_store(empty_postgres_url)
    with pytest.raises(SchemaBehind, match="run `decodelab db upgrade"):
        Store(empty_postgres_url)
    for command in (["worker", "--once"], ["enqueue", "--preset", "quick"], ["dashboard", "--port", "1"]):
        refused = run_decodelab(*command, "--db", empty_postgres_url, cwd=tmp_path, timeout=120)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert f"`decodelab {command[0]}` does not migrate a shared store" in lines[0], lines[0]
        assert "schema revision 0003" in lines[0] and "decodelab db upgrade" in lines[0], lines[0]
    engine = create_store_engine(empty_postgres_url)
    assert current_revision(engine) == "0003", "nothing but db upgrade migrated it"
    current = run_decodelab("db", "current", "--db", empty_postgres_url, cwd=tmp_path, timeout=120)
    assert current.returncode == 0, current.stderr
    assert f"schema revision 0003; this decodelab: {head_revision()} (older" in current.stdout
    upgraded = run_decodelab("db", "upgrade", "--db", empty_postgres_url, cwd=tmp_path, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr
    assert current_revision(engine) == head_revision()
    engine.dispose()
    current = run_decodelab("db", "current", "--db", empty_postgres_url, cwd=tmp_path, timeout=120)
    assert f"this decodelab: {head_revision()} (up to date)" in current.stdout


@pytest.mark.slow
def test_an_older_sqlite_store_is_copied_aside_then_upgraded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    a_revision_0003_store(url)
    enqueued = run_decodelab("enqueue", "--preset", "quick", "--db", url, cwd=tmp_path, timeout=120)
    assert enqueued.returncode == 0, enqueued.stderr
    copy = tmp_path / "old.db.0003.bak"
    assert f"the old file is kept as {copy}" in enqueued.stderr
    with sqlite3.connect(copy) as old:
        assert old.execute("SELECT version_num FROM alembic_version").fetchone()[0] == "0003"
        assert old.execute("SELECT count(*) FROM job").fetchone()[0] == 2
    opened = Store(url)
    assert current_revision(opened.engine) == head_revision() and len(frames.jobs(opened)) == 3
    assert opened.backup_path is None, "a store at head is not copied again"
    opened.close()


def test_a_0005_store_upgrades_to_request_ids_and_64_bit_parameter_counts(empty_store_url: str) -> None:
    engine = create_store_engine(empty_store_url)
    upgrade(engine, "0005")
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO job (id, spec, status, cases_done, cases_total, attempts, stale_reclaims, created_at) "
                "VALUES (1, '{}', 'queued', 0, 3, 0, 0, :now)"
            ),
            NOW,
        )
    engine.dispose()
    store = Store(empty_store_url, upgrade=True)
    assert current_revision(store.engine) == head_revision()
    # A parameter count past 2**31 (a 2.4e9-parameter spec) fits the column now.
    with store.engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO model (id, weights_hash, recipe_hash, config, corpus_hash, train_loss, val_loss, "
                "parameter_count, weight_bytes, weights, created_at) VALUES (1, 'w', 'r', '{}', 'c', 1.0, 1.0, "
                ":count, 1, :weights, :now)"
            ),
            {"count": 2_400_000_000, "weights": b"x", **NOW},
        )
        assert connection.execute(sa.text("SELECT parameter_count FROM model")).scalar() == 2_400_000_000
    # The old job has no request id; request ids are unique.
    worker = store.workers.register(
        name="w:1", kind="worker", machine_name="m", host="h", pid=1, stale_after_seconds=60
    )
    claimed = store.jobs.claim(worker)
    assert claimed is not None and claimed.id == 1
    inspector = sa.inspect(store.engine)
    unique = {index["name"] for index in inspector.get_indexes("job") if index["unique"]}
    assert {"ix_job_request_id", "ix_job_claim_request_id"} <= unique
    with store.engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM model"))
    store.close()
    downgraded = create_store_engine(empty_store_url)
    with downgraded.connect() as connection:
        from alembic import command

        from store.engine import alembic_config

        config = alembic_config()
        with connection.begin():
            config.attributes["connection"] = connection
            command.downgrade(config, "0005")
    assert current_revision(downgraded) == "0005"
    downgraded.dispose()
