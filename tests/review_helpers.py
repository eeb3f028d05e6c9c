"""A second run made from a real one through export and import, with its speculative decodes
deliberately slower: what a reviewer should see flagged as a regression. ``steady`` copies
replace every paired case's samples by its median seconds (an A/A case's two sides by one
median: the same decode) with a small seeded jitter: on a machine shared with other work a tiny
decode's pairs can vary by 100×, and a test of the verdict must not depend on how busy the
machine was when the session's run was made."""

from __future__ import annotations

import random
import statistics
import uuid
from datetime import datetime, timedelta
from typing import Any

from store.store import Store
from store.transfer import export_json_rows, import_rows

STEADY_JITTER = 0.002


def slowed_copy(
    store: Store, run_id: int, *, slower_by: float = 10.0, hours_later: float = 1.0, steady: bool = False
) -> int:
    """Import a copy of ``run_id`` (a new uid, started ``hours_later``) whose speculative side of
    every timed speculative pair took ``slower_by`` times as long; each speedup's median, min and
    max follow from the changed samples. Returns the new run's id."""
    rows = export_json_rows(store, run_id)
    uid = str(uuid.uuid4())
    shifted: dict[str, Any] = {}
    for row in rows:
        meta = dict(row["run"])
        started = datetime.fromisoformat(meta["started_at"]) + timedelta(hours=hours_later)
        meta.update(uid=uid, started_at=started.isoformat(), tags=[], note=None)
        if meta.get("finished_at"):
            meta["finished_at"] = (
                datetime.fromisoformat(meta["finished_at"]) + timedelta(hours=hours_later)
            ).isoformat()
        row["run"] = meta
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["params"], {})[row["metric"]] = row
    generator = random.Random(f"{run_id}-{hours_later}")
    for params, metrics in by_case.items():
        speedup = metrics.get("speedup_median")
        if row_part(params) not in ("speculative", "aa") or speedup is None or not speedup["samples"]:
            continue
        if steady:
            middle = {
                side: statistics.median(seconds for _, named, seconds in speedup["samples"] if named == side)
                for side in "AB"
            }
            if row_part(params) == "aa":
                # Both sides run the same decode: under load their medians can differ by 20% (the
                # side timed first waiting on a busy core), which would make the A/A floor, and so
                # every verdict of the copies, depend on how busy the machine was.
                middle = dict.fromkeys("AB", statistics.median(middle.values()))
            speedup["samples"] = [
                [pair, side, middle[side] * (1 + generator.uniform(-STEADY_JITTER, STEADY_JITTER))]
                for pair, side, _ in speedup["samples"]
            ]
        factor = slower_by if row_part(params) == "speculative" else 1.0
        speedup["samples"] = [
            [pair, side, seconds * factor if side == "B" else seconds] for pair, side, seconds in speedup["samples"]
        ]
        ratios = pair_ratios(speedup["samples"])
        speedup["value"] = statistics.median(ratios)
        metrics["speedup_min"]["value"], metrics["speedup_max"]["value"] = min(ratios), max(ratios)
        shifted[params] = speedup["value"]
    assert shifted, "the run holds no timed speculative case to slow down"
    [(_, new_run_id, _)] = import_rows(store, rows)
    return new_run_id


def row_part(params: str) -> str | None:
    import json

    return json.loads(params).get("part")


def pair_ratios(samples: list[list[Any]]) -> list[float]:
    sides: dict[int, dict[str, float]] = {}
    for pair, side, seconds in samples:
        sides.setdefault(int(pair), {})[side] = float(seconds)
    return [pair["A"] / pair["B"] for pair in sides.values()]


def reviewed_pair(store: Store, run_id: int = 1) -> tuple[int, int]:
    """(baseline, run): two steady copies of ``run_id``, the later one's speculative decodes 100
    times slower. The baseline is the run's default baseline (the previous done run)."""
    baseline = slowed_copy(store, run_id, slower_by=1.0, hours_later=0.5, steady=True)
    return baseline, slowed_copy(store, run_id, slower_by=100.0, hours_later=1.0, steady=True)
