"""How runs recorded by older code are read: the one compatibility step of the store's read path
(store.frames.measurements and metric_across_runs, Results.measurements). A case's params come
back as today's code would have planned them: a parameter added after a run was recorded is
filled with the value that run in fact used. Nothing is rewritten in the store (an export or a
transfer keeps the params as recorded), and no reader downstream fills these again.

What older runs did, by the parameter they lack:

- ``impl``: cases recorded before impls existed ran ``static`` (the eager model with a
  preallocated cache).
- ``no_cache_impl`` (kv_cache timing and fit): before per-impl baselines, the no-cache side was
  always the eager (static) forward, whatever the impl: a compiled impl's measured_speedup there
  mixes the compiler's gain with the cache's. A filled row has ``no_cache_impl`` ≠ ``impl``,
  which today's planner never writes (dashboard.data.with_no_cache_path names such rows).
- ``temperature`` (speculative): cases recorded before temperatures were a dimension sampled at 1.
- ``schedule`` (speculative timed cases): recorded before schedules were a dimension, they drafted
  a fixed k every pass.

Metrics renamed since a run recorded them (the catalogue's ``old_names``, runner.metrics) are read
under their current names, so an old run's figure meets a new run's; the name the run used stays
beside it in ``recorded_metric``, where the pages and the review's warnings say so. A retired
name (the catalogue's RETIRED_METRICS, a figure that came to mislead) is dropped where its case
also recorded the replacement, and read as the replacement where it did not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runner.metrics import RENAMED_METRICS, RETIRED_METRICS

if TYPE_CHECKING:
    import pandas as pd

# (experiment, part) → the params today's planner always writes there, with the value a case
# recorded without one ran at.
FILLED: dict[tuple[str, str], dict[str, Any]] = {
    **{("kv_cache", part): {"impl": "static"} for part in ("equivalence", "aa", "width", "prefill")},
    **{("kv_cache", part): {"impl": "static", "no_cache_impl": "static"} for part in ("timing", "fit")},
    **{("overhead", part): {"impl": "static"} for part in ("point", "fit", "aa")},
    **{("speculative", part): {"impl": "static", "temperature": 1.0} for part in ("distribution", "aa", "choice")},
    ("speculative", "speculative"): {"impl": "static", "temperature": 1.0, "schedule": "fixed"},
    ("speculative", "accuracy"): {"impl": "static"},
}


def current_params(experiment: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every parameter its (experiment, part) gained since filled as the run ran;
    the params themselves when none is missing."""
    filled = FILLED.get((experiment, str(params.get("part", ""))))
    if not filled or filled.keys() <= params.keys():
        return dict(params)
    return {**filled, **params}


def current_metric(name: str) -> str:
    """The name today's catalogue gives a metric recorded as ``name`` (a retired name: its
    replacement, where the case recorded none; superseded says where it did)."""
    retired = RETIRED_METRICS.get(name)
    return retired.replacement if retired is not None else RENAMED_METRICS.get(name, name)


def superseded(cases: Sequence[Any], metrics: Sequence[str]) -> list[bool]:
    """Per (case, recorded metric) row, whether it is a retired name whose case also recorded its
    replacement: such a row is dropped on the read path."""
    recorded = set(zip(cases, metrics, strict=True))
    return [
        metric in RETIRED_METRICS and (case, RETIRED_METRICS[metric].replacement) in recorded
        for case, metric in zip(cases, metrics, strict=True)
    ]


def recorded_names(metric: str) -> list[str]:
    """Every name runs may have recorded ``metric`` under: its own, its old ones and the retired
    ones it replaces."""
    old_names = [old for old, new in RENAMED_METRICS.items() if new == metric]
    return [metric, *old_names, *(old for old, retired in RETIRED_METRICS.items() if retired.replacement == metric)]


def as_today(frame: pd.DataFrame) -> pd.DataFrame:
    """Measurement rows as today's code names them: each case's params filled (current_params)
    and each renamed metric under its current name, the recorded name kept in ``recorded_metric``;
    a retired metric's row dropped where its case recorded the replacement."""
    # Imported here: the store (Results) reads this module, and a command that only writes or
    # checks its input should not pay pandas' import (0.3 s) for a frame it never builds.
    import pandas as pd

    if frame.empty:
        return frame.assign(recorded_metric=pd.Series(dtype=object)) if "metric" in frame.columns else frame
    frame["params"] = pd.Series(
        [
            current_params(experiment, params)
            for experiment, params in zip(frame["experiment"], frame["params"], strict=True)
        ],
        index=frame.index,
        dtype=object,
    )
    if "metric" in frame.columns:
        dropped = superseded(list(frame["case_id"]), list(frame["metric"]))
        frame = frame[[not drop for drop in dropped]].reset_index(drop=True)
        frame["recorded_metric"] = frame["metric"]
        frame["metric"] = frame["metric"].map(current_metric)
    return frame


def renamed_in(frame: pd.DataFrame) -> dict[str, str]:
    """The old metric names ``frame`` (rows from as_today) was recorded under, each mapped to its
    current name."""
    if frame.empty or "recorded_metric" not in frame.columns:
        return {}
    renamed = frame[frame["recorded_metric"] != frame["metric"]]
    return dict(sorted(zip(renamed["recorded_metric"], renamed["metric"], strict=True)))
