"""`decodelab bench` records what the benchmarks print as a run of the experiment bench."""

from __future__ import annotations

from pathlib import Path

from cli.bench import parse_results, unit_of
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
    assert (unit_of("compiled_call_overhead_us"), unit_of("fast_verify_k4_steps")) == ("microseconds", "ratio")


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


def test_the_queue_benchmark_claims_every_job_exactly_once(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    arguments = ["--workers", "3", "--jobs", "30"]
    postgres = os.environ.get("DECODELAB_TEST_PG_URL")
    if postgres:
        arguments += ["--pg", postgres]
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "queue_throughput.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    rates = parse_results(result.stdout)
    assert rates["claims_per_second_sqlite"] > 0
    assert not postgres or rates["claims_per_second_postgresql"] > 0
