"""`decodelab bench` records what the benchmarks print as a run of the experiment bench."""

from __future__ import annotations

from pathlib import Path

from runner.bench import parse_results, unit_of
from store import frames
from store.store import Store
from tests.conftest import rows_by, run_decodelab


def test_results_are_parsed_from_name_value_lines() -> None:
    output = "sqlite  169,041 samples/s\nsqlite_samples_per_second=169041\nbest_impl=fast\nratio=-1.5e-3\n"
    assert parse_results(output) == {"sqlite_samples_per_second": 169041.0, "ratio": -0.0015}
    assert (unit_of("fast_us_per_token"), unit_of("worst_data_seconds"), unit_of("speedup_vs_transformers")) == (
        "microseconds",
        "seconds",
        "ratio",
    )


def test_bench_records_a_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    result = run_decodelab("bench", "--db", url, "--only", "store_write", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    store = Store(url)
    run = frames.runs(store, experiment="bench").iloc[0]
    assert (run["status"], run["preset"]) == ("done", "bench")
    measured = rows_by(frames.measurements(store, int(run["run_id"]), "bench"), "metric")
    assert measured["sqlite_samples_per_second"]["value"] > 0
    assert measured["sqlite_samples_per_second"]["params"] == {"benchmark": "store_write"}
    refused = run_decodelab("bench", "--db", url, "--only", "warp", cwd=tmp_path, timeout=120)
    assert refused.returncode == 2 and "--only: 'warp' is not a benchmark" in refused.stderr
