"""Build a synthetic store of 1,000 runs and 1,000,000 samples, then time each page's data
functions and an AppTest render of each page. Targets: data under 1 s, render under 3 s.

    python benchmarks/dashboard_load.py [--runs 1000] [--samples 1000000]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dashboard import pages as dashboard_pages
from store import frames
from store.records import CaseRecord, MachineRecord, MeasurementRecord, SampleRecord
from store.store import Store

# Every page, in the navigation's order (the one list: dashboard/pages.py).
PAGES = [page.name for page in dashboard_pages.pages()]
MACHINES = [
    MachineRecord(f"machine-{index}", "cpu", 2 + index, 2**34, "Linux", "3.11", "2.13.0", 2, "cpu", None)
    for index in range(3)
]


def kv_cases(generator: random.Random, samples_per_case: int) -> list[CaseRecord]:
    cases = []
    for n in (64, 128, 256, 512, 1024):
        pairs = samples_per_case // 2
        samples = tuple(
            SampleRecord(pair, side, generator.uniform(0.01, 1.0)) for pair in range(pairs) for side in "AB"
        )
        speedup = generator.uniform(1.5, 12)
        cases.append(
            CaseRecord(
                "kv_cache",
                {"part": "timing", "n": n, "d_model": 128, "n_layer": 3, "impl": "static", "pairs": pairs},
                (
                    MeasurementRecord("measured_speedup", speedup, "ratio", samples),
                    MeasurementRecord("measured_speedup_low", speedup * 0.9, "ratio"),
                    MeasurementRecord("measured_speedup_high", speedup * 1.1, "ratio"),
                    MeasurementRecord("seconds_no_cache", generator.uniform(0.05, 11), "seconds"),
                    MeasurementRecord("seconds_cache", generator.uniform(0.03, 1), "seconds"),
                    MeasurementRecord("arithmetic_ratio", n / 2, "ratio"),
                    MeasurementRecord("received_fraction", speedup / (n / 2), "ratio"),
                ),
            )
        )
    return cases


def build(url: str, runs: int, samples: int) -> None:
    store = Store(url)
    generator = random.Random(0)
    machine_ids = [store.results.machine_id(machine) for machine in MACHINES]
    per_case = max(2, samples // (runs * 5))
    started = time.perf_counter()
    for index in range(runs):
        run_id = store.results.start_run(
            machine_id=machine_ids[index % len(machine_ids)],
            spec={},
            code_version="bench",
            model_id=None,
            preset="quick",
        )
        for case in kv_cases(generator, per_case):
            store.results.record_case(run_id, case)
        store.results.finish_run(run_id, "done", wall_seconds=generator.uniform(40, 60))
    print(f"built {runs} runs, {runs * 5 * per_case:,} samples in {time.perf_counter() - started:.1f} s")
    store.close()


def timed(label: str, function: Callable[[], object], target: float) -> float:
    started = time.perf_counter()
    function()
    seconds = time.perf_counter() - started
    print(f"{label:34} {seconds:7.3f} s  {'ok' if seconds <= target else 'SLOW'} (target {target:g} s)")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1_000_000)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'load.db'}"
        build(url, arguments.runs, arguments.samples)
        os.environ["DECODELAB_DB"] = url
        from dashboard.data import wide_cases

        store = Store(url)
        newest = int(frames.runs(store).iloc[0]["run_id"])
        worst_data = max(
            timed("data: runs (history)", lambda: frames.runs(store), 1.0),
            timed("data: runs with kv_cache", lambda: frames.runs(store, experiment="kv_cache"), 1.0),
            timed(
                "data: one run's cases (kv_cache)",
                lambda: wide_cases(frames.measurements(store, newest, "kv_cache")),
                1.0,
            ),
            timed(
                "data: metric across runs",
                lambda: frames.metric_across_runs(store, "kv_cache", "measured_speedup"),
                1.0,
            ),
            timed("data: metric names", lambda: frames.metric_names(store, "kv_cache"), 1.0),
        )
        from streamlit.testing.v1 import AppTest

        views = Path(__file__).resolve().parent.parent / "dashboard" / "views"
        worst_render = 0.0
        for page in PAGES:
            app = AppTest.from_file(str(views / f"{page}.py"), default_timeout=120)
            worst_render = max(worst_render, timed(f"render: {page}", app.run, 3.0))
            if app.exception:
                print(f"  {page} raised: {app.exception[0].value}")
        print(f"worst_data_seconds={worst_data:.3f}")
        print(f"worst_render_seconds={worst_render:.3f}")


if __name__ == "__main__":
    main()
