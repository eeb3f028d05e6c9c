"""benchmarks/sweep_parts.py: what each part of a sweep cost, from a real run's case records."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from store.schema import Run
from store.store import Store
from tests.conftest import FIXTURES, ROOT, run_decodelab

SCRIPT = ROOT / "benchmarks" / "sweep_parts.py"


def run_script(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_the_parts_add_up_to_the_runs_time_for_its_cases(filled_store_url: str) -> None:
    result = run_script("--db", filled_store_url, "--runs", "1")
    assert result.returncode == 0, result.stderr
    figures = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    parts = {name: float(value) for name, value in figures.items() if not name.endswith("_total")}
    total = float(figures["sweep_seconds_1_total"])
    assert sum(parts.values()) == pytest.approx(total, abs=0.01 * len(parts))
    assert any(name.startswith("sweep_seconds_1_kv_cache_timing") for name in parts)
    store = Store(filled_store_url)
    try:
        with store.read() as session:
            started, finished = session.execute(select(Run.started_at, Run.finished_at).where(Run.id == 1)).one()
    finally:
        store.close()
    assert finished is not None, "a done run has its end"
    assert 0 < total <= (finished - started).total_seconds() + 0.01, "the cases' gaps fall within the run"


def test_an_imported_run_or_a_missing_one_is_refused_in_one_line(tmp_path: Path) -> None:
    unpacked = tmp_path / "epyc-quick.json"
    with gzip.open(FIXTURES / "epyc-quick.json.gz", "rb") as packed, unpacked.open("wb") as out:
        shutil.copyfileobj(packed, out)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert run_decodelab("import", str(unpacked), "--db", url, cwd=tmp_path).returncode == 0
    imported = run_script("--db", url, "--runs", "1")
    assert imported.returncode == 2
    assert imported.stderr.strip() == "--runs: run 1's cases were not recorded while it ran (unfinished or imported)"
    missing = run_script("--db", url, "--runs", "7")
    assert (missing.returncode, missing.stderr.strip()) == (2, "--runs: no run 7 in the store")
    malformed = run_script("--db", url, "--runs", "1,x")
    assert (malformed.returncode, malformed.stderr.strip()) == (
        2,
        "--runs: '1,x' (allowed: run ids separated by commas)",
    )
