"""Schema revisions: an old store upgrades without losing rows; a newer one is refused."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from store import frames
from store.engine import create_store_engine, current_revision, head_revision, upgrade
from store.errors import StoreError
from store.store import Store


def test_a_populated_first_revision_store_upgrades_to_head(store_url: str) -> None:
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

    opened = Store(store_url)  # opening an older store upgrades it
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
        Store(sqlite_url, auto_upgrade=False)


def test_a_newer_store_is_refused(store_url: str) -> None:
    Store(store_url).close()
    engine = create_store_engine(store_url)
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="revision 9999, newer than this decodelab understands"):
        Store(store_url)
