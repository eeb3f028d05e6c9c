"""`decodelab bench` records what the benchmarks print as a run of the experiment bench."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner.bench import parse_results, unit_of
from store.store import Store
from tests.conftest import rows_by

ROOT = Path(__file__).parent.parent


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
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "runner.cli", "bench", "--db", url, "--only", "store_write"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    store = Store(url)
    run = store.runs(experiment="bench").iloc[0]
    assert (run["status"], run["preset"]) == ("done", "bench")
    measured = rows_by(store.measurements(int(run["run_id"]), "bench"), "metric")
    assert measured["sqlite_samples_per_second"]["value"] > 0
    assert measured["sqlite_samples_per_second"]["params"] == {"benchmark": "store_write"}
    refused = subprocess.run(
        [sys.executable, "-m", "runner.cli", "bench", "--db", url, "--only", "warp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert refused.returncode == 2 and "--only: 'warp' is not a benchmark" in refused.stderr
