"""The machine's own speed while a case is timed: a fixed pure-Python loop, read before the first
sample of each of the harness's timings and after every sample (or round), and stored with the
case (``reference_loop_seconds``, the median of its readings).

A shared host runs at two speeds for seconds at a time. On the 2-core Xeon VM (family 6 model
207, no BF16 or AMX) fresh processes a few seconds apart ran a longer pure-Python loop in 13.0-13.6
ms or in 16.8-19.1 ms, the project's eager decoding of a 16-wide model 41-53% slower with it, the fast
kernel 0-20% (docs/review-measurements.md, nineteenth session), and one min-of-N point of a quick
run can fall wholly inside such a stretch. Nothing in the case's own samples tells that, and the
loop's code never changes with the project's, so a review compares the loop's readings of one
case in two runs (analysis.review_host.case_phases) to tell the host's speed from the code's.

Standard library only: the review imports the metric's name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

REFERENCE_METRIC = "reference_loop_seconds"
# A reading costs about 1.1 ms on the Xeon VM (each run of the loop 0.55-0.9 ms), one after each
# sample of 0.05 s or more: some 2% of a timing. A reading is the least of REFERENCE_REPEATS runs,
# so that one interrupt does not read as a slow machine.
REFERENCE_ITERATIONS = 10_000
REFERENCE_REPEATS = 2
# A case whose median reading is this far above the run's quickest was timed while the machine ran
# slower; a run with one such case in ten or more says so as it ends (``speed_line``).
SLOW_READING = 1.10
SLOW_SHARE = 0.1
MIN_CASES = 10


def reference_loop() -> int:
    """Integer arithmetic in the interpreter: the work of no library, compiled or not."""
    total = 0
    for index in range(REFERENCE_ITERATIONS):
        total += index * index % 7
    return total


def reference_seconds(clock: Callable[[], float] = time.perf_counter) -> float:
    """One reading: the least of REFERENCE_REPEATS timed runs of ``reference_loop`` (the harness
    takes it with the collector off, as a sample)."""
    best = float("inf")
    for _ in range(REFERENCE_REPEATS):
        start = clock()
        reference_loop()
        best = min(best, clock() - start)
    return best


def slow_cases(readings: Sequence[float]) -> int:
    """How many of a run's timed cases (each's median reading) read SLOW_READING of the run's
    quickest or above."""
    if not readings:
        return 0
    quickest = min(readings)
    return sum(reading >= SLOW_READING * quickest for reading in readings)


def steady(readings: Sequence[float]) -> bool | None:
    """Whether the machine kept one speed through a run: fewer than one case in ten (SLOW_SHARE)
    read slow; None with fewer than MIN_CASES cases, too few to say."""
    if len(readings) < MIN_CASES:
        return None
    return slow_cases(readings) < SLOW_SHARE * len(readings)


def speed_line(readings: Sequence[float]) -> str | None:
    """The run's line on the machine's speed, from each timed case's median reading: where the run
    was not steady, the range and the count; None on a steady machine or with fewer than MIN_CASES
    cases."""
    if steady(readings) is not False:
        return None
    quickest, slow = min(readings), slow_cases(readings)
    return (
        f"the machine ran at more than one speed during the run: a fixed reference loop read between samples took "
        f"{quickest * 1e3:.2f}–{max(readings) * 1e3:.2f} ms, {slow} of {len(readings)} timed cases "
        f"{SLOW_READING - 1:.0%} or more above the quickest; a review widens the floors of the cases that read "
        "differently in its baseline (docs/review.md)"
    )


def steadiness_lines(readings: Mapping[int, Sequence[float]]) -> list[str]:
    """For benchmarks that read runs (benchmarks/timing_noise.py): per run its timed cases and how
    many read slow (``host_timed_cases_run_<id>=``, ``host_slow_cases_run_<id>=``), then
    ``host_steady=`` (0 where some run was not ``steady``, 1 where every run was, missing where a run
    has too few readings to tell and none was unsteady) and sentences saying what that means."""
    lines, unsteady, unknown = [], [], []
    for run_id, values in readings.items():
        lines += [f"host_timed_cases_run_{run_id}={len(values)}", f"host_slow_cases_run_{run_id}={slow_cases(values)}"]
        verdict = steady(values)
        if verdict is None:
            unknown.append(str(run_id))
        elif not verdict:
            unsteady.append(f"{slow_cases(values)} of {len(values)} in run {run_id}")
    if unsteady or not unknown:
        lines.append(f"host_steady={0 if unsteady else 1}")
    if unsteady:
        lines.append(
            f"the host was not steady: timed cases read the reference loop {SLOW_READING - 1:.0%} or more above "
            f"their run's quickest ({', '.join(unsteady)}), so these spreads are the host's changes of speed as "
            "much as the timing's own"
        )
    if unknown:
        lines.append(
            f"too few reference readings to tell the host's speed in run {', '.join(unknown)} "
            f"(fewer than {MIN_CASES} timed cases read it)"
        )
    return lines
