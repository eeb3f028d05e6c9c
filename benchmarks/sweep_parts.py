"""What each part of a sweep costs: the seconds between a case's record and the one before it (the
run's start for the first case), summed per experiment · part · impl, for runs side by side.

    python benchmarks/sweep_parts.py --db URL [--runs A,B,...]

Prints ``sweep_seconds_<run>_<experiment>[_<part>][_<impl>]=`` per group and run, then each run's
``sweep_seconds_<run>_total=`` (the cases' time, without training or loading the model), and a
table with a column per run. The runs default to the store's newest two done ones. A case's
record closes it, so a gap also holds what ran between two cases (building a draft, say): it is
charged to the case after it, as the runner's estimate charges it (runner.spec.calibrated_estimate.case_gaps).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from sqlalchemy import select

from runner.spec.calibrated_estimate import case_gaps
from store.schema import Case, Run
from store.store import Store


def part_seconds(store: Store, run_id: int) -> dict[str, float]:
    """Seconds per ``experiment[ · part][ · impl]`` of one run, in the order the run reached them."""
    with store.read() as session:
        found = session.execute(select(Run.started_at, Run.finished_at).where(Run.id == run_id)).one_or_none()
        if found is None:
            raise ValueError(f"--runs: no run {run_id} in the store")
        started, finished = found
        rows = session.execute(
            select(Case.experiment, Case.params, Case.created_at)
            .where(Case.run_id == run_id)
            .order_by(Case.created_at, Case.id)
        ).all()
    seconds: dict[str, float] = defaultdict(float)
    for (experiment, params, _), gap in zip(rows, case_gaps(started, [row.created_at for row in rows]), strict=True):
        key = " · ".join(str(name) for name in (experiment, params.get("part"), params.get("impl")) if name)
        seconds[key] += gap
    if finished is None or (rows and not started <= rows[-1].created_at <= finished):
        # An imported run's cases are recorded at import time: their gaps say nothing of the run.
        raise ValueError(f"--runs: run {run_id}'s cases were not recorded while it ran (unfinished or imported)")
    return dict(seconds)


def newest_done(store: Store, count: int) -> list[int]:
    with store.read() as session:
        found = session.execute(
            select(Run.id).where(Run.status == "done").order_by(Run.started_at.desc(), Run.id.desc()).limit(count)
        ).scalars()
        return sorted(int(run_id) for run_id in found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store's URL")
    parser.add_argument("--runs", default=None, help="run ids, comma-separated (default: the newest two done)")
    arguments = parser.parse_args()
    store = Store(arguments.db)
    try:
        try:
            run_ids = [int(text) for text in arguments.runs.split(",")] if arguments.runs else newest_done(store, 2)
        except ValueError:
            print(f"--runs: {arguments.runs!r} (allowed: run ids separated by commas)", file=sys.stderr)
            return 2
        try:
            parts = {run_id: part_seconds(store, run_id) for run_id in run_ids}
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
    finally:
        store.close()
    if not run_ids:
        print("--runs: the store holds no done run", file=sys.stderr)
        return 2
    names = list(dict.fromkeys(name for seconds in parts.values() for name in seconds))
    for run_id, seconds in parts.items():
        for name in names:
            figure = name.replace(" · ", "_").replace(" ", "_")
            print(f"sweep_seconds_{run_id}_{figure}={seconds.get(name, 0.0):.2f}")
        print(f"sweep_seconds_{run_id}_total={sum(seconds.values()):.2f}")
    width = max(len(name) for name in names) if names else 10
    print(f"{'part':<{width}}" + "".join(f"{'run ' + str(run_id):>10}" for run_id in run_ids))
    for name in [*names, "total"]:
        values = [sum(seconds.values()) if name == "total" else seconds.get(name, 0.0) for seconds in parts.values()]
        print(f"{name:<{width}}" + "".join(f"{value:>10.1f}" for value in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
