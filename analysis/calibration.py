"""How often the review's timed verdicts are wrong, measured on the store's own runs.

- False alerts: the A/A review pairs (consecutive done runs of one preset with the same code
  version, model and machine fingerprint, neither tagged suspect) compare code with itself, so
  every ``regressed`` or ``improved`` among their tested timed verdicts is a false alert.
- Recall: the same pairs with a regression injected into the later run's real samples
  (analysis.review_inputs.injected: the measured side of each pair slower by 10%, 25% or 50%, each
  pair keeping its own noise, the second run's), the way regressions happen: one case at a time
  (every tested timed case in turn, or a seeded sample of SINGLE_CASES of them), one experiment ·
  impl family at a time, and the whole run.
  Recall is the share of the injected tested rows that say ``regressed``, over the review and per
  experiment · impl family (``Calibration.family_figures``: which families a shortfall comes from).
  Beside it, what a CI gate sees (``caught``): the share of injections, a family or the whole run
  at once, with at least one of their rows ``regressed``, so that ``--fail-on regressed`` fails.
  For one case the two are the same; for a family a gate that fails on two of its fourteen rows
  has caught the change that the row share counts as 1/7 seen.

The review's tests and adjustments stay within an experiment · impl family (analysis.review), so
a case or family injected alone is judged by judging its family alone: exactly its verdict in
the full review, at a fraction of the cost.

A tested verdict is a timed row that reached the t test (``p_value`` set); rows with too few
samples cannot alert either way and are counted apart (``review_judged_fraction``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from analysis import review, review_inputs, review_lines, review_samples
from analysis import runs as runs_module
from store import frames
from store.store import Store

SLOWDOWNS = (0.10, 0.25, 0.50)
# How a regression is injected: into one case, one experiment · impl family, the whole run.
SCOPES = ("single_case", "group", "run")
ALERTS = ("regressed", "improved")
Family = tuple[str, str]  # (experiment, impl): the review's tests and adjustments stay within one
# The newest pairs the Review page and reports calibrate on (the benchmark takes every pair unless
# given --newest): each pair's injections cost a few seconds.
PAGE_PAIRS = 3
# One case at a time: at most this many tested cases of a pair, a sample seeded by the pair.
SINGLE_CASES = 30


@dataclass
class Calibration:
    preset: str
    # The newest run the pairs may end at (``calibrate``'s ``up_to``): a review is calibrated on
    # the runs it could have known; None for every pair of the store.
    up_to: int | None = None
    pairs: int = 0
    timed_rows: int = 0  # timed rows with a value in both runs, over the A/A pairs
    timed_verdicts: int = 0  # tested timed verdicts over the A/A pairs
    false_alerts: int = 0
    reviews_with_false_alert: int = 0
    # (scope, slowdown, experiment, impl) → regressed and injected rows; the review's are their sums.
    flagged: dict[tuple[str, float, str, str], int] = field(default_factory=dict)
    injected: dict[tuple[str, float, str, str], int] = field(default_factory=dict)
    # Per family, its tested A/A rows' minimum detectable effects (``detectable``: all of them).
    family_detectable: dict[Family, list[float]] = field(default_factory=dict)
    # (scope, slowdown) → injections with a tested row, and those of them with a row ``regressed``.
    trials: dict[tuple[str, float], int] = field(default_factory=dict)
    caught_trials: dict[tuple[str, float], int] = field(default_factory=dict)
    # Per family, the moves of its tested A/A rows judged against a drift allowance (drift_judged_moves):
    # how far a first review's rows move, which any default allowance must cover.
    drift_judged_moves: dict[Family, list[float]] = field(default_factory=dict)

    @property
    def detectable(self) -> list[float]:
        """Every tested row's minimum detectable effect, over the families."""
        return [value for values in self.family_detectable.values() for value in values]

    @property
    def untested(self) -> int:
        return self.timed_rows - self.timed_verdicts

    def false_alert_rate(self) -> float | None:
        return self.false_alerts / self.timed_verdicts if self.timed_verdicts else None

    def reviews_with_false_alert_rate(self) -> float | None:
        return self.reviews_with_false_alert / self.pairs if self.pairs else None

    def judged_fraction(self) -> float | None:
        return self.timed_verdicts / self.timed_rows if self.timed_rows else None

    def recall(self, scope: str, slowdown: float, family: Family | None = None) -> float | None:
        """The share of injected rows flagged ``regressed``: the review's, or one family's."""
        keys = [key for key in self.injected if key[:2] == (scope, slowdown) and (family is None or key[2:] == family)]
        injected = sum(self.injected[key] for key in keys)
        return sum(self.flagged.get(key, 0) for key in keys) / injected if injected else None

    def caught(self, scope: str, slowdown: float) -> float | None:
        """The share of ``scope`` injections of ``slowdown`` that left a row ``regressed``: how often
        ``--fail-on regressed`` fails on such a change."""
        trials = self.trials.get((scope, slowdown), 0)
        return self.caught_trials.get((scope, slowdown), 0) / trials if trials else None

    def count_trial(self, scope: str, slowdown: float, flagged: int, injected: int) -> None:
        """Adds one injection with ``injected`` tested rows, ``flagged`` of them regressed."""
        if injected:
            key = (scope, slowdown)
            self.trials[key] = self.trials.get(key, 0) + 1
            self.caught_trials[key] = self.caught_trials.get(key, 0) + (flagged > 0)

    def detectable_median(self) -> float | None:
        return float(pd.Series(self.detectable).median()) if self.detectable else None

    def drift_judged_figures(self) -> dict[str, float | int | None]:
        """How far the A/A rows judged against a drift allowance moved (``drift_judged_moves``):
        their count, largest move and 99th percentile, over the review and per family (the largest)."""
        moves = [move for family in self.drift_judged_moves.values() for move in family]
        figures: dict[str, float | int | None] = {
            "review_drift_judged_rows": len(moves),
            "review_drift_judged_move_max": max(moves) if moves else None,
            "review_drift_judged_move_p99": float(pd.Series(moves).quantile(0.99)) if moves else None,
        }
        for (experiment, impl), family in sorted(self.drift_judged_moves.items()):
            figures[f"review_drift_judged_move_max_{experiment}_{impl}"] = max(family)
        return figures

    def count(self, scope: str, slowdown: float, family: Family, flagged: int, injected: int) -> None:
        """Adds one trial's regressed and injected rows of ``family``, to its figures and the totals."""
        key = (scope, slowdown, *family)
        self.flagged[key] = self.flagged.get(key, 0) + flagged
        self.injected[key] = self.injected.get(key, 0) + injected

    def family_figures(self, scope: str = "group", slowdown: float = 0.10) -> dict[str, float | int | None]:
        """Per experiment · impl family: its recall with ``scope`` injections of ``slowdown``, its
        injected rows and its A/A rows' median detectable change; where the whole-review figure
        falls short, the families that could not see the change (their floors, in the Review page's
        explanation of each row) are named here."""
        figures: dict[str, float | int | None] = {}
        percent = round(slowdown * 100)
        for experiment, impl in sorted(self.family_detectable):
            name = f"{experiment}_{impl}"
            figures[f"review_recall_{scope}_at_{percent}pct_{name}"] = self.recall(scope, slowdown, (experiment, impl))
            figures[f"review_{scope}_rows_{name}"] = self.injected.get((scope, slowdown, experiment, impl), 0)
            detectable = self.family_detectable[(experiment, impl)]
            figures[f"review_detectable_median_{name}"] = float(pd.Series(detectable).median()) if detectable else None
        return figures

    def figures(self) -> dict[str, float | int | None]:
        """The benchmark's printed figures (name → value)."""
        figures: dict[str, float | int | None] = {
            "review_pairs": self.pairs,
            "review_timed_verdicts": self.timed_verdicts,
            "review_untested_timed_rows": self.untested,
            "review_judged_fraction": self.judged_fraction(),
            # Tested rows that could flag nothing alone: min-of-N times without two earlier runs.
            "review_rows_without_history": sum(math.isinf(value) for value in self.detectable),
            "review_detectable_median": self.detectable_median(),
            "review_false_alerts": self.false_alerts,
            "review_false_alert_rate": self.false_alert_rate(),
            "review_reviews_with_false_alert": self.reviews_with_false_alert_rate(),
        }
        for scope in SCOPES:
            for slowdown in SLOWDOWNS:
                figures[f"review_recall_{scope}_at_{round(slowdown * 100)}pct"] = self.recall(scope, slowdown)
        # One case is one row: its catch rate is its recall.
        for scope in SCOPES[1:]:
            for slowdown in SLOWDOWNS:
                figures[f"review_caught_{scope}_at_{round(slowdown * 100)}pct"] = self.caught(scope, slowdown)
        return figures

    def line(self, escape: Callable[[object], str] = str) -> str:
        """The figures in words, for the Review page, the reports and the benchmark's last line;
        ``escape`` applies to the preset's name (a run's own text: markdown_text for Markdown)."""
        preset = escape(self.preset)
        if not self.pairs and self.up_to is not None:
            return (
                f"not measured: no two consecutive done {preset} runs of the same code, model and machine up "
                f"to run {self.up_to}, the runs its review could have known (a review is calibrated only on runs "
                "before it and itself)"
            )
        if not self.pairs:
            return (
                f"not measured yet: no two consecutive done {preset} runs of the same code, model and machine "
                "(run the preset twice; benchmarks/review_calibration.py measures it)"
            )
        if not self.timed_verdicts:
            return f"on this machine ({preset}), no timed verdict could be tested over {self.pairs} A/A pair(s)"

        def percent(rate: float | None) -> str:
            return "n/a" if rate is None else f"{rate:.0%}"

        def share(scope: str, slowdown: float) -> str:
            return percent(self.recall(scope, slowdown))

        def caught(scope: str) -> str:
            return percent(self.caught(scope, 0.10))

        detectable = self.detectable_median()
        blind = self.blind_families()
        missed = (
            "; missed most 10% slowdowns in "
            + ", ".join(f"{escape(experiment)} · {escape(impl)} ({recall:.0%})" for experiment, impl, recall in blind)
            if blind
            else ""
        )
        return (
            f"on this machine ({preset}), slowdowns injected into real samples: one case at a time, slowed 25% it "
            f"is flagged {share('single_case', 0.25)} of the time, slowed 10% {share('single_case', 0.10)}; one "
            f"experiment · impl slowed 10%: {share('group', 0.10)} of its rows flagged, {caught('group')} of such "
            f"changes fail --fail-on regressed{missed}; the whole run slowed 10%: {share('run', 0.10)} of its rows "
            f"flagged, {caught('run')} of such runs fail it; a tested row would have seen "
            f"{review.seen(detectable or 0.0)} (median); measured false alerts {self.false_alerts} of "
            f"{self.timed_verdicts} timed verdicts over {self.pairs} A/A pair(s)"
        )

    def blind_families(self, slowdown: float = 0.10, below: float = 0.5) -> list[tuple[str, str, float]]:
        """(experiment, impl, recall) of the families whose group recall at ``slowdown`` is under
        ``below``, the blindest first: where a change of that size passes the review unseen."""
        recalls = {family: self.recall("group", slowdown, family) for family in self.family_detectable}
        found = [(*family, recall) for family, recall in recalls.items() if recall is not None and recall < below]
        return sorted(found, key=lambda family: (family[2], family[0], family[1]))


def review_pairs(runs: pd.DataFrame, preset: str, fingerprint: str | None = None) -> list[tuple[int, int]]:
    """(baseline, run) of consecutive done, not suspect runs of ``preset`` (``custom``: of one
    spec) with the same code version, model hash and machine fingerprint (on ``fingerprint``
    only, if given), oldest first. A/B sessions' runs are left out: their rounds were measured
    interleaved with another run's, not one after the other (benchmarks/ab_error_rate.py
    measures `decodelab ab` itself)."""
    tags = runs["tags"].map(review.tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs))
    chosen = runs[
        (runs["status"] == "done")
        & (runs["preset"].fillna("custom") == preset)
        & ~tags.map(lambda names: review.SUSPECT in names)
        & tags.map(lambda names: runs_module.ab_pair(names) is None)
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
    """The timed rows a test judged (review_lines.judged_fraction's numerator); ``regressed_by_family``
    applies the same rule row by row."""
    timed = review_lines.comparable_timed(table)
    return timed[timed["p_value"].notna()]


def timed_rows(table: pd.DataFrame) -> int:
    """Timed rows with a value in both runs: what could be tested (judged_fraction's denominator)."""
    return len(review_lines.comparable_timed(table))


def row_key(row: Mapping[Any, Any]) -> tuple[str, str, str]:
    """A review row's (experiment, metric, point): the same row in the verdict table and in its
    side_by_side rows."""
    return (str(row["experiment"]), str(row["metric"]), str(row["point"]))


class Injector:
    """Regressions injected into one review pair's real samples, judged family by family."""

    def __init__(self, inputs: review_inputs.ReviewInputs, table: pd.DataFrame) -> None:
        self.inputs = inputs
        self.rows = inputs.side_by_side(True)
        self.measured = review_inputs.measured_sides(inputs.samples)
        self.families = row_families(self.rows)
        # The samples grouped by measurement once, and what the untouched ones say kept across trials:
        # each trial slows a few measurements and judges the rest as they were.
        self.groups: dict[Any, pd.DataFrame] = (
            dict(tuple(inputs.samples.groupby("measurement_id"))) if not inputs.samples.empty else {}
        )
        self.memo = review_samples.SidesMemo(base=self.groups)
        # The rows of the un-injected review (``table``, its full verdict table) that a move of the
        # whole run is judged on, by their key, with their log shifts: a family judged alone is judged
        # beside the rest of the review's, which an injection into that family leaves as they were.
        joining = table[table["run_wide_shift"].notna()]
        self.run_wide_shifts = {row_key(row): float(row["run_wide_shift"]) for row in joining.to_dict("records")}
        # Likewise the min-of-N times' shifts, by impl, that tell a step of the machine (review_host).
        impls = {row_key(row): str(row["impl"]) for row in self.rows.to_dict("records")}
        absolute = table[table["absolute_shift"].notna()]
        self.absolute_shifts = {
            key: (impls[key], float(row["absolute_shift"]))
            for row in absolute.to_dict("records")
            if (key := row_key(row)) in impls
        }

    def samples(self, measurement_ids: set[int], slower_by: float) -> pd.DataFrame:
        """Every sample of the pair, ``review_inputs.injected`` with the measured sides found once."""
        return review_inputs.injected(self.inputs.samples, measurement_ids, slower_by, self.measured)

    def slowed(self, measurement_id: Any, slower_by: float) -> pd.DataFrame:
        """One measurement's samples as ``review_inputs.injected`` leaves them: its measured side's
        seconds times ``slower_by`` (in one array operation: a copy and a masked assignment a
        trial was a fifth of the calibration's time)."""
        frame = self.groups[measurement_id]
        measured = self.measured.loc[frame.index].to_numpy(dtype=bool)
        seconds = frame["seconds"].to_numpy(dtype=float)
        return frame.assign(seconds=np.where(measured, seconds * slower_by, seconds))

    def judged(self, rows: pd.DataFrame | None, measurement_ids: set[int], slower_by: float) -> pd.DataFrame:
        by_measurement = self.groups
        if rows is not None:
            # Only the family's samples: a family is judged alone.
            family = set(rows["measurement_id_run"].dropna()) | set(rows["measurement_id_baseline"].dropna())
            by_measurement = {ident: frame for ident, frame in self.groups.items() if ident in family}
        by_measurement = {
            **by_measurement,
            **{ident: self.slowed(ident, slower_by) for ident in measurement_ids if ident in by_measurement},
        }
        outside: list[float] = []
        absolute_outside: list[tuple[str, float]] = []
        if rows is not None:
            keys = (rows[column].astype(str) for column in ("experiment", "metric", "point"))
            inside = set(zip(*keys, strict=True))
            outside = [shift for key, shift in self.run_wide_shifts.items() if key not in inside]
            absolute_outside = [shift for key, shift in self.absolute_shifts.items() if key not in inside]
        return review_inputs.judge(
            self.inputs,
            rows=rows,
            run_wide_outside=outside,
            absolute_outside=absolute_outside,
            by_measurement=by_measurement,
            memo=self.memo,
            ordered=False,  # only counted: the order the review lists its rows in costs a sort a trial
        )


def drift_judged_moves(cases: pd.DataFrame) -> dict[Family, list[float]]:
    """Per family, how far each tested row of ``cases`` (``keyed``) judged against a drift
    allowance moved: the rows without a between-run floor (``noise_floor`` empty) that could have
    flagged a change (a finite ``detectable``: an absolute time without history could not). The
    move is on the allowance's own scale, expm1(|log(1 + change)|): a fall of 13.5% is a move of
    15.6%, past ±15%, as the review judges it."""
    judged = cases[cases["noise_floor"].isna() & cases["detectable"].astype(float).map(math.isfinite)]
    return {
        (str(experiment), str(impl)): [math.expm1(abs(math.log1p(change))) for change in group["change"].astype(float)]
        for (experiment, impl), group in judged.groupby(["experiment", "impl"])
    }


def keyed(table: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The tested timed rows of ``table`` with their run measurement and family (experiment, impl)."""
    keys = rows[["experiment", "point", "metric", "impl", "measurement_id_run"]]
    found = tested(table)
    if found.empty or keys.empty:  # an empty frame's columns come as float64: nothing to merge on
        return found.reindex(columns=[*found.columns, "impl", "measurement_id_run"])
    on = ["experiment", "point", "metric"]
    return found.astype({"point": str}).merge(keys.astype({"point": str}), on=on, how="left")


RowFamilies = dict[tuple[str, str, str], list[tuple[str, Any]]]


def row_families(rows: pd.DataFrame) -> RowFamilies:
    """(experiment, point, metric) → the (impl, run measurement) of each of ``rows`` (a pair's
    side_by_side) that has both: what ``regressed_by_family`` counts a trial's verdicts by, made
    once a pair (reading these columns every trial was a fifth of the calibration's time)."""
    families: RowFamilies = {}
    for experiment, point, metric, impl, ident in zip(
        rows["experiment"], rows["point"], rows["metric"], rows["impl"], rows["measurement_id_run"], strict=True
    ):
        if not (pd.isna(impl) or pd.isna(ident)):  # as the merge and groupby did: a row without either is no family's
            families.setdefault((str(experiment), str(point), str(metric)), []).append((str(impl), ident))
    return families


def regressed_by_family(
    table: pd.DataFrame, families: RowFamilies, measurement_ids: set[int]
) -> dict[Family, tuple[int, int]]:
    """Per experiment · impl family: (regressed, injected tested rows) among the rows of ``measurement_ids``:
    ``keyed`` rows counted in plain Python (a merge a trial was a quarter of the calibration's time),
    ``families`` the pair's ``row_families``."""
    counts: dict[Family, tuple[int, int]] = {}
    if table.empty:
        return counts
    for experiment, point, metric, verdict, kind, p_value in zip(
        table["experiment"],
        table["point"],
        table["metric"],
        table["verdict"],
        table["kind"],
        table["p_value"],
        strict=True,
    ):
        if kind != "timed" or verdict in review_lines.ONE_SIDED or p_value is None or pd.isna(p_value):
            continue  # not ``tested``: a test never judged it
        for impl, ident in families.get((str(experiment), str(point), str(metric)), []):
            if ident in measurement_ids:
                flagged, injected = counts.get((str(experiment), impl), (0, 0))
                counts[(str(experiment), impl)] = (flagged + (verdict == "regressed"), injected + 1)
    return dict(sorted(counts.items()))


def calibrate(
    store: Store,
    preset: str,
    *,
    fingerprint: str | None = None,
    newest: int | None = None,
    up_to: int | None = None,
    drift_allowance: float | None = None,
) -> Calibration:
    """The measured error rates of the review's timed verdicts over the store's A/A pairs of
    ``preset`` (the ``newest`` of them, if given; of those whose later run is ``up_to`` or older, if
    given: a review of an early run is calibrated on the history it had, not on a store's later,
    longer one, whose floors err less). ``drift_allowance`` (a fraction): a what-if, the pairs
    whose review has no machine drift figure judged against it in place of review.DEFAULT_DRIFT."""
    runs = frames.runs(store)
    pairs = review_pairs(runs, preset, fingerprint)
    if up_to is not None:
        pairs = [pair for pair in pairs if pair[1] <= up_to]
    if newest is not None:
        pairs = pairs[-newest:]
    result = Calibration(preset, up_to=up_to)
    for baseline_id, run_id in pairs:
        inputs = review_inputs.read_inputs(store, run_id, baseline_id, runs)
        if drift_allowance is not None and inputs.drift is None and not inputs.interleaved:
            inputs = replace(inputs, drift=math.log1p(drift_allowance))
        table = review_inputs.judge(inputs)
        judged = tested(table)
        result.pairs += 1
        result.timed_rows += timed_rows(table)
        result.timed_verdicts += len(judged)
        alerts = int(judged["verdict"].isin(ALERTS).sum())
        result.false_alerts += alerts
        result.reviews_with_false_alert += alerts > 0
        injector = Injector(inputs, table)
        cases = keyed(table, injector.rows)
        for family, moves in drift_judged_moves(cases).items():
            result.drift_judged_moves.setdefault(family, []).extend(moves)
        for (experiment, impl), group in cases.groupby(["experiment", "impl"]):
            found = result.family_detectable.setdefault((str(experiment), str(impl)), [])
            found += group["detectable"].astype(float).tolist()
        families = {
            family: (injector.rows[(injector.rows["experiment"] == family[0]) & (injector.rows["impl"] == family[1])])
            for family in set(zip(cases["experiment"], cases["impl"], strict=True))
        }
        # In a fixed order first: the review lists its rows by verdict, and the sample must not
        # depend on what the A/A review said.
        ordered = cases.sort_values(
            ["experiment", "impl", "metric", "point", "measurement_id_run"], key=lambda column: column.astype(str)
        )
        singles = ordered if len(ordered) <= SINGLE_CASES else ordered.sample(SINGLE_CASES, random_state=run_id)
        for slowdown in SLOWDOWNS:
            trials: list[tuple[str, pd.DataFrame | None, set[int]]] = [
                ("single_case", families[(str(experiment), str(impl))], {int(ident)})
                for experiment, impl, ident in zip(
                    singles["experiment"], singles["impl"], singles["measurement_id_run"], strict=True
                )
            ]
            trials += [
                (
                    "group",
                    rows,
                    {
                        int(ident)
                        for ident in cases[(cases["experiment"] == experiment) & (cases["impl"] == impl)][
                            "measurement_id_run"
                        ]
                    },
                )
                for (experiment, impl), rows in families.items()
            ]
            trials.append(("run", None, {int(ident) for ident in cases["measurement_id_run"]}))
            for scope, rows, ids in trials:
                judged_trial = injector.judged(rows, ids, 1.0 + slowdown)
                counts = regressed_by_family(judged_trial, injector.families, ids)
                for family, (flagged, injected) in counts.items():
                    result.count(scope, slowdown, family, flagged, injected)
                flagged_rows = sum(flagged for flagged, _ in counts.values())
                result.count_trial(scope, slowdown, flagged_rows, sum(injected for _, injected in counts.values()))
    return result
