"""Which runs are comparable and trusted: one rule for the review's baseline, its between-run
floors and the machine's drift figure (done, not tagged suspect, the same machine fingerprint,
and for a baseline the same preset unchanged or the very same spec: a launch that changed a
preset is custom), and what a run ran in a few words ("quick, kv_cache only")."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from store.records import comparable_key, ran_spec

SUSPECT, PINNED = "suspect", "baseline"
# The tag both runs of an A/B session carry (runner.ab.run): ab:<baseline run>-<candidate run>.
AB_TAG = re.compile(r"ab:(\d+)-(\d+)")
# A subset of a preset's experiments is named in full up to this many ("kv_cache and overhead only").
NAMED_EXPERIMENTS = 2


@functools.cache
def preset_spec(name: str) -> dict[str, Any] | None:
    """A preset's spec as a run stores it (None: no such preset)."""
    from runner.spec.sweeps import PRESETS, load_preset

    return load_preset(name).raw if name in PRESETS else None


def sweep_label(preset: Any, spec: Any) -> str:
    """What a run ran, in a few words: its preset's name for the preset unchanged; for a custom
    launch, the preset it started from and what it changed ("quick, kv_cache only", "quick,
    changed lengths"), from its stored spec set beside the preset's; else "custom"."""
    if isinstance(preset, str) and preset:
        return preset
    if not isinstance(spec, Mapping):
        return "custom"
    origin = spec.get("name")
    base = preset_spec(origin) if isinstance(origin, str) else None
    if base is None:  # a spec file of its own: "custom", as the CLI's --preset custom names them
        return "custom"
    ran = ran_spec(spec)
    experiments: Mapping[str, Any] = ran.get("experiments") or {}
    kept = [name for name in base["experiments"] if name in experiments]
    parts: list[str] = []
    if len(kept) < len(base["experiments"]):
        if not kept:
            parts.append("no experiment of its own")
        elif len(kept) <= NAMED_EXPERIMENTS:
            parts.append(f"{' and '.join(kept)} only")
        else:
            parts.append(f"{len(kept)} of {len(base['experiments'])} experiments")
    added = [name for name in experiments if name not in base["experiments"]]
    if added:
        parts.append(f"plus {', '.join(added)}")
    changed: list[str] = []
    for name in kept:
        ours, theirs = experiments[name], base["experiments"][name]
        changed += [key for key in {**theirs, **ours} if ours.get(key) != theirs.get(key)]
    for section, value in ran.items():
        if section in ("experiments", "name", "description", "max_hours"):  # a launch cap, not what ran
            continue
        theirs = base.get(section)
        if isinstance(value, Mapping) and isinstance(theirs, Mapping):
            changed += [key for key in {**theirs, **value} if value.get(key) != theirs.get(key)]
        elif value != theirs:
            changed.append(section)
    if changed:
        parts.append(f"changed {', '.join(dict.fromkeys(changed))}")
    return f"{origin}, {', '.join(parts)}" if parts else f"{origin} (as a spec file)"


def comparable_keys(runs: pd.DataFrame) -> pd.Series:
    """``comparable_key`` of every row of a runs frame (a frame without specs: by preset alone)."""
    presets, specs = _column(runs, "preset"), _column(runs, "spec")
    return pd.Series(
        [comparable_key(preset, spec) for preset, spec in zip(presets, specs, strict=True)], index=runs.index
    )


def job_label(job: Mapping[Any, Any]) -> str:
    """A job as the sidebar lists it, named as History names its run: ``job 2 · quick, kv_cache
    only · running`` (a custom launch by what it changed, never "nan")."""
    return f"job {job['job_id']} · {sweep_label(job.get('preset'), job.get('spec'))} · {job['status']}"


def sweep_labels(runs: pd.DataFrame) -> pd.Series:
    """``sweep_label`` of every row of a runs frame."""
    presets, specs = _column(runs, "preset"), _column(runs, "spec")
    return pd.Series([sweep_label(preset, spec) for preset, spec in zip(presets, specs, strict=True)], index=runs.index)


def _column(runs: pd.DataFrame, name: str) -> pd.Series:
    return runs[name] if name in runs.columns else pd.Series([None] * len(runs), index=runs.index)


def tag_set(tags: Any) -> set[str]:
    """The tags of a runs-frame row (joined by ", ") as a set."""
    return {tag for tag in str(tags or "").split(", ") if tag}


def ab_pair(tags: Any) -> tuple[int, int] | None:
    """(baseline run, candidate run) of the A/B session a run belongs to, from its tags; None
    for a run of no A/B session."""
    for tag in tag_set(tags):
        found = AB_TAG.fullmatch(tag)
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def interleaved_pair(runs: pd.DataFrame, run_id: int, baseline_id: int) -> bool:
    """Whether ``baseline_id`` and ``run_id`` are the baseline and candidate of one A/B session:
    measured interleaved on one machine, so no drift between runs separates them."""
    if "tags" not in runs.columns:
        return False
    tags = runs.set_index("run_id")["tags"]
    if run_id not in tags.index or baseline_id not in tags.index:
        return False
    pair = ab_pair(tags.loc[run_id])
    return pair == (baseline_id, run_id) and ab_pair(tags.loc[baseline_id]) == pair


def _ab_runs(runs: pd.DataFrame) -> pd.Series:
    """Which rows are runs of an A/B session: never another run's baseline or drift, since their
    timings were taken beside another revision's."""
    if "tags" not in runs.columns:
        return pd.Series([False] * len(runs), index=runs.index)
    return runs["tags"].map(lambda tags: ab_pair(tags) is not None)


def default_review_run(runs: pd.DataFrame) -> int | None:
    """The run a review opens on: the newest done run with a default baseline (a done run of the
    same spec and preset on its machine before it), so it opens on like against like, never on
    a run still measuring; else None."""
    done = runs[runs["status"] == "done"]
    for run_id in done.sort_values(["started_at", "run_id"], ascending=False)["run_id"]:
        if default_baseline(runs, int(run_id)) is not None:
            return int(run_id)
    return None


def same_sweep_runs(runs: pd.DataFrame, run_id: int) -> list[int]:
    """The other runs of ``run_id``'s spec and preset on any machine, newest first: the baseline
    a review falls back to where its machine has no earlier one."""
    keys = comparable_keys(runs)
    own = keys[runs["run_id"] == run_id]
    if own.empty:
        return []
    same = runs[(keys == own.iloc[0]) & (runs["run_id"] != run_id)]
    return [int(value) for value in same.sort_values(["started_at", "run_id"], ascending=False)["run_id"]]


def default_baseline(runs: pd.DataFrame, run_id: int) -> int | None:
    """The candidate of an A/B session: its session's baseline. Else the newest run pinned with
    the tag ``baseline``, else the previous done run, of the same preset on the same machine
    fingerprint, started before ``run_id``; suspect runs and A/B runs never."""
    if run_id not in set(runs["run_id"]):
        return None
    if "tags" in runs.columns:
        pair = ab_pair(runs.set_index("run_id")["tags"].loc[run_id])
        if pair is not None and pair[1] == run_id and interleaved_pair(runs, run_id, pair[0]):
            return pair[0]
    earlier = runs[runs["run_id"].isin(earlier_comparable_runs(runs, run_id))]
    same = earlier.sort_values(["started_at", "run_id"], ascending=False)
    pinned = same[same["tags"].map(lambda tags: PINNED in tag_set(tags))] if "tags" in same.columns else same.iloc[:0]
    chosen = pinned if not pinned.empty else same
    return None if chosen.empty else int(chosen["run_id"].iloc[0])


def later_baseline(runs: pd.DataFrame, run_id: int, baseline_id: int) -> str | None:
    """Where ``baseline_id`` started after ``run_id`` (a store's first run has no earlier one to be
    reviewed against), what the verdicts then mean, in words; None otherwise."""
    if "started_at" not in runs.columns:
        return None
    by_id = runs.set_index("run_id")
    if run_id not in by_id.index or baseline_id not in by_id.index:
        return None
    started = by_id["started_at"]
    return baseline_after(run_id, started[run_id], baseline_id, started[baseline_id])


def baseline_after(run_id: int, run_started: Any, baseline_id: int, baseline_started: Any) -> str | None:
    """``later_baseline`` from the two runs' start times (either unknown: None), for the reports,
    which hold the two runs' records rather than the store's runs."""
    run_time, baseline_time = pd.to_datetime(run_started), pd.to_datetime(baseline_started)
    if pd.isna(run_time) or pd.isna(baseline_time) or baseline_time <= run_time:
        return None
    return (
        f"The baseline, run {baseline_id}, ran after run {run_id}: the verdicts read the older run against the "
        f"newer, so regressed means run {run_id} did worse than run {baseline_id}."
    )


def earlier_comparable_runs(runs: pd.DataFrame, run_id: int) -> list[int]:
    """The runs a run's between-run floor is taken over: done, not suspect, of no A/B session, of
    its preset (a custom run: of its very spec) on its machine fingerprint, started before it."""
    by_id = runs.set_index("run_id")
    run = by_id.loc[run_id]
    tags = runs["tags"].map(tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs), index=runs.index)
    keys = comparable_keys(runs)
    chosen = runs[
        (runs["machine_fingerprint"] == run["machine_fingerprint"])
        & (keys == keys[runs["run_id"] == run_id].iloc[0])
        & (runs["status"] == "done")
        & (runs["run_id"] != run_id)
        & (pd.to_datetime(runs["started_at"]) <= pd.to_datetime(run["started_at"]))
        & ~tags.map(lambda names: SUSPECT in names)
        & ~_ab_runs(runs)
    ]
    return [int(value) for value in chosen["run_id"]]


def machine_runs_before(runs: pd.DataFrame, run_id: int) -> list[int]:
    """The done, not suspect runs of any preset and of no A/B session on the run's machine
    fingerprint started before it: what the machine's drift figure is learned from."""
    run = runs.set_index("run_id").loc[run_id]
    tags = runs["tags"].map(tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs), index=runs.index)
    chosen = runs[
        (runs["machine_fingerprint"] == run["machine_fingerprint"])
        & (runs["status"] == "done")
        & (runs["run_id"] != run_id)
        & (pd.to_datetime(runs["started_at"]) < pd.to_datetime(run["started_at"]))
        & ~tags.map(lambda names: SUSPECT in names)
        & ~_ab_runs(runs)
    ]
    return [int(value) for value in chosen["run_id"]]
