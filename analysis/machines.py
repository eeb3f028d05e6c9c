"""Machines side by side: which run stands for each machine, their fingerprints, a matrix of
headline figures with bands and ratios to a reference machine, and a determinism audit.

Plain functions of DataFrames (no Streamlit), used by the Compare page and
`decodelab report machines`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pandas as pd

from analysis import tables
from analysis.review import HEADLINES, SUSPECT, case_points, current_names, tag_set
from analysis.runs import comparable_keys, sweep_labels
from runner import metrics
from runner.metrics import NUMERICAL_TOLERANCE, is_deterministic
from store.records import MachineRecord

# A machine's fields as recorded with every run (its name aside), in reading order.
FINGERPRINT_FIELDS = tuple(item.name for item in fields(MachineRecord) if item.name != "name")
# The chosen run's fields shown under the machine's: what else may explain a difference.
RUN_FIELDS = ("run_id", "started_at", "code_version", "model_hash", "seed")
MATRIX_COLUMNS = ["experiment", "metric", "case", "unit", "kind", "machine", "run_id", "value", "low", "high", "ratio"]


def band_of(metric: str, known: Sequence[str]) -> tuple[str, str] | None:
    """The (low, high) metric names that band ``metric`` (runner.metrics), where both were recorded."""
    low, high = metrics.band_of(metric)
    return (low, high) if low in known and high in known else None


# ---- which run stands for each machine --------------------------------------------------------


def presets_by_machines(runs: pd.DataFrame) -> list[str]:
    """What done runs ran (a preset's name, or a custom run's label such as "quick, kv_cache
    only": analysis.runs.sweep_label), the one run on most machines first."""
    done = runs[runs["status"] == "done"]
    done = done.assign(preset=sweep_labels(done))
    if done.empty:
        return []
    counts = done.groupby("preset")["machine"].nunique()
    return sorted(counts.index, key=lambda preset: (-int(counts[preset]), preset))


def candidate_runs(runs: pd.DataFrame, preset: str) -> pd.DataFrame:
    """The done runs of ``preset`` (a preset's name or a custom run's label) not tagged suspect,
    newest first: a launch that changed a preset never stands for the preset. Two spec files of
    their own both read "custom": only the runs of one spec are compared, the one run on most
    machines (then the newest)."""
    chosen = runs[
        (runs["status"] == "done")
        & (sweep_labels(runs) == preset)
        & ~runs["tags"].map(lambda tags: SUSPECT in tag_set(tags))
    ].sort_values(["started_at", "run_id"], ascending=False)
    if chosen.empty:
        return chosen
    keys = comparable_keys(chosen)
    spread = chosen.groupby(keys)["machine"].nunique()
    newest = {key: position for position, key in reversed(list(enumerate(keys)))}
    best = max(spread.index, key=lambda key: (int(spread[key]), -newest[key]))
    return chosen[keys == best]


def chosen_runs(
    runs: pd.DataFrame, preset: str, machines: Sequence[str], pinned: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Per machine, the run that stands for it: the one pinned for it (if it is a done run of the
    preset on that machine), else its newest done, not suspect, run of the preset. Machines
    without one are left out."""
    candidates = candidate_runs(runs, preset)
    chosen: dict[str, int] = {}
    for machine in machines:
        own = candidates[candidates["machine"] == machine]
        if own.empty:
            continue
        wanted = (pinned or {}).get(machine)
        chosen[machine] = wanted if wanted is not None and wanted in set(own["run_id"]) else int(own["run_id"].iloc[0])
    return chosen


# ---- fingerprints -----------------------------------------------------------------------------


def fingerprints(details: pd.DataFrame, machines: Sequence[str]) -> pd.DataFrame:
    """One row per fingerprint or run field, one column per machine, and ``differs``.
    ``details`` is store.frames.run_details of the chosen runs."""
    by_machine = details.set_index("machine")
    rows = []
    for name in (*FINGERPRINT_FIELDS, *RUN_FIELDS):
        values = {machine: field_text(name, by_machine.loc[machine, name]) for machine in machines}
        rows.append({"field": name, **values, "differs": len(set(values.values())) > 1})
    return pd.DataFrame(rows, columns=["field", *machines, "differs"])


def field_text(name: str, value: Any) -> str:
    """A fingerprint cell as every table writes it (analysis.tables): "–" for none, bytes in binary units."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return tables.MISSING
    if tables.is_bytes(name):
        return tables.binary_bytes(value)
    if tables.is_date(name):
        return tables.date(value)
    if name == "model_hash":
        return str(value)[:12]
    return str(value)


# ---- the matrix -------------------------------------------------------------------------------


def matrix(measurements: Mapping[str, pd.DataFrame], reference: str) -> pd.DataFrame:
    """Every headline figure of every case, one row per machine (MATRIX_COLUMNS): its value,
    its band where the metric has one, and its ratio to the ``reference`` machine's value.
    ``measurements`` maps machine → store.frames.measurements of the run that stands for it."""
    named = {machine: current_names(frame) for machine, frame in measurements.items() if not frame.empty}
    if not named:
        return pd.DataFrame(columns=MATRIX_COLUMNS)
    label_of = case_points(*named.values())
    order = {(headline.experiment, headline.metric): index for index, headline in enumerate(HEADLINES)}
    rows = []
    for machine, frame in named.items():
        known = sorted(set(frame["metric"]))
        values = frame.set_index(["experiment", "params_key", "metric"])["value"]
        values = values[~values.index.duplicated()]
        for row in frame[[(e, m) in order for e, m in zip(frame["experiment"], frame["metric"], strict=True)]].to_dict(
            "records"
        ):
            band = band_of(row["metric"], known)
            low = high = None
            if band is not None:
                low = values.get((row["experiment"], row["params_key"], band[0]))
                high = values.get((row["experiment"], row["params_key"], band[1]))
            rows.append(
                {
                    "experiment": row["experiment"],
                    "metric": row["metric"],
                    "case": label_of[(row["experiment"], row["params_key"])],
                    "unit": row["unit"],
                    "kind": "deterministic" if is_deterministic(row["metric"], row["unit"]) else "timed",
                    "machine": machine,
                    "run_id": int(row["run_id"]),
                    "value": row["value"],
                    "low": low,
                    "high": high,
                    "order": order[(row["experiment"], row["metric"])],
                    "position": row["measurement_id"],
                }
            )
    if not rows:
        return pd.DataFrame(columns=MATRIX_COLUMNS)
    table = pd.DataFrame(rows)
    reference_values = table[table["machine"] == reference].set_index(["experiment", "metric", "case"])["value"]
    table["ratio"] = [
        ratio(value, reference_values.get((experiment, metric, case)))
        for experiment, metric, case, value in zip(
            table["experiment"], table["metric"], table["case"], table["value"], strict=True
        )
    ]
    # Headline order, then each case where the reference machine's run met it first.
    first_seen = table.sort_values("machine", key=lambda column: column != reference).drop_duplicates(
        ["experiment", "metric", "case"]
    )
    position = first_seen.set_index(["experiment", "metric", "case"])["position"]
    table["position"] = [position[key] for key in zip(table["experiment"], table["metric"], table["case"], strict=True)]
    table = table.sort_values(["order", "position"], kind="stable")
    return table[MATRIX_COLUMNS].reset_index(drop=True)


def ratio(value: Any, reference: Any) -> float | None:
    if reference is None or pd.isna(reference) or pd.isna(value) or reference == 0:
        return None
    return float(value) / float(reference)


def value_text(value: Any, low: Any = None, high: Any = None, unit: str | None = None) -> str:
    """``1.23 [1.10–1.40]``; "–" for a missing value, a flag as yes/no, bytes and times in their
    units, as every table writes them (analysis.tables)."""
    if value is None or pd.isna(value):
        return tables.MISSING
    if unit in ("bool", "bytes", *tables.SECONDS_PER_UNIT):
        text = tables.value_text(value, unit)
        if unit != "bool" and low is not None and high is not None and not pd.isna(low) and not pd.isna(high):
            text += f" [{tables.value_text(low, unit)}–{tables.value_text(high, unit)}]"
        return text
    number = float(value)
    # Counts stay whole with separators (739,328, not 7.393e+05); measured values keep four digits.
    text = f"{int(number):,}" if number.is_integer() and abs(number) < 1e15 else f"{number:.4g}"
    if low is not None and high is not None and not pd.isna(low) and not pd.isna(high):
        text += f" [{float(low):.4g}–{float(high):.4g}]"
    return text


def wide_matrix(table: pd.DataFrame, machines: Sequence[str], reference: str) -> pd.DataFrame:
    """The matrix as a reader reads it: one row per figure, per machine its value with band and
    (beside the reference) its ratio to the reference as ``×0.95``."""
    columns = ["experiment", "metric", "case"]
    for machine in machines:
        columns.append(machine)
        if machine != reference:
            columns.append(f"{machine} / {reference}")
    if table.empty:
        return pd.DataFrame(columns=columns)
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in table.to_dict("records"):
        key = (row["experiment"], row["metric"], row["case"])
        entry = rows.setdefault(key, {"experiment": key[0], "metric": key[1], "case": key[2]})
        unit = tables.unit_of(row["metric"]) or row["unit"]
        entry[row["machine"]] = value_text(row["value"], row["low"], row["high"], unit)
        if row["machine"] != reference:
            entry[f"{row['machine']} / {reference}"] = "" if pd.isna(row["ratio"]) else f"×{row['ratio']:.3g}"
    return pd.DataFrame(list(rows.values()), columns=columns).fillna("")


# ---- the determinism audit --------------------------------------------------------------------


@dataclass
class Audit:
    """The deterministic figures of machines whose runs used one model (and drafts) and seed,
    case by case: exact ones for equality, numerical and sampled ones within NUMERICAL_TOLERANCE."""

    machines: list[str]
    model_hash: str
    seed: str
    compared: int = 0
    differences: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Figures some of the machines' runs lack (their specs differ there): not compared.
    unmatched: int = 0
    # Of ``compared``, those compared within the tolerance (kinds numerical and sampled).
    within_tolerance: int = 0

    def line(self) -> str:
        who = f"{', '.join(self.machines)} (model {self.model_hash[:12]}, seed {self.seed})"
        if self.compared == 0:
            return f"{who}: no deterministic figure is on every one of these runs"
        unmatched = f" ({self.unmatched} more on only some of the runs, not compared)" if self.unmatched else ""
        exact = self.compared - self.within_tolerance
        kinds = (
            f"{exact} exact figure(s) compared for equality, {self.within_tolerance} numerical figure(s) within "
            f"{tolerance_text()}; "
            if self.within_tolerance
            else ""
        )
        if self.differences.empty:
            counted = (
                "1 deterministic figure, equal"
                if self.compared == 1
                else f"{self.compared} deterministic figures, all equal"
            )
            return f"{who}: {kinds}{counted}{unmatched}"
        return (
            f"{who}: {kinds}{len(self.differences)} of {self.compared} deterministic figures differ{unmatched}: "
            + "; ".join(difference_line(row, self.machines) for row in self.differences.to_dict("records"))
        )


def tolerance_text() -> str:
    absolute, relative = NUMERICAL_TOLERANCE["absolute"], NUMERICAL_TOLERANCE["relative"]
    return f"{absolute:g} absolute or {relative:.1%} relative (the kernels' cross-instruction-set tolerance)"


def difference_line(row: Mapping[Any, Any], machines: Sequence[str]) -> str:
    values = ", ".join(f"{machine} {value_text(row[machine])}" for machine in machines)
    return f"{row['experiment']} · {row['metric']} · {row['case']}: {values}"


@dataclass
class AuditResult:
    audits: list[Audit]
    # Why a machine was not audited against the others (a different model or seed, or alone).
    left_out: list[str]

    def lines(self) -> list[str]:
        return [audit.line() for audit in self.audits] + self.left_out


def audit(measurements: Mapping[str, pd.DataFrame], details: pd.DataFrame) -> AuditResult:
    """Every deterministic metric (dashboard.metrics) of every case compared across the machines
    whose chosen runs used the same model hash and seed; runs on different models or seeds are
    never audited against each other (their figures are expected to differ)."""
    by_machine = details.set_index("machine")
    groups: dict[tuple[str, str, str], list[str]] = {}
    for machine in measurements:
        model_hash = str(by_machine.loc[machine, "model_hash"] or "")
        drafts = str(by_machine.loc[machine, "drafts"]) if "drafts" in by_machine.columns else ""
        key = (model_hash, field_text("seed", by_machine.loc[machine, "seed"]), drafts)
        groups.setdefault(key, []).append(machine)
    audits, left_out = [], []
    for (model_hash, seed, _), machines in groups.items():
        if len(machines) > 1:
            audits.append(audit_group({m: measurements[m] for m in machines}, model_hash, seed))
        elif len(measurements) > 1:
            left_out.append(
                f"{machines[0]}: not audited, no other machine's run used its model {model_hash[:12]} and drafts "
                f"with seed {seed}: figures of different models or seeds are expected to differ"
            )
    return AuditResult(audits, left_out)


def audit_group(measurements: Mapping[str, pd.DataFrame], model_hash: str, seed: str) -> Audit:
    machines = list(measurements)
    named = {machine: current_names(frame) for machine, frame in measurements.items()}
    label_of = case_points(*named.values())
    values: dict[tuple[str, str, str], dict[str, Any]] = {}
    units = {
        metric: unit for frame in named.values() for metric, unit in zip(frame["metric"], frame["unit"], strict=True)
    }
    for machine, frame in named.items():
        kept = frame[[is_deterministic(m, u) for m, u in zip(frame["metric"], frame["unit"], strict=True)]]
        for experiment, key, metric, value in zip(
            kept["experiment"], kept["params_key"], kept["metric"], kept["value"], strict=True
        ):
            values.setdefault((experiment, key, metric), {})[machine] = value
    result = Audit(machines, model_hash, seed)
    differing = []
    for (experiment, key, metric), by_machine in values.items():
        if len(by_machine) < len(machines):
            result.unmatched += 1
            continue
        result.compared += 1
        kind = metrics.kind_of(metric, units.get(metric, ""))
        result.within_tolerance += kind != "exact"
        agree = all_equal if kind == "exact" else all_close
        if not agree(list(by_machine.values())):
            differing.append(
                {"experiment": experiment, "metric": metric, "case": label_of[(experiment, key)], **by_machine}
            )
    result.differences = pd.DataFrame(differing, columns=["experiment", "metric", "case", *machines])
    return result


def all_close(values: Sequence[Any]) -> bool:
    """Within NUMERICAL_TOLERANCE of the first value, two missing values counting as equal."""
    first = values[0]
    absolute, relative = NUMERICAL_TOLERANCE["absolute"], NUMERICAL_TOLERANCE["relative"]
    return all(
        (pd.isna(first) and pd.isna(value))
        or (
            not pd.isna(first)
            and not pd.isna(value)
            and abs(float(value) - float(first)) <= absolute + relative * max(abs(float(value)), abs(float(first)))
        )
        for value in values[1:]
    )


def all_equal(values: Sequence[Any]) -> bool:
    """Exact equality, two missing values counting as equal."""
    first = values[0]
    return all((pd.isna(first) and pd.isna(value)) or value == first for value in values[1:])
