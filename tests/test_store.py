"""The store suite: runs against a SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from store import frames
from store.records import CaseRecord, MachineRecord, MeasurementRecord, ModelRecord, SampleRecord
from store.schema import Case, Measurement, Sample, utc_now
from store.store import Store

MACHINE = MachineRecord(
    name="laptop",
    cpu_model="Test CPU",
    cores=2,
    memory_bytes=24 * 2**30,
    os="Linux 6",
    python_version="3.11.7",
    torch_version="2.13.0",
    threads=2,
    device="cpu",
    gpu_name=None,
)


def make_model(tag: str = "a") -> ModelRecord:
    return ModelRecord(
        weights_hash=f"w{tag}" * 8,
        recipe_hash=f"r{tag}" * 8,
        config={"model": {"d_model": 8}},
        corpus_hash="c" * 64,
        train_loss=1.5,
        val_loss=1.6,
        parameter_count=123,
        weight_bytes=492,
        weights=b"\x00\x01binary\xff",
    )


def timed_case(n: int) -> CaseRecord:
    samples = tuple(SampleRecord(index, side, 0.01 * (index + 1)) for index in range(3) for side in "AB")
    return CaseRecord(
        experiment="kv_cache",
        params={"n": n, "d_model": 128},
        measurements=(
            MeasurementRecord("speedup", 2.5, "ratio", samples),
            MeasurementRecord("arithmetic_ratio", 134.59, "ratio"),
        ),
    )


def test_round_trip_of_every_table(store: Store) -> None:
    machine_id = store.results.machine_id(MACHINE)
    assert store.results.machine_id(MACHINE) == machine_id, "a known fingerprint is not inserted twice"
    model_id = store.results.save_model(make_model())
    assert store.results.save_model(make_model()) == model_id
    found = store.results.find_model(recipe_hash=make_model().recipe_hash)
    assert found is not None and found.weights == make_model().weights and found.id == model_id

    run_id = store.results.start_run(
        machine_id=machine_id, spec={"name": "quick"}, code_version="abc", model_id=model_id, preset="quick"
    )
    case_id = store.results.record_case(run_id, timed_case(256))
    assert case_id is not None
    store.results.finish_run(run_id, "done", wall_seconds=12.5)

    runs = frames.runs(store)
    assert runs[["run_id", "status", "preset", "machine", "model_hash", "wall_seconds"]].iloc[0].tolist() == [
        run_id,
        "done",
        "quick",
        "laptop",
        make_model().weights_hash,
        12.5,
    ]
    measured = frames.measurements(store, run_id)
    assert sorted(measured["metric"]) == ["arithmetic_ratio", "speedup"]
    assert measured["params"].iloc[0] == {"n": 256, "d_model": 128}
    speedup_id = int(measured.loc[measured["metric"] == "speedup", "measurement_id"].iloc[0])
    samples = frames.samples(store, [speedup_id])
    assert len(samples) == 6
    assert samples["side"].tolist() == ["A", "B"] * 3
    assert samples["seconds"].round(6).tolist() == [0.01, 0.01, 0.02, 0.02, 0.03, 0.03]

    across = frames.metric_across_runs(store, "kv_cache", "arithmetic_ratio", machines=["laptop"])
    assert across["value"].tolist() == [134.59]

    job_id = store.jobs.enqueue({"name": "quick"}, preset="quick", machine_name="laptop", cases_total=4)
    jobs = frames.jobs(store)
    assert jobs[["job_id", "status", "machine_name", "cases_total"]].iloc[0].tolist() == [job_id, "queued", "laptop", 4]


def test_a_resumed_case_is_not_duplicated(store: Store) -> None:
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )
    assert store.results.record_case(run_id, timed_case(64)) is not None
    assert store.results.record_case(run_id, timed_case(64)) is None
    assert len(frames.measurements(store, run_id)) == 2
    assert store.results.recorded_case_keys(run_id) == {("kv_cache", '{"d_model":128,"n":64}')}


def test_a_case_that_fails_half_way_leaves_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )
    import store.results as store_module

    real_insert = store_module.insert

    def failing_insert(table: object) -> object:
        if table is Sample:
            raise RuntimeError("disk vanished while writing samples")
        return real_insert(table)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "insert", failing_insert)
    with pytest.raises(RuntimeError, match="disk vanished"):
        store.results.record_case(run_id, timed_case(128))
    monkeypatch.undo()
    with store.read() as session:
        for table in (Case, Measurement, Sample):
            assert session.scalar(sa.select(sa.func.count()).select_from(table)) == 0


def test_read_api_filters(store: Store) -> None:
    machine_id = store.results.machine_id(MACHINE)
    other = store.results.machine_id(MachineRecord(**{**MACHINE.__dict__, "name": "server", "cores": 64}))
    first = store.results.start_run(machine_id=machine_id, spec={}, code_version="x", model_id=None)
    store.results.record_case(first, timed_case(64))
    store.results.finish_run(first, "done")
    second = store.results.start_run(machine_id=other, spec={}, code_version="x", model_id=None)
    store.results.finish_run(second, "failed", error="boom")

    assert frames.runs(store, machine="server")["run_id"].tolist() == [second]
    assert frames.runs(store, status="done")["run_id"].tolist() == [first]
    assert frames.runs(store, experiment="kv_cache")["run_id"].tolist() == [first]
    assert frames.runs(store, since=utc_now() + timedelta(hours=1)).empty
    assert set(frames.runs(store, until=utc_now() + timedelta(hours=1))["run_id"]) == {first, second}
    assert frames.runs(store, status="failed")["error"].tolist() == ["boom"]
    # One metric's values over the run's cases, in order (the run's line on the machine's speed).
    store.results.record_case(first, timed_case(128))
    assert store.results.metric_values(first, "arithmetic_ratio") == [134.59, 134.59]
    assert store.results.metric_values(second, "arithmetic_ratio") == []


def test_export_long_format(store: Store, tmp_path: Path) -> None:
    from store.export import write_export

    run_id = store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )
    store.results.record_case(run_id, timed_case(256))
    rows = frames.export_rows(store, run_id)
    assert list(rows.columns) == ["run_id", "machine", "experiment", "params", "metric", "value", "unit"]
    for export_format in ("csv", "json", "parquet"):
        path = tmp_path / f"out.{export_format}"
        assert write_export(rows, path, export_format) == 2
        if export_format == "csv":
            back = pd.read_csv(path)
        elif export_format == "json":
            back = pd.DataFrame(json.loads(path.read_text()))
        else:
            back = pd.read_parquet(path)
        assert back["metric"].tolist() == ["speedup", "arithmetic_ratio"]
        assert json.loads(back["params"].iloc[0]) == {"d_model": 128, "n": 256}
        assert back["value"].tolist() == [2.5, 134.59]


def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(sqlite_url: str) -> None:
    opened = Store(sqlite_url)
    with opened.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert (connection.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) >= 5000
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    opened.close()


def test_a_finished_run_keeps_its_machines_drift_figure_with_the_machine(store: Store) -> None:
    """As each run finishes done, its caller (`decodelab run`, `bench`, the worker) has the
    machine's drift figure learned from its done runs so far (analysis.review_inputs.record_machine_drift)
    and kept on the machine row (migration 0010)."""
    from analysis.review import DRIFT_MIN_VALUES, DRIFT_QUANTILE
    from analysis.review_inputs import record_machine_drift
    from runner.execution.lifecycle import run_lifecycle

    machine_id = store.results.machine_id(MACHINE)
    fingerprint = MACHINE.fingerprint()
    assert store.drift.of_fingerprint(fingerprint) is None, "no run has finished yet"
    factors = [1.0, 1.02, 0.97, 1.05, 1.0, 0.9]  # each run's level: the moves are their ratios
    moves: list[float] = []
    for index, factor in enumerate(factors):
        run_id = store.results.start_run(
            machine_id=machine_id, spec={"name": "quick"}, code_version="a", model_id=None, preset="quick"
        )
        with run_lifecycle(store, run_id):
            for n in (64, 128, 256, 512):
                value = 2.0 * factor * (1 + n / 10_000)
                store.results.record_case(
                    run_id,
                    CaseRecord(
                        experiment="kv_cache",
                        params={"part": "timing", "impl": "fast", "n": n},
                        measurements=(MeasurementRecord("measured_speedup", value, "ratio"),),
                    ),
                )
        record_machine_drift(store, run_id)
        if index:
            moves += [abs(math.log(factor / factors[index - 1]))] * 4
        kept = store.drift.of_fingerprint(fingerprint)
        assert kept is not None and kept.run_id == run_id and kept.moves == len(moves) and kept.machine == "laptop"
        if len(moves) < DRIFT_MIN_VALUES:
            assert kept.log_ratio is None, "too few moves for a figure"
    assert kept is not None and kept.log_ratio == pytest.approx(float(pd.Series(moves).quantile(DRIFT_QUANTILE)))
    assert kept.quantile == DRIFT_QUANTILE, "the figure says which quantile it is"
    with pytest.raises(ValueError, match="log_ratio"):
        store.drift.save(run_id, -0.1, 3, DRIFT_QUANTILE)
    with pytest.raises(ValueError, match="quantile"):
        store.drift.save(run_id, 0.1, 3, 99.0)
    assert store.drift.of_fingerprint(fingerprint) == kept, "a refused figure leaves the kept one"


def test_a_drift_figure_kept_before_its_quantile_was_recorded_says_the_95th(store: Store) -> None:
    """Figures kept before migration 0013 were the 95th percentile of the moves; the report's
    line says so rather than the quantile the review uses now."""
    from analysis.report import drift_line
    from store.drift import DriftRecord

    at = datetime(2026, 12, 4, tzinfo=UTC)
    old = drift_line(DriftRecord("laptop", math.log(1.04), 40, 7, at), None, 8)
    new = drift_line(DriftRecord("laptop", math.log(1.04), 40, 7, at, 0.99), None, 8)
    assert "±4.0% (95% of 40 moves" in old and "±4.0% (99% of 40 moves" in new
    # As the store reads such a figure back: its quantile column is NULL.
    machine_id = store.results.machine_id(MACHINE)
    run_id = store.results.start_run(machine_id=machine_id, spec={"name": "quick"}, code_version="a", model_id=None)
    store.drift.save(run_id, math.log(1.04), 40, 0.99)
    with store.engine.begin() as connection:
        connection.execute(sa.text("UPDATE machine SET drift_quantile = NULL"))
    kept = store.drift.of_fingerprint(MACHINE.fingerprint())
    assert kept is not None and kept.quantile == 0.95
