"""The History page's headline series: the few numbers a team watches per machine over time,
read from every run, with every change point marked (analysis.statistics.change_points: PELT
from the ruptures library on the series standardised by its own run-to-run noise), each linked
to the review of its run against the run before it. Suspect runs are shown but never flagged,
nor counted in another run's series.

Plain functions of a Store (no Streamlit)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from analysis.review import SUSPECT, tag_set
from analysis.runs import comparable_keys, sweep_labels
from analysis.statistics import change_points as level_changes
from analysis.statistics import noise_sigma
from store import frames
from store.store import Store

# The length the write-ups quote the cache's received fraction at; the largest recorded one
# stands in (and says so) where a run did not time it.
HEADLINE_LENGTH = 256


@dataclass(frozen=True)
class Series:
    name: str
    unit: str
    method: str
    read: Callable[[Store], pd.DataFrame]  # run_id, impl, value (one row per run and impl)


def _param(frame: pd.DataFrame, key: str) -> pd.Series:
    return frame["params"].map(lambda params: params.get(key))


def _at_length(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows at n = HEADLINE_LENGTH, else each run's largest n, with ``n`` kept for the label."""
    if frame.empty:
        return frame
    frame = frame.assign(n=_param(frame, "n"))
    wanted = frame[frame["n"] == HEADLINE_LENGTH]
    others = frame[~frame["run_id"].isin(wanted["run_id"])]
    largest = others[others["n"] == others.groupby("run_id")["n"].transform("max")]
    return pd.concat([wanted, largest])


def _kv_timing(store: Store, metric: str) -> pd.DataFrame:
    frame = frames.metric_across_runs(store, "kv_cache", metric)
    if frame.empty:
        return frame
    frame = frame[_param(frame, "part") == "timing"]
    return _at_length(frame.assign(impl=_param(frame, "impl")))


def received_fraction(store: Store) -> pd.DataFrame:
    frame = _kv_timing(store, "received_fraction")
    if frame.empty:
        return frame
    return frame.assign(impl=frame["impl"] + " · n=" + frame["n"].astype(int).astype(str))


def fast_microseconds_per_token(store: Store) -> pd.DataFrame:
    frame = _kv_timing(store, "seconds_per_token_cache")
    if frame.empty:
        return frame
    frame = frame[frame["impl"] == "fast"]
    return frame.assign(value=frame["value"] * 1e6, impl="fast · n=" + frame["n"].astype(int).astype(str))


def best_speculative_speedup(store: Store) -> pd.DataFrame:
    frame = frames.metric_across_runs(store, "speculative", "speedup_median")
    if frame.empty:
        return frame
    frame = frame[_param(frame, "part") == "speculative"]
    frame = frame.assign(impl=_param(frame, "impl"))
    return frame.loc[frame.groupby(["run_id", "impl"])["value"].idxmax()]


def int8_loss_increase(store: Store) -> pd.DataFrame:
    frame = frames.metric_across_runs(store, "quantization", "loss_increase")
    if frame.empty:
        return frame
    frame = frame[(_param(frame, "precision") == "int8") & (_param(frame, "kernel") == "fake")]
    return frame.assign(impl="int8 · fake-quantized")


def quick_wall_seconds(store: Store) -> pd.DataFrame:
    """Each done quick run's time in two lines: the sweep's own (started_at to finished_at, what
    the progress bar timed) and the training or loading of its model before it (the rest of the
    command's wall time): a run that trained its model is not a slower sweep."""
    runs = frames.runs(store, status="done")
    runs = runs[(runs["preset"] == "quick") & runs["wall_seconds"].notna() & runs["finished_at"].notna()]
    sweep = (pd.to_datetime(runs["finished_at"]) - pd.to_datetime(runs["started_at"])).dt.total_seconds()
    before = (runs["wall_seconds"].astype(float) - sweep).clip(lower=0.0)
    return pd.concat(
        [
            pd.DataFrame({"run_id": runs["run_id"], "value": sweep, "impl": "sweep"}),
            pd.DataFrame({"run_id": runs["run_id"], "value": before, "impl": "training or loading"}),
        ],
        ignore_index=True,
    )


SERIES = (
    Series(
        "received fraction of the arithmetic promise",
        "ratio",
        "KV cache, same-impl measured speedup over the dense arithmetic ratio, at n = 256",
        received_fraction,
    ),
    Series(
        "best speculative speedup",
        "ratio",
        "speculative decoding, the best paired median over drafts and k, per target impl",
        best_speculative_speedup,
    ),
    Series(
        "fast µs per token",
        "microseconds",
        "KV cache timing, fast impl, cached decode, median microseconds per token at n = 256",
        fast_microseconds_per_token,
    ),
    Series(
        "int8 loss increase",
        "nats",
        "quantization, int8 per channel (fake-quantized), held-out loss minus float32",
        int8_loss_increase,
    ),
    Series(
        "quick-sweep wall time",
        "seconds",
        "done runs of the quick preset: the sweep's own time and, apart, the model's training or loading before it",
        quick_wall_seconds,
    ),
)


RUN_COLUMNS = ["run_id", "started_at", "machine", "machine_fingerprint", "tags"]


# The band drawn around each level: its median ± BAND_SIGMAS run-to-run noise.
BAND_SIGMAS = 3.0


def mark_levels(group: pd.DataFrame) -> pd.DataFrame:
    """One series (oldest first) with ``change_point`` where a new level starts, each level's
    ``median`` and its band ``low``–``high``, and ``previous_run`` (the run before each)."""
    values = group["value"].astype(float).tolist()
    starts = level_changes(values)
    sigma = noise_sigma(values)
    level = [sum(index >= start for start in starts) for index in range(len(values))]
    medians = group["value"].astype(float).groupby(level, sort=False).transform("median").tolist()
    return group.assign(
        change_point=[index in starts for index in range(len(values))],
        median=medians,
        low=[median - BAND_SIGMAS * sigma for median in medians],
        high=[median + BAND_SIGMAS * sigma for median in medians],
        previous_run=group["run_id"].shift(1),
    )


def change_points(values: pd.DataFrame, runs: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """``values`` (run_id, value, and the columns in ``by``) with each run's time, machine and
    tags, ``suspect``, the columns of ``mark_levels`` per machine fingerprint, sweep (a preset, or
    one custom spec) and ``by`` over the runs not tagged suspect, and a ``review`` link: a change
    point's against the run before it, any other run's against its default baseline."""
    if values.empty:
        return pd.DataFrame()
    own = values.drop(columns=[column for column in RUN_COLUMNS[1:] if column in values.columns])
    # One series per sweep as well: a launch that changed a preset never joins the preset's line.
    runs = runs.assign(sweep=sweep_labels(runs), sweep_key=comparable_keys(runs))
    frame = own.merge(runs[[*RUN_COLUMNS, "sweep", "sweep_key"]], on="run_id")
    frame["suspect"] = frame["tags"].map(lambda tags: SUSPECT in tag_set(tags))
    frame["started_at"] = pd.to_datetime(frame["started_at"])
    pieces: list[pd.DataFrame] = []
    for _, group in frame.sort_values(["started_at", "run_id"]).groupby(["machine_fingerprint", "sweep_key", *by]):
        trusted = mark_levels(group[~group["suspect"]])
        suspect = group[group["suspect"]].assign(
            median=float("nan"), low=float("nan"), high=float("nan"), change_point=False, previous_run=float("nan")
        )
        pieces.extend(piece for piece in (trusted, suspect) if not piece.empty)
    history: pd.DataFrame = pd.concat(pieces, ignore_index=True).sort_values("started_at")
    history["review"] = [
        f"review?run={run}" + (f"&baseline={int(previous)}" if changed and pd.notna(previous) else "")
        for run, previous, changed in zip(
            history["run_id"], history["previous_run"], history["change_point"], strict=True
        )
    ]
    return history.reset_index(drop=True)


def series_history(store: Store, series: Series) -> pd.DataFrame:
    """One headline series over every run, its change points per machine, sweep and impl, and a
    ``series`` label (machine · sweep · impl) to draw each line by. Only finished (done) runs: a
    run still measuring has no final figure yet."""
    values = series.read(store)
    if values.empty:  # a store whose runs never recorded it (kv_cache runs only: no speculative column)
        return pd.DataFrame()
    history = change_points(values[["run_id", "impl", "value"]], frames.runs(store, status="done"), by=("impl",))
    if history.empty:
        return history
    return history.assign(series=history["machine"] + " · " + history["sweep"] + " · " + history["impl"])
