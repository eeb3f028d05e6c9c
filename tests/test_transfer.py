"""Moving a run between stores: export as JSON, import, the same run (importing twice adds nothing)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from store import frames
from store.store import Store
from tests.conftest import run_decodelab

ROOT = Path(__file__).parent.parent


def decodelab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_decodelab(*args, cwd=cwd)


def utc(value: Any) -> pd.Timestamp:
    """SQLite hands back naive UTC, PostgreSQL aware timestamps: compare them as UTC."""
    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def snapshot(store: Store, run_id: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    measurements = frames.measurements(store, run_id).drop(columns=["run_id", "case_id", "measurement_id"])
    measurements["params"] = measurements["params"].map(lambda params: json.dumps(params, sort_keys=True))
    ids = frames.measurements(store, run_id)["measurement_id"].tolist()
    samples = frames.samples(store, ids).drop(columns=["measurement_id"])
    run = frames.runs(store).set_index("run_id").loc[[run_id]].iloc[0].drop(labels=["started_at"])
    return measurements.reset_index(drop=True), samples.reset_index(drop=True), run


@pytest.fixture(scope="module")
def exported_run(filled_store_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """The session store's run exported as JSON through the CLI, once for both backends' imports
    (the export reads the same SQLite store either way)."""
    run_id = int(frames.runs(Store(filled_store_url)).iloc[-1]["run_id"])
    directory = tmp_path_factory.mktemp("export")
    exported = decodelab(
        "export",
        "--db",
        filled_store_url,
        "--run",
        str(run_id),
        "--format",
        "json",
        "--out",
        str(directory / "run.json"),
        cwd=directory,
    )
    assert exported.returncode == 0, exported.stderr
    return run_id, directory / "run.json"


def test_a_run_moves_from_a_laptop_store_to_a_shared_store(
    filled_store_url: str, store_url: str, tmp_path: Path, exported_run: tuple[int, Path]
) -> None:
    source = Store(filled_store_url)
    run_id, exported = exported_run
    rows = json.loads(exported.read_text())
    assert list(rows[0])[:7] == ["run_id", "machine", "experiment", "params", "metric", "value", "unit"]

    first = decodelab("import", str(exported), "--db", store_url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = decodelab("import", str(exported), "--db", store_url, cwd=tmp_path)
    assert second.returncode == 0 and ": 0 cases added" in second.stdout

    target = Store(store_url)
    assert len(frames.runs(target)) == 1
    imported_id = int(frames.runs(target).iloc[0]["run_id"])
    before, after = snapshot(source, run_id), snapshot(target, imported_id)
    pd.testing.assert_frame_equal(
        before[0].drop(columns=["started_at"]), after[0].drop(columns=["started_at"]), check_dtype=False
    )
    pd.testing.assert_frame_equal(before[1], after[1], check_dtype=False)
    for field in (
        "machine",
        "machine_fingerprint",
        "status",
        "preset",
        "code_version",
        "model_hash",
        "uid",
        "wall_seconds",
    ):
        assert before[2][field] == after[2][field], field
    assert utc(frames.runs(source).iloc[-1]["started_at"]) == utc(frames.runs(target).iloc[0]["started_at"])
    # The machine's measured roof travels with its run.
    assert target.profiles.by_machine_name() == source.profiles.by_machine_name()


def test_importing_something_else_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "rows.json").write_text(json.dumps([{"metric": "x"}]))
    result = decodelab("import", str(tmp_path / "rows.json"), "--db", sqlite_url, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: import:") and "is not a decodelab JSON export" in result.stderr
    (tmp_path / "broken.json").write_text("[{")
    result = decodelab("import", str(tmp_path / "broken.json"), "--db", sqlite_url, cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_an_export_named_gz_is_compressed_and_imports_as_the_plain_one_does(
    filled_store_url: str, exported_run: tuple[int, Path], tmp_path: Path
) -> None:
    """`--out run.json.gz` writes gzip (the shared machines' runs travel so); an import reads it
    whatever its name, and the run it makes is the plain export's run."""
    run_id, plain = exported_run
    packed = tmp_path / "run.json.gz"
    exported = decodelab(
        "export", "--db", filled_store_url, "--run", str(run_id), "--format", "json", "--out", str(packed), cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    assert packed.read_bytes()[:2] == b"\x1f\x8b" and packed.stat().st_size < plain.stat().st_size / 3
    as_csv = decodelab("export", "--db", filled_store_url, "--out", str(tmp_path / "rows.csv.gz"), cwd=tmp_path)
    assert as_csv.returncode == 2 and "--format json only" in as_csv.stderr
    assert not (tmp_path / "rows.csv.gz").exists()
    renamed = tmp_path / "run.json"  # the content, not the name, says it is compressed
    renamed.write_bytes(packed.read_bytes())
    stores = {}
    for name, path in (("plain", plain), ("packed", renamed)):
        url = f"sqlite:///{tmp_path / name}.db"
        result = decodelab("import", str(path), "--db", url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        stores[name] = Store(url)
    plain_measurements, plain_samples, plain_run = snapshot(stores["plain"], 1)
    packed_measurements, packed_samples, packed_run = snapshot(stores["packed"], 1)
    assert plain_measurements.equals(packed_measurements) and plain_samples.equals(packed_samples)
    assert plain_run.equals(packed_run)


def test_a_damaged_or_oversized_compressed_export_is_refused_in_one_line(
    exported_run: tuple[int, Path], tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    from store import transfer
    from store.errors import StoreError

    _, plain = exported_run
    packed = gzip.compress(plain.read_bytes())
    (tmp_path / "cut.json.gz").write_bytes(packed[: len(packed) // 2])
    result = decodelab("import", str(tmp_path / "cut.json.gz"), "--db", sqlite_url, cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: import: cannot read") and "end-of-stream" in result.stderr
    # A small file that inflates past the limit is refused before the rest is read.
    (tmp_path / "whole.json.gz").write_bytes(packed)
    monkeypatch.setattr(transfer, "MAX_EXPORT_BYTES", len(plain.read_bytes()) // 2)
    with pytest.raises(StoreError, match=r"holds more than .* of JSON once decompressed \(allowed: at most"):
        transfer.read_export(tmp_path / "whole.json.gz")


def test_an_ab_sessions_rounds_travel_with_its_samples(filled_store_url: str, store_url: str, tmp_path: Path) -> None:
    """A sample's round (an A/B session's) is a fourth element of the export and comes back on
    import; samples without one stay three elements."""
    import sqlalchemy as sa

    from tests.conftest import copy_store

    source_url = copy_store(filled_store_url, tmp_path / "rounds.db")
    source = Store(source_url)
    run_id = int(frames.runs(source).iloc[-1]["run_id"])
    with source.engine.begin() as connection:
        connection.execute(
            sa.text(
                "update sample set round_index = pair_index % 3 where measurement_id in "
                "(select id from measurement where run_id = :run and experiment = 'kv_cache')"
            ),
            {"run": run_id},
        )
    exported = tmp_path / "rounds.json"
    done = decodelab(
        "export", "--db", source_url, "--run", str(run_id), "--format", "json", "--out", str(exported), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(exported.read_text())
    lengths: dict[bool, set[int]] = {}
    for row in rows:
        lengths.setdefault(row["experiment"] == "kv_cache", set()).update(len(sample) for sample in row["samples"])
    assert lengths == {True: {4}, False: {3}}
    imported = decodelab("import", str(exported), "--db", store_url, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    target = Store(store_url)
    imported_id = int(frames.runs(target).iloc[-1]["run_id"])
    pd.testing.assert_frame_equal(snapshot(source, run_id)[1], snapshot(target, imported_id)[1], check_dtype=False)
    assert snapshot(target, imported_id)[1]["round_index"].notna().any()


def test_a_run_exports_the_roof_its_host_was_profiled_with_under_another_fingerprint(
    filled_store_url: str, tmp_path: Path
) -> None:
    """`decodelab machine profile` runs on every core and a sweep on one thread, so the same host
    has two fingerprints: the run is judged on the roof stored under the other one
    (Profiles.latest), and that roof must travel with its export too (it was exported as none)."""
    import sqlalchemy as sa

    from tests.conftest import copy_store

    url = copy_store(filled_store_url, tmp_path / "two-fingerprints.db")
    store = Store(url)
    run_id = int(frames.runs(store).iloc[-1]["run_id"])
    with store.engine.begin() as connection:
        machine_id = connection.execute(sa.text("select machine_id from run where id = :run"), {"run": run_id}).scalar()
        columns = "name, cpu_model, cores, memory_bytes, os, python_version, torch_version, device, created_at"
        connection.execute(
            sa.text(
                f"insert into machine (fingerprint, threads, {columns}) "
                f"select 'all-cores', threads + 1, {columns} from machine where id = :machine"
            ),
            {"machine": machine_id},
        )
        profiled = connection.execute(sa.text("select id from machine where fingerprint = 'all-cores'")).scalar_one()
        connection.execute(sa.text("delete from machine_profile"))
    roof = {"instruction_set": "avx2", "bandwidth": {"L1": 1.0}}
    store.profiles.save(profiled, "avx2", False, roof)
    assert store.profiles.for_run(run_id)[1] == roof
    exported = tmp_path / "run.json"
    done = decodelab(
        "export", "--db", url, "--run", str(run_id), "--format", "json", "--out", str(exported), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert {json.dumps(row["run"]["machine_profile"]) for row in json.loads(exported.read_text())} == {json.dumps(roof)}
