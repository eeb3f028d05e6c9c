"""The machine itself moved: between a review's two runs (a step: every impl's absolute times
moved the same way while the paired ratios held), or while one case was timed (its reading of the
harness's reference loop, runner.measure.reference, moved between the runs: ``case_phases``).

A shared host changes speed in steps: on a 2-core Xeon VM (family 6 model 207, no BF16 or AMX), eight
quick runs of one code minutes apart met four such steps, each impl's min-of-N times moving
+46% to +59%, −11% to −18%, +10% to +27% and −35% to −38% together, while the median of the 48
paired ratios moved −0.5% to +3.9% (docs/review-measurements.md, eighteenth session). A paired
ratio's two sides are two code paths the step reached unequally, so ratios moved too: +18% to
+32% on three speculative · fast cases and −19% on quantization · fast_bf16, four false alerts
against a drift allowance of ±15% and a between-run floor of ±17%, learned from runs before the
steps. Nothing inside the two runs tells such a step from a change of every code path alike, so
while it lasts a row that moved no further than the step moved the review's absolute times (nine
in ten of them) is at most ``unknown drift`` and says why; one that moved further is judged as
before.

A change of the code is unlikely to look like this: it moves one impl's times (an eager path, the
fast kernel) where the others stay or move far less, or its paired ratios too, where the whole
run's rule (review_timed.run_wide_move) speaks first. The quiet pairs of the same store moved each
impl's times −5.5% to +4.5%, never all the same way beyond 5%.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from runner.measure.reference import REFERENCE_METRIC
from store.records import case_key

# Every impl with HOST_MIN_ROWS min-of-N times, at least HOST_MIN_IMPLS of them, moved beyond
# HOST_IMPL_MOVE the same way (their medians), one beyond HOST_STEP, and the least of those moves
# is at least HOST_AGREEMENT of the largest: a step reaches every code path (on the Xeon VM the
# least was 0.37-0.92 of the largest), where a change of one impl on a day the others drift a few
# percent is that impl's own.
HOST_IMPL_MOVE = math.log1p(0.05)
HOST_STEP = math.log1p(0.10)
HOST_AGREEMENT = 0.5
HOST_MIN_ROWS = 3
HOST_MIN_IMPLS = 2
# How far the step moved a code path: this quantile of the |log shift| of those times (with the
# quick preset's 19, the second widest), so that one case's own change cannot widen it alone.
HOST_ENVELOPE_QUANTILE = 0.9


@dataclass(frozen=True)
class HostMove:
    """A step of the machine between a review's two runs, as its min-of-N times show it."""

    impl_shifts: dict[str, float]  # impl → the median log shift of its min-of-N times
    envelope: float  # |log shift|: a row that moved no further is at most unknown drift
    rows: int  # the min-of-N times it was read from

    def clause(self, held: bool) -> str:
        """What the step means for a row, for its ``why``: ``held`` where it made the row unknown
        drift (review_host.host_line counts those by their first words)."""
        moves = ", ".join(f"{impl} {math.expm1(shift):+.0%}" for impl, shift in sorted(self.impl_shifts.items()))
        within = f"between {math.expm1(-self.envelope):.0%} and {math.expm1(self.envelope):+.0%}"
        start = "but the machine itself moved" if held else "the machine itself moved"
        return (
            f"{start} between the runs: every impl's absolute times moved the same way ({moves}, medians) while "
            f"the paired ratios held, so a move {within} (nine in ten of the review's {self.rows} absolute times "
            "moved no further) is at most unknown drift"
        )


def host_move(absolute_shifts: Sequence[tuple[str, float]], ratios_held: bool) -> HostMove | None:
    """The machine's step, from (impl, log shift) of a review's min-of-N times that allow drift,
    where its paired ratios held (``ratios_held``: enough of them, their median within the whole
    run's allowance, review_timed) and every impl with HOST_MIN_ROWS times moved the same way
    beyond HOST_IMPL_MOVE, one beyond HOST_STEP, the least at least HOST_AGREEMENT of the
    largest; None otherwise."""
    if not ratios_held:
        return None
    by_impl: dict[str, list[float]] = {}
    for impl, shift in absolute_shifts:
        if math.isfinite(shift):
            by_impl.setdefault(impl, []).append(shift)
    counted = {impl: shifts for impl, shifts in by_impl.items() if len(shifts) >= HOST_MIN_ROWS}
    if len(counted) < HOST_MIN_IMPLS:
        return None
    medians = {impl: statistics.median(shifts) for impl, shifts in counted.items()}
    sizes = [abs(shift) for shift in medians.values()]
    same_way = all(shift > HOST_IMPL_MOVE for shift in medians.values()) or all(
        shift < -HOST_IMPL_MOVE for shift in medians.values()
    )
    if not same_way or max(sizes) <= HOST_STEP or min(sizes) < HOST_AGREEMENT * max(sizes):
        return None
    moves = sorted(abs(shift) for shifts in counted.values() for shift in shifts)
    envelope = moves[math.ceil(HOST_ENVELOPE_QUANTILE * len(moves)) - 1]
    return HostMove(medians, envelope, len(moves))


def host_line(table: pd.DataFrame) -> str | None:
    """``the machine itself moved …`` where the review's rows were judged under a step of the
    machine (the hidden ``host_envelope`` column); None otherwise."""
    if table.empty or "host_envelope" not in table.columns:
        return None
    judged = table[table["host_envelope"].notna()]
    if judged.empty:
        return None
    envelope = float(judged["host_envelope"].iloc[0])
    held = int(judged["why"].str.contains("but the machine itself moved", regex=False).sum())
    rows = "1 such row" if held == 1 else f"{held} such rows"
    return (
        f"the machine itself moved between the runs: every impl's absolute times moved the same way while the "
        f"paired ratios held, so a timed row that moved between {math.expm1(-envelope):.0%} and "
        f"{math.expm1(envelope):+.0%} is at most unknown drift ({rows} would otherwise have been flagged); nothing "
        "in the two runs tells such a step from a change of every code path alike: rerun both on a steadier machine"
    )


# A case whose reference loop ran this much slower or faster around its timings in one run than in
# the other was timed at another speed of the machine. Between quiet processes on the Xeon VM the
# loop's reading moved 2-5%; between its two speeds, 30-45% (runner.measure.reference).
PHASE_MOVE = math.log1p(0.10)
# The machine's own speed is not the code's: it widens the floors of its case's other rows.
REFERENCE_WHY = (
    "the machine's own speed while the case was timed (a fixed pure-Python loop read between its samples): "
    "not the code's, so not judged; where it moved beyond 10% it widens the floors of the case's timed rows"
)

# How far a row may move for each unit (of log) its case's reference readings moved: over the
# five A/A reviews of six quick runs on the Xeon VM (docs/review-measurements.md, nineteenth
# session), a min-of-N time whose case's readings moved beyond 10% moved 1.1 times as far (median;
# nine in ten within 2.4), a paired ratio 0.26 (nine in ten within 0.49): both sides of a pair
# feel the machine's speed, and cancel most of it. Chosen on those reviews, beside the row's floor.
ABSOLUTE_SENSITIVITY = 2.0
RATIO_SENSITIVITY = 0.5


@dataclass(frozen=True)
class CasePhase:
    """How fast the machine ran while one case was timed in each run: the median reading of the
    reference loop between its samples (seconds)."""

    run_seconds: float
    baseline_seconds: float

    @property
    def move(self) -> float:
        """The log ratio of the readings: positive where the machine ran slower in the run."""
        return math.log(self.run_seconds / self.baseline_seconds)

    @property
    def moved(self) -> bool:
        """Whether the readings moved beyond PHASE_MOVE (|log|: 10% slower, 9.1% faster)."""
        return abs(self.move) > PHASE_MOVE

    def allowance(self, judged_floor: float, absolute: bool) -> float:
        """A row's floor (|log|) widened by this move times ABSOLUTE_SENSITIVITY for a min-of-N
        time (``absolute``), RATIO_SENSITIVITY for a paired ratio, either way round: a ratio's two
        sides may feel the machine's speed unequally (interpreted code felt the Xeon VM's slow
        stretches most, the fast kernel least)."""
        return judged_floor + (ABSOLUTE_SENSITIVITY if absolute else RATIO_SENSITIVITY) * abs(self.move)

    def clause(self, allowance: float, held: bool) -> str:
        """What the machine's speed means for the row, for its ``why``: ``held`` where it made the row
        unknown drift (``phase_line`` counts those by their first words)."""
        start = "but the machine ran at another speed" if held else "the machine ran at another speed"
        return (
            f"{start} while this case was timed: a fixed reference loop took {self.run_seconds * 1e3:.2f} ms a "
            f"reading in the run against {self.baseline_seconds * 1e3:.2f} ms in the baseline "
            f"({math.expm1(self.move):+.0%}), so a move within ±{math.expm1(allowance):.0%} (its floor widened in "
            "proportion) is at most unknown drift"
        )


def hold_for_phase(entry: dict[str, Any], shift: float, phase: CasePhase, allowance: float) -> None:
    """A verdict row (``shift``: its log shift) whose case was timed at another speed of the machine in
    each run, judged against ``allowance`` (``CasePhase.allowance``): a flagged row within it is at
    most unknown drift, and its why says so."""
    held = entry["verdict"] in ("regressed", "improved") and abs(shift) <= allowance
    entry["phase_move"] = phase.move
    entry["verdict"] = "unknown drift" if held else entry["verdict"]
    entry["why"] += f"; {phase.clause(allowance, held)}"


def case_phases(run: pd.DataFrame, baseline: pd.DataFrame) -> dict[tuple[str, str], CasePhase]:
    """(experiment, case key) → the case's CasePhase, for every case with a reference reading in both
    runs' measurements (store.frames.measurements); runs recorded before the reading have none."""
    if run.empty or baseline.empty:
        return {}
    readings: list[dict[tuple[str, str], float]] = []
    for frame in (run, baseline):
        kept = frame[(frame["metric"] == REFERENCE_METRIC) & (frame["value"] > 0)]
        readings.append(
            {
                (str(experiment), case_key(params)): float(value)
                for experiment, params, value in zip(kept["experiment"], kept["params"], kept["value"], strict=True)
            }
        )
    return {key: CasePhase(seconds, readings[1][key]) for key, seconds in readings[0].items() if key in readings[1]}


def phase_line(table: pd.DataFrame) -> str | None:
    """``N timed rows were timed while the machine ran at another speed …`` where any was (the
    hidden ``phase_move`` column); None otherwise."""
    if table.empty or "phase_move" not in table.columns:
        return None
    judged = table[table["phase_move"].notna()]
    if judged.empty:
        return None
    held = int(judged["why"].str.contains("but the machine ran at another speed", regex=False).sum())
    moves = judged["phase_move"].astype(float)
    rows = "1 timed row was" if len(judged) == 1 else f"{len(judged)} timed rows were"
    flagged = "1 of them" if held == 1 else f"{held} of them"
    return (
        f"{rows} timed while the machine ran at another speed than in the baseline: a fixed reference loop read "
        f"between their samples moved {math.expm1(moves.min()):+.0%} to {math.expm1(moves.max()):+.0%}, so each such "
        f"row's floor was widened in proportion ({flagged} would otherwise have been flagged): rerun both on a "
        "steadier machine"
    )
