"""`decodelab bench`: run the side-by-side benchmarks and record what they print as a run of the
experiment ``bench``, so the dashboard's history shows each machine's performance over time
and flags a regression.

Each benchmark is its own script in ``benchmarks/`` (run as a separate process, an argument
list, no shell); its ``name=value`` lines become measurements of one case.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from store.masking import mask_secrets
from store.records import CaseRecord, MeasurementRecord

BENCHMARKS_DIRECTORY = Path(__file__).resolve().parent.parent / "benchmarks"
# A benchmark still running after this long is stopped and the bench run marked failed.
TIMEOUT_SECONDS = 1800.0
RESULT_LINE = re.compile(r"^([a-z][a-z0-9_]*)=(-?[0-9.]+(?:e[-+]?[0-9]+)?)$")


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str
    arguments: tuple[str, ...] = ()
    needs_store: bool = False


BENCHMARKS = (
    Benchmark("store_write", "store_write.py"),
    Benchmark("decode_vs_transformers", "decode_vs_transformers.py", needs_store=True),
    Benchmark("dashboard_load", "dashboard_load.py", ("--runs", "300", "--samples", "300000")),
    Benchmark("queue_throughput", "queue_throughput.py"),
)


def unit_of(metric: str) -> str:
    """The catalogue's unit (runner/metrics.py), else one from the name's suffix."""
    from runner.metrics import lookup

    known = lookup(metric)
    if known is not None:
        return known.unit
    if metric.endswith(("_us_per_token", "_us")):
        return "microseconds"
    if metric.endswith("_per_second"):
        return "per_second"
    if metric.endswith("_seconds"):
        return "seconds"
    return "ratio"


def parse_results(output: str) -> dict[str, float]:
    results = {}
    for line in output.splitlines():
        match = RESULT_LINE.match(line.strip())
        if match:
            results[match.group(1)] = float(match.group(2))
    return results


def run_benchmark(
    benchmark: Benchmark, store_url: str, log: Callable[[str], None], timeout_seconds: float = TIMEOUT_SECONDS
) -> CaseRecord:
    """Run one benchmark script and turn its ``name=value`` lines into a case. The store URL
    reaches a script that needs it through DECODELAB_DB, never its command line (which any user
    of the machine can read); a failure or timeout is one masked line."""
    command = [sys.executable, str(BENCHMARKS_DIRECTORY / benchmark.script), *benchmark.arguments]
    environment = {**os.environ}
    environment.pop("DECODELAB_DB", None)
    if benchmark.needs_store:
        environment["DECODELAB_DB"] = store_url
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_seconds, env=environment)
    except subprocess.TimeoutExpired:
        # Not str(error): it repeats the whole command line.
        raise RuntimeError(f"benchmark {benchmark.name} timed out after {timeout_seconds:g} s") from None
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(mask_secrets(f"benchmark {benchmark.name} failed: {tail[0]}"))
    results = parse_results(completed.stdout)
    if not results:
        raise RuntimeError(f"benchmark {benchmark.name} printed no name=value line")
    log(f"{benchmark.name}: " + ", ".join(f"{name}={value:g}" for name, value in results.items()))
    measurements = [MeasurementRecord(name, value, unit_of(name)) for name, value in results.items()]
    measurements.append(MeasurementRecord("benchmark_seconds", seconds, "seconds"))
    return CaseRecord("bench", {"benchmark": benchmark.name}, tuple(measurements))
