"""How noisy the timing is on this machine: per experiment and impl, the spread of one timed
case's samples (largest minus smallest log value over its pairs: per-pair ratios A/B of a paired
timing, seconds of a min-of-N one), its median and 95th percentile over the group's cases in
the runs read, as a fraction.

    python benchmarks/timing_noise.py --db URL [--preset quick] [--runs 3,4]

Reads the newest two done runs of the preset (or the runs given) and prints
``timing_spread_median_<experiment>_<impl>=`` and ``timing_spread_p95_<experiment>_<impl>=``.
Targets on a quiet machine (issue 42): median ≤ 0.05 and p95 ≤ 0.15 for every group. Say the
load it ran under (``uptime``): figures from a busy machine are not the timing's own.
"""

from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from analysis.review import DEFAULT_IMPL, sample_statistic
from store import frames
from store.store import Store

# How many runs are read when none is named.
NEWEST_RUNS = 2


def spreads(store: Store, run_ids: list[int]) -> pd.DataFrame:
    """One row per timed measurement with two or more samples: experiment, impl, spread."""
    rows = []
    for run_id in run_ids:
        measured = frames.measurements(store, run_id)
        if measured.empty:
            continue
        samples = frames.samples(store, [int(ident) for ident in measured["measurement_id"]])
        if samples.empty:
            continue
        by_id = dict(tuple(samples.groupby("measurement_id")))
        for record in measured.to_dict("records"):
            group = by_id.get(record["measurement_id"])
            if group is None:
                continue
            values, _ = sample_statistic(group)
            logs = [math.log(value) for value in values if value > 0 and math.isfinite(value)]
            if len(logs) < 2:
                continue
            impl = str(record["params"].get("impl", DEFAULT_IMPL))
            rows.append({"experiment": record["experiment"], "impl": impl, "spread": max(logs) - min(logs)})
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
        table = spreads(store, run_ids)
    finally:
        store.close()
    print(f"timing_runs={','.join(map(str, run_ids))}")
    for (experiment, impl), group in table.groupby(["experiment", "impl"]):
        name = f"{experiment}_{impl}"
        print(f"timing_spread_median_{name}={group['spread'].median():.4g}")
        print(f"timing_spread_p95_{name}={group['spread'].quantile(0.95):.4g}")
        print(f"timing_cases_{name}={len(group)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
