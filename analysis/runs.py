"""Which runs are comparable and trusted: one rule for the review's baseline, its between-run
floors and the machine's drift figure (done, not tagged suspect, the same machine fingerprint,
and for a baseline the same preset: a launch that changed a preset is custom)."""

from __future__ import annotations

from typing import Any

import pandas as pd

SUSPECT, PINNED = "suspect", "baseline"


def tag_set(tags: Any) -> set[str]:
    """The tags of a runs-frame row (joined by ", ") as a set."""
    return {tag for tag in str(tags or "").split(", ") if tag}


def default_baseline(runs: pd.DataFrame, run_id: int) -> int | None:
    """The newest run pinned with the tag ``baseline``, else the previous done run, of the same
    preset on the same machine fingerprint, started before ``run_id``; suspect runs never."""
    if run_id not in set(runs["run_id"]):
        return None
    earlier = runs[runs["run_id"].isin(earlier_comparable_runs(runs, run_id))]
    same = earlier.sort_values(["started_at", "run_id"], ascending=False)
    pinned = same[same["tags"].map(lambda tags: PINNED in tag_set(tags))] if "tags" in same.columns else same.iloc[:0]
    chosen = pinned if not pinned.empty else same
    return None if chosen.empty else int(chosen["run_id"].iloc[0])


def earlier_comparable_runs(runs: pd.DataFrame, run_id: int) -> list[int]:
    """The runs a run's between-run floor is taken over: done, not suspect, of its preset on its
    machine fingerprint, started before it."""
    by_id = runs.set_index("run_id")
    run = by_id.loc[run_id]
    tags = runs["tags"].map(tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs), index=runs.index)
    chosen = runs[
        (runs["machine_fingerprint"] == run["machine_fingerprint"])
        & (runs["preset"].fillna("custom") == ("custom" if pd.isna(run["preset"]) else run["preset"]))
        & (runs["status"] == "done")
        & (runs["run_id"] != run_id)
        & (pd.to_datetime(runs["started_at"]) <= pd.to_datetime(run["started_at"]))
        & ~tags.map(lambda names: SUSPECT in names)
    ]
    return [int(value) for value in chosen["run_id"]]


def machine_runs_before(runs: pd.DataFrame, run_id: int) -> list[int]:
    """The done, not suspect runs of any preset on the run's machine fingerprint started before it:
    what the machine's drift figure is learned from."""
    run = runs.set_index("run_id").loc[run_id]
    tags = runs["tags"].map(tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs), index=runs.index)
    chosen = runs[
        (runs["machine_fingerprint"] == run["machine_fingerprint"])
        & (runs["status"] == "done")
        & (runs["run_id"] != run_id)
        & (pd.to_datetime(runs["started_at"]) < pd.to_datetime(run["started_at"]))
        & ~tags.map(lambda names: SUSPECT in names)
    ]
    return [int(value) for value in chosen["run_id"]]
