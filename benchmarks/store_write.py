"""Bulk-insert 100,000 samples and print samples per second for SQLite and, when
DECODELAB_TEST_PG_URL (or --pg URL) names a server, PostgreSQL. Target: ≥ 50,000/s on SQLite.

    python benchmarks/store_write.py [--samples N] [--pg URL]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from scratch_store import scratch_schema

from store.records import CaseRecord, MachineRecord, MeasurementRecord, SampleRecord
from store.store import Store

MACHINE = MachineRecord("bench", "cpu", 2, 1, "os", "3.11", "2.13.0", 2, "cpu", None)


def samples_per_second(url: str, total: int, per_case: int = 10_000) -> float:
    store = Store(url)
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="bench", model_id=None
    )
    cases = [
        CaseRecord(
            "bench",
            {"case": index},
            (
                MeasurementRecord(
                    "speedup",
                    1.0,
                    "ratio",
                    tuple(SampleRecord(pair, side, 0.001 * pair) for pair in range(per_case // 2) for side in "AB"),
                ),
            ),
        )
        for index in range(total // per_case)
    ]
    start = time.perf_counter()
    for case in cases:
        store.results.record_case(run_id, case)
    elapsed = time.perf_counter() - start
    store.close()
    return total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--pg", default=os.environ.get("DECODELAB_TEST_PG_URL"))
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        sqlite_rate = samples_per_second(f"sqlite:///{Path(directory) / 'bench.db'}", arguments.samples)
    print(f"sqlite      {sqlite_rate:12,.0f} samples/s  (target 50,000)")
    print(f"sqlite_samples_per_second={sqlite_rate:.0f}")
    if arguments.pg:
        with scratch_schema(arguments.pg) as url:
            postgres_rate = samples_per_second(url, arguments.samples)
        print(f"postgresql  {postgres_rate:12,.0f} samples/s")
        print(f"postgresql_samples_per_second={postgres_rate:.0f}")
        print(f"sqlite_over_postgresql={sqlite_rate / postgres_rate:.2f}")
    else:
        print("postgresql  skipped (set DECODELAB_TEST_PG_URL or pass --pg URL)")


if __name__ == "__main__":
    main()
