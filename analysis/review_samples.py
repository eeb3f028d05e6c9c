"""What a timed measurement's raw samples say, and by which method: per-pair ratios A/B of a
paired measurement, the seconds of a min-of-N one, one value per round of an A/B session's
(`decodelab ab`), and the method's name the review's explanation carries. Plain functions of
store.frames.samples frames, used by analysis.review's tests of timed rows."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

ROUND_METHOD = ", per round"
# Both sides' rounds paired round by round (an A/B session's: round i of each side ran together).
MATCHED_METHOD = ", per round, matched"
# Both runs' pairs paired pair by pair: a metric whose pair i times the same seeded text in every
# run (runner.metrics.has_seeded_pairs), so the spread between the texts cancels.
SEEDED_METHOD = ", per pair, matched by seed"


def is_matched(method: str) -> bool:
    """Whether a method's values pair one to one across the two runs (the paired t test)."""
    return method.endswith((MATCHED_METHOD, SEEDED_METHOD))


def round_values(samples: pd.DataFrame) -> tuple[dict[int, float], str]:
    """Round index → the geometric mean of the round's values (``sample_statistic`` of its
    samples), and the method of those values."""
    per_round: dict[int, float] = {}
    method = "paired"
    for key, in_round in samples.groupby("round_index", sort=True):
        round_index: Any = key  # a number: the column holds round indexes only
        values, method = sample_statistic(in_round.drop(columns="round_index"))
        if logs := log_values(values):
            per_round[int(round_index)] = math.exp(statistics.fmean(logs))
    return per_round, method


def rounds_of(samples: pd.DataFrame) -> tuple[dict[int, float], str] | None:
    """``round_values`` of samples that all carry their round (an A/B session's), else None."""
    if samples.empty or "round_index" not in samples or not samples["round_index"].notna().all():
        return None
    return round_values(samples)


def per_round_statistic(rounds: tuple[dict[int, float], str]) -> tuple[list[float], str]:
    """``sample_statistic`` of an A/B session's samples, from their ``round_values``."""
    per_round, method = rounds
    return list(per_round.values()), method + ROUND_METHOD


def side_statistic(samples: pd.DataFrame, rounds: tuple[dict[int, float], str] | None) -> tuple[list[float], str]:
    """``sample_statistic`` of ``samples`` whose ``rounds_of`` is already known."""
    if rounds is not None:
        return per_round_statistic(rounds)
    return ([], "paired") if samples.empty else pairs_statistic(samples)


def sample_statistic(samples: pd.DataFrame) -> tuple[list[float], str]:
    """What a timed measurement's samples say, and by which method: per-pair ratios A/B for a
    paired measurement (sides A and B, method ``paired``), the raw seconds for a min-of-N one
    (side A only, method ``min``). Samples of an A/B session's rounds (``round_index`` set) give
    one value per round instead, the geometric mean of the round's: a round's pairs share its
    worker processes, whose own speed moves them together, so the rounds are the independent
    units (method ``paired, per round`` or ``min, per round``)."""
    if samples.empty:
        return [], "paired"
    if (rounds := rounds_of(samples)) is not None:
        return per_round_statistic(rounds)
    return pairs_statistic(samples)


def pairs_statistic(samples: pd.DataFrame) -> tuple[list[float], str]:
    """``sample_statistic`` of samples of no A/B session's rounds: their per-pair ratios, or their
    seconds."""
    ratios = pair_ratios(samples)
    if ratios is not None:
        return list(ratios.values()), "paired"
    return [float(value) for value in samples["seconds"]], "min"


def pair_ratios(samples: pd.DataFrame) -> dict[int, float] | None:
    """Pair index → the pair's ratio A/B, in pair order, for a paired measurement's samples (sides A
    and B); None for a min-of-N one (side A only)."""
    # The first non-missing seconds of each side and pair, as pandas' pivot_table(aggfunc="first")
    # gives them, in plain Python: a review calls this for every timed row of every pair of runs it
    # compares, and a pivot table each time made the calibration the slowest part of a report.
    first: dict[str, dict[int, float]] = {}
    for pair_index, side, seconds in zip(samples["pair_index"], samples["side"], samples["seconds"], strict=True):
        if not (pd.isna(pair_index) or pd.isna(seconds)):
            first.setdefault(side, {}).setdefault(int(pair_index), float(seconds))
    if "A" not in first or "B" not in first:
        return None
    return {pair: first["A"][pair] / first["B"][pair] for pair in sorted(first["A"].keys() & first["B"].keys())}


def log_values(values: Sequence[float]) -> list[float]:
    """The timed values on a log scale (a ratio's halving and doubling are the same distance)."""
    return [math.log(value) for value in values if value > 0 and math.isfinite(value)]


def both_sides(
    run_frame: pd.DataFrame, base_frame: pd.DataFrame, seeded_pairs: bool
) -> tuple[list[float], list[float], str]:
    """The values a timed row's test compares, the run's and the baseline's, and their method:
    each side's rounds where both are one A/B session's (matched round by round), each side's pairs
    where only one is, pairs matched by their seeded text where ``seeded_pairs`` (the metric's pair
    i times the same text in every run: runner.metrics.has_seeded_pairs), else each side's own
    statistic."""
    # Each side's rounds worked out once (an A/B session's samples carry them; None otherwise).
    run_rounds, base_rounds = rounds_of(run_frame), rounds_of(base_frame)
    if (run_rounds is None) != (base_rounds is None) and not (run_frame.empty or base_frame.empty):
        # An A/B session's run against a run of no session (an explicit baseline): both sides by
        # their pairs, so that the test compares like with like.
        run_samples, method = sample_statistic(run_frame.drop(columns="round_index", errors="ignore"))
        base_samples, _ = sample_statistic(base_frame.drop(columns="round_index", errors="ignore"))
    else:
        run_samples, method = side_statistic(run_frame, run_rounds)
        base_samples, base_method = side_statistic(base_frame, base_rounds)
        if (
            run_rounds is not None
            and base_rounds is not None
            and base_method == method
            and run_rounds[0].keys() == base_rounds[0].keys()
        ):
            # The two runs of one A/B session: round i of each ran together, side by side in time,
            # so the test pairs them and what the round shared (the machine's phase) cancels.
            run_samples = [run_rounds[0][index] for index in sorted(run_rounds[0])]
            base_samples = [base_rounds[0][index] for index in sorted(run_rounds[0])]
            method = method.removesuffix(ROUND_METHOD) + MATCHED_METHOD
        elif run_rounds is None and base_rounds is None and method == base_method == "paired" and seeded_pairs:
            # Pair i of each run generated the same seeded text: the test pairs them, so what the
            # text does to the ratio (speculative acceptance varies with it) cancels.
            run_pairs, base_pairs = pair_ratios(run_frame), pair_ratios(base_frame)
            if run_pairs and base_pairs and run_pairs.keys() == base_pairs.keys():
                run_samples, base_samples = list(run_pairs.values()), list(base_pairs.values())
                # A ratio without a log (a zero time) leaves its pair unmatched: both runs by their pairs.
                if len(log_values(run_samples + base_samples)) == len(run_samples) + len(base_samples):
                    method += SEEDED_METHOD
    return run_samples, base_samples, method


# both_sides' answer: the run's values, the baseline's, their method.
Sides = tuple[list[float], list[float], str]
# A measurement without samples (one object, so that the memo recognizes it).
EMPTY = pd.DataFrame()


@dataclass
class SidesMemo:
    """``both_sides`` answers kept across reviews of the same samples: the calibration judges one
    pair of runs' samples hundreds of times, each time with a few measurements slowed, and working
    the answers out from the sample frames again was most of a report's time. ``base``: the samples
    as grouped once (measurement id → frame). An answer is kept, keyed by the two measurement ids and
    whether the metric's pairs are seeded, only where both frames are ``base``'s own objects (which no
    reader changes), and given again only for those very frames: a slowed copy is worked out anew."""

    base: Mapping[Any, pd.DataFrame] = field(default_factory=dict)
    answers: dict[tuple[Hashable, Hashable, bool], tuple[pd.DataFrame, pd.DataFrame, Sides]] = field(
        default_factory=dict
    )

    def sides(
        self, run_id: Hashable, baseline_id: Hashable, seeded_pairs: bool, frames: Mapping[Any, pd.DataFrame]
    ) -> Sides:
        """``both_sides`` of the two measurements' samples in ``frames``, from the memo where it may."""
        run_frame, base_frame = frames.get(run_id, EMPTY), frames.get(baseline_id, EMPTY)
        key = (run_id, baseline_id, seeded_pairs)
        kept = self.answers.get(key)
        if kept is not None and kept[0] is run_frame and kept[1] is base_frame:
            return kept[2]
        answer = both_sides(run_frame, base_frame, seeded_pairs)
        if run_frame is self.base.get(run_id, EMPTY) and base_frame is self.base.get(baseline_id, EMPTY):
            self.answers[key] = (run_frame, base_frame, answer)
        return answer


def is_absolute(method: str) -> bool:
    """Whether samples of ``method`` are absolute seconds ("min", or an A/B session's "min, per
    round"), not ratios of two sides timed together."""
    return method.split(",")[0] == "min"


def headline_per_sample(value: Any, samples: pd.DataFrame | None, method: str) -> float:
    """The headline's units per unit of its samples: 1 for a ratio; for a min-of-N time the
    headline over the least sample (a time per token from samples of a whole generation), NaN
    where that cannot be read (tested_values then keeps the stored values)."""
    if not is_absolute(method):
        return 1.0
    seconds = [] if samples is None or samples.empty else [second for second in samples["seconds"] if second > 0]
    try:
        return float(value) / min(seconds) if seconds else math.nan
    except (TypeError, ValueError):
        return math.nan


def tested_values(
    entry: dict[str, Any], run_logs: list[float], base_logs: list[float], units: tuple[float, float]
) -> None:
    """A tested row's ``run`` and ``baseline`` as the values its test compared, each side's
    geometric mean in the headline's units, so that run / baseline is the ``change`` beside them:
    the stored headline (a median, a best of N) moved otherwise (a best of 3 down 0.2% beside a
    +3.3% change)."""
    run_unit, base_unit = units
    # One unit for both sides (a time per token of generations of one length), so the ratio holds.
    if math.isfinite(run_unit) and math.isfinite(base_unit) and math.isclose(run_unit, base_unit, rel_tol=1e-6):
        entry["run"] = math.exp(statistics.fmean(run_logs)) * run_unit
        entry["baseline"] = math.exp(statistics.fmean(base_logs)) * run_unit
