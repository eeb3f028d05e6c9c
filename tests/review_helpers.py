"""A second run made from a real one through export and import, with its speculative decodes
deliberately slower: what a reviewer should see flagged as a regression."""

from __future__ import annotations

import statistics
import uuid
from datetime import datetime, timedelta
from typing import Any

from store.store import Store
from store.transfer import export_json_rows, import_rows


def slowed_copy(store: Store, run_id: int, *, slower_by: float = 10.0, hours_later: float = 1.0) -> int:
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
    for params, metrics in by_case.items():
        speedup = metrics.get("speedup_median")
        if row_part(params) != "speculative" or speedup is None or not speedup["samples"]:
            continue
        speedup["samples"] = [
            [pair, side, seconds * slower_by if side == "B" else seconds] for pair, side, seconds in speedup["samples"]
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
