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
from typing import Annotated

import typer

from cli.options import DbOption, open_store
from runner.errors import InputError
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


def bench(
    db: DbOption = None,
    only: Annotated[list[str] | None, typer.Option(help="Run just these benchmarks (repeatable).")] = None,
    timeout_seconds: Annotated[
        float, typer.Option(min=1, max=86400, help="Stop a benchmark running longer than this; the run fails.")
    ] = TIMEOUT_SECONDS,
) -> None:
    """Run the side-by-side benchmarks and record them in the store as a run (experiment bench)."""
    from runner.execution.execute import log_to_stderr
    from runner.execution.lifecycle import run_lifecycle
    from runner.measure.machine import code_version, fingerprint

    known = {benchmark.name: benchmark for benchmark in BENCHMARKS}
    chosen = only or list(known)
    for name in chosen:
        if name not in known:
            raise InputError(f"--only: {name!r} is not a benchmark (allowed: {', '.join(known)})")
    store = open_store(db, "bench")
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(fingerprint()),
        spec={"benchmarks": chosen},
        code_version=code_version(),
        model_id=None,
        preset="bench",
    )
    started = time.perf_counter()
    try:
        with run_lifecycle(store, run_id, started=started):
            for name in chosen:
                store.results.record_case(run_id, run_benchmark(known[name], store.url, log_to_stderr, timeout_seconds))
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        # A benchmark that failed or hung: the run is marked failed; one line here.
        raise InputError(str(error).strip().splitlines()[0]) from None
    from analysis.review_inputs import record_machine_drift

    record_machine_drift(store, run_id)
    typer.echo(f"bench run {run_id}: {len(chosen)} benchmarks in {time.perf_counter() - started:.0f} s")
