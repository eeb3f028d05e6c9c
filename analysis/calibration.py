"""How often the review's timed verdicts are wrong, measured on the store's own runs.

- False alerts: the A/A review pairs (consecutive done runs of one preset with the same code
  version, model and machine fingerprint, neither tagged suspect) compare code with itself, so
  every ``regressed`` or ``improved`` among their tested timed verdicts is a false alert.
- Recall: the same pairs with the later run's timed samples slowed on purpose by 5%, 10%, 25%
  and 50% (analysis.comparison.slowed): the share of tested timed verdicts that say ``regressed``.

A tested verdict is a timed row that reached the U test (``p_value`` set); rows with too few
samples or no floor cannot alert either way and are counted apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from analysis import comparison, review
from analysis import runs as runs_module
from store import frames
from store.store import Store

SLOWDOWNS = (0.05, 0.10, 0.25, 0.50)
ALERTS = ("regressed", "improved")
# The newest pairs the Review page and reports calibrate on (the benchmark takes every pair).
PAGE_PAIRS = 6


@dataclass
class Calibration:
    preset: str
    pairs: int = 0
    timed_verdicts: int = 0  # tested timed verdicts over the A/A pairs
    untested: int = 0  # timed rows that could not be tested (too few samples, no floor)
    false_alerts: int = 0
    reviews_with_false_alert: int = 0
    flagged: dict[float, int] = field(default_factory=dict)  # slowdown → regressed verdicts
    tested_slowed: dict[float, int] = field(default_factory=dict)  # slowdown → tested verdicts

    def false_alert_rate(self) -> float | None:
        return self.false_alerts / self.timed_verdicts if self.timed_verdicts else None

    def reviews_with_false_alert_rate(self) -> float | None:
        return self.reviews_with_false_alert / self.pairs if self.pairs else None

    def recall(self, slowdown: float) -> float | None:
        tested = self.tested_slowed.get(slowdown, 0)
        return self.flagged.get(slowdown, 0) / tested if tested else None

    def figures(self) -> dict[str, float | int | None]:
        """The benchmark's printed figures (name → value)."""
        figures: dict[str, float | int | None] = {
            "review_pairs": self.pairs,
            "review_timed_verdicts": self.timed_verdicts,
            "review_untested_timed_rows": self.untested,
            "review_false_alerts": self.false_alerts,
            "review_false_alert_rate": self.false_alert_rate(),
            "review_reviews_with_false_alert": self.reviews_with_false_alert_rate(),
        }
        for slowdown in SLOWDOWNS:
            figures[f"review_recall_at_{round(slowdown * 100)}pct"] = self.recall(slowdown)
        return figures

    def line(self, escape: Callable[[object], str] = str) -> str:
        """The figures in words, for the Review page and the reports; ``escape`` applies to the
        preset's name (a run's own text: markdown_text for Markdown)."""
        preset = escape(self.preset)
        if not self.pairs:
            return (
                f"not measured yet: no two consecutive done {preset} runs of the same code, model and machine "
                "(run the preset twice; benchmarks/review_calibration.py measures it)"
            )
        recall = self.recall(0.25)
        flagged = (
            f"a slowdown of 25% is flagged in {recall:.0%} of {self.tested_slowed.get(0.25, 0)} tested verdicts"
            if recall is not None
            else "no timed verdict could be tested"
        )
        return (
            f"on this machine ({preset}), {flagged}; measured false alerts {self.false_alerts} of "
            f"{self.timed_verdicts} timed verdicts over {self.pairs} A/A pair(s)"
        )


def review_pairs(runs: pd.DataFrame, preset: str, fingerprint: str | None = None) -> list[tuple[int, int]]:
    """(baseline, run) of consecutive done, not suspect runs of ``preset`` (``custom``: of one
    spec) with the same code version, model hash and machine fingerprint (on ``fingerprint``
    only, if given), oldest first."""
    tags = runs["tags"].map(review.tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs))
    chosen = runs[
        (runs["status"] == "done")
        & (runs["preset"].fillna("custom") == preset)
        & ~tags.map(lambda names: review.SUSPECT in names)
    ]
    if fingerprint is not None:
        chosen = chosen[chosen["machine_fingerprint"] == fingerprint]
    pairs: list[tuple[int, int]] = []
    keys = ["code_version", "model_hash", "machine_fingerprint"]
    # Custom runs pair only with runs of the very same spec (analysis.runs.comparable_key).
    sweeps = runs_module.comparable_keys(chosen).rename("sweep")
    for _, group in chosen.groupby([sweeps, *(chosen[key].fillna("") for key in keys)]):
        ordered = group.sort_values(["started_at", "run_id"])["run_id"].tolist()
        pairs += [(int(before), int(after)) for before, after in zip(ordered, ordered[1:], strict=False)]
    return sorted(pairs, key=lambda pair: pair[1])


def tested(table: pd.DataFrame) -> pd.DataFrame:
    timed = table[table["kind"] == "timed"]
    return timed[timed["p_value"].notna()]


def calibrate(store: Store, preset: str, *, fingerprint: str | None = None, newest: int | None = None) -> Calibration:
    """The measured error rates of the review's timed verdicts over the store's A/A pairs of
    ``preset`` (the ``newest`` of them, if given)."""
    runs = frames.runs(store)
    pairs = review_pairs(runs, preset, fingerprint)
    if newest is not None:
        pairs = pairs[-newest:]
    result = Calibration(preset)
    for baseline_id, run_id in pairs:
        inputs = comparison.read_inputs(store, run_id, baseline_id, runs)
        table = comparison.judge(inputs)
        judged = tested(table)
        result.pairs += 1
        result.timed_verdicts += len(judged)
        result.untested += int((table["kind"] == "timed").sum()) - len(judged)
        alerts = int(judged["verdict"].isin(ALERTS).sum())
        result.false_alerts += alerts
        result.reviews_with_false_alert += alerts > 0
        for slowdown in SLOWDOWNS:
            slowed = tested(comparison.judge(inputs, samples=comparison.slowed(inputs, 1.0 + slowdown)))
            result.tested_slowed[slowdown] = result.tested_slowed.get(slowdown, 0) + len(slowed)
            result.flagged[slowdown] = result.flagged.get(slowdown, 0) + int((slowed["verdict"] == "regressed").sum())
    return result
