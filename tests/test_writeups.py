"""The write-ups' report: every exact figure the counting parts of a seed-shaped run produce
agrees with the write-ups, an altered figure is caught, and the command writes both files."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from analysis.writeups import (
    COMPUTED,
    COMPUTED_FIGURES,
    IDENTITY,
    MEASURED,
    SOURCES,
    load_figures,
    source_of,
    summary,
    writeup_rows,
)
from runner.cost import counts
from runner.experiments import context_cost, kv_cache, registry
from runner.spec.sweeps import load_preset
from store.records import RecordedMeasurement
from tests.conftest import run_decodelab

COUNTED_PARTS = {"counts", "counter_check", "recomputation", "writeup_model"}


class Recorded:
    """A run held in memory: what store.results.measurements gives the report."""

    def __init__(self, rows: dict[str, list[RecordedMeasurement]]) -> None:
        self.rows = rows

    def measurements(self, run_id: int, experiment: str) -> list[RecordedMeasurement]:
        return self.rows.get(experiment, [])


def counted_parts_of_the_seed_preset() -> dict[str, list[RecordedMeasurement]]:
    """The seed preset's counted cases, measured by the real experiments (no timing, no training:
    the counting parts need only the vocabulary size and the seed)."""
    spec = load_preset("seed")
    context: Any = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(vocab_size=103)), seed=spec.seed)
    rows: dict[str, list[RecordedMeasurement]] = {"kv_cache": [], "context_cost": []}
    for experiment, case in spec.plan():
        if experiment.name == "kv_cache" and case["part"] in COUNTED_PARTS:
            measured = kv_cache.EXPERIMENT.run_case(case, context)
        elif experiment.name == "context_cost":
            measured = context_cost.EXPERIMENT.run_case(case, context)
        else:
            continue
        rows[experiment.name] += [RecordedMeasurement(case, m.metric, m.value, m.unit) for m in measured]
    return rows


def test_every_counted_figure_of_a_seed_run_agrees_with_the_write_ups() -> None:
    recorded = counted_parts_of_the_seed_preset()
    rows = writeup_rows(Recorded(recorded), 1)
    assert len(rows) == len(load_figures()) > 80
    exact = [row for row in rows if row.kind == "exact"]
    verdicts = {row.verdict for row in exact}
    assert verdicts == {"agrees", "not in this run (run the seed preset)"}, "no exact figure differs"
    assert sum(row.verdict == "agrees" for row in exact) == len(exact) - 8 >= 29
    # What these counted parts leave out comes from generating text or timing: equality checks,
    # the rounded and unmasked caches, and the width sweep's cases.
    left_out = {row.claim for row in exact if row.run_value is None}
    assert len(left_out) == 8
    assert all(
        ("identical" in claim or "tolerance" in claim or "differs" in claim or "d = " in claim) for claim in left_out
    )


def test_an_altered_figure_is_caught() -> None:
    recorded = counted_parts_of_the_seed_preset()
    recorded["kv_cache"] = [
        RecordedMeasurement(row.params, row.metric, row.value + 1, row.unit)
        if row.metric == "kv_computations_no_cache_per_layer"
        else row
        for row in recorded["kv_cache"]
    ]
    verdicts = {row.claim: row.verdict for row in writeup_rows(Recorded(recorded), 1)}
    assert verdicts["K/V computed over 5 tokens without the cache, per layer"] == "differs"


def test_a_sampled_figure_is_judged_against_its_own_noise_bound() -> None:
    def distribution(tvd: float) -> dict[str, list[RecordedMeasurement]]:
        params = {"part": "distribution", "draft": "bigram"}
        return {
            "speculative": [
                RecordedMeasurement(params, "tvd", tvd, "probability"),
                RecordedMeasurement(params, "tvd_noise_bound", 0.02, "probability"),
            ]
        }

    def verdict(tvd: float) -> str:
        rows = writeup_rows(Recorded(distribution(tvd)), 1)
        return next(row.verdict for row in rows if row.claim.startswith("TV to the target, bigram"))

    assert verdict(0.01) == "within sampling noise"
    assert verdict(0.05) == "outside sampling noise"


def test_the_report_command_writes_json_and_markdown(filled_store_url: str, tmp_path: Path) -> None:
    result = run_decodelab(
        "report", "seeds", "--run", "1", "--out", str(tmp_path), "--db", filled_store_url, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "seed_report.json").read_text())
    assert len(rows) == len(load_figures())
    assert "| write-up | claim |" in (tmp_path / "seed_report.md").read_text()
    assert "exact figures measured on this run agree (beside them, not counted:" in result.stdout
    assert {row["source"] for row in rows} == set(SOURCES)
    assert "| kind | source |" in (tmp_path / "seed_report.md").read_text()
    assert "| this run | verdict |" in (tmp_path / "seed_report.md").read_text(), "the verdict beside its values"
    missing = run_decodelab(
        "report", "seeds", "--run", "999", "--out", str(tmp_path), "--db", filled_store_url, cwd=tmp_path
    )
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0 and "--run" in missing.stderr


def test_a_claim_at_a_case_the_run_does_not_hold_is_not_in_this_run_and_only_run_rows_are_counted() -> None:
    """The quick preset times widths at n = 128: the write-ups' claims at n = 256 are not its cases."""
    width = {"part": "width", "d_model": 128, "n": 128, "impl": "static", "weights": "untrained", "n_layer": 3}
    recorded = counted_parts_of_the_seed_preset()
    recorded["kv_cache"].append(RecordedMeasurement(width, "arithmetic_ratio", 66.14, "ratio"))
    rows = {row.claim: row for row in writeup_rows(Recorded(recorded), 1)}
    claim = rows["arithmetic ratio at d = 128, n = 256 (blocks only here; one decimal there)"]
    assert claim.run_value is None and claim.verdict.startswith("not in this run")
    assert rows["quadratic part, 4096 over 2048"].source == IDENTITY
    assert rows["the write-ups' model: parameters"].source == IDENTITY
    assert sum(row.source == COMPUTED for row in rows.values()) >= 5
    counted = [
        row for row in rows.values() if row.kind == "exact" and row.source == MEASURED and row.run_value is not None
    ]
    assert summary(list(rows.values())).startswith(f"{len(counted)} of {len(counted)} exact figures measured")


def shape_only_context(vocab_size: int, seed: int) -> Any:
    """What a closed form needs: the vocabulary size and the seed; the model's weights, the
    harness's clock, the prompt and the device are absent, so a part that times, generates or
    compares on the run's model raises."""
    return SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(vocab_size=vocab_size)), seed=seed)


def run_free_figures() -> dict[str, float]:
    """Each seed figure reproduced without a run, claim → value: from decodelab's own modules,
    from its seed-preset case run with shape_only_context, or (a closed form recorded beside
    timings) from the multiplication counts at the case's sizes."""
    spec = load_preset("seed")
    experiments = registry()
    plan = spec.plan()
    found: dict[str, float] = {}
    for figure in load_figures():
        if "computed" in figure:
            found[figure["claim"]] = COMPUTED_FIGURES[figure["computed"]]()
            continue
        params = figure.get("params", {})
        cases = [
            case
            for experiment, case in plan
            if experiment.name == figure["experiment"] and all(case.get(key) == value for key, value in params.items())
        ]
        if not cases:
            continue
        case = cases[0]
        try:
            measured = experiments[figure["experiment"]].run_case(dict(case), shape_only_context(103, spec.seed))
        except Exception:  # it needed the run: weights, the clock or the prompt
            measured = ()
        values = {record.metric: float(record.value) for record in measured}
        if figure["metric"] in values:
            found[figure["claim"]] = values[figure["metric"]]
        elif figure["metric"] == "arithmetic_ratio" and {"n", "d_model", "n_layer"} <= case.keys():
            found[figure["claim"]] = counts.arithmetic_ratio(case["n"], case["d_model"], case["n_layer"])
    return found


def test_every_row_of_the_seed_preset_is_classed_and_no_closed_form_counts_as_measured() -> None:
    figures = load_figures()
    free = run_free_figures()
    # The run-free reproductions are the write-ups' own figures (within what the write-up printed).
    for figure in figures:
        if figure["claim"] in free and figure["kind"] == "exact" and "scale" not in figure and "offset" not in figure:
            assert abs(free[figure["claim"]] - figure["value"]) <= figure.get("tolerance", 0.0) * (1 + 1e-9) + 1e-9, (
                figure["claim"]
            )
    classed = {figure["claim"]: source_of(figure) for figure in figures}
    assert set(classed.values()) == set(SOURCES)
    counted_as_measured = sorted(claim for claim in free if classed[claim] == MEASURED)
    assert counted_as_measured == [], f"closed forms counted as measured: {counted_as_measured}"
    measured_exact = [
        figure["claim"] for figure in figures if figure["kind"] == "exact" and classed[figure["claim"]] == MEASURED
    ]
    assert len(measured_exact) == 4 and not set(measured_exact) & set(free), measured_exact

    # The check can fail: the classing before issue 46 (only the write-ups' model, the counter
    # check and decodelab's own modules as arithmetic) counted 17 of these closed forms as the run's.
    def old_source_of(figure: dict[str, Any]) -> str:
        if figure.get("source") == "identity":
            return IDENTITY
        fixed = figure.get("params", {}).get("part") in {"writeup_model", "counter_check"}
        return COMPUTED if "computed" in figure or fixed else MEASURED

    by_claim = {figure["claim"]: figure for figure in figures}
    old_wrong = [claim for claim in free if old_source_of(by_claim[claim]) == MEASURED]
    assert len(old_wrong) >= 17, old_wrong


def test_the_pages_columns_show_every_field_with_the_verdict_beside_the_values() -> None:
    """A first-time user found the verdict past the right edge, after the method's long text."""
    from dataclasses import fields

    from analysis.writeups import PAGE_COLUMNS, Row

    assert sorted(PAGE_COLUMNS) == sorted(field.name for field in fields(Row))
    assert PAGE_COLUMNS[PAGE_COLUMNS.index("run_value") + 1] == "verdict"
    assert PAGE_COLUMNS[-1] == "method"


def test_the_context_cost_figures_pin_the_write_ups_shape() -> None:
    """A custom spec's context_cost at d_model 16 read "crossover n … 96 | differs" against the
    write-up's 3,072 at d_model 512: another shape is "not in this run", never "differs"."""
    from analysis.writeups import load_figures

    small = {"part": "summary", "ratio_lengths": [16, 32], "n": 32, "budget_bytes": 1 << 30}
    small |= {"generated_tokens": 256, "d_model": 16, "d_ff": 64, "n_heads": 2, "itemsize": 2}
    metrics = [figure["metric"] for figure in load_figures() if figure.get("experiment") == "context_cost"]
    recorded = Recorded({"context_cost": [RecordedMeasurement(small, metric, 96.0, "count") for metric in metrics]})
    rows = [row for row in writeup_rows(recorded, 1) if row.writeup == "context-cost-lab"]
    assert len(rows) == len(metrics) == 9
    assert {row.verdict for row in rows} == {"not in this run (run the seed preset)"}, rows
