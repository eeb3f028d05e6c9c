"""How noisy the timing is on this machine: per experiment and impl, the spread of one timed
case's samples (largest minus smallest log value over its pairs: per-pair ratios A/B of a paired
timing, seconds of a min-of-N one), its median and 95th percentile over the group's cases in
the runs read, as a fraction.

    python benchmarks/timing_noise.py --db URL [--preset quick] [--runs 3,4]

Reads the newest two done runs of the preset (or the runs given) and prints
``timing_spread_median_<experiment>_<impl>=`` and ``timing_spread_p95_<experiment>_<impl>=``.
Where pair i of every run times its own seeded text (the speculative speedups), the per-pair
spread is mostly the texts' (acceptance varies with the text, the same way in every run), so it
also prints ``timing_spread_matched_median_…`` and ``…_p95_…``: each pair against the same pair
of the run before, what the review's matched test sees.
Targets on a quiet machine (issue 42): median ≤ 0.05 and p95 ≤ 0.15 for every group. A load
average does not show a shared host's own changes of speed, so it also prints, per run, how many
timed cases read the fixed reference loop (runner.measure.reference) 10% or more above the run's
quickest (``host_slow_cases_run_<id>=`` of ``host_timed_cases_run_<id>=``) and ``host_steady=``
(1 where every run read fewer than one case in ten slow, 0 where one did not; missing where a run
has too few readings to tell and none was unsteady): figures from a host that was not steady are
its changes of speed as much as the timing's own.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Hashable
from typing import Any

import pandas as pd

from analysis.review import DEFAULT_IMPL
from analysis.review_samples import pair_ratios, sample_statistic
from runner.measure.reference import REFERENCE_METRIC, steadiness_lines
from runner.metrics import has_seeded_pairs
from store import frames
from store.records import case_key
from store.store import Store

# How many runs are read when none is named.
NEWEST_RUNS = 2


# A run's timed measurements with their samples: (measurement record, its samples) each.
RunSamples = list[tuple[dict[Hashable, Any], pd.DataFrame]]


def read_runs(store: Store, run_ids: list[int]) -> dict[int, RunSamples]:
    """Each run's measurements that have samples, read once for both spreads."""
    read: dict[int, RunSamples] = {}
    for run_id in run_ids:
        measured = frames.measurements(store, run_id)
        samples = (
            pd.DataFrame() if measured.empty else frames.samples(store, [int(i) for i in measured["measurement_id"]])
        )
        by_id = {} if samples.empty else dict(tuple(samples.groupby("measurement_id")))
        read[run_id] = [
            (record, by_id[record["measurement_id"]])
            for record in measured.to_dict("records")
            if record["measurement_id"] in by_id
        ]
    return read


def spreads(runs: dict[int, RunSamples]) -> pd.DataFrame:
    """One row per timed measurement with two or more samples: experiment, impl, spread."""
    rows = []
    for measured in runs.values():
        for record, group in measured:
            values, _ = sample_statistic(group)
            logs = [math.log(value) for value in values if value > 0 and math.isfinite(value)]
            if len(logs) < 2:
                continue
            impl = str(record["params"].get("impl", DEFAULT_IMPL))
            rows.append({"experiment": record["experiment"], "impl": impl, "spread": max(logs) - min(logs)})
    return pd.DataFrame(rows, columns=["experiment", "impl", "spread"])


def matched_spreads(runs: dict[int, RunSamples]) -> pd.DataFrame:
    """For metrics whose pair i times the same seeded text in every run (a speculative speedup:
    runner.metrics.has_seeded_pairs), the spread of a case's per-pair ratios taken against the same
    pair of the run before (largest minus smallest log of run_i / earlier_i): what the timing
    adds once the texts' own spread, which repeats run after run, is set aside. Both runs' noise
    is in it, so it overstates one run's."""
    by_run: dict[int, dict[tuple[str, str, str], tuple[str, dict[int, float]]]] = {}
    for run_id, measured in runs.items():
        cases = {}
        for record, group in measured:
            ratios = pair_ratios(group) if has_seeded_pairs(record["metric"]) else None
            if ratios:
                impl = str(record["params"].get("impl", DEFAULT_IMPL))
                cases[(record["experiment"], record["metric"], case_key(record["params"]))] = (impl, ratios)
        by_run[run_id] = cases
    run_ids = list(runs)
    rows = []
    for earlier, later in zip(run_ids, run_ids[1:], strict=False):
        for key, (impl, ratios) in by_run[later].items():
            _, before = by_run[earlier].get(key, (impl, {}))
            logs = [math.log(ratios[pair] / before[pair]) for pair in ratios.keys() & before.keys()]
            if len(logs) >= 2:
                rows.append({"experiment": key[0], "impl": impl, "spread": max(logs) - min(logs)})
    return pd.DataFrame(rows, columns=["experiment", "impl", "spread"])


def chosen_runs(store: Store, preset: str, given: str | None) -> list[int]:
    runs = frames.runs(store)
    if given:
        try:
            wanted = [int(part) for part in given.split(",") if part.strip()]
        except ValueError:
            raise SystemExit(f"--runs: {given!r} is not a comma-separated list of run ids") from None
        unknown = sorted(set(wanted) - set(runs["run_id"].tolist()))
        if unknown or not wanted:
            raise SystemExit(f"--runs: no run {', '.join(map(str, unknown)) or 'given'} in the store")
        return wanted
    done = runs[(runs["status"] == "done") & (runs["preset"].fillna("custom") == preset)]
    return done.sort_values(["started_at", "run_id"])["run_id"].tail(NEWEST_RUNS).astype(int).tolist()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store's URL")
    parser.add_argument("--preset", default="quick", help="the preset whose newest two done runs are read")
    parser.add_argument("--runs", default=None, help="comma-separated run ids instead")
    arguments = parser.parse_args()
    store = Store(arguments.db)
    try:
        run_ids = chosen_runs(store, arguments.preset, arguments.runs)
        if not run_ids:
            print(f"--preset: no done {arguments.preset} run in the store", file=sys.stderr)
            return 2
        runs = read_runs(store, run_ids)
        table, matched = spreads(runs), matched_spreads(runs)
        readings = {run_id: store.results.metric_values(run_id, REFERENCE_METRIC) for run_id in run_ids}
    finally:
        store.close()
    print(f"timing_runs={','.join(map(str, run_ids))}")
    for (experiment, impl), group in table.groupby(["experiment", "impl"]):
        name = f"{experiment}_{impl}"
        print(f"timing_spread_median_{name}={group['spread'].median():.4g}")
        print(f"timing_spread_p95_{name}={group['spread'].quantile(0.95):.4g}")
        print(f"timing_cases_{name}={len(group)}")
    for (experiment, impl), group in matched.groupby(["experiment", "impl"]):
        name = f"{experiment}_{impl}"
        print(f"timing_spread_matched_median_{name}={group['spread'].median():.4g}")
        print(f"timing_spread_matched_p95_{name}={group['spread'].quantile(0.95):.4g}")
    print("\n".join(steadiness_lines(readings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
