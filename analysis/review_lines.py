"""What a verdict table (analysis.review.verdict_table) says in words: each row's label, the
lines a review opens with (what it could see, whether it is underpowered, which rows wait for
history) and its one-line summary. Plain functions of the table, shared by the Review page, the
Markdown and HTML reports, `decodelab report run` and `decodelab ab`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from analysis.review import UNDERPOWERED_CHANGE, VERDICT_ORDER, seen
from analysis.review_timed import ROUND_UNITS, RUN_WIDE_ALLOWANCE, RUN_WIDE_MIN_ROWS


def verdict_label(row: Mapping[Any, Any]) -> str:
    """The verdict as a reader sees it: a tested timed row says what it could have seen,
    ``within noise (would have seen ≥ 8%)``."""
    detectable = row.get("detectable")
    if detectable is None or pd.isna(detectable) or row["verdict"] in ("regressed", "improved"):
        return str(row["verdict"])
    return f"{row['verdict']} (would have seen {seen(float(detectable))})"


def underpowered_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The tested timed rows that could not have seen a change of UNDERPOWERED_CHANGE at their
    sample count and noise. Rows waiting for history (``waiting_rows``) are not among them: more
    pairs or a quieter machine would not let them see more, only earlier runs would."""
    if table.empty or "detectable" not in table.columns:
        return table.iloc[0:0]
    detectable = table["detectable"].astype(float)
    return table[detectable.notna() & (detectable > UNDERPOWERED_CHANGE) & ~detectable.map(math.isinf)]


def waiting_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The tested timed rows that could see no change yet: min-of-N times whose case fewer than
    two earlier runs hold (NO_HISTORY), but for those flagged on a move of their whole run."""
    if table.empty or "detectable" not in table.columns:
        return table.iloc[0:0]
    return table[table["detectable"].astype(float).map(math.isinf) & ~table["verdict"].isin(("regressed", "improved"))]


def waiting_line(table: pd.DataFrame) -> str | None:
    """``N min-of-N times wait for history: …`` where some tested row is waiting; None otherwise."""
    waiting = waiting_rows(table)
    if waiting.empty:
        return None
    rows = "1 min-of-N time waits" if len(waiting) == 1 else f"{len(waiting)} min-of-N times wait"
    return (
        f"{rows} for history: absolute seconds are judged only against two earlier runs of their case on "
        "this machine, so until then they are at most unknown drift unless the review's paired ratios moved "
        "together (run the preset again)"
    )


def power_line(table: pd.DataFrame) -> str | None:
    """``underpowered: …`` where some tested timed row could not have seen UNDERPOWERED_CHANGE; None otherwise."""
    weak = underpowered_rows(table)
    if weak.empty:
        return None
    tested = int(table["detectable"].notna().sum())
    return (
        f"underpowered: {len(weak)} of {tested} tested timed rows could not have seen a "
        f"{UNDERPOWERED_CHANGE:.0%} change (the weakest would have seen {seen(float(weak['detectable'].max()))}); "
        "more pairs or a quieter machine would lower it"
    )


def detectable_line(table: pd.DataFrame) -> str | None:
    """What the tested timed rows could have seen, in a few words; None without such rows."""
    if table.empty or "detectable" not in table.columns:
        return None
    detectable = table["detectable"].dropna().astype(float)
    if detectable.empty:
        return None
    return (
        f"{len(detectable)} tested timed rows would have seen {seen(float(detectable.median()))} "
        f"(median; the weakest {seen(float(detectable.max()))})"
    )


def smallest_detectable(table: pd.DataFrame) -> float | None:
    """The smallest change any tested timed row would have seen (its ``detectable``): below it the
    review could flag no timed change at all. None without tested timed rows."""
    if table.empty or "detectable" not in table.columns:
        return None
    detectable = table["detectable"].dropna().astype(float)
    return float(detectable.min()) if not detectable.empty else None


def cannot_see(table: pd.DataFrame) -> bool:
    """Whether even the review's most sensitive tested timed row could not see UNDERPOWERED_CHANGE."""
    smallest = smallest_detectable(table)
    return smallest is not None and smallest > UNDERPOWERED_CHANGE


def run_wide_clause(table: pd.DataFrame) -> str:
    """Where no tested row could see RUN_WIDE_ALLOWANCE alone (a first review's ratios are held to
    their drift allowance) but RUN_WIDE_MIN_ROWS or more paired ratios are judged together on a move
    of the whole run (``run_wide_shift``, analysis.review_timed.run_wide_move): what that move is
    judged against. Else nothing."""
    smallest = smallest_detectable(table)
    rows = int(table["run_wide_shift"].notna().sum()) if "run_wide_shift" in table.columns else 0
    allowance = math.expm1(RUN_WIDE_ALLOWANCE)
    if rows < RUN_WIDE_MIN_ROWS or smallest is None or smallest <= allowance:
        return ""
    return f"; a change of the whole run, moving its {rows} paired ratios together, from {allowance:.0%}"


# What measures two revisions side by side on one machine (docs/ci.md).
AB_COMMAND = "`decodelab ab --baseline REV --candidate REV` (docs/ci.md)"


def remedy_clause(table: pd.DataFrame) -> str:
    """For a review that cannot see UNDERPOWERED_CHANGE: what would see more. A run against its
    baseline points to `decodelab ab`, which times both revisions in the same rounds: on a 2-core
    Xeon VM whose host ran at its slow speed most of the time, the quantization experiment's
    `fast_int8` row could have seen 53–140% in four reviews of quick runs, and 5.5–13.2% in
    ten-round A/B sessions, which caught its kernel slowed 10% in 2 of 3
    (docs/review-measurements.md, twentieth session). Rows judged by rounds (a session, or runs of
    two sessions) point to more rounds of one session holding both revisions."""
    if table["why"].astype(str).str.contains(ROUND_UNITS, regex=False).any():
        return "; more rounds of one session holding both revisions (`decodelab ab --rounds 10`) would lower it"
    return f"; an A/B session of both revisions would see smaller ones: {AB_COMMAND}"


def seen_line(table: pd.DataFrame) -> str:
    """What the review could see, said before its counts: the smallest timed change it could have
    flagged (its most sensitive row's ``detectable``), "cannot see a change of one case below X% on this
    machine" where that is above UNDERPOWERED_CHANGE, and what its rows would have seen
    (``detectable_line``); where no row could see RUN_WIDE_ALLOWANCE alone, what a move of the
    whole run is judged against (``run_wide_clause``); where it cannot see, or its median row
    cannot see UNDERPOWERED_CHANGE, what would (``remedy_clause``). A count of "0 regressed"
    means nothing beyond what this line allows."""
    smallest = smallest_detectable(table)
    if smallest is None:
        return (
            "What this review could see: no timed row was tested (too few samples or no timed metric on both "
            "sides), so no timed change could have been flagged; deterministic metrics are compared for equality"
        )
    rows = detectable_line(table)
    if math.isinf(smallest):
        return (
            "This review cannot see any timed change on this machine yet: its tested timed rows are absolute "
            f"times, judged only against two earlier runs of their case here ({rows}); without waiting for that "
            f"history, time both revisions in one session: {AB_COMMAND}"
        )
    if smallest > UNDERPOWERED_CHANGE:
        return (
            f"This review cannot see a change of one case below {smallest:.0%} on this machine: the smallest "
            f"timed change one of its rows could have flagged is {smallest:.0%} ({rows})"
            f"{run_wide_clause(table)}{remedy_clause(table)}"
        )
    # One sensitive row under a weak median read as a review that sees (23% beside "66 of 67 rows
    # underpowered", a user's tour): where the median row cannot see 25%, what would see more.
    # Over the rows that could see a change at all: one waiting for history (inf) is said apart.
    tested = table["detectable"].dropna().astype(float)
    median = float(tested[tested.map(math.isfinite)].median())
    remedy = (
        f"; most of its rows cannot see {UNDERPOWERED_CHANGE:.0%}{remedy_clause(table)}"
        if median > UNDERPOWERED_CHANGE
        else ""
    )
    return (
        f"The smallest timed change this review could have flagged: {smallest:.0%} ({rows})"
        f"{run_wide_clause(table)}{remedy}"
    )


def notes_markdown(warnings: Sequence[str]) -> str:
    """A review's warnings as one Markdown text for the page: the one as it is, several as a list
    under what they are."""
    if len(warnings) <= 1:
        return "".join(warnings)
    return "**What else limits this review:**\n" + "\n".join(f"- {warning}" for warning in warnings)


# The verdicts of a row that only one of the two runs holds: nothing to compare.
ONE_SIDED = ("only in run", "only in baseline")


def comparable_timed(table: pd.DataFrame) -> pd.DataFrame:
    """The timed rows of both runs (neither ``only in run`` nor ``only in baseline``): what a test
    could have judged."""
    if table.empty:
        return table
    return table[(table["kind"] == "timed") & ~table["verdict"].isin(ONE_SIDED)]


def judged_fraction(table: pd.DataFrame) -> float | None:
    """Tested timed rows over all timed rows with a value on both sides; None without such rows."""
    timed = comparable_timed(table)
    return float(timed["p_value"].notna().sum() / len(timed)) if len(timed) else None


def verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    """How many rows got each verdict, in VERDICT_ORDER, leaving out those with none."""
    counts = table["verdict"].value_counts().to_dict() if not table.empty else {}
    return {verdict: int(counts[verdict]) for verdict in VERDICT_ORDER if counts.get(verdict)}


def shares_no_case(table: pd.DataFrame) -> bool:
    """Whether the two runs compared hold no case in common (every row only in one of them)."""
    return not table.empty and bool(table["verdict"].isin(ONE_SIDED).all())


def summary_line(table: pd.DataFrame) -> str:
    counts = verdict_counts(table)
    if shares_no_case(table):
        return (
            f"the two runs share no case ({counts.get('only in run', 0)} figures only in the run, "
            f"{counts.get('only in baseline', 0)} only in the baseline): nothing to compare"
        )
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.items()) or "nothing to compare"
