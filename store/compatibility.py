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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
